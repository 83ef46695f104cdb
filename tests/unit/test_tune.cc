// test_tune.cc - the tuner picks what its cost model predicts fastest.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" {
#include "topo/tune.h"
}

namespace {

const tune_consts kConsts = {2.0, 5.0, 20.0, 2, 3.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0, 0};
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
  EXPECT_TRUE(small == TUNE_TREE || small == TUNE_RHD || small == TUNE_DOUBLING)
      << tune_algo_name(small);
  EXPECT_EQ(tune_pick_model(&kConsts, TUNE_ALLREDUCE, 2, 256u << 20, 256 << 10, kFifo), TUNE_RING);
  EXPECT_EQ(tune_pick_model(&kConsts, TUNE_ALLTOALL, 16, 256, 256 << 10, kFifo), TUNE_BRUCK);
  // Two ranks, a few bytes: one exchange beats the two steps of the others.
  EXPECT_EQ(tune_pick_model(&kConsts, TUNE_ALLREDUCE, 2, 64, 256 << 10, kFifo), TUNE_DOUBLING);
  EXPECT_EQ(tune_pick_model(&kConsts, TUNE_ALLTOALL, 4, 64u << 20, 256 << 10, kFifo),
            TUNE_PAIRWISE);
}

// Direct plans: between processes they read by cross-memory attach, here
// slower than a FIFO's two copies, so large all-reduces stay on the ring;
// thread ranks read with loads, one copy, and take the two-shot plan.
TEST(Tune, DirectPlansFollowTheReadBandwidth) {
  tune_consts threads = kConsts;
  threads.read_gbps = 2 * kConsts.copy_gbps;
  EXPECT_EQ(tune_pick_model(&kConsts, TUNE_ALLREDUCE, 2, 256u << 20, 256 << 10, kAll), TUNE_RING);
  EXPECT_EQ(tune_pick_model(&threads, TUNE_ALLREDUCE, 2, 256u << 20, 256 << 10, kAll),
            TUNE_TWOSHOT);
  EXPECT_EQ(tune_pick_model(&threads, TUNE_ALLGATHER, 4, 64u << 20, 256 << 10, kAll), TUNE_READ);
}

// Two hosts of two ranks, numbered host by host, on a 10 Gbit/s network:
// flat plans pay the network on every step, the hierarchical all-reduce
// crosses it with less, and is offered only to even layouts of more than
// one rank per host.
tune_consts TwoByTwo() {
  tune_consts k = kConsts;
  k.ncpus = 4;
  k.net_gbps = 1.25;
  k.net_us = 25;
  k.nhosts = 2;
  k.local = 2;
  k.even = 1;
  k.ring_cross = 1;
  return k;
}

TEST(Tune, TheNetworkCostsMoreThanSharedMemory) {
  tune_consts one = TwoByTwo();
  one.nhosts = 1;
  one.local = 4;
  tune_consts two = TwoByTwo();
  for (int c = 0; c < TUNE_COLL_COUNT; c++)
    for (int a = 0; a < TUNE_ALGO_COUNT; a++)
      for (size_t bytes = 8; bytes <= (64u << 20); bytes *= 16) {
        if (a == TUNE_HIER) continue;
        double t1 = tune_predict_us(&one, (tune_coll)c, (tune_algo)a, 4, bytes, 256 << 10);
        double t2 = tune_predict_us(&two, (tune_coll)c, (tune_algo)a, 4, bytes, 256 << 10);
        if (t1 < 0) continue;
        EXPECT_GT(t2, t1) << tune_coll_name((tune_coll)c) << " " << tune_algo_name((tune_algo)a)
                          << " " << bytes;
      }
  // A ring whose every edge leaves its host shares the network two ways.
  tune_consts interleaved = two;
  interleaved.ring_cross = 2;
  EXPECT_GT(tune_predict_us(&interleaved, TUNE_ALLREDUCE, TUNE_RING, 4, 64u << 20, 256 << 10),
            1.5 * tune_predict_us(&two, TUNE_ALLREDUCE, TUNE_RING, 4, 64u << 20, 256 << 10));
}

TEST(Tune, HierarchicalAllReduceAcrossHosts) {
  tune_consts k = TwoByTwo();
  for (size_t bytes : {size_t(64), size_t(64) << 10, size_t(64) << 20})
    EXPECT_EQ(tune_pick_model(&k, TUNE_ALLREDUCE, 4, bytes, 256 << 10, kFifo | (1u << TUNE_HIER)),
              TUNE_HIER)
        << bytes;
  // Large: the network carries 2(H-1)/H of the buffer per host instead of
  // the flat ring's 2(N-1)/N, 1.0 against 1.5, less what its phases over
  // shared memory cost.
  double flat = tune_predict_us(&k, TUNE_ALLREDUCE, TUNE_RING, 4, 256u << 20, 256 << 10);
  double hier = tune_predict_us(&k, TUNE_ALLREDUCE, TUNE_HIER, 4, 256u << 20, 256 << 10);
  EXPECT_GT(flat / hier, 1.2);
  EXPECT_LT(flat / hier, 1.6);
  // Only all-reduce, only several ranks on each of several hosts, evenly.
  EXPECT_LT(tune_predict_us(&k, TUNE_ALLGATHER, TUNE_HIER, 4, 1024, 256 << 10), 0);
  tune_consts uneven = k;
  uneven.even = 0;
  EXPECT_LT(tune_predict_us(&uneven, TUNE_ALLREDUCE, TUNE_HIER, 4, 1024, 256 << 10), 0);
  tune_consts single = k;
  single.local = 1;
  EXPECT_LT(tune_predict_us(&single, TUNE_ALLREDUCE, TUNE_HIER, 2, 1024, 256 << 10), 0);
  EXPECT_LT(tune_predict_us(&kConsts, TUNE_ALLREDUCE, TUNE_HIER, 4, 1024, 256 << 10), 0);
  // Across many hosts, a small part goes by a log-depth plan, a large one
  // between two hosts by the ring.
  tune_consts wide = k;
  wide.nhosts = 16;
  tune_algo small = tune_hier_cross(&wide, 16, 64, 256 << 10);
  EXPECT_TRUE(small == TUNE_TREE || small == TUNE_RHD || small == TUNE_DOUBLING)
      << tune_algo_name(small);
  EXPECT_EQ(tune_hier_cross(&k, 2, 64u << 20, 256 << 10), TUNE_RING);
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

// LOOM_PROTO: the host path's one protocol by any case, or nothing; any
// other name is refused in one line naming the value and the protocols.
TEST(Tune, ProtoCheck) {
  for (const char* ok : {"", "simple", "SIMPLE"})
    EXPECT_EQ(tune_proto_check(ok), loomSuccess) << ok;
  EXPECT_EQ(tune_proto_parse("Simple"), TUNE_PROTO_SIMPLE);
  EXPECT_STREQ(tune_proto_name(TUNE_PROTO_SIMPLE), "simple");
  for (const char* bad : {"ll128", "ll", "simpler"}) {
    setenv("LOOM_PROTO", bad, 1);  // what the error text quotes
    EXPECT_EQ(tune_proto_check(bad), loomInvalidArgument) << bad;
    std::string err = loomGetLastError(NULL);
    EXPECT_NE(err.find(std::string("LOOM_PROTO=") + bad + ": '" + bad + "' is not a protocol"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("accepted: simple"), std::string::npos) << err;
  }
  unsetenv("LOOM_PROTO");
}

}  // namespace
