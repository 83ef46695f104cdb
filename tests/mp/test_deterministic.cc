// test_deterministic.cc - LOOM_DETERMINISTIC / config.deterministic: every
// reduction (all-reduce out of place and in place, reduce, reduce-scatter) of
// every float type (float16, bfloat16, float32, float64, both float8s) and op
// (sum, prod, max, min, avg, PreMulSum) is bit for bit the fold of the ranks'
// inputs in rank order 0, 1, ..., n-1, each op computed as docs/DESIGN.md
// says (in float for the narrow types, rounded to nearest even after each
// op), at 1 to 8 ranks, processes and threads, and under forced algorithms,
// small slices (several pieces) and the socket transport, none of which may
// change a bit. The inputs are random across many magnitudes, so any other
// order rounds differently; RingWithoutTheMode shows it does, with the same
// inputs and check.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "harness.h"
#include "values.h"

namespace {

using harness::Ctx;
using harness::Mode;
using harness::Opts;

const loomDataType_t kTypes[] = {loomFloat16, loomBfloat16,   loomFloat32,
                                 loomFloat64, loomFloat8e4m3, loomFloat8e5m2};
constexpr double kScalar = 0.75;  // PreMulSum's, exact in every float type

size_t esize(loomDataType_t t) {
  return t == loomFloat64                               ? 8
         : t == loomFloat32                             ? 4
         : (t == loomFloat8e4m3 || t == loomFloat8e5m2) ? 1
                                                        : 2;
}

// Nearest code (ties to even) of a narrow format, by a search in its sorted
// finite positive values (decoded by values.h, not by the library).
class Narrow {
 public:
  explicit Narrow(loomDataType_t t) {
    values::Format f = values::format_of(t);
    sign_ = 1u << (f.ebits + f.mbits);
    for (uint32_t c = 0; c < 2 * sign_; c++) {
      double v = values::decode_bits(c, f.ebits, f.mbits, f.fn);
      dec_.push_back(v);
      if (c < sign_ && std::isfinite(v)) pos_.push_back({v, c});
    }
    std::sort(pos_.begin(), pos_.end());
  }
  double decode(uint32_t c) const { return dec_[c]; }
  uint32_t encode(double x) const {
    uint32_t s = std::signbit(x) ? sign_ : 0;
    double a = std::fabs(x);
    auto hi = std::lower_bound(pos_.begin(), pos_.end(), std::make_pair(a, 0u));
    if (hi == pos_.end()) return s | pos_.back().second;  // never reached: inputs stay small
    if (hi == pos_.begin() || hi->first == a) return s | hi->second;
    auto lo = hi - 1;
    double dl = a - lo->first, dh = hi->first - a;
    if (dl < dh || (dl == dh && (lo->second & 1) == 0)) return s | lo->second;
    return s | hi->second;
  }

 private:
  uint32_t sign_;
  std::vector<double> dec_;
  std::vector<std::pair<double, uint32_t>> pos_;
};

const Narrow& narrow_of(loomDataType_t t) {
  static const Narrow h(loomFloat16), b(loomBfloat16), e4(loomFloat8e4m3), e5(loomFloat8e5m2);
  return t == loomFloat16 ? h : t == loomBfloat16 ? b : t == loomFloat8e4m3 ? e4 : e5;
}

// Elements as their codes (narrow) or values, to compute as the kernels do.
double load(loomDataType_t t, const void* b, size_t i) {
  switch (t) {
    case loomFloat32:
      return ((const float*)b)[i];
    case loomFloat64:
      return ((const double*)b)[i];
    case loomFloat16:
    case loomBfloat16:
      return narrow_of(t).decode(((const uint16_t*)b)[i]);
    default:
      return narrow_of(t).decode(((const uint8_t*)b)[i]);
  }
}
void store(loomDataType_t t, void* b, size_t i, double v) {
  switch (t) {
    case loomFloat32:
      ((float*)b)[i] = (float)v;
      break;
    case loomFloat64:
      ((double*)b)[i] = v;
      break;
    case loomFloat16:
    case loomBfloat16:
      ((uint16_t*)b)[i] = (uint16_t)narrow_of(t).encode(v);
      break;
    default:
      ((uint8_t*)b)[i] = (uint8_t)narrow_of(t).encode(v);
      break;
  }
}

// One op as the kernels compute it: in double for float64, in float for the
// rest; the caller rounds to the type by store().
double apply(loomDataType_t t, loomRedOp_t op, double a, double b) {
  if (t == loomFloat64) {
    if (op == loomProd) return a * b;
    if (op == loomMax) return std::fmax(a, b);
    if (op == loomMin) return std::fmin(a, b);
    return a + b;
  }
  float x = (float)a, y = (float)b;
  if (op == loomProd) return (double)(x * y);
  if (op == loomMax) return (double)std::fmax(x, y);
  if (op == loomMin) return (double)std::fmin(x, y);
  return (double)(x + y);
}

// Rank q's input: random signs and mantissas over many magnitudes (products:
// near 1, so that n of them stay finite). Every rank makes every rank's.
std::vector<uint8_t> input(loomDataType_t t, loomRedOp_t op, int q, size_t count, int seed) {
  std::vector<uint8_t> b(count * esize(t));
  std::mt19937_64 g((uint64_t)seed * 1000003u + (uint64_t)q * 7919u + (uint64_t)t * 31u + op);
  double range = t == loomFloat8e4m3 || t == loomFloat8e5m2 ? 4 : t == loomFloat16 ? 10 : 20;
  std::uniform_real_distribution<double> mant(1.0, 2.0), expo(-range, range / 2);
  for (size_t i = 0; i < count; i++) {
    double v = op == loomProd ? std::ldexp(mant(g), -1 + (int)(g() % 2))
                              : std::ldexp(mant(g), (int)expo(g));
    store(t, b.data(), i, (g() & 1) ? -v : v);
  }
  return b;
}

// The sequential fold of element i over ranks 0..n-1, rounded to the type
// after every op: the result bits LOOM_DETERMINISTIC promises.
std::vector<uint8_t> fold(loomDataType_t t, loomRedOp_t op, int n, size_t count, int seed) {
  bool premul = op >= loomNumOps;
  loomRedOp_t base = premul || op == loomAvg ? loomSum : op;
  std::vector<std::vector<uint8_t>> in;
  for (int q = 0; q < n; q++) in.push_back(input(t, base == op ? op : loomSum, q, count, seed));
  std::vector<uint8_t> acc(count * esize(t));
  for (size_t i = 0; i < count; i++) {
    uint8_t cell[8];
    for (int q = 0; q < n; q++) {
      double x = load(t, in[(size_t)q].data(), i);
      if (premul) {  // rank q scales its input first, in the type
        store(t, cell, 0, apply(t, loomProd, x, kScalar));
        x = load(t, cell, 0);
      }
      double v = q == 0 ? x : apply(t, base, load(t, acc.data(), i), x);
      store(t, acc.data(), i, v);
    }
    if (op == loomAvg) {
      double a = load(t, acc.data(), i);
      store(t, acc.data(), i, t == loomFloat64 ? a / n : (double)((float)a / (float)n));
    }
  }
  return acc;
}

struct Mismatch {
  size_t index = 0, count = 0;
};
Mismatch compare(const void* got, const void* want, size_t count, size_t es) {
  Mismatch m;
  for (size_t i = 0; i < count; i++)
    if (std::memcmp((const char*)got + i * es, (const char*)want + i * es, es) != 0) {
      if (m.count++ == 0) m.index = i;
    }
  return m;
}

loomRedOp_t make_op(loomRedOp_t op, loomDataType_t t, loomComm_t comm) {
  if (op < loomNumOps) return op;
  std::vector<uint8_t> s(8);
  store(t, s.data(), 0, kScalar);
  loomRedOp_t out = loomSum;
  EXPECT_EQ(loomRedOpCreatePreMulSum(&out, s.data(), t, loomScalarHostImmediate, comm),
            loomSuccess);
  return out;
}

// Every reduction of every float type and op on counts; returns the number of
// calls whose result was not the rank-order fold, bit for bit (and reports
// the first few).
int run_all(Ctx& c, const std::vector<size_t>& counts, bool expect_exact) {
  int bad = 0;
  const loomRedOp_t ops[] = {loomSum, loomProd, loomMax, loomMin, loomAvg, loomNumOps};
  for (loomDataType_t t : kTypes)
    for (loomRedOp_t op0 : ops)
      for (size_t count : counts)
        for (int coll = 0; coll < 4; coll++) {
          int n = c.nranks, r = c.rank, root = n - 1;
          size_t es = esize(t), total = coll == 3 ? count * (size_t)n : count;
          loomRedOp_t in_op = op0 == loomProd || op0 == loomMax || op0 == loomMin ? op0 : loomSum;
          // Reduce-scatter's input is n blocks, from a seed of its own.
          int seed = coll == 3 ? 2 : 1;
          std::vector<uint8_t> mine = input(t, in_op, r, total, seed);
          std::vector<uint8_t> want = fold(t, op0, n, total, seed);
          std::vector<uint8_t> recv(total * es, 0xEE);
          loomRedOp_t op = make_op(op0, t, c.comm);
          loomResult_t res = loomSuccess;
          const void* expect = want.data();
          size_t cmp = count;
          if (coll == 0) {
            res = loomAllReduce(mine.data(), recv.data(), count, t, op, c.comm, nullptr);
          } else if (coll == 1) {  // in place
            recv = mine;
            res = loomAllReduce(recv.data(), recv.data(), count, t, op, c.comm, nullptr);
          } else if (coll == 2) {
            res = loomReduce(mine.data(), recv.data(), count, t, op, root, c.comm, nullptr);
            if (r != root) cmp = 0;
          } else {
            res = loomReduceScatter(mine.data(), recv.data(), count, t, op, c.comm, nullptr);
            expect = want.data() + (size_t)r * count * es;
          }
          if (op0 >= loomNumOps) loomRedOpDestroy(op, c.comm);
          EXPECT_EQ(res, loomSuccess) << loomGetLastError(c.comm);
          Mismatch m = compare(recv.data(), expect, cmp, es);
          if (m.count) {
            bad++;
            if (expect_exact && bad <= 5)
              ADD_FAILURE() << "rank " << r << " of " << n << ": coll " << coll << " type " << t
                            << " op " << op0 << " count " << count << ": " << m.count
                            << " elements differ from the rank-order fold, first [" << m.index
                            << "] " << load(t, recv.data(), m.index) << " against "
                            << load(t, expect, m.index);
          }
        }
  return bad;
}

const std::vector<size_t> kCounts = {1, 333, 4099};

Opts det_opts(std::vector<std::pair<std::string, std::string>> env = {}) {
  Opts o;
  o.deterministic = 1;
  o.env = std::move(env);
  return o;
}

class Deterministic : public ::testing::TestWithParam<harness::RanksMode> {};

TEST_P(Deterministic, EveryReductionIsTheRankOrderFold) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode, [](Ctx& c) { EXPECT_EQ(run_all(c, kCounts, true), 0); }, det_opts());
}

INSTANTIATE_TEST_SUITE_P(Ranks, Deterministic,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 6, 7, 8),
                                            ::testing::Values(Mode::Proc)),
                         harness::ranks_mode_name);
INSTANTIATE_TEST_SUITE_P(Threads, Deterministic,
                         ::testing::Combine(::testing::Values(3, 8),
                                            ::testing::Values(Mode::Thread)),
                         harness::ranks_mode_name);

// Forced families, slices small enough that each part is several pieces, and
// the socket transport: not a bit changes. The variable turns the mode on too.
// (One harness run per test: process ranks re-run the test's first one.)
struct Setting {
  const char* name;
  std::vector<std::pair<std::string, std::string>> env;
  bool by_config;
};
const Setting kSettings[] = {
    {"ring", {{"LOOM_ALGO", "ring"}}, true},
    {"direct", {{"LOOM_ALGO", "allreduce:oneshot;reducescatter:read;reduce:tree"}}, true},
    {"rhd_small_slices", {{"LOOM_ALGO", "rhd"}, {"LOOM_SLICE_SIZE", "256"}}, true},
    {"socket", {{"LOOM_TRANSPORTS", "socket"}, {"LOOM_SLICE_SIZE", "1K"}}, true},
    {"by_variable", {{"LOOM_DETERMINISTIC", "1"}}, false},
};

class DeterministicSettings : public ::testing::TestWithParam<int> {};

TEST_P(DeterministicSettings, NothingChangesABit) {
  const Setting& s = kSettings[GetParam()];
  Opts o = det_opts(s.env);
  if (!s.by_config) o.deterministic = LOOM_CONFIG_UNDEF_INT;
  harness::run(
      4, Mode::Proc, [](Ctx& c) { EXPECT_EQ(run_all(c, {4099}, true), 0); }, o);
}

INSTANTIATE_TEST_SUITE_P(Env, DeterministicSettings, ::testing::Range(0, 5),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(kSettings[info.param].name);
                         });

// Lines fold in rank order too, and serve the mode where they fit: forced,
// at sizes they hold (and past them, where the ordered family takes over).
TEST(DeterministicLines, LinesAreTheRankOrderFold) {
  harness::run(
      4, Mode::Proc,
      [](Ctx& c) {
        EXPECT_EQ(run_all(c, {1, 333, 2047}, true), 0);
      },
      det_opts({{"LOOM_ALGO", "allreduce:lines;reducescatter:lines"}}));
}

// The same inputs and check without the mode: a ring folds each chunk
// starting from another rank, and the results differ from the rank-order
// fold. (What the test above would miss if the mode did nothing.)
TEST(DeterministicControl, RingWithoutTheModeDiffers) {
  Opts o;
  o.deterministic = 0;
  o.env = {{"LOOM_ALGO", "ring"}};
  harness::run(
      4, Mode::Proc, [](Ctx& c) { EXPECT_GT(run_all(c, {4099}, false), 0); }, o);
}

}  // namespace
