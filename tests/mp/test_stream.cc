// test_stream.cc - host streams: calls on a stream return at once and run in
// stream order; loomStreamQuery and loomStreamSynchronize report progress
// and errors; loomStreamDestroy waits for pending work; a group whose
// operations name two streams completes on both; loomStreamCreateFromCuda
// without a CUDA path.
//
// "Returns at once" is checked without timing: a rank issues its all-reduce
// on a stream while the other ranks are still held back (they wait for a
// message that it sends only after its call returned), so a call that
// blocked until completion would deadlock, and loomStreamQuery must say
// loomInProgress.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "harness.h"

namespace {

using harness::Ctx;
using harness::Mode;
using harness::Opts;

using harness::RanksMode;

Opts stream_opts() {
  Opts o;
  o.timeout_s = 120;
  o.comm_timeout_ms = 30000;  // a deadlock becomes an error, not a hang
  return o;
}

std::string where(const Ctx& c) {
  return "rank " + std::to_string(c.rank) + "/" + std::to_string(c.nranks) + " (" +
         harness::mode_name(c.mode) + ")";
}

// A one-way signal outside Loom (a file), so that a sender keeps its
// communicator until the receiver is done with it (a sender that destroys
// its communicator before the receiver attached loses the message: see
// SendThenDestroy in test_p2p.cc).
std::string oob_path(const Ctx& c, const char* tag) {
  return c.id_file + "." + tag + ".sig";
}

void oob_post(const Ctx& c, const char* tag) {
  int fd = open(oob_path(c, tag).c_str(), O_CREAT | O_WRONLY, 0600);
  if (fd >= 0) close(fd);
}

// Waits (bounded) for oob_post and removes the mark.
bool oob_wait(const Ctx& c, const char* tag) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  struct stat st;
  while (stat(oob_path(c, tag).c_str(), &st) != 0) {
    if (std::chrono::steady_clock::now() > end) return false;
    usleep(1000);
  }
  unlink(oob_path(c, tag).c_str());
  return true;
}

int64_t tri(int n) {
  return (int64_t)n * (n + 1) / 2;
}

// A second communicator over the same ranks, used only to hold ranks back
// and let them go (the one under test carries the streamed work).
loomComm_t gate_comm(const Ctx& c) {
  loomComm_t g = nullptr;
  EXPECT_LOOM_OK(loomCommSplit(c.comm, 0, c.rank, &g, nullptr));
  return g;
}

// Rank 0 lets every other rank go.
void gate_open(const Ctx& c, loomComm_t gate) {
  int32_t token = 1;
  ASSERT_LOOM_OK(loomGroupStart());
  for (int r = 1; r < c.nranks; r++)
    ASSERT_LOOM_OK(loomSend(&token, 1, loomInt32, r, gate, nullptr));
  ASSERT_LOOM_OK(loomGroupEnd());
}

// A rank other than 0 waits until rank 0 lets it go.
void gate_wait(loomComm_t gate) {
  int32_t token = 0;
  ASSERT_LOOM_OK(loomRecv(&token, 1, loomInt32, 0, gate, nullptr));
  ASSERT_EQ(token, 1);
}

// ---- Single process ------------------------------------------------------------

TEST(StreamBasics, CreateQuerySynchronizeDestroy) {
  loomStream_t s = nullptr;
  ASSERT_LOOM_OK(loomStreamCreate(&s));
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(loomStreamQuery(s), loomSuccess) << "a new stream has nothing to do";
  EXPECT_LOOM_OK(loomStreamSynchronize(s));
  EXPECT_EQ(loomStreamQuery(s), loomSuccess);
  // Several streams at once are independent objects.
  loomStream_t t = nullptr;
  ASSERT_LOOM_OK(loomStreamCreate(&t));
  EXPECT_NE(s, t);
  EXPECT_LOOM_OK(loomStreamDestroy(t));
  EXPECT_LOOM_OK(loomStreamDestroy(s));
}

// No CUDA driver in this process (or no CUDA executor in the build): wrapping
// a CUDA stream is loomInvalidUsage, with an explanation.
TEST(StreamBasics, CreateFromCudaIsInvalidUsage) {
  loomStream_t s = nullptr;
  int fake_cuda_stream = 0;
  EXPECT_EQ(loomStreamCreateFromCuda(&s, &fake_cuda_stream), loomInvalidUsage);
  EXPECT_STRNE(loomGetLastError(NULL), "");
  EXPECT_EQ(loomStreamCreateFromCuda(&s, nullptr), loomInvalidUsage);
}

// ---- On communicators ----------------------------------------------------------

class Stream : public ::testing::TestWithParam<RanksMode> {};

// A collective on a stream returns before it completes (rank 0 issues it
// while the others are held back), loomStreamQuery says loomInProgress
// meanwhile, and loomStreamSynchronize completes it with the right result.
TEST_P(Stream, CollectiveReturnsAtOnceAndSynchronizeCompletes) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        loomComm_t gate = gate_comm(c);
        shim::CommGuard gg(gate);
        if (::testing::Test::HasFailure()) return;
        shim::StreamGuard s;
        ASSERT_NE(s.get(), nullptr);
        const size_t count = (1u << 20) + 3;
        std::vector<int32_t> send(count, c.rank + 1), recv(count, -1);
        if (c.rank != 0) gate_wait(gate);
        ASSERT_LOOM_OK(
            loomAllReduce(send.data(), recv.data(), count, loomInt32, loomSum, c.comm, s.get()));
        if (c.rank == 0 && c.nranks > 1) {
          // Nobody else has called yet: this cannot have finished.
          EXPECT_EQ(loomStreamQuery(s.get()), loomInProgress) << where(c);
          gate_open(c, gate);
        }
        ASSERT_LOOM_OK(loomStreamSynchronize(s.get()));
        EXPECT_EQ(loomStreamQuery(s.get()), loomSuccess) << "done after synchronize";
        for (size_t i = 0; i < count; i++)
          ASSERT_EQ(recv[i], (int32_t)tri(c.nranks)) << where(c) << " element " << i;
        // Polling alone also gets there (bounded; a hang guard, not a timing).
        ASSERT_LOOM_OK(
            loomAllReduce(recv.data(), recv.data(), count, loomInt32, loomMax, c.comm, s.get()));
        loomResult_t q = loomInProgress;
        for (int i = 0; i < 60000 && (q = loomStreamQuery(s.get())) == loomInProgress; i++)
          usleep(1000);
        EXPECT_EQ(q, loomSuccess) << where(c);
        ASSERT_LOOM_OK(loomStreamSynchronize(s.get()));
        for (size_t i = 0; i < count; i += 4099) ASSERT_EQ(recv[i], (int32_t)tri(c.nranks));
      },
      stream_opts());
}

// Several collectives queued on one stream run in the order they were
// queued: each reads what the one before wrote, so any other order gives
// other numbers.
TEST_P(Stream, QueuedInOrder) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        shim::StreamGuard s;
        ASSERT_NE(s.get(), nullptr);
        const size_t count = (1u << 18) + 5;
        const int64_t N = c.nranks, T = tri(c.nranks);
        std::vector<int64_t> a(count, c.rank + 1), b(count, -1), d(count, -1);
        loomStream_t st = s.get();
        ASSERT_LOOM_OK(
            loomAllReduce(a.data(), b.data(), count, loomInt64, loomSum, c.comm, st));  // b = T
        ASSERT_LOOM_OK(
            loomAllReduce(b.data(), b.data(), count, loomInt64, loomSum, c.comm, st));  // b = N T
        ASSERT_LOOM_OK(
            loomAllReduce(b.data(), d.data(), count, loomInt64, loomMax, c.comm, st));  // d = N T
        ASSERT_LOOM_OK(
            loomAllReduce(a.data(), a.data(), count, loomInt64, loomMax, c.comm, st));  // a = N
        ASSERT_LOOM_OK(
            loomAllReduce(d.data(), d.data(), count, loomInt64, loomSum, c.comm, st));  // d = N^2 T
        ASSERT_LOOM_OK(
            loomAllReduce(a.data(), d.data(), 1, loomInt64, loomProd, c.comm, st));  // d[0] = N^N
        ASSERT_LOOM_OK(loomStreamSynchronize(st));
        int64_t nn = 1;
        for (int i = 0; i < c.nranks; i++) nn *= N;
        EXPECT_EQ(d[0], nn) << where(c);
        for (size_t i = 0; i < count; i++) {
          ASSERT_EQ(a[i], N) << where(c) << " a[" << i << "]";
          ASSERT_EQ(b[i], N * T) << where(c) << " b[" << i << "]";
          if (i > 0) {
            ASSERT_EQ(d[i], N * N * T) << where(c) << " d[" << i << "]";
          }
        }
        EXPECT_EQ(loomStreamQuery(st), loomSuccess);
      },
      stream_opts());
}

// loomStreamDestroy without a synchronize waits for the work still queued.
// The ranks other than 0 queue their all-reduce and destroy their stream
// at once; rank 0 joins only after they have queued (and, to make it likely
// that they are inside loomStreamDestroy by then, after a short pause - the
// test is right whatever the pause).
TEST_P(Stream, DestroyWaitsForPendingWork) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        loomComm_t gate = gate_comm(c);
        shim::CommGuard gg(gate);
        if (::testing::Test::HasFailure()) return;
        const size_t count = (1u << 20) + 7;
        std::vector<float> v(count, (float)(c.rank + 1));
        loomStream_t s = nullptr;
        ASSERT_LOOM_OK(loomStreamCreate(&s));
        if (c.rank == 0) {
          // Everyone else has queued: wait for their word.
          std::vector<int32_t> tokens((size_t)c.nranks, 0);
          ASSERT_LOOM_OK(loomGroupStart());
          for (int r = 1; r < c.nranks; r++)
            ASSERT_LOOM_OK(loomRecv(&tokens[(size_t)r], 1, loomInt32, r, gate, nullptr));
          ASSERT_LOOM_OK(loomGroupEnd());
          usleep(50 * 1000);
          ASSERT_LOOM_OK(loomAllReduce(v.data(), v.data(), count, loomFloat32, loomSum, c.comm, s));
        } else {
          ASSERT_LOOM_OK(loomAllReduce(v.data(), v.data(), count, loomFloat32, loomSum, c.comm, s));
          int32_t token = 1;
          ASSERT_LOOM_OK(loomSend(&token, 1, loomInt32, 0, gate, nullptr));
        }
        ASSERT_LOOM_OK(loomStreamDestroy(s));
        for (size_t i = 0; i < count; i++)
          ASSERT_EQ(v[i], (float)tri(c.nranks))
              << where(c) << " element " << i
              << ": loomStreamDestroy returned before the work ended";
      },
      stream_opts());
}

// A group whose operations name two streams completes on both. Regression: the
// launch was freed by the first stream's worker while the markers for the
// other streams were still being queued.
TEST_P(Stream, GroupOnTwoStreams) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        shim::StreamGuard s1, s2;
        ASSERT_NE(s1.get(), nullptr);
        ASSERT_NE(s2.get(), nullptr);
        const size_t count = 300001;
        const int next = (c.rank + 1) % c.nranks, prev = (c.rank + c.nranks - 1) % c.nranks;
        std::vector<int32_t> a(count, c.rank + 1), b(count, 2 * (c.rank + 1));
        std::vector<int32_t> out(count), in(count, -1);
        for (size_t i = 0; i < count; i++) out[i] = c.rank * 1000003 + (int32_t)i;
        ASSERT_LOOM_OK(loomGroupStart());
        ASSERT_LOOM_OK(
            loomAllReduce(a.data(), a.data(), count, loomInt32, loomSum, c.comm, s1.get()));
        ASSERT_LOOM_OK(
            loomAllReduce(b.data(), b.data(), count, loomInt32, loomSum, c.comm, s2.get()));
        ASSERT_LOOM_OK(loomSend(out.data(), count, loomInt32, next, c.comm, s1.get()));
        ASSERT_LOOM_OK(loomRecv(in.data(), count, loomInt32, prev, c.comm, s2.get()));
        ASSERT_LOOM_OK(loomGroupEnd());
        ASSERT_LOOM_OK(loomStreamSynchronize(s2.get()));
        for (size_t i = 0; i < count; i++) {
          ASSERT_EQ(b[i], (int32_t)(2 * tri(c.nranks))) << where(c) << " b[" << i << "]";
          ASSERT_EQ(in[i], prev * 1000003 + (int32_t)i) << where(c) << " in[" << i << "]";
        }
        ASSERT_LOOM_OK(loomStreamSynchronize(s1.get()));
        for (size_t i = 0; i < count; i++)
          ASSERT_EQ(a[i], (int32_t)tri(c.nranks)) << where(c) << " a[" << i << "]";
        EXPECT_EQ(loomStreamQuery(s1.get()), loomSuccess);
        EXPECT_EQ(loomStreamQuery(s2.get()), loomSuccess);
      },
      stream_opts());
}

// Work on one stream for two communicators runs in stream order too: the
// second all-reduce (on a split) reads what the first (on the parent) wrote.
TEST_P(Stream, OneStreamTwoCommunicators) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        loomComm_t half = nullptr;
        ASSERT_LOOM_OK(loomCommSplit(c.comm, c.rank % 2, c.rank, &half, nullptr));
        shim::CommGuard gh(half);
        int hcount = 0;
        ASSERT_LOOM_OK(loomCommCount(half, &hcount));
        shim::StreamGuard s;
        ASSERT_NE(s.get(), nullptr);
        const size_t count = 200003;
        std::vector<int64_t> v(count, c.rank + 1);
        ASSERT_LOOM_OK(
            loomAllReduce(v.data(), v.data(), count, loomInt64, loomSum, c.comm, s.get()));
        ASSERT_LOOM_OK(loomAllReduce(v.data(), v.data(), count, loomInt64, loomSum, half, s.get()));
        ASSERT_LOOM_OK(loomStreamSynchronize(s.get()));
        for (size_t i = 0; i < count; i++)
          ASSERT_EQ(v[i], tri(c.nranks) * hcount) << where(c) << " element " << i;
      },
      stream_opts());
}

INSTANTIATE_TEST_SUITE_P(Ranks, Stream,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 8),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         harness::ranks_mode_name);

// ---- Errors --------------------------------------------------------------------

// A receive on a stream that does not match its send (more bytes sent than
// expected): the calls return loomSuccess at once, and the error comes back
// from loomStreamSynchronize on the receiving rank, naming the peer, well
// before the comm timeout would have passed.
class StreamErrors : public ::testing::TestWithParam<RanksMode> {};

TEST_P(StreamErrors, MismatchComesBackFromSynchronize) {
  auto [n, mode] = GetParam();
  Opts o = stream_opts();
  o.timeout_s = 60;
  o.comm_timeout_ms = 3000;
  harness::run(
      n, mode,
      [](Ctx& c) {
        const int src = c.nranks - 1, dst = 0;
        shim::StreamGuard s;
        ASSERT_NE(s.get(), nullptr);
        std::vector<int32_t> buf(2000, 3);
        if (c.rank == src) {
          ASSERT_LOOM_OK(loomSend(buf.data(), 2000, loomInt32, dst, c.comm, s.get()));
          loomResult_t r = loomStreamSynchronize(s.get());  // either outcome; it must return
          if (r != loomSuccess) {
            EXPECT_STRNE(loomGetLastError(NULL), "");
          }
          EXPECT_TRUE(oob_wait(c, "received"));
        } else if (c.rank == dst) {
          ASSERT_LOOM_OK(loomRecv(buf.data(), 1000, loomInt32, src, c.comm, s.get()));
          loomResult_t r = loomStreamSynchronize(s.get());
          EXPECT_NE(r, loomSuccess) << "a receive of 1000 elements matched a send of 2000";
          EXPECT_NE(r, loomInProgress);
          EXPECT_NE(r, loomTimeout) << "the mismatch was not detected: " << loomGetLastError(NULL);
          std::string why = loomGetLastError(NULL);
          EXPECT_NE(why.find("peer " + std::to_string(src)), std::string::npos)
              << "the error must name the peer: " << why;
          EXPECT_EQ(loomStreamQuery(s.get()), loomSuccess) << "nothing left to run";
          oob_post(c, "received");
        }
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(Ranks, StreamErrors,
                         ::testing::Combine(::testing::Values(2, 3),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         harness::ranks_mode_name);

}  // namespace
