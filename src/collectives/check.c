/* check.c - proves a set of plans correct by symbolic simulation.
 *
 * No data moves: every element of every buffer holds a symbol saying which
 * ranks' contributions of which source element it carries. The plans of all
 * ranks run together under rendezvous semantics (a send and its receive
 * complete only once both are posted in their ranks' current steps), once
 * with distinct send and receive buffers and once in place (where the kind
 * has an in-place form), where SEND and RECV are two views of one array
 * laid out as the API's in-place rule says, so the hazard and data checks
 * need no special case for aliasing.
 *
 * The simulation is the same for every collective; what differs per kind is
 * said in four places (the "Per kind" section): the row of `kinds` (name,
 * whether it reduces, which buffers only the root has), buf_need (sizes),
 * inplace_at (how SEND and RECV share storage in place) and expect (what
 * each rank must end with). A new collective adds a case to each.
 *
 * Buffers only the root has (broadcast's and scatter's SEND, reduce's and
 * gather's RECV) may be NULL elsewhere: a plan may declare them there with
 * 0 elements or the full size, and any op that touches one on another rank
 * is an error, whatever the data would have been.
 *
 * Direct plans (peer reads between syncs): a sync completes when every
 * rank has arrived at it, and the syncs a rank has passed are its phase.
 * Every element remembers the phase its owner last wrote it in and the
 * latest phase a peer read it in; a peer read of an element its owner
 * writes in the same phase (before or after the read) is a race, as is a
 * read before the first sync (no addresses yet) or after the last (the
 * owner may have returned).
 *
 * Plans with lines (lines.c): each rank's lines are one more array of
 * symbols, which its put fills; a read of a peer's lines waits (stands alone
 * in its step, retried when any rank puts) until every element it reads is
 * there. A rank puts exactly once per call and reads every other rank's
 * lines or waits to see its put (OP_LINES_SEEN, which concerns an earlier
 * call and so is no wait here): what lets a rank reuse an area
 * TP_LINES_AREAS calls later. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/plan.h"

/* What one element holds. */
struct sym {
  uint64_t mask; /* bit q: rank q's contribution is in it */
  int32_t idx;   /* which source element; -1: garbage */
  uint8_t flags; /* SYM_SCALED, SYM_DIVIDED */
};
enum { SYM_SCALED = 1, SYM_DIVIDED = 2 };
static const struct sym garbage = {0, -1, 0};

struct link { /* the other end of a send or receive */
  int32_t rank;
  uint32_t op;
};

struct rank_sim {
  const struct plan* p;
  struct sym* store[PB_COUNT]; /* the memory of each buffer */
  struct sym* view[PB_COUNT];  /* where each plan buffer starts: in place, SEND and RECV share */
  size_t op_base;              /* global id of the plan's op 0 */
  uint32_t cur;                /* current step */
  uint32_t pending;            /* its sends and receives (and sync) not yet done */
  int entered;                 /* local ops ran and comm ops are posted */
  uint32_t phase;              /* syncs passed */
  struct sym* lines;           /* its lines (plan's lines_count) */
  uint8_t* lines_put;          /* per element of lines: put in this call */
  int lines_wait;              /* its current step waits for a peer's lines */
};

struct kind_desc {
  const char* name;
  unsigned flags; /* enum colls_flags */
};
static const struct kind_desc kinds[CHECK_KIND_COUNT] = {
#define COLL(id, token, text, flags) [CHECK_##id] = {text, flags},
#include "core/colls.def"
#undef COLL
};

enum { POSTED = 1, DONE = 2 }; /* state of an op */

struct sim {
  enum check_kind kind_id;
  const struct kind_desc* kind;
  const struct plan* plans;
  int nranks, inplace, root;
  size_t count;
  uint64_t all;       /* every rank's bit */
  uint8_t want_flags; /* inferred from the plans: premul, avg */
  /* all-to-all-v, n * n each, [src * n + dst]: elements, src's send
   * displacement for dst, dst's receive displacement for src; then the
   * SEND (row) and RECV (column) sizes, n each. */
  const size_t* a2av;
  size_t *sdispl, *rdispl, *row, *col;
  struct rank_sim* rk;
  struct sym* mem;  /* every rank's buffers, one block */
  uint32_t* wphase; /* per element of mem: 1 + the phase its owner last wrote it in, 0: never */
  uint32_t* rphase; /* per element of mem: 1 + the last phase a peer read it in, 0: never */
  int* arrived;     /* per sync: ranks that reached it */
  uint32_t nsyncs;  /* syncs in every rank's plan */
  struct sym* want; /* one rank's expected RECV */
  struct sym* lines_mem;
  uint8_t* lines_put_mem;
  struct link* link; /* by global op id */
  uint8_t* state;    /* by global op id: POSTED, DONE */
  int *stack, nstack;
  uint32_t max_step_ops;
  char* why;
  size_t why_len;
};

/* ---- Per kind ---- */

/* Elements rank r's SEND or RECV holds (where it has the buffer). */
static size_t buf_need(const struct sim* s, int r, unsigned b) {
  size_t c = s->count;
  int blocks; /* 1: the buffer holds one block per rank */
  switch (s->kind_id) {
    case CHECK_ALLGATHER:
    case CHECK_GATHER:
      blocks = b == PB_RECV;
      break;
    case CHECK_REDUCESCATTER:
    case CHECK_SCATTER:
      blocks = b == PB_SEND;
      break;
    case CHECK_ALLTOALL:
      blocks = 1;
      break;
    case CHECK_ALLTOALLV:
      return b == PB_SEND ? s->row[r] : s->col[r];
    default:
      blocks = 0;
      break;
  }
  return blocks ? c * (size_t)s->nranks : c;
}

/* 1 when rank r has no buffer b: the user may pass NULL for it. */
static int absent(const struct sim* s, int r, unsigned b) {
  if (r == s->root) return 0;
  return (b == PB_SEND && (s->kind->flags & COLLF_ROOT_SEND)) ||
         (b == PB_RECV && (s->kind->flags & COLLF_ROOT_RECV));
}

/* Whether rank r's call may be in place, and then where SEND and RECV start
 * in the storage they share (SEND's and RECV's stores, which lie one after
 * the other and hold both, since one of them contains the other). */
static int inplace_at(const struct sim* s, int r, size_t* send_off, size_t* recv_off) {
  size_t c = s->count;
  *send_off = *recv_off = 0;
  switch (s->kind_id) {
    case CHECK_ALLREDUCE:
    case CHECK_ALLTOALL:
      return 1;
    case CHECK_BROADCAST:
    case CHECK_REDUCE:
      return r == s->root;
    case CHECK_ALLGATHER:
      *send_off = (size_t)r * c;
      return 1;
    case CHECK_REDUCESCATTER:
      *recv_off = (size_t)r * c;
      return 1;
    case CHECK_GATHER:
      *send_off = (size_t)s->root * c;
      return r == s->root;
    case CHECK_SCATTER:
      *recv_off = (size_t)s->root * c;
      return r == s->root;
    default:
      return 0; /* all-to-all-v has no in-place form */
  }
}

static struct sym mk(int q, size_t idx, uint8_t flags) {
  return (struct sym){(uint64_t)1 << q, (int32_t)idx, flags};
}

/* Fills want[0 .. RECV's size) with what rank r must end with; returns 0
 * when r's RECV is not checked (it has none). */
static int expect(const struct sim* s, int r, struct sym* want) {
  size_t c = s->count;
  int n = s->nranks;
  uint8_t f = s->want_flags;
  switch (s->kind_id) {
    case CHECK_REDUCE:
      if (r != s->root) return 0;
      /* fall through */
    case CHECK_ALLREDUCE:
      for (size_t i = 0; i < c; i++) want[i] = (struct sym){s->all, (int32_t)i, f};
      return 1;
    case CHECK_BROADCAST:
      for (size_t i = 0; i < c; i++) want[i] = mk(s->root, i, 0);
      return 1;
    case CHECK_GATHER:
      if (r != s->root) return 0;
      /* fall through */
    case CHECK_ALLGATHER:
      for (int q = 0; q < n; q++)
        for (size_t i = 0; i < c; i++) want[(size_t)q * c + i] = mk(q, i, 0);
      return 1;
    case CHECK_REDUCESCATTER:
      for (size_t i = 0; i < c; i++)
        want[i] = (struct sym){s->all, (int32_t)((size_t)r * c + i), f};
      return 1;
    case CHECK_ALLTOALL:
      for (int q = 0; q < n; q++)
        for (size_t i = 0; i < c; i++) want[(size_t)q * c + i] = mk(q, (size_t)r * c + i, 0);
      return 1;
    case CHECK_ALLTOALLV:
      for (int q = 0; q < n; q++) {
        size_t k = (size_t)q * n + r;
        for (size_t i = 0; i < s->a2av[k]; i++) want[s->rdispl[k] + i] = mk(q, s->sdispl[k] + i, 0);
      }
      return 1;
    case CHECK_SCATTER:
      for (size_t i = 0; i < c; i++) want[i] = mk(s->root, (size_t)r * c + i, 0);
      return 1;
    default:
      return 0;
  }
}

/* ---- Helpers ---- */

/* Keeps the first error only: later ones are usually its echoes. */
static int fail(struct sim* s, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct sim* s, const char* fmt, ...) {
  if (s->why == NULL || s->why_len == 0 || s->why[0] != '\0') return -1;
  int n = snprintf(s->why, s->why_len, "%s", s->inplace ? "in-place: " : "");
  if (n < 0 || (size_t)n >= s->why_len) return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->why + n, s->why_len - (size_t)n, fmt, ap);
  va_end(ap);
  return -1;
}

static int lowest_rank(uint64_t mask) {
  return __builtin_ctzll(mask);
}
static int is_comm(unsigned kind) {
  return kind == OP_SEND || kind == OP_RECV || kind == OP_RECV_REDUCE;
}
static int is_peer(unsigned kind) {
  return kind == OP_PEER_COPY || kind == OP_PEER_REDUCE;
}
static int is_lines_read(unsigned kind) {
  return kind == OP_LINES_COPY || kind == OP_LINES_REDUCE;
}
/* Waits for a peer's put of an earlier call: touches no buffer. */
static int is_lines_seen(unsigned kind) {
  return kind == OP_LINES_SEEN;
}
static int is_lines(unsigned kind) {
  return kind == OP_LINES_PUT || is_lines_read(kind) || is_lines_seen(kind);
}
static int reads_src(unsigned kind) {
  return kind != OP_RECV && kind != OP_SYNC && kind != OP_LINES_SEEN;
}
static int writes_dst(unsigned kind) {
  return kind != OP_SEND && kind != OP_SYNC && kind != OP_LINES_SEEN;
}
static struct sym* at(struct sim* s, int r, struct plan_ref ref) {
  return s->rk[r].view[ref.buf] + ref.off;
}
static size_t gid(const struct sim* s, struct link l) {
  return s->rk[l.rank].op_base + l.op;
}
/* The step of a plan that holds op o (steps are sorted by op_begin). */
static uint32_t step_of(const struct plan* p, uint32_t o) {
  uint32_t lo = 0, hi = p->nsteps;
  while (hi - lo > 1) {
    uint32_t mid = lo + (hi - lo) / 2;
    *(p->steps[mid].op_begin <= o ? &lo : &hi) = mid;
  }
  return lo;
}
/* Element i of ref, for messages. */
#define AT(ref, i) plan_buf_name((ref).buf), (ref).off + (i)

/* ---- Static validation: shapes, bounds, peers ---- */

/* owner: the rank whose buffer ref names (a peer op's source is the peer's). */
static int ref_ok(struct sim* s, int r, uint32_t t, const struct plan_op* op, struct plan_ref ref,
                  int owner) {
  if (ref.buf >= PB_COUNT)
    return fail(s, "rank %d step %u: %s names buffer %u", r, t, plan_op_name(op->kind), ref.buf);
  size_t have = s->plans[owner].buf_count[ref.buf];
  if (ref.off <= have && op->count <= have - ref.off) return 0;
  return fail(s, "rank %d step %u: %s touches %s[%zu..%zu), out of bounds (%zu elements)", r, t,
              plan_op_name(op->kind), AT(ref, 0), ref.off + op->count, have);
}

static int op_ok(struct sim* s, int r, uint32_t t, const struct plan_op* op) {
  const char* name = plan_op_name(op->kind);
  if (op->kind >= OP_KIND_COUNT) return fail(s, "rank %d step %u: unknown op %u", r, t, op->kind);
  if (op->count == 0) return fail(s, "rank %d step %u: %s of 0 elements", r, t, name);
  int with_peer =
      is_comm(op->kind) || is_peer(op->kind) || is_lines_read(op->kind) || is_lines_seen(op->kind);
  /* A rank reads its own lines like anyone's. */
  int self_ok = is_lines_read(op->kind);
  if (with_peer ? op->peer < 0 || op->peer >= s->nranks || (op->peer == r && !self_ok)
                : op->peer != -1)
    return fail(s, "rank %d step %u: %s with peer %d", r, t, name, op->peer);
  if (op->kind == OP_SYNC) return 0;
  if (is_lines_seen(op->kind)) {
    if (op->src.buf != PB_LINES || op->dst.buf != PB_LINES || op->src.off || op->dst.off ||
        op->count != 1)
      return fail(s, "rank %d step %u: %s names a buffer or elements, where it takes none", r, t,
                  name);
    return 0;
  }
  if (is_lines(op->kind)) {
    struct plan_ref ln = op->kind == OP_LINES_PUT ? op->dst : op->src;
    int owner = op->kind == OP_LINES_PUT ? r : op->peer;
    size_t have = s->plans[owner].lines_count;
    if (ln.buf != PB_LINES)
      return fail(s, "rank %d step %u: %s names %s, not the lines", r, t, name,
                  plan_buf_name(ln.buf));
    if (ln.off > have || op->count > have - ln.off)
      return fail(s, "rank %d step %u: %s touches rank %d's lines[%zu..%zu), out of bounds (%zu)",
                  r, t, name, owner, ln.off, ln.off + op->count, have);
  } else if (op->src.buf == PB_LINES || op->dst.buf == PB_LINES) {
    return fail(s, "rank %d step %u: %s names the lines", r, t, name);
  }
  if (!(s->kind->flags & COLLF_REDUCES) && (op->kind == OP_PREMUL || op->kind == OP_DIV))
    return fail(s, "rank %d step %u: %s in a %s plan, which reduces nothing", r, t, name,
                s->kind->name);
  /* Before the bounds: the buffer may be declared with 0 elements here. */
  int src_owner = is_peer(op->kind) ? op->peer : r;
  for (int w = 0; w < 2; w++) {
    struct plan_ref ref = w ? op->dst : op->src;
    int owner = w ? r : src_owner;
    if (ref.buf == PB_LINES) continue;
    if (!(w ? writes_dst(op->kind) : reads_src(op->kind)) || !absent(s, owner, ref.buf)) continue;
    return fail(s, "rank %d step %u: %s %s %s %s buffer, which only the root (rank %d) has in a %s",
                r, t, name, w ? "writes" : "reads", owner == r ? "the" : "a peer's",
                ref.buf == PB_SEND ? "send" : "receive", s->root, s->kind->name);
  }
  if (reads_src(op->kind) && !is_lines_read(op->kind) && ref_ok(s, r, t, op, op->src, src_owner))
    return -1;
  if (writes_dst(op->kind) && op->kind != OP_LINES_PUT && ref_ok(s, r, t, op, op->dst, r))
    return -1;
  if (writes_dst(op->kind) && op->dst.buf == PB_SEND) /* the API takes it as const */
    return fail(s, "rank %d step %u: %s writes the send buffer", r, t, name);
  /* The plans ask for premul or avg by holding such ops; the final state
   * must then show it on every element. */
  if (op->kind == OP_PREMUL) s->want_flags |= SYM_SCALED;
  if (op->kind == OP_DIV) s->want_flags |= SYM_DIVIDED;
  return 0;
}

/* Lines: one put at most, each read alone in its step, no syncs, sends or
 * receives beside them. */
static int lines_ok(struct sim* s, int r) {
  const struct plan* p = &s->plans[r];
  int puts = 0, lines = 0, other = 0;
  for (uint32_t t = 0; t < p->nsteps; t++) {
    const struct plan_step* st = &p->steps[t];
    for (uint32_t o = st->op_begin; o < st->op_end; o++) {
      unsigned kind = p->ops[o].kind;
      puts += kind == OP_LINES_PUT;
      lines |= is_lines(kind);
      other |= is_comm(kind) || kind == OP_SYNC;
      if ((is_lines_read(kind) || is_lines_seen(kind)) && st->op_end - st->op_begin != 1)
        return fail(s, "rank %d step %u: a read of lines shares its step with other ops", r, t);
    }
  }
  if (puts > 1) return fail(s, "rank %d: puts its lines %d times in one call", r, puts);
  /* Its put is what tells its peers that it finished its last call. */
  if (lines && puts == 0) return fail(s, "rank %d: a plan with lines that never puts its own", r);
  if (lines && other) return fail(s, "rank %d: a plan with lines also sends, receives or syncs", r);
  return 0;
}

/* In a plan with lines every rank reads every other rank's lines or sees
 * its put (lines.c says why: what lets a rank reuse an area
 * TP_LINES_AREAS calls later). */
static int lines_pairs_ok(struct sim* s) {
  int n = s->nranks;
  uint8_t* reads = calloc((size_t)n * (size_t)n, 1);
  if (!reads) return fail(s, "out of memory");
  for (int r = 0; r < n; r++) {
    const struct plan* p = &s->plans[r];
    for (uint32_t o = 0; o < p->nops; o++)
      if (is_lines_read(p->ops[o].kind) || is_lines_seen(p->ops[o].kind))
        reads[(size_t)r * n + p->ops[o].peer] = 1;
  }
  int rc = 0, any = 0;
  for (size_t i = 0; i < (size_t)n * n; i++) any |= reads[i];
  for (int q = 0; q < n && !rc && any; q++)
    for (int p = 0; p < n && !rc; p++)
      if (p != q && !reads[(size_t)q * n + p])
        rc = fail(s,
                  "rank %d never reads rank %d's lines nor sees its put: rank %d could "
                  "overwrite lines that another rank still reads",
                  q, p, q);
  free(reads);
  return rc;
}

/* Syncs stand alone in their step; peer reads lie between the first sync and
 * the last; direct plans hold no sends or receives. Counts the syncs. */
static int syncs_ok(struct sim* s, int r) {
  const struct plan* p = &s->plans[r];
  uint32_t seen = 0, total = 0;
  int comm = 0;
  for (uint32_t o = 0; o < p->nops; o++) {
    total += p->ops[o].kind == OP_SYNC;
    comm |= is_comm(p->ops[o].kind);
  }
  if (r == 0) s->nsyncs = total;
  if (total > 0 && comm) return fail(s, "rank %d: a plan with syncs also sends or receives", r);
  for (uint32_t t = 0; t < p->nsteps; t++) {
    const struct plan_step* st = &p->steps[t];
    for (uint32_t o = st->op_begin; o < st->op_end; o++) {
      unsigned kind = p->ops[o].kind;
      if (kind == OP_SYNC && st->op_end - st->op_begin != 1)
        return fail(s, "rank %d step %u: a sync shares its step with other ops", r, t);
      if (kind == OP_SYNC) seen++;
      if (is_peer(kind) && (seen == 0 || seen == total))
        return fail(s, "rank %d step %u: %s from rank %d %s", r, t, plan_op_name(kind),
                    p->ops[o].peer,
                    seen == 0 ? "before the first sync (its buffers are not known yet)"
                              : "after the last sync (it may have returned)");
    }
  }
  if (r > 0 && total != s->nsyncs)
    return fail(s, "rank %d has %u syncs, rank 0 has %u", r, total, s->nsyncs);
  return lines_ok(s, r);
}

static int plan_ok(struct sim* s, int r) {
  const struct plan* p = &s->plans[r];
  size_t want_send = buf_need(s, r, PB_SEND), want_recv = buf_need(s, r, PB_RECV);
  if (p->failed) return fail(s, "rank %d: the plan failed to build", r);
  if (p->rank != r || p->nranks != s->nranks)
    return fail(s, "plan %d says it is rank %d of %d", r, p->rank, p->nranks);
  /* A buffer the rank does not have may be declared empty. */
  int send_ok =
      p->buf_count[PB_SEND] == want_send || (absent(s, r, PB_SEND) && p->buf_count[PB_SEND] == 0);
  int recv_ok =
      p->buf_count[PB_RECV] == want_recv || (absent(s, r, PB_RECV) && p->buf_count[PB_RECV] == 0);
  if (!send_ok || !recv_ok)
    return fail(s, "rank %d: plan has send %zu recv %zu elements, %s needs %zu and %zu", r,
                p->buf_count[PB_SEND], p->buf_count[PB_RECV], s->kind->name, want_send, want_recv);
  for (int b = 0; b < PB_COUNT; b++)
    if (p->buf_count[b] > INT32_MAX) return fail(s, "rank %d: buffers too large to check", r);
  if (p->lines_count > INT32_MAX) return fail(s, "rank %d: lines too large to check", r);
  if (p->nops > 0 && (p->ops == NULL || p->steps == NULL || p->nsteps == 0))
    return fail(s, "rank %d: plan has ops but no steps", r);
  /* Steps tile the ops in order, as plan.c builds them: every op runs once. */
  for (uint32_t t = 0; t < p->nsteps; t++) {
    const struct plan_step* st = &p->steps[t];
    uint32_t want_begin = t ? p->steps[t - 1].op_end : 0;
    if (st->op_begin != want_begin || st->op_end < st->op_begin || st->op_end > p->nops)
      return fail(s, "rank %d step %u: ops [%u, %u) do not follow the step before", r, t,
                  st->op_begin, st->op_end);
    if (st->op_end - st->op_begin > s->max_step_ops) s->max_step_ops = st->op_end - st->op_begin;
    for (uint32_t o = st->op_begin; o < st->op_end; o++)
      if (op_ok(s, r, t, &p->ops[o])) return -1;
  }
  if (p->nsteps > 0 && p->steps[p->nsteps - 1].op_end != p->nops)
    return fail(s, "rank %d: ops past the last step", r);
  return syncs_ok(s, r);
}

/* ---- Matching: the k-th send a -> b meets b's k-th receive from a ---- */

/* Walks every send and receive in plan order. Without lists it counts them
 * per ordered pair (a * n + b) into the cursors; with lists the cursors
 * start at each pair's first slot and the ops are written there in order. */
static void pair_scan(struct sim* s, size_t* cur_send, size_t* cur_recv, struct link* sends,
                      struct link* recvs) {
  for (int r = 0; r < s->nranks; r++) {
    const struct plan* p = &s->plans[r];
    for (uint32_t o = 0; o < p->nops; o++) {
      const struct plan_op* op = &p->ops[o];
      if (!is_comm(op->kind)) continue;
      int send = op->kind == OP_SEND;
      size_t k = send ? (size_t)r * s->nranks + op->peer : (size_t)op->peer * s->nranks + r;
      struct link* list = send ? sends : recvs;
      size_t* cur = send ? cur_send : cur_recv;
      if (list) list[cur[k]] = (struct link){r, o};
      cur[k]++;
    }
  }
}

static int link_pair(struct sim* s, struct link snd, struct link rcv) {
  const struct plan_op* so = &s->plans[snd.rank].ops[snd.op];
  const struct plan_op* ro = &s->plans[rcv.rank].ops[rcv.op];
  if (so->count != ro->count)
    return fail(s,
                "rank %d step %u sends %zu elements to rank %d, whose receive (step %u) takes %zu",
                snd.rank, step_of(&s->plans[snd.rank], snd.op), so->count, rcv.rank,
                step_of(&s->plans[rcv.rank], rcv.op), ro->count);
  s->link[gid(s, snd)] = rcv;
  s->link[gid(s, rcv)] = snd;
  return 0;
}

static int match_ops(struct sim* s) {
  size_t npairs = (size_t)s->nranks * s->nranks, total = 0;
  size_t* ns = calloc(npairs * 2, sizeof(*ns));
  size_t* nr = ns + npairs;
  struct link* lists = NULL;
  int rc = -1;
  if (ns == NULL) goto oom;
  pair_scan(s, ns, nr, NULL, NULL);
  for (size_t k = 0; k < npairs; k++) {
    if (ns[k] != nr[k]) {
      fail(s, "rank %d has %zu sends to rank %d, which has %zu receives from it",
           (int)(k / s->nranks), ns[k], (int)(k % s->nranks), nr[k]);
      goto out;
    }
    size_t c = ns[k];
    ns[k] = nr[k] = total; /* from here on: the cursor of the pair's first slot */
    total += c;
  }
  lists = malloc((2 * total + 1) * sizeof(*lists));
  if (lists == NULL) goto oom;
  pair_scan(s, ns, nr, lists, lists + total);
  for (size_t i = 0; i < total; i++)
    if (link_pair(s, lists[i], lists[total + i])) goto out;
  rc = 0;
  goto out;
oom:
  fail(s, "out of memory matching sends and receives");
out:
  free(lists);
  free(ns);
  return rc;
}

/* ---- Hazards inside one step ---- */

struct access {
  const struct sym *lo, *hi; /* resolved, so in-place aliasing shows as overlap */
  uint32_t op;
  int write;
};

/* a writes; b reads or writes. */
static int hazard(struct sim* s, int r, const struct access* a, const struct access* b) {
  const struct plan_op *x = &s->plans[r].ops[a->op], *y = &s->plans[r].ops[b->op];
  struct plan_ref yr = b->write ? y->dst : y->src;
  return fail(s, "rank %d step %u: %s writes %s[%zu..%zu) while %s%s %s %s[%zu..%zu)", r,
              s->rk[r].cur, plan_op_name(x->kind), AT(x->dst, 0), x->dst.off + x->count,
              a->op == b->op ? "its own " : "", plan_op_name(y->kind),
              b->write ? "writes" : "reads", AT(yr, 0), yr.off + y->count);
}

/* Accesses in address order; at one address by op, reads first. */
static int access_before(const struct access* a, const struct access* b) {
  if (a->lo != b->lo) return (uintptr_t)a->lo < (uintptr_t)b->lo;
  if (a->op != b->op) return a->op < b->op;
  return a->write < b->write;
}
static int access_cmp(const void* x, const void* y) {
  return access_before(y, x) - access_before(x, y);
}

/* Sorts the step's accesses by address and sweeps them, keeping the access
 * and the write that reach furthest so far: an access overlaps an earlier
 * one exactly when it starts below where that one ends. O(k log k), since
 * some plans put thousands of ops in a step. One op may read and write the
 * very same range (an element-wise update: one write access here) but not
 * partly overlapping ones. */
static int step_hazards(struct sim* s, int r, struct access* acc) {
  const struct plan* p = &s->plans[r];
  const struct plan_step* st = &p->steps[s->rk[r].cur];
  int n = 0;
  for (uint32_t o = st->op_begin; o < st->op_end; o++) {
    const struct plan_op* op = &p->ops[o];
    if (op->kind == OP_SYNC || is_lines_seen(op->kind)) continue;
    if (op->kind == OP_LINES_PUT) { /* reads src; its lines are its own array */
      struct sym* src = at(s, r, op->src);
      acc[n++] = (struct access){src, src + op->count, o, 0};
      continue;
    }
    if (is_lines_read(op->kind)) { /* alone in its step */
      struct sym* dst = at(s, r, op->dst);
      acc[n++] = (struct access){dst, dst + op->count, o, 1};
      continue;
    }
    struct sym *src = at(s, r, op->src), *dst = at(s, r, op->dst);
    int rd = reads_src(op->kind) && !is_peer(op->kind), wr = writes_dst(op->kind);
    if (rd && wr && src == dst) rd = 0;
    if (rd) acc[n++] = (struct access){src, src + op->count, o, 0};
    if (wr) acc[n++] = (struct access){dst, dst + op->count, o, 1};
  }
  if (n > 16) {
    qsort(acc, (size_t)n, sizeof(*acc), access_cmp);
  } else {
    for (int i = 1; i < n; i++) /* insertion sort: most steps hold a few ops */
      for (int j = i; j > 0 && access_before(&acc[j], &acc[j - 1]); j--) {
        struct access t = acc[j];
        acc[j] = acc[j - 1];
        acc[j - 1] = t;
      }
  }
  const struct access *far = NULL, *far_write = NULL;
  for (int i = 0; i < n; i++) {
    const struct access* x = &acc[i];
    const struct access* hit = x->write ? far : far_write;
    if (hit && (uintptr_t)hit->hi > (uintptr_t)x->lo) {
      if (!x->write) return hazard(s, r, hit, x);
      /* Two writes: name the earlier op first. */
      return hit->write && hit->op < x->op ? hazard(s, r, hit, x) : hazard(s, r, x, hit);
    }
    if (!far || (uintptr_t)x->hi > (uintptr_t)far->hi) far = x;
    if (x->write && (!far_write || (uintptr_t)x->hi > (uintptr_t)far_write->hi)) far_write = x;
  }
  return 0;
}

/* ---- Values ---- */

/* a op b, as a reduction must see them: same element, same treatment, and
 * no rank's contribution in both. */
static int combine_slow(struct sim* s, int r, struct plan_ref dst, size_t i, struct sym a,
                        struct sym b, struct sym* out) {
  uint32_t t = s->rk[r].cur;
  if (a.idx < 0 || b.idx < 0)
    return fail(s, "rank %d step %u: reduces garbage into %s[%zu]", r, t, AT(dst, i));
  if (a.idx != b.idx)
    return fail(s, "rank %d step %u: reduces element %d with element %d into %s[%zu]", r, t, a.idx,
                b.idx, AT(dst, i));
  if (a.flags != b.flags)
    return fail(s, "rank %d step %u: reduces values scaled or divided differently into %s[%zu]", r,
                t, AT(dst, i));
  if (a.mask & b.mask)
    return fail(s, "rank %d step %u: contribution of rank %d counted twice in %s[%zu]", r, t,
                lowest_rank(a.mask & b.mask), AT(dst, i));
  *out = (struct sym){a.mask | b.mask, a.idx, a.flags};
  return 0;
}

/* The common case inline; combine_slow names what is wrong. */
static inline int combine(struct sim* s, int r, struct plan_ref dst, size_t i, struct sym a,
                          struct sym b, struct sym* out) {
  if ((a.idx | b.idx) >= 0 && a.idx == b.idx && a.flags == b.flags && !(a.mask & b.mask)) {
    *out = (struct sym){a.mask | b.mask, a.idx, a.flags};
    return 0;
  }
  return combine_slow(s, r, dst, i, a, b, out);
}

/* premul takes a rank's own raw input; div takes a complete, undivided sum. */
static int scale(struct sim* s, int r, const struct plan_op* op, size_t i, struct sym* v) {
  uint32_t t = s->rk[r].cur;
  if (op->kind == OP_PREMUL) {
    if (v->idx < 0 || v->mask != (uint64_t)1 << r || v->flags != 0)
      return fail(s, "rank %d step %u: premul of %s[%zu], which is not rank %d's own raw input", r,
                  t, AT(op->src, i), r);
    v->flags = SYM_SCALED;
    return 0;
  }
  if (v->idx < 0)
    return fail(s, "rank %d step %u: div of garbage in %s[%zu]", r, t, AT(op->src, i));
  if (v->mask != s->all)
    return fail(s, "rank %d step %u: div of %s[%zu], which misses the contribution of rank %d", r,
                t, AT(op->src, i), lowest_rank(s->all & ~v->mask));
  if (v->flags & SYM_DIVIDED)
    return fail(s, "rank %d step %u: divides %s[%zu] twice", r, t, AT(op->src, i));
  v->flags |= SYM_DIVIDED;
  return 0;
}

/* ---- Races between ranks in direct plans ---- */

/* Rank r writes count elements at dst (its own memory) in its phase. */
static int note_write(struct sim* s, int r, const struct plan_op* op, const struct sym* dst) {
  uint32_t ph = s->rk[r].phase + 1;
  size_t base = (size_t)(dst - s->mem);
  if (s->nsyncs == 0) return 0;
  for (size_t i = 0; i < op->count; i++) {
    if (s->rphase[base + i] == ph)
      return fail(s,
                  "rank %d step %u: %s writes %s[%zu] between the syncs in which a peer reads it",
                  r, s->rk[r].cur, plan_op_name(op->kind), AT(op->dst, i));
    s->wphase[base + i] = ph;
  }
  return 0;
}

/* Rank r reads op's source in op->peer's memory. */
static int peer_read(struct sim* s, int r, const struct plan_op* op) {
  uint32_t ph = s->rk[r].phase + 1;
  const struct sym* src = at(s, op->peer, op->src);
  struct sym* dst = at(s, r, op->dst);
  size_t base = (size_t)(src - s->mem);
  for (size_t i = 0; i < op->count; i++) {
    if (s->wphase[base + i] == ph)
      return fail(
          s, "rank %d step %u: %s reads rank %d's %s[%zu] between the syncs in which it is written",
          r, s->rk[r].cur, plan_op_name(op->kind), op->peer, AT(op->src, i));
    s->rphase[base + i] = ph;
  }
  if (note_write(s, r, op, dst)) return -1;
  if (op->kind == OP_PEER_COPY) {
    memcpy(dst, src, op->count * sizeof(*dst)); /* different ranks: never overlapping */
    return 0;
  }
  for (size_t i = 0; i < op->count; i++)
    if (combine(s, r, op->dst, i, dst[i], src[i], &dst[i])) return -1;
  return 0;
}

/* Rank r arrives at its next sync; the last rank to arrive releases all. */
static void sync_arrive(struct sim* s, int r) {
  uint32_t j = s->rk[r].phase;
  s->rk[r].pending++;
  if (++s->arrived[j] < s->nranks) return;
  for (int q = 0; q < s->nranks; q++) {
    s->rk[q].pending--;
    s->rk[q].phase++;
    if (q != r) s->stack[s->nstack++] = q;
  }
}

/* ---- Lines ---- */

/* Rank r fills its lines; every rank waiting for lines tries again. */
static int lines_put(struct sim* s, int r, const struct plan_op* op) {
  struct rank_sim* k = &s->rk[r];
  const struct sym* src = at(s, r, op->src);
  for (size_t i = 0; i < op->count; i++) {
    size_t at_i = op->dst.off + i;
    if (k->lines_put[at_i])
      return fail(s, "rank %d step %u: puts lines[%zu] twice in one call", r, k->cur, at_i);
    k->lines[at_i] = src[i];
    k->lines_put[at_i] = 1;
  }
  for (int q = 0; q < s->nranks; q++)
    if (s->rk[q].lines_wait) {
      s->rk[q].lines_wait = 0;
      s->rk[q].entered = 0;
      s->rk[q].pending = 0;
      s->stack[s->nstack++] = q;
    }
  return 0;
}

/* Rank r reads op->peer's lines, or waits (pending) until they are put. */
static int lines_read(struct sim* s, int r, const struct plan_op* op) {
  struct rank_sim *k = &s->rk[r], *w = &s->rk[op->peer];
  for (size_t i = 0; i < op->count; i++)
    if (!w->lines_put[op->src.off + i]) {
      k->lines_wait = 1;
      k->pending = 1;
      return 0;
    }
  const struct sym* src = w->lines + op->src.off;
  struct sym* dst = at(s, r, op->dst);
  if (op->kind == OP_LINES_COPY) {
    memcpy(dst, src, op->count * sizeof(*dst));
    return 0;
  }
  for (size_t i = 0; i < op->count; i++)
    if (combine(s, r, op->dst, i, dst[i], src[i], &dst[i])) return -1;
  return 0;
}

/* Element by element in order, so an op onto its own range reads each
 * element before writing it, as the executors do. */
static int run_local(struct sim* s, int r, const struct plan_op* op) {
  if (op->kind == OP_LINES_PUT) return lines_put(s, r, op);
  if (is_lines_read(op->kind)) return lines_read(s, r, op);
  /* It waits on an earlier call, which one call's simulation has not. */
  if (is_lines_seen(op->kind)) return 0;
  const struct sym* src = at(s, r, op->src);
  struct sym* dst = at(s, r, op->dst);
  if (is_peer(op->kind)) return peer_read(s, r, op);
  if (note_write(s, r, op, dst)) return -1;
  if (op->kind == OP_COPY) { /* step_hazards allows no partial overlap */
    if (dst != src) memcpy(dst, src, op->count * sizeof(*dst));
    return 0;
  }
  for (size_t i = 0; i < op->count; i++) {
    struct sym v = src[i];
    if (op->kind == OP_REDUCE) {
      if (combine(s, r, op->dst, i, dst[i], v, &v)) return -1;
    } else if (op->kind != OP_COPY && scale(s, r, op, i, &v)) {
      return -1;
    }
    dst[i] = v;
  }
  return 0;
}

/* ---- Progress under rendezvous ---- */

/* Both ends are posted: move the data and retire both ops. The rank that
 * was already waiting is woken when this was its last op. */
static int complete(struct sim* s, struct link snd, struct link rcv, int waiting) {
  const struct plan_op* so = &s->plans[snd.rank].ops[snd.op];
  const struct plan_op* ro = &s->plans[rcv.rank].ops[rcv.op];
  const struct sym *in = at(s, snd.rank, so->src), *mine = at(s, rcv.rank, ro->src);
  struct sym* dst = at(s, rcv.rank, ro->dst);
  if (note_write(s, rcv.rank, ro, dst)) return -1;
  if (ro->kind == OP_RECV) /* different ranks: never overlapping */
    memcpy(dst, in, ro->count * sizeof(*dst));
  else
    for (size_t i = 0; i < ro->count; i++)
      if (combine(s, rcv.rank, ro->dst, i, mine[i], in[i], &dst[i])) return -1;
  s->state[gid(s, snd)] = s->state[gid(s, rcv)] = DONE;
  s->rk[snd.rank].pending--;
  s->rk[rcv.rank].pending--;
  if (s->rk[waiting].pending == 0) s->stack[s->nstack++] = waiting;
  return 0;
}

/* Runs the local ops of rank r's current step, then posts its sends and
 * receives, completing those whose other end is already posted. */
static int enter_step(struct sim* s, int r, struct access* acc) {
  struct rank_sim* k = &s->rk[r];
  const struct plan_step* st = &k->p->steps[k->cur];
  k->entered = 1;
  k->pending = 0;
  if (step_hazards(s, r, acc)) return -1;
  for (uint32_t o = st->op_begin; o < st->op_end; o++) {
    if (is_comm(k->p->ops[o].kind))
      k->pending++;
    else if (k->p->ops[o].kind == OP_SYNC)
      sync_arrive(s, r);
    else if (run_local(s, r, &k->p->ops[o]))
      return -1;
  }
  for (uint32_t o = st->op_begin; o < st->op_end; o++) {
    if (!is_comm(k->p->ops[o].kind)) continue;
    struct link me = {r, o}, other = s->link[k->op_base + o];
    s->state[k->op_base + o] = POSTED;
    if (s->state[gid(s, other)] != POSTED) continue;
    int is_send = k->p->ops[o].kind == OP_SEND;
    if (complete(s, is_send ? me : other, is_send ? other : me, other.rank)) return -1;
  }
  return 0;
}

static int advance(struct sim* s, int r, struct access* acc) {
  struct rank_sim* k = &s->rk[r];
  for (; k->cur < k->p->nsteps; k->cur++, k->entered = 0) {
    if (!k->entered && enter_step(s, r, acc)) return -1;
    if (k->pending > 0) return 0; /* woken again by the completion of its last op */
  }
  return 0;
}

/* Names up to four stuck ranks and, for each, where the other end of its
 * first unfinished op sits. Every rank done means every op was matched. */
static int report_deadlock(struct sim* s) {
  char text[400] = "";
  size_t pos = 0;
  int stuck = 0;
  for (int r = 0; r < s->nranks; r++) {
    struct rank_sim* k = &s->rk[r];
    if (k->cur >= k->p->nsteps || stuck++ >= 4) continue;
    uint32_t o = k->p->steps[k->cur].op_begin, end = k->p->steps[k->cur].op_end;
    if (k->p->ops[o].kind == OP_SYNC) {
      int n = snprintf(text + pos, sizeof(text) - pos, "%srank %d step %u (sync %u)",
                       pos ? "; " : "", r, k->cur, k->phase + 1);
      if (n > 0 && (size_t)n < sizeof(text) - pos) pos += (size_t)n;
      continue;
    }
    if (is_lines_read(k->p->ops[o].kind)) {
      const struct plan_op* op = &k->p->ops[o];
      int n = snprintf(text + pos, sizeof(text) - pos,
                       "%srank %d step %u (reads rank %d's lines[%zu..%zu), never all put)",
                       pos ? "; " : "", r, k->cur, op->peer, op->src.off, op->src.off + op->count);
      if (n > 0 && (size_t)n < sizeof(text) - pos) pos += (size_t)n;
      continue;
    }
    while (o < end && (!is_comm(k->p->ops[o].kind) || s->state[k->op_base + o] == DONE)) o++;
    if (o == end) continue; /* cannot be: it would have moved on */
    struct link other = s->link[k->op_base + o];
    int n = snprintf(text + pos, sizeof(text) - pos,
                     "%srank %d step %u (%s with rank %d, matched in its step %u)", pos ? "; " : "",
                     r, k->cur, plan_op_name(k->p->ops[o].kind), other.rank,
                     step_of(&s->plans[other.rank], other.op));
    if (n > 0 && (size_t)n < sizeof(text) - pos) pos += (size_t)n;
  }
  if (stuck == 0) return 0;
  return fail(s, "deadlock under rendezvous: %s%s", text, stuck > 4 ? "; and more" : "");
}

/* ---- Setup, the two runs, the verdict ---- */

/* Fresh memory for one run: inputs in SEND, everything else garbage. In
 * place, SEND and RECV are views into one storage (plan_ok made the sizes
 * exact wherever a rank has an in-place form). */
static void sim_reset(struct sim* s, int inplace) {
  s->inplace = inplace;
  for (int r = 0; r < s->nranks; r++) {
    struct rank_sim* k = &s->rk[r];
    for (int b = 0; b < PB_COUNT; b++) {
      for (size_t i = 0; i < k->p->buf_count[b]; i++) k->store[b][i] = garbage;
      k->view[b] = k->store[b];
    }
    size_t send_off, recv_off;
    if (inplace && inplace_at(s, r, &send_off, &recv_off)) {
      k->view[PB_SEND] = k->store[PB_SEND] + send_off;
      k->view[PB_RECV] = k->store[PB_SEND] + recv_off;
    }
    for (size_t i = 0; i < k->p->buf_count[PB_SEND]; i++)
      k->view[PB_SEND][i] = (struct sym){(uint64_t)1 << r, (int32_t)i, 0};
    k->cur = k->pending = 0;
    k->entered = 0;
    k->phase = 0;
    k->lines_wait = 0;
    for (size_t i = 0; i < k->p->lines_count; i++) k->lines[i] = garbage;
    memset(k->lines_put, 0, k->p->lines_count);
  }
  size_t nsyms = (size_t)(s->want - s->mem);
  memset(s->wphase, 0, nsyms * sizeof(*s->wphase));
  memset(s->rphase, 0, nsyms * sizeof(*s->rphase));
  memset(s->arrived, 0, (s->nsyncs + 1) * sizeof(*s->arrived));
  memset(s->state, 0, s->rk[s->nranks - 1].op_base + s->plans[s->nranks - 1].nops);
}

/* "rank 3's element 5", for messages about data that is moved, not reduced. */
static const char* describe(struct sym v, char* buf, size_t len) {
  if (v.idx < 0)
    snprintf(buf, len, "garbage");
  else if (v.mask != 0 && (v.mask & (v.mask - 1)) == 0)
    snprintf(buf, len, "rank %d's element %d", lowest_rank(v.mask), v.idx);
  else
    snprintf(buf, len, "a reduction of element %d over %d ranks", v.idx,
             __builtin_popcountll(v.mask));
  return buf;
}

static int check_final(struct sim* s) {
  int reduces = (s->kind->flags & COLLF_REDUCES) != 0;
  for (int r = 0; r < s->nranks; r++) {
    if (!expect(s, r, s->want)) continue;
    const struct sym* have = s->rk[r].view[PB_RECV];
    for (size_t i = 0; i < s->rk[r].p->buf_count[PB_RECV]; i++) {
      struct sym want = s->want[i], got = have[i];
      if (got.idx == want.idx && got.mask == want.mask && got.flags == want.flags) continue;
      if (!reduces) {
        char a[64], b[64];
        return fail(s, "rank %d: recv[%zu] ends with %s, not %s", r, i, describe(got, a, sizeof(a)),
                    describe(want, b, sizeof(b)));
      }
      uint8_t diff = got.flags ^ want.flags, bit = diff & SYM_SCALED ? SYM_SCALED : SYM_DIVIDED;
      if (got.idx < 0) return fail(s, "rank %d: recv[%zu] ends as garbage", r, i);
      if (got.idx != want.idx)
        return fail(s, "rank %d: recv[%zu] ends with element %d, not %d", r, i, got.idx, want.idx);
      if (want.mask & ~got.mask)
        return fail(s, "rank %d: recv[%zu] ends missing the contribution of rank %d", r, i,
                    lowest_rank(want.mask & ~got.mask));
      if (got.mask & ~want.mask)
        return fail(s,
                    "rank %d: recv[%zu] ends with rank %d's contribution, which it must not hold",
                    r, i, lowest_rank(got.mask & ~want.mask));
      return fail(s, "rank %d: recv[%zu] ends %s%s, unlike the plans' %s", r, i,
                  got.flags & bit ? "" : "not ", bit == SYM_SCALED ? "pre-multiplied" : "divided",
                  bit == SYM_SCALED ? "premul" : "div");
    }
  }
  return 0;
}

static int run_once(struct sim* s, int inplace, struct access* acc) {
  sim_reset(s, inplace);
  for (int r = s->nranks - 1; r >= 0; r--) s->stack[s->nstack++] = r;
  while (s->nstack > 0)
    if (advance(s, s->stack[--s->nstack], acc)) return -1;
  if (report_deadlock(s)) return -1;
  return check_final(s);
}

/* Buffers, op states and links of all ranks; 0 or -1 when out of memory. */
static int sim_alloc(struct sim* s) {
  size_t nops = 0, nsyms = 0, max_recv = 0;
  s->rk = calloc((size_t)s->nranks, sizeof(*s->rk));
  s->stack = calloc((size_t)s->nranks, sizeof(*s->stack));
  if (s->rk == NULL || s->stack == NULL) return -1;
  for (int r = 0; r < s->nranks; r++) {
    s->rk[r].p = &s->plans[r];
    s->rk[r].op_base = nops;
    nops += s->plans[r].nops;
    for (int b = 0; b < PB_COUNT; b++) nsyms += s->plans[r].buf_count[b];
    if (s->plans[r].buf_count[PB_RECV] > max_recv) max_recv = s->plans[r].buf_count[PB_RECV];
  }
  s->mem = malloc((nsyms + max_recv + 1) * sizeof(*s->mem));
  s->link = calloc(nops + 1, sizeof(*s->link));
  s->state = calloc(nops + 1, 1);
  if (s->mem == NULL || s->link == NULL || s->state == NULL) return -1;
  struct sym* m = s->mem;
  for (int r = 0; r < s->nranks; r++)
    for (int b = 0; b < PB_COUNT; b++) {
      s->rk[r].store[b] = m;
      m += s->plans[r].buf_count[b];
    }
  s->want = m;
  size_t nlines = 0;
  for (int r = 0; r < s->nranks; r++) nlines += s->plans[r].lines_count;
  s->lines_mem = malloc((nlines + 1) * sizeof(*s->lines_mem));
  s->lines_put_mem = malloc(nlines + 1);
  if (s->lines_mem == NULL || s->lines_put_mem == NULL) return -1;
  size_t at_l = 0;
  for (int r = 0; r < s->nranks; r++) {
    s->rk[r].lines = s->lines_mem + at_l;
    s->rk[r].lines_put = s->lines_put_mem + at_l;
    at_l += s->plans[r].lines_count;
  }
  s->wphase = calloc(nsyms + 1, sizeof(*s->wphase));
  s->rphase = calloc(nsyms + 1, sizeof(*s->rphase));
  s->arrived = calloc(s->nsyncs + 1, sizeof(*s->arrived));
  if (s->wphase == NULL || s->rphase == NULL || s->arrived == NULL) return -1;
  return 0;
}

/* All-to-all-v's displacements and sizes, as running sums of the counts. */
static int a2av_setup(struct sim* s) {
  size_t n = (size_t)s->nranks;
  s->sdispl = calloc(2 * n * n + 2 * n, sizeof(size_t));
  if (s->sdispl == NULL) return fail(s, "out of memory");
  s->rdispl = s->sdispl + n * n;
  s->row = s->rdispl + n * n;
  s->col = s->row + n;
  for (size_t src = 0; src < n; src++)
    for (size_t dst = 0; dst < n; dst++) {
      size_t k = src * n + dst, c = s->a2av[k];
      if (c > INT32_MAX) return fail(s, "all-to-all-v count %zu is too large for the checker", c);
      s->sdispl[k] = s->row[src];
      s->rdispl[k] = s->col[dst];
      s->row[src] += c;
      s->col[dst] += c;
    }
  for (size_t r = 0; r < n; r++)
    if (s->row[r] > INT32_MAX || s->col[r] > INT32_MAX)
      return fail(s, "rank %zu: all-to-all-v buffers too large to check", r);
  return 0;
}

static int check_args(struct sim* s, const struct check_spec* spec) {
  if (spec == NULL) return fail(s, "no check_spec");
  if ((unsigned)spec->kind >= CHECK_KIND_COUNT || kinds[spec->kind].name == NULL)
    return fail(s, "unknown collective kind %d", (int)spec->kind);
  s->kind_id = spec->kind;
  s->kind = &kinds[spec->kind];
  s->nranks = spec->nranks;
  s->count = spec->count;
  s->root = spec->root;
  s->a2av = spec->a2av_counts;
  if (s->nranks < 1 || s->nranks > 64 || s->plans == NULL)
    return fail(s, "the checker takes 1 to 64 ranks' plans, not %d", s->nranks);
  if (s->root < 0 || s->root >= s->nranks)
    return fail(s, "root %d out of range for %d ranks", s->root, s->nranks);
  if (s->count > INT32_MAX) return fail(s, "count %zu is too large for the checker", s->count);
  if (s->kind_id == CHECK_ALLTOALLV) {
    if (s->a2av == NULL) return fail(s, "all-to-all-v needs its counts (plan_check_spec)");
    if (a2av_setup(s)) return -1;
  }
  s->all = s->nranks == 64 ? ~(uint64_t)0 : ((uint64_t)1 << s->nranks) - 1;
  for (int r = 0; r < s->nranks; r++)
    if (plan_ok(s, r)) return -1;
  return lines_pairs_ok(s);
}

/* Whether any rank's call may be in place. */
static int has_inplace(const struct sim* s) {
  size_t a, b;
  for (int r = 0; r < s->nranks; r++)
    if (inplace_at(s, r, &a, &b)) return 1;
  return 0;
}

int plan_check_spec(const struct check_spec* spec, const struct plan* plans, char* why_out,
                    size_t why_len) {
  struct sim s = {.plans = plans, .why = why_out, .why_len = why_len};
  if (why_out && why_len) why_out[0] = '\0';
  struct access* acc = NULL;
  int rc = -1;
  if (check_args(&s, spec)) goto out;
  acc = malloc(((size_t)s.max_step_ops * 2 + 1) * sizeof(*acc));
  if (acc == NULL || sim_alloc(&s))
    fail(&s, "out of memory");
  else if (match_ops(&s) == 0 && run_once(&s, 0, acc) == 0 &&
           (spec->distinct || !has_inplace(&s) || run_once(&s, 1, acc) == 0))
    rc = 0;
out:
  free(acc);
  free(s.state);
  free(s.link);
  free(s.mem);
  free(s.lines_mem);
  free(s.lines_put_mem);
  free(s.wphase);
  free(s.rphase);
  free(s.arrived);
  free(s.stack);
  free(s.rk);
  free(s.sdispl);
  return rc;
}

int plan_check(enum check_kind kind, int nranks, size_t count, const struct plan* plans,
               char* why_out, size_t why_len) {
  struct check_spec spec = {kind, nranks, count, 0, NULL, 0};
  return plan_check_spec(&spec, plans, why_out, why_len);
}
