/* stub.c - a stand-in for the CUDA driver (libcuda.so.1) with one device, for
 * tests on machines without one: the driver calls Loom's core makes
 * (src/core/memkind.c), by the driver API's names and ABI. It claims the one
 * range that stub_set_device_range names, and what cuMemAlloc returned
 * (stub_stream.c), as device memory of device 0; everything else is memory
 * CUDA never saw. */
#include <stdint.h>
#include <string.h>

#include "stub_stream.h"

static uintptr_t dev_lo, dev_hi;

STUB_API void stub_set_device_range(const void* p, size_t bytes) {
  dev_lo = (uintptr_t)p;
  dev_hi = (uintptr_t)p + bytes;
}

STUB_API int cuInit(unsigned flags) {
  (void)flags;
  return 0;
}

STUB_API int cuDeviceGetCount(int* n) {
  *n = 1;
  return 0;
}

STUB_API int cuDeviceGet(int* dev, int ordinal) {
  if (ordinal != 0) return 101; /* CUDA_ERROR_INVALID_DEVICE */
  *dev = 0;
  return 0;
}

STUB_API int cuDeviceGetUuid_v2(uint8_t uuid[16], int dev) {
  (void)dev;
  for (int i = 0; i < 16; i++) uuid[i] = (uint8_t)(0xc0 + i);
  return 0;
}

STUB_API int cuDeviceGetPCIBusId(char* bus_id, int len, int dev) {
  (void)dev;
  strncpy(bus_id, "0000:42:00.0", (size_t)len);
  if (len > 0) bus_id[len - 1] = '\0';
  return 0;
}

/* CU_POINTER_ATTRIBUTE_MEMORY_TYPE (2): CU_MEMORYTYPE_DEVICE (2) inside the
 * range and inside cuMemAlloc memory (stub_stream.c); DEVICE_ORDINAL (9): 0; BUFFER_ID (7) of
 * cuMemAlloc memory. Elsewhere
 * CUDA_ERROR_INVALID_VALUE (1), as the driver answers for host memory it never saw. */
STUB_API int cuPointerGetAttribute(void* data, int attr, uintptr_t ptr) {
  if ((ptr < dev_lo || ptr >= dev_hi) && !stub_is_device(ptr)) return 1;
  if (attr == 2) {
    *(unsigned*)data = 2;
    return 0;
  }
  if (attr == 9) {
    *(int*)data = 0;
    return 0;
  }
  if (attr == 7) return stub_alloc_id(ptr, (uint64_t*)data); /* BUFFER_ID */
  return 1;
}

STUB_API int cuCtxGetDevice(int* dev) {
  *dev = 0;
  return 0;
}
