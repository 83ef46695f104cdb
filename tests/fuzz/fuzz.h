/* fuzz.h - the harnesses of tests/fuzz: each file defines LLVMFuzzerTestOneInput for one parser
 * of outside input. Built two ways: with clang's libFuzzer (tests/fuzz/run.sh, LOOM_FUZZ=ON),
 * and, in every build, with replay.c's main, which feeds the committed corpus to the same
 * function (ctest fuzz.*; under AddressSanitizer and UndefinedBehaviorSanitizer in CI). */
#ifndef LOOM_TESTS_FUZZ_H
#define LOOM_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

/* The input as a NUL-terminated string (at most cap - 1 bytes of it) in buf. */
static inline void fuzz_text(const uint8_t* data, size_t size, char* buf, size_t cap) {
  size_t n = size < cap - 1 ? size : cap - 1;
  memcpy(buf, data, n);
  buf[n] = 0;
}

#endif
