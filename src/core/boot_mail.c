/* boot_mail.c - the mailbox: messages the watcher has read (all-gather
 * pieces, rank-to-rank messages, the peer table from a tree parent) wait
 * here, keyed by type, tag and sender, until a thread takes them. Waits
 * sleep on the mailbox's condition variable in slices, watching the
 * deadline, the abort flag, the communicator's error state and whether the
 * sender has left; the watcher wakes them on every message, failure and
 * departure. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/boot_internal.h"
#include "core/checks.h"

#define MAIL_SLICE_MS 100
/* How long a failed send waits for the communicator to learn why. */
#define SEND_CAUSE_GRACE_MS 500

void boot_mail_put(struct bootstrap* b, struct boot_mail* m) {
  m->next = NULL;
  pthread_mutex_lock(&b->mail_lock);
  *b->mail_tail = m;
  b->mail_tail = &m->next;
  pthread_cond_broadcast(&b->mail_cond);
  pthread_mutex_unlock(&b->mail_lock);
}

void boot_mail_wake(struct bootstrap* b) {
  pthread_mutex_lock(&b->mail_lock);
  pthread_cond_broadcast(&b->mail_cond);
  pthread_mutex_unlock(&b->mail_lock);
}

/* The oldest message of (type, tag, from): messages of one key leave in the
 * order they came. */
static struct boot_mail* mail_take_locked(struct bootstrap* b, uint16_t type, uint32_t tag,
                                          int from) {
  for (struct boot_mail** p = &b->mail; *p != NULL; p = &(*p)->next) {
    struct boot_mail* m = *p;
    if (m->type != type || m->tag != tag || m->from != from) continue;
    *p = m->next;
    if (b->mail_tail == &m->next) b->mail_tail = p;
    return m;
  }
  return NULL;
}

/* Why a wait must stop, or loomSuccess to go on waiting. */
static loomResult_t wait_verdict(struct loom_comm* comm, const struct deadline* dl,
                                 int sender_only) {
  /* A sender-only wait ignores the parent's failure too (COMM_ABORT_PARENT):
   * once init's last barrier is reached, rank 0 alone decides. */
  int aborted = atomic_load(&comm->aborted);
  if (aborted && !(sender_only && aborted == COMM_ABORT_PARENT)) return loomInvalidUsage;
  int err = atomic_load(&comm->async_error);
  if (!sender_only && err != loomSuccess && err != loomInProgress) return (loomResult_t)err;
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

/* On rank 0 every other rank learns it too, naming peer. */
loomResult_t boot_peer_left_error(struct bootstrap* b, int peer, const char* doing) {
  char why[200];
  snprintf(why, sizeof(why), "peer %d left the communicator (loomCommDestroy) while %s", peer,
           doing);
  if (b->comm->rank == 0)
    boot_peer_failed(b, peer, loomRemoteError, why);
  else
    comm_set_failed(b->comm, peer, loomRemoteError, "%s", why);
  return comm_health(b->comm);
}

static loomResult_t mail_wait(struct bootstrap* b, uint16_t type, uint32_t tag, int from,
                              const char* what, const struct deadline* dl, int sender_only,
                              struct boot_mail** out) {
  uint64_t start = time_now_ns();
  loomResult_t verdict = loomSuccess;
  struct boot_mail* m;
  int left = 0, dead = 0;
  pthread_mutex_lock(&b->mail_lock);
  while ((m = mail_take_locked(b, type, tag, from)) == NULL) {
    verdict = wait_verdict(b->comm, dl, sender_only);
    if (verdict != loomSuccess) break;
    /* The communicator's failure does not end a wait on one sender, but
     * that sender's own does. */
    dead = sender_only && atomic_load(&b->dead[from]);
    if (dead) break;
    /* Its goodbye follows its messages on the socket they come by, and the
     * watcher files a message before it reads what follows: no message
     * yet, yet gone and its socket quiet, means none will come. */
    left =
        atomic_load_explicit(&b->left[from], memory_order_acquire) != 0 && boot_link_quiet(b, from);
    if (left) break;
    cond_wait_slice(b, dl);
  }
  pthread_mutex_unlock(&b->mail_lock);
  if (m == NULL && dead)
    return err_set_sub(b->comm, SUB_BOOTSTRAP, loomRemoteError,
                       "bootstrap: rank %d failed while rank %d waited for %s from it", from,
                       b->comm->rank, what);
  if (m == NULL && left) {
    char doing[120];
    snprintf(doing, sizeof(doing), "rank %d still waited for %s", b->comm->rank, what);
    return boot_peer_left_error(b, from, doing);
  }
  if (m == NULL) return wait_error(b, verdict, what, from, start);
  *out = m;
  return loomSuccess;
}

loomResult_t boot_mail_wait(struct bootstrap* b, uint16_t type, uint32_t tag, int from,
                            const char* what, const struct deadline* dl, struct boot_mail** out) {
  return mail_wait(b, type, tag, from, what, dl, 0, out);
}

loomResult_t boot_mail_wait_sender(struct bootstrap* b, uint16_t type, uint32_t tag, int from,
                                   const char* what, const struct deadline* dl,
                                   struct boot_mail** out) {
  return mail_wait(b, type, tag, from, what, dl, 1, out);
}

static int peer_has_left(const struct bootstrap* b, int peer) {
  return atomic_load_explicit(&b->left[peer], memory_order_acquire) != 0;
}

static int failed_state(int state) {
  return state != loomSuccess && state != loomInProgress;
}

loomResult_t boot_send_error(struct bootstrap* b, int err, const char* what, int peer) {
  struct loom_comm* comm = b->comm;
  /* A peer that went away may have told us why just before: give the
   * watcher a moment to read that notice, so the error names the rank that
   * failed rather than the messenger. (ECANCELED: the cause is known.) */
  struct deadline grace = deadline_in_ms(SEND_CAUSE_GRACE_MS);
  int state = atomic_load(&comm->async_error);
  while (!failed_state(state) && err != ECANCELED && !peer_has_left(b, peer) &&
         !deadline_passed(&grace)) {
    usleep(5000);
    state = atomic_load(&comm->async_error);
  }
  if (!atomic_load(&comm->aborted) && failed_state(state)) {
    LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: sending %s to rank %d failed: %s (communicator failed)",
              what, peer, sock_err_str(err));
    loomResult_t health = comm_health(comm);
    return failed_state(health) ? health : (loomResult_t)state;
  }
  if (!atomic_load(&comm->aborted) && peer_has_left(b, peer)) {
    char doing[120];
    snprintf(doing, sizeof(doing), "rank %d was sending it %s", comm->rank, what);
    return boot_peer_left_error(b, peer, doing);
  }
  char text[128];
  snprintf(text, sizeof(text), "sending %s to rank %d", what, peer);
  return boot_wire_error(comm, err, text);
}
