// test_tune.cc - the tuner picks what its cost model predicts fastest.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define UNDER_VALGRIND() RUNNING_ON_VALGRIND
#else
#define UNDER_VALGRIND() 0
#endif

extern "C" {
#include "topo/tune.h"
}

namespace {

const tune_consts kConsts = {2.0, 5.0, 20.0, 2, 3.0, 1.0, 1.25, 0.125, 0.0, 0.0, 0.0,
                             0.0, 0,   0,    0, 0,   {},  {},   {},    {},  0.0, 0};
const unsigned kAll = (1u << TUNE_ALGO_COUNT) - 1;
// The families that pass messages through FIFOs (no direct reads, no lines).
const unsigned kFifo =
    kAll & ~((1u << TUNE_ONESHOT) | (1u << TUNE_TWOSHOT) | (1u << TUNE_READ) | (1u << TUNE_LINES));

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

// The tree all-reduce is paced by its busiest rank: at 2 ranks a slice in and one out a
// round, the ring's volume; from 3 ranks four transfers a round, 2S in all against the
// ring's 2(n-1)/n S, so a large buffer goes by the ring (costed at two, the tree won at 4
// ranks from 16 MiB where it took 1.1-1.5x the ring's time).
TEST(Tune, TheTreesBusiestRankMovesFourSlicesARoundFromThreeRanks) {
  for (int n : {3, 4, 8}) {
    double tree = tune_predict_us(&kConsts, TUNE_ALLREDUCE, TUNE_TREE, n, 256u << 20, 256 << 10);
    double ring = tune_predict_us(&kConsts, TUNE_ALLREDUCE, TUNE_RING, n, 256u << 20, 256 << 10);
    EXPECT_GT(tree, ring) << n << " ranks";
  }
  double tree2 = tune_predict_us(&kConsts, TUNE_ALLREDUCE, TUNE_TREE, 2, 256u << 20, 256 << 10);
  double ring2 = tune_predict_us(&kConsts, TUNE_ALLREDUCE, TUNE_RING, 2, 256u << 20, 256 << 10);
  EXPECT_LT(tree2, 1.3 * ring2);
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
        if (a == TUNE_HIER || a == TUNE_LINES) continue;  // one kind of host only, each
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

// Lines: the few bytes of every rank at once, one hand-off instead of a
// step per exchange, up to what the lines hold, on one host only.
TEST(Tune, LinesForSmallMessagesOnOneHost) {
  for (tune_coll c : {TUNE_ALLREDUCE, TUNE_ALLGATHER, TUNE_REDUCESCATTER, TUNE_BROADCAST,
                      TUNE_REDUCE, TUNE_ALLTOALL})
    for (int n : {2, 4, 8}) {
      EXPECT_EQ(tune_pick_model(&kConsts, c, n, 64, 256 << 10, kAll), TUNE_LINES)
          << tune_coll_name(c) << " " << n;
      size_t over = c == TUNE_ALLGATHER ? (TUNE_LINES_BYTES + 4) * n : TUNE_LINES_BYTES + 4;
      EXPECT_LT(tune_predict_us(&kConsts, c, TUNE_LINES, n, over, 256 << 10), 0)
          << tune_coll_name(c) << " " << n;
    }
  // Gather and scatter have no lines plan.
  EXPECT_LT(tune_predict_us(&kConsts, TUNE_GATHER, TUNE_LINES, 2, 64, 256 << 10), 0);
  tune_consts two = TwoByTwo();
  EXPECT_LT(tune_predict_us(&two, TUNE_ALLREDUCE, TUNE_LINES, 4, 64, 256 << 10), 0);
}

// The bytes through lines cost their own calibrated rate (calibrate.c times
// the transport's code between two threads), not the FIFO's copy: where
// lines are slow, the FIFO plans take over from fewer bytes; every size
// that lines serve costs more with them slower.
TEST(Tune, LinesCostTheirCalibratedRate) {
  tune_consts fast = kConsts, slow = kConsts;
  fast.lines_gbps = 20;
  slow.lines_gbps = 0.5;
  for (tune_coll c : {TUNE_ALLREDUCE, TUNE_REDUCE, TUNE_ALLTOALL, TUNE_BROADCAST}) {
    EXPECT_EQ(tune_pick_model(&fast, c, 2, 4096, 256 << 10, kAll), TUNE_LINES) << tune_coll_name(c);
    EXPECT_NE(tune_pick_model(&slow, c, 2, 4096, 256 << 10, kAll), TUNE_LINES) << tune_coll_name(c);
    EXPECT_EQ(tune_pick_model(&slow, c, 2, 8, 256 << 10, kAll), TUNE_LINES) << tune_coll_name(c);
    for (size_t bytes = 8; bytes <= TUNE_LINES_BYTES; bytes *= 2)
      EXPECT_GT(tune_predict_us(&slow, c, TUNE_LINES, 2, bytes, 256 << 10),
                tune_predict_us(&fast, c, TUNE_LINES, 2, bytes, 256 << 10))
          << tune_coll_name(c) << " " << bytes;
  }
  // A tuning file without the figures: a quarter of the copy bandwidth, a
  // quarter of the step less its fixed part.
  tune_consts none = kConsts, quarter = kConsts;
  none.lines_gbps = none.lines_step = 0;
  quarter.lines_gbps = kConsts.copy_gbps / 4;
  quarter.lines_step = (kConsts.step_us - 1) / 4 / kConsts.step_us;
  EXPECT_DOUBLE_EQ(tune_predict_us(&none, TUNE_ALLREDUCE, TUNE_LINES, 4, 1024, 256 << 10),
                   tune_predict_us(&quarter, TUNE_ALLREDUCE, TUNE_LINES, 4, 1024, 256 << 10));
  // A lines call that costs as much as a FIFO's exchange makes lines lose
  // to the one-step plans even at 8 bytes; a cheap one wins there.
  tune_consts dear = kConsts;
  dear.lines_step = 1.5;
  EXPECT_NE(tune_pick_model(&dear, TUNE_ALLREDUCE, 2, 8, 256 << 10, kAll), TUNE_LINES);
  EXPECT_EQ(tune_pick_model(&kConsts, TUNE_ALLREDUCE, 2, 8, 256 << 10, kAll), TUNE_LINES);
}

// With more ranks on a host than cores, an exchange whose peer holds no core
// costs a hand-off of one (handoff_us, measured between two threads on one
// CPU): the symmetric collectives' plans with fewer exchanges win where the
// step alone would not decide; rooted collectives pipeline across calls and
// are not charged; ranks that have a core each are not charged at all.
TEST(Tune, HandOffsCostTheExchangesOfOversubscribedRanks) {
  tune_consts h = kConsts;
  h.handoff_us = 16;  // step 2 us, 4 ranks on 2 cpus: 12 us more an exchange
  for (int c = 0; c < TUNE_COLL_COUNT; c++)
    for (int a = 0; a < TUNE_ALGO_COUNT; a++)
      for (size_t bytes = 8; bytes <= (64u << 20); bytes *= 16) {
        auto coll = (tune_coll)c;
        auto algo = (tune_algo)a;
        double t0 = tune_predict_us(&kConsts, coll, algo, 2, bytes, 256 << 10);
        EXPECT_DOUBLE_EQ(tune_predict_us(&h, coll, algo, 2, bytes, 256 << 10), t0)
            << tune_coll_name(coll) << " " << tune_algo_name(algo) << " " << bytes;
        double t4 = tune_predict_us(&kConsts, coll, algo, 4, bytes, 256 << 10);
        double h4 = tune_predict_us(&h, coll, algo, 4, bytes, 256 << 10);
        if (t4 < 0) {
          EXPECT_LT(h4, 0);
          continue;
        }
        bool rooted = coll == TUNE_BROADCAST || coll == TUNE_REDUCE || coll == TUNE_GATHER ||
                      coll == TUNE_SCATTER;
        if (rooted)
          EXPECT_DOUBLE_EQ(h4, t4) << tune_coll_name(coll) << " " << tune_algo_name(algo);
        else
          EXPECT_GE(h4, t4 + 12) << tune_coll_name(coll) << " " << tune_algo_name(algo);
      }
  // Exchanges at 4 ranks: ring all-reduce 6, doubling 2; pairwise 3, Bruck 2.
  EXPECT_DOUBLE_EQ(tune_predict_us(&h, TUNE_ALLREDUCE, TUNE_RING, 4, 64, 256 << 10) -
                       tune_predict_us(&kConsts, TUNE_ALLREDUCE, TUNE_RING, 4, 64, 256 << 10),
                   6 * 12);
  EXPECT_DOUBLE_EQ(tune_predict_us(&h, TUNE_ALLTOALL, TUNE_BRUCK, 4, 64, 256 << 10) -
                       tune_predict_us(&kConsts, TUNE_ALLTOALL, TUNE_BRUCK, 4, 64, 256 << 10),
                   2 * 12);
  // Small symmetric calls over FIFOs go to the plans with the fewest exchanges.
  EXPECT_EQ(tune_pick_model(&h, TUNE_ALLREDUCE, 4, 4096, 256 << 10, kFifo), TUNE_DOUBLING);
  EXPECT_EQ(tune_pick_model(&h, TUNE_ALLTOALL, 4, 4096, 256 << 10, kFifo), TUNE_BRUCK);
  // ... and keep them up to larger sizes than the step alone would.
  auto last_bruck = [](const tune_consts& k) {
    size_t last = 0;
    for (size_t bytes = 8; bytes <= (64u << 20); bytes *= 2)
      if (tune_pick_model(&k, TUNE_ALLTOALL, 4, bytes, 256 << 10, kFifo) == TUNE_BRUCK)
        last = bytes;
    return last;
  };
  EXPECT_GT(last_bruck(h), last_bruck(kConsts));
  // A hand-off no dearer than the turns the cores take already adds nothing.
  tune_consts cheap = kConsts;
  cheap.handoff_us = 4;
  EXPECT_DOUBLE_EQ(tune_predict_us(&cheap, TUNE_ALLREDUCE, TUNE_RING, 4, 64, 256 << 10),
                   tune_predict_us(&kConsts, TUNE_ALLREDUCE, TUNE_RING, 4, 64, 256 << 10));
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
  // Two threads on one CPU hand it over: measured wherever there are two.
  if (k.ncpus >= 2) {
    EXPECT_GT(k.handoff_us, 0);
  }
  // Every point measured; cross-memory attach at every point or none; the
  // single figures are the largest point's.
  for (int p = 0; p < TUNE_CAL_POINTS; p++) {
    EXPECT_GT(k.copy_at[p], 0) << p;
    EXPECT_GT(k.reduce_at[p], 0) << p;
    EXPECT_EQ(k.cma_at[p] > 0, k.cma_gbps > 0) << p;
    EXPECT_EQ(k.cma_reduce_at[p] > 0, k.cma_gbps > 0) << p;
  }
  EXPECT_EQ(k.copy_gbps, k.copy_at[TUNE_CAL_POINTS - 1]);
  EXPECT_EQ(k.cma_gbps, k.cma_at[TUNE_CAL_POINTS - 1]);
}

// A calibration while other threads take the cores says so (tune_consts.disturbed, and
// then it is cached for ten minutes only): two busy threads beside the calibration's two, all four
// on two CPUs, leave each of the calibration's threads about half a core, and no run of the larger
// sizes (milliseconds each) escapes that. Without the count, such figures, slow everywhere,
// were cached and steered every later job.
TEST(Tune, CalibrationUnderLoadSaysItIsDisturbed) {
  cpu_set_t old, two;
  ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(old), &old), 0);
  if (CPU_COUNT(&old) < 2) GTEST_SKIP() << "one CPU: the calibration spins nowhere";
  // Valgrind runs one thread at a time: the busy threads would crawl through minutes.
  if (UNDER_VALGRIND()) GTEST_SKIP() << "under valgrind, which runs one thread at a time";
  CPU_ZERO(&two);
  for (int c = 0, got = 0; c < CPU_SETSIZE && got < 2; c++)
    if (CPU_ISSET(c, &old)) {
      CPU_SET(c, &two);
      got++;
    }
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(two), &two), 0);
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int i = 0; i < 2; i++)  // threads inherit the two CPUs
    busy.emplace_back([&stop] {
      volatile unsigned long x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  tune_consts k{};
  tune_calibrate(&k);
  stop = true;
  for (auto& t : busy) t.join();
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(old), &old), 0);
  EXPECT_GT(k.disturbed, 0);
  EXPECT_GT(k.copy_gbps, 0);  // still figures this process can use
}

// The tuner never picks a family that moves its bytes in a way the
// calibration itself measured slower at that size. Two processes: the
// direct plans read by cross-memory attach what the FIFO families copy in
// and out; at a size whose buffers the calibration measured reading more
// than 10% slower than the FIFO exchange, the read, two-shot and one-shot
// plans must lose. This machine's own tables, whatever they measured; the
// latencies are set aside: on a loaded machine (a test suite running in
// parallel) the step measures tens of microseconds, and then a plan with
// fewer steps rightly wins at 1 MiB even with slower bytes.
TEST(Tune, NeverAFamilyTheCalibrationMeasuredSlower) {
  tune_consts k{};
  tune_calibrate(&k);
  k.read_gbps = 0;  // between processes
  k.step_us = 0;
  k.cma_us = 0;
  k.read_call_us = 0;
  if (k.cma_gbps <= 0) GTEST_SKIP() << "cross-memory attach is not allowed here";
  const unsigned direct = (1u << TUNE_ONESHOT) | (1u << TUNE_TWOSHOT) | (1u << TUNE_READ);
  int judged = 0;
  for (int p = 0; p < TUNE_CAL_POINTS; p++) {
    size_t bytes = tune_cal_bytes(p);
    if (bytes < (1u << 20)) continue;
    bool reads_slower = k.cma_at[p] < 0.9 * k.copy_at[p];
    // An all-reduce's direct plans also fold what they read, as the
    // calibration's cma+reduce did; the FIFO families reduce what arrived.
    bool folds_slower = reads_slower && k.cma_reduce_at[p] < 0.9 * k.reduce_at[p];
    for (tune_coll c : {TUNE_ALLREDUCE, TUNE_ALLGATHER, TUNE_ALLTOALL}) {
      tune_algo pick = tune_pick_model(&k, c, 2, bytes, 256 << 10, kAll);
      if (c == TUNE_ALLREDUCE ? folds_slower : reads_slower) {
        EXPECT_FALSE(direct & (1u << pick))
            << tune_coll_name(c) << " of " << bytes << " B by " << tune_algo_name(pick)
            << ": reads measured " << k.cma_at[p] << " GB/s, the FIFO " << k.copy_at[p]
            << ", reads folded in " << k.cma_reduce_at[p] << ", reductions " << k.reduce_at[p];
        judged++;
      }
    }
  }
  if (!judged) GTEST_SKIP() << "reads and copies measured within 10% of each other at every size";
}

// The tables: a bandwidth that falls with the buffer's size moves the
// choice with it. Here reads beat the FIFO for buffers that fit a cache and
// lose for those that do not.
TEST(Tune, TablesFollowTheBufferSize) {
  tune_consts k = kConsts;
  const double copy[TUNE_CAL_POINTS] = {20, 18, 12, 8, 8};
  const double cma[TUNE_CAL_POINTS] = {80, 72, 60, 4, 3};
  const double red[TUNE_CAL_POINTS] = {30, 30, 20, 14, 14};
  for (int p = 0; p < TUNE_CAL_POINTS; p++)
    k.copy_at[p] = copy[p], k.cma_at[p] = cma[p], k.reduce_at[p] = red[p];
  k.cma_gbps = 3;
  k.copy_gbps = 8;
  EXPECT_EQ(tune_pick_model(&k, TUNE_ALLGATHER, 2, 1u << 20, 256 << 10, kAll), TUNE_READ);
  EXPECT_EQ(tune_pick_model(&k, TUNE_ALLGATHER, 2, 64u << 20, 256 << 10, kAll), TUNE_RING);
  // Between points: on a log scale; beyond them: the nearest.
  double t1 = tune_predict_us(&k, TUNE_ALLGATHER, TUNE_RING, 2, 2u << 20, 256 << 10);
  double lo = tune_predict_us(&k, TUNE_ALLGATHER, TUNE_RING, 2, 1u << 20, 256 << 10);
  double hi = tune_predict_us(&k, TUNE_ALLGATHER, TUNE_RING, 2, 4u << 20, 256 << 10);
  EXPECT_GT(t1, 2 * lo * 0.99);
  EXPECT_LT(t1, hi);
  double huge = tune_predict_us(&k, TUNE_ALLGATHER, TUNE_RING, 2, 256u << 20, 256 << 10);
  double big = tune_predict_us(&k, TUNE_ALLGATHER, TUNE_RING, 2, 16u << 20, 256 << 10);
  EXPECT_NEAR(huge / big, 16, 0.5);
  // A table not all there is not used: the single figure serves.
  tune_consts part = k;
  part.cma_at[2] = 0;
  tune_consts flat = k;
  for (int p = 0; p < TUNE_CAL_POINTS; p++) flat.cma_at[p] = 0;
  EXPECT_EQ(tune_predict_us(&part, TUNE_ALLTOALL, TUNE_READ, 2, 1u << 20, 256 << 10),
            tune_predict_us(&flat, TUNE_ALLTOALL, TUNE_READ, 2, 1u << 20, 256 << 10));
}

// Two-shot between processes: reading a peer's half and folding it in cost
// what the calibration measured for the two together (cma_reduce_at), not a
// read at cma_at plus a reduction at reduce_at. The tables of a machine
// where reads alone measured faster than the FIFO from 1 MiB up, and the
// two-shot plan ran at half the ring's speed (docs/PERFORMANCE.md, "The
// tuner's choice"): the pair at a third of the read picks the ring; a
// tuning file without the pair's table is costed as before.
TEST(Tune, TwoShotCostsItsReadsAndFoldsTogether) {
  tune_consts k = kConsts;
  k.step_us = 1.86;
  const double copy[TUNE_CAL_POINTS] = {14.25, 14.50, 10.26, 6.62, 7.63};
  const double cma[TUNE_CAL_POINTS] = {9.84, 11.93, 13.46, 8.05, 5.70};
  const double red[TUNE_CAL_POINTS] = {27.49, 25.83, 18.48, 18.69, 14.71};
  const double folded[TUNE_CAL_POINTS] = {4.9, 6.5, 6.2, 4.4, 5.1};
  for (int p = 0; p < TUNE_CAL_POINTS; p++)
    k.copy_at[p] = copy[p], k.cma_at[p] = cma[p], k.reduce_at[p] = red[p],
    k.cma_reduce_at[p] = folded[p];
  k.copy_gbps = 7.63, k.cma_gbps = 5.70, k.reduce_gbps = 14.71, k.cma_us = 1;
  tune_consts old = k;
  for (int p = 0; p < TUNE_CAL_POINTS; p++) old.cma_reduce_at[p] = 0;
  const unsigned direct = (1u << TUNE_ONESHOT) | (1u << TUNE_TWOSHOT) | (1u << TUNE_READ);
  for (size_t bytes = 1u << 20; bytes <= (4u << 20); bytes *= 2) {
    tune_algo pick = tune_pick_model(&k, TUNE_ALLREDUCE, 2, bytes, 256 << 10, kAll);
    EXPECT_FALSE(direct & (1u << pick)) << bytes << " B: " << tune_algo_name(pick);
    double two = tune_predict_us(&k, TUNE_ALLREDUCE, TUNE_TWOSHOT, 2, bytes, 256 << 10);
    double ring = tune_predict_us(&k, TUNE_ALLREDUCE, TUNE_RING, 2, bytes, 256 << 10);
    EXPECT_GT(two, 1.2 * ring) << bytes;
    // Without the table: a read, then a reduction, the sum of the two
    // figures, which is what misled the tuner there.
    EXPECT_LT(tune_predict_us(&old, TUNE_ALLREDUCE, TUNE_TWOSHOT, 2, bytes, 256 << 10), two)
        << bytes;
  }
  // Thread ranks read by plain loads: the table between processes does not apply.
  tune_consts threads = k;
  threads.read_gbps = 2 * k.copy_gbps;
  threads.read_call_us = 0;
  tune_consts threads_old = old;
  threads_old.read_gbps = 2 * k.copy_gbps;
  threads_old.read_call_us = 0;
  EXPECT_EQ(tune_predict_us(&threads, TUNE_ALLREDUCE, TUNE_TWOSHOT, 2, 1u << 20, 256 << 10),
            tune_predict_us(&threads_old, TUNE_ALLREDUCE, TUNE_TWOSHOT, 2, 1u << 20, 256 << 10));
}

// A tuning file and the cache: the tables by key@bytes at the points'
// sizes; the cache must have all of them, a tuning file none or some; a
// value no bandwidth has is refused.
TEST(Tune, TablesInFiles) {
  char path[] = "/tmp/loom-tune-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  auto write = [&](const std::string& text) {
    FILE* f = fopen(path, "w");
    fputs(text.c_str(), f);
    fclose(f);
  };
  const std::string base = "step_us 2\ncopy_gbps 5\nreduce_gbps 9\nncpus 2\ncma_gbps 3\ncma_us 1\n";
  tune_consts k{};
  write(base);
  EXPECT_EQ(tune_consts_read(path, &k, 0), 0);
  EXPECT_EQ(tune_consts_read(path, &k, 1), -1);  // a cache without the tables: measure again
  std::string full = base;
  for (int p = 0; p < TUNE_CAL_POINTS; p++) {
    std::string b = std::to_string(tune_cal_bytes(p));
    full += "copy_gbps@" + b + " " + std::to_string(10 + p) + "\ncma_gbps@" + b + " 4\n" +
            "reduce_gbps@" + b + " 12\n";
  }
  write(full);  // a cache from before cma_reduce_gbps@: measure again; a tuning file may
  EXPECT_EQ(tune_consts_read(path, &k, 1), -1);
  ASSERT_EQ(tune_consts_read(path, &k, 0), 0);
  EXPECT_EQ(k.cma_reduce_at[2], 0);
  for (int p = 0; p < TUNE_CAL_POINTS; p++)
    full += "cma_reduce_gbps@" + std::to_string(tune_cal_bytes(p)) + " 2.5\n";
  write(full);  // a cache from before lines_gbps: measure again; a tuning file may leave it out
  EXPECT_EQ(tune_consts_read(path, &k, 1), -1);
  k.lines_gbps = 9;
  ASSERT_EQ(tune_consts_read(path, &k, 0), 0);
  EXPECT_EQ(k.lines_gbps, 0);  // the model's stand-in: a quarter of the copy bandwidth
  full += "lines_gbps 2.75\n";
  write(full);
  EXPECT_EQ(tune_consts_read(path, &k, 1), -1);  // lines_step too
  full += "lines_step 0.5\n";
  write(full);  // a cache from before handoff_us: measure again; a tuning file may leave it out
  EXPECT_EQ(tune_consts_read(path, &k, 1), -1);
  k.handoff_us = 7;
  ASSERT_EQ(tune_consts_read(path, &k, 0), 0);
  EXPECT_EQ(k.handoff_us, 0);  // not costed apart
  full += "handoff_us 6.5\n";
  write(full);
  ASSERT_EQ(tune_consts_read(path, &k, 1), 0);
  EXPECT_EQ(k.handoff_us, 6.5);
  EXPECT_EQ(k.lines_gbps, 2.75);
  EXPECT_EQ(k.lines_step, 0.5);
  for (int p = 0; p < TUNE_CAL_POINTS; p++) EXPECT_EQ(k.copy_at[p], 10 + p);
  for (int p = 0; p < TUNE_CAL_POINTS; p++) EXPECT_EQ(k.cma_reduce_at[p], 2.5);
  write(base + "copy_gbps@1048576 7\nreduce_gbps@99 3\n");  // 99 is no point: ignored
  ASSERT_EQ(tune_consts_read(path, &k, 0), 0);
  EXPECT_EQ(k.copy_at[2], 7);
  EXPECT_EQ(k.copy_at[0], 0);
  for (const char* bad : {"nan", "inf", "-1"}) {
    write(base + "cma_gbps@65536 " + bad + "\n");
    EXPECT_EQ(tune_consts_read(path, &k, 0), -1) << bad;
  }
  unlink(path);
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
