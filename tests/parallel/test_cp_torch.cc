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
  std::string d = partest::torch_dir();
  if (d.empty()) GTEST_SKIP() << TORCH_DIR_UNSET;
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
          auto put = [&](const char* what, const std::vector<double>& v) {
            partest::torch_put(d, std::string("cp_") + names[a] + "_" + what, v);
          };
          put("out", out), put("lse", lse), put("dq", dq), put("dk", dk), put("dv", dv);
        }
        if (c.rank != 0) return;
        using partest::torch_put;
        torch_put(
            d, "cp_shape",
            {(double)B, (double)S, (double)Hq, (double)Hkv, (double)D, (double)Dv, 1.0, p.c()});
        torch_put(d, "cp_q", p.q), torch_put(d, "cp_k", p.k), torch_put(d, "cp_v", p.v);
        torch_put(d, "cp_dout", p.dout);
      },
      partest::opts());
}

}  // namespace
