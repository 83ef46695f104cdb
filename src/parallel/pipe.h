/* pipe.h - the pipeline schedule shared by the schedule code (pipe_sched.c, pipe_sim.c) and
 * the runner (pipe_run.c): PARALLEL.md section 6. */
#ifndef LOOM_PAR_PIPE_H
#define LOOM_PAR_PIPE_H

#include "par.h"

struct loomPipeSchedule {
  loomPipeKind_t kind;    /* -1 (as int) for a user schedule from loomPipeScheduleFromActions */
  int p, S, m, v;         /* ranks, stages (p*v), microbatches, chunks per rank */
  int* stage_rank;        /* [S] */
  loomPipeAction** lists; /* [p] each rank's actions, peer filled in */
  int* counts;            /* [p] */
};

/* pipe_sim.c: the binding simulator; fn names the public call in a deadlock report. start
 * (NULL, or one array of counts[r] per rank) gets the time each action begins: a compute's
 * start, a send's departure, a receive's arrival (the tool loom_pipe draws from it). */
loomResult_t pipe_simulate(const struct loomPipeSchedule* s, const loomPipeCosts* costs,
                           const char* fn, loomPipeStats* stats, double idle[], int peak[],
                           double* const start[]);
/* pipe_sim.c: the validity rules other than the simulation (user schedules). */
loomResult_t pipe_check_rules(const struct loomPipeSchedule* s, const char* fn);

#endif
