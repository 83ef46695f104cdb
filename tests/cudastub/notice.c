/* notice.c - a program that loads the CUDA driver after its communicator
 * exists is noticed within 4096 classifications of a calling thread
 * (src/core/memkind.c): a stand-in driver (stub.c, as libcuda.so.1) is
 * dlopened between calls and claims one buffer as device memory; a call on
 * that buffer must then be refused on the NULL stream within 4096 calls,
 * naming the buffer, and a call on host memory must still work. Before the
 * driver is loaded, the same buffer is host memory for thousands of calls.
 *   usage: notice PATH_OF_THE_STUB_LIBCUDA_SO_1 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "loom.h"

#define FAIL(...)                 \
  do {                            \
    fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr);          \
    return 1;                     \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 2) FAIL("usage: %s STUB_LIBCUDA", argv[0]);
  loomComm_t comm;
  if (loomCommInitAll(&comm, 1, NULL) != loomSuccess) FAIL("init: %s", loomGetLastError(NULL));
  static float buf[64], host[64];
  for (int i = 0; i < 10000; i++)
    if (loomAllReduce(buf, buf, 64, loomFloat32, loomSum, comm, NULL) != loomSuccess)
      FAIL("call %d before the driver was loaded: %s", i, loomGetLastError(NULL));
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) FAIL("dlopen %s: %s", argv[1], dlerror());
  void (*set_range)(const void*, size_t) =
      (void (*)(const void*, size_t))dlsym(h, "stub_set_device_range");
  if (!set_range) FAIL("the stub has no stub_set_device_range");
  set_range(buf, sizeof(buf));
  int refused_at = -1;
  for (int i = 0; i < 4096 && refused_at < 0; i++) {
    loomResult_t r = loomAllReduce(buf, buf, 64, loomFloat32, loomSum, comm, NULL);
    if (r == loomSuccess) continue;
    const char* why = loomGetLastError(NULL);
    if (r != loomInvalidArgument || !strstr(why, "sendbuff is CUDA device memory"))
      FAIL("call %d after the driver was loaded: result %d, '%s'", i, (int)r, why);
    refused_at = i;
  }
  if (refused_at < 0)
    FAIL("4096 calls after the driver was loaded, its device memory is still host memory");
  for (int i = 0; i < 64; i++) host[i] = (float)i;
  if (loomAllReduce(host, host, 64, loomFloat32, loomSum, comm, NULL) != loomSuccess)
    FAIL("a call on host memory after the refusal: %s", loomGetLastError(NULL));
  for (int i = 0; i < 64; i++)
    if (host[i] != (float)i) FAIL("host[%d] = %g after a 1-rank sum", i, (double)host[i]);
  if (loomCommDestroy(comm) != loomSuccess) FAIL("destroy: %s", loomGetLastError(NULL));
  printf("noticed the driver at call %d after it was loaded\n", refused_at);
  return 0;
}
