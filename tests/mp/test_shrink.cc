// test_shrink.cc - surviving a lost rank (API.md): loomCommRevoke makes pending and future
// calls fail at once on every rank it can reach; loomCommShrink builds a communicator of the
// ranks that stay, in their old order, without the excluded ones, whatever state the old one
// is in. Every communicator's timeout is far above the harness's (kNeverMs): a wait that ends
// at all ended because of the revoke, the departure or the death, not a deadline.
//
// The suites that kill ranks start with "Fault" (run one at a time: they look at /dev/shm).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "harness.h"

namespace {

using harness::Ctx;
using harness::Mode;

harness::Opts never_opts() {
  harness::Opts o;
  o.comm_timeout_ms = harness::kNeverMs;
  o.timeout_s = 90;
  return o;
}

// An all-reduce of each rank's (rank + 1) over comm: the sum must be n(n+1)/2 where the
// communicator's rank r is old rank old_of[r].
void check_sum(loomComm_t comm, const std::vector<int>& old_of) {
  int n = 0, r = -1;
  ASSERT_EQ(loomCommCount(comm, &n), loomSuccess);
  ASSERT_EQ(loomCommUserRank(comm, &r), loomSuccess);
  ASSERT_EQ((size_t)n, old_of.size());
  std::vector<int64_t> v(1000, old_of[(size_t)r] + 1);
  ASSERT_EQ(loomAllReduce(v.data(), v.data(), v.size(), loomInt64, loomSum, comm, nullptr),
            loomSuccess)
      << loomGetLastError(comm);
  int64_t want = 0;
  for (int o : old_of) want += o + 1;
  EXPECT_EQ(v[0], want);
  EXPECT_EQ(v[999], want);
}

std::vector<int> all_but(int n, const std::vector<int>& gone) {
  std::vector<int> v;
  for (int r = 0; r < n; r++)
    if (std::find(gone.begin(), gone.end(), r) == gone.end()) v.push_back(r);
  return v;
}

class RevokeShrink : public ::testing::TestWithParam<std::tuple<int, Mode>> {};

std::string revoke_name(const ::testing::TestParamInfo<std::tuple<int, Mode>>& i) {
  return std::string(std::get<1>(i.param) == Mode::Proc ? "proc" : "thread") +
         std::to_string(std::get<0>(i.param));
}

// The last rank revokes instead of joining an all-reduce: the others' all-reduce fails with
// loomRemoteError naming it, the revoker's next call with loomInvalidUsage; then a shrink that
// excludes no one gives a working communicator of every rank.
TEST_P(RevokeShrink, RevokeEndsEveryRanksCallThenShrinkOfAll) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [n = n](Ctx& c) {
        std::vector<float> v(1 << 12, 1.0f);
        if (c.rank == c.nranks - 1) {
          ASSERT_EQ(loomCommRevoke(c.comm, LOOM_REVOKE_DEFAULT), loomSuccess);
          EXPECT_EQ(
              loomAllReduce(v.data(), v.data(), v.size(), loomFloat32, loomSum, c.comm, nullptr),
              loomInvalidUsage);
          EXPECT_NE(std::string(loomGetLastError(c.comm)).find("revoked"), std::string::npos)
              << loomGetLastError(c.comm);
        } else if (c.nranks > 1) {
          loomResult_t r =
              loomAllReduce(v.data(), v.data(), v.size(), loomFloat32, loomSum, c.comm, nullptr);
          std::string text = loomGetLastError(c.comm);
          EXPECT_EQ(r, loomRemoteError) << text;
          EXPECT_NE(text.find("rank " + std::to_string(c.nranks - 1) + " revoked"),
                    std::string::npos)
              << text;
        }
        loomComm_t nc = nullptr;
        ASSERT_EQ(loomCommShrink(c.comm, nullptr, 0, &nc, nullptr, LOOM_SHRINK_DEFAULT),
                  loomSuccess)
            << loomGetLastError(c.comm);
        check_sum(nc, all_but(n, {}));
        EXPECT_EQ(loomCommDestroy(nc), loomSuccess);
      },
      never_opts());
}

// Rank 0 (whose star the bootstrap runs through) and, with 4 ranks or more, rank 2 leave;
// the others shrink without them and go on, ranked in their old order.
TEST_P(RevokeShrink, ShrinkWithoutRanksThatLeft) {
  auto [n, mode] = GetParam();
  if (n < 2) GTEST_SKIP() << "one rank cannot leave and keep one";
  std::vector<int> gone = n >= 4 ? std::vector<int>{0, 2} : std::vector<int>{0};
  harness::run(
      n, mode,
      [n = n, gone](Ctx& c) {
        check_sum(c.comm, all_but(n, {}));
        if (std::find(gone.begin(), gone.end(), c.rank) != gone.end()) {
          ASSERT_EQ(loomCommDestroy(c.comm), loomSuccess);
          c.comm = nullptr;
          return;
        }
        std::vector<int> ex(gone);
        loomComm_t nc = nullptr;
        ASSERT_EQ(
            loomCommShrink(c.comm, ex.data(), (int)ex.size(), &nc, nullptr, LOOM_SHRINK_DEFAULT),
            loomSuccess)
            << loomGetLastError(c.comm);
        check_sum(nc, all_but(n, gone));
        check_sum(nc, all_but(n, gone));
        EXPECT_EQ(loomCommDestroy(nc), loomSuccess);
      },
      never_opts());
}

INSTANTIATE_TEST_SUITE_P(Ranks, RevokeShrink,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         revoke_name);

// Misuse: each returns loomInvalidArgument naming the argument, and the communicator still
// works afterwards.
TEST(RevokeShrinkArgs, MisuseIsRefusedAndChangesNothing) {
  harness::run(
      3, Mode::Thread,
      [](Ctx& c) {
        loomComm_t nc = nullptr;
        int self[1] = {c.rank}, out[1] = {7}, twice[2] = {(c.rank + 1) % 3, (c.rank + 1) % 3};
        struct Case {
          int* list;
          int count;
          loomComm_t* out;
          int flags;
          const char* needle;
        } cases[] = {{self, 1, &nc, 0, "this rank"},
                     {out, 1, &nc, 0, "excludeRanksList[0] is 7"},
                     {twice, 2, &nc, 0, "twice"},
                     {nullptr, 1, &nc, 0, "excludeRanksList is NULL"},
                     {self, -1, &nc, 0, "excludeRanksCount -1"},
                     {self, 3, &nc, 0, "excludeRanksCount 3"},
                     {nullptr, 0, nullptr, 0, "newcomm is NULL"},
                     {nullptr, 0, &nc, 2, "shrinkFlags 2"}};
        for (const Case& k : cases) {
          EXPECT_EQ(loomCommShrink(c.comm, k.list, k.count, k.out, nullptr, k.flags),
                    loomInvalidArgument)
              << k.needle;
          EXPECT_NE(std::string(loomGetLastError(c.comm)).find(k.needle), std::string::npos)
              << loomGetLastError(c.comm);
          EXPECT_EQ(nc, nullptr);
        }
        EXPECT_EQ(loomCommRevoke(c.comm, 5), loomInvalidArgument);
        EXPECT_EQ(loomCommRevoke(nullptr, 0), loomInvalidArgument);
        EXPECT_EQ(loomCommShrink(nullptr, nullptr, 0, &nc, nullptr, 0), loomInvalidArgument);
        check_sum(c.comm, all_but(3, {}));
      },
      never_opts());
}

// A rank killed (SIGKILL) at a random moment of a loop of all-reduces: every survivor gets
// the error, revokes, shrinks without it and goes on with correct results. The victim and the
// moment come from the seed of the case; the test process passes them to the ranks.
class FaultShrink : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(FaultShrink, KillARankThenShrinkAndGoOn) {
  auto [n, run] = GetParam();
  unsigned seed =
      (unsigned)(run * 7919 + n * 104729 +
                 (int)(std::chrono::steady_clock::now().time_since_epoch().count() % 100000));
  const int victim =
      getenv("LOOM_TEST_VICTIM") ? atoi(getenv("LOOM_TEST_VICTIM")) : (int)(seed % n);
  const int delay_ms =
      getenv("LOOM_TEST_DELAY_MS") ? atoi(getenv("LOOM_TEST_DELAY_MS")) : (int)((seed / 7) % 60);
  harness::Opts o = never_opts();
  o.env = {{"LOOM_TEST_VICTIM", std::to_string(victim)},
           {"LOOM_TEST_DELAY_MS", std::to_string(delay_ms)}};
  o.expect_killed = {victim};
  SCOPED_TRACE("victim " + std::to_string(victim) + " after " + std::to_string(delay_ms) + " ms");
  harness::run(
      n, Mode::Proc,
      [n = n](Ctx& c) {
        const int victim = atoi(getenv("LOOM_TEST_VICTIM"));
        const int delay_ms = atoi(getenv("LOOM_TEST_DELAY_MS"));
        if (c.rank == victim)
          std::thread([delay_ms] {
            usleep((useconds_t)delay_ms * 1000);
            raise(SIGKILL);
          }).detach();
        std::vector<float> v(1 << 14, 1.0f);
        loomResult_t r = loomSuccess;
        for (int i = 0; r == loomSuccess && i < 100000; i++)
          r = loomAllReduce(v.data(), v.data(), v.size(), loomFloat32, loomMax, c.comm, nullptr);
        ASSERT_NE(c.rank, victim) << "the victim survived its SIGKILL";
        EXPECT_EQ(r, loomRemoteError) << loomGetLastError(c.comm);
        EXPECT_EQ(loomCommRevoke(c.comm, LOOM_REVOKE_DEFAULT), loomSuccess);
        int ex[1] = {victim};
        loomComm_t nc = nullptr;
        ASSERT_EQ(loomCommShrink(c.comm, ex, 1, &nc, nullptr, LOOM_SHRINK_DEFAULT), loomSuccess)
            << loomGetLastError(c.comm);
        for (int i = 0; i < 20; i++) check_sum(nc, all_but(n, {victim}));
        EXPECT_EQ(loomCommDestroy(nc), loomSuccess);
      },
      o);
}

// A rank killed right before init's last barrier (LOOM_FAULT=initdone:k), rank 0 (which runs
// the barrier) or another: every other rank's init returns loomRemoteError naming it, at
// once, not at its deadline (init's last barrier waits on rank 0 alone, and rank 0's death or
// teardown ends that wait).
class FaultInitLastBarrier : public ::testing::TestWithParam<int> {};

TEST_P(FaultInitLastBarrier, SurvivorsFailAtOnceNamingIt) {
  const int dead = GetParam();
  harness::Opts o = never_opts();
  o.init = harness::Init::None;
  o.env = {{"LOOM_FAULT", "initdone:" + std::to_string(dead)}};
  o.expect_killed = {dead};
  harness::run(
      4, Mode::Proc,
      [dead](Ctx& c) {
        loomUniqueId id;
        harness::share_id(c, &id);
        if (::testing::Test::HasFatalFailure()) return;
        loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
        cfg.timeoutMs = harness::kNeverMs;
        loomComm_t comm = nullptr;
        loomResult_t r = loomCommInitRankConfig(&comm, c.nranks, id, c.rank, &cfg);
        ASSERT_NE(c.rank, dead) << "the rank survived LOOM_FAULT=initdone";
        std::string text = loomGetLastError(nullptr);
        EXPECT_EQ(r, loomRemoteError) << loomGetErrorString(r) << ": " << text;
        EXPECT_TRUE(harness::names_rank(text, dead));
        EXPECT_TRUE(harness::noticed_at_once(text));
        if (r == loomSuccess) c.comm = comm;
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(Ranks, FaultInitLastBarrier, ::testing::Values(0, 2));

INSTANTIATE_TEST_SUITE_P(Runs, FaultShrink,
                         ::testing::Combine(::testing::Values(4, 8), ::testing::Range(0, 5)));

}  // namespace
