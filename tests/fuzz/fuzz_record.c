/* A flight record as loom_info --hang reads it (tools/loom_hang.c): parsed, and, when it
 * parses, diagnosed alone and beside a second copy of itself. */
#include <stdio.h>

#include "fuzz.h"
#include "loom_hang.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct hang_rank r[2];
  char why[256];
  if (hang_parse((const char*)data, size, &r[0], why, sizeof(why)) != 0) return 0;
  if (hang_parse((const char*)data, size, &r[1], why, sizeof(why)) == 0) {
    r[1].rank = (r[0].rank + 1) % r[0].nranks;
    FILE* out = fopen("/dev/null", "w");
    if (out) {
      hang_diagnose(r, r[0].nranks > 1 ? 2 : 1, out);
      fclose(out);
    }
    hang_rank_free(&r[1]);
  }
  hang_rank_free(&r[0]);
  return 0;
}
