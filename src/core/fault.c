/* fault.c - LOOM_FAULT parsing and the kill itself. */
#include "core/fault.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "core/debug.h"
#include "core/params.h"

/* Matches one "point:rank" entry of length n. */
static int entry_match(const char* entry, size_t n, const char* point, int rank) {
  const char* colon = memchr(entry, ':', n);
  if (colon == NULL) return 0;
  size_t plen = (size_t)(colon - entry);
  if (plen != strlen(point) || strncmp(entry, point, plen) != 0) return 0;
  const char* digits = colon + 1;
  size_t dlen = n - plen - 1;
  if (dlen == 0 || dlen > 9) return 0;
  int r = 0;
  for (size_t i = 0; i < dlen; i++) {
    if (digits[i] < '0' || digits[i] > '9') return 0;
    r = r * 10 + (digits[i] - '0');
  }
  return r == rank;
}

int fault_spec_match(const char* spec, const char* point, int rank) {
  if (spec == NULL || point == NULL) return 0;
  for (const char* p = spec; *p != '\0';) {
    const char* comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    if (entry_match(p, n, point, rank)) return 1;
    if (comma == NULL) break;
    p = comma + 1;
  }
  return 0;
}

int fault_hit(const char* point, int rank) {
  const char* spec = params_get()->fault;
  if (spec == NULL || spec[0] == '\0') return 0;
  return fault_spec_match(spec, point, rank);
}

void fault_point(const char* point, int rank) {
  if (!fault_hit(point, rank)) return;
  LOOM_WARN(SUB_ALL, "LOOM_FAULT: rank %d kills itself at '%s' (debugging knob)", rank, point);
  raise(SIGKILL);
}
