/* par_util.c - errors, dtypes, splits and a call's entry for libloom_parallel (par.h). */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "par.h"

/* ---- Errors ----------------------------------------------------------------------------- */

static loomResult_t vfail(loomComm_t comm, loomResult_t code, const char* fn, const char* fmt,
                          va_list ap) {
  char text[1024];
  int off = snprintf(text, sizeof(text), "%s: ", fn);
  if (off < 0 || off >= (int)sizeof(text)) off = 0;
  vsnprintf(text + off, sizeof(text) - (size_t)off, fmt, ap);
  /* A comm that is not live (the very misuse being reported, perhaps) gets the thread's. */
  if (loomSetLastError(comm, text) != loomSuccess) loomSetLastError(NULL, text);
  return code;
}

loomResult_t par_err(loomComm_t comm, const char* fn, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  loomResult_t r = vfail(comm, loomInvalidArgument, fn, fmt, ap);
  va_end(ap);
  return r;
}

loomResult_t par_fail(loomComm_t comm, loomResult_t code, const char* fn, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  loomResult_t r = vfail(comm, code, fn, fmt, ap);
  va_end(ap);
  return r;
}

/* ---- Data types -------------------------------------------------------------------------- */

size_t par_dtype_size(loomDataType_t dt) {
  switch (dt) {
    case loomInt8:
    case loomUint8:
    case loomFloat8e4m3:
    case loomFloat8e5m2:
      return 1;
    case loomFloat16:
    case loomBfloat16:
      return 2;
    case loomInt32:
    case loomUint32:
    case loomFloat32:
      return 4;
    case loomInt64:
    case loomUint64:
    case loomFloat64:
      return 8;
    default:
      return 0;
  }
}

const char* par_dtype_name(loomDataType_t dt) {
  static const char* const names[loomNumTypes] = {
      "int8",    "uint8",   "int32",   "uint32",   "int64",      "uint64",
      "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  return (unsigned)dt < loomNumTypes ? names[dt] : "an unknown dtype";
}

int par_dtype_is_compute(loomDataType_t dt) {
  return dt == loomFloat16 || dt == loomBfloat16 || dt == loomFloat32 || dt == loomFloat64;
}

/* ---- Splits ------------------------------------------------------------------------------ */

loomResult_t par_splits(loomComm_t comm, const char* fn, const char* what, const int64_t* splits,
                        int n, int64_t extent, int64_t* offs) {
  offs[0] = 0;
  if (splits == NULL) {
    if (extent % n != 0)
      return par_err(comm, fn, "%s is NULL (even) but the extent %lld is not divisible by %d ranks",
                     what, (long long)extent, n);
    for (int r = 0; r < n; r++) offs[r + 1] = offs[r] + extent / n;
    return loomSuccess;
  }
  for (int r = 0; r < n; r++) {
    if (splits[r] < 0)
      return par_err(comm, fn, "%s[%d] is %lld, below 0", what, r, (long long)splits[r]);
    if (splits[r] > extent - offs[r])
      return par_err(comm, fn, "%s sum past %lld (the extent) at %s[%d] = %lld", what,
                     (long long)extent, what, r, (long long)splits[r]);
    offs[r + 1] = offs[r] + splits[r];
  }
  if (offs[n] != extent)
    return par_err(comm, fn, "%s sum to %lld but the extent is %lld", what, (long long)offs[n],
                   (long long)extent);
  return loomSuccess;
}

/* ---- A call's entry ---------------------------------------------------------------------- */

loomResult_t par_comm(loomComm_t comm, const char* fn, const char* name, int* rank, int* n) {
  if (comm == NULL) return par_err(NULL, fn, "%s is NULL", name);
  if (loomCommUserRank(comm, rank) != loomSuccess || loomCommCount(comm, n) != loomSuccess)
    return par_err(NULL, fn, "%s (%p) is not a live communicator", name, (void*)comm);
  return loomSuccess;
}

loomResult_t par_enter(loomComm_t comm, const char* fn, loomStream_t stream) {
  if (stream == NULL) return loomSuccess;
  void* cuda = NULL;
  if (loomStreamGetCuda(stream, &cuda) != loomSuccess)
    return par_err(comm, fn, "stream (%p) is not a live stream", (void*)stream);
  if (cuda != NULL)
    return par_err(comm, fn,
                   "a CUDA stream, but this build of libloom_parallel computes on host memory "
                   "only (pass NULL or a host stream)");
  return loomStreamSynchronize(stream);
}

void* par_scratch(loomComm_t comm, const char* fn, size_t n) {
  void* p = NULL;
  if (posix_memalign(&p, 64, n ? n : 64) != 0) {
    par_fail(comm, loomSystemError, fn, "out of memory for %zu bytes of scratch", n);
    return NULL;
  }
  return p;
}

/* ---- The side stream --------------------------------------------------------------------- */

static pthread_key_t g_side_key;
static pthread_once_t g_side_once = PTHREAD_ONCE_INIT;

static void side_free(void* s) {
  loomStreamDestroy((loomStream_t)s);
}

static void side_key_make(void) {
  pthread_key_create(&g_side_key, side_free);
}

loomStream_t par_side_stream(void) {
  pthread_once(&g_side_once, side_key_make);
  loomStream_t s = pthread_getspecific(g_side_key);
  if (s == NULL && loomStreamCreate(&s) == loomSuccess) pthread_setspecific(g_side_key, s);
  return s;
}
