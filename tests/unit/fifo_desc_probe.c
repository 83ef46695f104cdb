/* fifo_desc_probe.c - C helpers for test_fifo_desc.cc: drive one side of a
 * shm FIFO between two thread ranks from its plain-data description alone
 * (struct fifo_desc), as a kernel or proxy would, against the transport's
 * own code on the other side. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/comm.h"
#include "transport/fifo.h"
#include "transport/transport.h"

#define PROBE_MS 20000

static int fail(char* why, size_t len, const char* what) {
  snprintf(why, len, "%s", what);
  return -1;
}

/* Connects c0 -> c1 on the p2p lane and describes both ends. */
static int probe_connect(loomComm_t c0, loomComm_t c1, struct conn** s_out, struct conn** r_out,
                         struct fifo_desc* ds, struct fifo_desc* dr, char* why, size_t len) {
  struct loom_comm *a, *b;
  if (comm_get(c0, "probe", &a) != loomSuccess || comm_get(c1, "probe", &b) != loomSuccess)
    return fail(why, len, "comm_get");
  if (tp_conn_get(a, 1, 1, LANE_P2P, s_out) != loomSuccess ||
      tp_conn_get(b, 0, 0, LANE_P2P, r_out) != loomSuccess)
    return fail(why, len, "tp_conn_get");
  struct deadline dl = deadline_in_ms(PROBE_MS);
  loomResult_t rs = loomInProgress, rr = loomInProgress;
  while ((rs == loomInProgress || rr == loomInProgress) && !deadline_passed(&dl)) {
    if (rs == loomInProgress) rs = (*s_out)->tp->connect_test(*s_out);
    if (rr == loomInProgress) rr = (*r_out)->tp->connect_test(*r_out);
  }
  if (rs != loomSuccess || rr != loomSuccess) return fail(why, len, "connect_test");
  if ((*s_out)->tp != &loom_transport_shm) return fail(why, len, "not an shm connection");
  if ((*s_out)->tp->fifo_describe(*s_out, ds) != loomSuccess ||
      (*r_out)->tp->fifo_describe(*r_out, dr) != loomSuccess)
    return fail(why, len, "fifo_describe");
  if (!ds->data || !dr->data || ds->nslots != dr->nslots || ds->slot_bytes != dr->slot_bytes ||
      ds->nslots < 2 || ds->slot_bytes == 0)
    return fail(why, len, "the two ends describe different FIFOs");
  return 0;
}

static void fill(char* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (char)(i * 31 + seed);
}

/* The transport sends; the probe receives through dr. */
static int probe_kernel_receives(struct conn* s, const struct fifo_desc* dr, char* msg, char* got,
                                 size_t bytes, char* why, size_t len) {
  struct xfer x;
  memset(&x, 0, sizeof(x));
  x.src = msg;
  x.bytes = bytes;
  x.mem = MEM_HOST;
  if (s->tp->send_post(s, &x) != loomSuccess) return fail(why, len, "send_post");
  size_t have = 0;
  int sent = 0;
  struct deadline dl = deadline_in_ms(PROBE_MS);
  while ((have < bytes || !sent) && !deadline_passed(&dl)) {
    if (!sent && s->tp->test(&x, &sent) != loomSuccess) return fail(why, len, "sender test");
    uint64_t tail = atomic_load_explicit(dr->tail, memory_order_relaxed);
    if (atomic_load_explicit(dr->head, memory_order_acquire) <= tail) continue;
    const struct fifo_slot* sl = &dr->slots[tail % dr->nslots];
    if (sl->msg_bytes != bytes || sl->offset != have || sl->bytes > dr->slot_bytes)
      return fail(why, len, "a slot header does not describe the message");
    memcpy(got + have, dr->data + (tail % dr->nslots) * dr->slot_bytes, sl->bytes);
    have += sl->bytes;
    atomic_store_explicit(dr->tail, tail + 1, memory_order_release);
    if (dr->peer_bell) bell_ring(dr->peer_bell);
  }
  if (have != bytes || !sent) return fail(why, len, "timed out receiving through the description");
  return memcmp(msg, got, bytes) == 0 ? 0 : fail(why, len, "received bytes differ");
}

/* The probe sends through ds; the transport receives. */
static int probe_kernel_sends(struct conn* r, const struct fifo_desc* ds, char* msg, char* got,
                              size_t bytes, char* why, size_t len) {
  struct xfer x;
  memset(&x, 0, sizeof(x));
  x.dst = got;
  x.bytes = bytes;
  x.mem = MEM_HOST;
  if (r->tp->recv_post(r, &x) != loomSuccess) return fail(why, len, "recv_post");
  size_t put = 0;
  int done = 0;
  struct deadline dl = deadline_in_ms(PROBE_MS);
  while (!done && !deadline_passed(&dl)) {
    uint64_t head = atomic_load_explicit(ds->head, memory_order_relaxed);
    if (put < bytes && head - atomic_load_explicit(ds->tail, memory_order_acquire) < ds->nslots) {
      uint32_t i = (uint32_t)(head % ds->nslots);
      size_t n = bytes - put < ds->slot_bytes ? bytes - put : ds->slot_bytes;
      memcpy(ds->data + (size_t)i * ds->slot_bytes, msg + put, n);
      ds->slots[i].msg_bytes = bytes;
      ds->slots[i].bytes = n;
      ds->slots[i].offset = put;
      put += n;
      atomic_store_explicit(ds->head, head + 1, memory_order_release);
      if (ds->peer_bell) bell_ring(ds->peer_bell);
    }
    if (r->tp->test(&x, &done) != loomSuccess) return fail(why, len, "receiver test");
  }
  if (!done) return fail(why, len, "timed out sending through the description");
  return memcmp(msg, got, bytes) == 0 ? 0 : fail(why, len, "received bytes differ");
}

/* Both directions, a message of several slots each. 0 or -1 with why. */
int probe_fifo_desc_shm(loomComm_t c0, loomComm_t c1, char* msg, char* got, size_t cap, char* why,
                        size_t len) {
  struct conn *s, *r;
  struct fifo_desc ds, dr;
  if (probe_connect(c0, c1, &s, &r, &ds, &dr, why, len)) return -1;
  size_t bytes = ds.slot_bytes * 3 + 100;
  if (bytes > cap) return fail(why, len, "buffer too small for the probe");
  fill(msg, bytes, 7);
  memset(got, 0, bytes);
  if (probe_kernel_receives(s, &dr, msg, got, bytes, why, len)) return -1;
  fill(msg, bytes, 11);
  memset(got, 0, bytes);
  return probe_kernel_sends(r, &ds, msg, got, bytes, why, len);
}

/* What the socket transport's slot says (it has no FIFO in memory). */
loomResult_t probe_fifo_desc_socket(void) {
  struct conn c;
  struct fifo_desc d;
  memset(&c, 0, sizeof(c));
  c.tp = &loom_transport_socket;
  return loom_transport_socket.fifo_describe(&c, &d);
}
