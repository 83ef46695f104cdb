// test_spread.cc - the place of a rank's thread among a machine's CPUs
// (transport.c, LOOM_SPREAD): the CPU of place i is the (i mod count)th of
// the thread's mask, sparse masks included, and none with fewer than two;
// moving a thread runs it on that CPU and gives it its own mask back (the
// thread is not left pinned). The whole path is tested with ranks in
// tests/mp/test_spread.cc.
#include <gtest/gtest.h>
#include <sched.h>

extern "C" {
int tp_spread_cpu(const cpu_set_t* mask, int index);
int tp_thread_move(int cpu);
}

namespace {

cpu_set_t mask_of(std::initializer_list<int> cpus) {
  cpu_set_t m;
  CPU_ZERO(&m);
  for (int c : cpus) CPU_SET(c, &m);
  return m;
}

TEST(Spread, PlacesTakeTheMasksCpusInTurn) {
  cpu_set_t two = mask_of({0, 1});
  EXPECT_EQ(tp_spread_cpu(&two, 0), 0);
  EXPECT_EQ(tp_spread_cpu(&two, 1), 1);
  EXPECT_EQ(tp_spread_cpu(&two, 2), 0);
  EXPECT_EQ(tp_spread_cpu(&two, 7), 1);
  cpu_set_t sparse = mask_of({3, 5, 64, 900});
  const int want[] = {3, 5, 64, 900, 3, 5};
  for (int i = 0; i < 6; i++) EXPECT_EQ(tp_spread_cpu(&sparse, i), want[i]) << i;
}

TEST(Spread, NoPlaceWithOneCpuOrNoIndex) {
  cpu_set_t one = mask_of({4}), none = mask_of({}), two = mask_of({0, 1});
  EXPECT_EQ(tp_spread_cpu(&one, 0), -1);
  EXPECT_EQ(tp_spread_cpu(&one, 3), -1);
  EXPECT_EQ(tp_spread_cpu(&none, 0), -1);
  EXPECT_EQ(tp_spread_cpu(&two, -1), -1);
}

TEST(Spread, AMovedThreadRunsThereAndKeepsItsMask) {
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof(before), &before), 0);
  int moves = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE && moves < 8; cpu++) {
    if (!CPU_ISSET(cpu, &before)) continue;
    EXPECT_EQ(tp_thread_move(cpu), cpu);
    cpu_set_t after;
    ASSERT_EQ(sched_getaffinity(0, sizeof(after), &after), 0);
    EXPECT_TRUE(CPU_EQUAL(&after, &before)) << "left pinned after a move to CPU " << cpu;
    moves++;
  }
  EXPECT_GE(moves, 1);
  /* A CPU outside the mask is refused, and the mask stays. */
  int outside = -1;
  for (int cpu = 0; cpu < CPU_SETSIZE && outside < 0; cpu++)
    if (!CPU_ISSET(cpu, &before)) outside = cpu;
  if (outside >= 0) {
    EXPECT_EQ(tp_thread_move(outside), -1);
  }
  cpu_set_t after;
  ASSERT_EQ(sched_getaffinity(0, sizeof(after), &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&after, &before));
}

}  // namespace
