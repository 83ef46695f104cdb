/* lines.c - low-latency lines: small messages among the ranks of one host
 * with no separate flag, no system call and no wake-up on the way.
 *
 * A rank's lines live in its rank segment, which every rank of the host
 * maps; their format (64-byte lines of 56 bytes of data and the call's
 * number, one poll a line) is kernels/cpu/cpu_lines.h's, shared with the
 * calibration, and docs/DESIGN.md says why it is safe and what it replaced.
 * Still a small-message path: TP_LINES_BYTES per rank and call.
 *
 * TP_LINES_AREAS areas, used in turn by consecutive calls (the sequence
 * number modulo their count): collectives/lines.c says when a rank may
 * overwrite one. After its lines the put publishes the call's number in
 * lines_put (release), which tp_lines_seen reads (acquire): a rank that
 * sees a peer's number k knows that the peer's reads of every call before
 * k are done. The put nudges the peers' doorbells (bell_nudge): a peer
 * that spins or yields costs it one look at a line that stays shared, one
 * that is about to sleep a ring and a futex wake, so a rank that gave up
 * its core is woken as soon as the data is there. */
#include "kernels/cpu/cpu_lines.h"
#include "transport/rankseg.h"
#include "transport/transport.h"

static _Atomic uint64_t* area(struct rank_seg* seg, uint64_t seq) {
  return seg->lines[seq % TP_LINES_AREAS];
}

void tp_lines_put(struct loom_comm* comm, uint64_t seq, size_t off, const void* src, size_t bytes) {
  struct rank_seg* self = tp_rank_seg(comm, comm->rank);
  cpu_lines_put(area(self, seq), seq, off, src, bytes);
  atomic_store_explicit(&self->lines_put, seq, memory_order_release);
  for (int p = 0; p < comm->nranks; p++)
    if (p != comm->rank) bell_nudge(tp_peer_bell(comm, p));
}

int tp_lines_copy(struct loom_comm* comm, int peer, uint64_t seq, size_t off, size_t bytes,
                  void* dst, size_t* checked) {
  const _Atomic uint64_t* w = area(tp_rank_seg(comm, peer), seq);
  if (!cpu_lines_ready(w, seq, off, bytes, checked)) return 0;
  cpu_lines_get(w, off, dst, bytes);
  return 1;
}

int tp_lines_read(struct loom_comm* comm, int peer, uint64_t seq, size_t off, size_t bytes,
                  size_t unit, size_t* checked, tp_peer_use_fn use, void* arg) {
  const _Atomic uint64_t* w = area(tp_rank_seg(comm, peer), seq);
  if (!cpu_lines_ready(w, seq, off, bytes, checked)) return 0;
  /* Every line is there and stays until this rank's next call: decode in
   * pieces that stay in cache, whole elements each. */
  unsigned char buf[4096];
  size_t per = sizeof(buf) / unit * unit;
  for (size_t done = 0; done < bytes; done += per) {
    size_t n = bytes - done < per ? bytes - done : per;
    cpu_lines_get(w, off + done, buf, n);
    use(arg, done, buf, n);
  }
  return 1;
}

int tp_lines_seen(struct loom_comm* comm, int peer, uint64_t seq) {
  uint64_t lag = TP_LINES_AREAS - 2;
  if (seq <= lag) return 1;
  /* Numbers only grow (tp_lines_next); where seq - lag is a skipped one,
   * this asks for a later call than it needs, which is never wrong. */
  return atomic_load_explicit(&tp_rank_seg(comm, peer)->lines_put, memory_order_acquire) >=
         seq - lag;
}
