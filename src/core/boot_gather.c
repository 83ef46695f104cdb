/* boot_gather.c - all-gather and barrier over the bootstrap star.
 *
 * Each call takes the next tag of a per-communicator counter that every rank
 * advances identically. A rank other than 0 sends its piece to rank 0 as
 * BOOT_DATA(tag) and waits for the assembled result; rank 0 waits for the
 * n - 1 pieces, assembles them in rank order and sends the result to each.
 * The watcher files incoming BOOT_DATA in the mailbox (boot_mail.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/boot_internal.h"
#include "core/checks.h"

/* memcpy with n == 0 may be given NULL pointers (an empty all-gather). */
static void copy_bytes(void* dst, const void* src, size_t n) {
  if (n > 0) memmove(dst, src, n);
}

static loomResult_t size_error(struct bootstrap* b, const char* what, int from, size_t got,
                               size_t want) {
  return err_set_sub(b->comm, SUB_BOOTSTRAP, loomInvalidUsage,
                     "bootstrap: %s from rank %d has %zu bytes, expected %zu (ranks disagree on "
                     "the all-gather size)",
                     what, from, got, want);
}

static loomResult_t gather_root(struct bootstrap* b, uint32_t tag, const void* in, size_t len,
                                void* out, const struct deadline* dl, int root_only) {
  struct loom_comm* comm = b->comm;
  size_t total = len * (size_t)comm->nranks;
  char what[48];
  snprintf(what, sizeof(what), "all-gather #%u data", tag);
  copy_bytes(out, in, len);
  for (int r = 1; r < comm->nranks; r++) {
    struct boot_mail* m;
    LOOM_CHECK(boot_mail_wait(b, BOOT_DATA, tag, r, what, dl, &m));
    if (m->len != len) {
      size_t got = m->len;
      free(m);
      return size_error(b, what, r, got, len);
    }
    copy_bytes((char*)out + (size_t)r * len, m->data, len);
    free(m);
  }
  snprintf(what, sizeof(what), "all-gather #%u result", tag);
  /* Init's last barrier (root_only): with every rank arrived, init is done,
   * and every rank must hear it, even when the parent of a split fails now
   * (COMM_ABORT_PARENT): the sends are not stopped by the abort flag then. */
  for (int r = 1; r < comm->nranks; r++) {
    int err = boot_link_send(&b->links[r], 0, BOOT_DATA, tag, out, (uint32_t)total, dl,
                             root_only ? NULL : &comm->aborted);
    if (err != 0) return boot_send_error(b, err, what, r);
  }
  return loomSuccess;
}

static loomResult_t gather_leaf(struct bootstrap* b, uint32_t tag, const void* in, size_t len,
                                void* out, const struct deadline* dl, int root_only) {
  struct loom_comm* comm = b->comm;
  size_t total = len * (size_t)comm->nranks;
  char what[48];
  snprintf(what, sizeof(what), "all-gather #%u data", tag);
  /* in may alias out: it leaves before the result lands. */
  int err = boot_link_send(&b->links[0], comm->rank, BOOT_DATA, tag, in, (uint32_t)len, dl,
                           &comm->aborted);
  if (err != 0) return boot_send_error(b, err, what, 0);
  struct boot_mail* m;
  snprintf(what, sizeof(what), "all-gather #%u result", tag);
  loomResult_t r = root_only ? boot_mail_wait_sender(b, BOOT_DATA, tag, 0, what, dl, &m)
                             : boot_mail_wait(b, BOOT_DATA, tag, 0, what, dl, &m);
  if (r != loomSuccess && root_only) {
    /* Rank 0 went down because of a failure it reported: name that cause. */
    loomResult_t cause = comm_health(comm);
    return cause != loomSuccess ? cause : r;
  }
  if (r != loomSuccess) return r;
  if (m->len != total) {
    size_t got = m->len;
    free(m);
    return size_error(b, what, 0, got, total);
  }
  copy_bytes(out, m->data, total);
  free(m);
  return loomSuccess;
}

static loomResult_t allgather(struct loom_comm* comm, const void* in, size_t len, void* out,
                              const struct deadline* dl, int root_only) {
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
  if (comm->rank == 0) return gather_root(b, tag, in, len, out, dl, root_only);
  return gather_leaf(b, tag, in, len, out, dl, root_only);
}

loomResult_t boot_allgather(struct loom_comm* comm, const void* in, size_t len, void* out,
                            const struct deadline* dl) {
  return allgather(comm, in, len, out, dl, 0);
}

static loomResult_t barrier(struct loom_comm* comm, const struct deadline* dl, int root_only) {
  uint8_t one = 1;
  uint8_t* all = malloc((size_t)comm->nranks);
  if (all == NULL)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomSystemError,
                       "bootstrap: out of memory for a barrier of %d ranks", comm->nranks);
  loomResult_t res = allgather(comm, &one, 1, all, dl, root_only);
  free(all);
  return res;
}

loomResult_t boot_barrier(struct loom_comm* comm, const struct deadline* dl) {
  return barrier(comm, dl, 0);
}

loomResult_t boot_barrier_init_done(struct loom_comm* comm, const struct deadline* dl) {
  return barrier(comm, dl, 1);
}
