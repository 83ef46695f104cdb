/* cpu_lines.c - low-latency lines on host memory (cpu_lines.h). */
#include "kernels/cpu/cpu_lines.h"

#include <string.h>

#include "core/util.h"

/* Stores a line's 56 data bytes from d, then its number. */
static void line_store(_Atomic uint64_t* line, const unsigned char* d, uint64_t seq) {
  for (int k = 0; k < CPU_LINE_WORDS - 1; k++) {
    uint64_t v;
    memcpy(&v, d + 8 * k, 8);
    atomic_store_explicit(&line[k], v, memory_order_relaxed);
  }
  atomic_store_explicit(&line[CPU_LINE_WORDS - 1], seq, memory_order_release);
}

/* Loads a line's 56 data bytes into d (its number already seen). */
static void line_load(const _Atomic uint64_t* line, unsigned char* d) {
  for (int k = 0; k < CPU_LINE_WORDS - 1; k++) {
    uint64_t v = atomic_load_explicit(&line[k], memory_order_relaxed);
    memcpy(d + 8 * k, &v, 8);
  }
}

void cpu_lines_put(_Atomic uint64_t* area, uint64_t seq, size_t off, const void* src,
                   size_t bytes) {
  const unsigned char* in = src;
  size_t end = off + bytes;
  for (size_t L = off / CPU_LINE_DATA; L * CPU_LINE_DATA < end; L++) {
    size_t lo = L * CPU_LINE_DATA, hi = lo + CPU_LINE_DATA;
    if (lo >= off && hi <= end) {
      line_store(area + L * CPU_LINE_WORDS, in + (lo - off), seq);
    } else {
      unsigned char d[CPU_LINE_DATA] = {0};
      size_t a = LOOM_MAX(lo, off), b = LOOM_MIN(hi, end);
      memcpy(d + (a - lo), in + (a - off), b - a);
      line_store(area + L * CPU_LINE_WORDS, d, seq);
    }
  }
}

int cpu_lines_ready(const _Atomic uint64_t* area, uint64_t seq, size_t off, size_t bytes,
                    size_t* checked) {
  size_t first = off / CPU_LINE_DATA, end = (off + bytes + CPU_LINE_DATA - 1) / CPU_LINE_DATA;
  for (size_t L = first + *checked; L < end; L++) {
    const _Atomic uint64_t* num = &area[L * CPU_LINE_WORDS + CPU_LINE_WORDS - 1];
    if (atomic_load_explicit(num, memory_order_acquire) != seq) {
      *checked = L - first;
      return 0;
    }
  }
  *checked = end - first;
  return 1;
}

void cpu_lines_get(const _Atomic uint64_t* area, size_t off, void* out, size_t bytes) {
  unsigned char* o = out;
  for (size_t i = 0; i < bytes;) {
    size_t pos = off + i, L = pos / CPU_LINE_DATA, in = pos % CPU_LINE_DATA;
    size_t take = LOOM_MIN(CPU_LINE_DATA - in, bytes - i);
    if (take == CPU_LINE_DATA) {
      line_load(area + L * CPU_LINE_WORDS, o + i);
    } else {
      unsigned char d[CPU_LINE_DATA];
      line_load(area + L * CPU_LINE_WORDS, d);
      memcpy(o + i, d + in, take);
    }
    i += take;
  }
}
