/* boot_gather.c - all-gather and barrier over the bootstrap star.
 *
 * Each call takes the next tag of a per-communicator counter that every rank
 * advances identically. A rank other than 0 sends its piece to rank 0 as
 * BOOT_DATA(tag) and waits for the assembled result; rank 0 waits for the
 * n - 1 pieces, assembles them in rank order and sends the result to each.
 * The watcher files incoming BOOT_DATA in the mailbox; waits here sleep on
 * its condition variable in slices, watching the deadline, the abort flag
 * and the communicator's error state. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/boot_internal.h"
#include "core/checks.h"

#define MAIL_SLICE_MS 100

/* memcpy with n == 0 may be given NULL pointers (an empty all-gather). */
static void copy_bytes(void* dst, const void* src, size_t n) {
  if (n > 0) memmove(dst, src, n);
}

static struct boot_mail* mail_take_locked(struct bootstrap* b, uint32_t tag, int from) {
  for (struct boot_mail** p = &b->mail; *p != NULL; p = &(*p)->next) {
    if ((*p)->tag != tag || (*p)->from != from) continue;
    struct boot_mail* m = *p;
    *p = m->next;
    return m;
  }
  return NULL;
}

/* Why a wait must stop, or loomSuccess to go on waiting. */
static loomResult_t wait_verdict(struct loom_comm* comm, const struct deadline* dl) {
  if (atomic_load(&comm->aborted)) return loomInvalidUsage;
  int err = atomic_load(&comm->async_error);
  if (err != loomSuccess && err != loomInProgress) return (loomResult_t)err;
  if (deadline_passed(dl)) return loomTimeout;
  return loomSuccess;
}

static void cond_wait_slice(struct bootstrap* b, const struct deadline* dl) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  long long ms = LOOM_MIN(deadline_left_ms(dl), MAIL_SLICE_MS);
  ts.tv_nsec += (long)(ms * 1000000LL);
  ts.tv_sec += ts.tv_nsec / 1000000000L;
  ts.tv_nsec %= 1000000000L;
  pthread_cond_timedwait(&b->mail_cond, &b->mail_lock, &ts);
}

/* A wait that ended without its message. A failure of the communicator was
 * logged where it was detected; here it is only propagated. */
static loomResult_t wait_error(struct bootstrap* b, loomResult_t verdict, const char* what,
                               int from, uint64_t start_ns) {
  struct loom_comm* comm = b->comm;
  if (verdict == loomInvalidUsage)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomInvalidUsage,
                       "bootstrap: %s while waiting for %s from rank %d", comm_stop_reason(comm),
                       what, from);
  if (verdict == loomTimeout)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomTimeout,
                       "bootstrap: timed out after %llu ms waiting for %s from rank %d",
                       (unsigned long long)((time_now_ns() - start_ns) / 1000000), what, from);
  LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: gave up waiting for %s from rank %d: communicator failed",
            what, from);
  loomResult_t health = comm_health(comm); /* copies the cause to this thread */
  return (health != loomSuccess && health != loomInProgress) ? health : verdict;
}

/* from left the communicator (loomCommDestroy) while this rank waited for
 * its part of a collective exchange: the communicator has failed, and on
 * rank 0 every other rank learns it, naming from. */
static loomResult_t peer_left_error(struct bootstrap* b, int from, const char* what) {
  char why[200];
  snprintf(why, sizeof(why),
           "peer %d left the communicator (loomCommDestroy) while the others still needed its %s",
           from, what);
  if (b->comm->rank == 0)
    boot_peer_failed(b, from, loomRemoteError, why);
  else
    comm_set_failed(b->comm, from, loomRemoteError, "%s", why);
  return comm_health(b->comm);
}

/* Takes the message (tag, from) from the mailbox, waiting for it. */
static loomResult_t mail_wait(struct bootstrap* b, uint32_t tag, int from, const char* what,
                              const struct deadline* dl, struct boot_mail** out) {
  uint64_t start = time_now_ns();
  loomResult_t verdict = loomSuccess;
  struct boot_mail* m;
  int left = 0;
  pthread_mutex_lock(&b->mail_lock);
  while ((m = mail_take_locked(b, tag, from)) == NULL) {
    verdict = wait_verdict(b->comm, dl);
    if (verdict != loomSuccess) break;
    /* Its goodbye follows its messages on the same socket, and the watcher
     * files a message before it reads what follows: no message yet, yet
     * gone, means none will come. */
    left = atomic_load_explicit(&b->left[from], memory_order_acquire) != 0;
    if (left) break;
    cond_wait_slice(b, dl);
  }
  pthread_mutex_unlock(&b->mail_lock);
  if (m == NULL && left) return peer_left_error(b, from, what);
  if (m == NULL) return wait_error(b, verdict, what, from, start);
  *out = m;
  return loomSuccess;
}

/* A send failed; when the communicator already knows why (the peer died),
 * that cause wins over the socket's errno. */
static loomResult_t send_error(struct bootstrap* b, int err, const char* what, int peer) {
  struct loom_comm* comm = b->comm;
  /* A peer that went away may have told us why just before: give the
   * watcher a moment to read that notice, so the error names the rank that
   * failed rather than the messenger. */
  struct deadline grace = deadline_in_ms(500);
  int state = atomic_load(&comm->async_error);
  while ((state == loomSuccess || state == loomInProgress) && err != ECANCELED &&
         !deadline_passed(&grace)) {
    usleep(5000);
    state = atomic_load(&comm->async_error);
  }
  if (state != loomSuccess && state != loomInProgress && err != ECANCELED) {
    LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: sending %s to rank %d failed: %s (communicator failed)",
              what, peer, sock_err_str(err));
    loomResult_t health = comm_health(comm);
    return health != loomSuccess && health != loomInProgress ? health : (loomResult_t)state;
  }
  char text[128];
  snprintf(text, sizeof(text), "sending %s to rank %d", what, peer);
  return boot_wire_error(comm, err, text);
}

static loomResult_t size_error(struct bootstrap* b, const char* what, int from, size_t got,
                               size_t want) {
  return err_set_sub(b->comm, SUB_BOOTSTRAP, loomInvalidUsage,
                     "bootstrap: %s from rank %d has %zu bytes, expected %zu (ranks disagree on "
                     "the all-gather size)",
                     what, from, got, want);
}

static loomResult_t gather_root(struct bootstrap* b, uint32_t tag, const void* in, size_t len,
                                void* out, const struct deadline* dl) {
  struct loom_comm* comm = b->comm;
  size_t total = len * (size_t)comm->nranks;
  char what[48];
  snprintf(what, sizeof(what), "all-gather #%u data", tag);
  copy_bytes(out, in, len);
  for (int r = 1; r < comm->nranks; r++) {
    struct boot_mail* m;
    LOOM_CHECK(mail_wait(b, tag, r, what, dl, &m));
    if (m->len != len) {
      size_t got = m->len;
      free(m);
      return size_error(b, what, r, got, len);
    }
    copy_bytes((char*)out + (size_t)r * len, m->data, len);
    free(m);
  }
  snprintf(what, sizeof(what), "all-gather #%u result", tag);
  for (int r = 1; r < comm->nranks; r++) {
    int err =
        boot_link_send(&b->links[r], 0, BOOT_DATA, tag, out, (uint32_t)total, dl, &comm->aborted);
    if (err != 0) return send_error(b, err, what, r);
  }
  return loomSuccess;
}

static loomResult_t gather_leaf(struct bootstrap* b, uint32_t tag, const void* in, size_t len,
                                void* out, const struct deadline* dl) {
  struct loom_comm* comm = b->comm;
  size_t total = len * (size_t)comm->nranks;
  char what[48];
  snprintf(what, sizeof(what), "all-gather #%u data", tag);
  /* in may alias out: it leaves before the result lands. */
  int err = boot_link_send(&b->links[0], comm->rank, BOOT_DATA, tag, in, (uint32_t)len, dl,
                           &comm->aborted);
  if (err != 0) return send_error(b, err, what, 0);
  struct boot_mail* m;
  snprintf(what, sizeof(what), "all-gather #%u result", tag);
  LOOM_CHECK(mail_wait(b, tag, 0, what, dl, &m));
  if (m->len != total) {
    size_t got = m->len;
    free(m);
    return size_error(b, what, 0, got, total);
  }
  copy_bytes(out, m->data, total);
  free(m);
  return loomSuccess;
}

loomResult_t boot_allgather(struct loom_comm* comm, const void* in, size_t len, void* out,
                            const struct deadline* dl) {
  struct bootstrap* b = comm->boot;
  if (b == NULL)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomInvalidUsage,
                       "bootstrap: all-gather on rank %d, whose bootstrap is not running",
                       comm->rank);
  if (len > BOOT_MAX_PAYLOAD / (size_t)comm->nranks)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomInvalidArgument,
                       "bootstrap: all-gather of %zu bytes from each of %d ranks is over the "
                       "%u-byte message bound",
                       len, comm->nranks, BOOT_MAX_PAYLOAD);
  struct deadline own = deadline_in_ms(comm->timeout_ms);
  if (dl == NULL) dl = &own;
  uint32_t tag = ++b->next_tag;
  if (comm->nranks == 1) {
    copy_bytes(out, in, len);
    return loomSuccess;
  }
  if (comm->rank == 0) return gather_root(b, tag, in, len, out, dl);
  return gather_leaf(b, tag, in, len, out, dl);
}

loomResult_t boot_barrier(struct loom_comm* comm, const struct deadline* dl) {
  uint8_t one = 1;
  uint8_t* all = malloc((size_t)comm->nranks);
  if (all == NULL)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomSystemError,
                       "bootstrap: out of memory for a barrier of %d ranks", comm->nranks);
  loomResult_t res = boot_allgather(comm, &one, 1, all, dl);
  free(all);
  return res;
}
