/* exec_host.c - the host executor: runs plans over connections on the
 * thread that runs the launch (the caller for a NULL stream, a host
 * stream's worker), on host memory.
 *
 * prepare builds every plan of the launch at call time, under each
 * communicator's lock, and takes the launch's turn on each communicator;
 * progress waits for the turns, then runs each communicator's plans in
 * order, all communicators of the launch together, so one thread can drive
 * several ranks of one process inside a group. A step posts all its
 * transfers at once and ends when all are done. When nothing moves, the
 * thread spins briefly and then sleeps on its rank's doorbell, which peers
 * ring when they make progress and the bootstrap watcher rings when a peer
 * fails. Every wait checks the deadline, the abort flag and the
 * communicator's health. */
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/coll.h"
#include "collectives/exec.h"
#include "core/bootstrap.h"
#include "core/checks.h"
#include "core/dtype.h"
#include "core/fault.h"
#include "core/params.h"
#include "core/recorder.h"
#include "kernels/cpu/cpu_kernels.h"
#include "topo/tune.h"
#include "transport/transport.h"

/* State of one transfer slot of a step. XF_STAGED: a receive into the
 * staging buffer that the executor reduces into its destination once it is
 * done (the transport does not reduce, or LOOM_FUSED_REDUCE=0). */
enum { XF_PENDING = 0, XF_DONE = 1, XF_STAGED = 2 };

/* One plan of a run: a collective task, or consecutive sends and receives
 * (one p2p plan). Built at prepare. */
struct unit {
  struct plan_obj* plan; /* a reference */
  struct coll_task* t;   /* its first task */
  int ntasks;
};

#define XF_SMALL 2 /* transfers of a step that need no allocation */

struct exec {
  struct loom_comm* comm;
  const struct plan* plan;
  void** bufs; /* bufs_inline, or allocated for a p2p plan with more buffers */
  void* bufs_inline[PB_COUNT];
  loomDataType_t dtype;
  size_t esize;
  loomRedOp_t redop; /* built-in op for reductions */
  enum mem_kind mem; /* of every buffer of the plan */
  const void* scalar;
  const char* what;
  int lane; /* LANE_COLL or LANE_P2P */
  uint32_t step;
  int posted;
  int connected;
  int sync_wait;        /* the step's sync is posted, peers not all there yet */
  uint64_t lines_seq;   /* the plan's call number for its lines; 0 before its first */
  int lines_wait;       /* the step reads a peer's lines (lines_op) not all there yet */
  uint32_t lines_op;    /* ... its op */
  size_t lines_checked; /* ... how much of them an earlier look found there */
  struct xfer* xf;      /* xf_small, or a block of its own for larger steps */
  uint8_t* xf_state;    /* XF_* per slot of xf (in xf's block) */
  uint32_t nxf, xf_cap;
  /* Most steps post one or two transfers: those need no allocation. */
  struct xfer xf_small[XF_SMALL];
  uint8_t xf_small_state[XF_SMALL];
  char* stage; /* staging for receive-and-reduce without a fused transport */
  size_t stage_cap;
  uint32_t fault_step; /* UINT32_MAX: none */
};

/* One communicator's share of a launch, in one lane: its collectives in
 * order, or all its sends and receives as one plan. The two lanes of a
 * communicator progress side by side, over separate connections, so a
 * receive posted after a collective in a group can still meet its send. */
struct comm_run {
  struct loom_comm* comm;
  int lane;
  struct coll_task* tasks; /* this comm's tasks, in call order */
  int ntasks;
  struct unit* units; /* their plans (room for ntasks, in the launch's block) */
  int nunits;
  int next;                    /* first unit not yet started */
  struct scratch_obj* scratch; /* a reference, or NULL when no plan needs one */
  uint64_t turn;               /* the communicator's turn this launch took */
  int first_of_comm;           /* the run that holds the comm's turn and inflight count */
  /* The launch started with the communicator serving its turn. Not so when
   * the communicator was broken or aborted (turns_reached): an earlier
   * launch may still be on it, so this one neither cancels its
   * connections nor passes its turn. */
  int owns;
  struct exec ex;
  int left_peer; /* a peer ex waits on that has left, seen once; -1: none */
  int active;    /* ex holds a plan being run */
  int done;
  struct deadline dl;
};

/* The host executor's state of one launch. */
struct host_launch {
  struct comm_run* runs;
  int nruns;
  struct coll_task* sorted; /* the tasks, grouped by run */
  int prepared;             /* every run holds its turn */
  int started;              /* every turn was reached */
  int waiting;              /* counted in turn_waiters of each of its comms */
  /* The waiting policy of runs_progress. */
  int spin, spin_max;
  uint64_t yield_ns, yield_end;
  /* The bell this launch announced itself on (bell_announce) before its
   * last look ahead of a sleep; NULL while it spins or yields, when the
   * peers' bell_nudge skips it. */
  struct bell* announced;
};

static void host_unannounce(struct host_launch* h) {
  if (!h->announced) return;
  bell_announce(h->announced, -1);
  h->announced = NULL;
}

/* The launch's block (host_prepare): each part starts aligned. */
_Static_assert(sizeof(struct host_launch) % _Alignof(struct comm_run) == 0 &&
                   sizeof(struct comm_run) % _Alignof(struct coll_task) == 0 &&
                   sizeof(struct coll_task) % _Alignof(struct unit) == 0,
               "host_launch block layout");

const char* coll_kind_text(enum coll_kind k) {
  static const char* names[COLL_KIND_COUNT] = {
#define COLL(id, token, text, flags) text,
#include "core/colls.def"
#undef COLL
      "send/receive", "send/receive"};
  return (unsigned)k < COLL_KIND_COUNT ? names[k] : "operation";
}

static void* ref_ptr(const struct exec* e, struct plan_ref r) {
  return (char*)e->bufs[r.buf] + r.off * e->esize;
}

static void exec_reset(struct exec* e) {
  e->plan = NULL;
  if (e->bufs != e->bufs_inline) free(e->bufs);
  e->bufs = NULL;
}

/* Points e->bufs at room for n buffers, all NULL. */
static loomResult_t exec_bufs(struct exec* e, int n) {
  if (n <= PB_COUNT) {
    e->bufs = e->bufs_inline;
    memset(e->bufs_inline, 0, sizeof(e->bufs_inline));
  } else if (!(e->bufs = calloc((size_t)n, sizeof(void*)))) {
    return err_set(e->comm, loomSystemError, "out of memory");
  }
  return loomSuccess;
}

void scratch_obj_unref(struct scratch_obj* s) {
  if (!s || atomic_fetch_sub(&s->refs, 1) != 1) return;
  memstat_sub(s->comm, MEM_SCRATCH, -1, s->bytes);
  free(s->data);
  free(s);
}

/* A reference to the communicator's scratch, grown to need bytes first.
 * Under the communicator's exec_lock. */
static loomResult_t scratch_take(struct loom_comm* comm, size_t need, struct scratch_obj** out) {
  struct coll_comm* cc = comm->coll;
  if (!cc->scratch || need > cc->scratch->bytes) {
    struct scratch_obj* s = calloc(1, sizeof(*s));
    void* data = malloc(need ? need : 1);
    if (!s || !data) {
      free(s);
      free(data);
      return err_set(comm, loomSystemError, "out of memory for %zu bytes of scratch", need);
    }
    atomic_init(&s->refs, 1);
    s->bytes = need;
    s->data = data;
    s->comm = comm;
    memstat_add(comm, MEM_SCRATCH, -1, need);
    scratch_obj_unref(cc->scratch); /* launches that use the old one keep it */
    cc->scratch = s;
  }
  atomic_fetch_add(&cc->scratch->refs, 1);
  *out = cc->scratch;
  return loomSuccess;
}

/* Builds the plans of a run (prepare, under the communicator's lock). */
static loomResult_t run_build(struct comm_run* run) {
  size_t scratch = 0;
  for (int i = 0; i < run->ntasks;) {
    struct coll_task* t = &run->tasks[i];
    struct unit* u = &run->units[run->nunits++];
    u->t = t;
    if (t->kind == COLL_SEND || t->kind == COLL_RECV) {
      int n = 0;
      while (i + n < run->ntasks && (t[n].kind == COLL_SEND || t[n].kind == COLL_RECV)) n++;
      u->ntasks = n;
      u->plan = plan_obj_new();
      if (!u->plan) return err_set(run->comm, loomSystemError, "out of memory for a plan");
      LOOM_CHECK(p2p_build(t, n, &u->plan->plan));
      plan_obj_count(u->plan, run->comm);
      i += n;
      continue;
    }
    u->ntasks = 1;
    LOOM_CHECK(algo_plan_cached(t, &u->plan));
    size_t need = u->plan->plan.buf_count[PB_SCRATCH] * dtype_size(t->dtype);
    if (need > scratch) scratch = need;
    i++;
  }
  if (scratch > 0) LOOM_CHECK(scratch_take(run->comm, scratch, &run->scratch));
  return loomSuccess;
}

/* The flight records of a unit's tasks: it started; it ended with r. */
static void unit_rec_start(struct comm_run* run, const struct unit* u) {
  for (int k = 0; k < u->ntasks; k++)
    recorder_start(run->comm->rec, u->t[k].rec, u->plan->plan.algo, u->plan->plan.nsteps);
}

static void unit_rec_end(struct comm_run* run, const struct unit* u, loomResult_t r) {
  for (int k = 0; k < u->ntasks; k++) recorder_end(run->comm->rec, u->t[k].rec, r);
}

/* Starts the next unit of run: its buffers, and what a direct plan
 * publishes (at run time: the previous direct plan ended with a sync that
 * every peer passed, so none still reads what was published for it). */
static loomResult_t exec_start(struct comm_run* run) {
  struct exec* e = &run->ex;
  struct unit* u = &run->units[run->next++];
  struct coll_task* t = u->t;
  struct loom_comm* comm = run->comm;
  exec_reset(e);
  e->comm = comm;
  e->plan = &u->plan->plan;
  e->step = 0;
  e->posted = 0;
  e->connected = 0;
  e->sync_wait = 0;
  e->lines_seq = 0;
  e->lines_wait = 0;
  e->nxf = 0;
  e->fault_step = UINT32_MAX;
  e->what = coll_kind_text(t->kind);
  e->lane = run->lane;
  unit_rec_start(run, u);
  e->mem = t->mem;
  if (t->kind == COLL_SEND || t->kind == COLL_RECV) {
    int n = u->ntasks;
    LOOM_CHECK(exec_bufs(e, PB_USER + n));
    for (int k = 0; k < n; k++)
      e->bufs[PB_USER + k] = t[k].kind == COLL_SEND ? (void*)t[k].sendbuff : t[k].recvbuff;
    e->dtype = loomUint8;
    e->esize = 1;
    e->redop = loomSum;
    return loomSuccess;
  }
  /* A collective. */
  LOOM_CHECK(exec_bufs(e, PB_COUNT));
  e->bufs[PB_SEND] = (void*)t->sendbuff;
  e->bufs[PB_RECV] = t->recvbuff;
  e->bufs[PB_SCRATCH] = run->scratch ? run->scratch->data : NULL;
  e->dtype = t->dtype;
  e->esize = dtype_size(t->dtype);
  e->redop = redop_is_premul(t->op) || t->op == loomAvg ? loomSum : t->op;
  e->scalar = t->scalar_ptr ? t->scalar_ptr : t->scalar;
  if (plan_is_direct(e->plan)) {
    size_t bytes[PB_COUNT];
    for (int b = 0; b < PB_COUNT; b++) bytes[b] = e->plan->buf_count[b] * e->esize;
    tp_peer_publish(comm, e->bufs, bytes);
  }
  if (t->kind == COLL_ALLREDUCE && fault_hit("allreduce", comm->rank))
    e->fault_step = e->plan->nsteps / 2;
  return loomSuccess;
}

/* Connections of the plan: senders create theirs first (never waits), then
 * every side waits for its receivers to attach, inside the progress loop. */
static loomResult_t exec_connect(struct exec* e, int* ready_out) {
  int ready = 1;
  for (uint32_t i = 0; i < e->plan->nops; i++) {
    const struct plan_op* op = &e->plan->ops[i];
    if (op->kind != OP_SEND && op->kind != OP_RECV && op->kind != OP_RECV_REDUCE) continue;
    struct conn* c;
    LOOM_CHECK(tp_conn_get(e->comm, op->peer, op->kind == OP_SEND, e->lane, &c));
    loomResult_t r = c->tp->connect_test(c);
    if (r == loomInProgress)
      ready = 0;
    else
      LOOM_CHECK(r);
  }
  *ready_out = ready;
  return loomSuccess;
}

/* dst = dst op (a piece of a peer's buffer), for OP_PEER_REDUCE. */
struct peer_reduce {
  const struct exec* e;
  char* dst;
};
static void exec_peer_reduce(void* arg, size_t at, const void* data, size_t n) {
  const struct peer_reduce* pr = arg;
  cpu_reduce(pr->e->dtype, pr->e->redop, pr->dst + at, pr->dst + at, data, n / pr->e->esize);
}

/* The executor's reduction, lent to transports that fuse it with the
 * receive (struct xfer's reduce). */
static void exec_xfer_reduce(const struct xfer* x, size_t at, const void* in, size_t n) {
  cpu_reduce(x->dtype, x->op, (char*)x->dst + at, (const char*)x->src + at, in,
             n / dtype_size(x->dtype));
}

/* Room in e->stage for the staged receives of the current step: the
 * receive-and-reduce ops whose transport does not reduce (or all of them
 * with LOOM_FUSED_REDUCE=0). */
static loomResult_t exec_stage_reserve(struct exec* e, const struct plan_step* st) {
  size_t need = 0;
  int fused = params_get()->fused_reduce;
  for (uint32_t i = st->op_begin; i < st->op_end; i++) {
    const struct plan_op* op = &e->plan->ops[i];
    struct conn* c;
    if (op->kind != OP_RECV_REDUCE) continue;
    LOOM_CHECK(tp_conn_get(e->comm, op->peer, 0, e->lane, &c));
    if (!fused || !c->tp->caps.fused_reduce) need += op->count * e->esize;
  }
  if (need <= e->stage_cap) return loomSuccess;
  char* p = malloc(need);
  if (!p) return err_set(e->comm, loomSystemError, "out of memory (%zu bytes of staging)", need);
  memstat_sub(e->comm, MEM_STAGING, -1, e->stage_cap);
  memstat_add(e->comm, MEM_STAGING, -1, need);
  free(e->stage);
  e->stage = p;
  e->stage_cap = need;
  return loomSuccess;
}

static void exec_xf_free(struct exec* e) {
  if (e->xf != e->xf_small) free(e->xf);
  e->xf = NULL;
}

static loomResult_t exec_post_step(struct exec* e) {
  const struct plan_step* st = &e->plan->steps[e->step];
  uint32_t nops = st->op_end - st->op_begin;
  size_t staged = 0;
  if (nops > e->xf_cap && nops <= XF_SMALL) {
    e->xf = e->xf_small;
    e->xf_state = e->xf_small_state;
    e->xf_cap = XF_SMALL;
  } else if (nops > e->xf_cap) {
    /* The transfers and their states in one block. */
    struct xfer* nx = malloc(nops * (sizeof(*nx) + 1));
    if (!nx) return err_set(e->comm, loomSystemError, "out of memory");
    exec_xf_free(e);
    e->xf = nx;
    e->xf_state = (uint8_t*)(nx + nops);
    e->xf_cap = nops;
  }
  e->nxf = 0;
  if (e->step == e->fault_step) raise(SIGKILL); /* LOOM_FAULT: debugging only */
  for (uint32_t i = st->op_begin; i < st->op_end; i++) {
    const struct plan_op* op = &e->plan->ops[i];
    size_t bytes = op->count * e->esize;
    void* dst = op->dst.buf == PB_LINES ? NULL : ref_ptr(e, op->dst);
    const void* src = op->src.buf == PB_LINES ? NULL : ref_ptr(e, op->src);
    switch (op->kind) {
      case OP_SEND:
      case OP_RECV:
      case OP_RECV_REDUCE: {
        e->xf_state[e->nxf] = XF_PENDING;
        struct xfer* x = &e->xf[e->nxf++];
        struct conn* c;
        memset(x, 0, sizeof(*x));
        x->bytes = bytes;
        x->dtype = e->dtype;
        x->op = e->redop;
        x->mem = e->mem;
        LOOM_CHECK(tp_conn_get(e->comm, op->peer, op->kind == OP_SEND, e->lane, &c));
        if (!(c->tp->caps.mem_kinds & MEM_KIND_BIT(e->mem)))
          return err_set(e->comm, loomInternalError,
                         "transport %s cannot move %s memory (peer %d): no plan should use it so",
                         c->tp->name, mem_kind_name(e->mem), op->peer);
        x->src = src;
        if (op->kind == OP_SEND) {
          LOOM_CHECK(c->tp->send_post(c, x));
          break;
        }
        x->dst = dst;
        if (op->kind == OP_RECV_REDUCE) {
          if (c->tp->caps.fused_reduce && params_get()->fused_reduce) {
            x->reduce = exec_xfer_reduce;
          } else {
            /* Received whole into staging, reduced when done. The first
             * such receive of the step makes room for all of them. */
            if (staged == 0) LOOM_CHECK(exec_stage_reserve(e, st));
            x->user = dst;
            x->dst = e->stage + staged;
            staged += bytes;
            e->xf_state[e->nxf - 1] = XF_STAGED;
          }
        }
        LOOM_CHECK(c->tp->recv_post(c, x));
        break;
      }
      case OP_COPY:
        if (dst != src) cpu_copy(dst, src, bytes);
        break;
      case OP_REDUCE:
        cpu_reduce(e->dtype, e->redop, dst, dst, src, op->count);
        break;
      case OP_PREMUL:
        cpu_mul_scalar(e->dtype, dst, src, op->count, e->scalar);
        break;
      case OP_DIV:
        cpu_div(e->dtype, dst, src, op->count, e->comm->nranks);
        break;
      case OP_SYNC:
        tp_sync_arrive(e->comm);
        e->sync_wait = 1;
        break;
      case OP_PEER_COPY:
        LOOM_CHECK(
            tp_peer_copy(e->comm, op->peer, op->src.buf, op->src.off * e->esize, dst, bytes));
        break;
      case OP_PEER_REDUCE: {
        struct peer_reduce pr = {e, dst};
        LOOM_CHECK(tp_peer_read(e->comm, op->peer, op->src.buf, op->src.off * e->esize, bytes,
                                e->esize, exec_peer_reduce, &pr));
        break;
      }
      case OP_LINES_PUT:
      case OP_LINES_COPY:
      case OP_LINES_REDUCE:
      case OP_LINES_SEEN: {
        struct plan_ref ln = op->kind == OP_LINES_PUT ? op->dst : op->src;
        size_t at = ln.off * e->esize;
        if (at + bytes > TP_LINES_BYTES || (op->kind == OP_LINES_PUT && at % 4 != 0))
          return err_set(e->comm, loomInternalError,
                         "%s of %zu bytes at byte %zu: past the %u bytes of the lines, or not at "
                         "a whole word",
                         plan_op_name(op->kind), bytes, at, TP_LINES_BYTES);
        if (!e->lines_seq) e->lines_seq = tp_lines_next(e->comm);
        if (op->kind == OP_LINES_PUT) {
          tp_lines_put(e->comm, e->lines_seq, at, src, bytes);
        } else {
          e->lines_wait = 1; /* alone in its step (the checker proves it) */
          e->lines_op = i;
          e->lines_checked = 0;
        }
        break;
      }
      default:
        return err_set(e->comm, loomInternalError, "plan op of unknown kind %d", op->kind);
    }
  }
  e->posted = 1;
  return loomSuccess;
}

/* 1 once the step's read of a peer's lines is done (or its put seen). */
static int exec_lines_take(struct exec* e) {
  const struct plan_op* op = &e->plan->ops[e->lines_op];
  if (op->kind == OP_LINES_SEEN) return tp_lines_seen(e->comm, op->peer, e->lines_seq);
  char* dst = ref_ptr(e, op->dst);
  size_t at = op->src.off * e->esize, bytes = op->count * e->esize;
  if (op->kind == OP_LINES_COPY)
    return tp_lines_copy(e->comm, op->peer, e->lines_seq, at, bytes, dst, &e->lines_checked);
  struct peer_reduce pr = {e, dst};
  return tp_lines_read(e->comm, op->peer, e->lines_seq, at, bytes, e->esize, &e->lines_checked,
                       exec_peer_reduce, &pr);
}

/* Advances e as far as it goes without waiting. */
static loomResult_t exec_progress(struct exec* e, int* done_out, int* moved_out) {
  *done_out = 0;
  if (!e->connected) {
    int ready;
    LOOM_CHECK(exec_connect(e, &ready));
    if (!ready) return loomSuccess;
    e->connected = 1;
    *moved_out = 1;
  }
  while (e->step < e->plan->nsteps) {
    if (!e->posted) {
      LOOM_CHECK(exec_post_step(e));
      *moved_out = 1;
    }
    if (e->sync_wait) {
      if (!tp_sync_done(e->comm)) return loomSuccess;
      e->sync_wait = 0;
      *moved_out = 1;
    }
    if (e->lines_wait) {
      if (!exec_lines_take(e)) return loomSuccess;
      e->lines_wait = 0;
      *moved_out = 1;
    }
    int all = 1;
    for (uint32_t i = 0; i < e->nxf; i++) {
      int d;
      if (e->xf_state[i] == XF_DONE) continue;
      struct xfer* x = &e->xf[i];
      LOOM_CHECK(x->conn->tp->test(x, &d));
      if (d) {
        if (e->xf_state[i] == XF_STAGED)
          cpu_reduce(e->dtype, e->redop, x->user, x->src, x->dst, x->bytes / e->esize);
        e->xf_state[i] = XF_DONE;
        *moved_out = 1;
      }
      all &= d;
    }
    if (!all) return loomSuccess;
    e->step++;
    e->posted = 0;
    e->nxf = 0;
  }
  *done_out = 1;
  return loomSuccess;
}

/* Names what e is waiting for, for the timeout message. */
static void exec_describe_wait(const struct exec* e, char* buf, size_t len) {
  if (!e->plan) {
    snprintf(buf, len, "preparing its plan");
    return;
  }
  for (uint32_t i = 0; i < e->nxf; i++) {
    const struct xfer* x = &e->xf[i];
    if (e->xf_state[i] == XF_DONE) continue;
    snprintf(buf, len, "step %u of %u, %s %zu bytes %s peer %d", e->step + 1, e->plan->nsteps,
             x->conn->is_send ? "sending" : "receiving", x->bytes, x->conn->is_send ? "to" : "from",
             x->conn->peer);
    return;
  }
  if (e->sync_wait)
    snprintf(buf, len, "step %u of %u, waiting for its peers at a sync", e->step + 1,
             e->plan->nsteps);
  else if (e->lines_wait)
    snprintf(buf, len, "step %u of %u, waiting for peer %d's low-latency lines", e->step + 1,
             e->plan->nsteps, e->plan->ops[e->lines_op].peer);
  else if (!e->connected)
    snprintf(buf, len, "connecting to its peers");
  else
    snprintf(buf, len, "step %u of %u", e->step + 1, e->plan->nsteps);
}

/* What the active unit of run waits on, in its flight records (before the executor sleeps). */
static void run_rec_wait(struct comm_run* run) {
  const struct exec* e = &run->ex;
  if (!run->active || !e->plan || !run->comm->rec) return;
  int peer = -1, is_send = 0;
  size_t bytes = 0;
  for (uint32_t i = 0; i < e->nxf; i++) {
    const struct xfer* x = &e->xf[i];
    if (e->xf_state[i] == XF_DONE) continue;
    peer = x->conn->peer;
    is_send = x->conn->is_send;
    bytes = x->bytes - x->done;
    break;
  }
  if (peer < 0 && e->lines_wait) {
    peer = e->plan->ops[e->lines_op].peer;
    bytes = e->plan->ops[e->lines_op].count * e->esize;
  }
  /* At a sync: the first peer not there yet. */
  for (int p = 0; peer < 0 && e->sync_wait && p < run->comm->nranks; p++)
    if (tp_sync_missing(run->comm, p)) peer = p;
  const struct unit* u = &run->units[run->next - 1];
  for (int k = 0; k < u->ntasks; k++)
    recorder_wait(run->comm->rec, u->t[k].rec, e->step, peer, is_send, bytes);
}

/* A peer that e waits on and that has left the communicator (it said
 * goodbye, so it will never come), or -1: a connection to it not up yet, a
 * sync it has not reached, or a transfer with it not done over a transport
 * that does not see the close by itself. */
static int exec_left_peer(struct exec* e) {
  struct loom_comm* comm = e->comm;
  if (!e->plan || boot_left_count(comm) == 0) return -1;
  if (!e->connected) {
    for (uint32_t i = 0; i < e->plan->nops; i++) {
      const struct plan_op* op = &e->plan->ops[i];
      struct conn* c;
      if (op->kind != OP_SEND && op->kind != OP_RECV && op->kind != OP_RECV_REDUCE) continue;
      if (!boot_peer_left(comm, op->peer)) continue;
      if (tp_conn_get(comm, op->peer, op->kind == OP_SEND, e->lane, &c) != loomSuccess) continue;
      if (c->tp->connect_test(c) == loomInProgress) return op->peer;
    }
    return -1;
  }
  if (e->sync_wait)
    for (int p = 0; p < comm->nranks; p++)
      if (boot_peer_left(comm, p) && tp_sync_missing(comm, p)) return p;
  if (e->lines_wait && boot_peer_left(comm, e->plan->ops[e->lines_op].peer))
    return e->plan->ops[e->lines_op].peer;
  for (uint32_t i = 0; i < e->nxf; i++) {
    const struct xfer* x = &e->xf[i];
    if (e->xf_state[i] != XF_DONE && !x->conn->tp->sees_close &&
        boot_peer_left(comm, x->conn->peer))
      return x->conn->peer;
  }
  return -1;
}

/* A wait on a peer that left ends in loomRemoteError naming it, within a
 * pass of the executor: the first pass that sees the departure only notes
 * it, so whatever the peer delivered before it left is taken first. */
static loomResult_t run_check_left(struct comm_run* run) {
  int gone = exec_left_peer(&run->ex);
  if (gone < 0 || gone != run->left_peer) {
    run->left_peer = gone;
    return loomSuccess;
  }
  char wait[160], why[400];
  exec_describe_wait(&run->ex, wait, sizeof(wait));
  snprintf(why, sizeof(why),
           "peer %d left the communicator (loomCommDestroy) while rank %d still waited for it in "
           "%s (%s)",
           gone, run->comm->rank, run->ex.what, wait);
  comm_set_failed(run->comm, gone, loomRemoteError, "%s", why);
  boot_report_failure(run->comm, gone, why);
  return loomRemoteError;
}

/* Checks what can end a wait: abort, a failed peer, the deadline. */
static loomResult_t run_check(struct comm_run* run) {
  struct loom_comm* comm = run->comm;
  if (atomic_load(&comm->aborted))
    return err_set(comm, loomRemoteError, "%s interrupted: the communicator was aborted",
                   run->ex.what);
  LOOM_CHECK(comm_health(comm));
  LOOM_CHECK(run_check_left(run));
  if (deadline_passed(&run->dl)) {
    char why[160];
    exec_describe_wait(&run->ex, why, sizeof(why));
    comm_set_failed(comm, -1, loomTimeout, "%s timed out after %lld ms (%s)", run->ex.what,
                    comm->timeout_ms, why);
    return loomTimeout;
  }
  return loomSuccess;
}

static loomResult_t run_progress(struct comm_run* run, int* moved) {
  for (;;) {
    if (!run->active) {
      if (run->next >= run->nunits) {
        run->done = 1;
        return loomSuccess;
      }
      LOOM_CHECK(exec_start(run));
      run->active = 1;
    }
    int d = 0;
    LOOM_CHECK(exec_progress(&run->ex, &d, moved));
    if (!d) return loomSuccess;
    run->active = 0;
    unit_rec_end(run, &run->units[run->next - 1], loomSuccess);
  }
}

/* A transport sees only that a peer's connection closed; the bootstrap
 * learns (within milliseconds) which rank failed first and why. Give it a
 * moment, so the error names the cause rather than a survivor that left. */
static loomResult_t root_cause(struct loom_comm* comm, loomResult_t r) {
  if (r != loomRemoteError) return r;
  /* A loaded machine may delay the watcher. When a peer has left cleanly,
   * the closed connection is most likely its own, and there is no failure
   * to wait for: a report from rank 0 (another rank failed because of the
   * departure) comes within moments or not at all. */
  long long grace_ms = boot_left_count(comm) > 0 ? 200 : 1500;
  return comm_await_failure(comm, tp_self_bell(comm), grace_ms) ? comm_health(comm) : r;
}

/* 1 once every communicator of the launch has reached the launch's turn,
 * or is broken or aborted (its turns may never come: the launch then
 * starts only to fail at once, and its release passes the turns of its
 * other communicators on, so none of their later launches waits for it). */
static int turns_reached(const struct host_launch* h) {
  for (int i = 0; i < h->nruns; i++) {
    struct loom_comm* comm = h->runs[i].comm;
    if (atomic_load(&comm->coll->serving) == h->runs[i].turn) continue;
    int e = atomic_load(&comm->async_error);
    if (atomic_load(&comm->aborted) || (e != loomSuccess && e != loomInProgress)) continue;
    return 0;
  }
  return 1;
}

/* Counts h in (on 1) or out of (on 0) the turn waiters of its
 * communicators: a release rings the doorbell only when someone waits. */
static void turn_waiting(struct host_launch* h, int on) {
  h->waiting = on;
  for (int i = 0; i < h->nruns; i++)
    if (h->runs[i].first_of_comm)
      atomic_fetch_add(&h->runs[i].comm->coll->turn_waiters, on ? 1 : -1);
}

/* Checked when the launch's turns have come: a broken or aborted
 * communicator fails it before anything moves. (The wait for the turns has
 * no deadline of its own: the launches before it have theirs, and a broken
 * or aborted communicator ends it, see turns_reached.) */
static loomResult_t turn_check(struct comm_run* run) {
  struct loom_comm* comm = run->comm;
  if (atomic_load(&comm->aborted))
    return err_set(comm, loomRemoteError, "%s interrupted: the communicator was aborted",
                   run->ex.what);
  return comm_health(comm);
}

/* One pass: advances every run as far as it goes, then, when nothing moved,
 * spins, yields or sleeps briefly on the doorbell (the waiting policy), so
 * that the caller's loop neither burns a core for long nor sleeps past a
 * ring. */
static loomResult_t host_progress(struct exec_launch* l, int* done_out) {
  struct host_launch* h = l->state;
  *done_out = 0;
  struct comm_run* first = NULL;
  for (int i = 0; i < h->nruns && !first; i++)
    if (!h->runs[i].done) first = &h->runs[i];
  if (!first) {
    *done_out = 1;
    return loomSuccess;
  }
  struct bell* bell = tp_self_bell(first->comm);
  uint32_t seen = bell_read(bell);
  int moved = 0;
  if (!h->started) {
    if (turns_reached(h)) {
      h->started = 1;
      exec_launch_started(l);
      moved = 1;
      if (h->waiting) turn_waiting(h, 0);
      for (int i = 0; i < h->nruns; i++)
        h->runs[i].owns = atomic_load(&h->runs[i].comm->coll->serving) == h->runs[i].turn;
      if (l->cancel) {
        *done_out = 1; /* dropped: release passes the turns on */
        return loomSuccess;
      }
      /* The deadline counts from the turn: waiting behind earlier launches
       * is theirs to bound. */
      for (int i = 0; i < h->nruns; i++) {
        h->runs[i].dl = deadline_in_ms(h->runs[i].comm->timeout_ms);
        if (h->runs[i].first_of_comm) LOOM_CHECK(turn_check(&h->runs[i]));
      }
    } else if (!h->waiting) {
      /* Counted before looking again: a release that passes a turn on
       * after this rings the bell, one before it is seen by the look. */
      turn_waiting(h, 1);
      moved = 1;
    }
  }
  if (h->started) {
    for (int i = 0; i < h->nruns; i++) {
      if (h->runs[i].done) continue;
      loomResult_t r = run_progress(&h->runs[i], &moved);
      if (r != loomSuccess) return root_cause(h->runs[i].comm, r);
    }
  }
  if (moved) {
    h->spin = 0;
    h->yield_end = 0;
    host_unannounce(h);
    return loomSuccess;
  }
  if (h->started)
    for (int i = 0; i < h->nruns; i++)
      if (!h->runs[i].done) LOOM_CHECK(run_check(&h->runs[i]));
  if (h->spin < h->spin_max) {
    h->spin++;
    cpu_relax();
    return loomSuccess;
  }
  /* Then give the core away for a while before sleeping: with more ranks
   * than cores, the peer this rank waits for is often runnable right here,
   * and a yield hands it the core at once where a sleep and a futex
   * wake-up cost several microseconds on each side. */
  uint64_t now = time_now_ns();
  if (h->yield_end == 0) {
    h->yield_end = now + h->yield_ns;
    /* A wait longer than a spin: what it waits on goes into the flight records (once per
     * wait; the spins of a fast path never pay for it). */
    if (h->started)
      for (int i = 0; i < h->nruns; i++)
        if (!h->runs[i].done) run_rec_wait(&h->runs[i]);
  }
  if (now < h->yield_end) {
    sched_yield();
    return loomSuccess;
  }
  /* With several ranks on one thread a peer's ring may land on another
   * rank's bell: nap briefly instead of sleeping long on one. A
   * transport's thread takes over what this thread polled. */
  if (h->started) /* before, another launch may be running on the comm */
    for (int i = 0; i < h->nruns; i++)
      if (!h->runs[i].done) tp_idle(h->runs[i].comm); /* a second call returns at once */
  /* Lines and syncs nudge (bell_nudge) instead of ringing: announced, this
   * launch looks once more before it sleeps. */
  if (h->announced != bell) {
    host_unannounce(h);
    bell_announce(bell, 1);
    h->announced = bell;
    return loomSuccess;
  }
  bell_wait(bell, seen, h->nruns > 1 ? 200 : 100000);
  return loomSuccess;
}

static int comm_order(const void* a, const void* b) {
  const struct comm_run* x = a;
  const struct comm_run* y = b;
  if (x->comm != y->comm) return (x->comm > y->comm) - (x->comm < y->comm);
  return x->lane - y->lane;
}

static int lane_of(const struct coll_task* t) {
  return t->kind == COLL_SEND || t->kind == COLL_RECV ? LANE_P2P : LANE_COLL;
}

/* Groups the launch's tasks by communicator and lane, keeping their order
 * (h's block holds the runs, the sorted tasks and the units). */
static void runs_make(struct host_launch* h, struct coll_task* tasks, int ntasks) {
  h->runs = (struct comm_run*)(h + 1);
  h->sorted = (struct coll_task*)(h->runs + ntasks);
  struct unit* units = (struct unit*)(h->sorted + ntasks);
  if (ntasks == 1) { /* a call outside a group: its task is its run's, as it is */
    struct comm_run* run = &h->runs[0];
    run->comm = tasks[0].comm;
    run->lane = lane_of(&tasks[0]);
    run->tasks = tasks;
    run->units = units;
    run->ntasks = 1;
    run->left_peer = -1;
    run->ex.what = coll_kind_text(tasks[0].kind);
    run->first_of_comm = 1;
    h->nruns = 1;
    return;
  }
  int nruns = 0, pos = 0;
  for (int i = 0; i < ntasks; i++) {
    int lane = lane_of(&tasks[i]), seen = 0;
    for (int r = 0; r < nruns; r++)
      seen |= h->runs[r].comm == tasks[i].comm && h->runs[r].lane == lane;
    if (seen) continue;
    struct comm_run* run = &h->runs[nruns++];
    run->comm = tasks[i].comm;
    run->lane = lane;
    run->tasks = h->sorted + pos;
    run->units = units + pos;
    for (int j = i; j < ntasks; j++)
      if (tasks[j].comm == tasks[i].comm && lane_of(&tasks[j]) == lane) h->sorted[pos++] = tasks[j];
    run->ntasks = (int)(h->sorted + pos - run->tasks);
    run->left_peer = -1;
    run->ex.what = coll_kind_text(run->tasks[0].kind);
  }
  h->nruns = nruns;
  /* A consistent lock order, so two threads preparing launches over the same
   * communicators cannot deadlock on the locks, and take their turns in the
   * same order on every communicator they share. */
  if (nruns > 8) {
    qsort(h->runs, (size_t)nruns, sizeof(*h->runs), comm_order);
  } else { /* the usual launch: one or two runs, where qsort's set-up costs more */
    for (int i = 1; i < nruns; i++)
      for (int j = i; j > 0 && comm_order(&h->runs[j - 1], &h->runs[j]) > 0; j--) {
        struct comm_run t = h->runs[j];
        h->runs[j] = h->runs[j - 1];
        h->runs[j - 1] = t;
      }
  }
  for (int i = 0; i < nruns; i++)
    h->runs[i].first_of_comm = i == 0 || h->runs[i].comm != h->runs[i - 1].comm;
}

/* The state, then ntasks runs, sorted tasks and units. */
static size_t host_state_size(int ntasks) {
  return sizeof(struct host_launch) +
         (size_t)ntasks *
             (sizeof(struct comm_run) + sizeof(struct coll_task) + sizeof(struct unit));
}

static loomResult_t host_prepare(struct exec_launch* l) {
  struct host_launch* h = l->state; /* zeroed, host_state_size bytes */
  h->spin_max = 1 << 30;
  h->yield_ns = (uint64_t)LOOM_MAX(params_get()->yield_us, 0LL) * 1000u;
  runs_make(h, l->tasks, l->ntasks);
  for (int i = 0; i < h->nruns; i++)
    h->spin_max = LOOM_MIN(h->spin_max, tp_spin_count(h->runs[i].comm));
  loomResult_t res = loomSuccess;
  int locked = 0;
  for (; locked < h->nruns; locked++) {
    struct comm_run* run = &h->runs[locked];
    if (run->first_of_comm) pthread_mutex_lock(&run->comm->coll->exec_lock);
    res = comm_health(run->comm);
    if (res == loomSuccess) res = run_build(run);
    if (res != loomSuccess) {
      locked++;
      break;
    }
  }
  if (res == loomSuccess) {
    /* Every lock is held: the turns are taken at one moment for all of the
     * launch's communicators. */
    for (int i = 0; i < h->nruns; i++) {
      struct coll_comm* cc = h->runs[i].comm->coll;
      if (!h->runs[i].first_of_comm) {
        h->runs[i].turn = h->runs[i - 1].turn; /* the comm's other lane */
        continue;
      }
      h->runs[i].turn = cc->next_turn++;
      atomic_fetch_add(&cc->inflight, 1);
    }
    h->prepared = 1;
  }
  for (int i = locked - 1; i >= 0; i--)
    if (h->runs[i].first_of_comm) pthread_mutex_unlock(&h->runs[i].comm->coll->exec_lock);
  return res;
}

static loomResult_t host_launch(struct exec_launch* l) {
  /* The host executor runs in progress, on the thread that drives the
   * launch: the thread that polls, so the one that needs a core of its own. */
  if (l->ntasks > 0) tp_thread_spread(l->tasks[0].comm);
  return loomSuccess;
}

static void host_release(struct exec_launch* l) {
  struct host_launch* h = l->state;
  host_unannounce(h);
  if (l->result != loomSuccess && h->started && !l->cancel) {
    /* Transfers of an interrupted plan may still sit in connection queues,
     * some pointing into the caller's buffers: withdraw them all, and leave
     * the communicator in error. */
    for (int i = 0; i < h->nruns; i++) {
      struct comm_run* run = &h->runs[i];
      if (run->done) continue;
      comm_set_failed(run->comm, -1, l->result, "%s failed: %s",
                      run->ex.what ? run->ex.what : "operation", err_thread_last());
      if (run->owns) tp_comm_cancel(run->comm);
    }
  }
  loomResult_t end = l->result != loomSuccess ? l->result
                     : l->cancel              ? loomInvalidUsage
                                              : loomSuccess;
  for (int i = 0; i < h->nruns && end != loomSuccess; i++) /* those not done */
    for (int k = 0; k < h->runs[i].ntasks; k++)
      recorder_end(h->runs[i].comm->rec, h->runs[i].tasks[k].rec, end);
  for (int i = h->nruns - 1; i >= 0; i--) {
    struct comm_run* run = &h->runs[i];
    exec_reset(&run->ex);
    exec_xf_free(&run->ex);
    memstat_sub(run->comm, MEM_STAGING, -1, run->ex.stage_cap);
    free(run->ex.stage);
    for (int u = 0; u < run->nunits; u++) plan_obj_unref(run->units[u].plan);
    scratch_obj_unref(run->scratch);
  }
  if (h->waiting) turn_waiting(h, 0);
  if (h->prepared) {
    for (int i = 0; i < h->nruns; i++) {
      struct comm_run* run = &h->runs[i];
      if (!run->first_of_comm) continue;
      /* Pass the turn on, when this launch holds it (see owns). */
      if (h->started && run->owns) {
        atomic_store(&run->comm->coll->serving, run->turn + 1);
        if (atomic_load(&run->comm->coll->turn_waiters) > 0) bell_ring(tp_self_bell(run->comm));
      }
      coll_inflight_done(run->comm);
    }
  }
}

const struct loom_executor exec_host = {
    .name = "host",
    .mem_kinds = MEM_KIND_BIT(MEM_HOST),
    .stream_ok = STREAM_KIND_BIT(STREAM_HOST) | STREAM_KIND_BIT(STREAM_NONE),
    .state_size = host_state_size,
    .prepare = host_prepare,
    .launch = host_launch,
    .progress = host_progress,
    .release = host_release,
};

/* Teardown's doorbell: process-wide, so that a release can ring it after its
 * last touch of the communicator, which teardown may free as soon as the
 * count reads 0. Rung only while someone waits on it. */
static struct bell idle_bell;
static _Atomic int idle_waiters;

void coll_inflight_done(struct loom_comm* comm) {
  /* Both sides are sequentially consistent: either this release sees the
   * waiter counted, or the waiter's look at the count sees this decrement. */
  if (atomic_fetch_sub(&comm->coll->inflight, 1) == 1 && atomic_load(&idle_waiters) > 0)
    bell_ring(&idle_bell);
}

void coll_inflight_wait(struct coll_comm* cc) {
  if (atomic_load(&cc->inflight) == 0) return;
  atomic_fetch_add(&idle_waiters, 1);
  for (;;) {
    uint32_t seen = bell_read(&idle_bell);
    if (atomic_load(&cc->inflight) == 0) break;
    bell_wait(&idle_bell, seen, 100000); /* each launch has deadlines of its own */
  }
  atomic_fetch_sub(&idle_waiters, 1);
}
