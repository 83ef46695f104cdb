/* tune.c - algorithm choice. */
#include "tune.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../core/debug.h"
#include "../core/params.h"

static const char* const algo_names[TUNE_ALGO_COUNT] = {"ring"};

const char* tune_algo_name(enum tune_algo a) {
  return (unsigned)a < TUNE_ALGO_COUNT ? algo_names[a] : "unknown";
}

/* LOOM_ALGO is "name" or "coll:name;coll:name". Returns the name forced for
 * coll, or NULL. */
static const char* forced_for(const char* spec, const char* coll, char* buf, size_t len) {
  if (!spec || !*spec) return NULL;
  snprintf(buf, len, "%s", spec);
  char* save = NULL;
  for (char* tok = strtok_r(buf, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
    char* colon = strchr(tok, ':');
    if (!colon) return tok;
    *colon = '\0';
    if (strcasecmp(tok, coll) == 0) return colon + 1;
  }
  return NULL;
}

enum tune_algo tune_pick_allreduce(int nranks, size_t bytes) {
  char buf[256];
  const char* want = forced_for(params_get()->algo, "allreduce", buf, sizeof(buf));
  if (want) {
    for (int a = 0; a < TUNE_ALGO_COUNT; a++)
      if (strcasecmp(want, algo_names[a]) == 0) return (enum tune_algo)a;
    LOOM_INFO(SUB_TUNE, "LOOM_ALGO asks for '%s' for all-reduce, which does not exist here; using %s",
              want, algo_names[TUNE_RING]);
  }
  return TUNE_RING;
}
