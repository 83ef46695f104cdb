/* errors.c - the last-error texts, per thread and per communicator, and the
 * one WARN line that goes with each error where it is detected. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/checks.h"
#include "core/comm.h"

static __thread char thread_last[LOOM_ERR_LEN];

static loomResult_t err_vset(struct loom_comm* comm, unsigned subsys, loomResult_t code,
                             const char* fmt, va_list ap) {
  char text[LOOM_ERR_LEN];
  int off = 0;
  if (comm) off = snprintf(text, sizeof(text), "rank %d: ", comm->rank);
  vsnprintf(text + off, sizeof(text) - (size_t)off, fmt, ap);
  LOOM_WARN(subsys, "%s", text);
  snprintf(thread_last, sizeof(thread_last), "%s", text);
  if (comm) {
    pthread_mutex_lock(&comm->err_lock);
    snprintf(comm->last_error, sizeof(comm->last_error), "%s", text);
    pthread_mutex_unlock(&comm->err_lock);
  }
  return code;
}

loomResult_t err_set(struct loom_comm* comm, loomResult_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  loomResult_t r = err_vset(comm, SUB_ALL, code, fmt, ap);
  va_end(ap);
  return r;
}

loomResult_t err_set_sub(struct loom_comm* comm, unsigned subsys, loomResult_t code,
                         const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  loomResult_t r = err_vset(comm, subsys, code, fmt, ap);
  va_end(ap);
  return r;
}

const char* err_thread_last(void) {
  return thread_last;
}

void err_set_text(struct loom_comm* comm, const char* text) {
  LOOM_WARN(SUB_ALL, "%s", text);
  snprintf(thread_last, sizeof(thread_last), "%s", text);
  if (comm) {
    pthread_mutex_lock(&comm->err_lock);
    snprintf(comm->last_error, sizeof(comm->last_error), "%s", text);
    pthread_mutex_unlock(&comm->err_lock);
  }
}

void err_copy_to_thread(const char* text) {
  snprintf(thread_last, sizeof(thread_last), "%s", text);
}
