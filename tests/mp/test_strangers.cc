// test_strangers.cc - connections that never say hello must not deny
// service, and unique ids must not cost a descriptor each.
//
// StrangersBoot: rank 0 lowers its soft limit of descriptors to 1024, and a
// helper process opens 1,100 silent connections to its rendezvous port
// (the unique id's, or LOOM_ROOT's) before the other ranks join. The
// communicator forms, an all-reduce is right, rank 0 has closed every
// stranger, and its log has a few WARN lines, not one per stranger.
// StrangersSocket: the same with LOOM_TRANSPORTS=socket and 2,200 silent
// connections to every rank's socket transport port before the first
// all-reduce; several all-reduces pass.
// UniqueIds: 1,000 loomGetUniqueId calls leave the descriptor count within
// a few of what it was (the ids share one listener), a communicator made
// with one of them works, and thread ranks (loomCommInitAll, then
// loomCommSplit into three colours at once, whose three rendezvous share the
// listener) work under 1,100 strangers.
//
// The helper is a process of its own (it needs more descriptors than the
// rank may have): forked by the rank, it closes what it inherited, makes
// only system calls, and reports through pipes.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

namespace {

using harness::Ctx;
using harness::Mode;
using Clock = std::chrono::steady_clock;

constexpr int kSoftLimit = 1024;
constexpr int kBootStrangers = 1100;
constexpr int kSocketStrangers = 2200;
constexpr int kWarnLinesMax = 40;  // "a few lines per burst", far below one per stranger

// ---- Descriptors ----------------------------------------------------------------------

int fd_count() {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1;  // the directory's own
}

void lower_soft_limit(int soft) {
  rlimit r{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &r), 0);
  r.rlim_cur = std::min<rlim_t>((rlim_t)soft, r.rlim_max);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &r), 0) << strerror(errno);
}

// ---- Addresses -------------------------------------------------------------------------

// The rendezvous address in an id (struct boot_id, src/core/bootstrap.h):
// magic u32, version u16, family u16, port u16 (network order), pad u16,
// addr[16].
sockaddr_storage id_addr(const loomUniqueId& id) {
  const unsigned char* b = (const unsigned char*)id.internal;
  uint16_t family, port;
  memcpy(&family, b + 6, 2);
  memcpy(&port, b + 8, 2);
  sockaddr_storage ss{};
  if (family == AF_INET6) {
    auto* a = (sockaddr_in6*)&ss;
    a->sin6_family = AF_INET6;
    a->sin6_port = port;
    memcpy(&a->sin6_addr, b + 12, 16);
  } else {
    auto* a = (sockaddr_in*)&ss;
    a->sin_family = AF_INET;
    a->sin_port = port;
    memcpy(&a->sin_addr, b + 12, 4);
  }
  return ss;
}

// "1.2.3.4:port" or "[v6]:port", numeric only.
bool parse_addr(const std::string& text, sockaddr_storage* out) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = text.substr(0, colon);
  int port = atoi(text.c_str() + colon + 1);
  *out = sockaddr_storage{};
  if (host.size() > 2 && host.front() == '[') {
    auto* a = (sockaddr_in6*)out;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons((uint16_t)port);
    return inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &a->sin6_addr) == 1;
  }
  auto* a = (sockaddr_in*)out;
  a->sin_family = AF_INET;
  a->sin_port = htons((uint16_t)port);
  return inet_pton(AF_INET, host.c_str(), &a->sin_addr) == 1;
}

// ---- Strangers --------------------------------------------------------------------------

// A process that opens n connections to an address and says nothing on them.
// It retries while nobody listens yet (rank 0 of loomCommInitFromEnv binds
// its port inside the init call), reports how many it opened, optionally
// creates a file then (the other ranks' signal to join), and at finish()
// reports how many the far end has closed.
class Strangers {
 public:
  Strangers() = default;
  Strangers(const Strangers&) = delete;
  Strangers& operator=(const Strangers&) = delete;
  ~Strangers() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (ctl_ >= 0) close(ctl_);
    if (rep_ >= 0) close(rep_);
  }

  void start(const sockaddr_storage& to, int n, const std::string& ready_file = "") {
    n_ = n;
    fds_.assign(n, -1);
    pfd_.assign(n, pollfd{});
    ready_ = ready_file;
    int ctl[2], rep[2];
    ASSERT_EQ(pipe2(ctl, O_CLOEXEC), 0);
    ASSERT_EQ(pipe2(rep, O_CLOEXEC), 0);
    fflush(nullptr);
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) child(to, ctl[0], rep[1]);  // never returns
    close(ctl[0]);
    close(rep[1]);
    ctl_ = ctl[1];
    rep_ = rep[0];
  }

  // How many connections are open, once they are (-1: no word in time).
  int wait_connected(int timeout_ms) { return read_int(timeout_ms); }

  // Waits up to wait_ms until the far end has closed every connection;
  // returns how many it closed.
  int finish(int wait_ms) {
    if (write(ctl_, &wait_ms, sizeof(wait_ms)) != (ssize_t)sizeof(wait_ms)) return -1;
    int closed = read_int(wait_ms + 10000);
    if (pid_ > 0 && waitpid(pid_, nullptr, 0) == pid_) pid_ = -1;
    return closed;
  }

 private:
  int read_int(int timeout_ms) {
    pollfd p = {rep_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) != 1) return -1;
    int v = -1;
    if (read(rep_, &v, sizeof(v)) != (ssize_t)sizeof(v)) return -1;
    return v;
  }

  static long long now_ms() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  }

  // One connection, retried while refused (the listener is not up yet).
  static int dial(const sockaddr_storage& to, long long give_up_ms) {
    socklen_t len = to.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    for (;;) {
      int fd = socket(to.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) return -1;
      timeval tv = {5, 0};  // connect honours it: never a hang
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      if (connect(fd, (const sockaddr*)&to, len) == 0) return fd;
      int e = errno;
      close(fd);
      if (e != ECONNREFUSED || now_ms() > give_up_ms) return -1;
      timespec pause = {0, 10 * 1000 * 1000};
      nanosleep(&pause, nullptr);
    }
  }

  // Only system calls from here: this is a fork of a threaded process.
  [[noreturn]] void child(const sockaddr_storage& to, int ctl, int rep) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    rlimit r;
    getrlimit(RLIMIT_NOFILE, &r);
    int top = (int)std::max<rlim_t>(r.rlim_cur, 4096);
    for (int fd = 3; fd < top; fd++)  // the rank's sockets are not ours to hold
      if (fd != ctl && fd != rep) close(fd);
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
    long long give_up = now_ms() + 60000;
    int opened = 0;
    for (int i = 0; i < n_; i++) {
      fds_[i] = dial(to, give_up);
      if (fds_[i] < 0) break;
      opened++;
    }
    if (write(rep, &opened, sizeof(opened)) != (ssize_t)sizeof(opened)) _exit(2);
    if (!ready_.empty()) {
      int f = open(ready_.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
      if (f >= 0) close(f);
    }
    int wait_ms = 0;
    if (read(ctl, &wait_ms, sizeof(wait_ms)) != (ssize_t)sizeof(wait_ms)) _exit(3);
    int closed = 0;
    for (int i = 0; i < opened; i++) pfd_[i] = pollfd{fds_[i], POLLIN, 0};
    long long end = now_ms() + wait_ms;
    while (closed < opened && now_ms() < end) {
      if (poll(pfd_.data(), (nfds_t)opened, 50) <= 0) continue;
      for (int i = 0; i < opened; i++) {
        if (pfd_[i].fd < 0 || pfd_[i].revents == 0) continue;
        char b;
        ssize_t got = recv(pfd_[i].fd, &b, 1, MSG_DONTWAIT);
        if (got > 0 || (got < 0 && (errno == EAGAIN || errno == EINTR))) continue;
        close(pfd_[i].fd);
        pfd_[i].fd = -1;  // poll skips it
        closed++;
      }
    }
    if (write(rep, &closed, sizeof(closed)) != (ssize_t)sizeof(closed)) _exit(4);
    _exit(0);
  }

  int n_ = 0;
  pid_t pid_ = -1;
  int ctl_ = -1, rep_ = -1;
  std::string ready_;
  std::vector<int> fds_;     // the child's, sized before the fork
  std::vector<pollfd> pfd_;  // likewise
};

// ---- Ranks -------------------------------------------------------------------------------

struct LogRemover {
  ~LogRemover() { unlink(harness::own_log().c_str()); }
};

// Counts the WARN lines of a log and shows the first few (for the reader).
int warn_lines(const std::string& log, int rank) {
  int n = 0;
  size_t at = 0;
  for (size_t eol; (eol = log.find('\n', at)) != std::string::npos; at = eol + 1) {
    std::string line = log.substr(at, eol - at);
    if (line.find(" WARN ") == std::string::npos) continue;
    if (n++ < 6) printf("    rank %d: %s\n", rank, line.c_str());
  }
  if (n > 6) printf("    rank %d: ... %d WARN lines in all\n", rank, n);
  return n;
}

void check_allreduce(loomComm_t comm, int rank, int nranks, size_t count) {
  std::vector<int32_t> v(count);
  for (size_t i = 0; i < count; i++) v[i] = (int32_t)(rank + 1 + (int)(i % 7));
  ASSERT_LOOM_OK(loomAllReduce(v.data(), v.data(), count, loomInt32, loomSum, comm, nullptr));
  for (size_t i = 0; i < count; i++)
    ASSERT_EQ(v[i], (int32_t)(nranks * (nranks + 1) / 2 + nranks * (int)(i % 7)))
        << "element " << i << " of " << count;
}

// Writes the id where harness::share_id reads it (the harness's own writer
// would make a new id).
void publish_id(const Ctx& c, const loomUniqueId& id) {
  std::string tmp = c.id_file + ".tmp";
  int fd = open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, &id, sizeof(id)), (ssize_t)sizeof(id));
  close(fd);
  ASSERT_EQ(rename(tmp.c_str(), c.id_file.c_str()), 0);
}

bool wait_file(const std::string& path, int timeout_s) {
  auto end = Clock::now() + std::chrono::seconds(timeout_s);
  struct stat st;
  while (stat(path.c_str(), &st) != 0) {
    if (Clock::now() > end) return false;
    usleep(5000);
  }
  return true;
}

harness::Opts opts_with_log(const std::string& name, const std::string& subsys) {
  harness::Opts o;
  o.timeout_s = 180;
  o.comm_timeout_ms = 60000;
  o.init = harness::Init::None;
  o.env = harness::log_env("/tmp/loomtest-" + name + "-" + harness::unique_tag() + "-", subsys);
  return o;
}

void init_with(Ctx& c, const loomUniqueId& id) {
  loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
  cfg.timeoutMs = 60000;
  ASSERT_LOOM_OK(loomCommInitRankConfig(&c.comm, c.nranks, id, c.rank, &cfg));
}

// ---- The rendezvous port -----------------------------------------------------------------

TEST(StrangersBoot, UniqueIdPortUnderDescriptorLimit) {
  harness::run(
      3, Mode::Proc,
      [](Ctx& c) {
        LogRemover remove_log;
        loomUniqueId id;
        Strangers s;
        if (c.rank == 0) {
          ASSERT_NO_FATAL_FAILURE(lower_soft_limit(kSoftLimit));
          ASSERT_LOOM_OK(loomGetUniqueId(&id));
          ASSERT_NO_FATAL_FAILURE(s.start(id_addr(id), kBootStrangers));
          ASSERT_EQ(s.wait_connected(90000), kBootStrangers);
          ASSERT_NO_FATAL_FAILURE(publish_id(c, id));  // the ranks come after the strangers
        } else {
          ASSERT_NO_FATAL_FAILURE(harness::share_id(c, &id));
        }
        ASSERT_NO_FATAL_FAILURE(init_with(c, id));
        ASSERT_NO_FATAL_FAILURE(check_allreduce(c.comm, c.rank, c.nranks, 1000));
        if (c.rank != 0) return;
        EXPECT_EQ(s.finish(15000), kBootStrangers) << "strangers rank 0 left open";
        std::string log = harness::read_file(harness::own_log());
        EXPECT_LE(warn_lines(log, c.rank), kWarnLinesMax) << log.substr(0, 4000);
      },
      opts_with_log("boot-id", "BOOTSTRAP"));
}

TEST(StrangersBoot, FromEnvPortUnderDescriptorLimit) {
  harness::run(
      3, Mode::Proc,
      [](Ctx& c) {
        LogRemover remove_log;
        const std::string go = c.id_file + ".go";
        loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
        cfg.timeoutMs = 60000;
        Strangers s;
        if (c.rank == 0) {
          ASSERT_NO_FATAL_FAILURE(lower_soft_limit(kSoftLimit));
          sockaddr_storage root;
          ASSERT_TRUE(parse_addr(getenv("LOOM_ROOT"), &root)) << getenv("LOOM_ROOT");
          // The helper connects once rank 0 listens (inside the init call)
          // and then lets the other ranks in.
          ASSERT_NO_FATAL_FAILURE(s.start(root, kBootStrangers, go));
        } else {
          ASSERT_TRUE(wait_file(go, 90)) << "the strangers never connected";
        }
        ASSERT_LOOM_OK(loomCommInitFromEnv(&c.comm, &cfg));
        ASSERT_NO_FATAL_FAILURE(check_allreduce(c.comm, c.rank, c.nranks, 1000));
        if (c.rank != 0) return;
        EXPECT_EQ(s.wait_connected(1000), kBootStrangers);
        EXPECT_EQ(s.finish(15000), kBootStrangers) << "strangers rank 0 left open";
        unlink(go.c_str());
        std::string log = harness::read_file(harness::own_log());
        EXPECT_LE(warn_lines(log, c.rank), kWarnLinesMax) << log.substr(0, 4000);
      },
      opts_with_log("boot-env", "BOOTSTRAP"));
}

// ---- The socket transport's port ---------------------------------------------------------

// This rank's socket transport address, from its INFO log.
bool transport_addr(const Ctx& c, sockaddr_storage* out) {
  std::string log = harness::read_file(harness::own_log());
  std::string key = "rank " + std::to_string(c.rank) + ": socket transport listening on ";
  size_t at = log.find(key);
  if (at == std::string::npos) return false;
  at += key.size();
  size_t end = log.find_first_of(" \n", at);
  return parse_addr(log.substr(at, end - at), out);
}

TEST(StrangersSocket, TransportPortsUnderDescriptorLimit) {
  harness::Opts o = opts_with_log("sock", "INIT,NET");
  o.env.push_back({"LOOM_TRANSPORTS", "socket"});
  o.env.push_back({"LOOM_DIRECT", "0"});
  harness::run(
      3, Mode::Proc,
      [](Ctx& c) {
        LogRemover remove_log;
        ASSERT_NO_FATAL_FAILURE(lower_soft_limit(kSoftLimit));
        loomUniqueId id;
        ASSERT_NO_FATAL_FAILURE(harness::share_id(c, &id));
        ASSERT_NO_FATAL_FAILURE(init_with(c, id));
        sockaddr_storage port;
        ASSERT_TRUE(transport_addr(c, &port)) << harness::read_file(harness::own_log());
        Strangers s;
        ASSERT_NO_FATAL_FAILURE(s.start(port, kSocketStrangers));
        ASSERT_EQ(s.wait_connected(90000), kSocketStrangers);
        harness::meet(c, c.nranks);  // every rank's port is flooded before the first all-reduce
        for (size_t count : {1000ul, 1ul, 300000ul, 77ul, 1ul << 20})
          ASSERT_NO_FATAL_FAILURE(check_allreduce(c.comm, c.rank, c.nranks, count));
        // The last strangers end at their hello deadline (10 s).
        EXPECT_EQ(s.finish(25000), kSocketStrangers) << "strangers rank " << c.rank << " left open";
        ASSERT_NO_FATAL_FAILURE(check_allreduce(c.comm, c.rank, c.nranks, 4096));
        std::string log = harness::read_file(harness::own_log());
        EXPECT_LE(warn_lines(log, c.rank), kWarnLinesMax) << log.substr(0, 4000);
      },
      o);
}

// ---- Unique ids ---------------------------------------------------------------------------

constexpr int kIds = 1000;
constexpr int kIdFdsMax = 4;  // the shared listener, and room for the library's own

TEST(UniqueIds, ThousandIdsShareOneListener) {
  harness::Opts o;
  o.timeout_s = 120;
  o.init = harness::Init::None;
  harness::run(
      3, Mode::Proc,
      [](Ctx& c) {
        loomUniqueId id;
        if (c.rank == 0) {
          int before = fd_count();
          std::vector<loomUniqueId> ids(kIds);
          for (auto& i : ids) ASSERT_LOOM_OK(loomGetUniqueId(&i));
          int after = fd_count();
          printf("    %d ids: %d descriptors open before, %d after\n", kIds, before, after);
          EXPECT_LE(after - before, kIdFdsMax)
              << kIds << " ids left " << after - before << " descriptors open";
          id = ids[kIds / 2 + 37];
          ASSERT_NO_FATAL_FAILURE(publish_id(c, id));
        } else {
          ASSERT_NO_FATAL_FAILURE(harness::share_id(c, &id));
        }
        ASSERT_NO_FATAL_FAILURE(init_with(c, id));
        ASSERT_NO_FATAL_FAILURE(check_allreduce(c.comm, c.rank, c.nranks, 1000));
      },
      o);
}

// Thread ranks of one process: loomCommInitAll, then a split into three
// colours whose leaders rendezvous at once on the one listener, all while
// 1,100 strangers wait on it and the process may have 1,024 descriptors.
void thread_ranks_body() {
  const int n = 6, colours = 3;
  ASSERT_NO_FATAL_FAILURE(lower_soft_limit(kSoftLimit));
  int before = fd_count();
  std::vector<loomUniqueId> ids(kIds);
  for (auto& i : ids) ASSERT_LOOM_OK(loomGetUniqueId(&i));
  printf("    %d ids: %d descriptors open before, %d after\n", kIds, before, fd_count());
  EXPECT_LE(fd_count() - before, kIdFdsMax) << kIds << " ids";
  Strangers s;
  ASSERT_NO_FATAL_FAILURE(s.start(id_addr(ids[0]), kBootStrangers));
  ASSERT_EQ(s.wait_connected(90000), kBootStrangers);

  std::vector<loomComm_t> comms(n, nullptr), subs(n, nullptr);
  ASSERT_LOOM_OK(loomCommInitAll(comms.data(), n, nullptr));
  std::vector<std::thread> th;
  std::vector<std::string> errs(n);
  for (int r = 0; r < n; r++)
    th.emplace_back([&, r] {
      check_allreduce(comms[r], r, n, 1000);
      loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
      cfg.timeoutMs = 60000;
      loomResult_t res = loomCommSplit(comms[r], r % colours, r, &subs[r], &cfg);
      if (res != loomSuccess) {
        errs[r] = std::string("split: ") + loomGetLastError(nullptr);
        return;
      }
      check_allreduce(subs[r], r / colours, n / colours, 5000);
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < n; r++) EXPECT_EQ(errs[r], "") << "rank " << r;
  for (auto c : subs)
    if (c) EXPECT_LOOM_OK(loomCommDestroy(c));
  for (auto c : comms)
    if (c) EXPECT_LOOM_OK(loomCommDestroy(c));
  EXPECT_EQ(s.finish(15000), kBootStrangers) << "strangers left open";
  printf("    after the communicators are gone: %d descriptors open\n", fd_count());
  EXPECT_LE(fd_count() - before, kIdFdsMax + 2) << "after the communicators are gone";
}

TEST(UniqueIds, ThreadRanksShareTheListener) {
  harness::Opts o;
  o.timeout_s = 180;
  o.init = harness::Init::None;
  // In a process of its own: the limit and the descriptor count are its own.
  harness::run(
      1, Mode::Proc, [](Ctx&) { thread_ranks_body(); }, o);
}

}  // namespace
