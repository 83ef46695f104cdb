// For tests/parallel/torch_check.sh: with LOOM_TORCH_DIR set, a cp-3 causal zig-zag GQA
// attention's inputs and, for each of the three algorithms, its outputs and gradients (gathered
// back into position order with loomCpUnshard) go there as raw float64 files, for
// torch_attn.py to recompute with PyTorch's autograd. Skipped otherwise.
#include <cstdio>
#include <cstdlib>

#include "cp_test.h"

namespace {

using partest::Ctx;
using partest::Mode;

void put(const std::string& path, const std::vector<double>& v) {
  FILE* f = fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(fwrite(v.data(), sizeof(double), v.size(), f), v.size());
  fclose(f);
}

// The whole sequence of a local result, in position order.
std::vector<double> unshard(const Ctx& c, cptest::Buf& local, int seq_dim, loomCpLayout_t l) {
  std::vector<int64_t> shape = local.shape;
  shape[(size_t)seq_dim] *= c.nranks;
  cptest::Buf full(loomFloat64, shape);
  EXPECT_EQ(loomCpUnshard(local.tp(), seq_dim, l, full.tp(), c.comm, nullptr), loomSuccess)
      << loomGetLastError(c.comm);
  std::vector<double> v(full.n());
  for (size_t i = 0; i < v.size(); i++) v[i] = full.get(i);
  return v;
}

TEST(TorchDumpCpAttn, ZigzagCausalGqaThreeAlgorithms) {
  const char* dir = getenv("LOOM_TORCH_DIR");
  if (dir == nullptr)
    GTEST_SKIP() << "LOOM_TORCH_DIR is not set (tests/parallel/torch_check.sh sets it)";
  std::string d = dir;
  harness::run(
      3, Mode::Thread,
      [d](Ctx& c) {
        const int64_t B = 2, S = 24, Hq = 6, Hkv = 3, D = 8, Dv = 5;
        cptest::Prob p = cptest::make_prob(B, S, S, Hq, Hkv, D, Dv, true, 4242);
        const char* names[3] = {"ring", "allgather", "ulysses"};
        for (int a = 0; a < 3; a++) {
          loomAttnOpts o = LOOM_ATTN_OPTS_INIT;
          o.causal = 1, o.layout = loomCpZigzag, o.algo = (loomCpAlgo_t)a;
          cptest::Local l = cptest::check_case(c, p, loomFloat64, o, names[a]);
          auto out = unshard(c, l.out, 1, o.layout), lse = unshard(c, l.lse, 2, o.layout);
          auto dq = unshard(c, l.dq, 1, o.layout), dk = unshard(c, l.dk, 1, o.layout);
          auto dv = unshard(c, l.dv, 1, o.layout);
          if (c.rank != 0) continue;
          std::string pre = d + "/cp_" + names[a] + "_";
          put(pre + "out", out), put(pre + "lse", lse), put(pre + "dq", dq);
          put(pre + "dk", dk), put(pre + "dv", dv);
        }
        if (c.rank != 0) return;
        put(d + "/cp_shape",
            {(double)B, (double)S, (double)Hq, (double)Hkv, (double)D, (double)Dv, 1.0, p.c()});
        put(d + "/cp_q", p.q), put(d + "/cp_k", p.k), put(d + "/cp_v", p.v);
        put(d + "/cp_dout", p.dout);
      },
      partest::opts());
}

}  // namespace
