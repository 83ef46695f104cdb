/* loom_hang.c - `loom_info --hang DIR` (see loom_hang.h). */
#include "loom_hang.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- A small JSON reader: a tree with bounded depth and size -------------------------- */

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jv {
  int t;
  long long i;  /* J_NUM (truncated toward zero when not an integer), J_BOOL */
  char* s;      /* J_STR: decoded, NUL-terminated (a NUL inside is kept as '?') */
  struct jv* v; /* J_ARR, J_OBJ: n children */
  char** k;     /* J_OBJ: their keys */
  int n, cap;
};

struct jp {
  const char *p, *start, *end;
  int depth;
  long nodes;
  char* why;
  size_t why_len;
};

#define J_MAX_DEPTH 16
#define J_MAX_NODES 4000000L
#define J_MAX_STRING (1 << 20)

static int jfail(struct jp* j, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static int jfail(struct jp* j, const char* fmt, ...) {
  if (j->why[0]) return -1; /* the first reason stays */
  char msg[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  snprintf(j->why, j->why_len, "%s at byte %ld", msg, (long)(j->p - j->start));
  return -1;
}

static void jfree(struct jv* v) {
  if (!v) return;
  free(v->s);
  for (int i = 0; i < v->n; i++) {
    jfree(&v->v[i]);
    if (v->k) free(v->k[i]);
  }
  free(v->v);
  free(v->k);
  memset(v, 0, sizeof(*v));
}

static void skip_ws(struct jp* j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* A string at j->p (the opening quote), decoded into *out (malloc'd). */
static int parse_string(struct jp* j, char** out) {
  j->p++; /* the quote */
  size_t cap = 32, n = 0;
  char* s = malloc(cap);
  if (!s) return jfail(j, "out of memory");
  for (;;) {
    if (j->p >= j->end) {
      free(s);
      return jfail(j, "unterminated string");
    }
    unsigned char c = (unsigned char)*j->p++;
    if (c == '"') break;
    if (c < 0x20) {
      free(s);
      return jfail(j, "control character in a string");
    }
    if (c == '\\') {
      if (j->p >= j->end) {
        free(s);
        return jfail(j, "unterminated escape");
      }
      char e = *j->p++;
      switch (e) {
        case '"':
        case '\\':
        case '/':
          c = (unsigned char)e;
          break;
        case 'b':
          c = '\b';
          break;
        case 'f':
          c = '\f';
          break;
        case 'n':
          c = '\n';
          break;
        case 'r':
          c = '\r';
          break;
        case 't':
          c = '\t';
          break;
        case 'u': {
          int code = 0;
          for (int k = 0; k < 4; k++) {
            int h = j->p < j->end ? hexval(*j->p) : -1;
            if (h < 0) {
              free(s);
              return jfail(j, "bad \\u escape");
            }
            code = code * 16 + h;
            j->p++;
          }
          c = code > 0 && code < 0x80 ? (unsigned char)code : '?';
          break;
        }
        default:
          free(s);
          return jfail(j, "bad escape \\%c", e);
      }
    }
    if (n + 2 > cap) {
      if (cap >= J_MAX_STRING) {
        free(s);
        return jfail(j, "string longer than %d bytes", J_MAX_STRING);
      }
      char* t = realloc(s, cap * 2);
      if (!t) {
        free(s);
        return jfail(j, "out of memory");
      }
      s = t;
      cap *= 2;
    }
    s[n++] = c ? (char)c : '?';
  }
  s[n] = 0;
  *out = s;
  return 0;
}

static int parse_number(struct jp* j, struct jv* v) {
  const char* b = j->p;
  if (j->p < j->end && *j->p == '-') j->p++;
  const char* digits = j->p;
  while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
  if (j->p == digits) return jfail(j, "bad number");
  if (j->p - digits > 1 && *digits == '0') return jfail(j, "number with a leading zero");
  int frac = 0;
  if (j->p < j->end && *j->p == '.') {
    j->p++;
    const char* f = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    if (j->p == f) return jfail(j, "bad fraction");
    frac = 1;
  }
  if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
    j->p++;
    if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
    const char* x = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    if (j->p == x) return jfail(j, "bad exponent");
    frac = 1;
  }
  char buf[64];
  size_t len = (size_t)(j->p - b);
  if (len >= sizeof(buf)) len = sizeof(buf) - 1; /* a value that long is clamped below */
  memcpy(buf, b, len);
  buf[len] = 0;
  v->t = J_NUM;
  if (frac) {
    double d = strtod(buf, NULL);
    v->i = d > 9e18 ? INT64_MAX : d < -9e18 ? INT64_MIN : (long long)d;
  } else {
    errno = 0;
    v->i = strtoll(buf, NULL, 10); /* ERANGE clamps, which is what we want */
  }
  return 0;
}

static int parse_value(struct jp* j, struct jv* v);

static int add_child(struct jp* j, struct jv* v, char* key) {
  if (v->n == v->cap) {
    int cap = v->cap ? v->cap * 2 : 8;
    struct jv* nv = realloc(v->v, (size_t)cap * sizeof(*nv));
    if (!nv) return jfail(j, "out of memory");
    v->v = nv;
    if (v->t == J_OBJ) {
      char** nk = realloc(v->k, (size_t)cap * sizeof(*nk));
      if (!nk) return jfail(j, "out of memory");
      v->k = nk;
    }
    v->cap = cap;
  }
  memset(&v->v[v->n], 0, sizeof(v->v[v->n]));
  if (v->t == J_OBJ) v->k[v->n] = key;
  v->n++;
  return 0;
}

static int parse_container(struct jp* j, struct jv* v, int obj) {
  v->t = obj ? J_OBJ : J_ARR;
  j->p++;
  skip_ws(j);
  if (j->p < j->end && *j->p == (obj ? '}' : ']')) {
    j->p++;
    return 0;
  }
  for (;;) {
    char* key = NULL;
    skip_ws(j);
    if (obj) {
      if (j->p >= j->end || *j->p != '"') return jfail(j, "expected a key");
      if (parse_string(j, &key) != 0) return -1;
      skip_ws(j);
      if (j->p >= j->end || *j->p != ':') {
        free(key);
        return jfail(j, "expected ':'");
      }
      j->p++;
    }
    if (add_child(j, v, key) != 0) {
      free(key);
      return -1;
    }
    if (parse_value(j, &v->v[v->n - 1]) != 0) return -1;
    skip_ws(j);
    if (j->p < j->end && *j->p == ',') {
      j->p++;
      continue;
    }
    if (j->p < j->end && *j->p == (obj ? '}' : ']')) {
      j->p++;
      return 0;
    }
    return jfail(j, "expected ',' or '%c'", obj ? '}' : ']');
  }
}

static int parse_value(struct jp* j, struct jv* v) {
  if (++j->nodes > J_MAX_NODES) return jfail(j, "more than %ld values", J_MAX_NODES);
  skip_ws(j);
  if (j->p >= j->end) return jfail(j, "unexpected end");
  char c = *j->p;
  int r;
  if (c == '{' || c == '[') {
    if (++j->depth > J_MAX_DEPTH) return jfail(j, "nested deeper than %d", J_MAX_DEPTH);
    r = parse_container(j, v, c == '{');
    j->depth--;
    return r;
  }
  if (c == '"') {
    v->t = J_STR;
    return parse_string(j, &v->s);
  }
  if (c == '-' || (c >= '0' && c <= '9')) return parse_number(j, v);
  static const struct {
    const char* word;
    int t, i;
  } words[] = {{"true", J_BOOL, 1}, {"false", J_BOOL, 0}, {"null", J_NULL, 0}};
  for (size_t w = 0; w < 3; w++) {
    size_t len = strlen(words[w].word);
    if ((size_t)(j->end - j->p) >= len && memcmp(j->p, words[w].word, len) == 0) {
      j->p += len;
      v->t = words[w].t;
      v->i = words[w].i;
      return 0;
    }
  }
  return jfail(j, "unexpected character '%c'", c >= 0x20 && c < 0x7f ? c : '?');
}

static const struct jv* jget(const struct jv* o, const char* key) {
  if (!o || o->t != J_OBJ) return NULL;
  for (int i = 0; i < o->n; i++)
    if (strcmp(o->k[i], key) == 0) return &o->v[i];
  return NULL;
}

static long long jint(const struct jv* o, const char* key, long long def) {
  const struct jv* v = jget(o, key);
  return v && v->t == J_NUM ? v->i : def;
}

static void jstr(const struct jv* o, const char* key, char* buf, size_t len) {
  const struct jv* v = jget(o, key);
  snprintf(buf, len, "%s", v && v->t == J_STR ? v->s : "");
}

/* ---- Records -------------------------------------------------------------------- */

#define LOOM_CLAMP_STEPS(v) ((v) < 0 ? 0 : (v) > (1LL << 31) ? (1LL << 31) : (v))

void hang_rank_free(struct hang_rank* r) {
  free(r->ops);
  r->ops = NULL;
  r->nops = 0;
}

int hang_parse(const char* text, size_t len, struct hang_rank* out, char* why, size_t why_len) {
  memset(out, 0, sizeof(*out));
  why[0] = 0;
  struct jp j = {text, text, text + len, 0, 0, why, why_len};
  struct jv top;
  memset(&top, 0, sizeof(top));
  int rc = parse_value(&j, &top);
  if (rc == 0) {
    skip_ws(&j);
    if (j.p != j.end) rc = jfail(&j, "text after the record");
  }
  if (rc == 0 && (top.t != J_OBJ || jint(&top, "loom_flight_record", 0) != 1)) {
    snprintf(why, why_len, "not a Loom flight record (no \"loom_flight_record\": 1)");
    rc = -1;
  }
  const struct jv* ops = rc == 0 ? jget(&top, "ops") : NULL;
  if (rc == 0) {
    jstr(&top, "comm", out->comm, sizeof(out->comm));
    jstr(&top, "name", out->name, sizeof(out->name));
    jstr(&top, "host", out->host, sizeof(out->host));
    jstr(&top, "reason", out->reason, sizeof(out->reason));
    long long rank = jint(&top, "rank", -1), nranks = jint(&top, "nranks", 0);
    out->pid = (int)jint(&top, "pid", 0);
    long long fp = jint(&top, "failed_peer", -1);
    out->time_ns = jint(&top, "time_ns", 0);
    if (!out->comm[0] || nranks < 1 || nranks > (1 << 20) || rank < 0 || rank >= nranks) {
      snprintf(why, why_len, "bad comm, rank or nranks (rank %lld of %lld)", rank, nranks);
      rc = -1;
    } else if (!ops || ops->t != J_ARR) {
      snprintf(why, why_len, "no \"ops\" array");
      rc = -1;
    } else {
      out->rank = (int)rank;
      out->nranks = (int)nranks;
      out->failed_peer = fp >= 0 && fp < nranks ? (int)fp : -1;
    }
  }
  if (rc == 0 && ops->n > 0) {
    out->ops = calloc((size_t)ops->n, sizeof(*out->ops));
    if (!out->ops) {
      snprintf(why, why_len, "out of memory");
      rc = -1;
    }
  }
  for (int i = 0; rc == 0 && i < ops->n; i++) {
    const struct jv* o = &ops->v[i];
    if (o->t != J_OBJ) continue;
    struct hang_op* h = &out->ops[out->nops];
    const struct jv* p2p = jget(o, "p2p_seq");
    h->p2p = p2p != NULL;
    h->seq = p2p ? jint(o, "p2p_seq", -1) : jint(o, "seq", -1);
    if (h->seq < 0) continue;
    h->call = jint(o, "call", -1);
    jstr(o, "kind", h->kind, sizeof(h->kind));
    jstr(o, "algo", h->algo, sizeof(h->algo));
    jstr(o, "dtype", h->dtype, sizeof(h->dtype));
    jstr(o, "op", h->op, sizeof(h->op));
    jstr(o, "state", h->state, sizeof(h->state));
    jstr(o, "result", h->result, sizeof(h->result));
    jstr(o, "wait_dir", h->wait_dir, sizeof(h->wait_dir));
    h->count = jint(o, "count", -1);
    h->root = jint(o, "root", -1);
    /* Counted, printed plus one: a record cannot make them overflow. */
    h->step = LOOM_CLAMP_STEPS(jint(o, "step", 0));
    h->nsteps = LOOM_CLAMP_STEPS(jint(o, "nsteps", 0));
    h->wait_peer = jint(o, "wait_peer", -1);
    h->wait_bytes = jint(o, "wait_bytes", 0);
    h->t_enqueue = jint(o, "t_enqueue_ns", 0);
    h->t_start = jint(o, "t_start_ns", 0);
    h->t_wait = jint(o, "t_wait_ns", 0);
    h->t_end = jint(o, "t_end_ns", 0);
    out->nops++;
  }
  jfree(&top);
  if (rc != 0) hang_rank_free(out);
  return rc;
}

/* ---- Diagnosis ------------------------------------------------------------------ */

static int is_reducing(const char* kind) {
  return !strcmp(kind, "allreduce") || !strcmp(kind, "reduce") || !strcmp(kind, "reducescatter");
}

static int is_rooted(const char* kind) {
  return !strcmp(kind, "broadcast") || !strcmp(kind, "reduce") || !strcmp(kind, "gather") ||
         !strcmp(kind, "scatter");
}

static int is_pending(const struct hang_op* o) {
  return strcmp(o->state, "done") != 0 && strcmp(o->state, "failed") != 0;
}

/* "allreduce count 4096 float32 sum" (root for rooted ones). */
static void sig_text(const struct hang_op* o, char* buf, size_t len) {
  int at = snprintf(buf, len, "%s count %lld %s", o->kind, o->count, o->dtype);
  if (at > 0 && (size_t)at < len && is_reducing(o->kind))
    at += snprintf(buf + at, len - (size_t)at, " %s", o->op);
  if (at > 0 && (size_t)at < len && is_rooted(o->kind))
    snprintf(buf + at, len - (size_t)at, " root %lld", o->root);
}

/* The fields in which a and b differ, "" if none. */
static void sig_diff(const struct hang_op* a, const struct hang_op* b, char* buf, size_t len) {
  buf[0] = 0;
  int at = 0;
#define DIFF(cond, name)                                                        \
  do {                                                                          \
    if ((cond) && at >= 0 && (size_t)at < len)                                  \
      at += snprintf(buf + at, len - (size_t)at, "%s%s", at ? ", " : "", name); \
  } while (0)
  DIFF(strcmp(a->kind, b->kind) != 0, "collective");
  DIFF(!strcmp(a->kind, b->kind) && a->count != b->count, "count");
  DIFF(!strcmp(a->kind, b->kind) && strcmp(a->dtype, b->dtype) != 0, "datatype");
  DIFF(!strcmp(a->kind, b->kind) && is_reducing(a->kind) && strcmp(a->op, b->op) != 0, "op");
  DIFF(!strcmp(a->kind, b->kind) && is_rooted(a->kind) && a->root != b->root, "root");
#undef DIFF
}

/* A comma list of the ranks r with mark[r] == want. */
static void rank_list(const int* mark, int n, int want, char* buf, size_t len) {
  int at = 0;
  buf[0] = 0;
  for (int r = 0; r < n && at >= 0 && (size_t)at < len; r++)
    if (mark[r] == want) at += snprintf(buf + at, len - (size_t)at, "%s%d", at ? "," : "", r);
}

/* Orders a record's operations: collectives by number, then point-to-point calls, each by call. */
static int op_order(const void* a, const void* b) {
  const struct hang_op *x = a, *y = b;
  if (x->p2p != y->p2p) return x->p2p - y->p2p;
  if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
  return x->call < y->call ? -1 : x->call > y->call;
}

/* The collective numbered seq in r's record (sorted by op_order), or NULL. */
static const struct hang_op* coll_at(const struct hang_rank* r, long long seq) {
  int lo = 0, hi = r->nops; /* the first collective with a number >= seq */
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    const struct hang_op* o = &r->ops[mid];
    if (!o->p2p && o->seq < seq)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < r->nops && !r->ops[lo].p2p && r->ops[lo].seq == seq ? &r->ops[lo] : NULL;
}

/* A collective's wait on a peer whose record shows that collective done: the peer delivered
 * what it had to (or the wait would not have let it finish), so what ended the wait was the
 * communicator's failure, not the peer. */
static int stale_wait(struct hang_rank* const* rr, const struct hang_op* o) {
  const struct hang_rank* p = rr[o->wait_peer];
  if (o->p2p || !p) return 0;
  const struct hang_op* there = coll_at(p, o->seq);
  return there && !strcmp(there->state, "done");
}

/* The first pending operation of r (collective or not, by call), or NULL. */
static const struct hang_op* first_pending(const struct hang_rank* r) {
  const struct hang_op* best = NULL;
  for (int i = 0; i < r->nops; i++)
    if (is_pending(&r->ops[i]) && (!best || r->ops[i].call < best->call)) best = &r->ops[i];
  return best;
}

static int ll_order(const void* a, const void* b) {
  long long x = *(const long long*)a, y = *(const long long*)b;
  return x < y ? -1 : x > y;
}

static void op_name(const struct hang_op* o, char* buf, size_t len) {
  char sig[96];
  sig_text(o, sig, sizeof(sig));
  if (o->p2p)
    snprintf(buf, len, "%s #%lld (%lld bytes, peer %lld)", o->kind, o->seq, o->count, o->root);
  else
    snprintf(buf, len, "collective #%lld (%s)", o->seq, sig);
}

/* Diagnoses the records rr[0..nranks) of one communicator (rank order, NULL where missing).
 * Every loop runs over the recorded ranks and the collective numbers they recorded, never over
 * a range a record could make as large as it likes. */
static void diagnose_comm(struct hang_rank** rr, int nranks, FILE* out) {
  int npr = 0, nseq = 0;
  size_t total = 0;
  for (int r = 0; r < nranks; r++)
    if (rr[r]) npr++, total += (size_t)rr[r]->nops;
  int* pr = calloc((size_t)npr + 1, sizeof(int)); /* the recorded ranks */
  const struct hang_op** pend = calloc((size_t)npr + 1, sizeof(*pend));
  long long* seqs = calloc(total + 1, sizeof(long long));
  int* mark = calloc((size_t)nranks, sizeof(int));
  int* mark2 = calloc((size_t)nranks, sizeof(int));
  int* waits = calloc((size_t)nranks, sizeof(int));
  if (!pr || !pend || !seqs || !mark || !mark2 || !waits) {
    fprintf(out, "out of memory\n");
    goto out;
  }
  npr = 0;
  for (int r = 0; r < nranks; r++) {
    if (!rr[r]) continue;
    if (rr[r]->nops > 1) qsort(rr[r]->ops, (size_t)rr[r]->nops, sizeof(*rr[r]->ops), op_order);
    pend[npr] = first_pending(rr[r]);
    pr[npr++] = r;
    for (int i = 0; i < rr[r]->nops; i++)
      if (!rr[r]->ops[i].p2p) seqs[nseq++] = rr[r]->ops[i].seq;
  }
  if (nseq > 1) qsort(seqs, (size_t)nseq, sizeof(*seqs), ll_order);
  int u = 0;
  for (int i = 0; i < nseq; i++)
    if (i == 0 || seqs[i] != seqs[i - 1]) seqs[u++] = seqs[i];
  nseq = u;

  const struct hang_rank* any = rr[pr[0]];
  char list[512], list2[512], a[160], b[160];
  fprintf(out, "communicator %s%s%s%s: %d ranks, records from %d\n", any->comm,
          any->name[0] ? " (\"" : "", any->name, any->name[0] ? "\")" : "", nranks, npr);
  for (int r = 0; r < nranks; r++) mark[r] = rr[r] != NULL;
  rank_list(mark, nranks, 0, list, sizeof(list));
  if (npr < nranks) fprintf(out, "  no record from rank(s) %s\n", list);
  for (int i = 0; i < npr; i++) {
    const struct hang_rank* h = rr[pr[i]];
    fprintf(out, "  rank %d (pid %d on %s, %d operations recorded): %s\n", pr[i], h->pid, h->host,
            h->nops, h->reason);
  }

  /* The last collective every recorded rank completed. */
  long long done_all = -2;
  for (int i = 0; i < npr; i++) {
    long long done = -1;
    const struct hang_rank* h = rr[pr[i]];
    for (int k = 0; k < h->nops; k++)
      if (!h->ops[k].p2p && !strcmp(h->ops[k].state, "done") && h->ops[k].seq > done)
        done = h->ops[k].seq;
    if (done_all == -2 || done < done_all) done_all = done;
  }
  const struct hang_op* last = done_all >= 0 ? coll_at(rr[pr[0]], done_all) : NULL;
  if (last) {
    op_name(last, a, sizeof(a));
    fprintf(out, "  last collective every recorded rank completed: %s\n", a);
  } else {
    fprintf(out, "  no collective was completed by every recorded rank\n");
  }

  /* The first divergence among the recorded ranks: other arguments anywhere in the records (a
   * mismatch may complete, with wrong results), a collective some entered and others not after
   * the last one all completed. */
  char verdict[2048] = "";
  for (int si = 0; si < nseq && !verdict[0]; si++) {
    long long s = seqs[si];
    const struct hang_op* ref = NULL;
    int entered = 0;
    for (int r = 0; r < nranks; r++) mark[r] = mark2[r] = -1;
    for (int i = 0; i < npr; i++) {
      const struct hang_op* o = coll_at(rr[pr[i]], s);
      mark[pr[i]] = o != NULL;
      entered += o != NULL;
      if (o && !ref) ref = o;
    }
    if (!ref) continue;
    /* Other arguments: the ranks grouped by what they called; the smaller group diverges. */
    int groups = 0, best = -1, best_size = 0;
    const struct hang_op* gref[64];
    int gsize[64];
    for (int i = 0; i < npr; i++) {
      const struct hang_op* o = coll_at(rr[pr[i]], s);
      if (!o) continue;
      int g = 0;
      for (; g < groups; g++) {
        sig_diff(o, gref[g], a, sizeof(a));
        if (!a[0]) break;
      }
      if (g == groups && groups < 64) {
        gref[groups] = o;
        gsize[groups++] = 0;
      }
      if (g < groups) {
        gsize[g]++;
        mark2[pr[i]] = g;
      }
    }
    if (groups > 1) {
      for (int g = 0; g < groups; g++)
        if (best < 0 || gsize[g] > best_size) best = g, best_size = gsize[g];
      fprintf(out, "  collective #%lld was entered with different arguments:\n", s);
      int at = 0, first_odd = -1;
      list2[0] = 0;
      for (int g = 0; g < groups; g++) {
        rank_list(mark2, nranks, g, list, sizeof(list));
        sig_text(gref[g], a, sizeof(a));
        fprintf(out, "    rank(s) %s: %s\n", list, a);
        if (g == best) continue;
        if (first_odd < 0) first_odd = g;
        if (at >= 0 && (size_t)at < sizeof(list2))
          at += snprintf(list2 + at, sizeof(list2) - (size_t)at, "%s%s", at ? "," : "", list);
      }
      sig_diff(gref[first_odd], gref[best], b, sizeof(b));
      sig_text(gref[best], a, sizeof(a));
      snprintf(verdict, sizeof(verdict),
               "rank(s) %s diverge at collective #%lld: they called it with another %s than the "
               "other ranks (%s)%s",
               list2, s, b, a,
               !strcmp(gref[first_odd]->kind, gref[best]->kind)
                   ? ""
                   : ": a skipped call, or calls in another order");
      break;
    }
    /* A rank without it that is still inside an earlier collective is behind, not at fault: the
     * waits below say on whom. So is one whose communicator failed under it before it called
     * this one, by a rank that left no record (a failed communicator refuses the call, so the
     * record never shows it entered). One that has left every collective otherwise skipped it
     * or is elsewhere. */
    int idle_missing = 0;
    for (int i = 0; i < npr; i++) {
      if (mark[pr[i]] != 0) continue;
      int fp = rr[pr[i]]->failed_peer;
      if ((pend[i] && !pend[i]->p2p && pend[i]->seq < s) ||
          (!pend[i] && fp >= 0 && fp < nranks && fp != pr[i] && !rr[fp]))
        mark[pr[i]] = 2;
      else
        idle_missing++;
    }
    if (entered && idle_missing && s > done_all) {
      rank_list(mark, nranks, 1, list, sizeof(list));
      rank_list(mark, nranks, 0, list2, sizeof(list2));
      op_name(ref, a, sizeof(a));
      fprintf(out, "  %s was entered by rank(s) %s, not by rank(s) %s\n", a, list, list2);
      snprintf(verdict, sizeof(verdict),
               "rank(s) %s never entered %s, which rank(s) %s wait in: they skipped it, or are "
               "busy or stuck in their own code",
               list2, a, list);
    }
  }

  /* Who waits on whom: each recorded rank's first pending operation. */
  for (int r = 0; r < nranks; r++) waits[r] = -1;
  for (int i = 0; i < npr; i++) {
    const struct hang_op* o = pend[i];
    int r = pr[i];
    if (!o) continue;
    op_name(o, a, sizeof(a));
    if (o->wait_peer >= 0 && o->wait_peer < nranks && stale_wait(rr, o)) {
      /* Its peer finished that collective since (its record says so): the wait did not hold
       * this rank, the failure ended it, so it waits on the rank its error names. Ranks that
       * each wait on every other (lines) otherwise seem to wait in a cycle. */
      int fp = rr[r]->failed_peer;
      waits[r] = fp >= 0 && fp < nranks && fp != r ? fp : -1;
      fprintf(out,
              "  rank %d waited in %s, step %lld of %lld, on rank %lld, which has finished it "
              "since: the failure ended the wait",
              r, a, o->step + 1, o->nsteps, o->wait_peer);
      if (waits[r] >= 0) fprintf(out, " (its error names rank %d)", waits[r]);
      fputc('\n', out);
    } else if (o->wait_peer >= 0 && o->wait_peer < nranks) {
      waits[r] = (int)o->wait_peer;
      fprintf(out, "  rank %d waits in %s, step %lld of %lld, on rank %lld (%s %lld bytes)\n", r, a,
              o->step + 1, o->nsteps, o->wait_peer,
              strcmp(o->wait_dir, "send") ? "receiving" : "sending", o->wait_bytes);
    } else {
      fprintf(out, "  rank %d is in %s (%s)", r, a, o->state);
      /* No peer in its record (it had not said on whom it waits when the failure stopped it):
       * a rank its error names as failed, with no record of its own, is the best evidence. */
      int fp = rr[r]->failed_peer;
      if (!o->p2p && fp >= 0 && fp < nranks && fp != r && !rr[fp]) {
        waits[r] = fp;
        fprintf(out, ", stopped by the failure of rank %d (its error names it)", fp);
      }
      fputc('\n', out);
    }
  }
  /* Cycles, and the ranks at the end of the chains (waited on, waiting on nobody). Only
   * recorded ranks wait, so a chain longer than npr steps is a cycle. */
  for (int i = 0; i < npr; i++) {
    int x = pr[i], steps = 0;
    while (waits[x] >= 0 && steps <= npr) x = waits[x], steps++;
    if (steps <= npr) continue;
    int start = x; /* x is on the cycle: name it from its lowest rank */
    for (int y = waits[x]; y != x; y = waits[y])
      if (y < start) start = y;
    int at = 0;
    list[0] = 0;
    x = start;
    do {
      if (at >= 0 && (size_t)at < sizeof(list))
        at += snprintf(list + at, sizeof(list) - (size_t)at, "%d -> ", x);
      x = waits[x];
    } while (x != start);
    fprintf(out, "  cycle: %s%d (each waits for the next: calls in different orders?)\n", list,
            start);
    break;
  }
  for (int r = 0; r < nranks; r++) mark2[r] = 0; /* held: waited on, waiting on nobody */
  for (int i = 0; i < npr; i++) {
    int x = pr[i], steps = 0;
    while (waits[x] >= 0 && steps <= npr) x = waits[x], steps++;
    if (x != pr[i] && steps <= npr) mark2[x] = 1;
  }
  rank_list(mark2, nranks, 1, list, sizeof(list));
  if (list[0]) {
    fprintf(out, "  the others wait (directly or through others) on rank(s) %s\n", list);
    if (!verdict[0]) {
      int missing_held = 0, failed_named = 0;
      for (int r = 0; r < nranks; r++)
        if (mark2[r] && !rr[r]) missing_held = 1;
      for (int i = 0; i < npr; i++) {
        int fp = rr[pr[i]]->failed_peer;
        if (fp >= 0 && fp < nranks && mark2[fp]) failed_named = 1;
      }
      /* Where the others are: one collective, or a range. */
      long long lo = -1, hi = -1;
      for (int i = 0; i < npr; i++) {
        const struct hang_op* o = pend[i];
        if (!o || o->p2p) continue;
        if (lo < 0 || o->seq < lo) lo = o->seq;
        if (o->seq > hi) hi = o->seq;
      }
      if (lo < 0)
        a[0] = 0;
      else if (lo == hi)
        snprintf(a, sizeof(a), " in collective #%lld", lo);
      else
        snprintf(a, sizeof(a), " in collectives #%lld to #%lld", lo, hi);
      /* The ranks the others' errors name as failed, with no record of their own: the
       * failure is seen first hand (a connection closed without a goodbye), a wait only says
       * whom a rank polled when the failure stopped it. Where no rank the waits lead to left a
       * record (a damaged record, or one rank still stopped in an earlier call of a plan where
       * every rank waits on every other), the failed ranks are named, and the others the waits
       * lead to are listed beside them. */
      int named_missing = 0, held_recorded = 0, held_unnamed = 0;
      for (int r = 0; r < nranks; r++) mark[r] = 0;
      for (int i = 0; i < npr; i++) {
        int fp = rr[pr[i]]->failed_peer;
        if (fp >= 0 && fp < nranks && !rr[fp]) mark[fp] = 1, named_missing = 1;
      }
      for (int r = 0; r < nranks; r++) {
        held_recorded |= mark2[r] && rr[r] != NULL;
        mark2[r] = mark2[r] && !mark[r]; /* now: held, not named */
        held_unnamed |= mark2[r];
      }
      if (named_missing && !held_recorded) {
        char others[600] = "";
        rank_list(mark, nranks, 1, list2, sizeof(list2));
        rank_list(mark2, nranks, 1, list, sizeof(list));
        if (held_unnamed)
          snprintf(others, sizeof(others),
                   " (the waits lead to rank(s) %s, which left no record either)", list);
        snprintf(verdict, sizeof(verdict),
                 "rank(s) %s hold the others back%s: no record from them (dead, stopped, or "
                 "unable to write it); the others' error names them as failed%s",
                 list2, a, others);
      } else {
        snprintf(verdict, sizeof(verdict), "rank(s) %s hold the others back%s%s%s", list, a,
                 missing_held ? ": no record from them (dead, stopped, or unable to write it)" : "",
                 failed_named ? "; the others' error names them as failed" : "");
      }
    }
  }
  if (!verdict[0]) {
    for (int r = 0; r < nranks; r++) mark[r] = rr[r] != NULL;
    rank_list(mark, nranks, 0, list, sizeof(list));
    if (npr < nranks)
      snprintf(verdict, sizeof(verdict),
               "no divergence among the recorded ranks; rank(s) %s left no record (dead, "
               "stopped, or unable to write it)",
               list);
    else
      snprintf(verdict, sizeof(verdict),
               "no divergence found: every rank recorded the same collectives, none waits");
  }
  fprintf(out, "diagnosis: %s\n", verdict);
out:
  free(pr);
  free(pend);
  free(seqs);
  free(mark);
  free(mark2);
  free(waits);
}

int hang_diagnose(struct hang_rank* ranks, int n, FILE* out) {
  int ncomm = 0;
  char* seen = calloc((size_t)(n > 0 ? n : 1), 1);
  if (!seen) return 0;
  for (int i = 0; i < n; i++) {
    if (seen[i]) continue;
    int nranks = ranks[i].nranks;
    struct hang_rank** rr = calloc((size_t)nranks, sizeof(*rr));
    if (!rr) break;
    for (int k = i; k < n; k++) {
      if (seen[k] || strcmp(ranks[k].comm, ranks[i].comm) != 0) continue;
      seen[k] = 1;
      if (ranks[k].nranks != nranks) {
        fprintf(out, "communicator %s: rank %d's record says %d ranks, another's %d: ignored\n",
                ranks[k].comm, ranks[k].rank, ranks[k].nranks, nranks);
        continue;
      }
      if (rr[ranks[k].rank]) {
        fprintf(out, "communicator %s: two records of rank %d: the later one is ignored\n",
                ranks[k].comm, ranks[k].rank);
        continue;
      }
      rr[ranks[k].rank] = &ranks[k];
    }
    if (ncomm++) fprintf(out, "\n");
    diagnose_comm(rr, nranks, out);
    free(rr);
  }
  free(seen);
  return ncomm;
}

/* The whole of a file, at most 256 MiB. */
static char* read_all(const char* path, size_t* len_out) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, len = 0;
  char* buf = malloc(cap);
  while (buf) {
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) break;
    if (len == cap) {
      if (cap >= (256u << 20)) break;
      char* nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap *= 2;
    }
  }
  fclose(f);
  *len_out = len;
  return buf;
}

int hang_main(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) {
    fprintf(stderr, "loom_info --hang: cannot read %s: %s\n", dir, strerror(errno));
    return 1;
  }
  struct hang_rank* ranks = NULL;
  int n = 0, cap = 0;
  for (struct dirent* e; (e = readdir(d));) {
    size_t nl = strlen(e->d_name);
    if (strncmp(e->d_name, "loom-rec-", 9) != 0 || nl < 5 || strcmp(e->d_name + nl - 5, ".json"))
      continue;
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    size_t len = 0;
    char* text = read_all(path, &len);
    if (!text) {
      fprintf(stderr, "loom_info --hang: cannot read %s: %s\n", path, strerror(errno));
      continue;
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      struct hang_rank* nr = realloc(ranks, (size_t)cap * sizeof(*nr));
      if (!nr) {
        free(text);
        break;
      }
      ranks = nr;
    }
    char why[256];
    if (hang_parse(text, len, &ranks[n], why, sizeof(why)) == 0)
      n++;
    else
      fprintf(stderr, "loom_info --hang: %s: %s\n", path, why);
    free(text);
  }
  closedir(d);
  if (n == 0) fprintf(stderr, "loom_info --hang: no flight record (loom-rec-*.json) in %s\n", dir);
  hang_diagnose(ranks, n, stdout);
  for (int i = 0; i < n; i++) hang_rank_free(&ranks[i]);
  free(ranks);
  return n == 0;
}
