// Section 8 of PARALLEL.md for section 5: every MoE misuse returns loomInvalidArgument before
// any communication, names the call, the argument and the values, leaves the outputs' bytes
// alone, and a following valid call on the same communicator works.
#include <cmath>
#include <cstdint>
#include <vector>

#include "par_test.h"

namespace {

using harness::Ctx;
using harness::Mode;
using partest::bytes_of;
using partest::make;
using partest::RanksMode;

class MoeArgs : public ::testing::TestWithParam<RanksMode> {};

constexpr int64_t kT = 4, kK = 2, kH = 3;

// Rank r's valid routing over E = 2P experts: token t to experts (t + r) % E and the next.
std::vector<int64_t> routing(const Ctx& c) {
  int E = 2 * c.nranks;
  std::vector<int64_t> idx;
  for (int64_t t = 0; t < kT; t++) {
    idx.push_back((t + c.rank) % E);
    idx.push_back((t + c.rank + 1) % E);
  }
  return idx;
}

// The communicator, the handle pointer and the options.
void layout_opts_misuse(Ctx& c) {
  const char* fn = "loomMoeLayoutCreate";
  std::vector<int64_t> idx = routing(c);
  std::vector<float> w(kT * kK, 0.5f);
  loomTensor ti = make(idx, loomInt64, {kT, kK}), tw = make(w, loomFloat32, {kT, kK});
  loomMoeOpts o = LOOM_MOE_OPTS_INIT;
  o.numExperts = 2 * c.nranks;
  std::vector<loomMoeHandle_t> out(1, (loomMoeHandle_t)(uintptr_t)0x1234);
  auto ob = [&] { return bytes_of(out); };
  loomComm_t ep = c.comm;
  EXPECT_MISUSE(loomMoeLayoutCreate(&ti, &tw, &out[0], &o, nullptr, nullptr), nullptr, fn, ob(),
                "ep", "NULL");
  EXPECT_MISUSE(loomMoeLayoutCreate(&ti, &tw, nullptr, &o, ep, nullptr), ep, fn, ob(), "handle");
  EXPECT_MISUSE(loomMoeLayoutCreate(&ti, &tw, &out[0], nullptr, ep, nullptr), ep, fn, ob(),
                "numExperts", "0");
  loomMoeOpts b = o;
  b.numExperts = -2;
  EXPECT_MISUSE(loomMoeLayoutCreate(&ti, &tw, &out[0], &b, ep, nullptr), ep, fn, ob(), "numExperts",
                "-2");
  if (c.nranks > 1) {
    b.numExperts = 2 * c.nranks + 1;
    std::string e = std::to_string(b.numExperts), p = std::to_string(c.nranks);
    EXPECT_MISUSE(loomMoeLayoutCreate(&ti, &tw, &out[0], &b, ep, nullptr), ep, fn, ob(),
                  "numExperts", "multiple", e.c_str(), p.c_str());
  }
  b = o;
  b.expertAlignment = 0;
  EXPECT_MISUSE(loomMoeLayoutCreate(&ti, &tw, &out[0], &b, ep, nullptr), ep, fn, ob(),
                "expertAlignment", "0");
  b = o;
  b.capacityFactor = -0.5;
  EXPECT_MISUSE(loomMoeLayoutCreate(&ti, &tw, &out[0], &b, ep, nullptr), ep, fn, ob(),
                "capacityFactor", "-0.5");
  b.capacityFactor = NAN;
  EXPECT_MISUSE(loomMoeLayoutCreate(&ti, &tw, &out[0], &b, ep, nullptr), ep, fn, ob(),
                "capacityFactor", "nan");
  b = o;
  b.dropPolicy = (loomMoeDropPolicy_t)7;
  EXPECT_MISUSE(loomMoeLayoutCreate(&ti, &tw, &out[0], &b, ep, nullptr), ep, fn, ob(), "dropPolicy",
                "7");
  b = o;
  b.capacityFactor = 1.0;
  b.dropPolicy = loomMoeDropByWeight;
  EXPECT_MISUSE(loomMoeLayoutCreate(&ti, nullptr, &out[0], &b, ep, nullptr), ep, fn, ob(),
                "topkWeights", "NULL", "ByWeight");
}

// The routing tensors: topkIdx's shape, dtype and entries, topkWeights' dtype and shape.
void layout_routing_misuse(Ctx& c) {
  const char* fn = "loomMoeLayoutCreate";
  std::vector<int64_t> idx = routing(c);
  std::vector<float> w(kT * kK, 0.5f);
  std::vector<int32_t> wi(kT * kK, 1);
  loomTensor ti = make(idx, loomInt64, {kT, kK}), tw = make(w, loomFloat32, {kT, kK});
  loomMoeOpts o = LOOM_MOE_OPTS_INIT;
  o.numExperts = 2 * c.nranks;
  std::vector<loomMoeHandle_t> out(1, (loomMoeHandle_t)(uintptr_t)0x1234);
  auto ob = [&] { return bytes_of(out); };
  loomComm_t ep = c.comm;
  EXPECT_MISUSE(loomMoeLayoutCreate(nullptr, &tw, &out[0], &o, ep, nullptr), ep, fn, ob(),
                "topkIdx", "NULL");
  loomTensor t1 = make(idx, loomInt64, {kT * kK});
  EXPECT_MISUSE(loomMoeLayoutCreate(&t1, &tw, &out[0], &o, ep, nullptr), ep, fn, ob(),
                "topkIdx.ndim", "1");
  loomTensor tf = ti;
  tf.dtype = loomFloat64;
  EXPECT_MISUSE(loomMoeLayoutCreate(&tf, &tw, &out[0], &o, ep, nullptr), ep, fn, ob(),
                "topkIdx.dtype", "float64");
  loomTensor twi = make(wi, loomInt32, {kT, kK});
  EXPECT_MISUSE(loomMoeLayoutCreate(&ti, &twi, &out[0], &o, ep, nullptr), ep, fn, ob(),
                "topkWeights.dtype", "int32");
  loomTensor tws = make(w, loomFloat32, {kK, kT});
  EXPECT_MISUSE(loomMoeLayoutCreate(&ti, &tws, &out[0], &o, ep, nullptr), ep, fn, ob(),
                "topkWeights", "[2, 4]", "[4, 2]");
  std::vector<int64_t> bad = idx;
  bad[3] = 2 * c.nranks;  // token 1, slot 1: E itself
  loomTensor tb = make(bad, loomInt64, {kT, kK});
  std::string e = std::to_string(2 * c.nranks);
  EXPECT_MISUSE(loomMoeLayoutCreate(&tb, &tw, &out[0], &o, ep, nullptr), ep, fn, ob(),
                "topkIdx[1][1]", e.c_str(), "[-1,");
  bad = idx;
  bad[4] = -2;
  EXPECT_MISUSE(loomMoeLayoutCreate(&tb, &tw, &out[0], &o, ep, nullptr), ep, fn, ob(),
                "topkIdx[2][0]", "-2");
  std::vector<int32_t> rep = {0, 1, 1, 1, 0, -1, -1, -1};
  loomTensor tr = make(rep, loomInt32, {kT, kK});
  EXPECT_MISUSE(loomMoeLayoutCreate(&tr, &tw, &out[0], &o, ep, nullptr), ep, fn, ob(), "topkIdx[1]",
                "expert 1 twice");
}

struct Valid {
  loomMoeHandle_t h = nullptr;
  loomMoeInfo info{};
  ~Valid() {
    if (h) loomMoeHandleDestroy(h);
  }
};

void dispatch_misuse(Ctx& c, const Valid& v) {
  const char* fn = "loomMoeDispatch";
  loomComm_t ep = c.comm;
  int64_t R = v.info.numRecvRows;
  std::vector<float> x(kT * kH, 1.0f), rx(R * kH + kH, 2.0f), w(kT * kK, 0.5f), rw(R, 3.0f);
  std::vector<double> rw64(R, 3.0);
  loomTensor tx = make(x, loomFloat32, {kT, kH}), trx = make(rx, loomFloat32, {R, kH});
  loomTensor tw = make(w, loomFloat32, {kT, kK}), trw = make(rw, loomFloat32, {R});
  auto ob = [&] { return bytes_of(rx); };
  EXPECT_MISUSE(loomMoeDispatch(nullptr, &tx, nullptr, &trx, nullptr, nullptr), nullptr, fn, ob(),
                "handle", "NULL");
  EXPECT_MISUSE(loomMoeDispatch(v.h, nullptr, nullptr, &trx, nullptr, nullptr), ep, fn, ob(), "x",
                "NULL");
  loomTensor short_x = make(x, loomFloat32, {kT - 1, kH});
  EXPECT_MISUSE(loomMoeDispatch(v.h, &short_x, nullptr, &trx, nullptr, nullptr), ep, fn, ob(),
                "x.shape[0]", "3", "T_r = 4");
  loomTensor long_rx = make(rx, loomFloat32, {R + 1, kH});
  std::string rs = "R = " + std::to_string(R);
  EXPECT_MISUSE(loomMoeDispatch(v.h, &tx, nullptr, &long_rx, nullptr, nullptr), ep, fn, ob(),
                "recvX.shape[0]", rs.c_str());
  loomTensor rx_i = trx;
  rx_i.dtype = loomInt32;
  EXPECT_MISUSE(loomMoeDispatch(v.h, &tx, nullptr, &rx_i, nullptr, nullptr), ep, fn, ob(),
                "recvX.dtype", "int32", "float32");
  loomTensor rx_t = make(rx, loomFloat32, {R, kH - 1});
  EXPECT_MISUSE(loomMoeDispatch(v.h, &tx, nullptr, &rx_t, nullptr, nullptr), ep, fn, ob(), "recvX",
                "past dim 0");
  EXPECT_MISUSE(loomMoeDispatch(v.h, &tx, &tw, &trx, nullptr, nullptr), ep, fn, ob(), "topkWeights",
                "recvWeights", "both or neither");
  loomTensor trw64 = make(rw64, loomFloat64, {R});
  EXPECT_MISUSE(loomMoeDispatch(v.h, &tx, &tw, &trx, &trw64, nullptr), ep, fn, ob(),
                "recvWeights.dtype", "float64", "float32");
  loomTensor trw2 = make(rw, loomFloat32, {R, 1});
  EXPECT_MISUSE(loomMoeDispatch(v.h, &tx, &tw, &trx, &trw2, nullptr), ep, fn, ob(), "recvWeights",
                "[R]");
  loomTensor self = trx;  // rows on top of each other
  self.strides[0] = 0;
  EXPECT_MISUSE(loomMoeDispatch(v.h, &tx, nullptr, &self, nullptr, nullptr), ep, fn, ob(), "recvX",
                "overlaps itself");
  loomTensor alias = make(rx, loomFloat32, {kT, kH});  // x inside recvX's bytes
  EXPECT_MISUSE(loomMoeDispatch(v.h, &alias, nullptr, &trx, nullptr, nullptr), ep, fn, ob(),
                "recvX overlaps x");
  // The next valid call works.
  ASSERT_LOOM_OK(loomMoeDispatch(v.h, &tx, &tw, &trx, &trw, nullptr));
}

void combine_misuse(Ctx& c, const Valid& v) {
  loomComm_t ep = c.comm;
  int64_t R = v.info.numRecvRows;
  std::vector<float> y(R * kH, 1.0f), out(kT * kH, 2.0f), w(kT * kK, 0.5f), g(R, 1.0f);
  std::vector<int32_t> yi(R * kH, 1);
  std::vector<double> dtw(kT * kK, 4.0);
  loomTensor ty = make(y, loomFloat32, {R, kH}), to = make(out, loomFloat32, {kT, kH});
  loomTensor tw = make(w, loomFloat32, {kT, kK}), tg = make(g, loomFloat32, {R});
  loomTensor tdtw = make(dtw, loomFloat64, {kT, kK});
  auto ob = [&] { return bytes_of(out); };
  const char* fn = "loomMoeCombine";
  loomTensor tyi = make(yi, loomInt32, {R, kH});
  EXPECT_MISUSE(loomMoeCombine(v.h, &tyi, nullptr, &to, nullptr), ep, fn, ob(), "y.dtype", "int32");
  loomTensor ty_s = make(y, loomFloat32, {R - 1, kH});
  EXPECT_MISUSE(loomMoeCombine(v.h, &ty_s, nullptr, &to, nullptr), ep, fn, ob(), "y.shape[0]",
                "R =");
  loomTensor to_s = make(out, loomFloat32, {kT - 2, kH});
  EXPECT_MISUSE(loomMoeCombine(v.h, &ty, nullptr, &to_s, nullptr), ep, fn, ob(), "out.shape[0]",
                "T_r = 4");
  loomTensor tw_s = make(w, loomFloat32, {kT, kK - 1});
  EXPECT_MISUSE(loomMoeCombine(v.h, &ty, &tw_s, &to, nullptr), ep, fn, ob(), "topkWeights",
                "[T_r, K] = [4, 2]");
  loomTensor to_y = make(y, loomFloat32, {kT, kH});
  std::vector<unsigned char> none;
  EXPECT_MISUSE(loomMoeCombine(v.h, &ty, nullptr, &to_y, nullptr), ep, fn, none, "out overlaps y");
  fn = "loomMoeDispatchBackward";
  EXPECT_MISUSE(loomMoeDispatchBackward(v.h, &ty, &tg, &to, nullptr, nullptr), ep, fn, ob(),
                "dRecvWeights", "dTopkWeights", "both or neither");
  EXPECT_MISUSE(loomMoeDispatchBackward(v.h, &ty, &tg, &to, &tdtw, nullptr), ep, fn, ob(),
                "dTopkWeights.dtype", "float64", "float32");
  EXPECT_MISUSE(loomMoeDispatchBackward(v.h, &ty, nullptr, &to_s, nullptr, nullptr), ep, fn, ob(),
                "dx.shape[0]");
  fn = "loomMoeCombineBackward";
  std::vector<float> dy(R * kH, 6.0f);
  loomTensor tdy = make(dy, loomFloat32, {R, kH});
  auto db = [&] { return bytes_of(dy); };
  EXPECT_MISUSE(loomMoeCombineBackward(v.h, &to, &ty, &tw, &tdy, nullptr, nullptr), ep, fn, db(),
                "y is given", "dTopkWeights is NULL");
  EXPECT_MISUSE(loomMoeCombineBackward(v.h, &to, &ty, &tw, &tdy, &tdtw, nullptr), ep, fn, db(),
                "dTopkWeights.dtype", "topkWeights.dtype");
  loomTensor tdy_s = make(dy, loomFloat32, {R - 1, kH});
  EXPECT_MISUSE(loomMoeCombineBackward(v.h, &to, nullptr, nullptr, &tdy_s, nullptr, nullptr), ep,
                fn, db(), "dY.shape[0]");
  EXPECT_MISUSE(loomMoeCombineBackward(v.h, &ty, nullptr, nullptr, &tdy, nullptr, nullptr), ep, fn,
                db(), "dOut.shape[0]");
  // The next valid calls work.
  ASSERT_LOOM_OK(loomMoeCombine(v.h, &ty, &tw, &to, nullptr));
  ASSERT_LOOM_OK(loomMoeCombineBackward(v.h, &to, nullptr, &tw, &tdy, nullptr, nullptr));
}

TEST_P(MoeArgs, EveryMisuseIsReportedBeforeCommunication) {
  auto [nranks, mode] = GetParam();
  harness::run(
      nranks, mode,
      [](Ctx& c) {
        layout_opts_misuse(c);
        layout_routing_misuse(c);
        std::vector<int64_t> idx = routing(c);
        loomTensor ti = make(idx, loomInt64, {kT, kK});
        loomMoeOpts o = LOOM_MOE_OPTS_INIT;
        o.numExperts = 2 * c.nranks;
        o.expertAlignment = 2;
        Valid v;
        ASSERT_LOOM_OK(loomMoeLayoutCreate(&ti, nullptr, &v.h, &o, c.comm, nullptr));
        std::vector<unsigned char> none;
        EXPECT_MISUSE(loomMoeGetInfo(nullptr, &v.info), nullptr, "loomMoeGetInfo", none, "handle");
        EXPECT_MISUSE(loomMoeGetInfo(v.h, nullptr), c.comm, "loomMoeGetInfo", none, "info");
        EXPECT_MISUSE(loomMoeHandleDestroy(nullptr), nullptr, "loomMoeHandleDestroy", none,
                      "handle");
        ASSERT_LOOM_OK(loomMoeGetInfo(v.h, &v.info));
        ASSERT_GT(v.info.numRecvRows, 1);
        dispatch_misuse(c, v);
        combine_misuse(c, v);
      },
      partest::opts());
}

INSTANTIATE_TEST_SUITE_P(, MoeArgs,
                         ::testing::Values(RanksMode{1, Mode::Proc}, RanksMode{3, Mode::Proc},
                                           RanksMode{3, Mode::Thread}),
                         partest::ranks_mode_name);

}  // namespace
