/* loom_hang.h - `loom_info --hang DIR`: reads the flight records the ranks of one or more
 * communicators wrote (src/core/recorder.c, one JSON file per rank) and prints a diagnosis a
 * person can act on: the first collective at which the ranks diverge (some entered it and
 * others did not, or they entered it with other arguments), who waits on whom (with cycles
 * named) and who holds the others back, and the last collective every rank completed. */
#ifndef LOOM_TOOLS_HANG_H
#define LOOM_TOOLS_HANG_H

#include <stddef.h>
#include <stdio.h>

/* One operation of a record. */
struct hang_op {
  long long call, seq; /* seq: the collective's number, or the point-to-point call's (p2p) */
  int p2p;
  char kind[24], algo[24], dtype[16], op[16], state[12], result[64], wait_dir[8];
  long long count, root, step, nsteps, wait_peer, wait_bytes;
  long long t_enqueue, t_start, t_wait, t_end;
};

/* One rank's record. */
struct hang_rank {
  char comm[24], name[64], host[64], reason[512];
  int rank, nranks, pid, failed_peer;
  long long time_ns;
  struct hang_op* ops; /* malloc'd, nops */
  int nops;
};

/* Parses one record (text of len bytes, not NUL-terminated): 0, or -1 with why (a line naming
 * the problem and where). Never reads past len; bounded depth and sizes. */
int hang_parse(const char* text, size_t len, struct hang_rank* out, char* why, size_t why_len);
void hang_rank_free(struct hang_rank* r);
/* The diagnosis of n ranks' records (any order; several communicators are told apart by their
 * id) on out. Returns the number of communicators diagnosed. */
int hang_diagnose(struct hang_rank* ranks, int n, FILE* out);
/* Reads every loom-rec-*.json of dir, reports unreadable ones on stderr, and diagnoses the
 * rest: 0, or 1 when no record could be read. */
int hang_main(const char* dir);

#endif
