/* abi_side.c - compiled twice: against NCCL's official nccl.h
 * (ABI_SIDE=abi_official) and against Loom's text of it (ABI_SIDE=abi_ours).
 * Each build lists the facts of abi_facts.h as its header gives them;
 * abi_main.c compares the two lists. */
#include <nccl.h>

#include "abi.h"

const struct abi_fact* ABI_SIDE(int* n_out) {
  static struct abi_fact facts[256];
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  int n = 0;
#define FACT(name, value) facts[n++] = (struct abi_fact){name, (long long)(value)};
#include "abi_facts.h"
#undef FACT
  *n_out = n;
  return facts;
}
