// The progress engine (src/transport/progress.h) on its own, over pipes and
// socketpairs: the thread starts with the first client, descriptors'
// callbacks and clients' progress run, a wake-up brings a round, deleting a
// descriptor (from a callback, or from another thread while callbacks run)
// is safe, errors on a descriptor reach its callback, the idle hand-over
// parks and re-arms, and teardown with the thread asleep ends. Waits are
// hang guards with generous deadlines, never timing assertions; a "gate"
// holds the engine inside a client's progress so that the test decides
// what one round sees.
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "transport/progress.h"

namespace {

using namespace std::chrono_literals;

// Polls pred until it holds or 10 s pass.
bool WaitFor(const std::function<bool()>& pred) {
  auto end = std::chrono::steady_clock::now() + 10s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

struct Client {
  std::atomic<int> rounds{0};
  std::atomic<int> moved_left{0};  // rounds that report moving something
  std::atomic<int> timeout_ms{-1};
  loomResult_t result = loomSuccess;
  std::atomic<int> failed{0};
  // The gate: while hold, a round waits in progress (up to 10 s).
  std::mutex m;
  std::condition_variable cv;
  bool hold = false, held = false;
};

loomResult_t ClientProgress(void* arg, int* moved_out, int* timeout_out) {
  auto* c = static_cast<Client*>(arg);
  c->rounds++;
  {
    std::unique_lock<std::mutex> lk(c->m);
    if (c->hold) {
      c->held = true;
      c->cv.notify_all();
      c->cv.wait_for(lk, 10s, [c] { return !c->hold; });
      c->held = false;
    }
  }
  *moved_out = c->moved_left.fetch_sub(1) > 0;
  *timeout_out = c->timeout_ms;
  return c->result;
}

void ClientFail(void* arg, const char*) {
  static_cast<Client*>(arg)->failed++;
}

const progress_client_ops kOps = {"test", ClientProgress, ClientFail};

// A watched descriptor: counts its callbacks; `on` says what else to do.
struct Watch {
  int fd = -1;
  progress_fd* handle = nullptr;
  std::atomic<int> calls{0};
  std::atomic<unsigned> events{0};
  std::atomic<int> err{0};
  std::function<void(Watch*, unsigned, int)> on;
};

// Counts the call last: a test that sees the count sees what the call did.
void OnFd(void* arg, unsigned events, int err) {
  auto* w = static_cast<Watch*>(arg);
  w->events |= events;
  if (err != 0) w->err = err;
  if (w->on) w->on(w, events, err);
  w->calls++;
}

void Drain(int fd) {
  char buf[64];
  while (read(fd, buf, sizeof(buf)) > 0) {
  }
}

class ProgressEngine : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(progress_create(nullptr, &p_), loomSuccess); }
  void TearDown() override {
    progress_destroy(p_);
    for (int fd : fds_) close(fd);
  }
  // Clients and watches outlive the engine (TearDown destroys it first):
  // its thread calls them until then.
  Client& NewClient() {
    clients_.push_back(std::make_unique<Client>());
    return *clients_.back();
  }
  Watch& NewWatch() {
    watches_.push_back(std::make_unique<Watch>());
    return *watches_.back();
  }
  progress_client* Add(Client& c) {
    progress_client* pc = nullptr;
    EXPECT_EQ(progress_client_add(p_, &kOps, &c, &pc), loomSuccess);
    return pc;
  }
  // A non-blocking socketpair, closed at the end.
  void Pair(int sv[2]) {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    fds_.push_back(sv[0]);
    fds_.push_back(sv[1]);
  }
  void Hold(Client& c) {
    std::unique_lock<std::mutex> lk(c.m);
    c.hold = true;
    progress_wake(p_);
    ASSERT_TRUE(c.cv.wait_for(lk, 10s, [&c] { return c.held; })) << "the round never came";
  }
  void Release(Client& c) {
    std::lock_guard<std::mutex> lk(c.m);
    c.hold = false;
    c.cv.notify_all();
  }
  // A whole round whose wait began after everything so far has run its
  // descriptors' callbacks (the first gate may catch a round already past
  // its wait).
  void TwoRounds(Client& c) {
    for (int i = 0; i < 2; i++) {
      Hold(c);
      Release(c);
    }
  }
  progress* p_ = nullptr;
  std::vector<int> fds_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<std::unique_ptr<Watch>> watches_;
};

TEST_F(ProgressEngine, ThreadStartsWithTheFirstClient) {
  EXPECT_EQ(progress_thread_started(p_), 0);
  Client& c = NewClient();
  Add(c);
  EXPECT_EQ(progress_thread_started(p_), 1);
  EXPECT_TRUE(WaitFor([&] { return c.rounds >= 1; })) << "a new client is progressed at once";
}

TEST_F(ProgressEngine, DestroyWithoutAThread) {
  progress_destroy(p_);
  p_ = nullptr;
}

TEST_F(ProgressEngine, WakeBringsARound) {
  Client& c = NewClient();
  Add(c);
  ASSERT_TRUE(WaitFor([&] { return c.rounds >= 1; }));
  for (int i = 0; i < 3; i++) {
    int r = c.rounds;
    progress_wake(p_);
    EXPECT_TRUE(WaitFor([&] { return c.rounds > r; })) << "wake " << i;
  }
}

TEST_F(ProgressEngine, MovedAndTimeoutBringMoreRounds) {
  Client& c = NewClient();
  c.moved_left = 5;
  Add(c);
  EXPECT_TRUE(WaitFor([&] { return c.rounds >= 6; })) << "a client that moved is called again";
  c.timeout_ms = 1;
  progress_wake(p_);  // takes the timeout on
  int r = c.rounds;
  EXPECT_TRUE(WaitFor([&] { return c.rounds >= r + 5; })) << "its timeout brings rounds";
}

TEST_F(ProgressEngine, DescriptorCallbackRuns) {
  Client& c = NewClient();
  progress_client* pc = Add(c);
  int sv[2];
  Pair(sv);
  Watch& w = NewWatch();
  w.on = [&](Watch*, unsigned, int) { Drain(sv[0]); };
  ASSERT_EQ(progress_fd_add(pc, sv[0], PROGRESS_IN, OnFd, &w, &w.handle), 0);
  ASSERT_EQ(write(sv[1], "x", 1), 1);
  EXPECT_TRUE(WaitFor([&] { return w.calls >= 1; }));
  EXPECT_TRUE(w.events & PROGRESS_IN);
  EXPECT_EQ(w.err, 0);
  progress_fd_del(w.handle);
}

// Two descriptors report in one round; the first callback deletes the
// other and frees what its argument points to (AddressSanitizer would see a
// callback on it).
TEST_F(ProgressEngine, DeleteFromACallbackDropsTheRestOfTheRound) {
  Client& c = NewClient();
  progress_client* pc = Add(c);
  int a[2], b[2];
  Pair(a);
  Pair(b);
  Watch* wa = new Watch;
  Watch* wb = new Watch;
  std::atomic<int> calls{0};
  auto on = [&](Watch* self, unsigned, int) {
    calls++;
    Watch*& other = self == wa ? wb : wa;
    if (other != nullptr) {
      progress_fd_del(other->handle);
      delete other;
      other = nullptr;
    }
    Drain(self->fd);
  };
  wa->fd = a[0];
  wb->fd = b[0];
  wa->on = wb->on = on;
  ASSERT_EQ(progress_fd_add(pc, a[0], PROGRESS_IN, OnFd, wa, &wa->handle), 0);
  ASSERT_EQ(progress_fd_add(pc, b[0], PROGRESS_IN, OnFd, wb, &wb->handle), 0);
  Hold(c);  // both become readable while the engine is in a round
  ASSERT_EQ(write(a[1], "x", 1), 1);
  ASSERT_EQ(write(b[1], "y", 1), 1);
  Release(c);
  ASSERT_TRUE(WaitFor([&] { return calls >= 1; }));
  TwoRounds(c);
  EXPECT_EQ(calls, 1) << "the deleted descriptor's event was delivered";
  Watch* left = wa ? wa : wb;
  ASSERT_NE(left, nullptr);
  progress_fd_del(left->handle);
  delete left;
}

// Off the engine's thread, a deletion waits for the round's callbacks.
TEST_F(ProgressEngine, DeleteFromAnotherThreadWaitsForTheCallbacks) {
  Client& c = NewClient();
  progress_client* pc = Add(c);
  int sv[2];
  Pair(sv);
  Watch& w = NewWatch();
  ASSERT_EQ(progress_fd_add(pc, sv[0], PROGRESS_IN, OnFd, &w, &w.handle), 0);
  Hold(c);
  std::atomic<int> done{0};
  std::thread t([&] {
    progress_fd_del(w.handle);
    done = 1;
  });
  std::this_thread::sleep_for(20ms);  // room for a deletion that does not wait to return early
  EXPECT_EQ(done, 0) << "progress_fd_del returned while a round's callbacks ran";
  Release(c);
  t.join();
  EXPECT_EQ(done, 1);
  ASSERT_EQ(write(sv[1], "x", 1), 1);
  TwoRounds(c);
  EXPECT_EQ(w.calls, 0) << "a deleted descriptor's callback ran";
}

TEST_F(ProgressEngine, ErrorsReachTheCallback) {
  Client& c = NewClient();
  progress_client* pc = Add(c);
  // A pipe whose reader closed: EPOLLERR on the writer.
  int pfd[2];
  ASSERT_EQ(pipe2(pfd, O_NONBLOCK | O_CLOEXEC), 0);
  fds_.push_back(pfd[1]);
  Watch& wp = NewWatch();
  wp.on = [](Watch* self, unsigned ev, int) {
    if (ev & PROGRESS_ERR) progress_fd_del(self->handle);  // deleting itself, from its callback
  };
  // Interest in nothing the writer ever is (errors are always reported).
  ASSERT_EQ(progress_fd_add(pc, pfd[1], PROGRESS_IN, OnFd, &wp, &wp.handle), 0);
  close(pfd[0]);
  EXPECT_TRUE(WaitFor([&] { return (wp.events & PROGRESS_ERR) != 0; })) << wp.events;
  EXPECT_EQ(wp.err, 0) << "the kernel's error: the client finds the cause";
  // A socketpair whose peer closed: the hang-up.
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  fds_.push_back(sv[0]);
  Watch& ws = NewWatch();
  ws.on = [](Watch* self, unsigned ev, int) {
    if (ev & (PROGRESS_HUP | PROGRESS_RDHUP)) progress_fd_del(self->handle);
  };
  ASSERT_EQ(progress_fd_add(pc, sv[0], PROGRESS_IN | PROGRESS_RDHUP, OnFd, &ws, &ws.handle), 0);
  close(sv[1]);
  EXPECT_TRUE(WaitFor([&] { return (ws.events & (PROGRESS_HUP | PROGRESS_RDHUP)) != 0; }));
  // A regular file cannot be watched: the errno comes back.
  char path[] = "/tmp/loom_progress_XXXXXX";
  int file = mkstemp(path);
  ASSERT_GE(file, 0);
  unlink(path);
  fds_.push_back(file);
  Watch& wf = NewWatch();
  progress_fd* h = nullptr;
  EXPECT_EQ(progress_fd_add(pc, file, PROGRESS_IN, OnFd, &wf, &h), EPERM);
  EXPECT_EQ(h, nullptr);
}

// The executor polls: the first event parks the descriptor, and later data
// wakes nobody; at idle it is watched in full again and reports the data.
TEST_F(ProgressEngine, IdleHandOverParksAndRearms) {
  Client& c = NewClient();
  progress_client* pc = Add(c);
  int sv[2];
  Pair(sv);
  std::mutex m;
  std::vector<int> parks;
  Watch& w = NewWatch();
  w.on = [&](Watch* self, unsigned, int) {
    int parked = progress_fd_park(self->handle, PROGRESS_EDGE | PROGRESS_RDHUP);
    {
      std::lock_guard<std::mutex> lk(m);
      parks.push_back(parked);
    }
    if (!parked) Drain(sv[0]);
  };
  ASSERT_EQ(progress_fd_add(pc, sv[0], PROGRESS_IN, OnFd, &w, &w.handle), 0);
  progress_exec_polls(p_);
  ASSERT_EQ(write(sv[1], "x", 1), 1);
  ASSERT_TRUE(WaitFor([&] { return w.calls >= 1; }));
  ASSERT_EQ(write(sv[1], "y", 1), 1);
  TwoRounds(c);
  EXPECT_EQ(w.calls, 1) << "a parked descriptor woke the engine for data";
  progress_idle(p_);
  ASSERT_TRUE(WaitFor([&] { return w.calls >= 2; })) << "the hand-over lost the waiting data";
  progress_idle(p_);          // nothing polled since: returns at once
  progress_fd_del(w.handle);  // its callback reads this test's locals
  EXPECT_EQ(parks, (std::vector<int>{1, 0}));
}

// Re-arming at idle fails (the descriptor was closed behind the engine's
// back): the error is delivered on the engine's thread with its errno.
TEST_F(ProgressEngine, AnEngineFailureReachesTheCallback) {
  Client& c = NewClient();
  progress_client* pc = Add(c);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  fds_.push_back(sv[1]);
  Watch& w = NewWatch();
  std::atomic<std::thread::id> on_thread{};
  std::atomic<int> parked{0};
  w.on = [&](Watch* self, unsigned, int err) {
    if (err != 0) {
      on_thread = std::this_thread::get_id();
      progress_fd_del(self->handle);
    } else {
      parked = progress_fd_park(self->handle, PROGRESS_EDGE | PROGRESS_RDHUP);
    }
  };
  ASSERT_EQ(progress_fd_add(pc, sv[0], PROGRESS_IN, OnFd, &w, &w.handle), 0);
  progress_exec_polls(p_);
  ASSERT_EQ(write(sv[1], "x", 1), 1);
  ASSERT_TRUE(WaitFor([&] { return w.calls >= 1; }));
  TwoRounds(c);  // the callback is done with the descriptor
  ASSERT_EQ(parked, 1);
  close(sv[0]);  // leaves the epoll set: re-arming it fails
  progress_idle(p_);
  EXPECT_TRUE(WaitFor([&] { return w.err != 0; }));
  EXPECT_EQ(w.err, EBADF);
  EXPECT_TRUE(w.events & PROGRESS_ERR);
  EXPECT_NE(on_thread.load(), std::this_thread::get_id());
}

TEST_F(ProgressEngine, RemovedClientIsCalledNoMore) {
  Client& a = NewClient();
  Client& b = NewClient();
  progress_client* pa = Add(a);
  Add(b);
  int sv[2];
  Pair(sv);
  Watch& w = NewWatch();
  ASSERT_EQ(progress_fd_add(pa, sv[0], PROGRESS_IN, OnFd, &w, &w.handle), 0);
  progress_client_remove(pa);  // its descriptor goes with it
  int r = a.rounds;
  ASSERT_EQ(write(sv[1], "x", 1), 1);
  TwoRounds(b);
  EXPECT_EQ(a.rounds, r);
  EXPECT_EQ(w.calls, 0);
}

TEST_F(ProgressEngine, FailingClientStopsAlone) {
  Client& a = NewClient();
  Client& b = NewClient();
  a.result = loomInternalError;
  Add(a);
  Add(b);
  ASSERT_TRUE(WaitFor([&] { return a.rounds >= 1; }));
  TwoRounds(b);
  EXPECT_EQ(a.rounds, 1) << "a client whose progress failed was called again";
  EXPECT_EQ(a.failed, 0) << "fail is for the engine's own end";
}

// The thread sleeps in epoll_wait with no deadline: destroy wakes and joins
// it, leaving the client's descriptors open.
TEST_F(ProgressEngine, TeardownWhileTheThreadSleeps) {
  Client& c = NewClient();
  progress_client* pc = Add(c);
  int sv[2];
  Pair(sv);
  Watch& w = NewWatch();
  ASSERT_EQ(progress_fd_add(pc, sv[0], PROGRESS_IN, OnFd, &w, &w.handle), 0);
  ASSERT_TRUE(WaitFor([&] { return c.rounds >= 1; }));
  TwoRounds(c);  // asleep after this
  progress* p = p_;
  p_ = nullptr;
  auto done = std::async(std::launch::async, [p] { progress_destroy(p); });
  ASSERT_EQ(done.wait_for(10s), std::future_status::ready) << "progress_destroy hangs";
  EXPECT_EQ(fcntl(sv[0], F_GETFD), FD_CLOEXEC) << "the engine closed a client's descriptor";
}

}  // namespace
