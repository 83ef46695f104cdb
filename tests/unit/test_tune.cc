// test_tune.cc - the tuner picks what its cost model predicts fastest.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

extern "C" {
#include "topo/tune.h"
}

namespace {

const tune_consts kConsts = {2.0, 5.0, 20.0, 2, 3.0, 1.0, 0.0, 0.0};
const unsigned kAll = (1u << TUNE_ALGO_COUNT) - 1;
// The families that pass messages through FIFOs (no direct reads).
const unsigned kFifo = kAll & ~((1u << TUNE_ONESHOT) | (1u << TUNE_TWOSHOT) | (1u << TUNE_READ));

TEST(Tune, ChoiceIsTheModelsArgmin) {
  for (int c = 0; c < TUNE_COLL_COUNT; c++)
    for (int n : {2, 3, 4, 5, 8, 13, 16, 64})
      for (size_t bytes = 8; bytes <= (256u << 20); bytes *= 4)
        for (unsigned avail : {kAll, 1u << TUNE_RING, (1u << TUNE_RING) | (1u << TUNE_TREE)}) {
          auto coll = (tune_coll)c;
          tune_algo pick = tune_pick_model(&kConsts, coll, n, bytes, 256 << 10, avail);
          double best = -1;
          for (int a = 0; a < TUNE_ALGO_COUNT; a++) {
            if (!(avail & (1u << a))) continue;
            double t = tune_predict_us(&kConsts, coll, (tune_algo)a, n, bytes, 256 << 10);
            if (t >= 0 && (best < 0 || t < best)) best = t;
          }
          if (best < 0) continue;  // nothing in avail serves coll: any fallback is fine
          ASSERT_TRUE(avail & (1u << pick)) << tune_coll_name(coll) << " n " << n;
          EXPECT_DOUBLE_EQ(tune_predict_us(&kConsts, coll, pick, n, bytes, 256 << 10), best)
              << tune_coll_name(coll) << " n " << n << " bytes " << bytes << " picked "
              << tune_algo_name(pick);
        }
}

TEST(Tune, PredictionsGrowWithSizeAndServeOnlyTheirCollectives) {
  for (int c = 0; c < TUNE_COLL_COUNT; c++)
    for (int a = 0; a < TUNE_ALGO_COUNT; a++) {
      double prev = -1;
      for (size_t bytes = 8; bytes <= (64u << 20); bytes *= 8) {
        double t = tune_predict_us(&kConsts, (tune_coll)c, (tune_algo)a, 8, bytes, 256 << 10);
        if (t < 0) break;
        EXPECT_GE(t, prev) << tune_coll_name((tune_coll)c) << " " << tune_algo_name((tune_algo)a);
        prev = t;
      }
    }
  EXPECT_LT(tune_predict_us(&kConsts, TUNE_GATHER, TUNE_RING, 4, 1024, 256 << 10), 0);
  EXPECT_LT(tune_predict_us(&kConsts, TUNE_ALLTOALLV, TUNE_BRUCK, 4, 1024, 256 << 10), 0);
}

// The shapes the model must have: latency-bound small all-reduces over many
// ranks go to a log-depth algorithm, bandwidth-bound large ones at two
// ranks to the ring.
TEST(Tune, ModelShapes) {
  tune_algo small = tune_pick_model(&kConsts, TUNE_ALLREDUCE, 16, 64, 256 << 10, kFifo);
  EXPECT_TRUE(small == TUNE_TREE || small == TUNE_RHD) << tune_algo_name(small);
  EXPECT_EQ(tune_pick_model(&kConsts, TUNE_ALLREDUCE, 2, 256u << 20, 256 << 10, kFifo), TUNE_RING);
  EXPECT_EQ(tune_pick_model(&kConsts, TUNE_ALLTOALL, 16, 256, 256 << 10, kFifo), TUNE_BRUCK);
  EXPECT_EQ(tune_pick_model(&kConsts, TUNE_ALLTOALL, 4, 64u << 20, 256 << 10, kFifo), TUNE_PAIRWISE);
}

// Direct plans: between processes they read by cross-memory attach, here
// slower than a FIFO's two copies, so large all-reduces stay on the ring;
// thread ranks read with loads, one copy, and take the two-shot plan.
TEST(Tune, DirectPlansFollowTheReadBandwidth) {
  tune_consts threads = kConsts;
  threads.read_gbps = 2 * kConsts.copy_gbps;
  EXPECT_EQ(tune_pick_model(&kConsts, TUNE_ALLREDUCE, 2, 256u << 20, 256 << 10, kAll), TUNE_RING);
  EXPECT_EQ(tune_pick_model(&threads, TUNE_ALLREDUCE, 2, 256u << 20, 256 << 10, kAll), TUNE_TWOSHOT);
  EXPECT_EQ(tune_pick_model(&threads, TUNE_ALLGATHER, 4, 64u << 20, 256 << 10, kAll), TUNE_READ);
}

TEST(Tune, NamesRoundTrip) {
  for (int a = 0; a < TUNE_ALGO_COUNT; a++)
    EXPECT_EQ(tune_algo_parse(tune_algo_name((tune_algo)a)), a);
  EXPECT_EQ(tune_algo_parse("nonsense"), -1);
}

TEST(Tune, CalibrationGivesUsableConstants) {
  tune_consts k{};
  tune_calibrate(&k);
  EXPECT_GT(k.step_us, 0);
  EXPECT_GT(k.copy_gbps, 0);
  EXPECT_GT(k.reduce_gbps, 0);
  EXPECT_GE(k.ncpus, 1);
}

}  // namespace
