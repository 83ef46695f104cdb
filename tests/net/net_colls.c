/* net_colls.c - net_check's collective runners. Each runs one collective over
 * the matrix (counts 0, 1, 7, 1000; datatypes; ops; every root; in place and
 * out of place) and, with c->big, over a subset at (1<<20)+3 elements, and
 * checks every element of every result exactly (net_values.h). Buffers are
 * fresh and poisoned for every call, so stale data cannot pass for a result;
 * out-of-place sends are checked unchanged afterwards. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net_check.h"
#include "net_values.h"

#define BIG_COUNT (((size_t)1 << 20) + 3)
#define POISON 0xa5

static const size_t small_counts[] = {0, 1, 7, 1000};
#define NCOUNTS (sizeof(small_counts) / sizeof(small_counts[0]))
static const loomDataType_t red_types[] = {loomInt8,    loomInt32,   loomUint64,  loomFloat32,
                                           loomFloat64, loomFloat16, loomBfloat16};
#define NRED (sizeof(red_types) / sizeof(red_types[0]))
/* Data movement only cares about the element size: one type of each. */
static const loomDataType_t move_types[] = {loomInt8, loomFloat16, loomFloat32, loomUint64};
#define NMOVE (sizeof(move_types) / sizeof(move_types[0]))

/* Keys of the blocks of data-movement collectives (nv_pattern). */
#define KEY_PAIR(s, d) (((uint64_t)1 << 20) + (uint64_t)(s)*256 + (uint64_t)(d))
#define KEY_V(s, d) (((uint64_t)2 << 20) + (uint64_t)(s)*256 + (uint64_t)(d))
#define KEY_RIGHT(s, d) (((uint64_t)3 << 20) + (uint64_t)(s)*256 + (uint64_t)(d))
#define KEY_LEFT(s, d) (((uint64_t)4 << 20) + (uint64_t)(s)*256 + (uint64_t)(d))

static void* xalloc(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "net_check: out of memory (%zu bytes)\n", bytes);
    exit(2);
  }
  return p;
}

static void* poisoned(size_t bytes) {
  void* p = xalloc(bytes);
  memset(p, POISON, bytes ? bytes : 1);
  return p;
}

static char* at(void* base, size_t elems, loomDataType_t t) {
  return (char*)base + elems * nv_size(t);
}

static void describe(char* buf, size_t len, const char* coll, size_t count, loomDataType_t t,
                     int op, int root, int inplace) {
  char rootbuf[24] = "";
  if (root >= 0) snprintf(rootbuf, sizeof(rootbuf), " root=%d", root);
  snprintf(buf, len, "%s count=%zu type=%s%s%s%s %s", coll, count, nv_type_name(t),
           op >= 0 ? " op=" : "", op >= 0 ? nv_op_name(op) : "", rootbuf,
           inplace ? "in-place" : "out-of-place");
}

static void check_elem(struct nc_ctx* c, const char* what, loomDataType_t t, const void* buf,
                       size_t i, double want) {
  double got = nv_load(t, buf, i);
  if (got != want) nc_wrong(c, what, i, got, want);
}

static int op_valid(const struct nc_ctx* c, int op, loomDataType_t t) {
  /* The average of integers rounds; over a rank count that is not a power
   * of two it would not be exact in floats either. */
  if (op == NV_AVG) return nv_is_float(t) && (c->nranks & (c->nranks - 1)) == 0;
  return 1;
}

static loomRedOp_t op_make(struct nc_ctx* c, int op, loomDataType_t t, const char* what) {
  static const loomRedOp_t plain[] = {loomSum, loomProd, loomMax, loomMin, loomAvg};
  if (op != NV_PREMUL) return plain[op];
  double scalar[1]; /* room and alignment for any type */
  nv_store(t, scalar, 0, 2.0);
  loomRedOp_t made;
  NC_CALL(c, what, loomRedOpCreatePreMulSum(&made, scalar, t, loomScalarHostImmediate, c->comm));
  return made;
}

static void op_free(struct nc_ctx* c, int op, loomRedOp_t made, const char* what) {
  if (op == NV_PREMUL) NC_CALL(c, what, loomRedOpDestroy(made, c->comm));
}

/* The send buffer of an out-of-place call must come back as it went in. */
static void check_red_input(struct nc_ctx* c, const char* what, loomDataType_t t, const void* buf,
                            size_t count, int op) {
  char w[256];
  snprintf(w, sizeof(w), "%s (sendbuff changed)", what);
  for (size_t i = 0; i < count; i++) check_elem(c, w, t, buf, i, nv_red_input(op, c->rank, i));
}

/* ---- Reductions ---------------------------------------------------------- */

static void allreduce_one(struct nc_ctx* c, size_t count, loomDataType_t t, int op, int inplace) {
  char what[160];
  describe(what, sizeof(what), "allreduce", count, t, op, -1, inplace);
  void* send = xalloc(count * nv_size(t));
  for (size_t i = 0; i < count; i++) nv_store(t, send, i, nv_red_input(op, c->rank, i));
  void* recv = inplace ? send : poisoned(count * nv_size(t));
  loomRedOp_t lop = op_make(c, op, t, what);
  NC_CALL(c, what, loomAllReduce(send, recv, count, t, lop, c->comm, NULL));
  op_free(c, op, lop, what);
  for (size_t i = 0; i < count; i++)
    check_elem(c, what, t, recv, i, nv_red_expect(op, c->nranks, i));
  if (!inplace) check_red_input(c, what, t, send, count, op);
  c->calls++;
  if (!inplace) free(recv);
  free(send);
}

void nc_allreduce(struct nc_ctx* c) {
  for (size_t k = 0; k < NCOUNTS; k++)
    for (size_t ti = 0; ti < NRED; ti++)
      for (int op = 0; op < NV_OP_COUNT; op++)
        if (op_valid(c, op, red_types[ti]))
          for (int ip = 0; ip < 2; ip++) allreduce_one(c, small_counts[k], red_types[ti], op, ip);
  if (!c->big) return;
  allreduce_one(c, BIG_COUNT, loomFloat32, NV_SUM, 0);
  allreduce_one(c, BIG_COUNT, loomFloat32, NV_SUM, 1);
  allreduce_one(c, BIG_COUNT, loomBfloat16, NV_MAX, 0);
  allreduce_one(c, BIG_COUNT, loomInt64, NV_PREMUL, 1);
}

static void reduce_one(struct nc_ctx* c, size_t count, loomDataType_t t, int op, int root,
                       int inplace) {
  char what[160];
  describe(what, sizeof(what), "reduce", count, t, op, root, inplace);
  void* send = xalloc(count * nv_size(t));
  for (size_t i = 0; i < count; i++) nv_store(t, send, i, nv_red_input(op, c->rank, i));
  /* Only the root has a receive buffer: the others pass NULL out of place. */
  void* recv = inplace ? send : c->rank == root ? poisoned(count * nv_size(t)) : NULL;
  loomRedOp_t lop = op_make(c, op, t, what);
  NC_CALL(c, what, loomReduce(send, recv, count, t, lop, root, c->comm, NULL));
  op_free(c, op, lop, what);
  if (c->rank == root)
    for (size_t i = 0; i < count; i++)
      check_elem(c, what, t, recv, i, nv_red_expect(op, c->nranks, i));
  if (!inplace) check_red_input(c, what, t, send, count, op);
  c->calls++;
  if (!inplace) free(recv);
  free(send);
}

void nc_reduce(struct nc_ctx* c) {
  int k = 0; /* the root turns with every call, so every root meets every type */
  for (size_t ci = 0; ci < NCOUNTS; ci++)
    for (size_t ti = 0; ti < NRED; ti++)
      for (int op = 0; op < NV_OP_COUNT; op++)
        if (op_valid(c, op, red_types[ti]))
          for (int ip = 0; ip < 2; ip++)
            reduce_one(c, small_counts[ci], red_types[ti], op, k++ % c->nranks, ip);
  for (size_t ci = 0; ci < NCOUNTS; ci++)
    for (int root = 0; root < c->nranks; root++)
      for (int ip = 0; ip < 2; ip++) reduce_one(c, small_counts[ci], loomFloat32, NV_SUM, root, ip);
  if (c->big) reduce_one(c, BIG_COUNT, loomFloat32, NV_SUM, c->nranks - 1, 0);
}

static void reducescatter_one(struct nc_ctx* c, size_t count, loomDataType_t t, int op,
                              int inplace) {
  char what[160];
  describe(what, sizeof(what), "reducescatter", count, t, op, -1, inplace);
  size_t total = count * (size_t)c->nranks;
  void* send = xalloc(total * nv_size(t));
  for (size_t j = 0; j < total; j++) nv_store(t, send, j, nv_red_input(op, c->rank, j));
  void* recv = inplace ? at(send, (size_t)c->rank * count, t) : poisoned(count * nv_size(t));
  loomRedOp_t lop = op_make(c, op, t, what);
  NC_CALL(c, what, loomReduceScatter(send, recv, count, t, lop, c->comm, NULL));
  op_free(c, op, lop, what);
  size_t base = (size_t)c->rank * count;
  for (size_t i = 0; i < count; i++)
    check_elem(c, what, t, recv, i, nv_red_expect(op, c->nranks, base + i));
  if (!inplace) check_red_input(c, what, t, send, total, op);
  c->calls++;
  if (!inplace) free(recv);
  free(send);
}

void nc_reducescatter(struct nc_ctx* c) {
  for (size_t k = 0; k < NCOUNTS; k++)
    for (size_t ti = 0; ti < NRED; ti++)
      for (int op = 0; op < NV_OP_COUNT; op++)
        if (op_valid(c, op, red_types[ti]))
          for (int ip = 0; ip < 2; ip++)
            reducescatter_one(c, small_counts[k], red_types[ti], op, ip);
  if (!c->big) return;
  reducescatter_one(c, BIG_COUNT, loomFloat32, NV_SUM, 0);
  reducescatter_one(c, BIG_COUNT, loomFloat32, NV_SUM, 1);
}

/* ---- Data movement ------------------------------------------------------- */

static void broadcast_one(struct nc_ctx* c, size_t count, loomDataType_t t, int root, int inplace) {
  char what[160];
  describe(what, sizeof(what), "broadcast", count, t, -1, root, inplace);
  void *send = NULL, *recv;
  if (c->rank == root) {
    send = xalloc(count * nv_size(t));
    for (size_t i = 0; i < count; i++) nv_store(t, send, i, nv_pattern(t, (uint64_t)root, i));
    recv = inplace ? send : poisoned(count * nv_size(t));
  } else {
    recv = poisoned(count * nv_size(t));
    send = inplace ? recv : NULL; /* only the root's sendbuff is read */
  }
  NC_CALL(c, what, loomBroadcast(send, recv, count, t, root, c->comm, NULL));
  for (size_t i = 0; i < count; i++)
    check_elem(c, what, t, recv, i, nv_pattern(t, (uint64_t)root, i));
  c->calls++;
  if (recv != send) free(recv);
  if (c->rank == root) free(send);
}

void nc_broadcast(struct nc_ctx* c) {
  for (size_t k = 0; k < NCOUNTS; k++)
    for (size_t ti = 0; ti < NMOVE; ti++)
      for (int root = 0; root < c->nranks; root++)
        for (int ip = 0; ip < 2; ip++) broadcast_one(c, small_counts[k], move_types[ti], root, ip);
  if (!c->big) return;
  broadcast_one(c, BIG_COUNT, loomFloat32, c->nranks - 1, 0);
  broadcast_one(c, BIG_COUNT, loomInt8, 0, 1);
}

static void allgather_one(struct nc_ctx* c, size_t count, loomDataType_t t, int inplace) {
  char what[160];
  describe(what, sizeof(what), "allgather", count, t, -1, -1, inplace);
  int n = c->nranks;
  void* recv = poisoned((size_t)n * count * nv_size(t));
  void* send = inplace ? at(recv, (size_t)c->rank * count, t) : xalloc(count * nv_size(t));
  for (size_t i = 0; i < count; i++) nv_store(t, send, i, nv_pattern(t, (uint64_t)c->rank, i));
  NC_CALL(c, what, loomAllGather(send, recv, count, t, c->comm, NULL));
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < count; i++)
      check_elem(c, what, t, recv, (size_t)p * count + i, nv_pattern(t, (uint64_t)p, i));
  c->calls++;
  if (!inplace) free(send);
  free(recv);
}

void nc_allgather(struct nc_ctx* c) {
  for (size_t k = 0; k < NCOUNTS; k++)
    for (size_t ti = 0; ti < NMOVE; ti++)
      for (int ip = 0; ip < 2; ip++) allgather_one(c, small_counts[k], move_types[ti], ip);
  if (!c->big) return;
  allgather_one(c, BIG_COUNT, loomFloat32, 0);
  allgather_one(c, BIG_COUNT, loomFloat16, 1);
}

static void alltoall_one(struct nc_ctx* c, size_t count, loomDataType_t t, int inplace) {
  char what[160];
  describe(what, sizeof(what), "alltoall", count, t, -1, -1, inplace);
  int n = c->nranks;
  size_t total = (size_t)n * count;
  void* send = xalloc(total * nv_size(t));
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < count; i++)
      nv_store(t, send, (size_t)p * count + i, nv_pattern(t, KEY_PAIR(c->rank, p), i));
  void* recv = inplace ? send : poisoned(total * nv_size(t));
  NC_CALL(c, what, loomAlltoAll(send, recv, count, t, c->comm, NULL));
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < count; i++)
      check_elem(c, what, t, recv, (size_t)p * count + i, nv_pattern(t, KEY_PAIR(p, c->rank), i));
  c->calls++;
  if (!inplace) free(recv);
  free(send);
}

void nc_alltoall(struct nc_ctx* c) {
  for (size_t k = 0; k < NCOUNTS; k++)
    for (size_t ti = 0; ti < NMOVE; ti++)
      for (int ip = 0; ip < 2; ip++) alltoall_one(c, small_counts[k], move_types[ti], ip);
  if (!c->big) return;
  alltoall_one(c, BIG_COUNT, loomFloat32, 0);
  alltoall_one(c, BIG_COUNT, loomInt8, 1);
}

/* All-to-all-v: from s to d go count/3, 2count/3 or count elements, so some
 * blocks are empty at small counts; blocks are packed with a one-element gap
 * after each, which must stay untouched. */
static size_t vcount(size_t count, int s, int d) {
  return count * (size_t)(1 + (s + 2 * d) % 3) / 3;
}

static size_t v_layout(size_t count, int n, int self, int sending, size_t* counts, size_t* displs) {
  size_t off = 0;
  for (int p = 0; p < n; p++) {
    counts[p] = sending ? vcount(count, self, p) : vcount(count, p, self);
    displs[p] = off;
    off += counts[p] + 1;
  }
  return off;
}

static void alltoallv_one(struct nc_ctx* c, size_t count, loomDataType_t t) {
  char what[160];
  describe(what, sizeof(what), "alltoallv", count, t, -1, -1, 0);
  int n = c->nranks;
  size_t* v = xalloc(4 * (size_t)n * sizeof(size_t));
  size_t *sc = v, *sd = v + n, *rc = v + 2 * n, *rd = v + 3 * n;
  size_t sext = v_layout(count, n, c->rank, 1, sc, sd);
  size_t rext = v_layout(count, n, c->rank, 0, rc, rd);
  void* send = poisoned(sext * nv_size(t));
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < sc[p]; i++)
      nv_store(t, send, sd[p] + i, nv_pattern(t, KEY_V(c->rank, p), i));
  void* recv = poisoned(rext * nv_size(t));
  NC_CALL(c, what, loomAlltoAllv(send, sc, sd, recv, rc, rd, t, c->comm, NULL));
  unsigned char gap[8];
  memset(gap, POISON, sizeof(gap));
  for (int p = 0; p < n; p++) {
    for (size_t i = 0; i < rc[p]; i++)
      check_elem(c, what, t, recv, rd[p] + i, nv_pattern(t, KEY_V(p, c->rank), i));
    size_t g = rd[p] + rc[p]; /* the gap after the block */
    if (memcmp(at(recv, g, t), gap, nv_size(t)) != 0) {
      char w[256];
      snprintf(w, sizeof(w), "%s (wrote into the gap after the block from %d)", what, p);
      nc_wrong(c, w, g, nv_load(t, recv, g), nv_load(t, gap, 0));
    }
  }
  c->calls++;
  free(recv);
  free(send);
  free(v);
}

void nc_alltoallv(struct nc_ctx* c) {
  for (size_t k = 0; k < NCOUNTS; k++)
    for (size_t ti = 0; ti < NMOVE; ti++) alltoallv_one(c, small_counts[k], move_types[ti]);
  if (c->big) alltoallv_one(c, BIG_COUNT, loomFloat32);
}

static void gather_one(struct nc_ctx* c, size_t count, loomDataType_t t, int root, int inplace) {
  char what[160];
  describe(what, sizeof(what), "gather", count, t, -1, root, inplace);
  int n = c->nranks, me = c->rank;
  void* recv = me == root ? poisoned((size_t)n * count * nv_size(t)) : NULL;
  void* send =
      me == root && inplace ? at(recv, (size_t)root * count, t) : xalloc(count * nv_size(t));
  for (size_t i = 0; i < count; i++) nv_store(t, send, i, nv_pattern(t, (uint64_t)me, i));
  NC_CALL(c, what, loomGather(send, recv, count, t, root, c->comm, NULL));
  if (me == root)
    for (int p = 0; p < n; p++)
      for (size_t i = 0; i < count; i++)
        check_elem(c, what, t, recv, (size_t)p * count + i, nv_pattern(t, (uint64_t)p, i));
  c->calls++;
  if (!(me == root && inplace)) free(send);
  free(recv);
}

void nc_gather(struct nc_ctx* c) {
  for (size_t k = 0; k < NCOUNTS; k++)
    for (size_t ti = 0; ti < NMOVE; ti++)
      for (int root = 0; root < c->nranks; root++)
        for (int ip = 0; ip < 2; ip++) gather_one(c, small_counts[k], move_types[ti], root, ip);
  if (c->big) gather_one(c, BIG_COUNT, loomFloat32, 1 % c->nranks, 0);
}

static void scatter_one(struct nc_ctx* c, size_t count, loomDataType_t t, int root, int inplace) {
  char what[160];
  describe(what, sizeof(what), "scatter", count, t, -1, root, inplace);
  int n = c->nranks, me = c->rank;
  void *send = NULL, *recv;
  if (me == root) {
    send = xalloc((size_t)n * count * nv_size(t));
    for (int p = 0; p < n; p++)
      for (size_t i = 0; i < count; i++)
        nv_store(t, send, (size_t)p * count + i, nv_pattern(t, KEY_PAIR(root, p), i));
    recv = inplace ? at(send, (size_t)root * count, t) : poisoned(count * nv_size(t));
  } else {
    recv = poisoned(count * nv_size(t)); /* only the root's sendbuff is read */
  }
  NC_CALL(c, what, loomScatter(send, recv, count, t, root, c->comm, NULL));
  for (size_t i = 0; i < count; i++)
    check_elem(c, what, t, recv, i, nv_pattern(t, KEY_PAIR(root, me), i));
  c->calls++;
  if (!(me == root && inplace)) free(recv);
  free(send);
}

void nc_scatter(struct nc_ctx* c) {
  for (size_t k = 0; k < NCOUNTS; k++)
    for (size_t ti = 0; ti < NMOVE; ti++)
      for (int root = 0; root < c->nranks; root++)
        for (int ip = 0; ip < 2; ip++) scatter_one(c, small_counts[k], move_types[ti], root, ip);
  if (c->big) scatter_one(c, BIG_COUNT, loomFloat32, c->nranks - 1, 0);
}

/* A ring both ways in one group: each rank sends to its right and left
 * neighbours and receives from both, receives posted first. With two ranks
 * both neighbours are one peer: messages between a pair match in the order
 * they were posted, which the keys check. */
static void sendrecv_one(struct nc_ctx* c, size_t count, loomDataType_t t) {
  char what[160];
  describe(what, sizeof(what), "sendrecv-ring", count, t, -1, -1, 0);
  int n = c->nranks, me = c->rank, right = (me + 1) % n, left = (me + n - 1) % n;
  size_t bytes = count * nv_size(t);
  void *to_right = xalloc(bytes), *to_left = xalloc(bytes);
  void *from_left = poisoned(bytes), *from_right = poisoned(bytes);
  for (size_t i = 0; i < count; i++) {
    nv_store(t, to_right, i, nv_pattern(t, KEY_RIGHT(me, right), i));
    nv_store(t, to_left, i, nv_pattern(t, KEY_LEFT(me, left), i));
  }
  NC_CALL(c, what, loomGroupStart());
  NC_CALL(c, what, loomRecv(from_left, count, t, left, c->comm, NULL));
  NC_CALL(c, what, loomSend(to_right, count, t, right, c->comm, NULL));
  NC_CALL(c, what, loomRecv(from_right, count, t, right, c->comm, NULL));
  NC_CALL(c, what, loomSend(to_left, count, t, left, c->comm, NULL));
  NC_CALL(c, what, loomGroupEnd());
  for (size_t i = 0; i < count; i++) {
    check_elem(c, what, t, from_left, i, nv_pattern(t, KEY_RIGHT(left, me), i));
    check_elem(c, what, t, from_right, i, nv_pattern(t, KEY_LEFT(right, me), i));
  }
  c->calls++;
  free(to_right);
  free(to_left);
  free(from_left);
  free(from_right);
}

void nc_sendrecv(struct nc_ctx* c) {
  if (c->nranks < 2) return;
  for (size_t k = 0; k < NCOUNTS; k++)
    for (size_t ti = 0; ti < NMOVE; ti++) sendrecv_one(c, small_counts[k], move_types[ti]);
  if (c->big) sendrecv_one(c, BIG_COUNT, loomFloat32);
}

/* ---- The fault loop's step ----------------------------------------------- */

loomResult_t nc_allreduce_once(struct nc_ctx* c, float* send, float* recv, size_t count,
                               long* wrong_out) {
  memset(recv, POISON, count * sizeof(float));
  loomResult_t r = loomAllReduce(send, recv, count, loomFloat32, loomSum, c->comm, NULL);
  long wrong = 0;
  if (r == loomSuccess)
    for (size_t i = 0; i < count; i++)
      if ((double)recv[i] != nv_red_expect(NV_SUM, c->nranks, i)) wrong++;
  *wrong_out = wrong;
  return r;
}
