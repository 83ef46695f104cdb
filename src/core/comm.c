/* comm.c - allocation, handle checks and the error state of a communicator. */
#include "core/comm.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/checks.h"
#include "core/handle.h"
#include "core/params.h"
#include "core/recorder.h"
#include "core/report.h"

/* The agreed settings a config field may override: the communicator's field
 * that holds the value acted on, and the config's field that overrides it
 * (both ints; a config from an older header may end before its field). */
struct own_setting {
  const char* env;
  const char* config;
  size_t field; /* offsetof(struct loom_comm, ...) */
  size_t cfg;   /* offsetof(loomConfig_t, ...) */
};
static const struct own_setting own_settings[] = {
    {"LOOM_CHECK_ARGS", "checkArgs", offsetof(struct loom_comm, check_args),
     offsetof(loomConfig_t, checkArgs)},
    {"LOOM_DETERMINISTIC", "deterministic", offsetof(struct loom_comm, deterministic),
     offsetof(loomConfig_t, deterministic)},
};
#define NOWN (sizeof(own_settings) / sizeof(own_settings[0]))
#define INT_AT(base, off) (*(int*)((char*)(base) + (off)))

loomResult_t comm_alloc(int nranks, int rank, const loomConfig_t* config, struct loom_comm** out) {
  struct loom_comm* c = calloc(1, sizeof(*c));
  if (!c) return err_set(NULL, loomSystemError, "out of memory allocating a communicator");
  if (memstat_init(&c->mem, nranks) != 0) {
    free(c);
    return err_set(NULL, loomSystemError, "out of memory allocating a communicator");
  }
  if (recorder_create(c, &c->rec) != loomSuccess) {
    memstat_fini(c);
    free(c);
    return loomSystemError;
  }
  if (handle_new(HANDLE_COMM, c, &c->handle) != loomSuccess) {
    recorder_destroy(c);
    memstat_fini(c);
    free(c);
    return loomSystemError;
  }
  c->rank = rank;
  c->nranks = nranks;
  c->cuda_dev = -1;
  c->blocking = 1;
  c->timeout_ms = params_get()->timeout_ms;
  c->check_args = params_get()->check_args;
  c->deterministic = params_get()->deterministic;
  if (config) {
    if (config->blocking != LOOM_CONFIG_UNDEF_INT) c->blocking = config->blocking != 0;
    if (config->timeoutMs != LOOM_CONFIG_UNDEF_INT && config->timeoutMs > 0)
      c->timeout_ms = config->timeoutMs;
    if (config->commName) snprintf(c->name, sizeof(c->name), "%s", config->commName);
    for (size_t i = 0; i < NOWN; i++) {
      size_t cf = own_settings[i].cfg;
      if (config->size >= cf + sizeof(int) && INT_AT(config, cf) != LOOM_CONFIG_UNDEF_INT)
        INT_AT(c, own_settings[i].field) = INT_AT(config, cf) != 0;
    }
  }
  atomic_init(&c->async_error, loomInProgress);
  atomic_init(&c->aborted, 0);
  atomic_init(&c->failed_peer, -1);
  pthread_mutex_init(&c->err_lock, NULL);
  pthread_mutex_init(&c->state_lock, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&c->state_cond, &attr);
  pthread_condattr_destroy(&attr);
  *out = c;
  return loomSuccess;
}

static pthread_mutex_t forming_lock = PTHREAD_MUTEX_INITIALIZER;

void comm_forming_begin(struct loom_comm* parent, struct loom_comm* child) {
  pthread_mutex_lock(&forming_lock);
  child->parent = parent;
  parent->forming = child;
  int e = atomic_load(&parent->async_error);
  if (e != loomSuccess && e != loomInProgress) atomic_store(&child->aborted, COMM_ABORT_PARENT);
  pthread_mutex_unlock(&forming_lock);
}

loomResult_t comm_forming_end(struct loom_comm* child, int ok) {
  loomResult_t cause = loomSuccess;
  pthread_mutex_lock(&forming_lock);
  struct loom_comm* parent = child->parent;
  if (parent && parent->forming == child) parent->forming = NULL;
  child->parent = NULL;
  int stopped = COMM_ABORT_PARENT;
  if (ok) {
    atomic_compare_exchange_strong(&child->aborted, &stopped, 0);
  } else if (parent && atomic_load(&child->aborted) == COMM_ABORT_PARENT) {
    cause = comm_health(parent); /* its cause, to this thread's last error too */
    pthread_mutex_lock(&child->err_lock);
    snprintf(child->last_error, sizeof(child->last_error), "%s", err_thread_last());
    pthread_mutex_unlock(&child->err_lock);
  }
  pthread_mutex_unlock(&forming_lock);
  return cause;
}

/* A failure of comm stops the child a split of it is forming. */
static void forming_stop(struct loom_comm* comm) {
  pthread_mutex_lock(&forming_lock);
  struct loom_comm* child = comm->forming;
  if (child) {
    int none = 0;
    atomic_compare_exchange_strong(&child->aborted, &none, COMM_ABORT_PARENT);
    comm_wake(child);
  }
  pthread_mutex_unlock(&forming_lock);
}

const char* comm_stop_reason(const struct loom_comm* comm) {
  return comm && atomic_load(&comm->aborted) == COMM_ABORT_PARENT
             ? "split stopped: the communicator it is split from failed"
             : "communicator aborted";
}

void comm_free(struct loom_comm* comm) {
  if (!comm) return;
  comm_forming_end(comm, 0);
  pthread_mutex_lock(&forming_lock);
  if (comm->forming) comm->forming->parent = NULL;
  comm->forming = NULL;
  pthread_mutex_unlock(&forming_lock);
  if (comm->handle) handle_end(comm->handle, HANDLE_COMM);
  free(comm->peers);
  recorder_destroy(comm);
  memstat_fini(comm);
  pthread_mutex_destroy(&comm->err_lock);
  pthread_mutex_destroy(&comm->state_lock);
  pthread_cond_destroy(&comm->state_cond);
  free(comm);
}

static loomResult_t comm_bad(loomComm_t handle, const char* fn) {
  if (!handle)
    return err_set(NULL, loomInvalidArgument, "invalid argument: %s: communicator is NULL", fn);
  return err_set(NULL, loomInvalidArgument, "invalid argument: %s: communicator %p %s", fn,
                 (void*)handle, handle_why((uint64_t)(uintptr_t)handle, HANDLE_COMM));
}

loomResult_t comm_get(loomComm_t handle, const char* fn, struct loom_comm** out) {
  struct loom_comm* c = handle_get((uint64_t)(uintptr_t)handle, HANDLE_COMM);
  if (__builtin_expect(!c, 0)) return comm_bad(handle, fn);
  *out = c;
  return loomSuccess;
}

loomResult_t comm_end(loomComm_t handle, const char* fn, struct loom_comm** out) {
  struct loom_comm* c = handle_end((uint64_t)(uintptr_t)handle, HANDLE_COMM);
  if (!c) return comm_bad(handle, fn);
  c->handle = 0;
  *out = c;
  return loomSuccess;
}

/* "rank R: text" (texts from err_set already name the rank). */
static void fail_text(const struct loom_comm* comm, char full[LOOM_ERR_LEN], const char* fmt,
                      va_list ap) {
  char text[LOOM_ERR_LEN - 32];
  vsnprintf(text, sizeof(text), fmt, ap);
  if (strncmp(text, "rank ", 5) == 0)
    snprintf(full, LOOM_ERR_LEN, "%s", text);
  else
    snprintf(full, LOOM_ERR_LEN, "rank %d: %s", comm->rank, text);
}

/* Records full as the cause when it is the first; under err_lock. The code
 * and its text change together, so a reader never sees a failure without
 * its cause. publish 0 keeps the code pending (comm_fail_reserve). */
static int fail_record_locked(struct loom_comm* comm, int peer, loomResult_t code, const char* full,
                              int publish) {
  int now = atomic_load(&comm->async_error);
  if (!(now == loomSuccess || now == loomInProgress) || comm->fail_pending != loomSuccess) return 0;
  int blame_pid = (peer >= 0 && peer < comm->nranks && comm->peers) ? comm->peers[peer].pid : 0;
  if (peer >= 0) atomic_store(&comm->failed_peer, peer);
  memcpy(comm->last_error, full, LOOM_ERR_LEN);
  memcpy(comm->fail_error, full, LOOM_ERR_LEN);
  /* The launcher hears the blame before any thread can see the failure: a
   * caller that sees it may exit at once, and the blame sent after that
   * would never leave (a send that never blocks). */
  report_blame(blame_pid);
  if (publish)
    atomic_store(&comm->async_error, (int)code);
  else
    comm->fail_pending = (int)code;
  return 1;
}

/* After the first failure became visible: from the local copy, since
 * last_error may change under its lock. */
static void fail_announce(struct loom_comm* comm, const char* full) {
  comm_state_changed(comm); /* a non-blocking init that failed has ended */
  LOOM_WARN(SUB_ALL, "%s", full);
  recorder_dump(comm, full);
  forming_stop(comm);
  err_copy_to_thread(full);
}

/* Records the failure (publish 0: pending, comm_fail_reserve); 1 when it was the first. */
static int fail_vset(struct loom_comm* comm, int peer, loomResult_t code, int publish,
                     const char* fmt, va_list ap) {
  char full[LOOM_ERR_LEN];
  fail_text(comm, full, fmt, ap);
  pthread_mutex_lock(&comm->err_lock);
  int first = fail_record_locked(comm, peer, code, full, publish);
  pthread_mutex_unlock(&comm->err_lock);
  if (first && publish) fail_announce(comm, full);
  return first;
}

void comm_set_failed(struct loom_comm* comm, int peer, loomResult_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fail_vset(comm, peer, code, 1, fmt, ap);
  va_end(ap);
  comm_wake(comm);
  comm_fail_hook_run(comm);
}

int comm_fail_reserve(struct loom_comm* comm, int peer, loomResult_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int first = fail_vset(comm, peer, code, 0, fmt, ap);
  va_end(ap);
  return first;
}

void comm_fail_publish(struct loom_comm* comm) {
  char full[LOOM_ERR_LEN];
  pthread_mutex_lock(&comm->err_lock);
  int code = comm->fail_pending;
  comm->fail_pending = loomSuccess;
  if (code != loomSuccess) atomic_store(&comm->async_error, code);
  memcpy(full, comm->fail_error, sizeof(full));
  pthread_mutex_unlock(&comm->err_lock);
  if (code != loomSuccess) fail_announce(comm, full);
  comm_wake(comm);
  if (code != loomSuccess) comm_fail_hook_run(comm);
}

void comm_set_peers(struct loom_comm* comm, struct peer_info* peers) {
  pthread_mutex_lock(&comm->err_lock);
  comm->peers = peers;
  pthread_mutex_unlock(&comm->err_lock);
}

static const struct own_setting* own_setting_of(int k) {
  for (size_t i = 0; i < NOWN; i++)
    if (params_agreed_find(own_settings[i].env) == k) return &own_settings[i];
  return NULL;
}

void comm_settings_own(const struct loom_comm* comm, uint64_t* settings) {
  for (size_t i = 0; i < NOWN; i++) {
    int k = params_agreed_find(own_settings[i].env);
    int v = INT_AT(comm, own_settings[i].field);
    if (k >= 0) settings[k] = 0x6f776e30u + (unsigned)(v != 0); /* "own0", "own1" */
  }
}

void comm_config_inherit(const struct loom_comm* comm, loomConfig_t* out) {
  loomConfig_t c = LOOM_CONFIG_INITIALIZER;
  c.blocking = comm->blocking;
  for (size_t i = 0; i < NOWN; i++)
    INT_AT(&c, own_settings[i].cfg) = INT_AT(comm, own_settings[i].field);
  c.timeoutMs = (int)LOOM_MIN(comm->timeout_ms, 0x7fffffffLL);
  *out = c;
}

loomResult_t comm_settings_check(struct loom_comm* comm) {
  for (int k = 0; k < params_agreed_count(); k++) {
    char ranks[160] = "", mine[200];
    size_t used = 0;
    int differ = 0;
    for (int r = 1; r < comm->nranks; r++) {
      if (comm->peers[r].settings[k] == comm->peers[0].settings[k]) continue;
      if (differ++ < 16)
        used +=
            (size_t)snprintf(ranks + used, sizeof(ranks) - used, "%s%d", differ > 1 ? "," : "", r);
      else if (differ == 17)
        snprintf(ranks + used, sizeof(ranks) - used, ",...");
    }
    if (!differ) continue;
    const struct own_setting* o = own_setting_of(k);
    if (o)
      snprintf(mine, sizeof(mine), "%d, from %s or config.%s",
               *(const int*)((const char*)comm + o->field), o->env, o->config);
    else
      params_agreed_value(k, mine, sizeof(mine));
    return err_set_sub(comm, SUB_INIT, loomInvalidUsage,
                       "%s is not the same on every rank: rank%s %s %s another value than rank 0 "
                       "(this rank has '%s'); set it alike on every rank",
                       params_agreed_env(k), differ > 1 ? "s" : "", ranks,
                       differ > 1 ? "have" : "has", mine);
  }
  return loomSuccess;
}

void comm_wake(struct loom_comm* comm) {
  void* arg = __atomic_load_n(&comm->wake_arg, __ATOMIC_ACQUIRE);
  void (*fn)(void*) = __atomic_load_n(&comm->wake_fn, __ATOMIC_ACQUIRE);
  if (fn) fn(arg);
}

void comm_set_wake(struct loom_comm* comm, void (*fn)(void*), void* arg) {
  __atomic_store_n(&comm->wake_fn, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&comm->wake_arg, arg, __ATOMIC_RELEASE);
  __atomic_store_n(&comm->wake_fn, fn, __ATOMIC_RELEASE);
}

void comm_set_fail_hook(struct loom_comm* comm, void (*fn)(struct loom_comm*)) {
  __atomic_store_n(&comm->fail_hook, fn, __ATOMIC_RELEASE);
}

void comm_fail_hook_run(struct loom_comm* comm) {
  void (*fn)(struct loom_comm*) = __atomic_load_n(&comm->fail_hook, __ATOMIC_ACQUIRE);
  if (fn) fn(comm);
}

loomResult_t comm_health(struct loom_comm* comm) {
  int e = atomic_load(&comm->async_error);
  if (e == loomSuccess || e == loomInProgress) return loomSuccess;
  pthread_mutex_lock(&comm->err_lock);
  e = atomic_load(&comm->async_error);
  /* The cause, not whatever echo of it was recorded since. */
  memcpy(comm->last_error, comm->fail_error, sizeof(comm->last_error));
  err_copy_to_thread(comm->fail_error);
  pthread_mutex_unlock(&comm->err_lock);
  return (loomResult_t)e;
}

void comm_state_changed(struct loom_comm* comm) {
  /* Under the lock, after the change: a waiter that saw the old state is
   * asleep on the condition by now, and wakes. */
  pthread_mutex_lock(&comm->state_lock);
  pthread_cond_broadcast(&comm->state_cond);
  pthread_mutex_unlock(&comm->state_lock);
}

/* Sleeps on state_cond (state_lock held) until a change or dl; 0, without
 * sleeping, once dl has passed. */
static int state_wait(struct loom_comm* comm, const struct deadline* dl) {
  if (deadline_passed(dl)) return 0;
  if (!dl->at_ns) return pthread_cond_wait(&comm->state_cond, &comm->state_lock), 1;
  struct timespec ts = {(time_t)(dl->at_ns / 1000000000u), (long)(dl->at_ns % 1000000000u)};
  pthread_cond_timedwait(&comm->state_cond, &comm->state_lock, &ts);
  return 1;
}

loomResult_t comm_await_init(struct loom_comm* comm) {
  struct deadline dl = deadline_in_ms(comm->timeout_ms);
  pthread_mutex_lock(&comm->state_lock);
  while (atomic_load(&comm->async_error) == loomInProgress && state_wait(comm, &dl)) continue;
  pthread_mutex_unlock(&comm->state_lock);
  if (atomic_load(&comm->async_error) != loomInProgress) return loomSuccess;
  return err_set(comm, loomTimeout,
                 "the communicator's non-blocking init was still running after %lld ms",
                 comm->timeout_ms);
}

void comm_boot_enter(struct loom_comm* comm) {
  pthread_mutex_lock(&comm->state_lock);
  comm->boot_users++;
  pthread_mutex_unlock(&comm->state_lock);
}

void comm_boot_leave(struct loom_comm* comm) {
  /* The last touch of comm by this call is the unlock: a waiting abort
   * frees comm only after taking the lock. */
  pthread_mutex_lock(&comm->state_lock);
  if (--comm->boot_users == 0) pthread_cond_broadcast(&comm->state_cond);
  pthread_mutex_unlock(&comm->state_lock);
}

int comm_await_boot_users(struct loom_comm* comm, long long ms) {
  struct deadline dl = deadline_in_ms(ms);
  pthread_mutex_lock(&comm->state_lock);
  while (comm->boot_users > 0 && state_wait(comm, &dl)) continue;
  int none = comm->boot_users == 0;
  pthread_mutex_unlock(&comm->state_lock);
  return none;
}

int comm_await_failure(struct loom_comm* comm, struct bell* bell, long long ms) {
  struct deadline grace = deadline_in_ms(ms);
  for (;;) {
    uint32_t seen = bell_read(bell);
    int e = atomic_load(&comm->async_error);
    if (e != loomSuccess && e != loomInProgress) return 1;
    if (deadline_passed(&grace)) return 0;
    bell_wait(bell, seen, LOOM_MAX(deadline_left_ms(&grace), 1LL) * 1000);
  }
}
