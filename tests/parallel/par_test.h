// par_test.h - what the tests of libloom_parallel share: tensors over std::vector storage,
// seeded random data, float64 references, inner products summed over ranks, and the check
// that a misuse left its outputs' bytes alone.
#ifndef LOOM_TESTS_PAR_TEST_H
#define LOOM_TESTS_PAR_TEST_H

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "harness.h"
#include "loom_parallel.h"
#include "shim/loom_shim.h"

namespace partest {

using harness::Ctx;
using harness::Mode;

// A contiguous tensor over v (which must outlive it and not be resized).
template <class T>
loomTensor make(std::vector<T>& v, loomDataType_t dt, std::vector<int64_t> shape) {
  loomTensor t;
  EXPECT_EQ(loomTensorMake(v.data(), dt, (int)shape.size(), shape.data(), &t), loomSuccess)
      << loomGetLastError(NULL);
  return t;
}

inline int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

// Uniform in [-1, 1), from a seed that names the rank and the case.
inline std::vector<double> random_f64(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

// Relative distance, with a floor so that values near zero compare absolutely.
inline double rel_err(double got, double want) {
  return std::fabs(got - want) / std::max(1.0, std::fabs(want));
}

// The sum over ranks of a local double (an inner product's parts).
inline double sum_ranks(double local, loomComm_t comm) {
  double out = 0;
  EXPECT_EQ(loomAllReduce(&local, &out, 1, loomFloat64, loomSum, comm, nullptr), loomSuccess);
  return out;
}

// The common parameter: (ranks, mode), named "proc3", "thread4".
using RanksMode = std::tuple<int, Mode>;
inline std::string ranks_mode_name(const ::testing::TestParamInfo<RanksMode>& i) {
  return std::string(std::get<1>(i.param) == Mode::Proc ? "proc" : "thread") +
         std::to_string(std::get<0>(i.param));
}

// A body's harness options: a communicator timeout no test waits out.
inline harness::Opts opts() {
  harness::Opts o;
  o.comm_timeout_ms = harness::kNeverMs;
  return o;
}

// A misuse: the call returns loomInvalidArgument, the last error (of comm, or the thread's
// when comm is NULL) names fn and holds every needle, and out's bytes are as before.
#define EXPECT_MISUSE(call, comm, fn, out_bytes, ...)                                   \
  do {                                                                                  \
    std::vector<unsigned char> before_(out_bytes);                                      \
    loomResult_t r_ = (call);                                                           \
    EXPECT_EQ(r_, loomInvalidArgument) << #call;                                        \
    std::string why_ = loomGetLastError(comm);                                          \
    EXPECT_NE(why_.find(fn), std::string::npos) << why_;                                \
    for (const char* n_ : std::vector<const char*>{__VA_ARGS__})                        \
      EXPECT_NE(why_.find(n_), std::string::npos) << "'" << n_ << "' not in: " << why_; \
    EXPECT_EQ(before_, out_bytes) << #call << " touched its output";                    \
  } while (0)

// The bytes of a vector, to compare before and after a misuse.
template <class T>
std::vector<unsigned char> bytes_of(const std::vector<T>& v) {
  std::vector<unsigned char> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace partest

#endif
