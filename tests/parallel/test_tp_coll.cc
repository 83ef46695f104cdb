// Section 3.1 of PARALLEL.md: the conjugate collectives (loomAllReduceTensor, loomAllGatherDim,
// loomReduceScatterDim, loomSplitDim, loomAlltoAllDim) on process and thread ranks: the checks
// the contract names, strided views against contiguous copies, in-place forms, dtypes and ops,
// zero extents, host streams, and (TpCollArgs) every misuse of section 8.
#include <algorithm>
#include <functional>

#include "par_test.h"

namespace {

using harness::Ctx;
using harness::Mode;
using partest::RanksMode;
using Shape = std::vector<int64_t>;
using Bytes = std::vector<unsigned char>;

constexpr unsigned char kSentinel = 0xA5;

size_t dsize(loomDataType_t dt) {
  return shim::dtype_size(dt);
}

// ---- Tensors over their own storage --------------------------------------------------------

// How a test tensor lies in its storage: row-major, a slice of a tensor one larger in every
// dim (starting at 1 in each), or a permuted view (memory holds the dims reversed).
enum class View { Contig, Slice, Permuted };

// A tensor view and its storage; bytes outside the view hold kSentinel. Moved, never copied
// (the view points into mem).
struct Buf {
  Bytes mem;
  loomTensor t{};
  Shape shape;
  Buf() = default;
  Buf(const Buf&) = delete;
  Buf(Buf&&) = default;
  Buf& operator=(Buf&&) = default;
};

Buf make_buf(loomDataType_t dt, const Shape& shape, View v = View::Contig) {
  Buf b;
  b.shape = shape;
  int nd = (int)shape.size();
  Shape ms = shape;
  if (v == View::Slice)
    for (auto& e : ms) e += 1;
  if (v == View::Permuted) std::reverse(ms.begin(), ms.end());
  b.mem.assign((size_t)partest::numel(ms) * dsize(dt), kSentinel);
  Shape st(nd);
  int64_t s = 1;
  for (int d = nd - 1; d >= 0; d--) {
    st[d] = s;
    s *= std::max<int64_t>(ms[d], 1);
  }
  b.t.dtype = dt;
  b.t.ndim = nd;
  b.t.data = b.mem.empty() ? nullptr : b.mem.data();
  int64_t off = 0;
  for (int d = 0; d < nd; d++) {
    b.t.shape[d] = shape[d];
    b.t.strides[d] = v == View::Permuted ? st[nd - 1 - d] : st[d];
    if (v == View::Slice) off += st[d];
  }
  if (partest::numel(shape) > 0) b.t.data = b.mem.data() + off * (int64_t)dsize(dt);
  return b;
}

Shape shape_of(const loomTensor& t) {
  return Shape(t.shape, t.shape + t.ndim);
}

// f(idx, linear) over every index of shape in row-major order.
template <class F>
void each_index(const Shape& shape, F f) {
  int64_t total = partest::numel(shape);
  Shape idx(shape.size(), 0);
  for (int64_t i = 0; i < total; i++) {
    f(idx, i);
    for (int d = (int)shape.size() - 1; d >= 0; d--) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

unsigned char* elem(const loomTensor& t, const Shape& idx) {
  int64_t off = 0;
  for (int d = 0; d < t.ndim; d++) off += idx[d] * t.strides[d];
  return (unsigned char*)t.data + off * (int64_t)dsize(t.dtype);
}

double load(const loomTensor& t, const Shape& idx) {
  const unsigned char* p = elem(t, idx);
  switch (t.dtype) {
    case loomFloat64: {
      double v;
      memcpy(&v, p, 8);
      return v;
    }
    case loomFloat32: {
      float v;
      memcpy(&v, p, 4);
      return v;
    }
    case loomBfloat16: {
      uint16_t h;
      memcpy(&h, p, 2);
      uint32_t u = (uint32_t)h << 16;
      float v;
      memcpy(&v, &u, 4);
      return v;
    }
    case loomInt32: {
      int32_t v;
      memcpy(&v, p, 4);
      return v;
    }
    default:
      ADD_FAILURE() << "load: dtype " << (int)t.dtype;
      return 0;
  }
}

void store(const loomTensor& t, const Shape& idx, double v) {
  unsigned char* p = elem(t, idx);
  switch (t.dtype) {
    case loomFloat64:
      memcpy(p, &v, 8);
      break;
    case loomFloat32: {
      float f = (float)v;
      memcpy(p, &f, 4);
      break;
    }
    case loomBfloat16: {  // nearest-even; the tests store values bfloat16 holds exactly
      float f = (float)v;
      uint32_t u;
      memcpy(&u, &f, 4);
      uint16_t h = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
      memcpy(p, &h, 2);
      break;
    }
    case loomInt32: {
      int32_t i = (int32_t)v;
      memcpy(p, &i, 4);
      break;
    }
    default:
      ADD_FAILURE() << "store: dtype " << (int)t.dtype;
  }
}

// A value from (seed, linear index) alone, so any rank can rebuild any rank's input: uniform in
// [-1, 1), or an integer in [-8, 8] (exact in every dtype, sums too).
double value_at(uint64_t seed, int64_t i, bool integer) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + (uint64_t)i * 0xbf58476d1ce4e5b9ull + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  if (integer) return (double)((int64_t)(z % 17) - 8);
  return (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

void fill(const loomTensor& t, uint64_t seed, bool integer = false) {
  each_index(shape_of(t),
             [&](const Shape& idx, int64_t i) { store(t, idx, value_at(seed, i, integer)); });
}

// Random bytes in every element (copies must keep them bit for bit, any dtype).
void fill_bytes(const loomTensor& t, uint64_t seed) {
  size_t es = dsize(t.dtype);
  each_index(shape_of(t), [&](const Shape& idx, int64_t i) {
    for (size_t k = 0; k < es; k++)
      elem(t, idx)[k] = (unsigned char)(value_at(seed, i * 8 + (int64_t)k, true) + 8) * 15;
  });
}

// The view's elements in row-major order, as bytes.
Bytes dense(const loomTensor& t) {
  size_t es = dsize(t.dtype);
  Bytes out((size_t)partest::numel(shape_of(t)) * es);
  each_index(shape_of(t),
             [&](const Shape& idx, int64_t i) { memcpy(&out[(size_t)i * es], elem(t, idx), es); });
  return out;
}

double dot(const loomTensor& a, const loomTensor& b) {
  double s = 0;
  each_index(shape_of(a), [&](const Shape& idx, int64_t) { s += load(a, idx) * load(b, idx); });
  return s;
}

// 1 when every byte of b.mem outside b's view still holds the sentinel.
bool outside_untouched(const Buf& b) {
  std::vector<char> in(b.mem.size(), 0);
  size_t es = dsize(b.t.dtype);
  each_index(b.shape, [&](const Shape& idx, int64_t) {
    size_t at = (size_t)(elem(b.t, idx) - b.mem.data());
    for (size_t k = 0; k < es; k++) in[at + k] = 1;
  });
  for (size_t i = 0; i < b.mem.size(); i++)
    if (!in[i] && b.mem[i] != kSentinel) return false;
  return true;
}

loomTensor slice(const loomTensor& t, int dim, int64_t start, int64_t len) {
  loomTensor s;
  EXPECT_EQ(loomTensorSlice(&t, dim, start, len, &s), loomSuccess) << loomGetLastError(nullptr);
  return s;
}

// ---- Splits --------------------------------------------------------------------------------

// Uneven extents with zeros, varied by salt; never all zero.
std::vector<int64_t> uneven(int n, int salt) {
  static const int64_t pattern[] = {2, 0, 3, 1, 0, 4};
  std::vector<int64_t> v(n);
  for (int q = 0; q < n; q++) v[q] = pattern[(q + salt) % 6];
  if (std::all_of(v.begin(), v.end(), [](int64_t e) { return e == 0; })) v[0] = 1;
  return v;
}

std::vector<int64_t> offsets(const std::vector<int64_t>& sp) {
  std::vector<int64_t> o(sp.size() + 1, 0);
  for (size_t q = 0; q < sp.size(); q++) o[q + 1] = o[q] + sp[q];
  return o;
}

// A dim call's case: shape (the named dim's entry is replaced), dim, and its splits.
struct DimCase {
  Shape shape;
  int dim;
  int salt;
  bool even;  // NULL splits of 2 per rank
  std::vector<int64_t> splits(int n) const {
    return even ? std::vector<int64_t>(n, 2) : uneven(n, salt);
  }
  const int64_t* arg(const std::vector<int64_t>& sp) const { return even ? nullptr : sp.data(); }
  Shape full(const std::vector<int64_t>& sp) const {
    Shape s = shape;
    s[dim] = offsets(sp).back();
    return s;
  }
  Shape part(const std::vector<int64_t>& sp, int r) const {
    Shape s = shape;
    s[dim] = sp[r];
    return s;
  }
};

const std::vector<DimCase> kDimCases = {
    {{3, 1, 4}, 0, 0, false},   {{3, 1, 4}, 1, 1, false},    {{3, 1, 4}, 2, 2, true},
    {{2, 3, 1, 2}, 0, 3, true}, {{2, 3, 1, 2}, 2, 4, false}, {{2, 3, 2, 1}, 3, 5, false},
    {{2, 1, 3, 2}, 1, 0, true}, {{1, 1, 3, 2}, 1, 2, false},
};

// An all-to-all case: x's shape has sum(scatter splits) at s and gatherSplits[r] at g.
struct A2aCase {
  Shape shape;
  int s, g, salt;
  bool even;  // NULL splits: 2 per rank along s, 1 along g
  std::vector<int64_t> ss(int n) const {
    return even ? std::vector<int64_t>(n, 2) : uneven(n, salt);
  }
  std::vector<int64_t> gs(int n) const {
    return even ? std::vector<int64_t>(n, 1) : uneven(n, salt + 1);
  }
  Shape x(int n, int r) const {
    Shape v = shape;
    v[s] = offsets(ss(n)).back();
    v[g] = gs(n)[r];
    return v;
  }
  Shape y(int n, int r) const {
    Shape v = shape;
    v[s] = ss(n)[r];
    v[g] = offsets(gs(n)).back();
    return v;
  }
};

const std::vector<A2aCase> kA2aCases = {
    {{2, 1, 1, 3}, 2, 1, 0, false}, {{2, 1, 1, 3}, 2, 1, 0, true}, {{1, 1, 3}, 0, 1, 1, false},
    {{1, 3, 1}, 2, 0, 2, false},    {{2, 1, 2, 1}, 3, 1, 3, true}, {{1, 1, 2}, 1, 0, 4, false},
};

uint64_t seed_of(int kase, int rank, int which = 0) {
  return (uint64_t)kase * 1000 + (uint64_t)rank * 10 + (uint64_t)which;
}

class TpColl : public ::testing::TestWithParam<RanksMode> {};
class TpCollArgs : public ::testing::TestWithParam<RanksMode> {};

// ---- The contract's checks -----------------------------------------------------------------

// sum_r <AG(x)_r, y_r> == sum_r <x_r, RS(y)_r>, uneven splits with zeros, dims first, middle
// and last of 3-d and 4-d tensors.
TEST_P(TpColl, AllGatherAndReduceScatterAreAdjoint) {
  harness::run(
      std::get<0>(GetParam()), std::get<1>(GetParam()),
      [](Ctx& c) {
        for (size_t k = 0; k < kDimCases.size(); k++) {
          const DimCase& dc = kDimCases[k];
          auto sp = dc.splits(c.nranks);
          Buf x = make_buf(loomFloat64, dc.part(sp, c.rank)),
              y = make_buf(loomFloat64, dc.full(sp));
          Buf ag = make_buf(loomFloat64, dc.full(sp)),
              rs = make_buf(loomFloat64, dc.part(sp, c.rank));
          fill(x.t, seed_of((int)k, c.rank));
          fill(y.t, seed_of((int)k, c.rank, 1));
          EXPECT_LOOM_OK(loomAllGatherDim(&x.t, &ag.t, dc.dim, dc.arg(sp), c.comm, nullptr));
          EXPECT_LOOM_OK(
              loomReduceScatterDim(&y.t, &rs.t, dc.dim, dc.arg(sp), loomSum, c.comm, nullptr));
          double lhs = partest::sum_ranks(dot(ag.t, y.t), c.comm);
          double rhs = partest::sum_ranks(dot(x.t, rs.t), c.comm);
          EXPECT_LE(partest::rel_err(lhs, rhs), 1e-12)
              << "case " << k << ": " << lhs << " vs " << rhs;
        }
      },
      partest::opts());
}

const loomDataType_t kCopyTypes[] = {loomFloat32, loomBfloat16, loomInt32, loomFloat64,
                                     loomInt8,    loomFloat16,  loomUint64};

// loomAllGatherDim then loomSplitDim, and loomAlltoAllDim then its inverse, give back x bit for
// bit, in every dtype.
TEST_P(TpColl, RoundTripsAreBitwiseIdentities) {
  harness::run(
      std::get<0>(GetParam()), std::get<1>(GetParam()),
      [](Ctx& c) {
        int n = c.nranks, r = c.rank;
        for (loomDataType_t dt : kCopyTypes) {
          for (size_t k = 0; k < kDimCases.size(); k++) {
            const DimCase& dc = kDimCases[k];
            auto sp = dc.splits(n);
            Buf x = make_buf(dt, dc.part(sp, r)), y = make_buf(dt, dc.full(sp)),
                z = make_buf(dt, dc.part(sp, r));
            fill_bytes(x.t, seed_of((int)k, r));
            EXPECT_LOOM_OK(loomAllGatherDim(&x.t, &y.t, dc.dim, dc.arg(sp), c.comm, nullptr));
            EXPECT_LOOM_OK(loomSplitDim(&y.t, &z.t, dc.dim, dc.arg(sp), c.comm, nullptr));
            EXPECT_EQ(dense(z.t), dense(x.t)) << "dtype " << dt << " case " << k;
          }
          for (size_t k = 0; k < kA2aCases.size(); k++) {
            const A2aCase& ac = kA2aCases[k];
            auto ss = ac.ss(n), gs = ac.gs(n);
            const int64_t* sa = ac.even ? nullptr : ss.data();
            const int64_t* ga = ac.even ? nullptr : gs.data();
            Buf x = make_buf(dt, ac.x(n, r)), y = make_buf(dt, ac.y(n, r)),
                z = make_buf(dt, ac.x(n, r));
            fill_bytes(x.t, seed_of((int)k, r, 2));
            EXPECT_LOOM_OK(loomAlltoAllDim(&x.t, &y.t, ac.s, ac.g, sa, ga, c.comm, nullptr));
            EXPECT_LOOM_OK(loomAlltoAllDim(&y.t, &z.t, ac.g, ac.s, ga, sa, c.comm, nullptr));
            EXPECT_EQ(dense(z.t), dense(x.t)) << "dtype " << dt << " a2a case " << k;
          }
        }
      },
      partest::opts());
}

// What op over ranks gives for element i of rank q's input value_at(seed_of(k, q), i, true).
double reference(loomRedOp_t op, int n, int k, int64_t i) {
  double acc = value_at(seed_of(k, 0), i, true);
  for (int q = 1; q < n; q++) {
    double v = value_at(seed_of(k, q), i, true);
    acc = op == loomMax ? std::max(acc, v) : acc + v;
  }
  return op == loomAvg ? acc / n : acc;
}

// loomReduceScatterDim then loomAllGatherDim equals loomAllReduceTensor bit for bit, and both
// match a reference built from every rank's input, for float32, bfloat16, int32 and float64
// under sum, max and avg.
TEST_P(TpColl, ReduceScatterThenAllGatherIsAllReduce) {
  harness::run(
      std::get<0>(GetParam()), std::get<1>(GetParam()),
      [](Ctx& c) {
        int n = c.nranks, r = c.rank;
        const loomDataType_t types[] = {loomFloat32, loomBfloat16, loomInt32, loomFloat64};
        const loomRedOp_t ops[] = {loomSum, loomMax, loomAvg};
        for (loomDataType_t dt : types)
          for (loomRedOp_t op : ops)
            for (int k : {0, 2, 4, 5}) {
              const DimCase& dc = kDimCases[k];
              auto sp = dc.splits(n);
              Buf x = make_buf(dt, dc.full(sp)), ar = make_buf(dt, dc.full(sp));
              Buf part = make_buf(dt, dc.part(sp, r)), back = make_buf(dt, dc.full(sp));
              fill(x.t, seed_of(k, r), true);
              EXPECT_LOOM_OK(loomAllReduceTensor(&x.t, &ar.t, op, c.comm, nullptr));
              EXPECT_LOOM_OK(
                  loomReduceScatterDim(&x.t, &part.t, dc.dim, dc.arg(sp), op, c.comm, nullptr));
              EXPECT_LOOM_OK(
                  loomAllGatherDim(&part.t, &back.t, dc.dim, dc.arg(sp), c.comm, nullptr));
              EXPECT_EQ(dense(back.t), dense(ar.t))
                  << "dtype " << dt << " op " << op << " case " << k;
              if (dt == loomInt32 && op == loomAvg) continue;  // integer division: the core's rule
              double tol = op != loomAvg        ? 0
                           : dt == loomBfloat16 ? 1e-2
                           : dt == loomFloat32  ? 1e-6
                                                : 1e-15;
              each_index(shape_of(ar.t), [&](const Shape& idx, int64_t i) {
                double want = reference(op, n, k, i);
                EXPECT_LE(std::fabs(load(ar.t, idx) - want), tol * std::max(1.0, std::fabs(want)))
                    << "dtype " << dt << " op " << op << " case " << k << " element " << i;
              });
            }
        // A PreMulSum op is an op the core takes too.
        double half = 0.5;
        loomRedOp_t pre;
        ASSERT_LOOM_OK(
            loomRedOpCreatePreMulSum(&pre, &half, loomFloat64, loomScalarHostImmediate, c.comm));
        const DimCase& dc = kDimCases[1];
        auto sp = dc.splits(n);
        Buf x = make_buf(loomFloat64, dc.full(sp)), ar = make_buf(loomFloat64, dc.full(sp));
        Buf part = make_buf(loomFloat64, dc.part(sp, r)), back = make_buf(loomFloat64, dc.full(sp));
        fill(x.t, seed_of(1, r), true);
        EXPECT_LOOM_OK(loomAllReduceTensor(&x.t, &ar.t, pre, c.comm, nullptr));
        EXPECT_LOOM_OK(
            loomReduceScatterDim(&x.t, &part.t, dc.dim, dc.arg(sp), pre, c.comm, nullptr));
        EXPECT_LOOM_OK(loomAllGatherDim(&part.t, &back.t, dc.dim, dc.arg(sp), c.comm, nullptr));
        EXPECT_EQ(dense(back.t), dense(ar.t));
        each_index(shape_of(ar.t), [&](const Shape& idx, int64_t i) {
          EXPECT_EQ(load(ar.t, idx), 0.5 * reference(loomSum, n, 1, i)) << "element " << i;
        });
        EXPECT_LOOM_OK(loomRedOpDestroy(pre, c.comm));
      },
      partest::opts());
}

// Ulysses: x = [b, s/P, h, d], scatterDim 2, gatherDim 1 gives y = [b, s, h/P, d], checked element
// by element against every rank's input; also with uneven heads and sequence parts.
TEST_P(TpColl, UlyssesMatchesAReferenceFromEveryRank) {
  harness::run(
      std::get<0>(GetParam()), std::get<1>(GetParam()),
      [](Ctx& c) {
        int n = c.nranks, r = c.rank;
        const int64_t b = 2, d = 3;
        for (loomDataType_t dt : {loomFloat64, loomInt32})
          for (bool even : {true, false}) {
            auto ss = even ? std::vector<int64_t>(n, 2) : uneven(n, 2);  // heads
            auto gs = even ? std::vector<int64_t>(n, 2) : uneven(n, 1);  // sequence
            auto so = offsets(ss), go = offsets(gs);
            int64_t H = so.back(), S = go.back();
            Buf x = make_buf(dt, {b, gs[r], H, d}), y = make_buf(dt, {b, S, ss[r], d});
            each_index(x.shape,
                       [&](const Shape& idx, int64_t i) { store(x.t, idx, r * 10000 + i); });
            EXPECT_LOOM_OK(loomAlltoAllDim(&x.t, &y.t, 2, 1, even ? nullptr : ss.data(),
                                           even ? nullptr : gs.data(), c.comm, nullptr));
            each_index(y.shape, [&](const Shape& idx, int64_t) {
              int q = (int)(std::upper_bound(go.begin(), go.end(), idx[1]) - go.begin()) - 1;
              int64_t lin = ((idx[0] * gs[q] + (idx[1] - go[q])) * H + so[r] + idx[2]) * d + idx[3];
              EXPECT_EQ(load(y.t, idx), (double)(q * 10000 + lin))
                  << "even " << even << " at [" << idx[0] << ", " << idx[1] << ", " << idx[2]
                  << ", " << idx[3] << "]";
            });
          }
      },
      partest::opts());
}

// ---- Strided views, in-place forms, zero extents, host streams -----------------------------

// One call of section 3.1 on (x, y) of the given shapes.
struct Call {
  const char* name;
  Shape xs, ys;
  std::function<loomResult_t(const loomTensor*, loomTensor*, loomComm_t, loomStream_t)> run;
};

std::vector<Call> calls_for(int n, int r, std::vector<int64_t>* keep) {
  // keep holds the splits the calls point at: [0, n) uneven, [n, 2n) ones, [2n, 3n) uneven.
  *keep = uneven(n, 1);
  for (int q = 0; q < n; q++) keep->push_back(1);
  for (int64_t e : uneven(n, 4)) keep->push_back(e);
  const int64_t* sp = keep->data();
  const int64_t* ones = keep->data() + n;
  const int64_t* sp2 = keep->data() + 2 * n;
  int64_t E = offsets(uneven(n, 1)).back(), E2 = offsets(uneven(n, 4)).back();
  std::vector<Call> v;
  v.push_back({"allreduce",
               {3, 4, 5},
               {3, 4, 5},
               [](const loomTensor* x, loomTensor* y, loomComm_t c, loomStream_t s) {
                 return loomAllReduceTensor(x, y, loomSum, c, s);
               }});
  v.push_back({"allgather dim 1",
               {3, sp[r], 5},
               {3, E, 5},
               [sp](const loomTensor* x, loomTensor* y, loomComm_t c, loomStream_t s) {
                 return loomAllGatherDim(x, y, 1, sp, c, s);
               }});
  v.push_back({"allgather dim 0 even",
               {2, 4, 3},
               {2 * n, 4, 3},
               [](const loomTensor* x, loomTensor* y, loomComm_t c, loomStream_t s) {
                 return loomAllGatherDim(x, y, 0, nullptr, c, s);
               }});
  v.push_back({"allgather dim 0",
               {sp[r], 4, 3},
               {E, 4, 3},
               [sp](const loomTensor* x, loomTensor* y, loomComm_t c, loomStream_t s) {
                 return loomAllGatherDim(x, y, 0, sp, c, s);
               }});
  v.push_back({"reducescatter dim 2",
               {3, 4, E},
               {3, 4, sp[r]},
               [sp](const loomTensor* x, loomTensor* y, loomComm_t c, loomStream_t s) {
                 return loomReduceScatterDim(x, y, 2, sp, loomSum, c, s);
               }});
  v.push_back({"reducescatter dim 0 even",
               {2 * n, 3, 4},
               {2, 3, 4},
               [](const loomTensor* x, loomTensor* y, loomComm_t c, loomStream_t s) {
                 return loomReduceScatterDim(x, y, 0, nullptr, loomAvg, c, s);
               }});
  v.push_back({"reducescatter dim 0",
               {E, 3, 4},
               {sp[r], 3, 4},
               [sp](const loomTensor* x, loomTensor* y, loomComm_t c, loomStream_t s) {
                 return loomReduceScatterDim(x, y, 0, sp, loomMax, c, s);
               }});
  v.push_back({"split dim 1",
               {3, E, 4},
               {3, sp[r], 4},
               [sp](const loomTensor* x, loomTensor* y, loomComm_t c, loomStream_t s) {
                 return loomSplitDim(x, y, 1, sp, c, s);
               }});
  v.push_back({"alltoall 2<-1",
               {2, sp2[r], E, 3},
               {2, E2, sp[r], 3},
               [sp, sp2](const loomTensor* x, loomTensor* y, loomComm_t c, loomStream_t s) {
                 return loomAlltoAllDim(x, y, 2, 1, sp, sp2, c, s);
               }});
  v.push_back({"alltoall 1<-0 ones",
               {1, n, 4},
               {n, 1, 4},
               [ones](const loomTensor* x, loomTensor* y, loomComm_t c, loomStream_t s) {
                 return loomAlltoAllDim(x, y, 1, 0, ones, ones, c, s);
               }});
  return v;
}

// Every call on strided inputs and outputs (slices, permuted views) gives what it gives on
// contiguous copies, bit for bit, and writes nothing outside its output view.
TEST_P(TpColl, StridedViewsGiveWhatCopiesGive) {
  harness::run(
      std::get<0>(GetParam()), std::get<1>(GetParam()),
      [](Ctx& c) {
        std::vector<int64_t> keep;
        auto calls = calls_for(c.nranks, c.rank, &keep);
        const View views[] = {View::Contig, View::Slice, View::Permuted};
        for (size_t k = 0; k < calls.size(); k++) {
          Bytes want;
          for (View vin : views)
            for (View vout : views) {
              Buf x = make_buf(loomFloat32, calls[k].xs, vin),
                  y = make_buf(loomFloat32, calls[k].ys, vout);
              fill(x.t, seed_of((int)k, c.rank));
              Bytes xin = dense(x.t);
              EXPECT_LOOM_OK(calls[k].run(&x.t, &y.t, c.comm, nullptr));
              if (vin == View::Contig && vout == View::Contig) want = dense(y.t);
              EXPECT_EQ(dense(y.t), want)
                  << calls[k].name << " in " << (int)vin << " out " << (int)vout;
              EXPECT_TRUE(outside_untouched(y)) << calls[k].name << " wrote outside y";
              EXPECT_EQ(dense(x.t), xin) << calls[k].name << " changed x";
            }
        }
      },
      partest::opts());
}

// AllReduceTensor with x and y the same view; AllGatherDim with x y's slice at this rank's
// offset; ReduceScatterDim with y x's slice: each gives what the out-of-place call gives.
TEST_P(TpColl, InPlaceFormsGiveWhatOutOfPlaceGives) {
  harness::run(
      std::get<0>(GetParam()), std::get<1>(GetParam()),
      [](Ctx& c) {
        int n = c.nranks, r = c.rank;
        for (View v : {View::Contig, View::Slice, View::Permuted}) {
          Buf x = make_buf(loomFloat32, {3, 4, 5}, v), y = make_buf(loomFloat32, {3, 4, 5});
          fill(x.t, seed_of(1, r));
          EXPECT_LOOM_OK(loomAllReduceTensor(&x.t, &y.t, loomSum, c.comm, nullptr));
          EXPECT_LOOM_OK(loomAllReduceTensor(&x.t, &x.t, loomSum, c.comm, nullptr));
          EXPECT_EQ(dense(x.t), dense(y.t)) << "allreduce view " << (int)v;
        }
        struct Case {
          DimCase dc;
          View v;
        };
        const Case cases[] = {
            {{{1, 3, 4}, 0, 0, true}, View::Contig},    {{{1, 3, 4}, 0, 1, false}, View::Contig},
            {{{3, 1, 4}, 1, 2, false}, View::Contig},   {{{3, 4, 1}, 2, 0, true}, View::Slice},
            {{{1, 3, 4}, 0, 3, false}, View::Permuted}, {{{2, 1, 3}, 1, 4, false}, View::Slice}};
        for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
          const DimCase& dc = cases[k].dc;
          auto sp = dc.splits(n);
          int64_t off = offsets(sp)[r];
          for (loomRedOp_t op : {loomSum, loomAvg}) {  // reduce-scatter: ref first, then in place
            Buf x = make_buf(loomFloat32, dc.full(sp), cases[k].v),
                ref = make_buf(loomFloat32, dc.part(sp, r));
            fill(x.t, seed_of((int)k, r, op));
            EXPECT_LOOM_OK(
                loomReduceScatterDim(&x.t, &ref.t, dc.dim, dc.arg(sp), op, c.comm, nullptr));
            loomTensor y = slice(x.t, dc.dim, off, sp[r]);
            EXPECT_LOOM_OK(loomReduceScatterDim(&x.t, &y, dc.dim, dc.arg(sp), op, c.comm, nullptr));
            EXPECT_EQ(dense(y), dense(ref.t)) << "reducescatter case " << k << " op " << op;
          }
          Buf y = make_buf(loomFloat32, dc.full(sp), cases[k].v),
              ref = make_buf(loomFloat32, dc.full(sp));
          Buf xc = make_buf(loomFloat32, dc.part(sp, r));
          loomTensor x = slice(y.t, dc.dim, off, sp[r]);
          fill(x, seed_of((int)k, r, 7));
          fill(xc.t, seed_of((int)k, r, 7));
          EXPECT_LOOM_OK(loomAllGatherDim(&xc.t, &ref.t, dc.dim, dc.arg(sp), c.comm, nullptr));
          EXPECT_LOOM_OK(loomAllGatherDim(&x, &y.t, dc.dim, dc.arg(sp), c.comm, nullptr));
          EXPECT_EQ(dense(y.t), dense(ref.t)) << "allgather case " << k;
          EXPECT_TRUE(outside_untouched(y)) << "allgather case " << k;
        }
      },
      partest::opts());
}

// Extents of 0: empty tensors (data NULL) everywhere, splits that give most ranks nothing, and
// a split dim of extent 0.
TEST_P(TpColl, ZeroExtents) {
  harness::run(
      std::get<0>(GetParam()), std::get<1>(GetParam()),
      [](Ctx& c) {
        int n = c.nranks, r = c.rank;
        auto empty = [](Shape s) {
          loomTensor t;
          EXPECT_EQ(loomTensorMake(nullptr, loomFloat32, (int)s.size(), s.data(), &t), loomSuccess);
          return t;
        };
        loomTensor a = empty({2, 0, 3}), b = empty({2, 0, 3}), full = empty({2 * n, 0, 3});
        EXPECT_LOOM_OK(loomAllReduceTensor(&a, &b, loomSum, c.comm, nullptr));
        EXPECT_LOOM_OK(loomAllGatherDim(&a, &full, 0, nullptr, c.comm, nullptr));
        EXPECT_LOOM_OK(loomReduceScatterDim(&full, &a, 0, nullptr, loomSum, c.comm, nullptr));
        EXPECT_LOOM_OK(loomSplitDim(&full, &a, 0, nullptr, c.comm, nullptr));
        loomTensor ax = empty({2 * n, 0, 1}), ay = empty({2, 0, n});
        EXPECT_LOOM_OK(loomAlltoAllDim(&ax, &ay, 0, 2, nullptr, nullptr, c.comm, nullptr));
        // Only the last rank has a part; the others pass empty tensors over NULL.
        std::vector<int64_t> sp(n, 0);
        sp[n - 1] = 3;
        Buf x = make_buf(loomFloat64, {2, sp[r], 2}), y = make_buf(loomFloat64, {2, 3, 2});
        Buf z = make_buf(loomFloat64, {2, sp[r], 2});
        fill(x.t, seed_of(9, r));
        EXPECT_LOOM_OK(loomAllGatherDim(&x.t, &y.t, 1, sp.data(), c.comm, nullptr));
        Buf last = make_buf(loomFloat64, {2, 3, 2});
        fill(last.t, seed_of(9, n - 1));
        EXPECT_EQ(dense(y.t), dense(last.t));
        EXPECT_LOOM_OK(loomReduceScatterDim(&y.t, &z.t, 1, sp.data(), loomSum, c.comm, nullptr));
        EXPECT_LOOM_OK(loomSplitDim(&y.t, &z.t, 1, sp.data(), c.comm, nullptr));
        EXPECT_EQ(dense(z.t), dense(x.t));
        Buf xa = make_buf(loomFloat64, {3, sp[r], 2}), ya = make_buf(loomFloat64, {sp[r], 3, 2});
        Buf za = make_buf(loomFloat64, {3, sp[r], 2});
        fill(xa.t, seed_of(10, r));
        EXPECT_LOOM_OK(loomAlltoAllDim(&xa.t, &ya.t, 0, 1, sp.data(), sp.data(), c.comm, nullptr));
        EXPECT_LOOM_OK(loomAlltoAllDim(&ya.t, &za.t, 1, 0, sp.data(), sp.data(), c.comm, nullptr));
        EXPECT_EQ(dense(za.t), dense(xa.t));
        // The split dim itself of extent 0 on every rank.
        std::vector<int64_t> zeros(n, 0);
        Buf e = make_buf(loomFloat64, {3, 0}), f = make_buf(loomFloat64, {3, 0});
        EXPECT_LOOM_OK(loomAllGatherDim(&e.t, &f.t, 1, zeros.data(), c.comm, nullptr));
        EXPECT_LOOM_OK(loomReduceScatterDim(&f.t, &e.t, 1, zeros.data(), loomSum, c.comm, nullptr));
      },
      partest::opts());
}

// On a host stream each call gives what it gives with a NULL stream (after the stream's
// synchronize), and is ordered after the stream's earlier work.
TEST_P(TpColl, HostStreamGivesWhatNullGives) {
  harness::run(
      std::get<0>(GetParam()), std::get<1>(GetParam()),
      [](Ctx& c) {
        loomStream_t s;
        ASSERT_LOOM_OK(loomStreamCreate(&s));
        std::vector<int64_t> keep;
        auto calls = calls_for(c.nranks, c.rank, &keep);
        for (size_t k = 0; k < calls.size(); k++) {
          Buf src = make_buf(loomFloat32, calls[k].xs), x = make_buf(loomFloat32, calls[k].xs);
          Buf y0 = make_buf(loomFloat32, calls[k].ys),
              y1 = make_buf(loomFloat32, calls[k].ys, View::Permuted);
          fill(src.t, seed_of((int)k, c.rank));
          fill(x.t, seed_of((int)k, c.rank));
          // The stream's earlier work writes the call's input (its first elements, as many as
          // every rank has): the call must come after it.
          int64_t count = partest::numel(calls[k].xs);
          for (int q = 0; q < c.nranks; q++) {
            std::vector<int64_t> other;
            count = std::min(count, partest::numel(calls_for(c.nranks, q, &other)[k].xs));
          }
          EXPECT_LOOM_OK(
              loomAllReduce(src.t.data, x.t.data, (size_t)count, loomFloat32, loomMax, c.comm, s));
          EXPECT_LOOM_OK(calls[k].run(&x.t, &y1.t, c.comm, s));
          EXPECT_LOOM_OK(loomStreamSynchronize(s));
          EXPECT_LOOM_OK(calls[k].run(&x.t, &y0.t, c.comm, nullptr));
          EXPECT_EQ(dense(y1.t), dense(y0.t)) << calls[k].name;
          EXPECT_TRUE(outside_untouched(y1)) << calls[k].name;
        }
        EXPECT_LOOM_OK(loomStreamDestroy(s));
      },
      partest::opts());
}

// ---- Misuse (section 8) --------------------------------------------------------------------

// The tensors the misuse cases share: x [2, 2, 3] (this rank's part along dim 1 under even
// splits), y [2, 2n, 3] (the full tensor), o like x; xa [2, 1, 2n] and ya [2, n, 2] for the
// all-to-all (scatterDim 2, gatherDim 1); splits of ones (the wrong sum) and with a negative
// entry.
struct ArgBufs {
  Buf x, y, o, xa, ya;
  std::vector<int64_t> ones, neg;
};

ArgBufs arg_bufs(const Ctx& c) {
  int n = c.nranks;
  ArgBufs b;
  b.x = make_buf(loomFloat64, {2, 2, 3});
  b.y = make_buf(loomFloat64, {2, 2 * n, 3});
  b.o = make_buf(loomFloat64, {2, 2, 3});
  b.xa = make_buf(loomFloat64, {2, 1, 2 * n});
  b.ya = make_buf(loomFloat64, {2, n, 2});
  fill(b.x.t, seed_of(0, c.rank));
  fill(b.y.t, seed_of(1, c.rank));
  fill(b.o.t, seed_of(2, c.rank));
  fill(b.xa.t, seed_of(3, c.rank));
  b.ones.assign(n, 1);
  b.neg.assign(n, 2);
  b.neg[0] = -1;
  return b;
}

std::string str(int64_t v) {
  return std::to_string(v);
}

// The checks every call makes of its tensors, shown on loomAllReduceTensor.
void misuse_tensors(const Ctx& c, ArgBufs& b) {
  const char* fn = "loomAllReduceTensor";
  loomComm_t cm = c.comm;
  const loomTensor &x = b.x.t, &o = b.o.t;
  const Bytes& out = b.o.mem;
  EXPECT_MISUSE(loomAllReduceTensor(nullptr, &b.o.t, loomSum, cm, nullptr), cm, fn, out,
                "x is NULL");
  EXPECT_MISUSE(loomAllReduceTensor(&x, nullptr, loomSum, cm, nullptr), cm, fn, out, "y is NULL");
  EXPECT_MISUSE(loomAllReduceTensor(&x, &b.o.t, loomSum, nullptr, nullptr), nullptr, fn, out,
                "comm is NULL");
  loomTensor bad = x;
  bad.data = nullptr;
  EXPECT_MISUSE(loomAllReduceTensor(&bad, &b.o.t, loomSum, cm, nullptr), cm, fn, out,
                "x.data is NULL", "12");
  bad = x;
  bad.ndim = 9;
  EXPECT_MISUSE(loomAllReduceTensor(&bad, &b.o.t, loomSum, cm, nullptr), cm, fn, out,
                "x.ndim is 9");
  bad = o;
  bad.shape[1] = -1;
  EXPECT_MISUSE(loomAllReduceTensor(&x, &bad, loomSum, cm, nullptr), cm, fn, out,
                "y.shape[1] is -1");
  bad = x;
  bad.strides[0] = -2;
  EXPECT_MISUSE(loomAllReduceTensor(&bad, &b.o.t, loomSum, cm, nullptr), cm, fn, out,
                "x.strides[0] is -2");
  bad = o;
  bad.strides[0] = 0;
  EXPECT_MISUSE(loomAllReduceTensor(&x, &bad, loomSum, cm, nullptr), cm, fn, out,
                "y overlaps itself");
  bad = o;
  bad.ndim = 2;
  EXPECT_MISUSE(loomAllReduceTensor(&x, &bad, loomSum, cm, nullptr), cm, fn, out,
                "y.ndim is 2 but x.ndim is 3");
}

// loomAllReduceTensor's own: dtypes, shapes, ops, overlap.
void misuse_allreduce(const Ctx& c, ArgBufs& b) {
  const char* fn = "loomAllReduceTensor";
  loomComm_t cm = c.comm;
  const loomTensor& x = b.x.t;
  Buf f = make_buf(loomFloat32, {2, 2, 3}), g = make_buf(loomFloat64, {2, 2, 4});
  EXPECT_MISUSE(loomAllReduceTensor(&x, &f.t, loomSum, cm, nullptr), cm, fn, f.mem,
                "y.dtype is float32 but x.dtype is float64");
  EXPECT_MISUSE(loomAllReduceTensor(&x, &g.t, loomSum, cm, nullptr), cm, fn, g.mem,
                "x.shape[2] is 3 but y.shape[2] is 4");
  EXPECT_MISUSE(loomAllReduceTensor(&x, &b.o.t, (loomRedOp_t)77, cm, nullptr), cm, fn, b.o.mem,
                "op is 77");
  EXPECT_MISUSE(loomAllReduceTensor(&x, &b.o.t, (loomRedOp_t)-1, cm, nullptr), cm, fn, b.o.mem,
                "op is -1");
  Buf w = make_buf(loomFloat64, {13});
  loomTensor w0 = slice(w.t, 0, 0, 12), w1 = slice(w.t, 0, 1, 12);
  EXPECT_MISUSE(loomAllReduceTensor(&w0, &w1, loomSum, cm, nullptr), cm, fn, w.mem,
                "overlap without being the same view");
}

void misuse_allgather(const Ctx& c, ArgBufs& b) {
  const char* fn = "loomAllGatherDim";
  int n = c.nranks, r = c.rank;
  loomComm_t cm = c.comm;
  const loomTensor& x = b.x.t;
  loomTensor& y = b.y.t;
  const Bytes& out = b.y.mem;
  EXPECT_MISUSE(loomAllGatherDim(&x, &y, 3, nullptr, cm, nullptr), cm, fn, out,
                "dim is 3, outside [0, 3)");
  EXPECT_MISUSE(loomAllGatherDim(&x, &y, -1, nullptr, cm, nullptr), cm, fn, out, "dim is -1");
  std::string sum = "splits sum to " + str(n) + " but y.shape[1] is " + str(2 * n);
  EXPECT_MISUSE(loomAllGatherDim(&x, &y, 1, b.ones.data(), cm, nullptr), cm, fn, out, sum.c_str());
  EXPECT_MISUSE(loomAllGatherDim(&x, &y, 1, b.neg.data(), cm, nullptr), cm, fn, out,
                "splits[0] is -1");
  if (n > 1) {
    Buf y2 = make_buf(loomFloat64, {2, 2 * n + 1, 3});
    std::string odd = "y.shape[1] = " + str(2 * n + 1) + " is not divisible by " + str(n);
    EXPECT_MISUSE(loomAllGatherDim(&x, &y2.t, 1, nullptr, cm, nullptr), cm, fn, y2.mem,
                  odd.c_str());
  }
  Buf x3 = make_buf(loomFloat64, {2, 3, 3}), x4 = make_buf(loomFloat64, {1, 2, 3});
  EXPECT_MISUSE(loomAllGatherDim(&x3.t, &y, 1, nullptr, cm, nullptr), cm, fn, out,
                "x.shape[1] is 3");
  EXPECT_MISUSE(loomAllGatherDim(&x4.t, &y, 1, nullptr, cm, nullptr), cm, fn, out,
                "x.shape[0] is 1 but y.shape[0] is 2");
  loomTensor bad = slice(y, 1, 2 * r, 2);
  bad.strides[2] = 0;  // inside y but not its slice
  EXPECT_MISUSE(loomAllGatherDim(&bad, &y, 1, nullptr, cm, nullptr), cm, fn, out, "in-place");
  if (n > 1) {
    bad = slice(y, 1, r + 1 < n ? 2 * r + 1 : 2 * r - 1, 2);
    std::string at = "not y's slice at " + str(2 * r) + " along dim 1";
    EXPECT_MISUSE(loomAllGatherDim(&bad, &y, 1, nullptr, cm, nullptr), cm, fn, out, at.c_str());
  }
  bad = y;
  bad.strides[1] = 1;
  EXPECT_MISUSE(loomAllGatherDim(&x, &bad, 1, nullptr, cm, nullptr), cm, fn, out,
                "y overlaps itself");
}

void misuse_reduce_scatter_split(const Ctx& c, ArgBufs& b) {
  const char* rs = "loomReduceScatterDim";
  const char* sd = "loomSplitDim";
  int n = c.nranks, r = c.rank;
  loomComm_t cm = c.comm;
  const loomTensor& y = b.y.t;
  loomTensor& x = b.x.t;
  EXPECT_MISUSE(loomReduceScatterDim(&y, &x, 1, nullptr, (loomRedOp_t)99, cm, nullptr), cm, rs,
                b.x.mem, "op is 99");
  std::string sum = "splits sum to " + str(n) + " but x.shape[1] is " + str(2 * n);
  EXPECT_MISUSE(loomReduceScatterDim(&y, &x, 1, b.ones.data(), loomSum, cm, nullptr), cm, rs,
                b.x.mem, sum.c_str());
  Buf f = make_buf(loomFloat32, {2, 2, 3}), g = make_buf(loomFloat64, {2, 2, 4});
  EXPECT_MISUSE(loomReduceScatterDim(&y, &g.t, 1, nullptr, loomSum, cm, nullptr), cm, rs, g.mem,
                "x.shape[2] is 3 but y.shape[2] is 4");
  EXPECT_MISUSE(loomReduceScatterDim(&y, &f.t, 1, nullptr, loomSum, cm, nullptr), cm, rs, f.mem,
                "y.dtype is float32");
  if (n > 1) {
    loomTensor bad = slice(y, 1, r + 1 < n ? 2 * r + 1 : 2 * r - 1, 2);
    EXPECT_MISUSE(loomReduceScatterDim(&y, &bad, 1, nullptr, loomSum, cm, nullptr), cm, rs, b.y.mem,
                  "y is not x's slice");
  }
  loomTensor part = slice(y, 1, 2 * r, 2);  // the slice itself: SplitDim has no in-place form
  EXPECT_MISUSE(loomSplitDim(&y, &part, 1, nullptr, cm, nullptr), cm, sd, b.y.mem,
                "no in-place form");
  EXPECT_MISUSE(loomSplitDim(&y, &x, 7, nullptr, cm, nullptr), cm, sd, b.x.mem, "dim is 7");
  EXPECT_MISUSE(loomSplitDim(&y, &x, 1, b.neg.data(), cm, nullptr), cm, sd, b.x.mem,
                "splits[0] is -1");
  EXPECT_MISUSE(loomSplitDim(&y, &x, 1, nullptr, nullptr, nullptr), nullptr, sd, b.x.mem,
                "comm is NULL");
}

void misuse_alltoall(const Ctx& c, ArgBufs& b) {
  const char* fn = "loomAlltoAllDim";
  int n = c.nranks;
  loomComm_t cm = c.comm;
  const loomTensor& xa = b.xa.t;
  loomTensor& ya = b.ya.t;
  const Bytes& out = b.ya.mem;
  EXPECT_MISUSE(loomAlltoAllDim(&xa, &ya, 1, 1, nullptr, nullptr, cm, nullptr), cm, fn, out,
                "scatterDim and gatherDim are both 1");
  EXPECT_MISUSE(loomAlltoAllDim(&xa, &ya, 5, 1, nullptr, nullptr, cm, nullptr), cm, fn, out,
                "scatterDim is 5");
  EXPECT_MISUSE(loomAlltoAllDim(&xa, &ya, 2, -1, nullptr, nullptr, cm, nullptr), cm, fn, out,
                "gatherDim is -1");
  std::string sum = "scatterSplits sum to " + str(n) + " but x.shape[2] is " + str(2 * n);
  EXPECT_MISUSE(loomAlltoAllDim(&xa, &ya, 2, 1, b.ones.data(), nullptr, cm, nullptr), cm, fn, out,
                sum.c_str());
  EXPECT_MISUSE(loomAlltoAllDim(&xa, &ya, 2, 1, nullptr, b.neg.data(), cm, nullptr), cm, fn, out,
                "gatherSplits[0] is -1");
  if (n > 1) {
    Buf ya2 = make_buf(loomFloat64, {2, n + 1, 2});
    EXPECT_MISUSE(loomAlltoAllDim(&xa, &ya2.t, 2, 1, nullptr, nullptr, cm, nullptr), cm, fn,
                  ya2.mem, "gatherSplits is NULL", "not divisible");
  }
  Buf ya3 = make_buf(loomFloat64, {3, n, 2}), xa2 = make_buf(loomFloat64, {2, 2, 2 * n});
  EXPECT_MISUSE(loomAlltoAllDim(&xa, &ya3.t, 2, 1, nullptr, nullptr, cm, nullptr), cm, fn, ya3.mem,
                "x.shape[0] is 2 but y.shape[0] is 3");
  EXPECT_MISUSE(loomAlltoAllDim(&xa2.t, &ya, 2, 1, nullptr, nullptr, cm, nullptr), cm, fn, out,
                "x.shape[1] is 2", "gatherSplits");
  Buf w = make_buf(loomFloat64, {4 * n + 1});  // x and y one element apart in w
  int64_t xs[3] = {2, 1, 2 * n}, ys[3] = {2, n, 2};
  loomTensor wx, wy;
  ASSERT_LOOM_OK(loomTensorMake(w.mem.data(), loomFloat64, 3, xs, &wx));
  ASSERT_LOOM_OK(loomTensorMake(w.mem.data() + 8, loomFloat64, 3, ys, &wy));
  EXPECT_MISUSE(loomAlltoAllDim(&wx, &wy, 2, 1, nullptr, nullptr, cm, nullptr), cm, fn, w.mem,
                "no in-place form");
}

// Every misuse returns loomInvalidArgument naming the function and the values, before any
// communication and with the output's bytes unchanged; valid calls work afterwards.
TEST_P(TpCollArgs, MisuseIsRefusedAndTheNextCallWorks) {
  harness::run(
      std::get<0>(GetParam()), std::get<1>(GetParam()),
      [](Ctx& c) {
        ArgBufs b = arg_bufs(c);
        misuse_tensors(c, b);
        misuse_allreduce(c, b);
        misuse_allgather(c, b);
        misuse_reduce_scatter_split(c, b);
        misuse_alltoall(c, b);
        // The communicator is fine: valid calls work and give the right values.
        EXPECT_LOOM_OK(loomAllGatherDim(&b.x.t, &b.y.t, 1, nullptr, c.comm, nullptr));
        EXPECT_EQ(dense(slice(b.y.t, 1, 2 * c.rank, 2)), dense(b.x.t));
        EXPECT_LOOM_OK(loomAllReduceTensor(&b.x.t, &b.o.t, loomMax, c.comm, nullptr));
        EXPECT_LOOM_OK(loomAlltoAllDim(&b.xa.t, &b.ya.t, 2, 1, nullptr, nullptr, c.comm, nullptr));
        Buf z = make_buf(loomFloat64, {2, 1, 2 * c.nranks});
        EXPECT_LOOM_OK(loomAlltoAllDim(&b.ya.t, &z.t, 1, 2, nullptr, nullptr, c.comm, nullptr));
        EXPECT_EQ(dense(z.t), dense(b.xa.t));
      },
      partest::opts());
}

INSTANTIATE_TEST_SUITE_P(Ranks, TpColl,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         partest::ranks_mode_name);

INSTANTIATE_TEST_SUITE_P(Ranks, TpCollArgs,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         partest::ranks_mode_name);

}  // namespace
