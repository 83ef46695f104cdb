// par_test.h - what the tests of libloom_parallel share: tensors over std::vector storage,
// seeded random data, float64 references, inner products summed over ranks, and the check
// that a misuse left its outputs' bytes alone.
#ifndef LOOM_TESTS_PAR_TEST_H
#define LOOM_TESTS_PAR_TEST_H

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

// ---- Files for the PyTorch checks (tests/parallel/torch_check.sh) ----------------------------

// LOOM_TORCH_DIR, where the TorchDump tests write; "" when unset (they skip then).
inline std::string torch_dir() {
  const char* d = getenv("LOOM_TORCH_DIR");
  return d ? d : "";
}
#define TORCH_DIR_UNSET "LOOM_TORCH_DIR is not set (tests/parallel/torch_check.sh sets it)"

// dir/name: v as raw float64, for a torch_*.py to read.
inline void torch_put(const std::string& dir, const std::string& name,
                      const std::vector<double>& v) {
  std::string path = dir + "/" + name;
  FILE* f = fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  size_t wrote = fwrite(v.data(), sizeof(double), v.size(), f);
  fclose(f);
  ASSERT_EQ(wrote, v.size()) << path;
}

// ---- Float types as float64 values --------------------------------------------------------

inline double half_to_double(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0    ? std::ldexp(m, -24)
             : e == 31 ? (m ? NAN : INFINITY)
                       : std::ldexp(m + 1024, e - 25);
  return (h & 0x8000) ? -v : v;
}

// Nearest-even by bisection over the (monotone) codes of one sign: an independent reference
// for the layer's conversion. Values above the largest half round to it or to infinity.
inline uint16_t float_to_half(float f) {
  if (std::isnan(f)) return 0x7e00;
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs((double)f);
  int lo = 0, hi = 0x7c00;  // [0, inf]
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    (half_to_double((uint16_t)mid) <= a ? lo : hi) = mid;
  }
  double dl = a - half_to_double((uint16_t)lo), dh = half_to_double((uint16_t)hi) - a;
  return sign | (uint16_t)(dl < dh || (dl == dh && lo % 2 == 0) ? lo : hi);
}

// One element of a float dtype at p, as float64.
inline double load_float(loomDataType_t dt, const void* p) {
  if (dt == loomFloat64) {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  float f;
  if (dt == loomFloat32) {
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (dt == loomFloat16) return half_to_double(h);
  uint32_t x = (uint32_t)h << 16;
  std::memcpy(&f, &x, 4);
  return f;
}

// Stores v as one element of a float dtype at p: through float32 for the 32- and 16-bit types
// (as the layer computes them), rounded to nearest-even.
inline void store_float(loomDataType_t dt, void* p, double v) {
  if (dt == loomFloat64) {
    std::memcpy(p, &v, 8);
    return;
  }
  float f = (float)v;
  if (dt == loomFloat32) {
    std::memcpy(p, &f, 4);
    return;
  }
  uint16_t h;
  if (dt == loomFloat16) {
    h = float_to_half(f);
  } else {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    h = std::isnan(f) ? 0x7fc0 : (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
  }
  std::memcpy(p, &h, 2);
}

}  // namespace partest

#endif
