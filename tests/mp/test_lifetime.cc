// test_lifetime.cc - what a launch uses lives until the launch ends, and
// launches run on a communicator in the order they were called, whatever
// streams they are on.
//
// ManyThenDestroy issues hundreds of collectives of changing sizes and kinds
// on two streams without waiting (so the communicator's plan cache evicts
// plans, and its scratch grows, while launches prepared earlier still hold
// them), then destroys the communicator before synchronizing anything: the
// destroy waits for the launches, and every result is checked afterwards.
// It runs under AddressSanitizer and ThreadSanitizer (the sanity subset).
//
// MoreCallsThanAStreamHolds queues more calls on one host stream than it
// holds (core/stream.h's STREAM_DEPTH), on every rank at once.
//
// CallOrderAcrossStreams holds rank 0's first stream back (behind a receive
// on another communicator) while its second stream is free: the second
// stream's all-reduce must still wait for the first stream's, which rank 0
// called first, as every other rank did.
#include <unistd.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "harness.h"

namespace {

using harness::Ctx;
using harness::Mode;
using harness::Opts;

using harness::RanksMode;

Opts lifetime_opts() {
  Opts o;
  o.timeout_s = 240;
  o.comm_timeout_ms = 60000;
  return o;
}

// One queued operation and what it must leave.
struct Op {
  int kind;  // 0 all-reduce, 1 all-gather, 2 all-to-all, 3 broadcast, 4 reduce-scatter
  size_t count;
  std::vector<int32_t> send, recv;
};

int32_t value(int rank, size_t i, int op) {
  return (int32_t)((rank + 1) * 7 + (int)(i % 1009) + op * 3);
}

class Lifetime : public ::testing::TestWithParam<RanksMode> {};

TEST_P(Lifetime, ManyThenDestroy) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        const int nops = 240;
        const int N = c.nranks;
        std::vector<Op> ops((size_t)nops);
        loomStream_t s[2] = {nullptr, nullptr};
        ASSERT_LOOM_OK(loomStreamCreate(&s[0]));
        ASSERT_LOOM_OK(loomStreamCreate(&s[1]));
        for (int k = 0; k < nops; k++) {
          Op& o = ops[(size_t)k];
          o.kind = k % 5;
          // Sizes that change all the time (the cache holds 4 plans) and
          // grow (all-to-all's small-message plan needs scratch).
          o.count = 1 + (size_t)((k * 7919) % 3001) + (size_t)k * 13;
          size_t sn = o.count, rn = o.count;
          if (o.kind == 1) rn = o.count * N;
          if (o.kind == 2) sn = rn = o.count * N;
          if (o.kind == 4) sn = o.count * N;
          o.send.resize(sn);
          o.recv.assign(rn, -1);
          for (size_t i = 0; i < sn; i++) o.send[i] = value(c.rank, i, k);
          loomStream_t st = s[(k / 3) % 2];
          loomResult_t r = loomSuccess;
          switch (o.kind) {
            case 0:
              r = loomAllReduce(o.send.data(), o.recv.data(), o.count, loomInt32, loomSum, c.comm,
                                st);
              break;
            case 1:
              r = loomAllGather(o.send.data(), o.recv.data(), o.count, loomInt32, c.comm, st);
              break;
            case 2:
              r = loomAlltoAll(o.send.data(), o.recv.data(), o.count, loomInt32, c.comm, st);
              break;
            case 3:
              r = loomBroadcast(o.send.data(), o.recv.data(), o.count, loomInt32, k % N, c.comm,
                                st);
              break;
            case 4:
              r = loomReduceScatter(o.send.data(), o.recv.data(), o.count, loomInt32, loomSum,
                                    c.comm, st);
              break;
          }
          ASSERT_EQ(r, loomSuccess) << "op " << k << ": " << loomGetLastError(NULL);
        }
        // Nothing waited for: the destroy must wait, and free nothing a
        // launch still uses.
        ASSERT_LOOM_OK(loomCommDestroy(c.comm));
        c.comm = nullptr;
        ASSERT_LOOM_OK(loomStreamSynchronize(s[0]));
        ASSERT_LOOM_OK(loomStreamSynchronize(s[1]));
        ASSERT_LOOM_OK(loomStreamDestroy(s[0]));
        ASSERT_LOOM_OK(loomStreamDestroy(s[1]));
        for (int k = 0; k < nops; k++) {
          const Op& o = ops[(size_t)k];
          for (size_t i = 0; i < o.recv.size(); i++) {
            int32_t want = 0;
            switch (o.kind) {
              case 0:
                for (int r = 0; r < N; r++) want += value(r, i, k);
                break;
              case 1:
                want = value((int)(i / o.count), i % o.count, k);
                break;
              case 2:  // block p of rank r's receive is block r of p's send
                want = value((int)(i / o.count), (size_t)c.rank * o.count + i % o.count, k);
                break;
              case 3:
                want = value(k % N, i, k);
                break;
              case 4:
                for (int r = 0; r < N; r++) want += value(r, (size_t)c.rank * o.count + i, k);
                break;
            }
            ASSERT_EQ(o.recv[i], want) << "rank " << c.rank << " op " << k << " (kind " << o.kind
                                       << ", count " << o.count << ") element " << i;
          }
        }
      },
      lifetime_opts());
}

TEST_P(Lifetime, CallOrderAcrossStreams) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        if (c.nranks < 2) GTEST_SKIP() << "needs a second rank to hold rank 0 back";
        loomComm_t gate = nullptr;
        ASSERT_LOOM_OK(loomCommSplit(c.comm, 0, c.rank, &gate, nullptr));
        shim::CommGuard gg(gate);
        shim::StreamGuard s1, s2;
        ASSERT_NE(s1.get(), nullptr);
        ASSERT_NE(s2.get(), nullptr);
        const size_t cx = 100003, cy = 7;  // different sizes: a swap is a mismatch
        std::vector<int64_t> x(cx, c.rank + 1), y(cy, 10 * (c.rank + 1));
        int32_t token = 0;
        if (c.rank == 0) {  // s1 waits here until rank 1 has called everything
          ASSERT_LOOM_OK(loomRecv(&token, 1, loomInt32, 1, gate, s1.get()));
        }
        ASSERT_LOOM_OK(loomAllReduce(x.data(), x.data(), cx, loomInt64, loomSum, c.comm, s1.get()));
        ASSERT_LOOM_OK(loomAllReduce(y.data(), y.data(), cy, loomInt64, loomSum, c.comm, s2.get()));
        if (c.rank == 1) {
          usleep(20 * 1000);  // more time for rank 0's s2 to start out of order, were it allowed
          token = 1;
          ASSERT_LOOM_OK(loomSend(&token, 1, loomInt32, 0, gate, nullptr));
        }
        ASSERT_LOOM_OK(loomStreamSynchronize(s2.get()));
        ASSERT_LOOM_OK(loomStreamSynchronize(s1.get()));
        const int64_t tri = (int64_t)c.nranks * (c.nranks + 1) / 2;
        for (size_t i = 0; i < cx; i++) ASSERT_EQ(x[i], tri) << "rank " << c.rank << " x " << i;
        for (size_t i = 0; i < cy; i++)
          ASSERT_EQ(y[i], 10 * tri) << "rank " << c.rank << " y " << i;
        if (c.rank == 0) {
          EXPECT_EQ(token, 1);
        }
      },
      lifetime_opts());
}

// Each rank queues three times as many calls as a host stream holds
// (STREAM_DEPTH, 1024) without waiting: a full stream makes the caller
// wait for room, holding no lock, so thread ranks whose streams are full
// at once still reach one another. Every result is checked.
TEST_P(Lifetime, MoreCallsThanAStreamHolds) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        const int calls = 3 * 1024;
        shim::StreamGuard st;
        ASSERT_NE(st.get(), nullptr);
        std::vector<int32_t> in((size_t)calls), out((size_t)calls, -1);
        for (int k = 0; k < calls; k++) in[(size_t)k] = value(c.rank, (size_t)k, 0);
        for (int k = 0; k < calls; k++)
          ASSERT_LOOM_OK(loomAllReduce(&in[(size_t)k], &out[(size_t)k], 1, loomInt32, loomSum,
                                       c.comm, st.get()));
        ASSERT_LOOM_OK(loomStreamSynchronize(st.get()));
        for (int k = 0; k < calls; k++) {
          int32_t want = 0;
          for (int r = 0; r < c.nranks; r++) want += value(r, (size_t)k, 0);
          ASSERT_EQ(out[(size_t)k], want) << "rank " << c.rank << " call " << k;
        }
      },
      lifetime_opts());
}

INSTANTIATE_TEST_SUITE_P(Ranks, Lifetime,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         harness::ranks_mode_name);

}  // namespace
