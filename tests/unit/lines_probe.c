/* lines_probe.c - C helpers for test_lines.cc's format tests: the lines'
 * format (kernels/cpu/cpu_lines.h) on a local area, where C++ cannot name
 * _Atomic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_lines.h"

/* Puts bytes of a pattern at data offset off under seq into a fresh area
 * (its lines holding an older number first), then checks: the range reads
 * back ready and whole, a range one line past it is not ready (the lines
 * after the put still carry the older number), and every sub-range
 * [a, b) of it reads back its bytes. 0, or -1 with why. */
int lines_probe_roundtrip(size_t off, size_t bytes, uint64_t seq, char* why, size_t len) {
  size_t words = CPU_LINES_WORDS(off + bytes + 2 * CPU_LINE_DATA);
  _Atomic uint64_t* area = aligned_alloc(64, words * sizeof(uint64_t));
  unsigned char *src = malloc(bytes + 1), *out = malloc(bytes + 1);
  int rc = -1;
  if (!area || !src || !out) {
    snprintf(why, len, "out of memory");
    goto done;
  }
  for (size_t w = 0; w < words; w++) atomic_init(&area[w], seq - 1);
  for (size_t i = 0; i < bytes; i++) src[i] = (unsigned char)(i * 131 + off + 7);
  size_t checked = 0;
  if (cpu_lines_ready(area, seq, off, bytes, &checked) && bytes > 0) {
    snprintf(why, len, "ready before the put (off %zu, %zu bytes)", off, bytes);
    goto done;
  }
  cpu_lines_put(area, seq, off, src, bytes);
  checked = 0;
  if (!cpu_lines_ready(area, seq, off, bytes, &checked)) {
    snprintf(why, len, "not ready after the put (off %zu, %zu bytes)", off, bytes);
    goto done;
  }
  size_t past = (off + bytes + CPU_LINE_DATA - 1) / CPU_LINE_DATA * CPU_LINE_DATA;
  checked = 0;
  if (cpu_lines_ready(area, seq, past, 1, &checked)) {
    snprintf(why, len, "the line after the put reads ready (off %zu, %zu bytes)", off, bytes);
    goto done;
  }
  for (size_t a = 0; a <= bytes; a += 1 + bytes / 7)
    for (size_t b = a; b <= bytes; b += 1 + bytes / 5) {
      memset(out, 0xEE, bytes + 1);
      cpu_lines_get(area, off + a, out, b - a);
      if (memcmp(out, src + a, b - a) != 0 || out[b - a] != 0xEE) {
        snprintf(why, len, "bytes [%zu, %zu) of a put at %zu of %zu read back wrong", a, b, off,
                 bytes);
        goto done;
      }
    }
  rc = 0;
done:
  free(area);
  free(src);
  free(out);
  return rc;
}
