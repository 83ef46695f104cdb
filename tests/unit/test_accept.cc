// The accept set (src/core/accept.h) on its own, over a loopback listener:
// a hello already there is handed on at the first run, a partial one waits,
// a bad one is refused, silent connections are evicted at the bound and
// expire at their deadline, and at the descriptor limit a newcomer is
// dropped (the spare descriptor) rather than left to keep the listener
// readable. Waits are hang guards with generous deadlines, never timing
// assertions.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

// util.h's _Atomic members, read as test_wire.cc does.
#define _Atomic volatile
#define atomic_load_explicit(p, mo) __atomic_load_n((p), (mo))
#define memory_order_seq_cst __ATOMIC_SEQ_CST
extern "C" {
#include "core/accept.h"
#include "core/debug.h"
#include "core/sock.h"
}
#undef _Atomic

namespace {

// The test's hello: its first byte says how long it is (2..32 bytes).
long TestHelloLen(const void* buf, size_t got, char* why, size_t why_len) {
  if (got < 1) return 1;
  int n = ((const unsigned char*)buf)[0];
  if (n < 2) {
    snprintf(why, why_len, "length byte %d", n);
    return -1;
  }
  return n;
}

struct Arrived {
  int fd;
  std::string bytes;
};

void OnHello(void* arg, int fd, const union sock_addr*, const void* hello, size_t len) {
  static_cast<std::vector<Arrived>*>(arg)->push_back({fd, std::string((const char*)hello, len)});
}

class AcceptSet : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(sock_addr_parse("127.0.0.1:1", &addr_), loomSuccess);
    addr_.sin.sin_port = 0;
    ASSERT_EQ(sock_listen(nullptr, &addr_, &listen_fd_), loomSuccess);
  }
  void TearDown() override {
    accept_set_destroy(set_);
    for (auto& a : arrived_) close(a.fd);
    for (int fd : clients_) close(fd);
    close(listen_fd_);
  }
  void Make(long long hello_ms = 10000) {
    accept_cfg cfg = {"test", SUB_NET, 32, TestHelloLen, hello_ms};
    ASSERT_EQ(accept_set_create(nullptr, listen_fd_, &cfg, &set_), loomSuccess);
  }
  int Socket() {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_GE(fd, 0);
    clients_.push_back(fd);
    return fd;
  }
  // A blocking connect; the kernel completes it from the backlog.
  void Connect(int fd, const std::string& say = "") {
    EXPECT_EQ(connect(fd, &addr_.sa, sock_addr_len(&addr_)), 0) << strerror(errno);
    if (say.empty()) return;
    EXPECT_EQ(send(fd, say.data(), say.size(), MSG_NOSIGNAL), (ssize_t)say.size());
  }
  int Dial(const std::string& say = "") {
    int fd = Socket();
    Connect(fd, say);
    return fd;
  }
  // Runs the set as its owner would (waiting on its fd) until pred or the guard.
  bool RunUntil(const std::function<bool()>& pred, int guard_ms = 10000) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(guard_ms);
    while (!pred()) {
      if (std::chrono::steady_clock::now() > end) return false;
      int t = accept_set_timeout_ms(set_);
      pollfd p = {accept_set_fd(set_), POLLIN, 0};
      poll(&p, 1, t < 0 || t > 20 ? 20 : t);
      accept_set_run(set_, OnHello, &arrived_);
    }
    return true;
  }
  // True once the far end has closed fd.
  static bool Closed(int fd) {
    pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 0) != 1) return false;
    char b;
    return recv(fd, &b, 1, MSG_DONTWAIT) <= 0;
  }

  union sock_addr addr_;
  int listen_fd_ = -1;
  accept_set* set_ = nullptr;
  std::vector<Arrived> arrived_;
  std::vector<int> clients_;
};

std::string Hello(int n, char fill = 'h') {
  std::string s((size_t)n, fill);
  s[0] = (char)n;
  return s;
}

TEST_F(AcceptSet, HelloAlreadyThereIsHandedOnAtOnce) {
  Make();
  Dial(Hello(9));
  ASSERT_TRUE(RunUntil([&] { return arrived_.size() == 1; }));
  EXPECT_EQ(arrived_[0].bytes, Hello(9));
  EXPECT_EQ(accept_set_pending(set_), 0);
}

TEST_F(AcceptSet, PartialHelloWaitsForTheRest) {
  Make();
  int fd = Dial(Hello(12).substr(0, 5));
  ASSERT_TRUE(RunUntil([&] { return accept_set_pending(set_) == 1; }));
  EXPECT_TRUE(arrived_.empty());
  ASSERT_EQ(send(fd, Hello(12).data() + 5, 7, MSG_NOSIGNAL), 7);
  ASSERT_TRUE(RunUntil([&] { return arrived_.size() == 1; }));
  EXPECT_EQ(arrived_[0].bytes, Hello(12));
}

TEST_F(AcceptSet, BadHelloIsRefused) {
  Make();
  int bad = Dial(std::string(1, '\x01'));
  int good = Dial(Hello(4));
  ASSERT_TRUE(RunUntil([&] { return Closed(bad) && arrived_.size() == 1; }));
  EXPECT_FALSE(Closed(good));
}

TEST_F(AcceptSet, SilentOnesExpireAtTheirDeadline) {
  Make(300);
  int silent = Dial();
  ASSERT_TRUE(RunUntil([&] { return Closed(silent); }));
  EXPECT_EQ(accept_set_pending(set_), 0);
}

// More silent connections than the bound: the oldest go, the set never
// holds more than its bound, and a rank that says hello behind them all
// gets in.
TEST_F(AcceptSet, SilentOnesAreEvictedAtTheBound) {
  Make();
  const int n = ACCEPT_MAX_PENDING + 72;
  std::vector<int> silent;
  for (int i = 0; i < n; i++) silent.push_back(Dial());
  Dial(Hello(6));
  int most = 0;
  ASSERT_TRUE(RunUntil([&] {
    most = std::max(most, accept_set_pending(set_));
    return arrived_.size() == 1;
  }));
  EXPECT_LE(most, ACCEPT_MAX_PENDING);
  EXPECT_TRUE(RunUntil([&] { return Closed(silent[0]) && Closed(silent[71]); }))
      << "the oldest were not evicted";
  EXPECT_FALSE(Closed(silent[n - 1]));
}

// Out of descriptors with nothing to evict: the newcomer is taken off the
// backlog and closed (the spare descriptor), and run returns instead of
// facing a listener that stays readable. With a stranger pending, the
// stranger goes and the newcomer is accepted.
TEST_F(AcceptSet, AtTheDescriptorLimit) {
  Make();
  // The clients' sockets exist before the limit is reached; they connect later.
  int s1 = Socket(), s2 = Socket(), s3 = Socket();
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> filler;
  for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) filler.push_back(fd);
  int filled_errno = errno;
  Connect(s1);
  bool dropped = RunUntil([&] { return Closed(s1); }, 5000);
  int pending_then = accept_set_pending(set_);
  // One descriptor free: a silent stranger takes it; then a rank comes.
  close(filler.back());
  filler.pop_back();
  Connect(s2);
  bool parked = RunUntil([&] { return accept_set_pending(set_) == 1; }, 5000);
  Connect(s3, Hello(3));
  bool in = RunUntil([&] { return arrived_.size() == 1; }, 5000);
  bool evicted = Closed(s2);
  for (int fd : filler) close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(filled_errno, EMFILE);
  EXPECT_TRUE(dropped) << "the newcomer was not dropped at the limit";
  EXPECT_EQ(pending_then, 0);
  EXPECT_TRUE(parked) << "the stranger was not accepted into the free descriptor";
  EXPECT_TRUE(in) << "the rank behind the stranger was not let in";
  EXPECT_TRUE(evicted) << "the stranger was not evicted for it";
}

}  // namespace
