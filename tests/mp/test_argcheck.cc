// test_argcheck.cc - LOOM_CHECK_ARGS / config.checkArgs: a rank that passes
// another count, datatype, op, root or collective than its peers makes every
// rank return loomInvalidUsage naming the rank and the field, instead of
// loomSuccess with wrong data (what each of these cases gives without the
// check), and nothing of the call runs: the receive buffers keep their
// sentinel, and the next, correct, collective gives the right result.
//
// Mismatch: every case at 2, 3 and 4 ranks, processes and threads; the last
// rank is the odd one out. Agree: with the check on, every collective
// (count 0 included) still gives the right result, alone, in a group and on
// a host stream. OneThreadDrivesAll: one thread calls a group on every
// rank's communicator (the phased exchange). Env: LOOM_CHECK_ARGS=1 turns it
// on, and ranks that set it differently fail init naming it. Silent: a rank
// that never calls makes the others fail at the communicator's timeout, not
// hang.
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "harness.h"

namespace {

using harness::Ctx;
using harness::Mode;
using harness::Opts;
using harness::RanksMode;

constexpr size_t kCount = 64;
constexpr int32_t kSentinel = 0x5A5A5A5A;

Opts check_opts() {
  Opts o;
  o.check_args = 1;
  o.comm_timeout_ms = harness::kNeverMs;  // a mismatch is found at once, never at a deadline
  return o;
}

bool contains(const std::string& text, const std::string& word) {
  return text.find(word) != std::string::npos;
}

// One rank's buffers for a case: send filled with rank-dependent values,
// recv with the sentinel.
struct Bufs {
  std::vector<int32_t> send, recv;
  explicit Bufs(const Ctx& c)
      : send(kCount * (size_t)c.nranks), recv(kCount * (size_t)c.nranks, kSentinel) {
    for (size_t i = 0; i < send.size(); i++) send[i] = (int32_t)(c.rank * 1000 + (int)i);
  }
  bool untouched() const {
    for (int32_t v : recv)
      if (v != kSentinel) return false;
    return true;
  }
};

// A case: what the ranks call; odd is true on the rank that differs.
struct Case {
  const char* name;
  const char* field;  // the word the verdict must name
  std::function<loomResult_t(Bufs&, bool odd, loomComm_t)> call;
};

loomResult_t alltoallv_call(Bufs& b, bool odd, loomComm_t comm) {
  int n = 0, me = 0;
  loomCommCount(comm, &n);
  loomCommUserRank(comm, &me);
  std::vector<size_t> sc((size_t)n, 4), sd((size_t)n), rc((size_t)n, 4), rd((size_t)n);
  if (odd) sc[0] = 5;  // sends rank 0 one element more than rank 0 expects
  for (int p = 0; p < n; p++) sd[(size_t)p] = rd[(size_t)p] = (size_t)p * 8;
  return loomAlltoAllv(b.send.data(), sc.data(), sd.data(), b.recv.data(), rc.data(), rd.data(),
                       loomInt32, comm, nullptr);
}

std::vector<Case> cases() {
  return {
      {"allreduce_count", "count differs",
       [](Bufs& b, bool odd, loomComm_t c) {
         return loomAllReduce(b.send.data(), b.recv.data(), odd ? kCount - 1 : kCount, loomInt32,
                              loomSum, c, nullptr);
       }},
      {"allreduce_dtype_same_size", "datatype differs",
       [](Bufs& b, bool odd, loomComm_t c) {
         return loomAllReduce(b.send.data(), b.recv.data(), kCount, odd ? loomFloat32 : loomInt32,
                              loomSum, c, nullptr);
       }},
      {"allreduce_op", "op differs",
       [](Bufs& b, bool odd, loomComm_t c) {
         return loomAllReduce(b.send.data(), b.recv.data(), kCount, loomInt32,
                              odd ? loomMax : loomSum, c, nullptr);
       }},
      {"allreduce_count_zero", "count differs",
       [](Bufs& b, bool odd, loomComm_t c) {
         return loomAllReduce(b.send.data(), b.recv.data(), odd ? 0 : kCount, loomInt32, loomSum, c,
                              nullptr);
       }},
      {"broadcast_root", "root differs",
       [](Bufs& b, bool odd, loomComm_t c) {
         return loomBroadcast(b.send.data(), b.recv.data(), kCount, loomInt32, odd ? 1 : 0, c,
                              nullptr);
       }},
      {"reduce_root", "root differs",
       [](Bufs& b, bool odd, loomComm_t c) {
         return loomReduce(b.send.data(), b.recv.data(), kCount, loomInt32, loomSum, odd ? 1 : 0, c,
                           nullptr);
       }},
      {"gather_root", "root differs",
       [](Bufs& b, bool odd, loomComm_t c) {
         return loomGather(b.send.data(), b.recv.data(), kCount, loomInt32, odd ? 1 : 0, c,
                           nullptr);
       }},
      {"scatter_root", "root differs",
       [](Bufs& b, bool odd, loomComm_t c) {
         return loomScatter(b.send.data(), b.recv.data(), kCount, loomInt32, odd ? 1 : 0, c,
                            nullptr);
       }},
      {"allgather_count", "count differs",
       [](Bufs& b, bool odd, loomComm_t c) {
         return loomAllGather(b.send.data(), b.recv.data(), odd ? kCount / 2 : kCount, loomInt32, c,
                              nullptr);
       }},
      {"reducescatter_count", "count differs",
       [](Bufs& b, bool odd, loomComm_t c) {
         return loomReduceScatter(b.send.data(), b.recv.data(), odd ? kCount / 2 : kCount,
                                  loomInt32, loomSum, c, nullptr);
       }},
      {"alltoall_count", "count differs",
       [](Bufs& b, bool odd, loomComm_t c) {
         return loomAlltoAll(b.send.data(), b.recv.data(), odd ? kCount / 2 : kCount, loomInt32, c,
                             nullptr);
       }},
      {"alltoallv_counts", "expects", alltoallv_call},
      {"alltoallv_against_allreduce", "collective, count differs",
       [](Bufs& b, bool odd, loomComm_t c) {
         if (odd)
           return loomAllReduce(b.send.data(), b.recv.data(), kCount, loomInt32, loomSum, c,
                                nullptr);
         return alltoallv_call(b, false, c);
       }},
      {"grouping", "grouping differs",
       [](Bufs& b, bool odd, loomComm_t c) {
         // The odd rank groups two all-reduces, the others call them one by one: both calls
         // are refused everywhere (the first returns the refusal on the others; the second's
         // is checked below by the next case's all-reduce passing).
         if (odd) {
           loomGroupStart();
           loomAllReduce(b.send.data(), b.recv.data(), kCount, loomInt32, loomSum, c, nullptr);
           loomAllReduce(b.send.data(), b.recv.data() + kCount, kCount, loomInt32, loomSum, c,
                         nullptr);
           return loomGroupEnd();
         }
         loomResult_t r =
             loomAllReduce(b.send.data(), b.recv.data(), kCount, loomInt32, loomSum, c, nullptr);
         loomResult_t r2 = loomAllReduce(b.send.data(), b.recv.data() + kCount, kCount, loomInt32,
                                         loomSum, c, nullptr);
         return r == loomInvalidUsage && r2 == loomInvalidUsage ? r : loomInternalError;
       }},
      {"collective_kind", "collective differs",
       [](Bufs& b, bool odd, loomComm_t c) {
         if (odd) return loomAllGather(b.send.data(), b.recv.data(), kCount, loomInt32, c, nullptr);
         return loomAllReduce(b.send.data(), b.recv.data(), kCount, loomInt32, loomSum, c, nullptr);
       }},
  };
}

// Every rank: an all-reduce of kCount int32 gives the sum of every rank's values.
void allreduce_ok(const Ctx& c) {
  Bufs b(c);
  ASSERT_LOOM_OK(
      loomAllReduce(b.send.data(), b.recv.data(), kCount, loomInt32, loomSum, c.comm, nullptr));
  int n = c.nranks;
  for (size_t i = 0; i < kCount; i++)
    ASSERT_EQ(b.recv[i], (int32_t)(1000 * n * (n - 1) / 2 + n * (int)i)) << "element " << i;
}

class ArgCheck : public ::testing::TestWithParam<RanksMode> {};

TEST_P(ArgCheck, Mismatch) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        int odd_rank = c.nranks - 1;
        bool odd = c.rank == odd_rank;
        for (const Case& k : cases()) {
          SCOPED_TRACE(k.name);
          Bufs b(c);
          loomResult_t r = k.call(b, odd, c.comm);
          std::string text = loomGetLastError(c.comm);
          ASSERT_EQ(r, loomInvalidUsage) << text;
          EXPECT_TRUE(contains(text, "rank " + std::to_string(odd_rank))) << text;
          EXPECT_TRUE(contains(text, k.field)) << text;
          EXPECT_TRUE(b.untouched()) << "the refused call wrote its receive buffer";
          // Nothing ran, nothing is left queued, and the sequence is still agreed.
          allreduce_ok(c);
          if (::testing::Test::HasFatalFailure()) return;
        }
      },
      check_opts());
}

// With the check on, correct calls give correct results: every collective,
// count 0 too, alone, in a group of three, and on a host stream.
TEST_P(ArgCheck, Agree) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        int nr = c.nranks;
        Bufs b(c);
        ASSERT_LOOM_OK(
            loomAllReduce(b.send.data(), b.recv.data(), 0, loomInt32, loomSum, c.comm, nullptr));
        ASSERT_LOOM_OK(loomBroadcast(b.send.data(), b.recv.data(), kCount, loomInt32, nr - 1,
                                     c.comm, nullptr));
        for (size_t i = 0; i < kCount; i++) ASSERT_EQ(b.recv[i], (nr - 1) * 1000 + (int)i);
        ASSERT_LOOM_OK(
            loomAllGather(b.send.data(), b.recv.data(), kCount, loomInt32, c.comm, nullptr));
        for (int r = 0; r < nr; r++) ASSERT_EQ(b.recv[(size_t)r * kCount + 3], r * 1000 + 3);
        ASSERT_LOOM_OK(alltoallv_call(b, false, c.comm));
        for (int r = 0; r < nr; r++)
          ASSERT_EQ(b.recv[(size_t)r * 8 + 1], r * 1000 + c.rank * 8 + 1) << "from rank " << r;
        // A group: two all-reduces and a count-0 all-gather, checked together.
        Bufs g1(c), g2(c);
        ASSERT_LOOM_OK(loomGroupStart());
        ASSERT_LOOM_OK(loomAllReduce(g1.send.data(), g1.recv.data(), kCount, loomInt32, loomSum,
                                     c.comm, nullptr));
        ASSERT_LOOM_OK(
            loomAllGather(g1.send.data(), g1.recv.data() + kCount, 0, loomInt32, c.comm, nullptr));
        ASSERT_LOOM_OK(loomAllReduce(g2.send.data(), g2.recv.data(), kCount, loomInt32, loomMax,
                                     c.comm, nullptr));
        ASSERT_LOOM_OK(loomGroupEnd());
        ASSERT_EQ(g1.recv[5], 1000 * nr * (nr - 1) / 2 + nr * 5);
        ASSERT_EQ(g2.recv[5], 1000 * (nr - 1) + 5);
        // A host stream.
        shim::StreamGuard s;
        ASSERT_NE(s.get(), nullptr);
        Bufs h(c);
        ASSERT_LOOM_OK(loomAllReduce(h.send.data(), h.recv.data(), kCount, loomInt32, loomSum,
                                     c.comm, s.get()));
        ASSERT_LOOM_OK(loomStreamSynchronize(s.get()));
        ASSERT_EQ(h.recv[7], 1000 * nr * (nr - 1) / 2 + nr * 7);
      },
      check_opts());
}

// A mismatch inside a group refuses the whole group on every rank; a
// mismatch on a host stream is refused at the call.
TEST_P(ArgCheck, GroupAndStream) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        bool odd = c.rank == c.nranks - 1;
        Bufs g1(c), g2(c);
        ASSERT_LOOM_OK(loomGroupStart());
        ASSERT_LOOM_OK(loomAllReduce(g1.send.data(), g1.recv.data(), kCount, loomInt32, loomSum,
                                     c.comm, nullptr));
        ASSERT_LOOM_OK(loomAllReduce(g2.send.data(), g2.recv.data(), kCount,
                                     odd ? loomUint32 : loomInt32, loomSum, c.comm, nullptr));
        loomResult_t r = loomGroupEnd();
        std::string text = loomGetLastError(c.comm);
        ASSERT_EQ(r, loomInvalidUsage) << text;
        EXPECT_TRUE(contains(text, "datatype")) << text;
        EXPECT_TRUE(g1.untouched() && g2.untouched()) << "a refused group ran";
        shim::StreamGuard s;
        ASSERT_NE(s.get(), nullptr);
        Bufs h(c);
        r = loomBroadcast(h.send.data(), h.recv.data(), kCount, loomInt32, odd ? 1 : 0, c.comm,
                          s.get());
        ASSERT_EQ(r, loomInvalidUsage) << loomGetLastError(c.comm);
        ASSERT_LOOM_OK(loomStreamSynchronize(s.get()));
        EXPECT_TRUE(h.untouched());
        allreduce_ok(c);
      },
      check_opts());
}

// A group over two communicators whose check fails on one: the other's task
// still runs (its peers, which saw it pass, run theirs), the failing one's
// nothing. Ranks 0 and 1 share a split communicator; the last rank passes
// another count on the world communicator.
TEST_P(ArgCheck, GroupFailsOnlyTheCommunicatorThatDisagrees) {
  auto [n, mode] = GetParam();
  if (n < 3) GTEST_SKIP() << "needs a rank outside the split";
  harness::run(
      n, mode,
      [](Ctx& c) {
        bool odd = c.rank == c.nranks - 1;
        loomComm_t sub = nullptr;
        ASSERT_LOOM_OK(
            loomCommSplit(c.comm, c.rank < 2 ? 0 : LOOM_SPLIT_NOCOLOR, c.rank, &sub, nullptr));
        shim::CommGuard guard(sub);
        Bufs w(c), s(c);
        ASSERT_LOOM_OK(loomGroupStart());
        if (sub)
          ASSERT_LOOM_OK(loomAllReduce(s.send.data(), s.recv.data(), kCount, loomInt32, loomSum,
                                       sub, nullptr));
        ASSERT_LOOM_OK(loomAllReduce(w.send.data(), w.recv.data(), odd ? kCount - 1 : kCount,
                                     loomInt32, loomSum, c.comm, nullptr));
        loomResult_t r = loomGroupEnd();
        ASSERT_EQ(r, loomInvalidUsage) << loomGetLastError(c.comm);
        EXPECT_TRUE(contains(loomGetLastError(c.comm), "count differs"))
            << loomGetLastError(c.comm);
        EXPECT_TRUE(w.untouched());
        if (sub) {  // ranks 0 and 1: 0 * 1000 + i + 1000 + i
          for (size_t i = 0; i < kCount; i++) ASSERT_EQ(s.recv[i], 1000 + 2 * (int)i);
        }
        allreduce_ok(c);
      },
      check_opts());
}

INSTANTIATE_TEST_SUITE_P(Ranks, ArgCheck,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         harness::ranks_mode_name);

// One thread drives every rank's communicator in a group (the checks of a
// group are phased so that this cannot wait on itself): agreeing calls run,
// a mismatch is refused on every communicator.
TEST(ArgCheckOneThread, DrivesAll) {
  const int n = 3;
  loomUniqueId id;
  ASSERT_LOOM_OK(loomGetUniqueId(&id));
  std::vector<loomComm_t> comms((size_t)n, nullptr);
  std::vector<std::thread> th;
  std::atomic<int> failed{0};
  for (int r = 0; r < n; r++)
    th.emplace_back([&, r] {
      loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
      cfg.checkArgs = 1;
      cfg.timeoutMs = 60000;
      if (loomCommInitRankConfig(&comms[(size_t)r], n, id, r, &cfg) != loomSuccess) failed++;
    });
  for (auto& t : th) t.join();
  ASSERT_EQ(failed.load(), 0);
  std::vector<std::vector<int32_t>> send((size_t)n, std::vector<int32_t>(kCount)),
      recv((size_t)n, std::vector<int32_t>(kCount, kSentinel));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < kCount; i++) send[(size_t)r][i] = r + (int)i;
  for (int round = 0; round < 2; round++) {
    bool bad = round == 1;
    ASSERT_LOOM_OK(loomGroupStart());
    for (int r = 0; r < n; r++)
      ASSERT_LOOM_OK(loomAllReduce(send[(size_t)r].data(), recv[(size_t)r].data(),
                                   bad && r == 2 ? kCount - 1 : kCount, loomInt32, loomSum,
                                   comms[(size_t)r], nullptr));
    loomResult_t res = loomGroupEnd();
    if (!bad) {
      ASSERT_LOOM_OK(res);
      for (int r = 0; r < n; r++) ASSERT_EQ(recv[(size_t)r][9], 3 + 3 * 9);
      for (auto& v : recv) std::fill(v.begin(), v.end(), kSentinel);
      continue;
    }
    ASSERT_EQ(res, loomInvalidUsage);
    for (int r = 0; r < n; r++) {
      std::string text = loomGetLastError(comms[(size_t)r]);
      EXPECT_TRUE(contains(text, "rank 2") && contains(text, "count"))
          << "rank " << r << ": " << text;
      EXPECT_EQ(recv[(size_t)r][0], kSentinel);
    }
  }
  for (auto c : comms) loomCommDestroy(c);
}

// The variable turns the check on (process ranks: each reads its own
// environment), and ranks that set it differently fail init naming it.
TEST(ArgCheckEnv, VariableTurnsItOn) {
  Opts o;
  o.env = {{"LOOM_CHECK_ARGS", "1"}};
  o.comm_timeout_ms = harness::kNeverMs;
  harness::run(
      3, Mode::Proc,
      [](Ctx& c) {
        Bufs b(c);
        loomResult_t r = loomAllReduce(b.send.data(), b.recv.data(), kCount, loomInt32,
                                       c.rank == 1 ? loomMin : loomSum, c.comm, nullptr);
        ASSERT_EQ(r, loomInvalidUsage) << loomGetLastError(c.comm);
        EXPECT_TRUE(contains(loomGetLastError(c.comm), "rank 1")) << loomGetLastError(c.comm);
        allreduce_ok(c);
      },
      o);
}

TEST(ArgCheckEnv, RanksMustAgree) {
  Opts o;
  o.init = harness::Init::None;
  o.rank_env = {{1, "LOOM_CHECK_ARGS", "1"}};
  harness::run(
      3, Mode::Proc,
      [](Ctx& c) {
        loomUniqueId id;
        harness::share_id(c, &id);
        loomComm_t comm = nullptr;
        loomResult_t r = loomCommInitRank(&comm, c.nranks, id, c.rank);
        EXPECT_EQ(r, loomInvalidUsage);
        EXPECT_TRUE(contains(loomGetLastError(nullptr), "LOOM_CHECK_ARGS"))
            << loomGetLastError(nullptr);
        if (comm) loomCommDestroy(comm);
      },
      o);
}

// A rank that never calls: the check's exchange ends at the communicator's
// timeout (or at the failure a peer's timeout reports) with an error that
// says it was the argument check; nobody hangs and nothing runs.
TEST(ArgCheckSilent, RankThatNeverCallsEndsInAnError) {
  Opts o;
  o.check_args = 1;
  o.comm_timeout_ms = 1500;
  harness::run(
      3, Mode::Proc,
      [](Ctx& c) {
        if (c.rank != 2) {
          Bufs b(c);
          loomResult_t r = loomAllReduce(b.send.data(), b.recv.data(), kCount, loomInt32, loomSum,
                                         c.comm, nullptr);
          std::string text = loomGetLastError(c.comm);
          EXPECT_TRUE(r == loomTimeout || r == loomRemoteError) << r << ": " << text;
          EXPECT_TRUE(contains(text, "argument check")) << text;
          EXPECT_TRUE(b.untouched());
        }
        harness::meet(c, 3);  // rank 2 stays until the others have their error
      },
      o);
}

}  // namespace
