/* plan.c - building and printing plans (see plan.h).
 *
 * Generators call plan_step_begin/plan_add in a loop and check only the
 * result of plan_finish: an allocation failure is remembered in p->failed
 * and every later call becomes a no-op, which keeps generator loops free of
 * error handling. */
#include "collectives/plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checks.h"

/* Grows *arr (of *cap elements of elem bytes) to hold at least need.
 * Capacities stay within uint32_t because steps and ops are indexed by it.
 * Returns 0 on success, -1 when out of memory or past the index range. */
static int grow(void** arr, uint32_t* cap, uint64_t need, size_t elem) {
  if (need <= *cap) return 0;
  if (need > UINT32_MAX) return -1;
  uint64_t ncap = *cap ? (uint64_t)*cap * 2 : 16;
  if (ncap < need) ncap = need;
  if (ncap > UINT32_MAX) ncap = UINT32_MAX;
  void* p = realloc(*arr, (size_t)ncap * elem);
  if (p == NULL) return -1;
  *arr = p;
  *cap = (uint32_t)ncap;
  return 0;
}

void plan_init(struct plan* p, int rank, int nranks, const char* algo) {
  memset(p, 0, sizeof(*p));
  p->rank = rank;
  p->nranks = nranks;
  p->algo = algo;
}

void plan_free(struct plan* p) {
  free(p->steps);
  free(p->ops);
  memset(p, 0, sizeof(*p));
}

/* Works on a zeroed plan too, so generators may reset whatever they get. */
void plan_reset(struct plan* p) {
  p->nsteps = 0;
  p->nops = 0;
  p->failed = 0;
  memset(p->buf_count, 0, sizeof(p->buf_count));
}

void plan_step_begin(struct plan* p) {
  if (p->failed) return;
  /* The previous step is still empty: reuse it, which drops it. */
  if (p->nsteps > 0 && p->steps[p->nsteps - 1].op_begin == p->steps[p->nsteps - 1].op_end) return;
  if (grow((void**)&p->steps, &p->steps_cap, (uint64_t)p->nsteps + 1, sizeof(*p->steps))) {
    p->failed = 1;
    return;
  }
  p->steps[p->nsteps].op_begin = p->nops;
  p->steps[p->nsteps].op_end = p->nops;
  p->nsteps++;
}

void plan_add(struct plan* p, enum plan_op_kind kind, int peer, struct plan_ref src,
              struct plan_ref dst, size_t count) {
  if (count == 0 || p->failed) return;
  if (p->nsteps == 0) plan_step_begin(p); /* an op before any step opens one */
  if (p->failed) return;
  if (grow((void**)&p->ops, &p->ops_cap, (uint64_t)p->nops + 1, sizeof(*p->ops))) {
    p->failed = 1;
    return;
  }
  struct plan_op* op = &p->ops[p->nops++];
  op->kind = (uint8_t)kind;
  op->peer = peer;
  op->src = src;
  op->dst = dst;
  op->count = count;
  p->steps[p->nsteps - 1].op_end = p->nops;
}

loomResult_t plan_finish(struct plan* p) {
  if (p->failed) {
    return err_set_sub(NULL, SUB_COLL | SUB_ALLOC, loomSystemError,
                       "rank %d: cannot grow the %s plan past %u steps, %u ops (out of memory "
                       "or past 2^32 entries)",
                       p->rank, p->algo ? p->algo : "?", p->nsteps, p->nops);
  }
  if (p->nsteps > 0 && p->steps[p->nsteps - 1].op_begin == p->steps[p->nsteps - 1].op_end)
    p->nsteps--;
  return loomSuccess;
}

/* ---- Printing ---- */

static const char* const op_names[OP_KIND_COUNT] = {
    "send",      "recv",       "recv_reduce",  "copy",        "reduce",
    "premul",    "div",        "peer_copy",    "peer_reduce", "sync",
    "lines_put", "lines_copy", "lines_reduce", "lines_seen",
};
static const char* const buf_names[PB_COUNT] = {"send", "recv", "scratch"};

enum plan_buf plan_premul_input(const struct coll_args* a, struct plan* p, size_t len) {
  if (!a->premul || len == 0) return PB_SEND;
  plan_step_begin(p);
  plan_add(p, OP_PREMUL, -1, plan_ref_make(PB_SEND, 0), plan_ref_make(PB_SCRATCH, 0), len);
  return PB_SCRATCH;
}

const char* plan_op_name(unsigned kind) {
  return kind < OP_KIND_COUNT ? op_names[kind] : "?op";
}

/* Buffers past PB_COUNT are the executor's own (e.g. one per task of a
 * group of sends and receives). */
const char* plan_buf_name(unsigned buf) {
  if (buf == PB_LINES) return "lines";
  return buf < PB_COUNT ? buf_names[buf] : "user";
}

/* Appends to buf like snprintf; *pos keeps counting past len so the caller
 * can tell that the text was cut. */
static void put(char* buf, size_t len, size_t* pos, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char* buf, size_t len, size_t* pos, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char* at = *pos < len ? buf + *pos : NULL;
  int n = vsnprintf(at, at ? len - *pos : 0, fmt, ap);
  va_end(ap);
  if (n > 0) *pos += (size_t)n;
}

static void put_ref(char* buf, size_t len, size_t* pos, struct plan_ref r, size_t count) {
  if (r.buf < PB_COUNT || r.buf == PB_LINES)
    put(buf, len, pos, "%s[%zu..%zu)", plan_buf_name(r.buf), r.off, r.off + count);
  else
    put(buf, len, pos, "user%u[%zu..%zu)", r.buf - PB_COUNT, r.off, r.off + count);
}

/* One line per op, written as what it computes. */
static void put_op(char* buf, size_t len, size_t* pos, const struct plan_op* op) {
  put(buf, len, pos, "    %-11s ", plan_op_name(op->kind));
  switch (op->kind) {
    case OP_SEND:
      put(buf, len, pos, "to %d: ", op->peer);
      put_ref(buf, len, pos, op->src, op->count);
      break;
    case OP_RECV:
    case OP_RECV_REDUCE:
      put(buf, len, pos, "from %d: ", op->peer);
      put_ref(buf, len, pos, op->dst, op->count);
      if (op->kind == OP_RECV_REDUCE) {
        put(buf, len, pos, " = ");
        put_ref(buf, len, pos, op->src, op->count);
        put(buf, len, pos, " + incoming");
      }
      break;
    case OP_SYNC:
      break;
    case OP_LINES_SEEN:
      put(buf, len, pos, "%d's put of an earlier call", op->peer);
      break;
    case OP_PEER_COPY:
    case OP_PEER_REDUCE:
    case OP_LINES_COPY:
    case OP_LINES_REDUCE:
      put_ref(buf, len, pos, op->dst, op->count);
      put(buf, len, pos,
          op->kind == OP_PEER_COPY || op->kind == OP_LINES_COPY ? " <- %d's " : " += %d's ",
          op->peer);
      put_ref(buf, len, pos, op->src, op->count);
      break;
    default:
      put_ref(buf, len, pos, op->dst, op->count);
      put(buf, len, pos, " <- ");
      put_ref(buf, len, pos, op->src, op->count);
      break;
  }
  put(buf, len, pos, "\n");
}

void plan_print(const struct plan* p, char* buf, size_t len) {
  size_t pos = 0;
  if (len == 0) return;
  buf[0] = '\0';
  put(buf, len, &pos, "plan %s rank %d/%d: %u steps, %u ops; send %zu recv %zu scratch %zu%s\n",
      p->algo ? p->algo : "?", p->rank, p->nranks, p->nsteps, p->nops, p->buf_count[PB_SEND],
      p->buf_count[PB_RECV], p->buf_count[PB_SCRATCH], p->failed ? " (FAILED)" : "");
  for (uint32_t s = 0; s < p->nsteps && pos < len; s++) {
    put(buf, len, &pos, "  step %u:\n", s);
    for (uint32_t o = p->steps[s].op_begin; o < p->steps[s].op_end && pos < len; o++)
      put_op(buf, len, &pos, &p->ops[o]);
  }
  /* Mark a cut listing so nobody mistakes it for the whole plan. */
  if (pos >= len && len > 4) memcpy(buf + len - 5, "...\n", 5);
}
