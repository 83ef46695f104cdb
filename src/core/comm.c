/* comm.c - allocation, handle checks and the error state of a communicator. */
#include "comm.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "params.h"

loomResult_t comm_alloc(int nranks, int rank, const loomConfig_t* config, struct loomComm** out) {
  struct loomComm* c = calloc(1, sizeof(*c));
  if (!c) return err_set(NULL, loomSystemError, "out of memory allocating a communicator");
  c->magic = LOOM_COMM_MAGIC;
  c->rank = rank;
  c->nranks = nranks;
  c->blocking = 1;
  c->timeout_ms = params_get()->timeout_ms;
  if (config) {
    if (config->blocking != LOOM_CONFIG_UNDEF_INT) c->blocking = config->blocking != 0;
    if (config->timeoutMs != LOOM_CONFIG_UNDEF_INT && config->timeoutMs > 0)
      c->timeout_ms = config->timeoutMs;
    if (config->commName) snprintf(c->name, sizeof(c->name), "%s", config->commName);
  }
  atomic_init(&c->async_error, loomInProgress);
  atomic_init(&c->aborted, 0);
  atomic_init(&c->failed_peer, -1);
  pthread_mutex_init(&c->err_lock, NULL);
  *out = c;
  return loomSuccess;
}

void comm_free(struct loomComm* comm) {
  if (!comm) return;
  free(comm->peers);
  pthread_mutex_destroy(&comm->err_lock);
  comm->magic = 0;
  free(comm);
}

loomResult_t comm_check(const struct loomComm* comm) {
  if (!comm) return err_set(NULL, loomInvalidArgument, "invalid argument: communicator is NULL");
  if (comm->magic != LOOM_COMM_MAGIC)
    return err_set(NULL, loomInvalidArgument,
                   "invalid argument: communicator %p is not a live Loom communicator", (void*)comm);
  return loomSuccess;
}

void comm_set_failed(struct loomComm* comm, int peer, loomResult_t code, const char* fmt, ...) {
  char text[LOOM_ERR_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  int expected = loomSuccess;
  int first = atomic_compare_exchange_strong(&comm->async_error, &expected, (int)code);
  if (!first) {
    expected = loomInProgress; /* failed during init */
    first = atomic_compare_exchange_strong(&comm->async_error, &expected, (int)code);
  }
  if (first) {
    if (peer >= 0) atomic_store(&comm->failed_peer, peer);
    err_set(comm, code, "%s", text);
  }
  if (comm->wake_fn) comm->wake_fn(comm->wake_arg);
}

loomResult_t comm_health(struct loomComm* comm) {
  int e = atomic_load(&comm->async_error);
  if (e == loomSuccess || e == loomInProgress) return loomSuccess;
  pthread_mutex_lock(&comm->err_lock);
  err_copy_to_thread(comm->last_error);
  pthread_mutex_unlock(&comm->err_lock);
  return (loomResult_t)e;
}
