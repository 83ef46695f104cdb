/* mem.c - the kinds of buffer the tools can benchmark (--mem). Host memory is the default and
 * the only kind this build of Loom serves; CUDA is listed so that --mem cuda says why it is
 * refused, and becomes one more table like host_kind once Loom takes device buffers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define HOST_ALIGN 4096 /* whole pages: no rank's buffer shares a cache line or page edge */

static int host_alloc(void** out, size_t bytes, int loom_alloc, char* err, size_t errlen) {
  if (bytes == 0) bytes = HOST_ALIGN;
  if (loom_alloc) {
    loomResult_t r = loomMemAlloc(out, bytes);
    if (r == loomSuccess) return 0;
    const char* last = loomGetLastError(NULL);
    snprintf(err, errlen, "loomMemAlloc(%zu bytes) failed: %s%s%s", bytes, loomGetErrorString(r),
             *last ? ": " : "", last);
    return -1;
  }
  int rc = posix_memalign(out, HOST_ALIGN, bytes);
  if (rc == 0) {
    memset(*out, 0, bytes); /* touch every page now, not inside the first timed call */
    return 0;
  }
  snprintf(err, errlen, "cannot allocate %zu bytes of host memory: %s", bytes, strerror(rc));
  return -1;
}

static void host_release(void* p, int loom_alloc) {
  if (!p) return;
  if (loom_alloc)
    loomMemFree(p);
  else
    free(p);
}

static void host_fill(void* dst, int byte, size_t bytes) {
  memset(dst, byte, bytes);
}

static void host_copy_out(void* host_dst, const void* src, size_t bytes) {
  memcpy(host_dst, src, bytes);
}

static void host_copy_in(void* dst, const void* host_src, size_t bytes) {
  memcpy(dst, host_src, bytes);
}

static const struct perf_mem_kind host_kind = {
    .name = "host",
    .unsupported = NULL,
    .direct = 1,
    .alloc = host_alloc,
    .release = host_release,
    .fill = host_fill,
    .to_host = host_copy_out,
    .from_host = host_copy_in,
};

/* Refused before anything is allocated; its operations are never called. */
static const struct perf_mem_kind cuda_kind = {
    .name = "cuda",
    .unsupported = "--mem cuda: CUDA buffers are not supported by this build of Loom yet",
    .direct = 0,
    .alloc = host_alloc,
    .release = host_release,
    .fill = host_fill,
    .to_host = host_copy_out,
    .from_host = host_copy_in,
};

const struct perf_mem_kind* perf_mem_find(const char* name) {
  if (strcmp(name, host_kind.name) == 0) return &host_kind;
  if (strcmp(name, cuda_kind.name) == 0) return &cuda_kind;
  return NULL;
}
