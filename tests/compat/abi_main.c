/* nccl_abi: Loom's nccl.h against NCCL's official one, fact by fact
 * (abi_facts.h). Exit 77 (SKIPPED) where the build found no official header. */
#include <stdio.h>
#include <string.h>

#include "abi.h"

int main(void) {
#ifdef ABI_NO_OFFICIAL
  printf(
      "SKIPPED: no official nccl.h (with cuda_runtime.h) was found at configure time; "
      "install the CUDA toolkit's NCCL headers or set NCCL_INCLUDE_DIR\n");
  return 77;
#else
  int n_ours = 0, n_off = 0, bad = 0;
  const struct abi_fact* ours = abi_ours(&n_ours);
  const struct abi_fact* off = abi_official(&n_off);
  if (n_ours != n_off) {
    printf("FAIL: %d facts from Loom's header, %d from the official one\n", n_ours, n_off);
    return 1;
  }
  for (int i = 0; i < n_ours; i++)
    if (strcmp(ours[i].name, off[i].name) != 0 || ours[i].value != off[i].value) {
      printf("FAIL: %s is %lld in Loom's nccl.h, %lld in NCCL's\n", ours[i].name, ours[i].value,
             off[i].value);
      bad++;
    }
  printf("%s: %d facts of NCCL's ABI compared, %d differ\n", bad ? "FAIL" : "ok", n_ours, bad);
  return bad ? 1 : 0;
#endif
}
