/* checks.h - error propagation. Every internal function that can fail returns
 * loomResult_t; the function that detects an error logs it once (WARN, with its
 * cause) and sets the last-error text (err_set). Callers only propagate. */
#ifndef LOOM_CORE_CHECKS_H
#define LOOM_CORE_CHECKS_H

#include "core/debug.h"
#include "loom.h"

/* Return on error, adding one INFO line "-> file:line" (a free backtrace). */
#define LOOM_CHECK(call)                                             \
  do {                                                               \
    loomResult_t res_ = (call);                                      \
    if (res_ != loomSuccess && res_ != loomInProgress) {             \
      LOOM_INFO(SUB_ALL, "-> %s:%d (%d)", __FILE__, __LINE__, res_); \
      return res_;                                                   \
    }                                                                \
  } while (0)

/* Store the error in res and jump to label. */
#define LOOM_CHECK_GOTO(call, res, label)                             \
  do {                                                                \
    (res) = (call);                                                   \
    if ((res) != loomSuccess && (res) != loomInProgress) {            \
      LOOM_INFO(SUB_ALL, "-> %s:%d (%d)", __FILE__, __LINE__, (res)); \
      goto label;                                                     \
    }                                                                 \
  } while (0)

struct loom_comm;
/* Sets the last-error text of comm (when not NULL) and of the calling thread,
 * logs it once as a WARN line under the subsystem, and returns code. */
loomResult_t err_set(struct loom_comm* comm, loomResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* As err_set but logs under the given subsystem. */
loomResult_t err_set_sub(struct loom_comm* comm, unsigned subsys, loomResult_t code,
                         const char* fmt, ...) __attribute__((format(printf, 4, 5)));
/* The calling thread's last-error text. */
const char* err_thread_last(void);
/* Copies comm's last-error text into the calling thread's (to report a
 * comm's failure through another path, e.g. a stream). */
void err_copy_to_thread(const char* text);
/* Sets text, as it is, as the last error of comm (when not NULL) and of the
 * calling thread, with its WARN line: loomSetLastError, for layered libraries. */
void err_set_text(struct loom_comm* comm, const char* text);

#endif
