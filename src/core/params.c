/* params.c - reads every LOOM_* variable once, from the table in params.def. */
#include "params.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"

static struct loom_params params_now;
static pthread_once_t params_once = PTHREAD_ONCE_INIT;

#define STR_(x) #x
#define PARAM(field, env, type, def, help) {env, PARAM_##type, STR_(def), help},
static const struct param_desc params_rows[] = {
#include "params.def"
};
#undef PARAM

int params_parse_size(const char* text, size_t* out) {
  char* end = NULL;
  if (!text || !*text) return -1;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (end == text || errno) return -1;
  unsigned shift = 0;
  switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    default: return -1;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (*end != '\0') return -1;
  if (shift && v > (~0ULL >> shift)) return -1;
  *out = (size_t)(v << shift);
  return 0;
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

static void parse_one(const struct param_desc* d, void* field, const char* text, int is_env) {
  char* end = NULL;
  switch (d->type) {
    case PARAM_STR: {
      char* copy = strdup(text);
      *(const char**)field = copy ? copy : "";
      return;
    }
    case PARAM_INT:
    case PARAM_BOOL: {
      long long v = strtoll(text, &end, 0);
      if (end == text || *end != '\0') break;
      if (d->type == PARAM_INT)
        *(long long*)field = v;
      else
        *(int*)field = v != 0;
      return;
    }
    case PARAM_SIZE: {
      size_t v;
      if (params_parse_size(text, &v) != 0) break;
      *(size_t*)field = v;
      return;
    }
  }
  if (is_env) LOOM_WARN(SUB_ENV, "ignoring %s=%s: not a valid value", d->env, text);
}

static void* field_addr(int i) {
  int k = 0;
#define PARAM(field, env, type, def, help) \
  if (k++ == i) return &params_now.field;
#include "params.def"
#undef PARAM
  return NULL;
}

static void params_load(void) {
  int n = (int)(sizeof(params_rows) / sizeof(params_rows[0]));
  for (int i = 0; i < n; i++) {
    char buf[256];
    const struct param_desc* d = &params_rows[i];
    parse_one(d, field_addr(i), unquote(d->def, buf, sizeof(buf)), 0);
  }
  for (int i = 0; i < n; i++) {
    const char* env = getenv(params_rows[i].env);
    if (env) parse_one(&params_rows[i], field_addr(i), env, 1);
  }
}

const struct loom_params* params_get(void) {
  pthread_once(&params_once, params_load);
  return &params_now;
}

/* Logged from log_init once logging itself is configured, so the log level
 * set by LOOM_DEBUG applies to these lines too. */
void params_log_changed(void) {
  int n = (int)(sizeof(params_rows) / sizeof(params_rows[0]));
  for (int i = 0; i < n; i++) {
    const char* env = getenv(params_rows[i].env);
    if (env) LOOM_INFO(SUB_ENV, "%s set by environment to %s", params_rows[i].env, env);
  }
}

const struct param_desc* params_table(int* n_out) {
  *n_out = (int)(sizeof(params_rows) / sizeof(params_rows[0]));
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
    case PARAM_STR: snprintf(buf, len, "%s", *(const char**)f); break;
    case PARAM_INT: snprintf(buf, len, "%lld", *(long long*)f); break;
    case PARAM_SIZE: snprintf(buf, len, "%zu", *(size_t*)f); break;
    case PARAM_BOOL: snprintf(buf, len, "%d", *(int*)f); break;
  }
}
