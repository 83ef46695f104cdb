/* lines.c - low-latency lines: small messages among the ranks of one host
 * with no flag, no system call and no wake-up on the way.
 *
 * A rank's lines live in its rank segment, which every rank of the host
 * maps. Each 8-byte word holds 4 bytes of data in its low half and the
 * low 32 bits of the call's sequence number in its high half, written by
 * one relaxed atomic store: a reader that loads a word with this call's
 * number has this call's data, whatever order the words land in, so no
 * fence or separate flag is needed (NCCL's LL protocol does the same with
 * 4-byte flags; the device kernels' low-latency protocol can use this very
 * layout). Twice the bytes cross the caches, which only small messages can
 * afford: TP_LINES_BYTES per rank and call.
 *
 * TP_LINES_AREAS areas, used in turn by consecutive calls (the sequence
 * number modulo their count): collectives/lines.c says when a rank may
 * overwrite one. After its words the put publishes the call's number in
 * lines_put (release), which tp_lines_seen reads (acquire): a rank that
 * sees a peer's number k knows that the peer's reads of every call before
 * k are done. The put nudges the peers' doorbells (bell_nudge): a peer
 * that spins or yields costs it one look at a line that stays shared, one
 * that is about to sleep a ring and a futex wake, so a rank that gave up
 * its core is woken as soon as the data is there. */
#include <string.h>

#include "core/util.h"
#include "transport/rankseg.h"
#include "transport/transport.h"

#define WORD_BYTES 4

static _Atomic uint64_t* area(struct rank_seg* seg, uint64_t seq) {
  return seg->lines[seq % TP_LINES_AREAS];
}

void tp_lines_put(struct loom_comm* comm, uint64_t seq, size_t off, const void* src, size_t bytes) {
  struct rank_seg* self = tp_rank_seg(comm, comm->rank);
  _Atomic uint64_t* w = area(self, seq) + off / WORD_BYTES;
  const unsigned char* in = src;
  uint64_t tag = (uint64_t)(uint32_t)seq << 32;
  size_t whole = bytes / WORD_BYTES;
  for (size_t i = 0; i < whole; i++) {
    uint32_t v;
    memcpy(&v, in + i * WORD_BYTES, WORD_BYTES);
    atomic_store_explicit(&w[i], tag | v, memory_order_relaxed);
  }
  if (bytes % WORD_BYTES) {
    uint32_t v = 0;
    memcpy(&v, in + whole * WORD_BYTES, bytes % WORD_BYTES);
    atomic_store_explicit(&w[whole], tag | v, memory_order_relaxed);
  }
  atomic_store_explicit(&self->lines_put, seq, memory_order_release);
  for (int p = 0; p < comm->nranks; p++)
    if (p != comm->rank) bell_nudge(tp_peer_bell(comm, p));
}

/* Copies n bytes at byte offset off of the words w (all present) to out. */
static void decode(const _Atomic uint64_t* w, size_t off, unsigned char* out, size_t n) {
  size_t i = 0;
  if (off % WORD_BYTES == 0) /* the common case: whole words first */
    for (const _Atomic uint64_t* p = w + off / WORD_BYTES; i + WORD_BYTES <= n; i += WORD_BYTES) {
      uint32_t v = (uint32_t)atomic_load_explicit(p++, memory_order_relaxed);
      memcpy(out + i, &v, WORD_BYTES);
    }
  while (i < n) {
    size_t pos = off + i, in_word = pos % WORD_BYTES;
    size_t take = LOOM_MIN(WORD_BYTES - in_word, n - i);
    uint32_t v = (uint32_t)atomic_load_explicit(&w[pos / WORD_BYTES], memory_order_relaxed);
    unsigned char b[WORD_BYTES];
    memcpy(b, &v, WORD_BYTES);
    memcpy(out + i, b + in_word, take);
    i += take;
  }
}

int tp_lines_read(struct loom_comm* comm, int peer, uint64_t seq, size_t off, size_t bytes,
                  size_t unit, size_t* checked, tp_peer_use_fn use, void* arg) {
  const _Atomic uint64_t* w = area(tp_rank_seg(comm, peer), seq);
  uint32_t tag = (uint32_t)seq;
  size_t first = off / WORD_BYTES, end = (off + bytes + WORD_BYTES - 1) / WORD_BYTES;
  for (size_t i = first + *checked; i < end; i++) {
    if ((uint32_t)(atomic_load_explicit(&w[i], memory_order_relaxed) >> 32) != tag) {
      *checked = i - first;
      return 0;
    }
  }
  *checked = end - first;
  /* Every word is there and stays until this rank's next call: decode in
   * pieces that stay in cache, whole elements each. */
  unsigned char buf[4096];
  size_t per = sizeof(buf) / unit * unit;
  for (size_t done = 0; done < bytes; done += per) {
    size_t n = LOOM_MIN(per, bytes - done);
    decode(w, off + done, buf, n);
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
