/* fault.h - fault injection for the failure tests: LOOM_FAULT="point:rank"
 * (a comma list is allowed) names the places where a rank kills itself with
 * SIGKILL, so the tests can check that its peers notice. Debugging only. */
#ifndef LOOM_CORE_FAULT_H
#define LOOM_CORE_FAULT_H

/* 1 if spec (e.g. "init:2" or "init:2,allreduce:1") names point at rank.
 * Pure; malformed entries match nothing. */
int fault_spec_match(const char* spec, const char* point, int rank);
/* 1 if LOOM_FAULT names point at rank. Thread safe, cheap when unset. */
int fault_hit(const char* point, int rank);
/* Kills this process with SIGKILL, after one WARN line, if LOOM_FAULT names
 * point at rank; otherwise returns. */
void fault_point(const char* point, int rank);

#endif
