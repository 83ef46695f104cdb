/* topo.c - this rank's machine: probed, or read from LOOM_TOPO_FILE (see
 * topo.h; the format is docs/topology.md). */
#include "topo/topo.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/checks.h"
#include "core/params.h"
#include "core/util.h"

#define TOPO_LINE_MAX 512
#define TOPO_CPUS_MAX 65536

static const struct {
  const char* key;
  enum topo_fact bit;
} topo_keys[] = {{"host", TOPO_HOST}, {"machine", TOPO_MACHINE}, {"cpus", TOPO_CPUS}};
#define NKEYS ((int)(sizeof(topo_keys) / sizeof(topo_keys[0])))
#define ACCEPTED "host NAME, machine NAME or cpus N"

static void ids_fill(struct topo_facts* f) {
  f->host_id = host_id_of(f->host);
  f->machine_id = machine_id_of(f->machine);
}

void topo_probe(struct topo_facts* out) {
  memset(out, 0, sizeof(*out));
  host_name_get(out->host, sizeof(out->host));
  machine_name_get(out->machine, sizeof(out->machine));
  out->cpus = cpus_online();
  ids_fill(out);
}

void topo_print(const struct topo_facts* f, FILE* out) {
  fprintf(out,
          "# Loom topology of this process (docs/topology.md). Give it to a rank with\n"
          "# LOOM_TOPO_FILE to use these facts instead of probing; ranks whose host\n"
          "# lines are the same share memory, the others talk over the network.\n");
  fprintf(out, "host %s\nmachine %s\ncpus %d\n", f->host, f->machine, f->cpus);
}

/* Writes why; returns -1. */
__attribute__((format(printf, 3, 4))) static int fail(char* why, size_t len, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, len, fmt, ap);
  va_end(ap);
  return -1;
}

/* A name: 1 to TOPO_NAME_MAX - 1 characters of [A-Za-z0-9._:/@+-]. */
static int name_ok(const char* v) {
  size_t n = strlen(v);
  if (n == 0 || n >= TOPO_NAME_MAX) return 0;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)v[i]) && !strchr("._:/@+-", v[i])) return 0;
  return 1;
}

/* One line, its comment cut, split into words: 0 or -1 with why. */
static int line_parse(char* line, struct topo_facts* f, unsigned* seen, char* why, size_t len) {
  char* hash = strchr(line, '#');
  if (hash) *hash = '\0';
  char* save = NULL;
  char* key = strtok_r(line, " \t\r\n", &save);
  if (!key) return 0; /* blank or comment only */
  char* value = strtok_r(NULL, " \t\r\n", &save);
  char* extra = value ? strtok_r(NULL, " \t\r\n", &save) : NULL;
  int k = 0;
  while (k < NKEYS && strcmp(key, topo_keys[k].key) != 0) k++;
  if (k == NKEYS) return fail(why, len, "'%s' is not a fact (accepted: " ACCEPTED ")", key);
  if (!value) return fail(why, len, "%s without a value", key);
  if (extra) return fail(why, len, "%s has more than one value ('%s')", key, extra);
  if (*seen & topo_keys[k].bit) return fail(why, len, "%s given twice", key);
  *seen |= topo_keys[k].bit;
  if (topo_keys[k].bit == TOPO_CPUS) {
    char* end = NULL;
    errno = 0;
    long v = isdigit((unsigned char)value[0]) ? strtol(value, &end, 10) : -1;
    if (errno || !end || *end || v < 1 || v > TOPO_CPUS_MAX)
      return fail(why, len, "cpus '%s' is not an integer from 1 to %d", value, TOPO_CPUS_MAX);
    f->cpus = (int)v;
    return 0;
  }
  if (!name_ok(value))
    return fail(why, len,
                "%s '%.200s' is not a name (1 to %d characters of letters, digits and ._:/@+-)",
                key, value, TOPO_NAME_MAX - 1);
  snprintf(topo_keys[k].bit == TOPO_HOST ? f->host : f->machine, TOPO_NAME_MAX, "%s", value);
  return 0;
}

int topo_read(const char* path, struct topo_facts* inout, char* why, size_t len) {
  FILE* file = fopen(path, "r");
  if (!file) return fail(why, len, "%s: cannot open: %s", path, strerror(errno));
  struct topo_facts f = *inout;
  unsigned seen = 0;
  char line[TOPO_LINE_MAX + 2], what[300];
  int lineno = 0, bad = 0;
  while (!bad && fgets(line, sizeof(line), file)) {
    lineno++;
    size_t n = strlen(line);
    if (n > TOPO_LINE_MAX)
      bad = fail(what, sizeof(what), "longer than %d characters", TOPO_LINE_MAX);
    else
      bad = line_parse(line, &f, &seen, what, sizeof(what));
  }
  int read_error = !bad && ferror(file) ? errno : 0;
  fclose(file);
  if (read_error) return fail(why, len, "%s: cannot read: %s", path, strerror(read_error));
  if (bad) return fail(why, len, "%s:%d: %s", path, lineno, what);
  f.given |= seen;
  ids_fill(&f);
  *inout = f;
  return 0;
}

/* ---- The facts in force ---------------------------------------------------------- */

static struct topo_facts facts_now;
static char facts_why[600]; /* "" while LOOM_TOPO_FILE is good or unset */
static pthread_once_t facts_once = PTHREAD_ONCE_INIT;

static void facts_load(void) {
  topo_probe(&facts_now);
  const char* hostid = params_get()->hostid;
  const char* path = params_get()->topo_file;
  struct topo_facts f = facts_now;
  if (path && *path && topo_read(path, &f, facts_why, sizeof(facts_why)) != 0) return;
  if (hostid && *hostid) {
    if (f.given & TOPO_HOST) {
      snprintf(facts_why, sizeof(facts_why),
               "%s gives this rank's host, and so does LOOM_HOSTID=%s: set one of them", path,
               hostid);
      return;
    }
    snprintf(f.host, sizeof(f.host), "%s", hostid);
    f.host_id = host_id_of(hostid); /* the whole value, however long */
    f.given |= TOPO_HOST;
  }
  facts_now = f;
}

const struct topo_facts* topo_get(void) {
  pthread_once(&facts_once, facts_load);
  return &facts_now;
}

loomResult_t topo_check(void) {
  topo_get();
  if (!facts_why[0]) return loomSuccess;
  return params_reject("LOOM_TOPO_FILE", facts_why,
                       "a readable file of facts, one per line: " ACCEPTED " (docs/topology.md)");
}
