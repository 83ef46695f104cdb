// test_stream_events.cc - a launch over several host streams orders them
// with an event: it runs on its first stream, and each other stream's
// queue is gated until it completes (src/core/event.h, docs/streams.md).
//
// Order is checked by data: rank 0's first stream is held back (behind a
// receive on another communicator that rank 1 answers only after it has
// called everything), while the second stream's later work is an
// all-reduce on a third communicator that reads what the group wrote. The
// turns of a communicator do not order that one, so only the gate does: if
// it let the later work start early, rank 0 would contribute its old
// values and every rank would see a wrong sum.
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

Opts events_opts() {
  Opts o;
  o.timeout_s = 120;
  o.comm_timeout_ms = 60000;  // so that no timeout passes for an order or a failure
  return o;
}

int64_t tri(int n) {
  return (int64_t)n * (n + 1) / 2;
}

std::string where(const Ctx& c) {
  return "rank " + std::to_string(c.rank) + "/" + std::to_string(c.nranks) + " (" +
         harness::mode_name(c.mode) + ")";
}

// The communicators and streams of one case: hold keeps rank 0's first
// stream back, other carries the second stream's later work.
struct Case {
  loomComm_t hold = nullptr, other = nullptr;
  shim::StreamGuard s1, s2;
  int32_t token = 0;
  explicit Case(const Ctx& c) {
    EXPECT_LOOM_OK(loomCommSplit(c.comm, 0, c.rank, &hold, nullptr));
    EXPECT_LOOM_OK(loomCommSplit(c.comm, 0, c.rank, &other, nullptr));
  }
  ~Case() {  // each destroy waits for the launches still on it
    if (other) loomCommDestroy(other);
    if (hold) loomCommDestroy(hold);
  }
  bool ok() const { return hold && other && s1.get() && s2.get(); }
  // Rank 0: s1 runs nothing more until rank 1 calls release().
  void hold_back(const Ctx& c) {
    if (c.rank == 0) ASSERT_LOOM_OK(loomRecv(&token, 1, loomInt32, 1, hold, s1.get()));
  }
  // Rank 1, once it has called everything.
  void release(const Ctx& c) {
    if (c.rank != 1) return;
    usleep(20 * 1000);  // more time for rank 0's s2 to start early, were it allowed
    int32_t one = 1;
    ASSERT_LOOM_OK(loomSend(&one, 1, loomInt32, 0, hold, nullptr));
  }
};

class StreamEvents : public ::testing::TestWithParam<RanksMode> {};

// A group over s1 and s2 runs on s1; s2's later work (on another
// communicator) reads what the group wrote, so it must wait for the group.
TEST_P(StreamEvents, LaterWorkWaitsForTheGroup) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        if (c.nranks < 2) GTEST_SKIP() << "needs a second rank to hold rank 0 back";
        Case st(c);
        ASSERT_TRUE(st.ok());
        const size_t count = 100003;
        std::vector<int64_t> x(count, c.rank + 1), y(count, 10 * (c.rank + 1)), z(count, -1);
        st.hold_back(c);
        ASSERT_LOOM_OK(loomGroupStart());
        ASSERT_LOOM_OK(
            loomAllReduce(x.data(), x.data(), count, loomInt64, loomSum, c.comm, st.s1.get()));
        ASSERT_LOOM_OK(
            loomAllReduce(y.data(), y.data(), count, loomInt64, loomSum, c.comm, st.s2.get()));
        ASSERT_LOOM_OK(loomGroupEnd());
        ASSERT_LOOM_OK(
            loomAllReduce(x.data(), z.data(), count, loomInt64, loomSum, st.other, st.s2.get()));
        st.release(c);
        ASSERT_LOOM_OK(loomStreamSynchronize(st.s2.get()));
        ASSERT_LOOM_OK(loomStreamSynchronize(st.s1.get()));
        const int64_t T = tri(c.nranks);
        for (size_t i = 0; i < count; i++) {
          ASSERT_EQ(x[i], T) << where(c) << " x[" << i << "]";
          ASSERT_EQ(y[i], 10 * T) << where(c) << " y[" << i << "]";
          ASSERT_EQ(z[i], c.nranks * T)
              << where(c) << " z[" << i << "]: s2's later work started before the group ended";
        }
        if (c.rank == 0) {
          EXPECT_EQ(st.token, 1);
        }
      },
      events_opts());
}

// loomStreamDestroy of s2 while it is gated (rank 0: its group is held
// back on s1) waits for the gate and the work behind it, then returns.
TEST_P(StreamEvents, DestroyGatedStream) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        if (c.nranks < 2) GTEST_SKIP() << "needs a second rank to hold rank 0 back";
        Case st(c);
        ASSERT_TRUE(st.ok());
        loomStream_t s2 = nullptr;
        ASSERT_LOOM_OK(loomStreamCreate(&s2));
        const size_t count = 70001;
        std::vector<int64_t> x(count, c.rank + 1), y(count, 10 * (c.rank + 1)), z(count, -1);
        st.hold_back(c);
        ASSERT_LOOM_OK(loomGroupStart());
        ASSERT_LOOM_OK(
            loomAllReduce(x.data(), x.data(), count, loomInt64, loomSum, c.comm, st.s1.get()));
        ASSERT_LOOM_OK(loomAllReduce(y.data(), y.data(), count, loomInt64, loomSum, c.comm, s2));
        ASSERT_LOOM_OK(loomGroupEnd());
        ASSERT_LOOM_OK(loomAllReduce(y.data(), z.data(), count, loomInt64, loomSum, st.other, s2));
        st.release(c);  // before rank 1's own destroy, which waits for rank 0
        ASSERT_LOOM_OK(loomStreamDestroy(s2));
        const int64_t T = tri(c.nranks);
        for (size_t i = 0; i < count; i++)
          ASSERT_EQ(z[i], c.nranks * 10 * T)
              << where(c) << " z[" << i << "]: destroy returned before the gated work ran";
        ASSERT_LOOM_OK(loomStreamSynchronize(st.s1.get()));
        for (size_t i = 0; i < count; i++) ASSERT_EQ(x[i], T) << where(c) << " x[" << i << "]";
      },
      events_opts());
}

INSTANTIATE_TEST_SUITE_P(Ranks, StreamEvents,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         harness::ranks_mode_name);

// ---- A launch that fails -------------------------------------------------------

class StreamEventErrors : public ::testing::TestWithParam<RanksMode> {};

// The last rank aborts the communicator of a group over s1 and s2 that the
// others have queued: the group fails, and its event opens s2's gate with
// the error (loomStreamSynchronize on s2 returns it, naming the aborter);
// s2's later work, on a communicator without the aborter, still runs.
TEST_P(StreamEventErrors, GatedStreamGetsTheGroupsError) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        const int aborter = c.nranks - 1;
        loomComm_t o = nullptr;
        ASSERT_LOOM_OK(
            loomCommSplit(c.comm, c.rank == aborter ? LOOM_SPLIT_NOCOLOR : 0, c.rank, &o, nullptr));
        shim::CommGuard other(o);
        if (c.rank == aborter) {
          harness::meet(c, c.nranks);  // the others have queued everything
          EXPECT_LOOM_OK(loomCommAbort(c.comm));
          c.comm = nullptr;  // released by the abort
          return;
        }
        shim::StreamGuard s1, s2;
        ASSERT_NE(s1.get(), nullptr);
        ASSERT_NE(s2.get(), nullptr);
        const size_t count = 1 << 18;
        std::vector<float> x(count, 1.0f), y(count, 2.0f);
        std::vector<int64_t> w(1000, c.rank + 1);
        ASSERT_LOOM_OK(loomGroupStart());
        ASSERT_LOOM_OK(
            loomAllReduce(x.data(), x.data(), count, loomFloat32, loomSum, c.comm, s1.get()));
        ASSERT_LOOM_OK(
            loomAllReduce(y.data(), y.data(), count, loomFloat32, loomSum, c.comm, s2.get()));
        ASSERT_LOOM_OK(loomGroupEnd());
        ASSERT_LOOM_OK(
            loomAllReduce(w.data(), w.data(), w.size(), loomInt64, loomSum, other.get(), s2.get()));
        harness::meet(c, c.nranks);
        loomResult_t r2 = loomStreamSynchronize(s2.get());
        std::string why2 = loomGetLastError(nullptr);
        EXPECT_EQ(r2, loomRemoteError)
            << where(c) << ": " << loomGetErrorString(r2) << ": " << why2;
        EXPECT_TRUE(harness::names_rank(why2, aborter)) << why2;
        for (size_t i = 0; i < w.size(); i++)
          ASSERT_EQ(w[i], tri(c.nranks - 1)) << where(c) << " w[" << i << "]: s2's later work";
        loomResult_t r1 = loomStreamSynchronize(s1.get());
        EXPECT_EQ(r1, loomRemoteError) << where(c) << ": " << loomGetErrorString(r1);
      },
      events_opts());
}

INSTANTIATE_TEST_SUITE_P(Ranks, StreamEventErrors,
                         ::testing::Combine(::testing::Values(2, 3),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         harness::ranks_mode_name);

}  // namespace
