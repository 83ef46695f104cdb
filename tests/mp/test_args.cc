// test_args.cc - bad arguments, as API.md's "Bad arguments" sentence has it:
// NULL communicator, NULL buffer with count > 0 (a root-only buffer only on
// the root), unknown datatype or op, root or peer out of range, overlapping
// buffers that are not the in-place case, NULL count or displacement arrays
// of all-to-all-v (and, for
// the init functions: nranks < 1, rank out of range, NULL comm pointer, a
// config not from LOOM_CONFIG_INITIALIZER, a garbage unique id) each return
// loomInvalidArgument on the calling rank, at once, with a loomGetLastError
// text naming the problem, without touching any buffer or hanging any peer.
//
// Every case runs on several ranks (process and thread ranks): one rank makes
// the bad call while its peers already wait in an all-reduce with it; the bad
// rank checks the code, the text and every byte of its buffers,
// then makes the correct calls, and every rank checks that an all-reduce, a
// PreMulSum all-reduce and a send/receive ring all complete with the right
// results (nothing lost, nothing hung, nothing left queued).
//
// Functions that are not available yet return loomInvalidUsage saying so.
// Root-only buffers NULL on non-roots, and NULL everywhere with count 0, are
// valid: RootOnlyNull.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "harness.h"

namespace {

using harness::Ctx;
using harness::Mode;

constexpr size_t kCount = 1000;
// A bad call checks its arguments and returns at once. Nothing is timed:
// the communicator's timeout is far above the harness's, so a bad call that
// waits for anything (peers, a deadline) hangs the run, and so does a lost
// or misrouted call that leaves the peers waiting in their all-reduce.
constexpr int kCommTimeoutMs = harness::kNeverMs;

// ---- Texts --------------------------------------------------------------------

std::string lower(std::string s) {
  for (char& ch : s) ch = (char)std::tolower((unsigned char)ch);
  return s;
}

// Each group is a list of alternatives; the text must hold one of each group
// (case-insensitive). "$N" stands for the number of ranks.
using Words = std::vector<std::vector<std::string>>;

::testing::AssertionResult names_all(const std::string& text, const Words& words, int nranks) {
  std::string t = lower(text);
  for (const auto& group : words) {
    bool any = false;
    for (std::string w : group) {
      size_t p = w.find("$N");
      if (p != std::string::npos) w.replace(p, 2, std::to_string(nranks));
      any |= t.find(lower(w)) != std::string::npos;
    }
    if (!any) {
      std::string alts;
      for (const auto& w : group) alts += (alts.empty() ? "'" : " or '") + w + "'";
      return ::testing::AssertionFailure()
             << "the error text \"" << text << "\" does not name " << alts;
    }
  }
  return ::testing::AssertionSuccess();
}

// ---- The bad rank's memory ------------------------------------------------------

// Everything a bad call could write: the buffers and the scalar outputs.
struct Bufs {
  std::vector<int32_t> send, recv;
  loomRedOp_t op_out = (loomRedOp_t)0x5A5A5A5A;
  int int_out = 0x5A5A5A5A;
  // A sentinel inside the enum's range (UBSan checks loads of enum values),
  // yet no result code.
  loomResult_t res_out = (loomResult_t)13;
  loomComm_t comm_out = reinterpret_cast<loomComm_t>(static_cast<uintptr_t>(0x5A5A5A5A));
  loomComm_t comms_out[4] = {comm_out, comm_out, comm_out, comm_out};
};

int32_t input(int rank, size_t i) {
  return (int32_t)((rank + 1) * 1000 + (int)(i % 97));
}

Bufs make_bufs(int rank) {
  Bufs b;
  b.send.resize(kCount);
  b.recv.assign(kCount, 0x5A5A5A5A);
  for (size_t i = 0; i < kCount; i++) b.send[i] = input(rank, i);
  return b;
}

void expect_untouched(const Bufs& got, const Bufs& was) {
  EXPECT_EQ(memcmp(got.send.data(), was.send.data(), kCount * sizeof(int32_t)), 0)
      << "the bad call wrote into sendbuff";
  EXPECT_EQ(memcmp(got.recv.data(), was.recv.data(), kCount * sizeof(int32_t)), 0)
      << "the bad call wrote into recvbuff";
  EXPECT_EQ(got.op_out, was.op_out) << "the bad call wrote *op";
  EXPECT_EQ(got.int_out, was.int_out) << "the bad call wrote its int output";
  EXPECT_EQ(got.res_out, was.res_out) << "the bad call wrote *asyncError";
  EXPECT_EQ(got.comm_out, was.comm_out) << "the bad call wrote *comm";
  EXPECT_EQ(memcmp(got.comms_out, was.comms_out, sizeof(got.comms_out)), 0)
      << "the bad call wrote comms[]";
}

// ---- The good calls that follow -----------------------------------------------------

void good_allreduce(const Ctx& c, Bufs& b, const char* which) {
  SCOPED_TRACE(which);
  ASSERT_LOOM_OK(
      loomAllReduce(b.send.data(), b.recv.data(), kCount, loomInt32, loomSum, c.comm, nullptr));
  int n = c.nranks;
  for (size_t i = 0; i < kCount; i++)
    ASSERT_EQ(b.recv[i], (int32_t)(1000 * n * (n + 1) / 2 + n * (int)(i % 97)))
        << "rank " << c.rank << " element " << i;
}

void good_premulsum(const Ctx& c) {
  float scalar = 2.0f;
  loomRedOp_t pm;
  ASSERT_LOOM_OK(
      loomRedOpCreatePreMulSum(&pm, &scalar, loomFloat32, loomScalarHostImmediate, c.comm));
  std::vector<float> v(kCount, (float)(c.rank + 1));
  ASSERT_LOOM_OK(loomAllReduce(v.data(), v.data(), kCount, loomFloat32, pm, c.comm, nullptr));
  float want = 2.0f * (float)(c.nranks * (c.nranks + 1) / 2);
  for (size_t i = 0; i < kCount; i++)
    ASSERT_EQ(v[i], want) << "rank " << c.rank << " element " << i;
  ASSERT_LOOM_OK(loomRedOpDestroy(pm, c.comm));
}

// Each rank sends to the next and receives from the one before.
void good_ring(const Ctx& c) {
  int next = (c.rank + 1) % c.nranks, prev = (c.rank + c.nranks - 1) % c.nranks;
  std::vector<int32_t> out(kCount), in(kCount, -1);
  for (size_t i = 0; i < kCount; i++) out[i] = input(c.rank, i);
  ASSERT_LOOM_OK(loomGroupStart());
  EXPECT_LOOM_OK(loomSend(out.data(), kCount, loomInt32, next, c.comm, nullptr));
  EXPECT_LOOM_OK(loomRecv(in.data(), kCount, loomInt32, prev, c.comm, nullptr));
  ASSERT_LOOM_OK(loomGroupEnd());
  for (size_t i = 0; i < kCount; i++) ASSERT_EQ(in[i], input(prev, i)) << "element " << i;
}

// Everything a rank does after the bad call: all of it must go through.
void good_phase(const Ctx& c, Bufs& b) {
  good_allreduce(c, b, "the first all-reduce after the bad call");
  if (::testing::Test::HasFatalFailure()) return;
  good_premulsum(c);
  if (::testing::Test::HasFatalFailure()) return;
  good_ring(c);
  if (::testing::Test::HasFatalFailure()) return;
  // A second all-reduce: a bad call must not have left anything queued.
  Bufs again = make_bufs(c.rank);
  good_allreduce(c, again, "the last all-reduce");
}

// ---- Cases ------------------------------------------------------------------------

struct Case {
  const char* name;
  loomResult_t want;
  Words words;
  bool on_comm;  // the call passes the live communicator: its last error explains too
  std::function<loomResult_t(const Ctx&, Bufs&)> call;
};

// A second communicator of this rank alone.
loomComm_t solo_comm() {
  loomComm_t other = nullptr;
  EXPECT_LOOM_OK(loomCommInitAll(&other, 1, nullptr));
  return other;
}

const loomScalarResidence_t kImm = loomScalarHostImmediate;
float g_two = 2.0f;  // a PreMulSum scalar; HostImmediate reads it at creation

const Words kNullComm = {{"communicator", "comm"}, {"null"}};

// ---- The other collectives ----------------------------------------------------------

// Elements per block for the collectives whose buffers hold nranks blocks,
// so that every pointer below stays inside Bufs' buffers.
size_t block_count(const Ctx& c) {
  return kCount / (size_t)c.nranks - 1;
}
int other_rank(const Ctx& c) {
  return (c.rank + 1) % c.nranks;
}

// Counts and displacements of an all-to-all-v of cnt elements per peer.
struct VArgs {
  std::vector<size_t> counts, displs;
  VArgs(int n, size_t cnt) : counts((size_t)n, cnt), displs((size_t)n) {
    for (int p = 0; p < n; p++) displs[(size_t)p] = (size_t)p * cnt;
  }
};

const Words kRootNeg = {{"root"}, {"-1"}};
const Words kRootN = {{"root"}, {"$N"}};
const Words kSendNull = {{"sendbuff"}, {"null"}};
const Words kRecvNull = {{"recvbuff"}, {"null"}};
const Words kOverlap = {{"overlap"}};
const Words kType = {{"datatype", "type"}};
const Words kArrayNull = {{"count", "displacement", "displs"}, {"null"}};

// Root out of range, NULL communicator, unknown datatype (and op), NULL
// buffers where the call needs them (a root-only buffer only on the root),
// overlapping buffers that are not the in-place case, NULL count arrays.
std::vector<Case> other_collective_cases() {
  const loomDataType_t i32 = loomInt32;
  const loomDataType_t badt = loomNumTypes;
  std::vector<Case> v = {
      // ---- loomBroadcast ----
      {"BroadcastNullComm", loomInvalidArgument, kNullComm, false,
       [i32](const Ctx&, Bufs& b) {
         return loomBroadcast(b.send.data(), b.recv.data(), kCount, i32, 0, nullptr, nullptr);
       }},
      {"BroadcastRootNegative", loomInvalidArgument, kRootNeg, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomBroadcast(b.send.data(), b.recv.data(), kCount, i32, -1, c.comm, nullptr);
       }},
      {"BroadcastRootNranks", loomInvalidArgument, kRootN, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomBroadcast(b.send.data(), b.recv.data(), kCount, i32, c.nranks, c.comm, nullptr);
       }},
      {"BroadcastDatatypeUnknown", loomInvalidArgument, kType, true,
       [badt](const Ctx& c, Bufs& b) {
         return loomBroadcast(b.send.data(), b.recv.data(), kCount, badt, 0, c.comm, nullptr);
       }},
      {"BroadcastNullSendbuffOnRoot", loomInvalidArgument, kSendNull, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomBroadcast(nullptr, b.recv.data(), kCount, i32, c.rank, c.comm, nullptr);
       }},
      {"BroadcastNullRecvbuffOnNonRoot", loomInvalidArgument, kRecvNull, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomBroadcast(b.send.data(), nullptr, kCount, i32, other_rank(c), c.comm, nullptr);
       }},
      {"BroadcastOverlapOnRoot", loomInvalidArgument, kOverlap, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomBroadcast(b.send.data(), b.send.data() + 1, kCount - 1, i32, c.rank, c.comm,
                              nullptr);
       }},
      // ---- loomReduce ----
      {"ReduceNullComm", loomInvalidArgument, kNullComm, false,
       [i32](const Ctx&, Bufs& b) {
         return loomReduce(b.send.data(), b.recv.data(), kCount, i32, loomSum, 0, nullptr, nullptr);
       }},
      {"ReduceRootNegative", loomInvalidArgument, kRootNeg, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomReduce(b.send.data(), b.recv.data(), kCount, i32, loomSum, -1, c.comm, nullptr);
       }},
      {"ReduceRootNranks", loomInvalidArgument, kRootN, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomReduce(b.send.data(), b.recv.data(), kCount, i32, loomSum, c.nranks, c.comm,
                           nullptr);
       }},
      {"ReduceDatatypeUnknown", loomInvalidArgument, kType, true,
       [badt](const Ctx& c, Bufs& b) {
         return loomReduce(b.send.data(), b.recv.data(), kCount, badt, loomSum, 0, c.comm, nullptr);
       }},
      {"ReduceOpNumOps",
       loomInvalidArgument,
       {{"op"}, {"5"}},
       true,
       [i32](const Ctx& c, Bufs& b) {
         return loomReduce(b.send.data(), b.recv.data(), kCount, i32, loomNumOps, 0, c.comm,
                           nullptr);
       }},
      {"ReduceNullSendbuffOnNonRoot", loomInvalidArgument, kSendNull, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomReduce(nullptr, b.recv.data(), kCount, i32, loomSum, other_rank(c), c.comm,
                           nullptr);
       }},
      {"ReduceNullRecvbuffOnRoot", loomInvalidArgument, kRecvNull, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomReduce(b.send.data(), nullptr, kCount, i32, loomSum, c.rank, c.comm, nullptr);
       }},
      {"ReduceOverlapOnRoot", loomInvalidArgument, kOverlap, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomReduce(b.send.data() + 1, b.send.data(), kCount - 1, i32, loomSum, c.rank,
                           c.comm, nullptr);
       }},
      // ---- loomAllGather (in place: sendbuff == recvbuff + rank * count) ----
      {"AllGatherNullComm", loomInvalidArgument, kNullComm, false,
       [i32](const Ctx& c, Bufs& b) {
         return loomAllGather(b.send.data(), b.recv.data(), block_count(c), i32, nullptr, nullptr);
       }},
      {"AllGatherDatatypeUnknown", loomInvalidArgument, kType, true,
       [badt](const Ctx& c, Bufs& b) {
         return loomAllGather(b.send.data(), b.recv.data(), block_count(c), badt, c.comm, nullptr);
       }},
      {"AllGatherNullSendbuff", loomInvalidArgument, kSendNull, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomAllGather(nullptr, b.recv.data(), block_count(c), i32, c.comm, nullptr);
       }},
      {"AllGatherNullRecvbuff", loomInvalidArgument, kRecvNull, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomAllGather(b.send.data(), nullptr, block_count(c), i32, c.comm, nullptr);
       }},
      {"AllGatherOverlapNotInPlace", loomInvalidArgument, kOverlap, true,
       [i32](const Ctx& c, Bufs& b) {
         size_t cnt = block_count(c);
         return loomAllGather(b.recv.data() + (size_t)c.rank * cnt + 1, b.recv.data(), cnt, i32,
                              c.comm, nullptr);
       }},
      // ---- loomReduceScatter (in place: recvbuff == sendbuff + rank * count) ----
      {"ReduceScatterNullComm", loomInvalidArgument, kNullComm, false,
       [i32](const Ctx& c, Bufs& b) {
         return loomReduceScatter(b.send.data(), b.recv.data(), block_count(c), i32, loomSum,
                                  nullptr, nullptr);
       }},
      {"ReduceScatterDatatypeUnknown", loomInvalidArgument, kType, true,
       [badt](const Ctx& c, Bufs& b) {
         return loomReduceScatter(b.send.data(), b.recv.data(), block_count(c), badt, loomSum,
                                  c.comm, nullptr);
       }},
      {"ReduceScatterOpNegative",
       loomInvalidArgument,
       {{"op"}, {"-1"}},
       true,
       [i32](const Ctx& c, Bufs& b) {
         return loomReduceScatter(b.send.data(), b.recv.data(), block_count(c), i32,
                                  (loomRedOp_t)-1, c.comm, nullptr);
       }},
      {"ReduceScatterNullSendbuff", loomInvalidArgument, kSendNull, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomReduceScatter(nullptr, b.recv.data(), block_count(c), i32, loomSum, c.comm,
                                  nullptr);
       }},
      {"ReduceScatterNullRecvbuff", loomInvalidArgument, kRecvNull, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomReduceScatter(b.send.data(), nullptr, block_count(c), i32, loomSum, c.comm,
                                  nullptr);
       }},
      {"ReduceScatterOverlapNotInPlace", loomInvalidArgument, kOverlap, true,
       [i32](const Ctx& c, Bufs& b) {
         size_t cnt = block_count(c);
         return loomReduceScatter(b.send.data(), b.send.data() + (size_t)c.rank * cnt + 1, cnt, i32,
                                  loomSum, c.comm, nullptr);
       }},
      // ---- loomAlltoAll (in place: sendbuff == recvbuff) ----
      {"AlltoAllNullComm", loomInvalidArgument, kNullComm, false,
       [i32](const Ctx& c, Bufs& b) {
         return loomAlltoAll(b.send.data(), b.recv.data(), block_count(c), i32, nullptr, nullptr);
       }},
      {"AlltoAllDatatypeUnknown", loomInvalidArgument, kType, true,
       [badt](const Ctx& c, Bufs& b) {
         return loomAlltoAll(b.send.data(), b.recv.data(), block_count(c), badt, c.comm, nullptr);
       }},
      {"AlltoAllNullSendbuff", loomInvalidArgument, kSendNull, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomAlltoAll(nullptr, b.recv.data(), block_count(c), i32, c.comm, nullptr);
       }},
      {"AlltoAllNullRecvbuff", loomInvalidArgument, kRecvNull, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomAlltoAll(b.send.data(), nullptr, block_count(c), i32, c.comm, nullptr);
       }},
      {"AlltoAllOverlapNotInPlace", loomInvalidArgument, kOverlap, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomAlltoAll(b.recv.data() + 1, b.recv.data(), block_count(c), i32, c.comm,
                             nullptr);
       }},
      // ---- loomAlltoAllv ----
      {"AlltoAllvNullComm", loomInvalidArgument, kNullComm, false,
       [i32](const Ctx& c, Bufs& b) {
         VArgs a(c.nranks, block_count(c));
         return loomAlltoAllv(b.send.data(), a.counts.data(), a.displs.data(), b.recv.data(),
                              a.counts.data(), a.displs.data(), i32, nullptr, nullptr);
       }},
      {"AlltoAllvDatatypeUnknown", loomInvalidArgument, kType, true,
       [badt](const Ctx& c, Bufs& b) {
         VArgs a(c.nranks, block_count(c));
         return loomAlltoAllv(b.send.data(), a.counts.data(), a.displs.data(), b.recv.data(),
                              a.counts.data(), a.displs.data(), badt, c.comm, nullptr);
       }},
      {"AlltoAllvNullSendbuff", loomInvalidArgument, kSendNull, true,
       [i32](const Ctx& c, Bufs& b) {
         VArgs a(c.nranks, block_count(c));
         return loomAlltoAllv(nullptr, a.counts.data(), a.displs.data(), b.recv.data(),
                              a.counts.data(), a.displs.data(), i32, c.comm, nullptr);
       }},
      {"AlltoAllvNullRecvbuff", loomInvalidArgument, kRecvNull, true,
       [i32](const Ctx& c, Bufs& b) {
         VArgs a(c.nranks, block_count(c));
         return loomAlltoAllv(b.send.data(), a.counts.data(), a.displs.data(), nullptr,
                              a.counts.data(), a.displs.data(), i32, c.comm, nullptr);
       }},
      {"AlltoAllvNullSendcounts", loomInvalidArgument, kArrayNull, true,
       [i32](const Ctx& c, Bufs& b) {
         VArgs a(c.nranks, block_count(c));
         return loomAlltoAllv(b.send.data(), nullptr, a.displs.data(), b.recv.data(),
                              a.counts.data(), a.displs.data(), i32, c.comm, nullptr);
       }},
      {"AlltoAllvNullSdispls", loomInvalidArgument, kArrayNull, true,
       [i32](const Ctx& c, Bufs& b) {
         VArgs a(c.nranks, block_count(c));
         return loomAlltoAllv(b.send.data(), a.counts.data(), nullptr, b.recv.data(),
                              a.counts.data(), a.displs.data(), i32, c.comm, nullptr);
       }},
      {"AlltoAllvNullRecvcounts", loomInvalidArgument, kArrayNull, true,
       [i32](const Ctx& c, Bufs& b) {
         VArgs a(c.nranks, block_count(c));
         return loomAlltoAllv(b.send.data(), a.counts.data(), a.displs.data(), b.recv.data(),
                              nullptr, a.displs.data(), i32, c.comm, nullptr);
       }},
      {"AlltoAllvNullRdispls", loomInvalidArgument, kArrayNull, true,
       [i32](const Ctx& c, Bufs& b) {
         VArgs a(c.nranks, block_count(c));
         return loomAlltoAllv(b.send.data(), a.counts.data(), a.displs.data(), b.recv.data(),
                              a.counts.data(), nullptr, i32, c.comm, nullptr);
       }},
      {"AlltoAllvOverlap", loomInvalidArgument, kOverlap, true,
       [i32](const Ctx& c, Bufs& b) {
         VArgs a(c.nranks, block_count(c));
         return loomAlltoAllv(b.recv.data() + 1, a.counts.data(), a.displs.data(), b.recv.data(),
                              a.counts.data(), a.displs.data(), i32, c.comm, nullptr);
       }},
      // ---- loomGather (recvbuff: the root's only) ----
      {"GatherNullComm", loomInvalidArgument, kNullComm, false,
       [i32](const Ctx& c, Bufs& b) {
         return loomGather(b.send.data(), b.recv.data(), block_count(c), i32, 0, nullptr, nullptr);
       }},
      {"GatherRootNegative", loomInvalidArgument, kRootNeg, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomGather(b.send.data(), b.recv.data(), block_count(c), i32, -1, c.comm, nullptr);
       }},
      {"GatherRootNranks", loomInvalidArgument, kRootN, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomGather(b.send.data(), b.recv.data(), block_count(c), i32, c.nranks, c.comm,
                           nullptr);
       }},
      {"GatherDatatypeUnknown", loomInvalidArgument, kType, true,
       [badt](const Ctx& c, Bufs& b) {
         return loomGather(b.send.data(), b.recv.data(), block_count(c), badt, 0, c.comm, nullptr);
       }},
      {"GatherNullSendbuffOnNonRoot", loomInvalidArgument, kSendNull, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomGather(nullptr, b.recv.data(), block_count(c), i32, other_rank(c), c.comm,
                           nullptr);
       }},
      {"GatherNullRecvbuffOnRoot", loomInvalidArgument, kRecvNull, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomGather(b.send.data(), nullptr, block_count(c), i32, c.rank, c.comm, nullptr);
       }},
      {"GatherOverlapNotInPlaceOnRoot", loomInvalidArgument, kOverlap, true,
       [i32](const Ctx& c, Bufs& b) {
         size_t cnt = block_count(c);
         return loomGather(b.recv.data() + (size_t)c.rank * cnt + 1, b.recv.data(), cnt, i32,
                           c.rank, c.comm, nullptr);
       }},
      // ---- loomScatter (sendbuff: the root's only) ----
      {"ScatterNullComm", loomInvalidArgument, kNullComm, false,
       [i32](const Ctx& c, Bufs& b) {
         return loomScatter(b.send.data(), b.recv.data(), block_count(c), i32, 0, nullptr, nullptr);
       }},
      {"ScatterRootNegative", loomInvalidArgument, kRootNeg, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomScatter(b.send.data(), b.recv.data(), block_count(c), i32, -1, c.comm, nullptr);
       }},
      {"ScatterRootNranks", loomInvalidArgument, kRootN, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomScatter(b.send.data(), b.recv.data(), block_count(c), i32, c.nranks, c.comm,
                            nullptr);
       }},
      {"ScatterDatatypeUnknown", loomInvalidArgument, kType, true,
       [badt](const Ctx& c, Bufs& b) {
         return loomScatter(b.send.data(), b.recv.data(), block_count(c), badt, 0, c.comm, nullptr);
       }},
      {"ScatterNullSendbuffOnRoot", loomInvalidArgument, kSendNull, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomScatter(nullptr, b.recv.data(), block_count(c), i32, c.rank, c.comm, nullptr);
       }},
      {"ScatterNullRecvbuffOnNonRoot", loomInvalidArgument, kRecvNull, true,
       [i32](const Ctx& c, Bufs& b) {
         return loomScatter(b.send.data(), nullptr, block_count(c), i32, other_rank(c), c.comm,
                            nullptr);
       }},
      {"ScatterOverlapNotInPlaceOnRoot", loomInvalidArgument, kOverlap, true,
       [i32](const Ctx& c, Bufs& b) {
         size_t cnt = block_count(c);
         return loomScatter(b.send.data(), b.send.data() + (size_t)c.rank * cnt + 1, cnt, i32,
                            c.rank, c.comm, nullptr);
       }},
  };
  return v;
}

// ---- Sizes that overflow ----------------------------------------------------------

// A count whose product with nranks wraps around size_t to a few elements.
size_t wrapping_count(const Ctx& c) {
  return SIZE_MAX / (size_t)c.nranks + 1;
}

const Words kTooBig = {{"count"}, {"more than a buffer can hold", "overflows"}};

// Every size product a call makes (count x element size x ranks, counts plus
// displacements) checked before anything is allocated or sent: before, an
// all-to-all of 2^63 + 1 float32 "ran out of memory building its plan" and
// broke the communicator on every rank.
std::vector<Case> overflow_cases() {
  const size_t huge = ((size_t)1 << 63) + 1;
  std::vector<Case> v = {
      {"AllReduceCountTimesSizeOverflows", loomInvalidArgument, kTooBig, true,
       [](const Ctx& c, Bufs& b) {
         return loomAllReduce(b.send.data(), b.recv.data(), SIZE_MAX / 2, loomInt32, loomSum,
                              c.comm, nullptr);
       }},
      {"AllReduceBufferWrapsAddressSpace",
       loomInvalidArgument,
       {{"wraps around the end of the address space"}},
       true,
       [](const Ctx& c, Bufs& b) {
         void* top = (void*)(UINTPTR_MAX - 1024);
         return loomAllReduce(top, b.recv.data(), 1000, loomInt32, loomSum, c.comm, nullptr);
       }},
      {"BroadcastCountOverflows", loomInvalidArgument, kTooBig, true,
       [huge](const Ctx& c, Bufs& b) {
         return loomBroadcast(b.send.data(), b.recv.data(), huge, loomFloat32, 0, c.comm, nullptr);
       }},
      {"ReduceCountOverflows", loomInvalidArgument, kTooBig, true,
       [huge](const Ctx& c, Bufs& b) {
         return loomReduce(b.send.data(), b.recv.data(), huge, loomFloat64, loomSum, 0, c.comm,
                           nullptr);
       }},
      {"AlltoAllCount2Pow63Plus1Float32", loomInvalidArgument, kTooBig, true,
       [huge](const Ctx& c, Bufs& b) {
         return loomAlltoAll(b.send.data(), b.recv.data(), huge, loomFloat32, c.comm, nullptr);
       }},
      {"AlltoAllCountTimesRanksWrapsInt8", loomInvalidArgument, kTooBig, true,
       [](const Ctx& c, Bufs& b) {
         return loomAlltoAll(b.send.data(), b.recv.data(), wrapping_count(c), loomInt8, c.comm,
                             nullptr);
       }},
      {"AllGatherCountTimesRanksWraps", loomInvalidArgument, kTooBig, true,
       [](const Ctx& c, Bufs& b) {
         return loomAllGather(b.send.data(), b.recv.data(), wrapping_count(c), loomUint8, c.comm,
                              nullptr);
       }},
      {"ReduceScatterCountTimesRanksWraps", loomInvalidArgument, kTooBig, true,
       [](const Ctx& c, Bufs& b) {
         return loomReduceScatter(b.send.data(), b.recv.data(), wrapping_count(c), loomInt8,
                                  loomSum, c.comm, nullptr);
       }},
      {"GatherCountTimesRanksWrapsOnNonRoot", loomInvalidArgument, kTooBig, true,
       [](const Ctx& c, Bufs& b) {
         return loomGather(b.send.data(), b.recv.data(), wrapping_count(c), loomInt8, other_rank(c),
                           c.comm, nullptr);
       }},
      {"ScatterCountTimesRanksWrapsOnNonRoot", loomInvalidArgument, kTooBig, true,
       [](const Ctx& c, Bufs& b) {
         return loomScatter(b.send.data(), b.recv.data(), wrapping_count(c), loomInt8,
                            other_rank(c), c.comm, nullptr);
       }},
      {"SendCountOverflows", loomInvalidArgument, kTooBig, true,
       [](const Ctx& c, Bufs& b) {
         return loomSend(b.send.data(), SIZE_MAX / 4 + 1, loomFloat32, other_rank(c), c.comm,
                         nullptr);
       }},
      {"RecvCountOverflows", loomInvalidArgument, kTooBig, true,
       [](const Ctx& c, Bufs& b) {
         return loomRecv(b.recv.data(), SIZE_MAX / 8 + 1, loomFloat64, other_rank(c), c.comm,
                         nullptr);
       }},
      {"AlltoAllvDisplacementPlusCountOverflows",
       loomInvalidArgument,
       {{"displacement"}, {"overflows"}},
       true,
       [](const Ctx& c, Bufs& b) {
         VArgs a(c.nranks, 1), r(c.nranks, 1);
         a.displs[(size_t)c.nranks - 1] = SIZE_MAX;
         return loomAlltoAllv(b.send.data(), a.counts.data(), a.displs.data(), b.recv.data(),
                              r.counts.data(), r.displs.data(), loomInt32, c.comm, nullptr);
       }},
      {"AlltoAllvExtentTimesSizeOverflows", loomInvalidArgument, kTooBig, true,
       [](const Ctx& c, Bufs& b) {
         VArgs a(c.nranks, 1), r(c.nranks, 1);
         r.displs[0] = SIZE_MAX / 4;
         return loomAlltoAllv(b.send.data(), a.counts.data(), a.displs.data(), b.recv.data(),
                              r.counts.data(), r.displs.data(), loomInt64, c.comm, nullptr);
       }},
  };
  return v;
}

std::vector<Case> collective_cases() {
  const loomDataType_t i32 = loomInt32;
  std::vector<Case> v = {
      // ---- loomAllReduce ----
      {"AllReduceNullComm", loomInvalidArgument, kNullComm, false,
       [](const Ctx&, Bufs& b) {
         return loomAllReduce(b.send.data(), b.recv.data(), kCount, loomInt32, loomSum, nullptr,
                              nullptr);
       }},
      {"AllReduceNullSendbuff",
       loomInvalidArgument,
       {{"sendbuff", "send"}, {"null"}},
       true,
       [i32](const Ctx& c, Bufs& b) {
         return loomAllReduce(nullptr, b.recv.data(), kCount, i32, loomSum, c.comm, nullptr);
       }},
      {"AllReduceNullRecvbuff",
       loomInvalidArgument,
       {{"recvbuff", "recv"}, {"null"}},
       true,
       [i32](const Ctx& c, Bufs& b) {
         return loomAllReduce(b.send.data(), nullptr, kCount, i32, loomSum, c.comm, nullptr);
       }},
      {"AllReduceNullInPlace",
       loomInvalidArgument,
       {{"null"}},
       true,
       [i32](const Ctx& c, Bufs&) {
         return loomAllReduce(nullptr, nullptr, kCount, i32, loomSum, c.comm, nullptr);
       }},
      {"AllReduceDatatypeNumTypes",
       loomInvalidArgument,
       {{"datatype", "type"}, {"12"}},
       true,
       [](const Ctx& c, Bufs& b) {
         return loomAllReduce(b.send.data(), b.recv.data(), kCount, loomNumTypes, loomSum, c.comm,
                              nullptr);
       }},
      {"AllReduceDatatypeNegative",
       loomInvalidArgument,
       {{"datatype", "type"}, {"-1"}},
       true,
       [](const Ctx& c, Bufs& b) {
         return loomAllReduce(b.send.data(), b.recv.data(), kCount, (loomDataType_t)-1, loomSum,
                              c.comm, nullptr);
       }},
      {"AllReduceOpNumOps",
       loomInvalidArgument,
       {{"op"}, {"5"}},
       true,
       [i32](const Ctx& c, Bufs& b) {
         return loomAllReduce(b.send.data(), b.recv.data(), kCount, i32, loomNumOps, c.comm,
                              nullptr);
       }},
      {"AllReduceOpNegative",
       loomInvalidArgument,
       {{"op"}, {"-1"}},
       true,
       [i32](const Ctx& c, Bufs& b) {
         return loomAllReduce(b.send.data(), b.recv.data(), kCount, i32, (loomRedOp_t)-1, c.comm,
                              nullptr);
       }},
      {"AllReduceOpMaxRedOp",
       loomInvalidArgument,
       {{"op"}},
       true,
       [i32](const Ctx& c, Bufs& b) {
         return loomAllReduce(b.send.data(), b.recv.data(), kCount, i32, loomMaxRedOp, c.comm,
                              nullptr);
       }},
      {"AllReduceRecvOverlapsSendAfter",
       loomInvalidArgument,
       {{"overlap"}},
       true,
       [i32](const Ctx& c, Bufs& b) {
         return loomAllReduce(b.send.data(), b.send.data() + 1, kCount - 1, i32, loomSum, c.comm,
                              nullptr);
       }},
      {"AllReduceRecvOverlapsSendBefore",
       loomInvalidArgument,
       {{"overlap"}},
       true,
       [i32](const Ctx& c, Bufs& b) {
         return loomAllReduce(b.send.data() + 1, b.send.data(), kCount - 1, i32, loomSum, c.comm,
                              nullptr);
       }},
      {"AllReducePreMulSumWrongDatatype",
       loomInvalidArgument,
       {{"premulsum", "op"}, {"float32", "float"}, {"int32"}},
       true,
       [i32](const Ctx& c, Bufs& b) {
         loomRedOp_t pm;
         EXPECT_LOOM_OK(loomRedOpCreatePreMulSum(&pm, &g_two, loomFloat32, kImm, c.comm));
         loomResult_t r =
             loomAllReduce(b.send.data(), b.recv.data(), kCount, i32, pm, c.comm, nullptr);
         EXPECT_LOOM_OK(loomRedOpDestroy(pm, c.comm));
         return r;
       }},
      {"AllReduceDestroyedOp",
       loomInvalidArgument,
       {{"op"}},
       true,
       [i32](const Ctx& c, Bufs& b) {
         loomRedOp_t pm;
         EXPECT_LOOM_OK(loomRedOpCreatePreMulSum(&pm, &g_two, i32, kImm, c.comm));
         EXPECT_LOOM_OK(loomRedOpDestroy(pm, c.comm));
         return loomAllReduce(b.send.data(), b.recv.data(), kCount, i32, pm, c.comm, nullptr);
       }},
      {"AllReduceOpOfAnotherComm",
       loomInvalidArgument,
       {{"op"}},
       true,
       [i32](const Ctx& c, Bufs& b) {
         loomComm_t other = solo_comm();
         loomRedOp_t pm;
         EXPECT_LOOM_OK(loomRedOpCreatePreMulSum(&pm, &g_two, i32, kImm, other));
         loomResult_t r =
             loomAllReduce(b.send.data(), b.recv.data(), kCount, i32, pm, c.comm, nullptr);
         EXPECT_LOOM_OK(loomRedOpDestroy(pm, other));
         EXPECT_LOOM_OK(loomCommDestroy(other));
         return r;
       }},
      // ---- loomSend / loomRecv ----
      {"SendNullComm", loomInvalidArgument, kNullComm, false,
       [i32](const Ctx& c, Bufs& b) {
         return loomSend(b.send.data(), kCount, i32, (c.rank + 1) % c.nranks, nullptr, nullptr);
       }},
      {"RecvNullComm", loomInvalidArgument, kNullComm, false,
       [i32](const Ctx& c, Bufs& b) {
         return loomRecv(b.recv.data(), kCount, i32, (c.rank + 1) % c.nranks, nullptr, nullptr);
       }},
      {"SendNullBuffer",
       loomInvalidArgument,
       {{"sendbuff", "buffer", "buf"}, {"null"}},
       true,
       [i32](const Ctx& c, Bufs&) {
         return loomSend(nullptr, kCount, i32, (c.rank + 1) % c.nranks, c.comm, nullptr);
       }},
      {"RecvNullBuffer",
       loomInvalidArgument,
       {{"recvbuff", "buffer", "buf"}, {"null"}},
       true,
       [i32](const Ctx& c, Bufs&) {
         return loomRecv(nullptr, kCount, i32, (c.rank + 1) % c.nranks, c.comm, nullptr);
       }},
      {"SendPeerNegative",
       loomInvalidArgument,
       {{"peer"}, {"-1"}},
       true,
       [i32](const Ctx& c, Bufs& b) {
         return loomSend(b.send.data(), kCount, i32, -1, c.comm, nullptr);
       }},
      {"SendPeerNranks",
       loomInvalidArgument,
       {{"peer"}, {"$N"}},
       true,
       [i32](const Ctx& c, Bufs& b) {
         return loomSend(b.send.data(), kCount, i32, c.nranks, c.comm, nullptr);
       }},
      {"RecvPeerNegative",
       loomInvalidArgument,
       {{"peer"}, {"-1"}},
       true,
       [i32](const Ctx& c, Bufs& b) {
         return loomRecv(b.recv.data(), kCount, i32, -1, c.comm, nullptr);
       }},
      {"RecvPeerNranks",
       loomInvalidArgument,
       {{"peer"}, {"$N"}},
       true,
       [i32](const Ctx& c, Bufs& b) {
         return loomRecv(b.recv.data(), kCount, i32, c.nranks, c.comm, nullptr);
       }},
      {"SendDatatypeUnknown",
       loomInvalidArgument,
       {{"datatype", "type"}},
       true,
       [](const Ctx& c, Bufs& b) {
         return loomSend(b.send.data(), kCount, loomNumTypes, (c.rank + 1) % c.nranks, c.comm,
                         nullptr);
       }},
      {"RecvDatatypeUnknown",
       loomInvalidArgument,
       {{"datatype", "type"}},
       true,
       [](const Ctx& c, Bufs& b) {
         return loomRecv(b.recv.data(), kCount, loomNumTypes, (c.rank + 1) % c.nranks, c.comm,
                         nullptr);
       }},
      // ---- loomRedOpCreatePreMulSum / loomRedOpDestroy ----
      {"PreMulSumNullComm", loomInvalidArgument, kNullComm, false,
       [](const Ctx&, Bufs& b) {
         return loomRedOpCreatePreMulSum(&b.op_out, &g_two, loomFloat32, kImm, nullptr);
       }},
      {"PreMulSumNullOpPointer",
       loomInvalidArgument,
       {{"op"}, {"null"}},
       true,
       [](const Ctx& c, Bufs&) {
         return loomRedOpCreatePreMulSum(nullptr, &g_two, loomFloat32, kImm, c.comm);
       }},
      {"PreMulSumNullScalar",
       loomInvalidArgument,
       {{"scalar"}, {"null"}},
       true,
       [](const Ctx& c, Bufs& b) {
         return loomRedOpCreatePreMulSum(&b.op_out, nullptr, loomFloat32, kImm, c.comm);
       }},
      {"PreMulSumDatatypeUnknown",
       loomInvalidArgument,
       {{"datatype", "type"}},
       true,
       [](const Ctx& c, Bufs& b) {
         return loomRedOpCreatePreMulSum(&b.op_out, &g_two, loomNumTypes, kImm, c.comm);
       }},
      {"PreMulSumResidenceUnknown",
       loomInvalidArgument,
       {{"residence"}},
       true,
       [](const Ctx& c, Bufs& b) {
         return loomRedOpCreatePreMulSum(&b.op_out, &g_two, loomFloat32, (loomScalarResidence_t)7,
                                         c.comm);
       }},
      {"RedOpDestroyBuiltIn",
       loomInvalidArgument,
       {{"op"}},
       true,
       [](const Ctx& c, Bufs&) { return loomRedOpDestroy(loomSum, c.comm); }},
      {"RedOpDestroyNeverCreated",
       loomInvalidArgument,
       {{"op"}},
       true,
       [](const Ctx& c, Bufs&) { return loomRedOpDestroy((loomRedOp_t)(loomNumOps + 7), c.comm); }},
      {"RedOpDestroyTwice",
       loomInvalidArgument,
       {{"op"}},
       true,
       [](const Ctx& c, Bufs&) {
         loomRedOp_t pm;
         EXPECT_LOOM_OK(loomRedOpCreatePreMulSum(&pm, &g_two, loomFloat32, kImm, c.comm));
         EXPECT_LOOM_OK(loomRedOpDestroy(pm, c.comm));
         return loomRedOpDestroy(pm, c.comm);
       }},
      {"RedOpDestroyNullComm", loomInvalidArgument, kNullComm, false,
       [](const Ctx& c, Bufs&) {
         loomRedOp_t pm;
         EXPECT_LOOM_OK(loomRedOpCreatePreMulSum(&pm, &g_two, loomFloat32, kImm, c.comm));
         loomResult_t r = loomRedOpDestroy(pm, nullptr);
         EXPECT_LOOM_OK(loomRedOpDestroy(pm, c.comm));  // the correct call
         return r;
       }},
      {"RedOpDestroyOnAnotherComm",
       loomInvalidArgument,
       {{"op"}},
       false,
       [](const Ctx& c, Bufs&) {
         loomComm_t other = solo_comm();
         loomRedOp_t pm;
         EXPECT_LOOM_OK(loomRedOpCreatePreMulSum(&pm, &g_two, loomFloat32, kImm, c.comm));
         loomResult_t r = loomRedOpDestroy(pm, other);
         EXPECT_LOOM_OK(loomRedOpDestroy(pm, c.comm));  // the correct call
         EXPECT_LOOM_OK(loomCommDestroy(other));
         return r;
       }},
      // ---- Communicator queries ----
      {"CommCountNullComm", loomInvalidArgument, kNullComm, false,
       [](const Ctx&, Bufs& b) { return loomCommCount(nullptr, &b.int_out); }},
      {"CommCountNullOut",
       loomInvalidArgument,
       {{"count"}, {"null"}},
       true,
       [](const Ctx& c, Bufs&) { return loomCommCount(c.comm, nullptr); }},
      {"CommUserRankNullComm", loomInvalidArgument, kNullComm, false,
       [](const Ctx&, Bufs& b) { return loomCommUserRank(nullptr, &b.int_out); }},
      {"CommUserRankNullOut",
       loomInvalidArgument,
       {{"rank"}, {"null"}},
       true,
       [](const Ctx& c, Bufs&) { return loomCommUserRank(c.comm, nullptr); }},
      {"CommCuDeviceNullComm", loomInvalidArgument, kNullComm, false,
       [](const Ctx&, Bufs& b) { return loomCommCuDevice(nullptr, &b.int_out); }},
      {"CommCuDeviceNullOut",
       loomInvalidArgument,
       {{"device"}, {"null"}},
       true,
       [](const Ctx& c, Bufs&) { return loomCommCuDevice(c.comm, nullptr); }},
      {"CommGetAsyncErrorNullComm", loomInvalidArgument, kNullComm, false,
       [](const Ctx&, Bufs& b) { return loomCommGetAsyncError(nullptr, &b.res_out); }},
      {"CommGetAsyncErrorNullOut",
       loomInvalidArgument,
       {{"asyncerror", "error"}, {"null"}},
       true,
       [](const Ctx& c, Bufs&) { return loomCommGetAsyncError(c.comm, nullptr); }},
  };
  std::vector<Case> more = other_collective_cases();
  v.insert(v.end(), more.begin(), more.end());
  more = overflow_cases();
  v.insert(v.end(), more.begin(), more.end());
  return v;
}

// Bad calls to the init functions. The id is a valid one for this run.
struct InitCase {
  const char* name;
  Words words;
  bool from_env;  // the correct init is loomCommInitFromEnv (process ranks only)
  std::function<loomResult_t(const Ctx&, const loomUniqueId&, Bufs&)> call;
};

loomConfig_t bare_config(unsigned char fill) {
  loomConfig_t cfg;
  memset(&cfg, fill, sizeof(cfg));
  cfg.blocking = 1;
  cfg.timeoutMs = kCommTimeoutMs;
  cfg.commName = nullptr;
  return cfg;
}

loomUniqueId garbage_id(unsigned char fill) {
  loomUniqueId id;
  for (size_t i = 0; i < sizeof(id.internal); i++) id.internal[i] = (char)(fill + 37 * i);
  if (fill == 0) memset(&id, 0, sizeof(id));
  return id;
}

std::vector<InitCase> init_cases() {
  const Words kNullOut = {{"comm"}, {"null"}};
  std::vector<InitCase> v = {
      {"InitRankNullComm", kNullOut, false,
       [](const Ctx& c, const loomUniqueId& id, Bufs&) {
         return loomCommInitRank(nullptr, c.nranks, id, c.rank);
       }},
      {"InitRankConfigNullComm", kNullOut, false,
       [](const Ctx& c, const loomUniqueId& id, Bufs&) {
         loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
         return loomCommInitRankConfig(nullptr, c.nranks, id, c.rank, &cfg);
       }},
      {"InitRankNranksZero",
       {{"nranks"}, {"0"}},
       false,
       [](const Ctx&, const loomUniqueId& id, Bufs& b) {
         return loomCommInitRank(&b.comm_out, 0, id, 0);
       }},
      {"InitRankNranksNegative",
       {{"nranks"}, {"-1"}},
       false,
       [](const Ctx&, const loomUniqueId& id, Bufs& b) {
         return loomCommInitRank(&b.comm_out, -1, id, 0);
       }},
      {"InitRankRankNegative",
       {{"rank"}, {"-1"}},
       false,
       [](const Ctx& c, const loomUniqueId& id, Bufs& b) {
         return loomCommInitRank(&b.comm_out, c.nranks, id, -1);
       }},
      {"InitRankRankNranks",
       {{"rank"}, {"$N"}},
       false,
       [](const Ctx& c, const loomUniqueId& id, Bufs& b) {
         return loomCommInitRank(&b.comm_out, c.nranks, id, c.nranks);
       }},
      {"InitRankConfigZeroed",
       {{"config"}},
       false,
       [](const Ctx& c, const loomUniqueId& id, Bufs& b) {
         loomConfig_t cfg = bare_config(0);
         return loomCommInitRankConfig(&b.comm_out, c.nranks, id, c.rank, &cfg);
       }},
      {"InitRankConfigGarbage",
       {{"config"}},
       false,
       [](const Ctx& c, const loomUniqueId& id, Bufs& b) {
         loomConfig_t cfg = bare_config(0xA5);
         return loomCommInitRankConfig(&b.comm_out, c.nranks, id, c.rank, &cfg);
       }},
      {"InitRankGarbageId",
       {{"id"}},
       false,
       [](const Ctx& c, const loomUniqueId&, Bufs& b) {
         return loomCommInitRank(&b.comm_out, c.nranks, garbage_id(0xC3), c.rank);
       }},
      {"InitRankZeroId",
       {{"id"}},
       false,
       [](const Ctx& c, const loomUniqueId&, Bufs& b) {
         return loomCommInitRank(&b.comm_out, c.nranks, garbage_id(0), c.rank);
       }},
      {"InitAllNdevZero",
       {{"ndev"}, {"0"}},
       false,
       [](const Ctx&, const loomUniqueId&, Bufs& b) {
         return loomCommInitAll(b.comms_out, 0, nullptr);
       }},
      {"InitAllNullComms",
       {{"comms"}, {"null"}},
       false,
       [](const Ctx&, const loomUniqueId&, Bufs&) { return loomCommInitAll(nullptr, 2, nullptr); }},
      {"InitFromEnvNullComm", kNullOut, false,
       [](const Ctx&, const loomUniqueId&, Bufs&) {
         loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
         return loomCommInitFromEnv(nullptr, &cfg);
       }},
      {"InitFromEnvConfigZeroed",
       {{"config"}},
       true,
       [](const Ctx&, const loomUniqueId&, Bufs& b) {
         loomConfig_t cfg = bare_config(0);
         return loomCommInitFromEnv(&b.comm_out, &cfg);
       }},
  };
  return v;
}

// ---- Running a case ------------------------------------------------------------------

struct Setup {
  Mode mode;
  int nranks;
  int bad;  // the rank that makes the bad call
};

const Setup kSetups[] = {{Mode::Proc, 2, 0}, {Mode::Thread, 3, 2}, {Mode::Proc, 4, 1}};

std::string setup_name(const Setup& s) {
  return std::string(harness::mode_name(s.mode)) + std::to_string(s.nranks) + "_bad" +
         std::to_string(s.bad);
}

// Makes the bad call on the bad rank and checks all it may and may not do.
template <typename F>
void bad_call(const Ctx& c, loomComm_t comm_for_text, loomResult_t want, const Words& words,
              Bufs& b, F&& call) {
  usleep(10000);  // let the peers get into their all-reduce first
  Bufs before = b;
  loomResult_t r = call();
  EXPECT_EQ(r, want) << "got " << loomGetErrorString(r) << ": " << loomGetLastError(nullptr);
  EXPECT_TRUE(names_all(loomGetLastError(nullptr), words, c.nranks)) << "loomGetLastError(NULL)";
  if (comm_for_text) {
    EXPECT_TRUE(names_all(loomGetLastError(comm_for_text), words, c.nranks))
        << "loomGetLastError(comm)";
  }
  expect_untouched(b, before);
}

loomConfig_t good_config() {
  loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
  cfg.timeoutMs = kCommTimeoutMs;
  return cfg;
}

class BadArg : public ::testing::TestWithParam<std::tuple<int, Setup>> {};

TEST_P(BadArg, ReturnsAtOnceAndLosesNothing) {
  auto [k, setup] = GetParam();
  harness::Opts o;
  o.comm_timeout_ms = kCommTimeoutMs;
  o.timeout_s = 120;
  harness::run(
      setup.nranks, setup.mode,
      [k = k, bad = setup.bad](Ctx& c) {
        const Case cs = collective_cases()[(size_t)k];
        Bufs b = make_bufs(c.rank);
        if (c.rank == bad) {
          bad_call(c, cs.on_comm ? c.comm : nullptr, cs.want, cs.words, b,
                   [&] { return cs.call(c, b); });
          if (::testing::Test::HasFatalFailure()) return;
        }
        good_phase(c, b);
      },
      o);
}

std::string bad_arg_name(const ::testing::TestParamInfo<BadArg::ParamType>& info) {
  auto [k, s] = info.param;
  return std::string(collective_cases()[(size_t)k].name) + "_" + setup_name(s);
}

INSTANTIATE_TEST_SUITE_P(Cases, BadArg,
                         ::testing::Combine(::testing::Range(0, (int)collective_cases().size()),
                                            ::testing::ValuesIn(kSetups)),
                         bad_arg_name);

class BadInit : public ::testing::TestWithParam<std::tuple<int, Setup>> {};

TEST_P(BadInit, ReturnsAtOnceAndTheCorrectInitWorks) {
  auto [k, setup] = GetParam();
  if (init_cases()[(size_t)k].from_env && setup.mode == Mode::Thread)
    GTEST_SKIP() << "loomCommInitFromEnv takes its rank from the environment: process ranks only";
  harness::Opts o;
  o.init = harness::Init::None;
  o.comm_timeout_ms = kCommTimeoutMs;
  o.timeout_s = 120;
  harness::run(
      setup.nranks, setup.mode,
      [k = k, bad = setup.bad](Ctx& c) {
        const InitCase ic = init_cases()[(size_t)k];
        loomUniqueId id;
        if (!ic.from_env) {
          harness::share_id(c, &id);
          if (::testing::Test::HasFatalFailure()) return;
        }
        Bufs b = make_bufs(c.rank);
        if (c.rank == bad) {
          bad_call(c, nullptr, loomInvalidArgument, ic.words, b, [&] { return ic.call(c, id, b); });
          if (::testing::Test::HasFatalFailure()) return;
        }
        loomConfig_t cfg = good_config();
        if (ic.from_env) {
          ASSERT_LOOM_OK(loomCommInitFromEnv(&c.comm, &cfg));
        } else {
          ASSERT_LOOM_OK(loomCommInitRankConfig(&c.comm, c.nranks, id, c.rank, &cfg));
        }
        good_phase(c, b);
      },
      o);
}

std::string bad_init_name(const ::testing::TestParamInfo<BadInit::ParamType>& info) {
  auto [k, s] = info.param;
  return std::string(init_cases()[(size_t)k].name) + "_" + setup_name(s);
}

INSTANTIATE_TEST_SUITE_P(Cases, BadInit,
                         ::testing::Combine(::testing::Range(0, (int)init_cases().size()),
                                            ::testing::ValuesIn(kSetups)),
                         bad_init_name);

// ---- Not available here -------------------------------------------------------------

// Every rank asks for CUDA device ranks on a device this machine does not
// have: loomInvalidUsage at once where there is no CUDA driver at all
// ("no CUDA driver"), loomInvalidArgument where there is one (the device
// does not exist); either way it names the devlist entry and touches
// nothing; then the communicator works as before. (The collectives are
// tested in test_collectives*.cc, the memory calls in test_memory.cc.)
void not_available_body(const Ctx& c) {
  loomComm_t dev[2] = {nullptr, nullptr};
  const int devlist[2] = {1 << 20, 1 << 20};
  loomResult_t r = loomCommInitAll(dev, 2, devlist);
  std::string err = lower(loomGetLastError(nullptr));
  EXPECT_NE(err.find("devlist[0] = 1048576"), std::string::npos) << err;
  if (r == loomInvalidUsage) {
    EXPECT_NE(err.find("no cuda driver"), std::string::npos) << err;
  } else {
    EXPECT_EQ(r, loomInvalidArgument) << err;
    EXPECT_NE(err.find("does not exist"), std::string::npos) << err;
  }
  EXPECT_EQ(dev[0], nullptr);
  EXPECT_EQ(dev[1], nullptr);
  Bufs b = make_bufs(c.rank);
  good_phase(c, b);
}

class NotAvailable : public ::testing::TestWithParam<Setup> {};

TEST_P(NotAvailable, RefusedAtOnceSayingWhy) {
  harness::Opts o;
  o.comm_timeout_ms = kCommTimeoutMs;
  o.timeout_s = 120;
  harness::run(GetParam().nranks, GetParam().mode, not_available_body, o);
}

std::string not_available_name(const ::testing::TestParamInfo<Setup>& info) {
  return std::string(harness::mode_name(info.param.mode)) + std::to_string(info.param.nranks);
}

INSTANTIATE_TEST_SUITE_P(Ranks, NotAvailable, ::testing::ValuesIn(kSetups), not_available_name);

// ---- Root-only buffers and empty calls -----------------------------------------------

// Not bad arguments: a non-root may pass NULL for a buffer only the root
// uses (broadcast's sendbuff, reduce's recvbuff, gather's recvbuff,
// scatter's sendbuff), and any call of count 0 may pass NULL everywhere.
// Every rank makes these calls with each rank as root in turn; each returns
// loomSuccess and the roots' results are right.
void root_only_null_body(const Ctx& c) {
  const int n = c.nranks;
  const size_t cnt = 100;
  const loomDataType_t t = loomInt32;
  auto val = [](int rank, size_t i) { return (int32_t)(rank * 100000 + (int)i); };
  for (int root = 0; root < n; root++) {
    SCOPED_TRACE("root " + std::to_string(root));
    const bool me = c.rank == root;
    std::vector<int32_t> mine(cnt), all(cnt * n, -1), got(cnt, -1);
    for (size_t i = 0; i < cnt; i++) mine[i] = val(c.rank, i);
    std::vector<int32_t> scat(cnt * n);
    for (size_t i = 0; i < scat.size(); i++) scat[i] = val(c.rank, i) ^ 0x55;
    EXPECT_LOOM_OK(
        loomBroadcast(me ? mine.data() : nullptr, got.data(), cnt, t, root, c.comm, nullptr));
    for (size_t i = 0; i < cnt; i++) ASSERT_EQ(got[i], val(root, i)) << "broadcast, element " << i;
    EXPECT_LOOM_OK(
        loomReduce(mine.data(), me ? got.data() : nullptr, cnt, t, loomSum, root, c.comm, nullptr));
    if (me) {
      for (size_t i = 0; i < cnt; i++)
        ASSERT_EQ(got[i], (int32_t)(100000 * n * (n - 1) / 2 + n * (int)i))
            << "reduce, element " << i;
    }
    EXPECT_LOOM_OK(
        loomGather(mine.data(), me ? all.data() : nullptr, cnt, t, root, c.comm, nullptr));
    if (me) {
      for (size_t i = 0; i < all.size(); i++)
        ASSERT_EQ(all[i], val((int)(i / cnt), i % cnt)) << "gather, element " << i;
    }
    EXPECT_LOOM_OK(
        loomScatter(me ? scat.data() : nullptr, got.data(), cnt, t, root, c.comm, nullptr));
    for (size_t i = 0; i < cnt; i++)
      ASSERT_EQ(got[i], val(root, (size_t)c.rank * cnt + i) ^ 0x55) << "scatter, element " << i;
  }
  // Count 0 with every buffer NULL: a no-op on every collective.
  const std::vector<size_t> zeros((size_t)n, 0);
  const size_t* z = zeros.data();
  EXPECT_LOOM_OK(loomAllReduce(nullptr, nullptr, 0, t, loomSum, c.comm, nullptr));
  EXPECT_LOOM_OK(loomBroadcast(nullptr, nullptr, 0, t, n - 1, c.comm, nullptr));
  EXPECT_LOOM_OK(loomReduce(nullptr, nullptr, 0, t, loomMax, n - 1, c.comm, nullptr));
  EXPECT_LOOM_OK(loomAllGather(nullptr, nullptr, 0, t, c.comm, nullptr));
  EXPECT_LOOM_OK(loomReduceScatter(nullptr, nullptr, 0, t, loomSum, c.comm, nullptr));
  EXPECT_LOOM_OK(loomAlltoAll(nullptr, nullptr, 0, t, c.comm, nullptr));
  EXPECT_LOOM_OK(loomAlltoAllv(nullptr, z, z, nullptr, z, z, t, c.comm, nullptr));
  EXPECT_LOOM_OK(loomGather(nullptr, nullptr, 0, t, n - 1, c.comm, nullptr));
  EXPECT_LOOM_OK(loomScatter(nullptr, nullptr, 0, t, n - 1, c.comm, nullptr));
  Bufs b = make_bufs(c.rank);
  good_phase(c, b);
}

class RootOnlyNull : public ::testing::TestWithParam<Setup> {};

TEST_P(RootOnlyNull, IsValidOnNonRoots) {
  harness::Opts o;
  o.comm_timeout_ms = kCommTimeoutMs;
  o.timeout_s = 120;
  harness::run(GetParam().nranks, GetParam().mode, root_only_null_body, o);
}

INSTANTIATE_TEST_SUITE_P(Ranks, RootOnlyNull, ::testing::ValuesIn(kSetups), not_available_name);

}  // namespace

namespace {

// The reproducer: every rank makes the same call whose size
// overflows (all-to-all of 2^63 + 1 float32 and of (2^64 + 2) / 3 int8 and
// float32 at 3 ranks), and the others of the kind; all reject it at once, and
// the communicator works on every rank afterwards.
class OverflowEverywhere : public ::testing::TestWithParam<Setup> {};

TEST_P(OverflowEverywhere, EveryRankRejectsAndTheCommunicatorWorks) {
  harness::Opts o;
  o.comm_timeout_ms = kCommTimeoutMs;
  o.timeout_s = 120;
  harness::run(
      GetParam().nranks, GetParam().mode,
      [](Ctx& c) {
        Bufs b = make_bufs(c.rank);
        const size_t wrap3 = (size_t)((((unsigned __int128)1 << 64) + 2) / 3);
        for (const Case& cs : overflow_cases()) {
          SCOPED_TRACE(cs.name);
          bad_call(c, c.comm, cs.want, cs.words, b, [&] { return cs.call(c, b); });
        }
        for (loomDataType_t t : {loomInt8, loomFloat32}) {
          bad_call(c, c.comm, loomInvalidArgument, kTooBig, b, [&] {
            return loomAlltoAll(b.send.data(), b.recv.data(), wrap3, t, c.comm, nullptr);
          });
        }
        good_phase(c, b);
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(Ranks, OverflowEverywhere,
                         ::testing::Values(Setup{Mode::Proc, 3, 0}, Setup{Mode::Thread, 3, 0},
                                           Setup{Mode::Proc, 2, 0}),
                         [](const ::testing::TestParamInfo<Setup>& i) {
                           return setup_name(i.param);
                         });

}  // namespace
