/* copy.c - host copies of the collectives' data (FIFO slots, thread ranks'
 * direct copies, local steps).
 *
 * The C library's memcpy is right for nearly every pair of addresses, but
 * glibc (2.36, Debian 12) copies from 2 KiB up to the size of the L2 cache
 * with `rep movsb` on CPUs with ERMS, and on the AMD EPYC of the development
 * VM that instruction runs at 1.5-2 GB/s instead of 25-40 when the
 * destination sits 1 to 31 bytes past the source modulo 4 KiB (measured:
 * docs/PERFORMANCE.md, "A copy that glibc's rep movsb makes slow"). That is
 * the everyday case of a page-aligned FIFO slot and a buffer from malloc,
 * whose large blocks start 16 bytes into a page. Such pairs, at the sizes
 * where glibc takes `rep movsb`, are copied here with vector loads and
 * 64-byte-aligned stores, 256 bytes at a time (16-22 GB/s there); every other
 * pair and size goes to memcpy (from 512 KiB glibc's own loop runs at 30). */
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"

/* Sizes below this go to memcpy whatever the distance: glibc's own vector
 * path serves them (its rep movsb threshold is 2,112 bytes by default). */
#define COPY_LOOP_MIN 2048
#define COPY_PAGE 4096
/* From here glibc stops using rep movsb (its rep_movsb_stop_threshold, the L2
 * size on AMD: 512 KiB on the development VM). */
#define COPY_LOOP_MAX (512u << 10)
#define COPY_BAD_BELOW 32 /* distances 1..31 modulo a page are the slow ones */

typedef char copy_v16 __attribute__((vector_size(16), aligned(1), may_alias));
typedef char copy_a16 __attribute__((vector_size(16), aligned(16), may_alias));

void cpu_copy(void* dst, const void* src, size_t bytes) {
  uintptr_t dist = ((uintptr_t)dst - (uintptr_t)src) & (COPY_PAGE - 1);
  if (bytes < COPY_LOOP_MIN || bytes >= COPY_LOOP_MAX || dist == 0 || dist >= COPY_BAD_BELOW) {
    memcpy(dst, src, bytes);
    return;
  }
  char* o = dst;
  const char* i = src;
  size_t head = (64 - ((uintptr_t)o & 63)) & 63; /* stores aligned to 64 from here */
  memcpy(o, i, head);
  o += head, i += head, bytes -= head;
  for (; bytes >= 256; o += 256, i += 256, bytes -= 256) {
    copy_v16 r[16];
    for (int k = 0; k < 16; k++) r[k] = ((const copy_v16*)i)[k];
    for (int k = 0; k < 16; k++) ((copy_a16*)o)[k] = r[k];
  }
  memcpy(o, i, bytes);
}
