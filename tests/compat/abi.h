/* abi.h - one fact of the binary interface (abi_facts.h), by name. */
#ifndef LOOM_TESTS_COMPAT_ABI_H
#define LOOM_TESTS_COMPAT_ABI_H

struct abi_fact {
  const char* name;
  long long value;
};
const struct abi_fact* abi_ours(int* n_out);
const struct abi_fact* abi_official(int* n_out);

#endif
