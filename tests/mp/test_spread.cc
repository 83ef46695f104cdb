// test_spread.cc - ranks of one machine that poll each other need cores of
// their own (transport.c, LOOM_SPREAD): the first plan a rank's thread
// drives moves it to the CPU of its place among the machine's ranks, so two
// ranks end on two CPUs whatever CPU init left them on; the thread is not
// left pinned (its mask is the one it had); LOOM_SPREAD=0 moves nothing.
// Each rank reads what it did in its own log.
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "harness.h"

namespace {

using harness::Ctx;
using harness::Mode;
using harness::Opts;

Opts spread_opts(const char* spread) {
  Opts o;
  o.timeout_s = 60;
  std::string prefix = "/tmp/loomtest-spread-" + harness::unique_tag() + "-";
  o.env = {{"LOOM_SPREAD", spread},
           {"LOOM_DEBUG", "INFO"},
           {"LOOM_DEBUG_SUBSYS", "INIT"},
           {"LOOM_DEBUG_FILE", prefix + "%p.log"}};
  return o;
}

// The place and CPU this rank's log says its thread took, or {-1, -1}.
std::pair<int, int> placed(const std::string& log) {
  size_t at = log.find("among the machine's ranks");
  if (at == std::string::npos) return {-1, -1};
  size_t line = log.rfind('\n', at);
  line = line == std::string::npos ? 0 : line + 1;
  int rank, place, cpu, count;
  const char* s = log.c_str() + log.find("rank ", line);
  if (sscanf(s, "rank %d: place %d among the machine's ranks, CPU %d of %d", &rank, &place, &cpu,
             &count) != 4)
    return {-1, -1};
  return {place, cpu};
}

TEST(SpreadRanks, TwoRanksTakeTwoCpusAndStayUnpinned) {
  harness::run(
      2, Mode::Proc,
      [](Ctx& c) {
        cpu_set_t before, after;
        ASSERT_EQ(sched_getaffinity(0, sizeof(before), &before), 0);
        float x = 1.0f + c.rank, sum = 0;
        ASSERT_LOOM_OK(loomAllReduce(&x, &sum, 1, loomFloat32, loomSum, c.comm, nullptr));
        EXPECT_EQ(sum, 3.0f);
        ASSERT_EQ(sched_getaffinity(0, sizeof(after), &after), 0);
        EXPECT_TRUE(CPU_EQUAL(&before, &after)) << "the rank's thread was left pinned";
        std::string log = harness::read_file(harness::own_log());
        unlink(harness::own_log().c_str());
        auto [place, cpu] = placed(log);
        if (CPU_COUNT(&before) < 2) {
          EXPECT_EQ(place, -1) << "moved with one CPU:\n" << log;
          GTEST_SKIP() << "this process may run on one CPU only: nothing to spread";
        }
        ASSERT_EQ(place, c.rank) << "no place, or the wrong one, in the log:\n" << log;
        EXPECT_TRUE(CPU_ISSET(cpu, &before)) << cpu;
        EXPECT_EQ(log.find("could not move"), std::string::npos) << log;
        int cpus[2] = {-1, -1};
        ASSERT_LOOM_OK(loomAllGather(&cpu, cpus, 1, loomInt32, c.comm, nullptr));
        EXPECT_NE(cpus[0], cpus[1]) << "both ranks placed on CPU " << cpus[0];
      },
      spread_opts("1"));
}

TEST(SpreadRanks, OffMovesNothing) {
  harness::run(
      2, Mode::Proc,
      [](Ctx& c) {
        float x = 1.0f, sum = 0;
        ASSERT_LOOM_OK(loomAllReduce(&x, &sum, 1, loomFloat32, loomSum, c.comm, nullptr));
        EXPECT_EQ(sum, 2.0f);
        std::string log = harness::read_file(harness::own_log());
        unlink(harness::own_log().c_str());
        EXPECT_EQ(placed(log).first, -1) << log;
      },
      spread_opts("0"));
}

}  // namespace
