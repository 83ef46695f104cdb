// test_leftovers.cc - no exit, clean or not, leaves anything in /dev/shm.
// Before, shared memory was named POSIX segments cleaned at destroy: a
// survivor that exited without loomCommDestroy after a failed all-reduce
// left its 4 MiB FIFO for good, and killing every rank during init left
// 51-68 segments per 30 jobs. Now segments and FIFOs are unnamed files
// (src/transport/shmfile.h) that vanish with the processes that hold them.
//
// These tests look at /dev/shm as a whole: their suites start with "Fault"
// so that CMake runs them one at a time (RUN_SERIAL).
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using harness::Ctx;
using harness::Init;
using harness::Mode;
using harness::Opts;

std::set<std::string> Entries() {
  auto v = harness::shm_entries();
  return std::set<std::string>(v.begin(), v.end());
}

// Loom's names in /dev/shm that were not there at `before`, after a short
// grace for processes still on their way out.
std::vector<std::string> Added(const std::set<std::string>& before) {
  std::vector<std::string> out;
  for (int tries = 0; tries < 20; tries++) {
    out.clear();
    for (const auto& e : harness::shm_entries())
      if (!before.count(e)) out.push_back(e);
    if (out.empty()) break;
    usleep(100 * 1000);
  }
  return out;
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& e : v) s += (s.empty() ? "" : ", ") + e;
  return s;
}

// A rank dies while the others wait for it in their first all-reduce (they
// have made their FIFOs to it, which it never opened); the survivors then
// exit without loomCommDestroy (they _exit, as a crashing or impatient
// program does).
TEST(FaultLeftovers, SurvivorsExitWithoutDestroy) {
  auto before = Entries();
  Opts o;
  o.timeout_s = 60;
  o.comm_timeout_ms = 20000;
  o.env = {{"LOOM_DEBUG", "NONE"}, {"LOOM_DIRECT", "0"}};
  o.expect_killed = {1};
  harness::run(
      3, Mode::Proc,
      [](Ctx& c) {
        if (c.rank == 1) {
          usleep(100 * 1000);
          raise(SIGKILL);
        }
        std::vector<float> v((size_t)4 << 20, 1.0f);
        loomResult_t r =
            loomAllReduce(v.data(), v.data(), v.size(), loomFloat32, loomSum, c.comm, nullptr);
        _exit(r == loomRemoteError ? 0 : 1);
      },
      o);
  auto added = Added(before);
  EXPECT_TRUE(added.empty()) << "left in /dev/shm: " << Join(added);
}

uint64_t MonotonicNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// Every rank killed during init, 30 times, at every stage: all ranks of a
// job are killed at one moment (CLOCK_MONOTONIC is the machine's), the jobs
// spreading that moment over the first 90 ms after the ranks start (the
// bootstrap, the rank segments, the first exchanges, the tuner's constants).
TEST(FaultLeftovers, EveryRankKilledDuringInit) {
  auto before = Entries();
  for (int job = 0; job < 30; job++) {
    Opts o;
    o.timeout_s = 60;
    o.init = Init::None;
    uint64_t at = MonotonicNs() + (uint64_t)(20 + 3 * job) * 1000000ull;
    o.env = {{"LOOM_DEBUG", "NONE"}, {"LOOM_TEST_KILL_AT", std::to_string(at)}};
    o.expect_killed = {0, 1, 2};
    harness::run(
        3, Mode::Proc,
        [](Ctx& c) {
          uint64_t kill_at = strtoull(getenv("LOOM_TEST_KILL_AT"), nullptr, 10);
          pid_t self = getpid();
          if (fork() == 0) {
            uint64_t now = MonotonicNs();
            if (kill_at > now) usleep((useconds_t)((kill_at - now) / 1000));
            kill(self, SIGKILL);
            _exit(0);
          }
          loomComm_t comm = nullptr;
          loomCommInitFromEnv(&comm, nullptr);
          pause();  // nobody survives this test
        },
        o);
  }
  auto added = Added(before);
  EXPECT_TRUE(added.empty()) << "left in /dev/shm after 30 jobs: " << Join(added);
}

// A sender sends what fits in the FIFO, destroys its communicator and
// exits before its receiver has even connected: the data must still
// arrive (the FIFO outlives its sender under an escape name), and the name
// is gone once the receiver has it.
TEST(FaultLeftovers, SenderLeavesBeforeTheReceiverConnects) {
  auto before = Entries();
  Opts o;
  o.timeout_s = 60;
  o.comm_timeout_ms = 20000;
  harness::run(
      2, Mode::Proc,
      [](Ctx& c) {
        std::vector<int> v(256 << 10);  // 1 MiB: fits in the 4 MiB FIFO
        if (c.rank == 1) {
          for (size_t i = 0; i < v.size(); i++) v[i] = (int)(i * 7 + 3);
          ASSERT_LOOM_OK(loomSend(v.data(), v.size(), loomInt32, 0, c.comm, nullptr));
          ASSERT_LOOM_OK(loomCommDestroy(c.comm));
          c.comm = nullptr;
          harness::meet(c, 2);
          return;
        }
        harness::meet(c, 2);  // rank 1 has left
        usleep(100 * 1000);   // and exited, most likely
        ASSERT_LOOM_OK(loomRecv(v.data(), v.size(), loomInt32, 1, c.comm, nullptr));
        for (size_t i = 0; i < v.size(); i++) ASSERT_EQ(v[i], (int)(i * 7 + 3)) << "element " << i;
      },
      o);
  auto added = Added(before);
  EXPECT_TRUE(added.empty()) << "left in /dev/shm: " << Join(added);
}

// As above, but the receiver is killed before it collects the data: the
// escape name stays until the next communicator on this host sweeps it.
TEST(FaultLeftovers, ReceiverKilledBeforeCollecting) {
  auto before = Entries();
  Opts o;
  o.timeout_s = 60;
  o.comm_timeout_ms = 20000;
  o.expect_killed = {0};
  harness::run(
      2, Mode::Proc,
      [](Ctx& c) {
        std::vector<int> v(1024, 5);
        if (c.rank == 1) {
          ASSERT_LOOM_OK(loomSend(v.data(), v.size(), loomInt32, 0, c.comm, nullptr));
          ASSERT_LOOM_OK(loomCommDestroy(c.comm));
          c.comm = nullptr;
          harness::meet(c, 2);
          return;
        }
        harness::meet(c, 2);
        raise(SIGKILL);
      },
      o);
  // Other tests of the machine may be making names meanwhile: look for
  // escape names (loom-<comm>-k<src>-<dst>-<lane>-p<receiver>) alone.
  std::vector<std::string> left;
  for (const auto& e : Added(before))
    if (e.find("-k1-0-") != std::string::npos) left.push_back(e);
  ASSERT_EQ(left.size(), 1u) << "expected one escape name: " << Join(left);
  // The next communicator on this host (thread ranks of this process: a
  // process-rank test may start its ranks once) sweeps it at init.
  loomComm_t comms[2] = {nullptr, nullptr};
  ASSERT_LOOM_OK(loomCommInitAll(comms, 2, nullptr));
  for (loomComm_t c : comms) ASSERT_LOOM_OK(loomCommDestroy(c));
  EXPECT_EQ(Entries().count(left[0]), 0u) << "not swept: " << left[0];
}

}  // namespace

namespace {

// Named mode (LOOM_SHM_NAMED=1, the fallback for ranks that cannot open each
// other's files through /proc) still moves data right through FIFOs, and a
// clean run leaves no name.
TEST(FaultLeftoversNamed, CollectivesThroughNamedFifos) {
  auto before = Entries();
  Opts o;
  o.timeout_s = 120;
  o.env = {{"LOOM_SHM_NAMED", "1"}, {"LOOM_DIRECT", "0"}};
  harness::run(
      3, Mode::Proc,
      [](Ctx& c) {
        const size_t n = (size_t)3 << 20;  // more than a FIFO: pipelined through its slots
        std::vector<int> v(n), all(3 * 1000);
        for (size_t i = 0; i < n; i++) v[i] = (int)(i % 1000) + c.rank;
        ASSERT_LOOM_OK(loomAllReduce(v.data(), v.data(), n, loomInt32, loomSum, c.comm, nullptr));
        for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(v[i], 3 * (int)(i % 1000) + 3) << i;
        std::vector<int> mine(1000, c.rank * 10);
        ASSERT_LOOM_OK(loomAllGather(mine.data(), all.data(), 1000, loomInt32, c.comm, nullptr));
        for (int r = 0; r < 3; r++) ASSERT_EQ(all[(size_t)r * 1000 + 999], r * 10);
        int x = c.rank, y = -1;
        ASSERT_LOOM_OK(loomGroupStart());
        ASSERT_LOOM_OK(loomSend(&x, 1, loomInt32, (c.rank + 1) % 3, c.comm, nullptr));
        ASSERT_LOOM_OK(loomRecv(&y, 1, loomInt32, (c.rank + 2) % 3, c.comm, nullptr));
        ASSERT_LOOM_OK(loomGroupEnd());
        EXPECT_EQ(y, (c.rank + 2) % 3);
      },
      o);
  auto added = Added(before);
  EXPECT_TRUE(added.empty()) << "left in /dev/shm: " << Join(added);
}

}  // namespace
