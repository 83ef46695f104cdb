// Events (src/core/event.h) and the gates they put on host streams
// (stream_wait_event), in one process with no communicator: an event
// completed before or after its waiters, many waiters, references taken
// and dropped on several threads, a stream whose later work waits for an
// event, fails with it, gives up at its deadline, and is destroyed while
// gated. Run again under ThreadSanitizer (label tsan). Waits are hang
// guards with generous deadlines, never timing assertions.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

// util.h's _Atomic members, read as test_wire.cc does.
#define _Atomic volatile
#define atomic_load_explicit(p, mo) __atomic_load_n((p), (mo))
#define memory_order_seq_cst __ATOMIC_SEQ_CST
extern "C" {
#include "core/event.h"
#include "core/stream.h"
}
#undef _Atomic

namespace {

struct EventGuard {
  struct loom_event* e = nullptr;
  EventGuard() { EXPECT_EQ(event_create(EVENT_HOST, &e), loomSuccess); }
  ~EventGuard() {
    if (e) event_release(e);
  }
};

deadline in_ms(long long ms) {
  return deadline_in_ms(ms);
}

// A waiter that counts its wake-ups (w first: the callback gets its address).
struct Counter {
  event_waiter w{};
  std::atomic<int> wakes{0};
  Counter() {
    w.wake = [](event_waiter* self) { reinterpret_cast<Counter*>(self)->wakes++; };
  }
};

TEST(Event, CompleteBeforeWait) {
  EventGuard g;
  ASSERT_NE(g.e, nullptr);
  EXPECT_FALSE(event_done(g.e));
  event_complete(g.e, loomSuccess, nullptr);
  EXPECT_TRUE(event_done(g.e));
  deadline dl = in_ms(30000);
  EXPECT_EQ(event_wait(g.e, &dl), loomSuccess);
  Counter c;
  EXPECT_EQ(event_watch(g.e, &c.w), 0) << "a complete event takes no waiter";
  EXPECT_EQ(c.wakes.load(), 0);
}

TEST(Event, CompleteAfterWaitCarriesTheError) {
  EventGuard g;
  ASSERT_NE(g.e, nullptr);
  loomResult_t got = loomSuccess;
  std::string why;
  std::thread waiter([&] {
    deadline dl = in_ms(60000);
    got = event_wait(g.e, &dl);
    why = loomGetLastError(nullptr);
  });
  usleep(10 * 1000);  // more likely asleep by now; right either way
  event_complete(g.e, loomRemoteError, "rank 1: peer 2 died");
  waiter.join();
  EXPECT_EQ(got, loomRemoteError);
  EXPECT_EQ(why, "rank 1: peer 2 died");
  char text[64];
  EXPECT_EQ(event_result(g.e, text, sizeof(text)), loomRemoteError);
  EXPECT_STREQ(text, "rank 1: peer 2 died");
}

TEST(Event, OnlyTheFirstCompletionCounts) {
  EventGuard g;
  ASSERT_NE(g.e, nullptr);
  event_complete(g.e, loomTimeout, "first");
  event_complete(g.e, loomSuccess, nullptr);
  char text[32];
  EXPECT_EQ(event_result(g.e, text, sizeof(text)), loomTimeout);
  EXPECT_STREQ(text, "first");
}

// Threads blocked in event_wait and registered waiters, all released by
// one completion: each waiter woken exactly once, each thread sees the
// result.
TEST(Event, ManyWaiters) {
  EventGuard g;
  ASSERT_NE(g.e, nullptr);
  const int nthreads = 16, nwatch = 16;
  std::vector<Counter> counters(nwatch);
  for (auto& c : counters) ASSERT_EQ(event_watch(g.e, &c.w), 1);
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < nthreads; i++)
    threads.emplace_back([&] {
      deadline dl = in_ms(60000);
      if (event_wait(g.e, &dl) == loomInvalidUsage) ok++;
    });
  event_complete(g.e, loomInvalidUsage, "bad");
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), nthreads);
  for (auto& c : counters) {
    EXPECT_EQ(c.wakes.load(), 1);
    event_unwatch(g.e, &c.w);  // harmless after the completion
  }
}

TEST(Event, UnwatchedWaiterIsNotWoken) {
  EventGuard g;
  ASSERT_NE(g.e, nullptr);
  Counter a, b;
  ASSERT_EQ(event_watch(g.e, &a.w), 1);
  ASSERT_EQ(event_watch(g.e, &b.w), 1);
  event_unwatch(g.e, &a.w);
  event_complete(g.e, loomSuccess, nullptr);
  EXPECT_EQ(a.wakes.load(), 0);
  EXPECT_EQ(b.wakes.load(), 1);
}

// Arming gives the waiters a deadline and wakes them to see it; a second
// arm changes nothing.
TEST(Event, ArmSetsTheDeadlineOnce) {
  EventGuard g;
  ASSERT_NE(g.e, nullptr);
  EXPECT_EQ(event_deadline(g.e).at_ns, 0u) << "no deadline before the producer starts";
  Counter c;
  ASSERT_EQ(event_watch(g.e, &c.w), 1);
  event_arm(g.e, 60000);
  uint64_t at = event_deadline(g.e).at_ns;
  EXPECT_GT(at, time_now_ns() + 60000ull * 1000000ull) << "twice the bound";
  EXPECT_EQ(c.wakes.load(), 1);
  event_arm(g.e, 1);
  EXPECT_EQ(event_deadline(g.e).at_ns, at);
  EXPECT_EQ(c.wakes.load(), 1);
  event_unwatch(g.e, &c.w);
}

TEST(Event, WaitGivesUpAtItsDeadline) {
  EventGuard g;
  ASSERT_NE(g.e, nullptr);
  deadline dl = in_ms(20);
  EXPECT_EQ(event_wait(g.e, &dl), loomTimeout);
  EXPECT_FALSE(event_done(g.e));
}

// References taken and dropped on many threads: the count is exact, and
// the last release (on whichever thread) frees the event, which the
// sanitizers check.
TEST(Event, ReferencesAcrossThreads) {
  struct loom_event* e = nullptr;
  ASSERT_EQ(event_create(EVENT_HOST, &e), loomSuccess);
  const int n = 8;
  for (int i = 0; i < n; i++) event_retain(e);
  EXPECT_EQ(event_refs(e), n + 1);
  std::atomic<int> seen{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; i++)
    threads.emplace_back([&, i] {
      for (int k = 0; k < 1000; k++) {
        event_retain(e);
        event_release(e);
      }
      deadline dl = in_ms(60000);
      if (event_wait(e, &dl) == loomSuccess) seen++;
      if (i % 2) event_release(e);  // half drop theirs before the completer drops its own
    });
  event_complete(e, loomSuccess, nullptr);
  for (auto& t : threads) t.join();
  EXPECT_EQ(seen.load(), n);
  EXPECT_EQ(event_refs(e), 1 + n / 2);
  for (int i = 0; i < n / 2; i++) event_release(e);
  EXPECT_EQ(event_refs(e), 1);
  event_release(e);  // frees
}

TEST(Event, CudaKindNeedsTheCudaExecutor) {
  struct loom_event* e = nullptr;
  EXPECT_EQ(event_create(EVENT_CUDA, &e), loomInvalidUsage);
  EXPECT_EQ(e, nullptr);
  EXPECT_NE(std::string(loomGetLastError(nullptr)).find("CUDA"), std::string::npos);
}

// ---- Gates on host streams -------------------------------------------------------

// Work for a stream: records its place, and whether the event was complete
// when it ran.
struct Probe {
  struct loom_event* ev = nullptr;
  std::atomic<int>* order = nullptr;
  std::atomic<int> ran_at{-1};
  std::atomic<int> saw_done{-1};
};

loomResult_t probe_run(void* arg) {
  Probe* p = static_cast<Probe*>(arg);
  p->saw_done = p->ev ? event_done(p->ev) : -1;
  p->ran_at = (*p->order)++;
  return loomSuccess;
}

struct StreamFixture {
  loomStream_t h = nullptr;
  struct loom_stream* s = nullptr;
  StreamFixture() {
    EXPECT_EQ(loomStreamCreate(&h), loomSuccess);
    if (h) {
      EXPECT_EQ(stream_get(h, "test", &s), loomSuccess);
    }
  }
  ~StreamFixture() {
    if (h) {
      EXPECT_EQ(loomStreamDestroy(h), loomSuccess);
    }
  }
  void queue(Probe* p) {
    stream_work w = {probe_run, nullptr, p};
    ASSERT_EQ(stream_enqueue(s, &w), loomSuccess);
  }
};

// Bounded wait for a flag set by a worker (a hang guard).
template <class F>
bool eventually(F f) {
  for (int i = 0; i < 30000; i++) {
    if (f()) return true;
    usleep(1000);
  }
  return false;
}

// Work queued behind a gate starts only after the event completes; work
// ahead of it runs at once.
TEST(StreamGate, LaterWorkWaitsForTheEvent) {
  EventGuard g;
  ASSERT_NE(g.e, nullptr);
  StreamFixture f;
  ASSERT_NE(f.s, nullptr);
  std::atomic<int> order{0};
  Probe before, after;
  before.order = after.order = &order;
  after.ev = g.e;
  f.queue(&before);
  ASSERT_EQ(stream_wait_event(f.s, g.e), loomSuccess);
  EXPECT_EQ(event_refs(g.e), 2) << "the gate holds a reference";
  f.queue(&after);
  ASSERT_TRUE(eventually([&] { return before.ran_at.load() == 0; }));
  EXPECT_EQ(loomStreamQuery(f.h), loomInProgress) << "gated";
  EXPECT_EQ(after.ran_at.load(), -1) << "work behind the gate ran before the event completed";
  event_complete(g.e, loomSuccess, nullptr);
  EXPECT_EQ(loomStreamSynchronize(f.h), loomSuccess);
  EXPECT_EQ(after.ran_at.load(), 1);
  EXPECT_EQ(after.saw_done.load(), 1);
  EXPECT_EQ(event_refs(g.e), 1) << "the gate let go of the event";
}

// An event that completes with an error is the stream's error too; the
// later work still runs.
TEST(StreamGate, FailedEventIsTheStreamsError) {
  EventGuard g;
  ASSERT_NE(g.e, nullptr);
  StreamFixture f;
  ASSERT_NE(f.s, nullptr);
  std::atomic<int> order{0};
  Probe after;
  after.order = &order;
  after.ev = g.e;
  ASSERT_EQ(stream_wait_event(f.s, g.e), loomSuccess);
  f.queue(&after);
  std::thread producer([&] { event_complete(g.e, loomRemoteError, "rank 0: peer 1 aborted"); });
  EXPECT_EQ(loomStreamSynchronize(f.h), loomRemoteError);
  EXPECT_STREQ(loomGetLastError(nullptr), "rank 0: peer 1 aborted");
  producer.join();
  EXPECT_EQ(after.saw_done.load(), 1);
  EXPECT_EQ(loomStreamSynchronize(f.h), loomSuccess) << "the error is reported once";
}

// A producer that started (armed) and never completes: the gate gives up
// at twice its bound with loomTimeout, and the later work runs.
TEST(StreamGate, GivesUpAtTheEventsDeadline) {
  EventGuard g;
  ASSERT_NE(g.e, nullptr);
  StreamFixture f;
  ASSERT_NE(f.s, nullptr);
  std::atomic<int> order{0};
  Probe after;
  after.order = &order;
  after.ev = g.e;
  ASSERT_EQ(stream_wait_event(f.s, g.e), loomSuccess);
  f.queue(&after);
  event_arm(g.e, 10);
  EXPECT_EQ(loomStreamSynchronize(f.h), loomTimeout);
  EXPECT_NE(std::string(loomGetLastError(nullptr)).find("another stream"), std::string::npos)
      << loomGetLastError(nullptr);
  EXPECT_EQ(after.ran_at.load(), 0);
  EXPECT_EQ(after.saw_done.load(), 0);
  event_complete(g.e, loomSuccess, nullptr);  // late: nobody waits any more
}

// loomStreamDestroy on a gated stream waits for the gate and the work
// behind it, then frees; the completion races the destroy, many times
// over, so that the sanitizers see a wake-up meet a stream going away.
TEST(StreamGate, DestroyWhileGated) {
  for (int round = 0; round < 200; round++) {
    struct loom_event* e = nullptr;
    ASSERT_EQ(event_create(EVENT_HOST, &e), loomSuccess);
    loomStream_t h = nullptr;
    ASSERT_EQ(loomStreamCreate(&h), loomSuccess);
    struct loom_stream* s = nullptr;
    ASSERT_EQ(stream_get(h, "test", &s), loomSuccess);
    std::atomic<int> order{0};
    Probe after;
    after.order = &order;
    after.ev = e;
    ASSERT_EQ(stream_wait_event(s, e), loomSuccess);
    stream_work w = {probe_run, nullptr, &after};
    ASSERT_EQ(stream_enqueue(s, &w), loomSuccess);
    event_retain(e);  // the producer's; this thread keeps its own for the probe
    std::thread producer([e, round] {
      if (round % 4 == 0) usleep(1000);
      event_arm(e, 60000);
      event_complete(e, loomSuccess, nullptr);
      event_release(e);  // the gate may outlive it
    });
    ASSERT_EQ(loomStreamDestroy(h), loomSuccess);
    EXPECT_EQ(after.ran_at.load(), 0) << "round " << round;
    EXPECT_EQ(after.saw_done.load(), 1) << "round " << round;
    producer.join();
    EXPECT_EQ(event_refs(e), 1) << "round " << round << ": the gate let go of the event";
    event_release(e);
  }
}

// ---- A host stream's depth (STREAM_DEPTH) ---------------------------------------

loomResult_t count_run(void* arg) {
  (*static_cast<std::atomic<int>*>(arg))++;
  return loomSuccess;
}

// A stream holding STREAM_DEPTH items makes stream_wait_room wait until its
// worker is down to half of that; one holding fewer lets it go at once.
TEST(StreamDepth, FullStreamWaitsForRoom) {
  EventGuard g;
  ASSERT_NE(g.e, nullptr);
  StreamFixture f;
  ASSERT_NE(f.s, nullptr);
  std::atomic<int> ran{0};
  ASSERT_EQ(stream_wait_event(f.s, g.e), loomSuccess);  // nothing runs until g completes
  stream_work w = {count_run, nullptr, &ran};
  for (int i = 0; i < 10; i++) ASSERT_EQ(stream_enqueue(f.s, &w), loomSuccess);
  std::atomic<int> early{0};
  std::thread few([&] {
    stream_wait_room(f.s);
    early = 1;
  });
  EXPECT_TRUE(eventually([&] { return early.load() == 1; }))
      << "a stream holding 11 items made the caller wait";
  few.join();
  while (stream_pending(f.s) < STREAM_DEPTH) ASSERT_EQ(stream_enqueue(f.s, &w), loomSuccess);
  std::atomic<int> returned{0};
  std::atomic<unsigned long long> left{0};
  std::thread full([&] {
    stream_wait_room(f.s);
    left = stream_pending(f.s);
    returned = 1;
  });
  usleep(50000);
  EXPECT_EQ(returned.load(), 0) << "a full stream let the caller queue more";
  EXPECT_EQ(ran.load(), 0);
  event_complete(g.e, loomSuccess, nullptr);
  EXPECT_TRUE(eventually([&] { return returned.load() == 1; }));
  full.join();
  EXPECT_LE(left.load(), (unsigned long long)STREAM_DEPTH / 2);
  EXPECT_EQ(loomStreamSynchronize(f.h), loomSuccess);
  EXPECT_EQ(ran.load(), STREAM_DEPTH - 1);
  EXPECT_EQ(stream_pending(f.s), 0u);
}

// Collectives queued on a gated host stream: the calling thread stops at
// STREAM_DEPTH queued launches instead of queueing all of them, and goes on
// once the stream runs; every call's result is right.
TEST(StreamDepth, CallsWaitForAFullStream) {
  loomComm_t comm = nullptr;
  ASSERT_EQ(loomCommInitAll(&comm, 1, nullptr), loomSuccess);
  EventGuard g;
  ASSERT_NE(g.e, nullptr);
  StreamFixture f;
  ASSERT_NE(f.s, nullptr);
  ASSERT_EQ(stream_wait_event(f.s, g.e), loomSuccess);
  const int calls = 2 * STREAM_DEPTH + 100;
  std::vector<float> in(calls), out(calls, -1.0f);
  for (int i = 0; i < calls; i++) in[i] = (float)i;
  std::atomic<int> issued{0};
  std::atomic<int> bad{0};
  std::thread caller([&] {
    for (int i = 0; i < calls; i++) {
      if (loomAllReduce(&in[i], &out[i], 1, loomFloat32, loomSum, comm, f.h) != loomSuccess) bad++;
      issued++;
    }
  });
  EXPECT_TRUE(eventually([&] { return issued.load() >= STREAM_DEPTH - 1; }));
  usleep(50000);
  EXPECT_LT(issued.load(), STREAM_DEPTH) << "the caller queued past a full stream";
  EXPECT_LE(stream_pending(f.s), (unsigned long long)STREAM_DEPTH);
  event_complete(g.e, loomSuccess, nullptr);
  caller.join();
  EXPECT_EQ(bad.load(), 0) << loomGetLastError(nullptr);
  EXPECT_EQ(loomStreamSynchronize(f.h), loomSuccess) << loomGetLastError(nullptr);
  int wrong = 0;
  for (int i = 0; i < calls; i++) wrong += out[i] != in[i];
  EXPECT_EQ(wrong, 0) << "calls with a wrong result";
  EXPECT_EQ(loomCommDestroy(comm), loomSuccess);
}

}  // namespace
