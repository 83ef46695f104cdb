// For tests/parallel/torch_check.sh: a top-k MoE layer with small expert MLPs, forward and
// backward through libloom_parallel's dispatch and combine, written out for torch_moe.py to
// recompute with PyTorch's autograd. With LOOM_TORCH_DIR set; skipped otherwise.
//
// The layer: out[t] = sum over slots k with idx[t][k] >= 0 of w[t][k] * f_e(x[t]), e = idx[t][k],
// f_e(v) = W2[e] tanh(W1[e] v). One rank (EP size 1): the bitwise independence of P that
// test_moe.cc checks carries the result over to any EP size.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "par_test.h"

namespace {

using harness::Ctx;
using harness::Mode;
using partest::make;
using Vec = std::vector<double>;

constexpr int64_t kT = 9, kK = 2, kE = 4, kH = 4, kF = 6;

struct Layer {
  Vec x, w, w1, w2, g;  // x [T,H], w [T,K], w1 [E,F,H], w2 [E,H,F], g [T,H]
  std::vector<int64_t> idx;
  Layer() {
    x = partest::random_f64(kT * kH, 11);
    w = partest::random_f64(kT * kK, 12);
    w1 = partest::random_f64(kE * kF * kH, 13);
    w2 = partest::random_f64(kE * kH * kF, 14);
    g = partest::random_f64(kT * kH, 15);
    for (int64_t t = 0; t < kT; t++) {
      idx.push_back(t % 5 == 3 ? -1 : (t * 3) % kE);
      idx.push_back(t % 4 == 1 ? -1 : (t * 3 + 1 + t % 2) % kE);
    }
  }
};

// One expert over n rows: h = tanh(x W1^T) [n,F], y = h W2^T [n,H].
void expert_forward(const Layer& L, int e, const double* x, int64_t n, double* h, double* y) {
  for (int64_t i = 0; i < n; i++) {
    for (int64_t f = 0; f < kF; f++) {
      double s = 0;
      for (int64_t d = 0; d < kH; d++) s += L.w1[(e * kF + f) * kH + d] * x[i * kH + d];
      h[i * kF + f] = std::tanh(s);
    }
    for (int64_t d = 0; d < kH; d++) {
      double s = 0;
      for (int64_t f = 0; f < kF; f++) s += L.w2[(e * kH + d) * kF + f] * h[i * kF + f];
      y[i * kH + d] = s;
    }
  }
}

// Its backward: dx rows, and the weight gradients added into dw1, dw2.
void expert_backward(const Layer& L, int e, const double* x, const double* h, const double* dy,
                     int64_t n, double* dx, Vec& dw1, Vec& dw2) {
  for (int64_t i = 0; i < n; i++) {
    double dpre[kF];
    for (int64_t f = 0; f < kF; f++) {
      double s = 0;
      for (int64_t d = 0; d < kH; d++) {
        s += dy[i * kH + d] * L.w2[(e * kH + d) * kF + f];
        dw2[(e * kH + d) * kF + f] += dy[i * kH + d] * h[i * kF + f];
      }
      dpre[f] = s * (1 - h[i * kF + f] * h[i * kF + f]);
    }
    for (int64_t d = 0; d < kH; d++) {
      double s = 0;
      for (int64_t f = 0; f < kF; f++) {
        s += dpre[f] * L.w1[(e * kF + f) * kH + d];
        dw1[(e * kF + f) * kH + d] += dpre[f] * x[i * kH + d];
      }
      dx[i * kH + d] = s;
    }
  }
}

struct Result {
  Vec out, dx, dw, dw1, dw2;
};

void layer_run(Ctx& c, const Layer& L, Result& res) {
  loomTensor ti = make(const_cast<std::vector<int64_t>&>(L.idx), loomInt64, {kT, kK});
  Vec w = L.w, x = L.x, g = L.g;
  loomTensor tw = make(w, loomFloat64, {kT, kK}), tx = make(x, loomFloat64, {kT, kH});
  loomMoeOpts o = LOOM_MOE_OPTS_INIT;
  o.numExperts = (int)kE;
  o.expertAlignment = 4;
  loomMoeHandle_t h = nullptr;
  ASSERT_LOOM_OK(loomMoeLayoutCreate(&ti, &tw, &h, &o, c.comm, nullptr));
  loomMoeInfo in;
  ASSERT_LOOM_OK(loomMoeGetInfo(h, &in));
  int64_t R = in.numRecvRows;
  Vec rx(R * kH), hid(R * kF, 0.0), y(R * kH, 0.0), dy(R * kH), drx(R * kH, 0.0);
  loomTensor trx = make(rx, loomFloat64, {R, kH}), ty = make(y, loomFloat64, {R, kH});
  ASSERT_LOOM_OK(loomMoeDispatch(h, &tx, nullptr, &trx, nullptr, nullptr));
  for (int j = 0; j < in.numLocalExperts; j++) {
    int64_t at = in.expertOffsets[j], n = in.expertCounts[j];
    expert_forward(L, c.rank * in.numLocalExperts + j, &rx[at * kH], n, &hid[at * kF], &y[at * kH]);
  }
  res.out.assign(kT * kH, 0.0);
  res.dx.assign(kT * kH, 0.0);
  res.dw.assign(kT * kK, 0.0);
  res.dw1.assign(kE * kF * kH, 0.0);
  res.dw2.assign(kE * kH * kF, 0.0);
  loomTensor to = make(res.out, loomFloat64, {kT, kH}), tg = make(g, loomFloat64, {kT, kH});
  loomTensor tdy = make(dy, loomFloat64, {R, kH}), tdw = make(res.dw, loomFloat64, {kT, kK});
  ASSERT_LOOM_OK(loomMoeCombine(h, &ty, &tw, &to, nullptr));
  ASSERT_LOOM_OK(loomMoeCombineBackward(h, &tg, &ty, &tw, &tdy, &tdw, nullptr));
  for (int j = 0; j < in.numLocalExperts; j++) {
    int64_t at = in.expertOffsets[j], n = in.expertCounts[j];
    expert_backward(L, c.rank * in.numLocalExperts + j, &rx[at * kH], &hid[at * kF], &dy[at * kH],
                    n, &drx[at * kH], res.dw1, res.dw2);
  }
  loomTensor tdrx = make(drx, loomFloat64, {R, kH}), tdx = make(res.dx, loomFloat64, {kT, kH});
  ASSERT_LOOM_OK(loomMoeDispatchBackward(h, &tdrx, nullptr, &tdx, nullptr, nullptr));
  ASSERT_LOOM_OK(loomMoeHandleDestroy(h));
}

TEST(TorchDumpMoe, TopKExpertMlps) {
  std::string d = partest::torch_dir();
  if (d.empty()) GTEST_SKIP() << TORCH_DIR_UNSET;
  harness::run(
      1, Mode::Thread,
      [d](Ctx& c) {
        Layer L;
        Result res;
        layer_run(c, L, res);
        if (::testing::Test::HasFatalFailure()) return;
        auto put = [&](const char* name, const Vec& v) { partest::torch_put(d, name, v); };
        put("moe_shape", Vec{(double)kT, (double)kK, (double)kE, (double)kH, (double)kF});
        put("moe_idx", Vec(L.idx.begin(), L.idx.end()));
        put("moe_x", L.x), put("moe_w", L.w), put("moe_w1", L.w1), put("moe_w2", L.w2);
        put("moe_g", L.g), put("moe_out", res.out), put("moe_dx", res.dx);
        put("moe_dw", res.dw), put("moe_dw1", res.dw1), put("moe_dw2", res.dw2);
      },
      partest::opts());
}

}  // namespace
