/* hang_rank - one rank of a communicator that hangs on purpose, for `loom_info --hang`'s tests
 * (test_hang.sh). Public API only.
 *
 *   hang_rank RANK NRANKS ID_FILE CASE
 *
 * Rank 0 writes the unique id to ID_FILE; the others wait for it. Every rank calls the same
 * six collectives (below), except rank CULPRIT (2), which, by CASE:
 *   none   does as the others
 *   skip   skips op 3 (calls op 4 in its place)
 *   stop   stops itself (SIGSTOP) before op 3
 *   dead   kills itself (SIGKILL) before op 3
 *   count  passes count 4097 instead of 4096 to op 2
 *   dtype  passes int32 instead of float32 to op 2
 *   root   passes root 1 instead of 0 to op 1
 *   order  calls op 4 before op 3
 * After the six it calls loomCommFinalize and loomCommAbort, which writes the flight record when
 * no failure wrote it already. LOOM_DUMP_DIR and LOOM_TIMEOUT_MS come from the environment.
 * Exit status: 0 the calls returned loomSuccess; 1 one failed; 2 set-up failed. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loom.h"

#define CULPRIT 2
#define N 4096

static float sbuf[N * 8], rbuf[N * 8];

/* Op i as every rank but the culprit calls it; the culprit's changes by case. */
static loomResult_t op(int i, const char* how, int me, loomComm_t comm) {
  int culprit = me == CULPRIT;
  size_t count = N;
  loomDataType_t dt = loomFloat32;
  int root = 0;
  if (culprit && i == 2 && !strcmp(how, "count")) count = N + 1;
  if (culprit && i == 2 && !strcmp(how, "dtype")) dt = loomInt32;
  if (culprit && i == 1 && !strcmp(how, "root")) root = 1;
  switch (i) {
    case 0:
      return loomAllReduce(sbuf, rbuf, 1024, loomFloat32, loomSum, comm, NULL);
    case 1:
      return loomBroadcast(sbuf, rbuf, 1024, loomFloat32, root, comm, NULL);
    case 2:
      return loomAllReduce(sbuf, rbuf, count, dt, loomSum, comm, NULL);
    case 3:
      return loomAllGather(sbuf, rbuf, 256, loomFloat32, comm, NULL);
    case 4:
      return loomReduce(sbuf, rbuf, 1024, loomFloat32, loomSum, 1, comm, NULL);
    default:
      return loomAllReduce(sbuf, rbuf, 16, loomFloat32, loomSum, comm, NULL);
  }
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: hang_rank RANK NRANKS ID_FILE CASE\n");
    return 2;
  }
  int me = atoi(argv[1]), n = atoi(argv[2]);
  const char *id_file = argv[3], *how = argv[4];
  loomUniqueId id;
  if (me == 0) {
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", id_file);
    FILE* f = fopen(tmp, "wb");
    if (loomGetUniqueId(&id) != loomSuccess || !f || fwrite(&id, sizeof(id), 1, f) != 1 ||
        fclose(f) != 0 || rename(tmp, id_file) != 0) {
      fprintf(stderr, "hang_rank 0: cannot make or write the id\n");
      return 2;
    }
  } else {
    int got = 0;
    for (int i = 0; i < 3000 && !got; i++) {
      FILE* f = fopen(id_file, "rb");
      if (f) {
        got = fread(&id, sizeof(id), 1, f) == 1;
        fclose(f);
      }
      if (!got) usleep(10000);
    }
    if (!got) {
      fprintf(stderr, "hang_rank %d: no id in %s\n", me, id_file);
      return 2;
    }
  }
  loomComm_t comm;
  loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
  cfg.commName = "hang test";
  if (loomCommInitRankConfig(&comm, n, id, me, &cfg) != loomSuccess) {
    fprintf(stderr, "hang_rank %d: init failed: %s\n", me, loomGetLastError(NULL));
    return 2;
  }
  int order[6] = {0, 1, 2, 3, 4, 5};
  if (me == CULPRIT && !strcmp(how, "order")) order[3] = 4, order[4] = 3;
  if (me == CULPRIT && !strcmp(how, "skip")) order[3] = 4, order[4] = 5, order[5] = -1;
  int rc = 0;
  for (int k = 0; k < 6 && order[k] >= 0; k++) {
    if (me == CULPRIT && k == 3 && !strcmp(how, "stop")) raise(SIGSTOP);
    if (me == CULPRIT && k == 3 && !strcmp(how, "dead")) raise(SIGKILL);
    loomResult_t r = op(order[k], how, me, comm);
    if (r != loomSuccess) {
      printf("hang_rank %d: op %d failed: %s\n", me, order[k], loomGetLastError(comm));
      rc = 1;
      break;
    }
  }
  /* Every rank is done before any aborts (an abort would cut the slower ones off). */
  if (rc == 0 && loomCommFinalize(comm) != loomSuccess) rc = 1;
  loomCommAbort(comm);
  return rc;
}
