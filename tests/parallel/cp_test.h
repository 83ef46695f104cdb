// cp_test.h - what the tests of context-parallel attention share: element storage of any
// float dtype, a global problem with its float64 reference (direct softmax, another formula
// than the library's merge), and the run of one case on this rank.
#ifndef LOOM_TESTS_CP_TEST_H
#define LOOM_TESTS_CP_TEST_H

#include <limits>

#include "par_test.h"

namespace cptest {

// Storage of n elements of dt with float64 access (16-bit types rounded to nearest-even).
struct Buf {
  loomDataType_t dt = loomFloat64;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;
  loomTensor t{};
  Buf() = default;
  Buf(loomDataType_t d, std::vector<int64_t> s);
  Buf(const Buf&) = delete;  // t points into bytes: moves keep it, copies would not
  Buf& operator=(const Buf&) = delete;
  Buf(Buf&&) = default;
  Buf& operator=(Buf&&) = default;
  size_t n() const { return (size_t)partest::numel(shape); }
  size_t size() const;
  double get(size_t i) const;
  void set(size_t i, double v);
  loomTensor* tp() { return &t; }
};

// A global problem: q [B,S,Hq,D], k [B,Skv,Hkv,D], v [B,Skv,Hkv,Dv], dout [B,S,Hq,Dv] with
// values on a grid that every dtype stores exactly, and its float64 reference.
struct Prob {
  int64_t B = 1, S = 12, Skv = 12, Hq = 4, Hkv = 2, D = 8, Dv = 6;
  bool causal = false;
  double scale = 0;  // 0: 1/sqrt(D)
  std::vector<double> q, k, v, dout;
  std::vector<double> out, lse, dq, dk, dv;  // reference
  double c() const { return scale != 0 ? scale : 1.0 / std::sqrt((double)D); }
};

Prob make_prob(int64_t B, int64_t S, int64_t Skv, int64_t Hq, int64_t Hkv, int64_t D, int64_t Dv,
               bool causal, uint64_t seed, double scale = 0);

// Tolerances (relative, floor 1) per dtype: forward (out, lse) and backward (dq, dk, dv).
double tol_fwd(loomDataType_t dt);
double tol_bwd(loomDataType_t dt);

struct Local {
  Buf q, k, v, dout, out, lse, dq, dk, dv;
};

// Shards the problem into this rank's tensors of dtype dt (by loomCpShard).
Local shard(const Prob& p, loomDataType_t dt, loomCpLayout_t layout, int rank, int P);

// Forward and backward on this rank with opts, compared with the reference; what names the
// case in failures; tolerances are tol_fwd/tol_bwd times tol_scale. Returns the local tensors
// after the calls.
Local check_case(const harness::Ctx& c, const Prob& p, loomDataType_t dt, const loomAttnOpts& o,
                 const std::string& what, double tol_scale = 1);

std::string name_of(const loomAttnOpts& o, loomDataType_t dt);

}  // namespace cptest

#endif
