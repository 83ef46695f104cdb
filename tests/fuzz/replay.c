/* replay - runs a harness's LLVMFuzzerTestOneInput on every file named, or in a directory
 * named, once each (how CI replays the committed corpora without libFuzzer).
 *   fuzz_<name>_replay FILE_OR_DIR... */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static long ran;

static int one(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return 1;
  }
  size_t cap = 1 << 16, n = 0;
  uint8_t* buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) {
      uint8_t* nb = realloc(buf, cap *= 2);
      if (!nb) free(buf);
      buf = nb;
    }
  }
  fclose(f);
  if (!buf) return 1;
  /* An exact copy, so that a read past the input is past the allocation. */
  uint8_t* exact = malloc(n ? n : 1);
  if (exact) memcpy(exact, buf, n);
  free(buf);
  if (!exact) return 1;
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  ran++;
  return 0;
}

static int walk(const char* path) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "replay: no %s\n", path);
    return 1;
  }
  if (!S_ISDIR(st.st_mode)) return one(path);
  DIR* d = opendir(path);
  if (!d) return 1;
  int bad = 0;
  for (struct dirent* e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char sub[4096];
    snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
    bad |= walk(sub);
  }
  closedir(d);
  return bad;
}

int main(int argc, char** argv) {
  int bad = 0;
  for (int i = 1; i < argc; i++) bad |= walk(argv[i]);
  printf("replay: %ld inputs\n", ran);
  return bad || ran == 0;
}
