/* params.c - reads every LOOM_* variable once, from the table in params.def,
 * strictly: a value is the whole string in the syntax and range of its row,
 * or it is bad. Bad values keep the default and are remembered with the
 * reason, for params_check (init) and loom_info --env. Nothing here logs
 * while parsing: the logger reads its own settings through params_get. */
#include "core/params.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/checks.h"
#include "core/debug.h"
#include "core/util.h"

#define BAD_LEN 200

static struct loom_params params_now;
static pthread_once_t params_once = PTHREAD_ONCE_INIT;

#define STR_(x) #x
#define PARAM(field, env, type, def, lo, hi, flags, help) \
  {env, PARAM_##type, STR_(def), lo, hi, flags, help},
static const struct param_desc params_rows[] = {
#include "core/params.def"
};
#undef PARAM
#define NPARAMS ((int)(sizeof(params_rows) / sizeof(params_rows[0])))

/* Why each row's environment value was rejected ("" when it was not). */
static char params_why[NPARAMS][BAD_LEN];

/* ---- Numbers ---------------------------------------------------------------- */

/* Decimal digits only, the whole string, no overflow. */
static int parse_digits(const char* t, unsigned long long* out, const char** end) {
  unsigned long long v = 0;
  const char* p = t;
  if (!isdigit((unsigned char)*p)) return -1;
  for (; isdigit((unsigned char)*p); p++) {
    unsigned d = (unsigned)(*p - '0');
    if (v > (~0ULL - d) / 10) return -1;
    v = v * 10 + d;
  }
  *out = v;
  *end = p;
  return 0;
}

int params_parse_size(const char* text, size_t* out) {
  unsigned long long v;
  const char* end;
  if (!text || parse_digits(text, &v, &end) != 0) return -1;
  unsigned shift = 0;
  switch (toupper((unsigned char)*end)) {
    case '\0':
      break;
    case 'K':
      shift = 10;
      end++;
      break;
    case 'M':
      shift = 20;
      end++;
      break;
    case 'G':
      shift = 30;
      end++;
      break;
    case 'T':
      shift = 40;
      end++;
      break;
    default:
      return -1;
  }
  if (shift && (end[0] == 'i' || end[0] == 'I') && (end[1] == 'B' || end[1] == 'b'))
    end += 2;
  else if (*end == 'B' || *end == 'b')
    end++;
  if (*end != '\0') return -1;
  if (shift && v > (~0ULL >> shift)) return -1;
  if ((v << shift) > (unsigned long long)SIZE_MAX) return -1;
  *out = (size_t)(v << shift);
  return 0;
}

static int parse_int(const char* text, long long* out) {
  unsigned long long v;
  const char* end;
  int neg = *text == '-';
  if (parse_digits(text + neg, &v, &end) != 0 || *end != '\0') return -1;
  if (v > (unsigned long long)LLONG_MAX + (unsigned long long)neg) return -1;
  *out = neg ? (long long)(0ULL - v) : (long long)v;
  return 0;
}

/* ---- Syntax of the string variables ------------------------------------------ */

typedef int (*str_check_fn)(const char* v, char* why, size_t len);

static int one_of(const char* v, const char* const* names, char* why, size_t len) {
  for (int i = 0; names[i]; i++)
    if (strcasecmp(v, names[i]) == 0) return 0;
  snprintf(why, len, "'%s' is not one of the accepted words", v);
  return -1;
}

static int check_debug(const char* v, char* why, size_t len) {
  static const char* const names[] = {"NONE", "WARN", "INFO", "TRACE", NULL};
  return one_of(v, names, why, len);
}

static int check_cpu_kernel(const char* v, char* why, size_t len) {
  static const char* const names[] = {"auto", "avx512", "avx2", "scalar", NULL};
  return one_of(v, names, why, len);
}

static int check_subsys(const char* v, char* why, size_t len) {
  return log_subsys_check(v, why, len);
}

/* Words of [A-Za-z0-9_-] separated by sep; none empty. */
static int word_list(const char* v, char sep, char* why, size_t len) {
  if (!*v) return 0;
  for (const char* p = v;; p++) {
    const char* start = p;
    while (isalnum((unsigned char)*p) || *p == '_' || *p == '-') p++;
    if (p == start || (*p != sep && *p != '\0')) {
      snprintf(why, len, "'%s' is not a list of names separated by '%c' (at '%s')", v, sep, p);
      return -1;
    }
    if (*p == '\0') return 0;
  }
}

static int check_transports(const char* v, char* why, size_t len) {
  return word_list(v, ',', why, len);
}

static int is_word(const char* b, const char* e) {
  if (b == e) return 0;
  for (const char* p = b; p < e; p++)
    if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-') return 0;
  return 1;
}

/* One name, or empty; which names are protocols is the tuner's to say
 * (tune_proto_check). */
static int check_proto(const char* v, char* why, size_t len) {
  if (!*v || is_word(v, v + strlen(v))) return 0;
  snprintf(why, len, "'%s' is not a protocol name", v);
  return -1;
}

/* "family", or "coll:family" pairs separated by ';'. The names themselves
 * are checked by the layer that knows them (tune_algo_check). */
static int check_algo(const char* v, char* why, size_t len) {
  if (!*v || (!strchr(v, ':') && is_word(v, v + strlen(v)))) return 0;
  for (const char* p = v;;) {
    const char* end = strchr(p, ';');
    if (!end) end = p + strlen(p);
    const char* colon = memchr(p, ':', (size_t)(end - p));
    if (!colon || !is_word(p, colon) || !is_word(colon + 1, end)) {
      snprintf(why, len, "'%.*s' is not coll:family", (int)(end - p), p);
      return -1;
    }
    if (!*end) return 0;
    p = end + 1;
  }
}

/* A comma list of point:rank (fault.c). */
static int check_fault(const char* v, char* why, size_t len) {
  for (const char* p = v; *p;) {
    const char* end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    const char* colon = memchr(p, ':', (size_t)(end - p));
    long long r;
    char digits[24];
    size_t nd = colon ? (size_t)(end - colon - 1) : 0;
    if (nd < sizeof(digits)) {
      memcpy(digits, colon ? colon + 1 : "", nd);
      digits[nd] = '\0';
    }
    if (!colon || !is_word(p, colon) || nd == 0 || nd >= sizeof(digits) ||
        parse_int(digits, &r) != 0 || r < 0) {
      snprintf(why, len, "'%.*s' is not point:rank", (int)(end - p), p);
      return -1;
    }
    p = *end ? end + 1 : end;
  }
  return 0;
}

static int check_secret(const char* v, char* why, size_t len) {
  size_t n = strlen(v);
  for (size_t i = 0; i < n; i++)
    if (!isxdigit((unsigned char)v[i])) n = 0;
  if (*v && (n == 0 || n > 16)) {
    snprintf(why, len, "'%s' is not 1 to 16 hex digits", v);
    return -1;
  }
  return 0;
}

static int check_ifname(const char* v, char* why, size_t len) {
  const char* p = v;
  if (*p == '^') p++;
  if (*p == '=') p++;
  if (*v && (!*p || strstr(p, ",,") || p[strlen(p) - 1] == ',')) {
    snprintf(why, len, "'%s' has an empty interface name", v);
    return -1;
  }
  return 0;
}

static int check_signal(const char* v, char* why, size_t len) {
  static const char* const names[] = {"", "USR1", "USR2", "SIGUSR1", "SIGUSR2", NULL};
  return one_of(v, names, why, len);
}

static const struct {
  const char* env;
  str_check_fn check;
  const char* accepted;
} str_rows[] = {
    {"LOOM_DEBUG", check_debug, "NONE, WARN, INFO or TRACE"},
    {"LOOM_DEBUG_SUBSYS", check_subsys,
     "a comma list of INIT, BOOTSTRAP, COLL, P2P, SHM, NET, TUNE, ENV, ALLOC or ALL, optionally "
     "after ^"},
    {"LOOM_TRANSPORTS", check_transports, "a comma list of transports, e.g. shm,socket"},
    {"LOOM_SOCKET_IFNAME", check_ifname,
     "a comma list of interface name prefixes, optionally after ^ and ="},
    {"LOOM_ALGO", check_algo,
     "a family (ring) or coll:family pairs separated by ; (allreduce:ring;allgather:rhd)"},
    {"LOOM_PROTO", check_proto, "a protocol (simple), or empty for the tuner's choice"},
    {"LOOM_CPU_KERNEL", check_cpu_kernel, "auto, avx512, avx2 or scalar"},
    {"LOOM_FAULT", check_fault, "a comma list of point:rank, e.g. init:2,allreduce:1"},
    {"LOOM_SECRET", check_secret, "1 to 16 hex digits"},
    {"LOOM_DUMP_SIGNAL", check_signal, "USR1 or USR2, or empty"},
};
#define NSTR ((int)(sizeof(str_rows) / sizeof(str_rows[0])))

static int str_row(const char* env) {
  for (int k = 0; k < NSTR; k++)
    if (strcmp(str_rows[k].env, env) == 0) return k;
  return -1;
}

/* ---- Parsing ------------------------------------------------------------------ */

static void size_text(long long b, char* buf, size_t len) {
  static const char suffix[] = "KMGT";
  int s = -1;
  while (s < 3 && b >= 1024 && b % 1024 == 0) {
    b /= 1024;
    s++;
  }
  if (s < 0)
    snprintf(buf, len, "%lld", b);
  else
    snprintf(buf, len, "%lld%c", b, suffix[s]);
}

void params_accepted(int i, char* buf, size_t len) {
  const struct param_desc* d = &params_rows[i];
  char lo[32], hi[32];
  int k;
  switch (d->type) {
    case PARAM_INT:
      snprintf(buf, len, "an integer from %lld to %lld", d->lo, d->hi);
      return;
    case PARAM_BOOL:
      snprintf(buf, len, "0 or 1");
      return;
    case PARAM_SIZE:
      size_text(d->lo, lo, sizeof(lo));
      size_text(d->hi, hi, sizeof(hi));
      snprintf(buf, len, "a size in bytes from %s to %s (digits, then K, M, G or T)", lo, hi);
      return;
    case PARAM_STR:
      k = str_row(d->env);
      snprintf(buf, len, "%s", k >= 0 ? str_rows[k].accepted : "any text");
      return;
  }
}

/* Parses text into field; 0, or -1 with why. */
static int parse_one(const struct param_desc* d, void* field, const char* text, char* why,
                     size_t len) {
  long long v = 0;
  size_t sz = 0;
  switch (d->type) {
    case PARAM_STR: {
      int k = str_row(d->env);
      if (k >= 0 && str_rows[k].check(text, why, len) != 0) return -1;
      char* copy = strdup(text);
      *(const char**)field = copy ? copy : "";
      return 0;
    }
    case PARAM_INT:
    case PARAM_BOOL:
      if (parse_int(text, &v) != 0) {
        snprintf(why, len, "'%s' is not %s", text, d->type == PARAM_BOOL ? "0 or 1" : "an integer");
        return -1;
      }
      if (v < d->lo || v > d->hi) {
        snprintf(why, len, "%lld is %s %lld", v,
                 v < d->lo ? "less than the smallest accepted," : "more than the largest accepted,",
                 v < d->lo ? d->lo : d->hi);
        return -1;
      }
      if (d->type == PARAM_INT)
        *(long long*)field = v;
      else
        *(int*)field = (int)v;
      return 0;
    case PARAM_SIZE:
      if (params_parse_size(text, &sz) != 0) {
        snprintf(why, len, "'%s' is not a size in bytes", text);
        return -1;
      }
      if ((unsigned long long)sz < (unsigned long long)d->lo ||
          (unsigned long long)sz > (unsigned long long)d->hi) {
        char bound[32];
        int low = (unsigned long long)sz < (unsigned long long)d->lo;
        size_text(low ? d->lo : d->hi, bound, sizeof(bound));
        snprintf(why, len, "%zu bytes is %s %s", sz,
                 low ? "less than the smallest accepted," : "more than the largest accepted,",
                 bound);
        return -1;
      }
      *(size_t*)field = sz;
      return 0;
  }
  return -1;
}

int params_try(int i, const char* text, char* why, size_t len) {
  union {
    const char* s;
    long long i;
    size_t z;
    int b;
  } scratch;
  if (i < 0 || i >= NPARAMS) return -1;
  int r = parse_one(&params_rows[i], &scratch, text, why, len);
  if (r == 0 && params_rows[i].type == PARAM_STR) free((void*)scratch.s);
  return r;
}

/* The default strings come from the table through the preprocessor, so a
 * string default keeps its quotes: strip them. */
static const char* unquote(const char* s, char* buf, size_t len) {
  size_t n = strlen(s);
  if (n >= 2 && s[0] == '"' && s[n - 1] == '"') {
    snprintf(buf, len, "%.*s", (int)(n - 2), s + 1);
    return buf;
  }
  return s;
}

static void* field_addr(int i) {
  int k = 0;
#define PARAM(field, env, type, def, lo, hi, flags, help) \
  if (k++ == i) return &params_now.field;
#include "core/params.def"
#undef PARAM
  return NULL;
}

/* Each field once: its variable's value, or the default when unset or bad
 * (a string parsed twice would lose the first copy). */
static void params_load(void) {
  char why[BAD_LEN];
  for (int i = 0; i < NPARAMS; i++) {
    char buf[256];
    const struct param_desc* d = &params_rows[i];
    const char* env = getenv(d->env);
    if (env && parse_one(d, field_addr(i), env, why, sizeof(why)) == 0) continue;
    if (env) snprintf(params_why[i], sizeof(params_why[i]), "%s", why);
    parse_one(d, field_addr(i), unquote(d->def, buf, sizeof(buf)), why, sizeof(why));
  }
}

/* Set once params_load has run: the calls after it (every collective makes
 * a few) skip pthread_once. */
static _Atomic int params_ready;

const struct loom_params* params_get(void) {
  if (__builtin_expect(atomic_load_explicit(&params_ready, memory_order_acquire), 1))
    return &params_now;
  pthread_once(&params_once, params_load);
  atomic_store_explicit(&params_ready, 1, memory_order_release);
  return &params_now;
}

const char* params_bad(int i) {
  params_get();
  return i >= 0 && i < NPARAMS && params_why[i][0] ? params_why[i] : NULL;
}

/* "LOOM_X=value: why (accepted: ...)" */
static int bad_text(int i, char* buf, size_t len) {
  char acc[160];
  params_accepted(i, acc, sizeof(acc));
  return snprintf(buf, len, "%s=%s: %s (accepted: %s)", params_rows[i].env,
                  getenv(params_rows[i].env) ? getenv(params_rows[i].env) : "", params_why[i], acc);
}

loomResult_t params_reject(const char* env, const char* why, const char* accepted) {
  const char* v = getenv(env);
  return err_set_sub(NULL, SUB_ENV, loomInvalidArgument,
                     "invalid setting: %s=%s: %s (accepted: %s)", env, v ? v : "", why, accepted);
}

loomResult_t params_check(void) {
  params_get();
  char text[512];
  size_t used = 0;
  int nbad = 0;
  for (int i = 0; i < NPARAMS; i++) {
    if (!params_why[i][0] || (params_rows[i].flags & P_HINT)) continue;
    if (used < sizeof(text) - 1) {
      if (nbad) used += (size_t)snprintf(text + used, sizeof(text) - used, "; ");
      if (used < sizeof(text) - 1) used += (size_t)bad_text(i, text + used, sizeof(text) - used);
    }
    nbad++;
  }
  if (!nbad) return loomSuccess;
  return err_set_sub(NULL, SUB_ENV, loomInvalidArgument, "invalid setting%s: %s",
                     nbad > 1 ? "s" : "", text);
}

/* Logged from log_init once logging itself is configured, so the log level
 * set by LOOM_DEBUG applies to these lines too. */
void params_log_changed(void) {
  params_get();
  for (int i = 0; i < NPARAMS; i++) {
    const char* env = getenv(params_rows[i].env);
    if (!env) continue;
    if (params_why[i][0] && (params_rows[i].flags & P_HINT)) {
      char text[512], def[64];
      bad_text(i, text, sizeof(text));
      LOOM_WARN(SUB_ENV, "ignoring %s; using the default, %s", text,
                unquote(params_rows[i].def, def, sizeof(def)));
    } else {
      LOOM_INFO(SUB_ENV, "%s set by environment to %s", params_rows[i].env, env);
    }
  }
}

const struct param_desc* params_table(int* n_out) {
  *n_out = NPARAMS;
  return params_rows;
}

void params_value_str(int i, char* buf, size_t len) {
  params_get();
  void* f = field_addr(i);
  if (!f) {
    snprintf(buf, len, "?");
    return;
  }
  switch (params_rows[i].type) {
    case PARAM_STR:
      snprintf(buf, len, "%s", *(const char**)f);
      break;
    case PARAM_INT:
      snprintf(buf, len, "%lld", *(long long*)f);
      break;
    case PARAM_SIZE:
      snprintf(buf, len, "%zu", *(size_t*)f);
      break;
    case PARAM_BOOL:
      snprintf(buf, len, "%d", *(int*)f);
      break;
  }
}

/* ---- Agreement ------------------------------------------------------------------ */

static int agreed_row(int k) {
  for (int i = 0, seen = 0; i < NPARAMS; i++)
    if ((params_rows[i].flags & P_AGREE) && seen++ == k) return i;
  return -1;
}

/* The settings ranks must agree on, counted from the table at compile time:
 * their digests must fit peer_info.settings. */
enum {
  NAGREED = 0
#define PARAM(field, env, type, def, lo, hi, flags, help) +(((flags)&P_AGREE) ? 1 : 0)
#include "core/params.def"
#undef PARAM
};
_Static_assert(NAGREED <= PARAMS_AGREED_MAX, "raise PARAMS_AGREED_MAX (peer_info.settings)");

int params_agreed_count(void) {
  return NAGREED;
}

const char* params_agreed_env(int k) {
  int i = agreed_row(k);
  return i >= 0 ? params_rows[i].env : "?";
}

int params_agreed_find(const char* env) {
  for (int k = 0; k < NAGREED; k++)
    if (strcmp(params_agreed_env(k), env) == 0) return k;
  return -1;
}

void params_agreed_value(int k, char* buf, size_t len) {
  int i = agreed_row(k);
  if (i < 0)
    snprintf(buf, len, "?");
  else
    params_value_str(i, buf, len);
}

void params_agreed_digest(uint64_t out[PARAMS_AGREED_MAX]) {
  memset(out, 0, PARAMS_AGREED_MAX * sizeof(uint64_t));
  for (int k = 0; k < NAGREED; k++) {
    char value[512];
    params_agreed_value(k, value, sizeof(value));
    out[k] = hash64(value, strlen(value), 0x6167726565ULL);
  }
}
