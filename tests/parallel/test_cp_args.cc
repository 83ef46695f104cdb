// Section 8 of PARALLEL.md for section 4: every misuse of the attention, shard, unshard and
// positions calls returns loomInvalidArgument before any communication, names the function,
// the argument and the values, leaves the outputs' bytes alone, and a valid call follows.
#include "par_test.h"

namespace {

using partest::bytes_of;
using partest::Ctx;
using partest::make;
using partest::Mode;
using partest::RanksMode;

// A valid float64 call: q [1, 4, 2, 4], k [1, 4, 1, 4], v [1, 4, 1, 4], out, lse [1, 2, 4].
struct Call {
  std::vector<double> q, k, v, out, lse, dout, dq, dk, dv;
  loomTensor tq, tk, tv, to, tl, tdo, tdq, tdk, tdv;
  loomAttnOpts o = LOOM_ATTN_OPTS_INIT;
  Call() {
    for (auto* x : {&q, &dout, &out, &dq}) x->assign(32, 0.25);
    for (auto* x : {&k, &v, &dk, &dv}) x->assign(16, 0.5);
    lse.assign(8, 0.0);
    tq = make(q, loomFloat64, {1, 4, 2, 4});
    tk = make(k, loomFloat64, {1, 4, 1, 4});
    tv = make(v, loomFloat64, {1, 4, 1, 4});
    to = make(out, loomFloat64, {1, 4, 2, 4});
    tl = make(lse, loomFloat64, {1, 2, 4});
    tdo = make(dout, loomFloat64, {1, 4, 2, 4});
    tdq = make(dq, loomFloat64, {1, 4, 2, 4});
    tdk = make(dk, loomFloat64, {1, 4, 1, 4});
    tdv = make(dv, loomFloat64, {1, 4, 1, 4});
  }
  loomResult_t fwd(loomComm_t comm) {
    return loomCpAttentionForward(&tq, &tk, &tv, &to, &tl, &o, comm, nullptr);
  }
  loomResult_t bwd(loomComm_t comm) {
    return loomCpAttentionBackward(&tq, &tk, &tv, &to, &tdo, &tl, &tdq, &tdk, &tdv, &o, comm,
                                   nullptr);
  }
  std::vector<unsigned char> outs() const {
    auto a = bytes_of(out), b = bytes_of(lse);
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }
  std::vector<unsigned char> grads() const {
    auto a = bytes_of(dq), b = bytes_of(dk), d = bytes_of(dv);
    a.insert(a.end(), b.begin(), b.end());
    a.insert(a.end(), d.begin(), d.end());
    return a;
  }
};

#define FWD_MISUSE(setup, ...)                                                               \
  do {                                                                                       \
    Call k_;                                                                                 \
    setup;                                                                                   \
    EXPECT_MISUSE(k_.fwd(c.comm), c.comm, "loomCpAttentionForward", k_.outs(), __VA_ARGS__); \
  } while (0)

#define BWD_MISUSE(setup, ...)                                                                 \
  do {                                                                                         \
    Call k_;                                                                                   \
    setup;                                                                                     \
    EXPECT_MISUSE(k_.bwd(c.comm), c.comm, "loomCpAttentionBackward", k_.grads(), __VA_ARGS__); \
  } while (0)

class CpAttnArgs : public ::testing::TestWithParam<RanksMode> {};

TEST_P(CpAttnArgs, ForwardMisuse) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        FWD_MISUSE(k_.tl.dtype = loomFloat32, "lse", "float32", "float64");
        FWD_MISUSE(k_.tl.shape[2] = 3, "lse is [1, 2, 3]", "[1, 2, 4]");
        FWD_MISUSE(k_.tk.ndim = 3, "k.ndim is 3");
        FWD_MISUSE(k_.tq.dtype = loomInt32, "q is int32");
        FWD_MISUSE(k_.tv.dtype = loomFloat32, "v is float32", "float64");
        FWD_MISUSE(k_.tv.shape[1] = 2, "k.shape[1]", "4", "v.shape[1] is 2");
        FWD_MISUSE((k_.tq.shape[2] = 3, k_.to.shape[2] = 3, k_.tk.shape[2] = 2, k_.tv.shape[2] = 2),
                   "Hq % Hkv", "3", "2");
        FWD_MISUSE((k_.tq.shape[1] = 3, k_.to.shape[1] = 3, k_.tl.shape[2] = 3,
                    k_.o.layout = loomCpZigzag),
                   "zigzag", "2P");
        FWD_MISUSE((k_.tq.shape[1] = 2, k_.to.shape[1] = 2, k_.tl.shape[2] = 2, k_.o.causal = 1),
                   "causal", "Sq == Skv");
        FWD_MISUSE((k_.tq.strides[3] = 2, k_.tq.shape[3] = 2, k_.tk.shape[3] = 2), "q.strides[3]",
                   "stride 1");
        FWD_MISUSE(k_.to.data = k_.q.data(), "out", "overlaps", "q");
        FWD_MISUSE(k_.to.strides[2] = 0, "out");
        FWD_MISUSE(k_.tq.shape[0] = -1, "q");
        FWD_MISUSE(k_.o.algo = (loomCpAlgo_t)7, "opts->algo is 7");
        FWD_MISUSE(k_.o.layout = (loomCpLayout_t)5, "opts->layout is 5");
        FWD_MISUSE(k_.o.softmaxScale = NAN, "opts->softmaxScale");
        loomAttnKernel bad = {nullptr, loomAttnKernelReference()->backward, nullptr};
        FWD_MISUSE(k_.o.kernel = &bad, "opts->kernel", "forward");
        if (c.nranks > 1)  // Hkv 1 is not a multiple of P
          FWD_MISUSE(k_.o.algo = loomCpUlysses, "loomCpUlysses", "Hkv");
        // The communicator is checked first: NULL names cp, on the thread's last error.
        Call k;
        EXPECT_MISUSE(k.fwd(nullptr), nullptr, "loomCpAttentionForward", k.outs(), "cp is NULL");
        // A valid call on the same communicator still works; lse may be NULL.
        ASSERT_LOOM_OK(k.fwd(c.comm));
        ASSERT_LOOM_OK(
            loomCpAttentionForward(&k.tq, &k.tk, &k.tv, &k.to, nullptr, &k.o, c.comm, nullptr));
      },
      partest::opts());
}

TEST_P(CpAttnArgs, BackwardMisuse) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        BWD_MISUSE(k_.tdq.dtype = loomFloat32, "dq is float32", "float64");
        BWD_MISUSE(k_.tdk.shape[1] = 3, "dk is [1, 3, 1, 4]", "[1, 4, 1, 4]");
        BWD_MISUSE(k_.tdo.shape[3] = 3, "dout is", "[1, 4, 2, 4]");
        BWD_MISUSE(k_.tdv.data = k_.dk.data(), "dv", "dk", "overlap");
        BWD_MISUSE(k_.tdq.data = k_.dout.data(), "dq", "dout", "overlaps");
        BWD_MISUSE(k_.tl.dtype = loomFloat16, "lse is float16");
        Call k;
        EXPECT_MISUSE(loomCpAttentionBackward(&k.tq, &k.tk, &k.tv, &k.to, &k.tdo, nullptr, &k.tdq,
                                              &k.tdk, &k.tdv, &k.o, c.comm, nullptr),
                      c.comm, "loomCpAttentionBackward", k.grads(), "lse is NULL");
        ASSERT_LOOM_OK(k.fwd(c.comm));
        ASSERT_LOOM_OK(k.bwd(c.comm));
      },
      partest::opts());
}

TEST_P(CpAttnArgs, UnshardMisuse) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        int P = c.nranks;
        std::vector<float> loc(4 * 3), full((size_t)(4 * P * 3));
        loomTensor tl = make(loc, loomFloat32, {4, 3}), tf = make(full, loomFloat32, {4 * P, 3});
        loomTensor bad = tf;
        bad.shape[0] = 5 * P;
        EXPECT_MISUSE(loomCpUnshard(&tl, 0, loomCpContiguous, &bad, c.comm, nullptr), c.comm,
                      "loomCpUnshard", bytes_of(full), "local is [4, 3]", "1/");
        EXPECT_MISUSE(loomCpUnshard(&tl, 2, loomCpContiguous, &tf, c.comm, nullptr), c.comm,
                      "loomCpUnshard", bytes_of(full), "seqDim is 2");
        loomTensor l3 = make(loc, loomFloat32, {3, 4});
        std::vector<float> f3((size_t)(3 * P * 4));
        loomTensor t3 = make(f3, loomFloat32, {3 * P, 4});
        EXPECT_MISUSE(loomCpUnshard(&l3, 0, loomCpZigzag, &t3, c.comm, nullptr), c.comm,
                      "loomCpUnshard", bytes_of(f3), "zigzag", "2P");
        loomTensor over = tf;
        over.data = loc.data();
        over.shape[0] = 4, over.ndim = 2;
        if (P == 1)
          EXPECT_MISUSE(loomCpUnshard(&tl, 0, loomCpContiguous, &over, c.comm, nullptr), c.comm,
                        "loomCpUnshard", bytes_of(loc), "overlap");
        std::vector<unsigned char> none;
        EXPECT_MISUSE(loomCpUnshard(&tl, 0, loomCpContiguous, &tf, nullptr, nullptr), nullptr,
                      "loomCpUnshard", none, "cp is NULL");
        ASSERT_LOOM_OK(loomCpUnshard(&tl, 0, loomCpContiguous, &tf, c.comm, nullptr));
      },
      partest::opts());
}

INSTANTIATE_TEST_SUITE_P(CpAttnArgs, CpAttnArgs,
                         ::testing::Combine(::testing::Values(1, 2, 3),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         partest::ranks_mode_name);

// The local calls report on the thread's last error.
TEST(CpShardArgs, ShardAndPositionsMisuse) {
  std::vector<double> full(12 * 2), loc(4 * 2);
  loomTensor tf = make(full, loomFloat64, {12, 2}), tl = make(loc, loomFloat64, {4, 2});
  auto out = [&] { return bytes_of(loc); };
  EXPECT_MISUSE(loomCpShard(&tf, 0, loomCpContiguous, 3, 3, &tl, nullptr), nullptr, "loomCpShard",
                out(), "cpRank is 3", "cpSize 3");
  EXPECT_MISUSE(loomCpShard(&tf, 0, loomCpContiguous, 0, 0, &tl, nullptr), nullptr, "loomCpShard",
                out(), "cpSize 0");
  EXPECT_MISUSE(loomCpShard(&tf, 1, loomCpContiguous, 0, 3, &tl, nullptr), nullptr, "loomCpShard",
                out(), "full.shape[seqDim] is 2");
  EXPECT_MISUSE(loomCpShard(&tf, 2, loomCpContiguous, 0, 3, &tl, nullptr), nullptr, "loomCpShard",
                out(), "seqDim is 2");
  EXPECT_MISUSE(loomCpShard(&tf, 0, loomCpZigzag, 0, 4, &tl, nullptr), nullptr, "loomCpShard",
                out(), "full.shape[seqDim] is 12", "2P", "8");
  EXPECT_MISUSE(loomCpShard(&tf, 0, (loomCpLayout_t)2, 0, 3, &tl, nullptr), nullptr, "loomCpShard",
                out(), "layout is 2");
  EXPECT_MISUSE(loomCpShard(&tf, 0, loomCpContiguous, 0, 2, &tl, nullptr), nullptr, "loomCpShard",
                out(), "local is [4, 2]", "full [12, 2]");
  loomTensor t32 = tl;
  t32.dtype = loomFloat32;
  EXPECT_MISUSE(loomCpShard(&tf, 0, loomCpContiguous, 0, 3, &t32, nullptr), nullptr, "loomCpShard",
                out(), "float32", "float64");
  loomTensor self = tl;
  self.strides[0] = 1;
  EXPECT_MISUSE(loomCpShard(&tf, 0, loomCpContiguous, 0, 3, &self, nullptr), nullptr, "loomCpShard",
                out(), "local");
  EXPECT_MISUSE(loomCpShard(nullptr, 0, loomCpContiguous, 0, 3, &tl, nullptr), nullptr,
                "loomCpShard", out(), "full");
  ASSERT_LOOM_OK(loomCpShard(&tf, 0, loomCpContiguous, 0, 3, &tl, nullptr));

  std::vector<int64_t> pos(4, -1);
  std::vector<unsigned char> none;
  EXPECT_MISUSE(loomCpPositions(12, loomCpZigzag, 0, 4, pos.data()), nullptr, "loomCpPositions",
                bytes_of(pos), "seqLen is 12", "2P");
  EXPECT_MISUSE(loomCpPositions(13, loomCpContiguous, 0, 3, pos.data()), nullptr, "loomCpPositions",
                bytes_of(pos), "seqLen is 13");
  EXPECT_MISUSE(loomCpPositions(12, loomCpContiguous, -1, 3, pos.data()), nullptr,
                "loomCpPositions", bytes_of(pos), "cpRank is -1");
  EXPECT_MISUSE(loomCpPositions(12, loomCpContiguous, 0, 3, nullptr), nullptr, "loomCpPositions",
                none, "positions is NULL");
  ASSERT_LOOM_OK(loomCpPositions(12, loomCpContiguous, 2, 3, pos.data()));
  EXPECT_EQ(pos, (std::vector<int64_t>{8, 9, 10, 11}));
}

}  // namespace
