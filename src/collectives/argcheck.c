/* argcheck.c - LOOM_CHECK_ARGS (config.checkArgs): before a collective
 * runs, its ranks agree on its arguments, so that a rank that passes another
 * count, datatype, op, root or collective than its peers gets
 * loomInvalidUsage naming the ranks and the fields, on every rank, instead
 * of a wrong result or a timeout.
 *
 * Each call of a collective (count 0 included) gets the communicator's next
 * sequence number and a fingerprint: the collective, count, datatype, op
 * (built in, or "PreMulSum": ops' handles differ between ranks), root, and
 * for all-to-all-v two sums over its peers of a 64-bit hash of (sequence,
 * from, to, count), one of the send counts and one of the receive counts:
 * the counts pair up (rank i's sendcounts[p] is rank p's recvcounts[i] for
 * every i, p) exactly when the two sums over all ranks are equal, up to a
 * 2^-64 chance.
 *
 * The fingerprints travel by an all-gather of the communicator itself (a
 * fixed 64 bytes, so it cannot mismatch), launched on the calling thread
 * before the call's own launch; every rank then holds every fingerprint and
 * reaches the same verdict with no further message. When an all-to-all-v's
 * sums differ, a second all-gather of the counts (up to ARGCHECK_MAX_V
 * ranks) names the pair. A call checked alone blocks until every rank has
 * called it (and after earlier work of the communicator's streams: the
 * check takes its turn like any launch); inside a group the checks run at
 * loomGroupEnd as one launch for the whole group, so that one thread may
 * drive several ranks of a communicator; the fingerprint carries the call's
 * place in its group, since ranks that group their calls differently would
 * otherwise pair one's fingerprint with another's call. On a mismatch
 * nothing of the call (or of the group, on that communicator) is launched
 * and the communicator stays usable. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "collectives/exec.h"
#include "core/checks.h"
#include "core/dtype.h"
#include "core/util.h"

/* All-to-all-v's counts are gathered, to name the pair that differs, up to
 * this many ranks (2 n^2 counts on every rank). */
#define ARGCHECK_MAX_V 256

/* What colls.def says of each collective (COLLF_*): which take a root or an op. */
static const unsigned kind_flags[] = {
#define COLL(id, token, text, flags) flags,
#include "core/colls.def"
#undef COLL
};

/* On the wire between ranks of one build. */
struct argcheck_fp {
  uint64_t seq; /* the communicator's checked calls before this one */
  uint64_t count;
  uint64_t vsend, vrecv; /* all-to-all-v: the pair-hash sums */
  int32_t kind, dtype, op, root;
  int32_t nv;    /* all-to-all-v: 2 n counts gathered when the sums differ, or 0 */
  int32_t gsize; /* checked calls on this communicator in the call's group (1: no group) */
  int32_t gidx;  /* this call's place among them */
  int32_t pad;
};

struct argcheck_verdict {
  int code; /* loomSuccess or loomInvalidUsage */
  char text[476];
};

struct argcheck_rec {
  struct loom_comm* comm;
  const char* fn;
  struct argcheck_fp fp;
  uint64_t* v;             /* nv counts, or NULL */
  struct argcheck_fp* all; /* every rank's fingerprint, by rank */
  uint64_t* all_v;         /* every rank's nv counts, when their pair sums differ */
  struct argcheck_verdict verdict;
};

static __thread struct argcheck_rec* pend;
static __thread int npend, pend_cap;

static uint64_t pair_hash(uint64_t seq, int from, int to, uint64_t count) {
  uint64_t k[4] = {seq, (uint64_t)from, (uint64_t)to, count};
  return hash64(k, sizeof(k), 0x61726773ULL);
}

static loomResult_t rec_fill(struct argcheck_rec* r, const char* fn, const struct coll_task* t) {
  struct loom_comm* comm = t->comm;
  memset(r, 0, sizeof(*r));
  r->comm = comm;
  r->fn = fn;
  r->fp.seq = comm->coll->check_seq;
  r->fp.gsize = 1;
  r->fp.kind = (int32_t)t->kind;
  r->fp.count = t->kind == COLL_ALLTOALLV ? 0 : t->count;
  r->fp.dtype = (int32_t)t->dtype;
  r->fp.op = redop_is_premul(t->op) ? (int32_t)loomNumOps : (int32_t)t->op;
  r->fp.root = t->root;
  if (t->kind != COLL_ALLTOALLV) {
    comm->coll->check_seq++;
    return loomSuccess;
  }
  int n = comm->nranks, me = comm->rank;
  const size_t* sc = t->v;
  const size_t* rc = t->v + 2 * n;
  for (int p = 0; p < n; p++) {
    r->fp.vsend += pair_hash(r->fp.seq, me, p, sc[p]);
    r->fp.vrecv += pair_hash(r->fp.seq, p, me, rc[p]);
  }
  if (n <= ARGCHECK_MAX_V) {
    r->v = malloc(2 * (size_t)n * sizeof(uint64_t));
    if (!r->v) return err_set(comm, loomSystemError, "out of memory");
    for (int p = 0; p < n; p++) r->v[p] = sc[p], r->v[n + p] = rc[p];
    r->fp.nv = 2 * n;
  }
  comm->coll->check_seq++;
  return loomSuccess;
}

/* "all-reduce of 1024 float32 (sum)", as rank r's fingerprint says. */
static void fp_describe(const struct argcheck_fp* f, char* buf, size_t len) {
  const char* kind = coll_kind_text((enum coll_kind)f->kind);
  unsigned flags = f->kind >= 0 && f->kind < COLL_SEND ? kind_flags[f->kind] : 0;
  int rooted = (flags & (COLLF_ROOT_SEND | COLLF_ROOT_RECV)) != 0;
  int reduces = (flags & COLLF_REDUCES) != 0;
  char root[32] = "", op[32] = "";
  if (rooted) snprintf(root, sizeof(root), ", root %d", (int)f->root);
  if (reduces) snprintf(op, sizeof(op), ", %s", redop_name((loomRedOp_t)f->op));
  char group[48] = "";
  if (f->gsize > 1)
    snprintf(group, sizeof(group), " (call %d of %d in a group)", (int)f->gidx + 1, (int)f->gsize);
  if (f->kind == COLL_ALLTOALLV)
    snprintf(buf, len, "%s of %s%s", kind, dtype_name((loomDataType_t)f->dtype), group);
  else
    snprintf(buf, len, "%s of %llu %s%s%s%s", kind, (unsigned long long)f->count,
             dtype_name((loomDataType_t)f->dtype), op, root, group);
}

/* The fields in which b differs from a ("count, datatype"); "" when none. */
static void fp_diff(const struct argcheck_fp* a, const struct argcheck_fp* b, char* buf,
                    size_t len) {
  size_t used = 0;
  buf[0] = '\0';
#define DIFF(field, name)                 \
  if (a->field != b->field && used < len) \
    used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "", name);
  DIFF(seq, "sequence");
  DIFF(kind, "collective");
  DIFF(count, "count");
  DIFF(dtype, "datatype");
  DIFF(op, "op");
  DIFF(root, "root");
#undef DIFF
  if ((a->gsize != b->gsize || a->gidx != b->gidx) && used < len)
    snprintf(buf + used, len - used, "%sgrouping", used ? ", " : "");
}

/* All-to-all-v whose pair sums differ: the first pair whose counts do not
 * match, when the counts were gathered (all_v: rank r's 2 n counts at
 * all_v + 2 n r, sends then receives). */
static void v_pair(int n, const uint64_t* all_v, char* buf, size_t len) {
  for (int i = 0; i < n && all_v; i++)
    for (int p = 0; p < n; p++) {
      const uint64_t* vi = all_v + 2 * (size_t)n * (size_t)i;
      const uint64_t* vp = all_v + 2 * (size_t)n * (size_t)p;
      if (vi[p] == vp[n + i]) continue;
      snprintf(buf, len,
               "rank %d sends %llu elements to rank %d, which expects %llu from it (its "
               "recvcounts[%d])",
               i, (unsigned long long)vi[p], p, (unsigned long long)vp[n + i], i);
      return;
    }
  snprintf(buf, len,
           "the send and receive counts do not pair up (some rank's sendcounts[p] is not rank "
           "p's recvcounts of it; with more than %d ranks the check does not say which)",
           ARGCHECK_MAX_V);
}

/* Every rank's fingerprint equals rank 0's. */
static int fps_agree(const struct argcheck_rec* r) {
  char fields[96];
  for (int i = 1; i < r->comm->nranks; i++) {
    fp_diff(&r->all[0], &r->all[i], fields, sizeof(fields));
    if (fields[0]) return 0;
  }
  return 1;
}

/* Every rank calls the same all-to-all-v, and the pair sums over the ranks
 * differ: decided from the gathered fingerprints alone, so every rank
 * decides alike (and so joins the counts' all-gather alike). */
static int v_mismatch(const struct argcheck_rec* r) {
  if (r->all[0].kind != COLL_ALLTOALLV || !fps_agree(r)) return 0;
  uint64_t s = 0, rr = 0;
  for (int i = 0; i < r->comm->nranks; i++) s += r->all[i].vsend, rr += r->all[i].vrecv;
  return s != rr;
}

/* The verdict on every rank's fingerprint, the same on every rank: each is
 * compared with rank 0's. */
static void judge(struct argcheck_rec* rec) {
  const struct argcheck_fp* fps = rec->all;
  int n = rec->comm->nranks, shown = 0, differ = 0;
  struct argcheck_verdict* out = &rec->verdict;
  char mine[128], theirs[128], fields[96];
  size_t used = 0;
  fp_describe(&fps[0], mine, sizeof(mine));
  for (int r = 1; r < n; r++) {
    fp_diff(&fps[0], &fps[r], fields, sizeof(fields));
    if (!fields[0]) continue;
    if (differ++ == 0)
      used = (size_t)snprintf(out->text, sizeof(out->text),
                              "the ranks disagree on the arguments of collective #%llu of the "
                              "communicator: rank 0 calls %s",
                              (unsigned long long)fps[0].seq, mine);
    if (shown < 4 && used < sizeof(out->text)) {
      fp_describe(&fps[r], theirs, sizeof(theirs));
      used += (size_t)snprintf(out->text + used, sizeof(out->text) - used,
                               "; rank %d calls %s (%s differs)", r, theirs, fields);
      shown++;
    }
  }
  if (differ > shown && used < sizeof(out->text))
    snprintf(out->text + used, sizeof(out->text) - used, "; %d more ranks differ", differ - shown);
  int vbad = 0;
  if (!differ && v_mismatch(rec)) {
    char pair[320];
    vbad = 1;
    v_pair(n, rec->all_v, pair, sizeof(pair));
    snprintf(out->text, sizeof(out->text),
             "the ranks disagree on the counts of collective #%llu of the communicator (%.60s): "
             "%.300s",
             (unsigned long long)fps[0].seq, mine, pair);
  }
  out->code = differ || vbad ? loomInvalidUsage : loomSuccess;
  if (!differ && !vbad) out->text[0] = '\0';
}

/* One all-gather per record on the calling thread (one launch, so that one
 * thread may drive several ranks of a communicator): each record's bytes
 * from send(rec) into recv(rec), len(rec) bytes per rank. Records with
 * len 0 take no part. */
static loomResult_t recs_gather(struct argcheck_rec* recs, int n,
                                const void* (*send)(const struct argcheck_rec*),
                                void* (*recv)(struct argcheck_rec*),
                                size_t (*len)(const struct argcheck_rec*)) {
  struct coll_task* tasks = calloc((size_t)n, sizeof(*tasks));
  if (!tasks) return err_set(recs[0].comm, loomSystemError, "out of memory");
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (recs[i].comm->nranks == 1 || len(&recs[i]) == 0) continue;
    struct coll_task* t = &tasks[k++];
    t->kind = COLL_ALLGATHER;
    t->comm = recs[i].comm;
    t->sendbuff = send(&recs[i]);
    t->recvbuff = recv(&recs[i]);
    t->count = len(&recs[i]);
    t->dtype = loomUint8;
    t->op = loomSum;
    t->mem = MEM_HOST;
  }
  if (k == 0) {
    free(tasks);
    return loomSuccess;
  }
  struct exec_launch* l = NULL;
  LOOM_CHECK(exec_launch_prepare(tasks, k, &l)); /* owns tasks */
  return exec_launch_run(l);
}

static const void* fp_send(const struct argcheck_rec* r) {
  return &r->fp;
}
static void* fp_recv(struct argcheck_rec* r) {
  return r->all;
}
static size_t fp_len(const struct argcheck_rec* r) {
  (void)r;
  return sizeof(struct argcheck_fp);
}
static const void* v_send(const struct argcheck_rec* r) {
  return r->v;
}
static void* v_recv(struct argcheck_rec* r) {
  return r->all_v;
}
/* Only where the pair sums disagree: every rank saw the same sums. */
static size_t v_len(const struct argcheck_rec* r) {
  return r->all_v ? (size_t)r->fp.nv * sizeof(uint64_t) : 0;
}

/* The calls of recs (one thread's, in call order) agree; else each failing
 * one's error on its communicator, and the first failure's code. */
static loomResult_t recs_run(struct argcheck_rec* recs, int n) {
  loomResult_t res = loomSuccess;
  for (int i = 0; i < n && res == loomSuccess; i++) {
    recs[i].all = calloc((size_t)recs[i].comm->nranks, sizeof(*recs[i].all));
    if (!recs[i].all) res = err_set(recs[i].comm, loomSystemError, "out of memory");
  }
  if (res == loomSuccess) res = recs_gather(recs, n, fp_send, fp_recv, fp_len);
  for (int i = 0; i < n && res == loomSuccess; i++) {
    struct argcheck_rec* r = &recs[i];
    if (r->comm->nranks == 1) r->all[0] = r->fp;
    if (r->fp.nv && v_mismatch(r)) {
      r->all_v = malloc((size_t)r->comm->nranks * (size_t)r->fp.nv * sizeof(uint64_t));
      if (!r->all_v) res = err_set(r->comm, loomSystemError, "out of memory");
    }
  }
  if (res == loomSuccess) res = recs_gather(recs, n, v_send, v_recv, v_len);
  if (res != loomSuccess) {
    /* The exchange itself failed (a peer died or never called, the
     * deadline): the executor's text says why; say which call it was. */
    char why[LOOM_ERR_LEN];
    snprintf(why, sizeof(why), "%s", err_thread_last());
    for (int i = 0; i < n; i++) {
      recs[i].verdict.code = res;
      err_set(recs[i].comm, res, "argument check of %s (collective #%llu of the communicator): %s",
              recs[i].fn, (unsigned long long)recs[i].fp.seq, why);
    }
    return res;
  }
  loomResult_t first = loomSuccess;
  for (int i = 0; i < n; i++) {
    struct argcheck_rec* r = &recs[i];
    judge(r);
    if (r->verdict.code == loomSuccess) continue;
    err_set(r->comm, loomInvalidUsage, "invalid usage: %s: %s", r->fn, r->verdict.text);
    if (first == loomSuccess) first = loomInvalidUsage;
  }
  return first;
}

static void recs_free(struct argcheck_rec* recs, int n) {
  for (int i = 0; i < n; i++) {
    free(recs[i].v);
    free(recs[i].all);
    free(recs[i].all_v);
  }
}

loomResult_t argcheck_call(const char* fn, const struct coll_task* t, int in_group) {
  if (!in_group) {
    struct argcheck_rec rec;
    loomResult_t r = rec_fill(&rec, fn, t);
    if (r == loomSuccess) r = recs_run(&rec, 1);
    recs_free(&rec, 1);
    return r;
  }
  if (npend == pend_cap) {
    int cap = pend_cap ? 2 * pend_cap : 8;
    struct argcheck_rec* p = realloc(pend, (size_t)cap * sizeof(*p));
    if (!p) return err_set(t->comm, loomSystemError, "out of memory");
    pend = p;
    pend_cap = cap;
  }
  LOOM_CHECK(rec_fill(&pend[npend], fn, t));
  npend++;
  return loomSuccess;
}

/* The group's shape on each communicator: how many checked calls it has
 * there, and each call's place among them. */
static void recs_group_shape(struct argcheck_rec* recs, int n) {
  for (int i = 0; i < n; i++) {
    int size = 0, idx = 0;
    for (int j = 0; j < n; j++) {
      if (recs[j].comm != recs[i].comm) continue;
      idx += j < i;
      size++;
    }
    recs[i].fp.gsize = size;
    recs[i].fp.gidx = idx;
  }
}

/* The communicator failed its check in this group. */
static int comm_refused(const struct argcheck_rec* recs, int n, const struct loom_comm* comm) {
  for (int i = 0; i < n; i++)
    if (recs[i].comm == comm && recs[i].verdict.code != loomSuccess) return 1;
  return 0;
}

loomResult_t argcheck_group_end(struct coll_task* tasks, int* ntasks) {
  if (npend == 0) return loomSuccess;
  recs_group_shape(pend, npend);
  loomResult_t r = recs_run(pend, npend);
  if (r != loomSuccess) {
    /* Drop the tasks of the communicators that failed; those of the others
     * run, as their peers, which saw them pass, expect. */
    int kept = 0;
    for (int i = 0; i < *ntasks; i++) {
      if (comm_refused(pend, npend, tasks[i].comm)) {
        free(tasks[i].v);
        continue;
      }
      tasks[kept++] = tasks[i];
    }
    *ntasks = kept;
  }
  recs_free(pend, npend);
  free(pend);
  pend = NULL;
  npend = pend_cap = 0;
  return r;
}
