/* cpu_lines.h - the format of low-latency lines on host memory: 64-byte
 * lines of 56 bytes of data and a word with the call's sequence number,
 * written data first (relaxed) and number last (release), read number first
 * (acquire). The transport (src/transport/lines.c) keeps the areas in rank
 * segments; the calibration (src/topo/calibrate.c) times the same code
 * between two threads. docs/DESIGN.md, "Low-latency lines", says why. */
#ifndef LOOM_KERNELS_CPU_LINES_H
#define LOOM_KERNELS_CPU_LINES_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CPU_LINE_WORDS 8 /* 8-byte words a line */
#define CPU_LINE_DATA 56 /* bytes of data a line: every element size divides it */
/* Words of an area that carries bytes of data. */
#define CPU_LINES_WORDS(bytes) (((bytes) + CPU_LINE_DATA - 1) / CPU_LINE_DATA * CPU_LINE_WORDS)

/* Writes bytes of src at data offset off of area under number seq (never
 * 0): every line that holds any of them, whole (the rest of an edge line
 * zero: one put a call fills a range). */
void cpu_lines_put(_Atomic uint64_t* area, uint64_t seq, size_t off, const void* src, size_t bytes);
/* 1 when every line that holds data bytes [off, off + bytes) of area
 * carries seq; else 0. *checked keeps how many lines earlier tries found
 * there (0 on the first). Never blocks. */
int cpu_lines_ready(const _Atomic uint64_t* area, uint64_t seq, size_t off, size_t bytes,
                    size_t* checked);
/* Copies data bytes [off, off + bytes) of area to out (cpu_lines_ready
 * said they are there). */
void cpu_lines_get(const _Atomic uint64_t* area, size_t off, void* out, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
