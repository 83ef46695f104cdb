// test_fault.cc - failure, as the issue demands: "A rank that dies (kill -9)
// during init or during an all-reduce makes every other rank return
// loomRemoteError within 5 seconds, with loomGetLastError naming the dead
// rank; nothing hangs, nothing is left in /dev/shm."
//
// Deaths come from LOOM_FAULT (src/core/fault.h): "init:k" kills rank k in
// the bootstrap, "allreduce:k" halfway through an all-reduce's steps. Also
// here: loomCommAbort while peers are blocked with the aborting rank, a rank
// that never calls (loomTimeout after config.timeoutMs), and the state of a
// communicator after an error.
//
// Nothing here is timed. The "within 5 seconds" is checked as what
// it means: the failure itself ends the survivors' waits. Every
// communicator's timeout is far above the harness's (kNeverMs), so a
// survivor that does not notice hangs the run (the harness kills it and
// fails the test), and its error text must name the cause, not a deadline
// or the heartbeats' slow notice (noticed_at_once).
//
// These tests look at /dev/shm as a whole: run them serially (RUN_SERIAL).
// Every suite here starts with "Fault" so that a filter can pick them out
// ("Fault*:*/Fault*").
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "harness.h"

namespace {

using harness::Ctx;
using harness::meet;
using harness::Mode;
using harness::names_rank;
using harness::noticed_at_once;
using Clock = std::chrono::steady_clock;

constexpr int kLongTimeoutMs = harness::kNeverMs;  // so that no timeout passes for detection
constexpr size_t kBigCount = 8u << 20;             // 8 Mi floats: peers are mid-collective

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Loom's entries in /dev/shm that were not there before.
class ShmWatch {
 public:
  ShmWatch() {
    for (auto& e : harness::shm_entries()) before_.insert(e);
  }
  // Names made since, and still there after a grace period: names of another
  // communicator that runs at the same time (when not run serially) are
  // transient, while a leak stays.
  std::vector<std::string> added() const {
    std::vector<std::string> out;
    for (int tries = 0; tries < 20; tries++) {
      out.clear();
      for (auto& e : harness::shm_entries())
        if (!before_.count(e)) out.push_back(e);
      if (out.empty()) break;
      usleep(100 * 1000);
    }
    return out;
  }

 private:
  std::set<std::string> before_;
};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (auto& e : v) s += (s.empty() ? "" : ", ") + e;
  return s;
}

#define EXPECT_SHM_CLEAN(watch)                                          \
  do {                                                                   \
    auto added_ = (watch).added();                                       \
    EXPECT_TRUE(added_.empty()) << "left in /dev/shm: " << join(added_); \
  } while (0)

// When the survivors release their communicators (loomCommDestroy by the
// harness, right after the body).
//  Held:   only once every survivor has returned from its failed call, so
//          each one's result shows what it detected itself.
//  AtOnce: at once, as programs do. A survivor that has not noticed yet then
//          also sees the others leave; it must still get loomRemoteError
//          naming the rank that failed first (the cause).
enum class Release { Held, AtOnce };
const char* release_name(Release r) {
  return r == Release::Held ? "held" : "atonce";
}

// After an error the communicator reports it and fails further calls with
// its cause. At once: the other ranks do not call, and with kLongTimeoutMs a
// call that waited for them would hang the run.
void expect_broken(const Ctx& c, loomResult_t want_async) {
  loomResult_t async = loomSuccess;
  ASSERT_LOOM_OK(loomCommGetAsyncError(c.comm, &async));
  EXPECT_EQ(async, want_async) << "loomCommGetAsyncError: " << loomGetErrorString(async);
  std::vector<float> v(1024, 1.0f);
  loomResult_t r =
      loomAllReduce(v.data(), v.data(), v.size(), loomFloat32, loomSum, c.comm, nullptr);
  EXPECT_EQ(r, want_async) << "an all-reduce on a broken communicator: " << loomGetErrorString(r);
}

// ---- A rank killed by LOOM_FAULT -------------------------------------------------------

struct Death {
  int nranks;
  int dead;
};

const Death kDeaths[] = {{2, 0}, {2, 1}, {3, 0}, {3, 2}, {4, 0}, {4, 1}};

std::string death_name(const Death& d) {
  return std::to_string(d.nranks) + "ranks_dead" + std::to_string(d.dead);
}

enum class InitBy { UniqueId, FromEnv };

class FaultInit : public ::testing::TestWithParam<std::tuple<Death, InitBy>> {};

// The survivors' init returns loomRemoteError naming the dead rank; the
// dying rank never returns from its init.
TEST_P(FaultInit, SurvivorsGetRemoteErrorNamingIt) {
  auto [d, by] = GetParam();
  ShmWatch shm;
  harness::Opts o;
  o.init = harness::Init::None;
  o.comm_timeout_ms = kLongTimeoutMs;
  o.timeout_s = 90;
  o.env = {{"LOOM_FAULT", "init:" + std::to_string(d.dead)}};
  o.expect_killed = {d.dead};
  harness::run(
      d.nranks, Mode::Proc,
      [d = d, by = by](Ctx& c) {
        loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
        cfg.timeoutMs = kLongTimeoutMs;
        loomUniqueId id;
        if (by == InitBy::UniqueId) {
          harness::share_id(c, &id);
          if (::testing::Test::HasFatalFailure()) return;
        }
        loomComm_t comm = nullptr;
        loomResult_t r = by == InitBy::UniqueId
                             ? loomCommInitRankConfig(&comm, c.nranks, id, c.rank, &cfg)
                             : loomCommInitFromEnv(&comm, &cfg);
        ASSERT_NE(c.rank, d.dead) << "rank " << d.dead << " survived LOOM_FAULT=init";
        EXPECT_EQ(r, loomRemoteError) << loomGetErrorString(r) << ": " << loomGetLastError(nullptr);
        EXPECT_TRUE(names_rank(loomGetLastError(nullptr), d.dead));
        EXPECT_TRUE(noticed_at_once(loomGetLastError(nullptr)));
        EXPECT_EQ(comm, nullptr) << "a failed init wrote *comm";
        if (r == loomSuccess) c.comm = comm;  // let the harness release it
      },
      o);
  EXPECT_SHM_CLEAN(shm);
}

std::string init_death_name(const ::testing::TestParamInfo<FaultInit::ParamType>& info) {
  auto [d, by] = info.param;
  return death_name(d) + (by == InitBy::UniqueId ? "_uniqueid" : "_fromenv");
}

INSTANTIATE_TEST_SUITE_P(Ranks, FaultInit,
                         ::testing::Combine(::testing::ValuesIn(kDeaths),
                                            ::testing::Values(InitBy::UniqueId, InitBy::FromEnv)),
                         init_death_name);

// The peer table goes down a binomial tree (src/core/boot_tree.c): with 8
// ranks, rank 1 passes it on to 3 and 5 (and 3 to 7), rank 2 to 6. Their
// descendants wait for a table that never comes from them.
const Death kTreeDeaths[] = {{8, 1}, {8, 2}};
INSTANTIATE_TEST_SUITE_P(Tree, FaultInit,
                         ::testing::Combine(::testing::ValuesIn(kTreeDeaths),
                                            ::testing::Values(InitBy::UniqueId, InitBy::FromEnv)),
                         init_death_name);

class FaultAllReduce : public ::testing::TestWithParam<std::tuple<Death, Release>> {};

// Halfway through a large all-reduce the dead rank stops; the survivors'
// all-reduce returns loomRemoteError naming it, and the communicator stays
// broken.
TEST_P(FaultAllReduce, SurvivorsGetRemoteErrorNamingIt) {
  auto [d, release] = GetParam();
  ShmWatch shm;
  harness::Opts o;
  o.comm_timeout_ms = kLongTimeoutMs;
  o.timeout_s = 90;
  o.env = {{"LOOM_FAULT", "allreduce:" + std::to_string(d.dead)}};
  o.expect_killed = {d.dead};
  harness::run(
      d.nranks, Mode::Proc,
      [d = d, release = release](Ctx& c) {
        std::vector<float> send(kBigCount, (float)(c.rank + 1)), recv(kBigCount, 0.0f);
        loomResult_t r = loomAllReduce(send.data(), recv.data(), kBigCount, loomFloat32, loomSum,
                                       c.comm, nullptr);
        ASSERT_NE(c.rank, d.dead) << "rank " << d.dead << " survived LOOM_FAULT=allreduce";
        EXPECT_EQ(r, loomRemoteError) << loomGetErrorString(r) << ": " << loomGetLastError(nullptr);
        EXPECT_TRUE(names_rank(loomGetLastError(nullptr), d.dead)) << "loomGetLastError(NULL)";
        EXPECT_TRUE(names_rank(loomGetLastError(c.comm), d.dead)) << "loomGetLastError(comm)";
        EXPECT_TRUE(noticed_at_once(loomGetLastError(c.comm)));
        expect_broken(c, loomRemoteError);
        if (release == Release::Held) meet(c, d.nranks - 1);
      },
      o);
  EXPECT_SHM_CLEAN(shm);
}

std::string allreduce_death_name(const ::testing::TestParamInfo<FaultAllReduce::ParamType>& info) {
  auto [d, release] = info.param;
  return death_name(d) + "_" + release_name(release);
}

INSTANTIATE_TEST_SUITE_P(Ranks, FaultAllReduce,
                         ::testing::Combine(::testing::ValuesIn(kDeaths),
                                            ::testing::Values(Release::Held, Release::AtOnce)),
                         allreduce_death_name);

// ---- A rank that stops answering (its host or link down) --------------------------------

// A rank stops dead (SIGSTOP: its sockets stay open, so nothing closes, as
// when a host loses its network link). Heartbeats notice the silence: the
// others' all-reduce returns loomRemoteError naming the silent rank and
// saying it went silent. The communicator's own timeout is far away, so
// nothing but the heartbeats can end the wait. Rank 0 then kills the
// stopped process.
TEST(FaultHeartbeat, ASilentRankIsNamedBeforeTheTimeout) {
  const int n = 3, silent = 2;
  harness::Opts o;
  o.comm_timeout_ms = kLongTimeoutMs;
  o.timeout_s = 90;
  o.env = {{"LOOM_HEARTBEAT_MS", "1500"}};
  o.expect_killed = {silent};
  harness::run(
      n, Mode::Proc,
      [](Ctx& c) {
        // Everyone learns the silent rank's pid first.
        std::vector<int64_t> pids(n, 0);
        pids[c.rank] = getpid();
        ASSERT_LOOM_OK(
            loomAllReduce(pids.data(), pids.data(), n, loomInt64, loomSum, c.comm, nullptr));
        if (c.rank == silent) raise(SIGSTOP);
        std::vector<float> send(kBigCount, 1.0f), recv(kBigCount, 0.0f);
        loomResult_t r = loomAllReduce(send.data(), recv.data(), kBigCount, loomFloat32, loomSum,
                                       c.comm, nullptr);
        std::string text = loomGetLastError(c.comm);
        EXPECT_EQ(r, loomRemoteError) << loomGetErrorString(r) << ": " << text;
        EXPECT_TRUE(names_rank(text, silent)) << text;
        EXPECT_NE(text.find("has sent nothing"), std::string::npos) << text;
        if (c.rank == 0) kill((pid_t)pids[silent], SIGKILL);
      },
      o);
}

// ---- loomCommAbort ---------------------------------------------------------------------

class FaultAbort : public ::testing::TestWithParam<std::tuple<Mode, int, Release>> {};

// One rank aborts while the others are blocked in an all-reduce with it:
// they return loomRemoteError naming it. Abort itself never blocks on peers
// (they wait for it: a blocking abort would hang the run).
TEST_P(FaultAbort, PeersBlockedWithItGetRemoteError) {
  auto [mode, aborter, release] = GetParam();
  ShmWatch shm;
  harness::Opts o;
  o.comm_timeout_ms = kLongTimeoutMs;
  o.timeout_s = 90;
  harness::run(
      3, mode,
      [aborter = aborter, release = release](Ctx& c) {
        if (c.rank == aborter) {
          usleep(300 * 1000);  // the others are in the all-reduce by now
          EXPECT_LOOM_OK(loomCommAbort(c.comm));
          c.comm = nullptr;  // released by the abort
          if (release == Release::Held) meet(c, c.nranks);
          return;
        }
        std::vector<float> v(1 << 20, 1.0f);
        loomResult_t r =
            loomAllReduce(v.data(), v.data(), v.size(), loomFloat32, loomSum, c.comm, nullptr);
        EXPECT_EQ(r, loomRemoteError) << loomGetErrorString(r) << ": " << loomGetLastError(nullptr);
        EXPECT_TRUE(names_rank(loomGetLastError(nullptr), aborter)) << "loomGetLastError(NULL)";
        EXPECT_TRUE(names_rank(loomGetLastError(c.comm), aborter)) << "loomGetLastError(comm)";
        EXPECT_TRUE(noticed_at_once(loomGetLastError(c.comm)));
        expect_broken(c, loomRemoteError);
        if (release == Release::Held) meet(c, c.nranks);
      },
      o);
  EXPECT_SHM_CLEAN(shm);
}

// As NCCL programs do: a watchdog thread aborts the communicator while the
// rank's own thread is blocked in an all-reduce on it (another rank is late,
// so nobody can finish). The blocked call returns an error; the peers in the
// all-reduce get loomRemoteError naming the aborter, and so does the late
// rank when it finally calls.
TEST_P(FaultAbort, FromAWatchdogThreadWhileBlocked) {
  auto [mode, aborter, release] = GetParam();
  const int late = aborter == 0 ? 2 : 0;
  ShmWatch shm;
  harness::Opts o;
  o.comm_timeout_ms = kLongTimeoutMs;
  o.timeout_s = 90;
  harness::run(
      3, mode,
      [aborter = aborter, release = release, late](Ctx& c) {
        std::vector<float> v(1 << 20, 1.0f);
        if (c.rank == aborter) {
          loomComm_t comm = c.comm;
          std::thread watchdog([comm] {
            usleep(300 * 1000);
            EXPECT_LOOM_OK(loomCommAbort(comm));
          });
          loomResult_t r =
              loomAllReduce(v.data(), v.data(), v.size(), loomFloat32, loomSum, comm, nullptr);
          watchdog.join();
          EXPECT_NE(r, loomSuccess) << "the aborted all-reduce succeeded";
          c.comm = nullptr;  // released by the abort
          if (release == Release::Held) meet(c, c.nranks);
          return;
        }
        if (c.rank == late) usleep(1000 * 1000);
        loomResult_t r =
            loomAllReduce(v.data(), v.data(), v.size(), loomFloat32, loomSum, c.comm, nullptr);
        EXPECT_EQ(r, loomRemoteError) << loomGetErrorString(r) << ": " << loomGetLastError(nullptr);
        EXPECT_TRUE(names_rank(loomGetLastError(nullptr), aborter)) << "loomGetLastError(NULL)";
        EXPECT_TRUE(names_rank(loomGetLastError(c.comm), aborter)) << "loomGetLastError(comm)";
        EXPECT_TRUE(noticed_at_once(loomGetLastError(c.comm)));
        expect_broken(c, loomRemoteError);
        if (release == Release::Held) meet(c, c.nranks);
      },
      o);
  EXPECT_SHM_CLEAN(shm);
}

std::string abort_name(const ::testing::TestParamInfo<FaultAbort::ParamType>& info) {
  auto [m, a, release] = info.param;
  return std::string(harness::mode_name(m)) + "3_aborter" + std::to_string(a) + "_" +
         release_name(release);
}

INSTANTIATE_TEST_SUITE_P(Ranks, FaultAbort,
                         ::testing::Combine(::testing::Values(Mode::Proc, Mode::Thread),
                                            ::testing::Values(0, 1),
                                            ::testing::Values(Release::Held, Release::AtOnce)),
                         abort_name);

// ---- Timeouts ----------------------------------------------------------------------------

constexpr int kShortTimeoutMs = 1500;

class FaultTimeout : public ::testing::TestWithParam<Mode> {};

// Rank 1 never calls the all-reduce: the others return loomTimeout once
// config.timeoutMs has passed (not before: a deadline's lower bound, which a
// slow machine cannot break; "not much later" is the harness's hang guard),
// and the communicator then reports the error. Every rank keeps its communicator
// until the others have timed out, so that none of them sees another leave
// instead of the timeout.
TEST_P(FaultTimeout, AllReduceWithARankThatNeverCalls) {
  ShmWatch shm;
  harness::Opts o;
  o.comm_timeout_ms = kShortTimeoutMs;
  o.timeout_s = 90;
  harness::run(
      3, GetParam(),
      [](Ctx& c) {
        auto t0 = Clock::now();
        if (c.rank == 1) {
          meet(c, c.nranks);
          return;
        }
        std::vector<float> v(1 << 16, 1.0f);
        loomResult_t r =
            loomAllReduce(v.data(), v.data(), v.size(), loomFloat32, loomSum, c.comm, nullptr);
        double s = since(t0);
        EXPECT_EQ(r, loomTimeout) << loomGetErrorString(r) << ": " << loomGetLastError(nullptr);
        EXPECT_GE(s, kShortTimeoutMs / 1000.0) << "gave up before the timeout";
        EXPECT_NE(std::string(loomGetLastError(c.comm)).find("time"), std::string::npos)
            << "the text does not say it timed out: " << loomGetLastError(c.comm);
        expect_broken(c, loomTimeout);
        meet(c, c.nranks);
      },
      o);
  EXPECT_SHM_CLEAN(shm);
}

std::string timeout_name(const ::testing::TestParamInfo<Mode>& info) {
  return std::string(harness::mode_name(info.param)) + "3";
}

INSTANTIATE_TEST_SUITE_P(Modes, FaultTimeout, ::testing::Values(Mode::Proc, Mode::Thread),
                         timeout_name);

// Rank 2 never joins: the others' init returns loomTimeout once
// config.timeoutMs has passed (rank 0's wait is the one that lasts it all),
// and writes no communicator.
TEST(FaultInitTimeout, ARankThatNeverJoins) {
  ShmWatch shm;
  harness::Opts o;
  o.init = harness::Init::None;
  o.timeout_s = 90;
  harness::run(
      3, Mode::Proc,
      [](Ctx& c) {
        loomUniqueId id;
        if (c.rank == 2) {
          meet(c, c.nranks);  // joins nothing until the others gave up
          return;
        }
        harness::share_id(c, &id);
        if (::testing::Test::HasFatalFailure()) return;
        loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
        cfg.timeoutMs = kShortTimeoutMs;
        loomComm_t comm = nullptr;
        auto t0 = Clock::now();
        loomResult_t r = loomCommInitRankConfig(&comm, c.nranks, id, c.rank, &cfg);
        double s = since(t0);
        EXPECT_EQ(r, loomTimeout) << loomGetErrorString(r) << ": " << loomGetLastError(nullptr);
        if (c.rank == 0) {
          EXPECT_GE(s, kShortTimeoutMs / 1000.0) << "gave up before the timeout";
        }
        EXPECT_EQ(comm, nullptr) << "a failed init wrote *comm";
        if (r == loomSuccess) c.comm = comm;
        meet(c, c.nranks);
      },
      o);
  EXPECT_SHM_CLEAN(shm);
}

}  // namespace

namespace {

// ---- Split while a rank dies ----------------------------------------------------------

// The loop: loomCommSplit, an all-reduce on the part, destroy it,
// again, while one rank is killed at a random moment (SIGKILL from a thread
// of its own, so it may die inside the split, the part's init, the
// all-reduce or the destroy). Every survivor's first failing call returns
// loomRemoteError naming the dead rank (the communicators' timeout is
// kNeverMs: a split that waits for its deadline hangs the run), and the
// parent communicator reports the failure, naming it.
// Before, 1-5 of 60 survivors got loomTimeout inside the split and the
// parent's last error was sometimes empty.
class FaultSplit : public ::testing::TestWithParam<int> {};

TEST_P(FaultSplit, SurvivorsNameTheDeadRank) {
  const int n = 4, run = GetParam();
  // Chosen by the test process; its ranks read the choice from the
  // environment (they run this body again).
  unsigned seed = (unsigned)(run * 7919 + (int)(Clock::now().time_since_epoch().count() % 100000));
  const int victim =
      getenv("LOOM_TEST_VICTIM") ? atoi(getenv("LOOM_TEST_VICTIM")) : (int)(seed % n);
  const int delay_ms =
      getenv("LOOM_TEST_DELAY_MS") ? atoi(getenv("LOOM_TEST_DELAY_MS")) : (int)((seed / 7) % 150);
  harness::Opts o;
  o.comm_timeout_ms = kLongTimeoutMs;
  o.timeout_s = 60;
  o.env = {{"LOOM_TEST_VICTIM", std::to_string(victim)},
           {"LOOM_TEST_DELAY_MS", std::to_string(delay_ms)}};
  o.expect_killed = {victim};
  SCOPED_TRACE("victim " + std::to_string(victim) + " after " + std::to_string(delay_ms) + " ms");
  harness::run(
      n, Mode::Proc,
      [](Ctx& c) {
        const int victim = atoi(getenv("LOOM_TEST_VICTIM"));
        const int delay_ms = atoi(getenv("LOOM_TEST_DELAY_MS"));
        if (c.rank == victim) {
          std::thread([delay_ms] {
            usleep((useconds_t)delay_ms * 1000);
            raise(SIGKILL);
          }).detach();
        }
        auto start = Clock::now();
        loomResult_t r = loomSuccess;
        const char* what = "";
        std::string text;
        // Until the victim's death ends a call (the bound only stops a
        // victim that failed to die: the assertions below then say so).
        while (r == loomSuccess && since(start) < 20) {
          loomComm_t part = nullptr;
          r = loomCommSplit(c.comm, c.rank % 2, c.rank, &part, nullptr);
          what = "split";
          if (r == loomSuccess) {
            std::vector<int> v(1 << 14, c.rank + 1);
            r = loomAllReduce(v.data(), v.data(), v.size(), loomInt32, loomSum, part, nullptr);
            what = "all-reduce on the part";
            if (r != loomSuccess) text = loomGetLastError(part);
            loomCommDestroy(part);
          } else {
            text = loomGetLastError(c.comm);
          }
        }
        ASSERT_NE(c.rank, victim) << "the victim survived its SIGKILL";
        SCOPED_TRACE(std::string("the first failing call: ") + what + ": " + text);
        EXPECT_EQ(r, loomRemoteError) << loomGetErrorString(r) << ": " << text;
        // The part numbers its ranks by key (the parent's rank) within a color.
        bool in_part = std::string(what) != "split";
        EXPECT_TRUE(!in_part || victim % 2 == c.rank % 2) << "a part without the victim failed";
        EXPECT_TRUE(names_rank(text, in_part ? victim / 2 : victim)) << "the failing call's text";
        EXPECT_TRUE(noticed_at_once(text));
        // The parent knows too (if not yet, then soon: the harness bounds
        // this wait), and says why.
        loomResult_t async = loomSuccess;
        for (; async == loomSuccess; usleep(2000))
          ASSERT_LOOM_OK(loomCommGetAsyncError(c.comm, &async));
        EXPECT_EQ(async, loomRemoteError);
        EXPECT_TRUE(names_rank(loomGetLastError(c.comm), victim)) << "loomGetLastError(parent)";
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(Runs, FaultSplit, ::testing::Range(0, 20));

}  // namespace
