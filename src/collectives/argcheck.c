/* argcheck.c - LOOM_CHECK_ARGS (config.checkArgs): before a collective
 * runs, its ranks agree on its arguments, so that a rank that passes another
 * count, datatype, op or root than its peers gets loomInvalidUsage naming
 * the ranks and the fields, on every rank, instead of a wrong result or a
 * timeout.
 *
 * Each call of a collective (count 0 included) gets the communicator's next
 * sequence number and a fingerprint: the collective, count, datatype, op
 * (built in, or "PreMulSum": ops' handles differ between ranks), root, and
 * for all-to-all-v two sums over its peers of a 64-bit hash of (from, to,
 * count), one of the send counts and one of the receive counts: the counts
 * pair up (rank i's sendcounts[p] is rank p's recvcounts[i] for every i, p)
 * exactly when the two sums over all ranks are equal, up to a 2^-64 chance.
 * With up to ARGCHECK_MAX_V ranks the counts themselves travel too, so that
 * a mismatch names the pair.
 *
 * The exchange goes through the bootstrap's rank-to-rank messages: every
 * rank sends its fingerprint to rank 0, which compares them with its own and
 * sends every rank the verdict. It runs on the calling thread at call time
 * (blocking until every rank has called: the mode's cost, measured in
 * docs/PERFORMANCE.md), or, inside a group, at loomGroupEnd for all the
 * group's calls together, in phases (every send first, then rank 0's
 * verdicts, then the receipts), so that one thread may drive several ranks
 * of one communicator in a group. On a mismatch nothing of the call (or the
 * group) is launched and the communicator stays usable. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "core/bootstrap.h"
#include "core/checks.h"
#include "core/dtype.h"
#include "core/util.h"

/* Bootstrap tags: below comm_shrink.c's 0xfff00000 range. */
#define ARGCHECK_TAG 0xffe00000u
/* All-to-all-v counts travel with the fingerprint up to this many ranks. */
#define ARGCHECK_MAX_V 256
/* A rank other than 0 waits for the verdict this much longer than rank 0
 * waits for the fingerprints, so that rank 0's word on a rank that never
 * came arrives before its own deadline. */
#define ARGCHECK_GRACE_MS 2000

static const char* const kind_text[] = {
#define COLL(id, token, text, flags) text,
#include "core/colls.def"
#undef COLL
    "send", "receive"};
_Static_assert(sizeof(kind_text) / sizeof(kind_text[0]) == COLL_KIND_COUNT, "one text a kind");

/* On the wire between ranks of one build. */
struct argcheck_fp {
  uint64_t seq; /* the communicator's checked calls before this one */
  uint64_t count;
  uint64_t vsend, vrecv; /* all-to-all-v: the pair-hash sums */
  int32_t kind, dtype, op, root;
  int32_t nv; /* all-to-all-v: 2 n counts follow (send, then receive), or 0 */
  int32_t pad;
};

struct argcheck_verdict {
  uint64_t seq;
  int32_t code; /* loomSuccess, loomInvalidUsage, or the error that stopped rank 0 */
  char text[476];
};

struct argcheck_rec {
  struct loom_comm* comm;
  const char* fn;
  struct argcheck_fp fp;
  uint64_t* v; /* nv counts, or NULL */
  struct argcheck_verdict verdict;
  int done; /* verdict known */
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
  r->fp.seq = comm->coll->check_seq++;
  r->fp.kind = (int32_t)t->kind;
  r->fp.count = t->kind == COLL_ALLTOALLV ? 0 : t->count;
  r->fp.dtype = (int32_t)t->dtype;
  r->fp.op = redop_is_premul(t->op) ? (int32_t)loomNumOps : (int32_t)t->op;
  r->fp.root = t->root;
  if (t->kind != COLL_ALLTOALLV) return loomSuccess;
  int n = comm->nranks, me = comm->rank;
  const size_t* sc = t->v;
  const size_t* rc = t->v + 2 * n;
  for (int p = 0; p < n; p++) {
    r->fp.vsend += pair_hash(r->fp.seq, me, p, sc[p]);
    r->fp.vrecv += pair_hash(r->fp.seq, p, me, rc[p]);
  }
  if (n > ARGCHECK_MAX_V) return loomSuccess;
  r->v = malloc(2 * (size_t)n * sizeof(uint64_t));
  if (!r->v) return err_set(comm, loomSystemError, "out of memory");
  for (int p = 0; p < n; p++) r->v[p] = sc[p], r->v[n + p] = rc[p];
  r->fp.nv = 2 * n;
  return loomSuccess;
}

/* "all-reduce of 1024 float32 (sum)", as rank r's fingerprint says. */
static void fp_describe(const struct argcheck_fp* f, char* buf, size_t len) {
  const char* kind = f->kind >= 0 && f->kind < COLL_KIND_COUNT ? kind_text[f->kind] : "?";
  int rooted = f->kind == COLL_BROADCAST || f->kind == COLL_REDUCE || f->kind == COLL_GATHER ||
               f->kind == COLL_SCATTER;
  int reduces = f->kind == COLL_ALLREDUCE || f->kind == COLL_REDUCE ||
                f->kind == COLL_REDUCESCATTER;
  char root[32] = "", op[32] = "";
  if (rooted) snprintf(root, sizeof(root), ", root %d", (int)f->root);
  if (reduces) snprintf(op, sizeof(op), ", %s", redop_name((loomRedOp_t)f->op));
  if (f->kind == COLL_ALLTOALLV)
    snprintf(buf, len, "%s of %s", kind, dtype_name((loomDataType_t)f->dtype));
  else
    snprintf(buf, len, "%s of %llu %s%s%s", kind, (unsigned long long)f->count,
             dtype_name((loomDataType_t)f->dtype), op, root);
}

/* The fields in which b differs from a ("count, datatype"); "" when none. */
static void fp_diff(const struct argcheck_fp* a, const struct argcheck_fp* b, char* buf,
                    size_t len) {
  size_t used = 0;
  buf[0] = '\0';
#define DIFF(field, name)                                                                      \
  if (a->field != b->field && used < len)                                                     \
    used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "", name);
  DIFF(seq, "sequence");
  DIFF(kind, "collective");
  DIFF(count, "count");
  DIFF(dtype, "datatype");
  DIFF(op, "op");
  DIFF(root, "root");
#undef DIFF
}

/* Rank 0, all-to-all-v whose pair sums differ: the first pair whose counts
 * do not match, when the counts came along (v[r]: rank r's 2 n counts). */
static void v_pair(int n, uint64_t* const* v, char* buf, size_t len) {
  for (int i = 0; i < n; i++)
    for (int p = 0; p < n; p++) {
      if (!v[i] || !v[p] || v[i][p] == v[p][n + i]) continue;
      snprintf(buf, len,
               "rank %d sends %llu elements to rank %d, which expects %llu from it (its "
               "recvcounts[%d])",
               i, (unsigned long long)v[i][p], p, (unsigned long long)v[p][n + i], i);
      return;
    }
  snprintf(buf, len,
           "the send and receive counts do not pair up (some rank's sendcounts[p] is not rank "
           "p's recvcounts of it; with more than %d ranks the check does not say which)",
           ARGCHECK_MAX_V);
}

/* Rank 0's verdict on the fingerprints fps (fps[0] its own). */
static void judge(struct argcheck_rec* rec, const struct argcheck_fp* fps, uint64_t* const* v) {
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
    snprintf(out->text + used, sizeof(out->text) - used, "; %d more ranks differ",
             differ - shown);
  int vbad = 0;
  if (!differ && fps[0].kind == COLL_ALLTOALLV) {
    uint64_t s = 0, rr = 0;
    for (int r = 0; r < n; r++) s += fps[r].vsend, rr += fps[r].vrecv;
    if (s != rr) {
      vbad = 1;
      char pair[320];
      v_pair(n, v, pair, sizeof(pair));
      snprintf(out->text, sizeof(out->text),
               "the ranks disagree on the counts of collective #%llu of the communicator (%.60s): %.300s",
               (unsigned long long)fps[0].seq, mine, pair);
    }
  }
  out->seq = fps[0].seq;
  out->code = differ || vbad ? loomInvalidUsage : loomSuccess;
  if (!differ && !vbad) out->text[0] = '\0';
}

/* Rank 0: the fingerprint of rank r for rec, skipping stale ones (a call
 * that came after rank 0 had given up on it); its counts into v (nv of
 * them) when they came along, else *v_ok is 0. */
static loomResult_t fp_recv(struct argcheck_rec* rec, int r, struct argcheck_fp* fp, uint64_t* v,
                            int* v_ok, const struct deadline* dl) {
  struct loom_comm* comm = rec->comm;
  size_t cap = sizeof(*fp) + (size_t)rec->fp.nv * sizeof(uint64_t);
  unsigned char* buf = malloc(cap);
  if (!buf) return err_set(comm, loomSystemError, "out of memory");
  loomResult_t res;
  size_t got = 0;
  *v_ok = 0;
  do {
    res = boot_recv(comm, r, ARGCHECK_TAG, buf, cap, &got, dl);
    if (res == loomSuccess && got < sizeof(*fp))
      res = err_set(comm, loomInternalError, "argument check: rank %d sent %zu bytes", r, got);
    if (res == loomSuccess) memcpy(fp, buf, sizeof(*fp));
  } while (res == loomSuccess && fp->seq < rec->fp.seq);
  if (res == loomSuccess && v && fp->nv == rec->fp.nv &&
      got == sizeof(*fp) + (size_t)fp->nv * sizeof(uint64_t)) {
    memcpy(v, buf + sizeof(*fp), (size_t)fp->nv * sizeof(uint64_t));
    *v_ok = 1;
  }
  free(buf);
  return res;
}

static void verdict_error(struct argcheck_rec* rec, loomResult_t code, const char* what) {
  rec->verdict.seq = rec->fp.seq;
  rec->verdict.code = (int32_t)code;
  snprintf(rec->verdict.text, sizeof(rec->verdict.text), "%s", what);
  rec->done = 1;
}

/* Rank 0's part for rec: every fingerprint, the verdict, and the verdict
 * sent to every rank (also when a rank failed to send: the others must not
 * wait for a verdict that never comes). */
static void rank0_run(struct argcheck_rec* rec) {
  struct loom_comm* comm = rec->comm;
  int n = comm->nranks;
  struct argcheck_fp* fps = calloc((size_t)n, sizeof(*fps));
  uint64_t** v = calloc((size_t)n, sizeof(*v));
  if (!fps || !v) {
    verdict_error(rec, err_set(comm, loomSystemError, "out of memory"), "rank 0 ran out of memory");
    goto send;
  }
  fps[0] = rec->fp;
  v[0] = rec->v;
  struct deadline dl = deadline_in_ms(comm->timeout_ms);
  for (int r = 1; r < n; r++) {
    int v_ok = 0;
    if (rec->fp.nv) v[r] = malloc((size_t)rec->fp.nv * sizeof(uint64_t));
    loomResult_t res = fp_recv(rec, r, &fps[r], v[r], &v_ok, &dl);
    if (!v_ok) free(v[r]), v[r] = NULL;
    if (res == loomSuccess) continue;
    char what[400];
    if (res == loomTimeout) {
      snprintf(what, sizeof(what),
               "rank %d did not call collective #%llu of the communicator (%s) within %lld ms",
               r, (unsigned long long)rec->fp.seq, kind_text[rec->fp.kind], comm->timeout_ms);
    } else {
      snprintf(what, sizeof(what), "rank 0 could not hear from rank %d: %s", r,
               loomGetLastError(comm_handle(comm)));
    }
    verdict_error(rec, res, what);
    break;
  }
  if (!rec->done) {
    judge(rec, fps, v);
    rec->done = 1;
  }
send:
  for (int r = 1; r < n; r++) {
    struct deadline sdl = deadline_in_ms(comm->timeout_ms);
    (void)boot_send(comm, r, ARGCHECK_TAG, &rec->verdict, sizeof(rec->verdict), &sdl);
  }
  /* A wait that ran out breaks the communicator, as any other does; only
   * after the verdict went out (a broken communicator sends nothing). */
  if (rec->verdict.code == loomTimeout)
    comm_set_failed(comm, -1, loomTimeout, "argument check: %s", rec->verdict.text);
  if (v)
    for (int r = 1; r < n; r++) free(v[r]);
  free(v);
  free(fps);
}

/* A rank other than 0: rank 0's verdict on rec, skipping stale ones. */
static void verdict_recv(struct argcheck_rec* rec) {
  struct loom_comm* comm = rec->comm;
  struct deadline dl = deadline_in_ms(comm->timeout_ms + ARGCHECK_GRACE_MS);
  loomResult_t res;
  do {
    res = boot_recv(comm, 0, ARGCHECK_TAG, &rec->verdict, sizeof(rec->verdict), NULL, &dl);
  } while (res == loomSuccess && rec->verdict.seq < rec->fp.seq);
  if (res == loomSuccess) {
    rec->verdict.text[sizeof(rec->verdict.text) - 1] = '\0';
  } else {
    char what[400];
    snprintf(what, sizeof(what), "no verdict from rank 0 on collective #%llu (%s): %s",
             (unsigned long long)rec->fp.seq, kind_text[rec->fp.kind],
             loomGetLastError(comm_handle(comm)));
    verdict_error(rec, res, what);
    if (res == loomTimeout) comm_set_failed(comm, -1, loomTimeout, "argument check: %s", what);
  }
  rec->done = 1;
}

static void rec_send(struct argcheck_rec* rec) {
  struct loom_comm* comm = rec->comm;
  size_t vbytes = (size_t)rec->fp.nv * sizeof(uint64_t), len = sizeof(rec->fp) + vbytes;
  unsigned char* buf = malloc(len);
  loomResult_t res = buf ? loomSuccess : err_set(comm, loomSystemError, "out of memory");
  if (buf) {
    memcpy(buf, &rec->fp, sizeof(rec->fp));
    if (vbytes) memcpy(buf + sizeof(rec->fp), rec->v, vbytes);
    struct deadline dl = deadline_in_ms(comm->timeout_ms);
    res = boot_send(comm, 0, ARGCHECK_TAG, buf, len, &dl);
    free(buf);
  }
  if (res != loomSuccess) {
    char what[400];
    snprintf(what, sizeof(what), "could not send its arguments to rank 0: %s",
             loomGetLastError(comm_handle(comm)));
    verdict_error(rec, res, what);
  }
}

/* Runs the exchange for recs (one thread's calls, in call order) and sets
 * each failing call's error on its communicator; the first failure's code. */
static loomResult_t recs_run(struct argcheck_rec* recs, int n) {
  for (int i = 0; i < n; i++) comm_boot_enter(recs[i].comm);
  for (int i = 0; i < n; i++) {
    struct loom_comm* comm = recs[i].comm;
    if (comm->nranks == 1) recs[i].done = 1; /* verdict zeroed: success */
    else if (comm->rank != 0) rec_send(&recs[i]);
  }
  for (int i = 0; i < n; i++)
    if (!recs[i].done && recs[i].comm->rank == 0) rank0_run(&recs[i]);
  for (int i = 0; i < n; i++)
    if (!recs[i].done) verdict_recv(&recs[i]);
  loomResult_t first = loomSuccess;
  for (int i = 0; i < n; i++) {
    struct argcheck_rec* r = &recs[i];
    if (r->verdict.code == loomSuccess) continue;
    loomResult_t code = (loomResult_t)r->verdict.code;
    err_set(r->comm, code, "%s: %s: %s", code == loomInvalidUsage ? "invalid usage" : "argument check",
            r->fn, r->verdict.text);
    if (first == loomSuccess) first = code;
  }
  for (int i = 0; i < n; i++) comm_boot_leave(recs[i].comm);
  return first;
}

static void recs_free(struct argcheck_rec* recs, int n) {
  for (int i = 0; i < n; i++) free(recs[i].v);
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

loomResult_t argcheck_group_end(void) {
  if (npend == 0) return loomSuccess;
  loomResult_t r = recs_run(pend, npend);
  recs_free(pend, npend);
  free(pend);
  pend = NULL;
  npend = pend_cap = 0;
  return r;
}
