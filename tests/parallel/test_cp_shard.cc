// Section 4 of PARALLEL.md: loomCpShard, loomCpUnshard and loomCpPositions - which positions a
// rank holds under each layout, the copy of them, and the gather back.
#include <numeric>

#include "par_test.h"

namespace {

using partest::Ctx;
using partest::make;
using partest::Mode;
using partest::RanksMode;

// Position of local row i of rank r, from the layout's definition (section 4).
int64_t position(loomCpLayout_t l, int r, int P, int64_t S, int64_t i) {
  if (l == loomCpContiguous) return r * (S / P) + i;
  int64_t C = S / (2 * P);
  return i < C ? r * C + i : (2 * P - 1 - r) * C + (i - C);
}

TEST(CpShard, PositionsFollowTheLayouts) {
  for (int P = 1; P <= 5; P++)
    for (loomCpLayout_t l : {loomCpContiguous, loomCpZigzag}) {
      int64_t S = 2 * P * 3;
      std::vector<int> seen((size_t)S, 0);
      for (int r = 0; r < P; r++) {
        std::vector<int64_t> pos((size_t)(S / P), -1);
        ASSERT_LOOM_OK(loomCpPositions(S, l, r, P, pos.data()));
        for (int64_t i = 0; i < S / P; i++) {
          EXPECT_EQ(pos[(size_t)i], position(l, r, P, S, i)) << "P " << P << " rank " << r;
          seen[(size_t)pos[(size_t)i]]++;
        }
      }
      for (int64_t j = 0; j < S; j++) EXPECT_EQ(seen[(size_t)j], 1) << "position " << j;
    }
  // Zig-zag rank r holds chunks r and 2P-1-r: P = 3, C = 2, rank 1 holds 2,3 and 8,9.
  std::vector<int64_t> pos(4);
  ASSERT_LOOM_OK(loomCpPositions(12, loomCpZigzag, 1, 3, pos.data()));
  EXPECT_EQ(pos, (std::vector<int64_t>{2, 3, 8, 9}));
}

// Shard of an iota along seqDim (a middle dim, every dtype size) is the positions, and the
// shard of a strided view equals the shard of its copy.
TEST(CpShard, ShardIsThePositionsRowsAnyDtypeAndStride) {
  const int P = 3;
  const int64_t S = 12;
  for (loomCpLayout_t l : {loomCpContiguous, loomCpZigzag})
    for (int r = 0; r < P; r++) {
      std::vector<int64_t> pos((size_t)(S / P));
      ASSERT_LOOM_OK(loomCpPositions(S, l, r, P, pos.data()));
      // int64 [2, S, 3] holding its position along dim 1, as a view with padded rows.
      std::vector<int64_t> big(2 * S * 4, -7);
      loomTensor full = make(big, loomInt64, {2, S, 4});
      full.shape[2] = 3;  // rows padded by one element: not contiguous
      for (int64_t b = 0; b < 2; b++)
        for (int64_t s = 0; s < S; s++)
          for (int64_t e = 0; e < 3; e++) big[(size_t)((b * S + s) * 4 + e)] = s * 10 + e;
      std::vector<int64_t> loc((size_t)(2 * (S / P) * 3), -1);
      loomTensor local = make(loc, loomInt64, {2, S / P, 3});
      ASSERT_LOOM_OK(loomCpShard(&full, 1, l, r, P, &local, nullptr));
      for (int64_t b = 0; b < 2; b++)
        for (int64_t i = 0; i < S / P; i++)
          for (int64_t e = 0; e < 3; e++)
            EXPECT_EQ(loc[(size_t)((b * (S / P) + i) * 3 + e)], pos[(size_t)i] * 10 + e);
      // int8 [S] with seqDim 0.
      std::vector<int8_t> f8((size_t)S), l8((size_t)(S / P));
      std::iota(f8.begin(), f8.end(), 0);
      loomTensor t8 = make(f8, loomInt8, {S}), u8 = make(l8, loomInt8, {S / P});
      ASSERT_LOOM_OK(loomCpShard(&t8, 0, l, r, P, &u8, nullptr));
      for (int64_t i = 0; i < S / P; i++) EXPECT_EQ(l8[(size_t)i], pos[(size_t)i]);
    }
}

class CpShardRanks : public ::testing::TestWithParam<RanksMode> {};

// Unshard(Shard(X)) == X bitwise, for float16 (raw bits, NaN patterns included), float64 and
// int8, seqDim 0 and 2, both layouts; the zig-zag shard of rank r is chunks r and 2P-1-r.
TEST_P(CpShardRanks, UnshardOfShardIsBitwiseTheInput) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        int P = c.nranks, r = c.rank;
        int64_t S = 2 * P * 2, C = S / (2 * P);
        for (loomCpLayout_t l : {loomCpContiguous, loomCpZigzag}) {
          // uint16 bits as float16 [3, 2, S] split along dim 2.
          std::vector<uint16_t> x((size_t)(3 * 2 * S)), loc((size_t)(3 * 2 * S / P)),
              back(x.size());
          for (size_t i = 0; i < x.size(); i++) x[i] = (uint16_t)(i * 2654435761u >> 7);
          loomTensor tx = make(x, loomFloat16, {3, 2, S}),
                     tl = make(loc, loomFloat16, {3, 2, S / P}),
                     tb = make(back, loomFloat16, {3, 2, S});
          ASSERT_LOOM_OK(loomCpShard(&tx, 2, l, r, P, &tl, nullptr));
          ASSERT_LOOM_OK(loomCpUnshard(&tl, 2, l, &tb, c.comm, nullptr));
          EXPECT_EQ(back, x);
          // float64 [S, 5] along dim 0, and which chunks this rank holds.
          std::vector<double> y((size_t)(S * 5)), yl((size_t)(S / P * 5)), yb(y.size());
          for (size_t i = 0; i < y.size(); i++) y[i] = (double)i / 3.0;
          loomTensor ty = make(y, loomFloat64, {S, 5}), tyl = make(yl, loomFloat64, {S / P, 5}),
                     tyb = make(yb, loomFloat64, {S, 5});
          ASSERT_LOOM_OK(loomCpShard(&ty, 0, l, r, P, &tyl, nullptr));
          ASSERT_LOOM_OK(loomCpUnshard(&tyl, 0, l, &tyb, c.comm, nullptr));
          EXPECT_EQ(yb, y);
          if (l == loomCpZigzag)
            for (int64_t i = 0; i < C * 5; i++) {
              EXPECT_EQ(yl[(size_t)i], y[(size_t)(r * C * 5 + i)]) << "chunk r";
              EXPECT_EQ(yl[(size_t)(C * 5 + i)], y[(size_t)((2 * P - 1 - r) * C * 5 + i)])
                  << "chunk 2P-1-r";
            }
          // int8 [S] along dim 0.
          std::vector<int8_t> z((size_t)S), zl((size_t)(S / P)), zb((size_t)S);
          std::iota(z.begin(), z.end(), (int8_t)-5);
          loomTensor tz = make(z, loomInt8, {S}), tzl = make(zl, loomInt8, {S / P}),
                     tzb = make(zb, loomInt8, {S});
          ASSERT_LOOM_OK(loomCpShard(&tz, 0, l, r, P, &tzl, nullptr));
          ASSERT_LOOM_OK(loomCpUnshard(&tzl, 0, l, &tzb, c.comm, nullptr));
          EXPECT_EQ(zb, z);
        }
      },
      partest::opts());
}

INSTANTIATE_TEST_SUITE_P(CpShard, CpShardRanks,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         partest::ranks_mode_name);

}  // namespace
