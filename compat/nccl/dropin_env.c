/* dropin_env.c - NCCL_* variables with a Loom counterpart become that
 * LOOM_* variable, before Loom reads its settings: at the first unique id
 * or init, not at load, since programs (PyTorch's users) set NCCL_* variables
 * after the library is loaded. A LOOM_* variable the user set wins; docs/NCCL.md lists every
 * variable and what happens to it. */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dropin.h"

static void put(const char* loom, const char* value) {
  if (value && *value && !getenv(loom)) setenv(loom, value, 0);
}

/* NCCL's levels as Loom's: VERSION and ABORT have none of their own. */
static void map_debug(const char* v) {
  static const char* const pairs[][2] = {{"VERSION", "WARN"}, {"WARN", "WARN"},  {"INFO", "INFO"},
                                         {"TRACE", "TRACE"},  {"ABORT", "WARN"}, {"NONE", "NONE"}};
  for (size_t i = 0; v && i < sizeof(pairs) / sizeof(pairs[0]); i++)
    if (!strcasecmp(v, pairs[i][0])) put("LOOM_DEBUG", pairs[i][1]);
}

/* Subsystems Loom logs under the same name (TUNING is Loom's TUNE); the
 * others (GRAPH, CALL, PROXY, NVLS...) have no counterpart and are left out. */
static void map_subsys(const char* v) {
  static const char* const same[] = {"INIT", "BOOTSTRAP", "COLL",  "P2P", "SHM",
                                     "NET",  "ENV",       "ALLOC", "ALL"};
  if (!v) return;
  char in[256], out[256] = "";
  size_t used = 0;
  snprintf(in, sizeof(in), "%s", v);
  char* p = in;
  if (*p == '^') {
    out[used++] = '^';
    out[used] = '\0';
    p++;
  }
  char* save = NULL;
  int n = 0;
  for (char* tok = strtok_r(p, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    const char* name = !strcasecmp(tok, "TUNING") ? "TUNE" : NULL;
    for (size_t i = 0; !name && i < sizeof(same) / sizeof(same[0]); i++)
      if (!strcasecmp(tok, same[i])) name = same[i];
    if (name && used + strlen(name) + 2 < sizeof(out))
      used += (size_t)snprintf(out + used, sizeof(out) - used, "%s%s", n++ ? "," : "", name);
  }
  if (n) put("LOOM_DEBUG_SUBSYS", out);
}

/* The first of a list of NCCL algorithms that Loom has: Ring and Tree. */
static const char* algo_family(char* list) {
  char* save = NULL;
  if (*list == '^') return NULL; /* exclusions: the tuner chooses among the rest */
  for (char* a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
    if (!strcasecmp(a, "ring")) return "ring";
    if (!strcasecmp(a, "tree")) return "tree";
  }
  return NULL;
}

/* NCCL_ALGO is a list ("Ring,Tree") or per collective
 * ("allreduce:tree,ring;allgather:ring"); LOOM_ALGO takes one family, or
 * coll:family pairs separated by ;. */
static void map_algo(const char* v) {
  if (!v) return;
  char in[256], out[256] = "";
  size_t used = 0;
  snprintf(in, sizeof(in), "%s", v);
  if (!strchr(in, ':')) {
    put("LOOM_ALGO", algo_family(in));
    return;
  }
  char* save = NULL;
  for (char* tok = strtok_r(in, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
    char* colon = strchr(tok, ':');
    if (!colon) continue;
    *colon = '\0';
    const char* fam = algo_family(colon + 1);
    for (char* c = tok; *c; c++) *c = (char)tolower((unsigned char)*c);
    if (fam && used + strlen(tok) + strlen(fam) + 3 < sizeof(out))
      used +=
          (size_t)snprintf(out + used, sizeof(out) - used, "%s%s:%s", used ? ";" : "", tok, fam);
  }
  put("LOOM_ALGO", out);
}

/* Streams per socket connection: NCCL's threads times sockets per thread. */
static void map_sockets(const char* threads, const char* socks) {
  if (!threads && !socks) return;
  long t = threads ? strtol(threads, NULL, 10) : 1, s = socks ? strtol(socks, NULL, 10) : 1;
  if (t < 1 || s < 1) return;
  long n = t * s > 16 ? 16 : t * s;
  char buf[24];
  snprintf(buf, sizeof(buf), "%ld", n);
  put("LOOM_SOCKET_NSTREAMS", buf);
}

static void map_all(void) {
  map_debug(getenv("NCCL_DEBUG"));
  map_subsys(getenv("NCCL_DEBUG_SUBSYS"));
  put("LOOM_DEBUG_FILE", getenv("NCCL_DEBUG_FILE"));
  put("LOOM_SOCKET_IFNAME", getenv("NCCL_SOCKET_IFNAME"));
  put("LOOM_HOSTID", getenv("NCCL_HOSTID"));
  put("LOOM_BUFFSIZE", getenv("NCCL_BUFFSIZE"));
  map_algo(getenv("NCCL_ALGO"));
  const char* proto = getenv("NCCL_PROTO");
  if (proto && !strcasecmp(proto, "simple")) put("LOOM_PROTO", "simple");
  map_sockets(getenv("NCCL_SOCKET_NTHREADS"), getenv("NCCL_NSOCKS_PERTHREAD"));
  const char* v = getenv("NCCL_SHM_DISABLE");
  if (v && !strcmp(v, "1")) put("LOOM_TRANSPORTS", "local,socket");
  v = getenv("NCCL_P2P_DISABLE");
  if (v && !strcmp(v, "1")) put("LOOM_DIRECT", "0");
}

static pthread_once_t mapped = PTHREAD_ONCE_INIT;

void dropin_env_map(void) {
  pthread_once(&mapped, map_all);
}
