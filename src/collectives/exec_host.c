/* exec_host.c - the host executor: runs plans over connections on the
 * calling thread (or a stream's worker).
 *
 * Each communicator of a launch runs its tasks in order; all communicators of
 * the launch progress together, so one thread can drive several ranks of one
 * process inside a group. A step posts all its transfers at once and ends
 * when all are done. When nothing moves, the thread spins briefly and then
 * sleeps on its rank's doorbell, which peers ring when they make progress and
 * the bootstrap watcher rings when a peer fails. Every wait checks the
 * deadline, the abort flag and the communicator's health. */
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/coll.h"
#include "core/bootstrap.h"
#include "core/checks.h"
#include "core/fault.h"
#include "core/params.h"
#include "kernels/cpu/cpu_kernels.h"
#include "topo/tune.h"
#include "transport/transport.h"

struct exec {
  struct loom_comm* comm;
  const struct plan* plan; /* own, or the communicator's plan cache */
  struct plan own;
  void** bufs;
  int nbufs;
  loomDataType_t dtype;
  size_t esize;
  loomRedOp_t redop; /* built-in op for reductions */
  const void* scalar;
  const char* what;
  int lane; /* LANE_COLL or LANE_P2P */
  uint32_t step;
  int posted;
  int connected;
  int sync_wait; /* the step's sync is posted, peers not all there yet */
  struct xfer* xf;
  uint32_t nxf, xf_cap;
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
  int next; /* first task not yet turned into an exec */
  struct exec ex;
  int left_peer; /* a peer ex waits on that has left, seen once; -1: none */
  int active;    /* ex holds a plan being run */
  int done;
  struct deadline dl;
};

static const char* coll_what(enum coll_kind k) {
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
  plan_free(&e->own);
  e->plan = NULL;
  free(e->bufs);
  e->bufs = NULL;
  e->nbufs = 0;
}

/* Points PB_SCRATCH at the communicator's scratch, grown to what the plan
 * needs. Safe: the communicator's exec_lock is held for the whole launch. */
static loomResult_t exec_scratch(struct exec* e) {
  size_t need = e->plan->buf_count[PB_SCRATCH] * e->esize;
  struct coll_comm* cc = e->comm->coll;
  if (need > cc->scratch_bytes) {
    void* p = malloc(need);
    if (!p)
      return err_set(e->comm, loomSystemError, "out of memory for %zu bytes of scratch", need);
    free(cc->scratch);
    cc->scratch = p;
    cc->scratch_bytes = need;
  }
  e->bufs[PB_SCRATCH] = cc->scratch;
  return loomSuccess;
}

/* Turns the tasks starting at run->next into the next plan. */
static loomResult_t exec_prepare(struct comm_run* run) {
  struct exec* e = &run->ex;
  struct coll_task* t = &run->tasks[run->next];
  struct loom_comm* comm = run->comm;
  exec_reset(e);
  e->comm = comm;
  e->step = 0;
  e->posted = 0;
  e->connected = 0;
  e->sync_wait = 0;
  e->nxf = 0;
  e->fault_step = UINT32_MAX;
  e->what = coll_what(t->kind);
  e->lane = run->lane;
  if (t->kind == COLL_SEND || t->kind == COLL_RECV) {
    int n = 0;
    while (run->next + n < run->ntasks && (t[n].kind == COLL_SEND || t[n].kind == COLL_RECV)) n++;
    e->bufs = calloc((size_t)(PB_USER + n), sizeof(void*));
    if (!e->bufs) return err_set(comm, loomSystemError, "out of memory");
    e->nbufs = PB_USER + n;
    for (int k = 0; k < n; k++)
      e->bufs[PB_USER + k] = t[k].kind == COLL_SEND ? (void*)t[k].sendbuff : t[k].recvbuff;
    e->dtype = loomUint8;
    e->esize = 1;
    e->redop = loomSum;
    run->next += n;
    e->plan = &e->own;
    return p2p_build(t, n, &e->own);
  }
  /* A collective. */
  e->bufs = calloc(PB_COUNT, sizeof(void*));
  if (!e->bufs) return err_set(comm, loomSystemError, "out of memory");
  e->nbufs = PB_COUNT;
  e->bufs[PB_SEND] = (void*)t->sendbuff;
  e->bufs[PB_RECV] = t->recvbuff;
  e->dtype = t->dtype;
  e->esize = dtype_size(t->dtype);
  e->redop = redop_is_premul(t->op) || t->op == loomAvg ? loomSum : t->op;
  e->scalar = t->scalar_ptr ? t->scalar_ptr : t->scalar;
  run->next++;
  LOOM_CHECK(algo_plan_cached(t, &e->own, &e->plan));
  LOOM_CHECK(exec_scratch(e));
  if (plan_is_direct(e->plan)) {
    /* The previous direct plan ended with a sync all peers passed, so none
     * still reads what was published for it. */
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

static loomResult_t exec_post_step(struct exec* e) {
  const struct plan_step* st = &e->plan->steps[e->step];
  uint32_t nops = st->op_end - st->op_begin;
  if (nops > e->xf_cap) {
    struct xfer* nx = realloc(e->xf, nops * sizeof(*nx));
    if (!nx) return err_set(e->comm, loomSystemError, "out of memory");
    e->xf = nx;
    e->xf_cap = nops;
  }
  e->nxf = 0;
  if (e->step == e->fault_step) raise(SIGKILL); /* LOOM_FAULT: debugging only */
  for (uint32_t i = st->op_begin; i < st->op_end; i++) {
    const struct plan_op* op = &e->plan->ops[i];
    size_t bytes = op->count * e->esize;
    void* dst = ref_ptr(e, op->dst);
    const void* src = ref_ptr(e, op->src);
    switch (op->kind) {
      case OP_SEND:
      case OP_RECV:
      case OP_RECV_REDUCE: {
        struct xfer* x = &e->xf[e->nxf++];
        struct conn* c;
        memset(x, 0, sizeof(*x));
        x->bytes = bytes;
        x->dtype = e->dtype;
        x->op = e->redop;
        LOOM_CHECK(tp_conn_get(e->comm, op->peer, op->kind == OP_SEND, e->lane, &c));
        if (op->kind == OP_SEND) {
          x->src = src;
          LOOM_CHECK(c->tp->send_post(c, x));
        } else {
          x->dst = dst;
          x->src = src;
          x->reduce = op->kind == OP_RECV_REDUCE;
          LOOM_CHECK(c->tp->recv_post(c, x));
        }
        break;
      }
      case OP_COPY:
        if (dst != src) memcpy(dst, src, bytes);
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
      case OP_PEER_REDUCE:
        LOOM_CHECK(tp_peer_reduce(e->comm, op->peer, op->src.buf, op->src.off * e->esize, dst,
                                  op->count, e->dtype, e->redop));
        break;
      default:
        return err_set(e->comm, loomInternalError, "plan op of unknown kind %d", op->kind);
    }
  }
  e->posted = 1;
  return loomSuccess;
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
    int all = 1;
    for (uint32_t i = 0; i < e->nxf; i++) {
      int d;
      if (e->xf[i].state == 1) continue;
      LOOM_CHECK(e->xf[i].conn->tp->test(&e->xf[i], &d));
      if (d) *moved_out = 1;
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
    if (x->state == 1) continue;
    snprintf(buf, len, "step %u of %u, %s %zu bytes %s peer %d", e->step + 1, e->plan->nsteps,
             x->conn->is_send ? "sending" : "receiving", x->bytes, x->conn->is_send ? "to" : "from",
             x->conn->peer);
    return;
  }
  if (e->sync_wait)
    snprintf(buf, len, "step %u of %u, waiting for its peers at a sync", e->step + 1,
             e->plan->nsteps);
  else if (!e->connected)
    snprintf(buf, len, "connecting to its peers");
  else
    snprintf(buf, len, "step %u of %u", e->step + 1, e->plan->nsteps);
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
  for (uint32_t i = 0; i < e->nxf; i++) {
    const struct xfer* x = &e->xf[i];
    if (x->state != 1 && !x->conn->tp->sees_close && boot_peer_left(comm, x->conn->peer))
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
      if (run->next >= run->ntasks) {
        run->done = 1;
        return loomSuccess;
      }
      LOOM_CHECK(exec_prepare(run));
      run->active = 1;
    }
    int d = 0;
    LOOM_CHECK(exec_progress(&run->ex, &d, moved));
    if (!d) return loomSuccess;
    run->active = 0;
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
  struct deadline grace = deadline_in_ms(boot_left_count(comm) > 0 ? 200 : 1500);
  while (!deadline_passed(&grace)) {
    int e = atomic_load(&comm->async_error);
    if (e != loomSuccess && e != loomInProgress) return comm_health(comm);
    usleep(5000);
  }
  return r;
}

static loomResult_t runs_drive(struct comm_run* runs, int nruns) {
  int spin = 0, spin_max = 1 << 30;
  uint64_t yield_ns = (uint64_t)LOOM_MAX(params_get()->yield_us, 0LL) * 1000u, yield_end = 0;
  for (int i = 0; i < nruns; i++) spin_max = LOOM_MIN(spin_max, tp_spin_count(runs[i].comm));
  for (;;) {
    struct comm_run* first = NULL;
    for (int i = 0; i < nruns && !first; i++)
      if (!runs[i].done) first = &runs[i];
    if (!first) return loomSuccess;
    struct bell* bell = tp_self_bell(first->comm);
    uint32_t seen = bell_read(bell);
    int moved = 0;
    for (int i = 0; i < nruns; i++) {
      if (runs[i].done) continue;
      loomResult_t r = run_progress(&runs[i], &moved);
      if (r != loomSuccess) return root_cause(runs[i].comm, r);
    }
    if (moved) {
      spin = 0;
      yield_end = 0;
      continue;
    }
    for (int i = 0; i < nruns; i++)
      if (!runs[i].done) LOOM_CHECK(run_check(&runs[i]));
    if (spin < spin_max) {
      spin++;
      cpu_relax();
      continue;
    }
    /* Then give the core away for a while before sleeping: with more ranks
     * than cores, the peer this rank waits for is often runnable right here,
     * and a yield hands it the core at once where a sleep and a futex
     * wake-up cost several microseconds on each side. */
    uint64_t now = time_now_ns();
    if (yield_end == 0) yield_end = now + yield_ns;
    if (now < yield_end) {
      sched_yield();
      continue;
    }
    /* With several ranks on one thread a peer's ring may land on another
     * rank's bell: nap briefly instead of sleeping long on one. A
     * transport's thread takes over what this thread polled. */
    for (int i = 0; i < nruns; i++)
      if (!runs[i].done) tp_idle(runs[i].comm); /* a second call for a comm returns at once */
    bell_wait(bell, seen, nruns > 1 ? 200 : 100000);
  }
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

/* Groups the launch's tasks by communicator and lane, keeping their order. */
static loomResult_t runs_make(struct coll_task* tasks, int ntasks, struct comm_run** out,
                              int* nout) {
  struct comm_run* runs = calloc((size_t)ntasks, sizeof(*runs));
  struct coll_task* sorted = malloc((size_t)ntasks * sizeof(*sorted));
  if (!runs || !sorted) {
    free(runs);
    free(sorted);
    return err_set(NULL, loomSystemError, "out of memory");
  }
  int nruns = 0, pos = 0;
  for (int i = 0; i < ntasks; i++) {
    int lane = lane_of(&tasks[i]), seen = 0;
    for (int r = 0; r < nruns; r++) seen |= runs[r].comm == tasks[i].comm && runs[r].lane == lane;
    if (seen) continue;
    runs[nruns].comm = tasks[i].comm;
    runs[nruns].lane = lane;
    runs[nruns].tasks = sorted + pos;
    for (int j = i; j < ntasks; j++)
      if (tasks[j].comm == tasks[i].comm && lane_of(&tasks[j]) == lane) sorted[pos++] = tasks[j];
    runs[nruns].ntasks = (int)(sorted + pos - runs[nruns].tasks);
    runs[nruns].dl = deadline_in_ms(tasks[i].comm->timeout_ms);
    runs[nruns].left_peer = -1;
    nruns++;
  }
  *out = runs;
  *nout = nruns;
  return loomSuccess;
}

loomResult_t exec_tasks(struct coll_task* tasks, int ntasks) {
  struct comm_run* runs = NULL;
  int nruns = 0;
  if (ntasks == 0) return loomSuccess;
  LOOM_CHECK(runs_make(tasks, ntasks, &runs, &nruns));
  struct coll_task* sorted = runs[0].tasks;
  /* A consistent lock order, so two threads launching groups over the same
   * communicators cannot deadlock on the locks. */
  qsort(runs, (size_t)nruns, sizeof(*runs), comm_order);
  loomResult_t res = loomSuccess;
  for (int i = 0; i < nruns; i++) {
    if (i > 0 && runs[i].comm == runs[i - 1].comm) continue; /* one lock per comm */
    pthread_mutex_lock(&runs[i].comm->coll->exec_lock);
    if (res == loomSuccess) res = comm_health(runs[i].comm);
  }
  if (res == loomSuccess) res = runs_drive(runs, nruns);
  if (res != loomSuccess) {
    /* Transfers of an interrupted plan may still sit in connection queues,
     * some pointing into the caller's buffers: withdraw them all, and leave
     * the communicator in error. */
    for (int i = 0; i < nruns; i++) {
      if (runs[i].done) continue;
      comm_set_failed(runs[i].comm, -1, res, "%s failed: %s",
                      runs[i].ex.what ? runs[i].ex.what : "operation", err_thread_last());
      tp_comm_cancel(runs[i].comm);
    }
  }
  for (int i = nruns - 1; i >= 0; i--) {
    if (i == 0 || runs[i].comm != runs[i - 1].comm)
      pthread_mutex_unlock(&runs[i].comm->coll->exec_lock);
    exec_reset(&runs[i].ex);
    free(runs[i].ex.xf);
  }
  free(sorted);
  free(runs);
  return res;
}
