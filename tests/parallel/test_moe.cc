// Section 5 of PARALLEL.md: MoE dispatch and combine over EP 1, 2, 3, 4 and 8 ranks against a
// host reference written from the contract alone. Every rank regenerates every rank's routing
// and tokens from their seeds, so it can build the whole reference without talking: capacity
// per sender with both drop policies, the binding receive layout, and each move's result.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "par_test.h"

namespace {

using harness::Ctx;
using harness::Mode;
using partest::make;
using partest::RanksMode;

// ---- Cases and their routing -------------------------------------------------------------

enum Skew { kRandom, kOneExpert, kNoneRows, kTies };

struct Case {
  const char* name;
  int El, K;
  int64_t T;      // tokens per rank, varied by rank
  int zero_rank;  // a rank with T_r = 0, or -1
  Skew skew;
  int64_t align;
  double cf;
  int64_t min_cap;
  loomMoeDropPolicy_t policy;
  loomDataType_t idx_dt, w_dt;
};

const Case kCases[] = {
    {"dropless", 2, 3, 17, -1, kRandom, 1, 0.0, 0, loomMoeDropByPosition, loomInt64, loomFloat64},
    {"align8-int32", 3, 2, 13, -1, kRandom, 8, 0.0, 0, loomMoeDropByPosition, loomInt32,
     loomFloat32},
    {"align128-zero-rank", 1, 2, 9, 1, kRandom, 128, 0.0, 0, loomMoeDropByPosition, loomInt64,
     loomFloat32},
    {"one-expert", 2, 2, 11, -1, kOneExpert, 1, 0.0, 0, loomMoeDropByPosition, loomInt32,
     loomFloat64},
    {"none-rows", 2, 3, 12, -1, kNoneRows, 4, 0.0, 0, loomMoeDropByPosition, loomInt64,
     loomFloat64},
    {"cap-position", 2, 3, 19, 0, kRandom, 1, 0.5, 0, loomMoeDropByPosition, loomInt64,
     loomFloat64},
    {"cap-weight-ties", 2, 3, 19, -1, kTies, 8, 0.7, 1, loomMoeDropByWeight, loomInt32,
     loomFloat32},
    {"cap-one-expert-weight", 1, 2, 15, -1, kOneExpert, 1, 1.0, 2, loomMoeDropByWeight, loomInt64,
     loomFloat64},
    {"cap-minimal", 2, 2, 10, -1, kRandom, 1, 1e-9, 0, loomMoeDropByWeight, loomInt64, loomFloat64},
};

int64_t tokens_of(const Case& c, int rank) {
  return rank == c.zero_rank ? 0 : c.T + rank % 3;
}

struct Routing {
  int64_t T = 0;
  int K = 0;
  std::vector<int64_t> idx;  // [T*K]
  std::vector<double> w;     // [T*K], values exact in the weight dtype
};

Routing routing_of(const Case& c, int E, int rank, uint64_t seed) {
  Routing r;
  r.T = tokens_of(c, rank);
  r.K = c.K;
  std::mt19937_64 g(seed * 7919 + (uint64_t)rank);
  std::vector<int> perm(E);
  for (int e = 0; e < E; e++) perm[e] = e;
  for (int64_t t = 0; t < r.T; t++) {
    for (int i = 0; i < E; i++) std::swap(perm[i], perm[i + (int)(g() % (uint64_t)(E - i))]);
    for (int k = 0; k < r.K; k++) {
      int64_t e = k < E ? perm[k] : -1;
      if (c.skew == kOneExpert) e = k == 0 ? 0 : (k < E && g() % 2 ? E - k : -1);
      if (c.skew == kNoneRows && t % 3 == 1) e = -1;
      if (g() % 8 == 0 && !(c.skew == kOneExpert && k == 0)) e = -1;
      r.idx.push_back(e);
      double w = (double)(g() % 1024 + 1) / 1024.0;  // exact in float32
      if (c.skew == kTies) w = (double)(g() % 3 + 1) / 4.0;
      r.w.push_back(w);
    }
  }
  return r;
}

// ---- The reference -----------------------------------------------------------------------

// Capacity of one sender: idx with the dropped slots set to -1.
struct Kept {
  std::vector<int64_t> idx;
  int64_t dropped = 0, capacity = -1;
};

Kept kept_of(const Case& c, int E, const Routing& r) {
  Kept k{r.idx, 0, -1};
  if (c.cf <= 0) return k;
  double cap = std::ceil(c.cf * (double)r.T * (double)r.K / (double)E);
  k.capacity = std::max<int64_t>(c.min_cap, (int64_t)cap);
  for (int e = 0; e < E; e++) {
    std::vector<std::pair<double, int64_t>> p;  // (-weight or 0, token*K + slot)
    for (int64_t i = 0; i < r.T * r.K; i++)
      if (r.idx[i] == e) p.push_back({c.policy == loomMoeDropByWeight ? -r.w[i] : 0.0, i});
    std::stable_sort(p.begin(), p.end());
    for (size_t i = (size_t)k.capacity; i < p.size(); i++) {
      k.idx[p[i].second] = -1;
      k.dropped++;
    }
  }
  return k;
}

struct RowRef {
  int src;  // -1: padding
  int64_t t;
  int k;
};

struct World {
  int P, E, El;
  std::vector<Routing> r;
  std::vector<Kept> kept;
  std::vector<RowRef> rows;  // this rank's receive layout
  std::vector<int64_t> counts, offsets;
};

World world_of(const Case& c, int P, int me, uint64_t seed) {
  World w;
  w.P = P;
  w.El = c.El;
  w.E = c.El * P;
  for (int q = 0; q < P; q++) {
    w.r.push_back(routing_of(c, w.E, q, seed));
    w.kept.push_back(kept_of(c, w.E, w.r[q]));
  }
  w.offsets.push_back(0);
  for (int j = 0; j < c.El; j++) {
    int64_t e = me * c.El + j, n = 0;
    for (int q = 0; q < P; q++)
      for (int64_t t = 0; t < w.r[q].T; t++)
        for (int k = 0; k < c.K; k++)
          if (w.kept[q].idx[t * c.K + k] == e) {
            w.rows.push_back({q, t, k});
            n++;
          }
    w.counts.push_back(n);
    for (; n % c.align != 0; n++) w.rows.push_back({-1, 0, 0});
    w.offsets.push_back((int64_t)w.rows.size());
  }
  return w;
}

// Token t of rank q, element h: exact in float64, distinct per (q, t, h).
double x_of(int q, int64_t t, int64_t h) {
  return q * 1000.0 + (double)t + (double)h / 16.0;
}
// A gradient value: exact, small.
double g_of(uint64_t salt, int q, int64_t t, int64_t h) {
  return (double)((int64_t)((salt * 31 + (uint64_t)q * 17 + (uint64_t)t * 7 + (uint64_t)h * 3) %
                            13) -
                  6) /
         8.0;
}

template <class T>
loomTensor weights_tensor(std::vector<T>& v, loomDataType_t dt, const Routing& r) {
  return make(v, dt, {r.T, r.K});
}

// ---- The checks --------------------------------------------------------------------------

constexpr int64_t kH = 5;

struct Moe {
  loomMoeHandle_t h = nullptr;
  loomMoeInfo info{};
  ~Moe() {
    if (h) loomMoeHandleDestroy(h);
  }
};

void check_info(const Case& c, const World& w, int me, const loomMoeInfo& in) {
  ASSERT_EQ(in.numLocalExperts, c.El);
  ASSERT_EQ(in.numRecvRows, (int64_t)w.rows.size());
  for (int j = 0; j < c.El; j++) {
    EXPECT_EQ(in.expertCounts[j], w.counts[j]) << "expert " << j;
    EXPECT_EQ(in.expertOffsets[j], w.offsets[j]) << "expert " << j;
  }
  EXPECT_EQ(in.expertOffsets[c.El], in.numRecvRows);
  for (int q = 0; q < w.P; q++) {
    int64_t sent = 0, got = 0;
    for (int64_t i = 0; i < w.r[me].T * c.K; i++)
      sent += w.kept[me].idx[i] / c.El == q && w.kept[me].idx[i] >= 0;
    for (const RowRef& x : w.rows) got += x.src == q;
    EXPECT_EQ(in.sendRows[q], sent) << "to rank " << q;
    EXPECT_EQ(in.recvRows[q], got) << "from rank " << q;
  }
  EXPECT_EQ(in.numDropped, w.kept[me].dropped);
  EXPECT_EQ(in.capacity, w.kept[me].capacity);
}

// expertCounts summed over ranks equal the all-reduced histogram of kept pairs.
void check_histogram(Ctx& c, const Case& k, const World& w, const loomMoeInfo& in) {
  std::vector<int64_t> hist(w.E, 0), mine(w.E, 0), sum(w.E, 0);
  for (int64_t i = 0; i < w.r[c.rank].T * k.K; i++)
    if (w.kept[c.rank].idx[i] >= 0) hist[w.kept[c.rank].idx[i]]++;
  for (int j = 0; j < k.El; j++) mine[c.rank * k.El + j] = in.expertCounts[j];
  ASSERT_LOOM_OK(loomAllReduce(hist.data(), hist.data(), w.E, loomInt64, loomSum, c.comm, nullptr));
  ASSERT_LOOM_OK(loomAllReduce(mine.data(), sum.data(), w.E, loomInt64, loomSum, c.comm, nullptr));
  EXPECT_EQ(hist, sum);
}

// Dispatch of x (float64 [T, H]) and the weights; rows carry their source's values in order.
void check_dispatch(Ctx& c, const Case& k, const World& w, Moe& m, std::vector<double>& rx) {
  const Routing& r = w.r[c.rank];
  int64_t R = m.info.numRecvRows;
  std::vector<double> x((size_t)(r.T * kH));
  for (int64_t t = 0; t < r.T; t++)
    for (int64_t h = 0; h < kH; h++) x[(size_t)(t * kH + h)] = x_of(c.rank, t, h);
  rx.assign((size_t)(R * kH), -7.0);
  std::vector<double> w64(r.w), rw64((size_t)R, -7.0);
  std::vector<float> w32(r.w.begin(), r.w.end()), rw32((size_t)R, -7.0f);
  bool f32 = k.w_dt == loomFloat32;
  loomTensor tx = make(x, loomFloat64, {r.T, kH}), trx = make(rx, loomFloat64, {R, kH});
  loomTensor tw = f32 ? make(w32, loomFloat32, {r.T, k.K}) : make(w64, loomFloat64, {r.T, k.K});
  loomTensor trw = f32 ? make(rw32, loomFloat32, {R}) : make(rw64, loomFloat64, {R});
  ASSERT_LOOM_OK(loomMoeDispatch(m.h, &tx, &tw, &trx, &trw, nullptr));
  for (int64_t i = 0; i < R; i++) {
    const RowRef& ref = w.rows[(size_t)i];
    double wv = f32 ? rw32[(size_t)i] : rw64[(size_t)i];
    double want_w = ref.src < 0 ? 0.0 : w.r[ref.src].w[(size_t)(ref.t * k.K + ref.k)];
    EXPECT_EQ(wv, want_w) << "row " << i;
    for (int64_t h = 0; h < kH; h++)
      EXPECT_EQ(rx[(size_t)(i * kH + h)], ref.src < 0 ? 0.0 : x_of(ref.src, ref.t, h))
          << "row " << i << " h " << h;
  }
}

// Any dtype is a byte copy, without weights: float8 rows [T, 2, 3] and int32 rows [T, 3].
void check_dispatch_bytes(Ctx& c, const World& w, Moe& m, loomDataType_t dt,
                          std::vector<int64_t> tail) {
  const Routing& r = w.r[c.rank];
  int64_t R = m.info.numRecvRows, rb = partest::numel(tail) * (int64_t)shim::dtype_size(dt);
  std::vector<uint8_t> x((size_t)(r.T * rb)), rx((size_t)(R * rb), 0xee);
  for (size_t i = 0; i < x.size(); i++) x[i] = (uint8_t)(c.rank * 61 + (int)i);
  std::vector<int64_t> xs = {r.T}, rs = {R};
  xs.insert(xs.end(), tail.begin(), tail.end());
  rs.insert(rs.end(), tail.begin(), tail.end());
  loomTensor tx = make(x, dt, xs), trx = make(rx, dt, rs);
  ASSERT_LOOM_OK(loomMoeDispatch(m.h, &tx, nullptr, &trx, nullptr, nullptr));
  for (int64_t i = 0; i < R; i++) {
    const RowRef& ref = w.rows[(size_t)i];
    for (int64_t b = 0; b < rb; b++)
      EXPECT_EQ(rx[(size_t)(i * rb + b)],
                ref.src < 0 ? 0 : (uint8_t)(ref.src * 61 + (int)(ref.t * rb + b)))
          << shim::dtype_name(dt) << " row " << i;
  }
}

// Identity experts: Combine(recvX) against the per-token sums, weighted and not.
void check_identity_combine(Ctx& c, const Case& k, const World& w, Moe& m,
                            std::vector<double>& rx) {
  const Routing& r = w.r[c.rank];
  int64_t R = m.info.numRecvRows;
  std::vector<double> out((size_t)(r.T * kH), -3.0), out_u = out;
  std::vector<double> w64(r.w);
  std::vector<float> w32(r.w.begin(), r.w.end());
  bool f32 = k.w_dt == loomFloat32;
  loomTensor ty = make(rx, loomFloat64, {R, kH});
  loomTensor tw = f32 ? make(w32, loomFloat32, {r.T, k.K}) : make(w64, loomFloat64, {r.T, k.K});
  loomTensor to = make(out, loomFloat64, {r.T, kH}), tu = make(out_u, loomFloat64, {r.T, kH});
  ASSERT_LOOM_OK(loomMoeCombine(m.h, &ty, &tw, &to, nullptr));
  ASSERT_LOOM_OK(loomMoeCombine(m.h, &ty, nullptr, &tu, nullptr));
  for (int64_t t = 0; t < r.T; t++) {
    double wsum = 0, n = 0;
    for (int kk = 0; kk < k.K; kk++)
      if (w.kept[c.rank].idx[(size_t)(t * k.K + kk)] >= 0) {
        wsum += r.w[(size_t)(t * k.K + kk)];
        n += 1;
      }
    for (int64_t h = 0; h < kH; h++) {
      double acc = 0, x = x_of(c.rank, t, h);
      for (int kk = 0; kk < k.K; kk++)
        if (w.kept[c.rank].idx[(size_t)(t * k.K + kk)] >= 0)
          acc = acc + r.w[(size_t)(t * k.K + kk)] * x;
      size_t i = (size_t)(t * kH + h);
      EXPECT_EQ(out[i], acc) << "token " << t << " (k-ascending sum, bitwise)";
      EXPECT_LE(partest::rel_err(out[i], x * wsum), 1e-12) << "token " << t;
      EXPECT_EQ(out_u[i], x * n) << "token " << t;
    }
  }
}

// DispatchBackward(g) == Combine(g, NULL) bitwise; its weight gradient is dRecvWeights moved
// back; <Dispatch(x), g> = <x, DispatchBackward(g)> summed over ranks, weights included.
void check_dispatch_backward(Ctx& c, const Case& k, const World& w, Moe& m,
                             const std::vector<double>& rx) {
  const Routing& r = w.r[c.rank];
  int64_t R = m.info.numRecvRows;
  std::vector<double> g((size_t)(R * kH)), gw((size_t)R), dx((size_t)(r.T * kH), 9.0), cx = dx;
  for (int64_t i = 0; i < R; i++) {
    gw[(size_t)i] = g_of(5, c.rank, i, 0);
    for (int64_t h = 0; h < kH; h++) g[(size_t)(i * kH + h)] = g_of(3, c.rank, i, h);
  }
  std::vector<double> dtw((size_t)(r.T * k.K), 9.0);
  loomTensor tg = make(g, loomFloat64, {R, kH}), tgw = make(gw, loomFloat64, {R});
  loomTensor tdx = make(dx, loomFloat64, {r.T, kH}), tcx = make(cx, loomFloat64, {r.T, kH});
  loomTensor tdtw = make(dtw, loomFloat64, {r.T, k.K});
  ASSERT_LOOM_OK(loomMoeDispatchBackward(m.h, &tg, &tgw, &tdx, &tdtw, nullptr));
  ASSERT_LOOM_OK(loomMoeCombine(m.h, &tg, nullptr, &tcx, nullptr));
  EXPECT_TRUE(dx.empty() || std::memcmp(dx.data(), cx.data(), dx.size() * 8) == 0)
      << "not Combine(g, NULL)";
  double lhs = 0, rhs = 0;
  for (int64_t i = 0; i < R; i++) {
    const RowRef& ref = w.rows[(size_t)i];
    double wi = ref.src < 0 ? 0.0 : w.r[ref.src].w[(size_t)(ref.t * k.K + ref.k)];
    lhs += wi * gw[(size_t)i];
    for (int64_t h = 0; h < kH; h++) lhs += rx[(size_t)(i * kH + h)] * g[(size_t)(i * kH + h)];
  }
  for (int64_t t = 0; t < r.T; t++) {
    for (int64_t h = 0; h < kH; h++) rhs += x_of(c.rank, t, h) * dx[(size_t)(t * kH + h)];
    for (int kk = 0; kk < k.K; kk++) {
      size_t p = (size_t)(t * k.K + kk);
      if (w.kept[c.rank].idx[p] < 0) {
        EXPECT_EQ(dtw[p], 0.0) << "off pair " << p;
      }
      rhs += r.w[p] * dtw[p];
    }
  }
  lhs = partest::sum_ranks(lhs, c.comm);
  rhs = partest::sum_ranks(rhs, c.comm);
  EXPECT_LE(partest::rel_err(lhs, rhs), 1e-12) << lhs << " vs " << rhs;
}

// CombineBackward: dY rows are w * dOut[t] of their source (0 on padding), dTopkWeights the
// inner products with y, and <Combine(y), g> = <y, CombineBackward(g)> summed over ranks.
void check_combine_backward(Ctx& c, const Case& k, const World& w, Moe& m,
                            const std::vector<double>& rx) {
  const Routing& r = w.r[c.rank];
  int64_t R = m.info.numRecvRows;
  std::vector<double> y(rx), dout((size_t)(r.T * kH)), out((size_t)(r.T * kH));
  for (int64_t i = 0; i < R; i++) {  // padding rows get values: combine must ignore them
    if (w.rows[(size_t)i].src < 0)
      for (int64_t h = 0; h < kH; h++) y[(size_t)(i * kH + h)] = 100.0 + (double)h;
  }
  for (int64_t t = 0; t < r.T; t++)
    for (int64_t h = 0; h < kH; h++) dout[(size_t)(t * kH + h)] = g_of(11, c.rank, t, h);
  std::vector<double> w64(r.w), dy((size_t)(R * kH), 9.0), dy_u = dy;
  std::vector<double> dtw((size_t)(r.T * k.K), 9.0);
  loomTensor ty = make(y, loomFloat64, {R, kH}), tdo = make(dout, loomFloat64, {r.T, kH});
  loomTensor tw = make(w64, loomFloat64, {r.T, k.K}), to = make(out, loomFloat64, {r.T, kH});
  loomTensor tdy = make(dy, loomFloat64, {R, kH}), tdu = make(dy_u, loomFloat64, {R, kH});
  loomTensor tdtw = make(dtw, loomFloat64, {r.T, k.K});
  ASSERT_LOOM_OK(loomMoeCombine(m.h, &ty, &tw, &to, nullptr));
  ASSERT_LOOM_OK(loomMoeCombineBackward(m.h, &tdo, &ty, &tw, &tdy, &tdtw, nullptr));
  ASSERT_LOOM_OK(loomMoeCombineBackward(m.h, &tdo, nullptr, nullptr, &tdu, nullptr, nullptr));
  for (int64_t i = 0; i < R; i++) {
    const RowRef& ref = w.rows[(size_t)i];
    double wi = ref.src < 0 ? 0.0 : w.r[ref.src].w[(size_t)(ref.t * k.K + ref.k)];
    for (int64_t h = 0; h < kH; h++) {
      double g = ref.src < 0 ? 0.0 : g_of(11, ref.src, ref.t, h);
      EXPECT_EQ(dy[(size_t)(i * kH + h)], ref.src < 0 ? 0.0 : wi * g) << "row " << i;
      EXPECT_EQ(dy_u[(size_t)(i * kH + h)], g) << "row " << i;
    }
  }
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < out.size(); i++) lhs += out[i] * dout[i];
  for (size_t i = 0; i < y.size(); i++) rhs += y[i] * dy[i];
  for (int64_t t = 0; t < r.T; t++)
    for (int kk = 0; kk < k.K; kk++) {
      double want = 0;
      if (w.kept[c.rank].idx[(size_t)(t * k.K + kk)] >= 0) {
        for (int64_t h = 0; h < kH; h++)
          want = want + dout[(size_t)(t * kH + h)] * x_of(c.rank, t, h);
      }
      EXPECT_EQ(dtw[(size_t)(t * k.K + kk)], want) << "token " << t << " slot " << kk;
    }
  lhs = partest::sum_ranks(lhs, c.comm);
  rhs = partest::sum_ranks(rhs, c.comm);
  EXPECT_LE(partest::rel_err(lhs, rhs), 1e-12) << lhs << " vs " << rhs;
}

void check_case(Ctx& c, const Case& k, uint64_t seed) {
  SCOPED_TRACE(k.name);
  World w = world_of(k, c.nranks, c.rank, seed);
  const Routing& r = w.r[c.rank];
  std::vector<int64_t> i64(r.idx);
  std::vector<int32_t> i32(r.idx.begin(), r.idx.end());
  std::vector<double> w64(r.w);
  std::vector<float> w32(r.w.begin(), r.w.end());
  loomTensor ti =
      k.idx_dt == loomInt32 ? make(i32, loomInt32, {r.T, k.K}) : make(i64, loomInt64, {r.T, k.K});
  loomTensor tw = k.w_dt == loomFloat32 ? make(w32, loomFloat32, {r.T, k.K})
                                        : make(w64, loomFloat64, {r.T, k.K});
  loomMoeOpts o = LOOM_MOE_OPTS_INIT;
  o.numExperts = w.E;
  o.expertAlignment = k.align;
  o.capacityFactor = k.cf;
  o.minCapacity = k.min_cap;
  o.dropPolicy = k.policy;
  Moe m;
  ASSERT_LOOM_OK(loomMoeLayoutCreate(&ti, &tw, &m.h, &o, c.comm, nullptr));
  ASSERT_LOOM_OK(loomMoeGetInfo(m.h, &m.info));
  ASSERT_NO_FATAL_FAILURE(check_info(k, w, c.rank, m.info));
  ASSERT_NO_FATAL_FAILURE(check_histogram(c, k, w, m.info));
  std::vector<double> rx;
  ASSERT_NO_FATAL_FAILURE(check_dispatch(c, k, w, m, rx));
  ASSERT_NO_FATAL_FAILURE(check_dispatch_bytes(c, w, m, loomFloat8e4m3, {2, 3}));
  ASSERT_NO_FATAL_FAILURE(check_dispatch_bytes(c, w, m, loomInt32, {3}));
  ASSERT_NO_FATAL_FAILURE(check_identity_combine(c, k, w, m, rx));
  ASSERT_NO_FATAL_FAILURE(check_dispatch_backward(c, k, w, m, rx));
  ASSERT_NO_FATAL_FAILURE(check_combine_backward(c, k, w, m, rx));
}

class MoeRanks : public ::testing::TestWithParam<RanksMode> {};

TEST_P(MoeRanks, EveryCaseMatchesTheReference) {
  auto [nranks, mode] = GetParam();
  harness::run(
      nranks, mode,
      [](Ctx& c) {
        uint64_t seed = 1;
        for (const Case& k : kCases) {
          check_case(c, k, seed++);
          if (::testing::Test::HasFatalFailure()) return;
        }
      },
      partest::opts());
}

// ---- A hand-computed layout --------------------------------------------------------------

// E 4 over 2 ranks (rank 0 holds experts 0 and 1, rank 1 holds 2 and 3), K 2, alignment 4:
//   rank 0 routes t0 -> {1, 2}, t1 -> {2, -1}, t2 -> {3, 1};  rank 1: t0 -> {0, 3}, t1 -> {1, 0}.
//   Rank 0 receives expert 0: (r1,t0) (r1,t1), pad, pad; expert 1: (r0,t0) (r0,t2) (r1,t1), pad.
//   Rank 1 receives expert 2: (r0,t0) (r0,t1), pad, pad; expert 3: (r0,t2) (r1,t0), pad, pad.
TEST(MoeLayout, HandComputedTwoRanks) {
  harness::run(
      2, Mode::Thread,
      [](Ctx& c) {
        std::vector<int64_t> idx = c.rank == 0 ? std::vector<int64_t>{1, 2, 2, -1, 3, 1}
                                               : std::vector<int64_t>{0, 3, 1, 0};
        int64_t T = (int64_t)idx.size() / 2;
        loomTensor ti = make(idx, loomInt64, {T, 2});
        loomMoeOpts o = LOOM_MOE_OPTS_INIT;
        o.numExperts = 4;
        o.expertAlignment = 4;
        Moe m;
        ASSERT_LOOM_OK(loomMoeLayoutCreate(&ti, nullptr, &m.h, &o, c.comm, nullptr));
        ASSERT_LOOM_OK(loomMoeGetInfo(m.h, &m.info));
        const loomMoeInfo& in = m.info;
        const int64_t counts[2][2] = {{2, 3}, {2, 2}}, send[2][2] = {{2, 3}, {3, 1}},
                      recv[2][2] = {{2, 3}, {3, 1}};
        EXPECT_EQ(in.numLocalExperts, 2);
        EXPECT_EQ(in.numRecvRows, 8);
        EXPECT_EQ(in.expertOffsets[0], 0);
        EXPECT_EQ(in.expertOffsets[1], 4);
        EXPECT_EQ(in.expertOffsets[2], 8);
        EXPECT_EQ(in.capacity, -1);
        EXPECT_EQ(in.numDropped, 0);
        for (int j = 0; j < 2; j++) {
          EXPECT_EQ(in.expertCounts[j], counts[c.rank][j]);
          EXPECT_EQ(in.sendRows[j], send[c.rank][j]);
          EXPECT_EQ(in.recvRows[j], recv[c.rank][j]);
        }
        std::vector<double> x, rx(8, -1.0);
        for (int64_t t = 0; t < T; t++) x.push_back(10.0 * c.rank + (double)t);
        loomTensor tx = make(x, loomFloat64, {T, 1}), trx = make(rx, loomFloat64, {8, 1});
        ASSERT_LOOM_OK(loomMoeDispatch(m.h, &tx, nullptr, &trx, nullptr, nullptr));
        std::vector<double> want = c.rank == 0 ? std::vector<double>{10, 11, 0, 0, 0, 2, 11, 0}
                                               : std::vector<double>{0, 1, 0, 0, 2, 10, 0, 0};
        EXPECT_EQ(rx, want);
      },
      partest::opts());
}

// ---- Bitwise independence of P -----------------------------------------------------------

// A float tensor's storage in any float dtype; values stored rounded to nearest-even.
struct Buf {
  loomDataType_t dt;
  std::vector<uint8_t> b;
  Buf(loomDataType_t t, size_t n) : dt(t), b(n * shim::dtype_size(t), 0) {}
  double get(size_t i) const {
    return partest::load_float(dt, b.data() + i * shim::dtype_size(dt));
  }
  // v is a double (float64) or a float (the others, computed in float32).
  void set(size_t i, double v) { partest::store_float(dt, b.data() + i * shim::dtype_size(dt), v); }
  template <class T>
  T load(size_t i) const {
    T v;
    std::memcpy(&v, b.data() + i * sizeof(T), sizeof(T));
    return v;
  }
  template <class T>
  void store(size_t i, T v) {
    std::memcpy(b.data() + i * sizeof(T), &v, sizeof(T));
  }
  loomTensor tensor(std::vector<int64_t> shape) { return make(b, dt, shape); }
};

// Expert e of a row element, in the accumulation type, rounded to the dtype by Buf::set.
double expert(loomDataType_t dt, int e, double x) {
  if (dt == loomFloat64) return x * (1.0 + e / 8.0) - e / 16.0;
  return (float)x * (1.0f + (float)e / 8.0f) - (float)e / 16.0f;
}

constexpr int kG = 23, kE = 24, kK = 4, kHp = 6;

// Global token i's routing (independent of P), weights exact in float32.
void global_routing(std::vector<int64_t>& idx, std::vector<float>& w) {
  std::mt19937_64 g(99);
  for (int i = 0; i < kG; i++) {
    std::vector<int> perm(kE);
    for (int e = 0; e < kE; e++) perm[e] = e;
    std::shuffle(perm.begin(), perm.end(), g);
    for (int k = 0; k < kK; k++) {
      idx.push_back(g() % 6 == 0 ? -1 : perm[k]);
      w.push_back((float)(g() % 1000 + 1) / 1024.0f);
    }
  }
}

// Tokens [lo, lo + n) of the global set through layout, dispatch, the experts and the
// weighted combine over comm; returns out [n, kHp].
Buf moe_forward(loomComm_t comm, int rank, int64_t lo, int64_t n, loomDataType_t dt,
                const Buf& xg) {
  std::vector<int64_t> gi;
  std::vector<float> gw;
  global_routing(gi, gw);
  std::vector<int64_t> idx(gi.begin() + lo * kK, gi.begin() + (lo + n) * kK);
  std::vector<float> w(gw.begin() + lo * kK, gw.begin() + (lo + n) * kK);
  loomTensor ti = make(idx, loomInt64, {n, kK}), tw = make(w, loomFloat32, {n, kK});
  loomMoeOpts o = LOOM_MOE_OPTS_INIT;
  o.numExperts = kE;
  o.expertAlignment = 4;
  Moe m;
  Buf out(dt, (size_t)(n * kHp));
  EXPECT_LOOM_OK(loomMoeLayoutCreate(&ti, &tw, &m.h, &o, comm, nullptr));
  if (m.h == nullptr) return out;
  EXPECT_LOOM_OK(loomMoeGetInfo(m.h, &m.info));
  int64_t R = m.info.numRecvRows;
  Buf x(dt, (size_t)(n * kHp)), rx(dt, (size_t)(R * kHp)), y(dt, (size_t)(R * kHp));
  std::memcpy(x.b.data(), xg.b.data() + (size_t)lo * kHp * shim::dtype_size(dt), x.b.size());
  loomTensor tx = x.tensor({n, kHp}), trx = rx.tensor({R, kHp});
  EXPECT_LOOM_OK(loomMoeDispatch(m.h, &tx, nullptr, &trx, nullptr, nullptr));
  std::fill(y.b.begin(), y.b.end(), 0xff);  // NaN in the padding: combine must not read it
  for (int j = 0; j < m.info.numLocalExperts; j++)
    for (int64_t i = m.info.expertOffsets[j]; i < m.info.expertOffsets[j] + m.info.expertCounts[j];
         i++)
      for (int64_t h = 0; h < kHp; h++)
        y.set((size_t)(i * kHp + h),
              expert(dt, rank * m.info.numLocalExperts + j, rx.get((size_t)(i * kHp + h))));
  loomTensor ty = y.tensor({R, kHp}), to = out.tensor({n, kHp});
  EXPECT_LOOM_OK(loomMoeCombine(m.h, &ty, &tw, &to, nullptr));
  return out;
}

// The host reference of tokens [lo, lo + n): k ascending, in the accumulation type, rounded once.
void check_host_reference(const Buf& mine, const Buf& xg, const std::vector<int64_t>& gi,
                          const std::vector<float>& gw, int64_t lo, int64_t n) {
  loomDataType_t dt = xg.dt;
  for (int64_t t = 0; t < n; t++)
    for (int64_t h = 0; h < kHp; h++) {
      double acc = 0;
      float accf = 0;
      for (int k = 0; k < kK; k++) {
        int64_t e = gi[(size_t)((lo + t) * kK + k)];
        if (e < 0) continue;
        Buf ye(dt, 1);
        ye.set(0, expert(dt, (int)e, xg.get((size_t)((lo + t) * kHp + h))));
        float wk = gw[(size_t)((lo + t) * kK + k)];
        acc = acc + (double)wk * ye.get(0);
        accf = accf + wk * (float)ye.get(0);
      }
      Buf want(dt, 1);
      want.set(0, dt == loomFloat64 ? acc : (double)accf);
      EXPECT_EQ(mine.get((size_t)(t * kHp + h)), want.get(0)) << "token " << lo + t;
    }
}

TEST_P(MoeRanks, CombineIsBitwiseIndependentOfP) {
  auto [nranks, mode] = GetParam();
  harness::run(
      nranks, mode,
      [](Ctx& c) {
        int64_t lo = 0, n = 0;
        for (int q = 0; q <= c.rank; q++) {
          lo += n;
          n = kG / c.nranks + (q < kG % c.nranks);
        }
        std::vector<int64_t> gi;
        std::vector<float> gw;
        global_routing(gi, gw);
        loomComm_t one = nullptr;
        ASSERT_LOOM_OK(loomCommInitAll(&one, 1, nullptr));
        for (loomDataType_t dt : {loomFloat16, loomBfloat16, loomFloat32, loomFloat64}) {
          SCOPED_TRACE(shim::dtype_name(dt));
          Buf xg(dt, (size_t)kG * kHp);
          std::vector<double> v = partest::random_f64((size_t)kG * kHp, 5);
          for (size_t i = 0; i < v.size(); i++) xg.set(i, v[i]);
          Buf mine = moe_forward(c.comm, c.rank, lo, n, dt, xg);
          Buf all = moe_forward(one, 0, 0, kG, dt, xg);
          EXPECT_EQ(
              0, std::memcmp(mine.b.data(), all.b.data() + (size_t)lo * kHp * shim::dtype_size(dt),
                             mine.b.size()))
              << "rank " << c.rank << " of " << c.nranks << " differs from one rank";
          check_host_reference(mine, xg, gi, gw, lo, n);
        }
        loomCommDestroy(one);
      },
      partest::opts());
}

// A strided x and recvX (column slices of wider buffers), on a host stream, give what the
// contiguous tensors give.
TEST_P(MoeRanks, StridedViewsAndAHostStream) {
  auto [nranks, mode] = GetParam();
  harness::run(
      nranks, mode,
      [](Ctx& c) {
        const Case& k = kCases[1];
        World w = world_of(k, c.nranks, c.rank, 42);
        const Routing& r = w.r[c.rank];
        std::vector<int32_t> idx(r.idx.begin(), r.idx.end());
        loomTensor ti = make(idx, loomInt32, {r.T, k.K});
        loomMoeOpts o = LOOM_MOE_OPTS_INIT;
        o.numExperts = w.E;
        o.expertAlignment = k.align;
        Moe m;
        ASSERT_LOOM_OK(loomMoeLayoutCreate(&ti, nullptr, &m.h, &o, c.comm, nullptr));
        ASSERT_LOOM_OK(loomMoeGetInfo(m.h, &m.info));
        int64_t R = m.info.numRecvRows;
        std::vector<float> wide((size_t)(r.T * (kH + 2))), rwide((size_t)(R * (kH + 3)), 5.0f);
        for (size_t i = 0; i < wide.size(); i++) wide[i] = (float)i + 0.5f * (float)c.rank;
        std::vector<float> x((size_t)(r.T * kH)), rx((size_t)(R * kH), 7.0f);
        for (int64_t t = 0; t < r.T; t++)
          for (int64_t h = 0; h < kH; h++)
            x[(size_t)(t * kH + h)] = wide[(size_t)(t * (kH + 2) + 1 + h)];
        loomTensor tw = make(wide, loomFloat32, {r.T, kH + 2}), tx, trx;
        loomTensor trw = make(rwide, loomFloat32, {R, kH + 3});
        ASSERT_LOOM_OK(loomTensorSlice(&tw, 1, 1, kH, &tx));
        ASSERT_LOOM_OK(loomTensorSlice(&trw, 1, 2, kH, &trx));
        loomTensor cx = make(x, loomFloat32, {r.T, kH}), crx = make(rx, loomFloat32, {R, kH});
        shim::StreamGuard host;
        ASSERT_NE(host.get(), nullptr);
        ASSERT_LOOM_OK(loomMoeDispatch(m.h, &tx, nullptr, &trx, nullptr, host.get()));
        ASSERT_LOOM_OK(loomStreamSynchronize(host.get()));
        ASSERT_LOOM_OK(loomMoeDispatch(m.h, &cx, nullptr, &crx, nullptr, nullptr));
        for (int64_t i = 0; i < R; i++)
          for (int64_t h = 0; h < kH + 3; h++) {
            float got = rwide[(size_t)(i * (kH + 3) + h)];
            if (h < 2 || h >= kH + 2)
              EXPECT_EQ(got, 5.0f) << "outside the view, row " << i;
            else
              EXPECT_EQ(got, rx[(size_t)(i * kH + h - 2)]) << "row " << i;
          }
        // Combine from the strided recvX into a strided out equals the contiguous one.
        std::vector<float> owide((size_t)(r.T * (kH + 2)), 3.0f), out((size_t)(r.T * kH));
        loomTensor tow = make(owide, loomFloat32, {r.T, kH + 2}), to;
        ASSERT_LOOM_OK(loomTensorSlice(&tow, 1, 1, kH, &to));
        loomTensor tout = make(out, loomFloat32, {r.T, kH});
        ASSERT_LOOM_OK(loomMoeCombine(m.h, &trx, nullptr, &to, host.get()));
        ASSERT_LOOM_OK(loomStreamSynchronize(host.get()));
        ASSERT_LOOM_OK(loomMoeCombine(m.h, &crx, nullptr, &tout, nullptr));
        for (int64_t t = 0; t < r.T; t++)
          for (int64_t h = 0; h < kH; h++)
            EXPECT_EQ(owide[(size_t)(t * (kH + 2) + 1 + h)], out[(size_t)(t * kH + h)]);
      },
      partest::opts());
}

INSTANTIATE_TEST_SUITE_P(, MoeRanks,
                         ::testing::Values(RanksMode{1, Mode::Proc}, RanksMode{1, Mode::Thread},
                                           RanksMode{2, Mode::Proc}, RanksMode{2, Mode::Thread},
                                           RanksMode{3, Mode::Proc}, RanksMode{3, Mode::Thread},
                                           RanksMode{4, Mode::Proc}, RanksMode{4, Mode::Thread},
                                           RanksMode{8, Mode::Thread}),
                         partest::ranks_mode_name);

}  // namespace
