/* shmfile_probe.c - C helpers for test_shmfile.cc: transport/shmfile.h is
 * C, with atomics the C++ tests cannot include. */
#include <sys/mman.h>
#include <unistd.h>

#include "transport/shmfile.h"

loomResult_t probe_shm_named_create(const char* name, size_t bytes, void** map_out) {
  return shmfile_named_create(NULL, name, bytes, "the test object", map_out);
}

int probe_shm_named_map(const char* name, size_t min_bytes, size_t max_bytes, void** map_out,
                        size_t* bytes_out) {
  return shmfile_named_map(name, min_bytes, max_bytes, map_out, bytes_out);
}

loomResult_t probe_shm_named_open(const char* name, size_t bytes, void** map_out) {
  return shmfile_named_open(NULL, name, bytes, "the test object", map_out);
}

/* An unnamed object of bytes, opened again through /proc/self/fd as a peer
 * would, accepting min_bytes to max_bytes: shmfile_open_peer's result. A
 * byte written through one mapping must show through the other. */
int probe_shm_open_peer(size_t bytes, size_t min_bytes, size_t max_bytes) {
  struct shm_file f;
  int e = shmfile_make(bytes, &f);
  if (e) return e;
  void* map = NULL;
  size_t got = 0;
  e = shmfile_open_peer((int)getpid(), f.fd, min_bytes, max_bytes, &map, &got);
  if (e == 0) {
    ((volatile char*)f.map)[bytes - 1] = 42;
    if (got != bytes || ((volatile char*)map)[bytes - 1] != 42) e = -1;
    munmap(map, got);
  }
  shmfile_release(&f);
  return e;
}
