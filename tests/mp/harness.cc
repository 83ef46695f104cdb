// harness.cc - see harness.h.
#include "harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

namespace harness {
namespace {

std::string current_test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "." + info->name();
}

loomConfig_t make_config(const Opts& opts) {
  loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
  cfg.timeoutMs = opts.comm_timeout_ms;
  cfg.checkArgs = opts.check_args;
  cfg.deterministic = opts.deterministic;
  return cfg;
}

bool read_id_file(const std::string& path, loomUniqueId* id, int timeout_ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    int fd = open(path.c_str(), O_RDONLY);
    if (fd >= 0) {
      ssize_t n = read(fd, id, sizeof(*id));
      close(fd);
      if (n == (ssize_t)sizeof(*id)) return true;
    }
    usleep(2000);
  }
  return false;
}

void write_id_file(const std::string& path, const loomUniqueId& id) {
  std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  ASSERT_GE(fd, 0) << "cannot write " << tmp;
  ASSERT_EQ(write(fd, &id, sizeof(id)), (ssize_t)sizeof(id));
  close(fd);
  ASSERT_EQ(rename(tmp.c_str(), path.c_str()), 0);
}

// Makes ctx.comm as opts asks.
void init_rank(Ctx& ctx, const Opts& opts) {
  loomConfig_t cfg = make_config(opts);
  if (opts.init == Init::None) return;
  if (opts.init == Init::FromEnv) {
    ASSERT_LOOM_OK(loomCommInitFromEnv(&ctx.comm, &cfg));
    return;
  }
  loomUniqueId id;
  share_id(ctx, &id);
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_LOOM_OK(loomCommInitRankConfig(&ctx.comm, ctx.nranks, id, ctx.rank, &cfg));
}

void finish_rank(Ctx& ctx) {
  if (ctx.comm) {
    EXPECT_LOOM_OK(loomCommDestroy(ctx.comm));
    ctx.comm = nullptr;
  }
}

// Inside a child: be rank r.
[[noreturn]] void child_main(int nranks, const std::function<void(Ctx&)>& body, const Opts& opts) {
  Ctx ctx;
  ctx.rank = atoi(getenv("LOOM_TEST_CHILD"));
  ctx.nranks = nranks;
  ctx.mode = Mode::Proc;
  const char* idf = getenv("LOOM_TEST_ID_FILE");
  ctx.id_file = idf ? idf : "";
  init_rank(ctx, opts);
  if (!::testing::Test::HasFatalFailure()) body(ctx);
  finish_rank(ctx);
  fflush(nullptr);
  _exit(::testing::Test::HasFailure() ? 1 : 0);
}

std::string random_hex() {
  unsigned long long v = 0;
  if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
    v = (unsigned long long)getpid() * 2654435761ull;
  char buf[32];
  snprintf(buf, sizeof(buf), "%016llx", v);
  return buf;
}

void run_procs(int nranks, const std::function<void(Ctx&)>& body, const Opts& opts) {
  static int call_index = 0;
  std::string filter = "--gtest_filter=" + current_test_name();
  std::string tag =
      std::to_string(getpid()) + "-" + std::to_string(call_index++) + "-" + random_hex();
  std::string id_file = "/tmp/loomtest-" + tag + ".id";
  std::string root = "127.0.0.1:" + std::to_string(free_port());
  std::string secret = random_hex();
  std::vector<pid_t> pids;
  fflush(nullptr);
  for (int r = 0; r < nranks; r++) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
      setenv("LOOM_TEST_CHILD", std::to_string(r).c_str(), 1);
      setenv("LOOM_TEST_ID_FILE", id_file.c_str(), 1);
      setenv("LOOM_RANK", std::to_string(r).c_str(), 1);
      setenv("LOOM_WORLD_SIZE", std::to_string(nranks).c_str(), 1);
      setenv("LOOM_ROOT", root.c_str(), 1);
      setenv("LOOM_SECRET", secret.c_str(), 1);
      for (const auto& kv : opts.env) setenv(kv.first.c_str(), kv.second.c_str(), 1);
      for (const auto& re : opts.rank_env)
        if (re.rank == r) setenv(re.name.c_str(), re.value.c_str(), 1);
      // The path this binary was started by, not /proc/self/exe: under
      // valgrind that names the tool, not the test.
      const char* self =
          strchr(program_invocation_name, '/') ? program_invocation_name : "/proc/self/exe";
      execl(self, "loom_mp_tests", filter.c_str(), "--gtest_brief=1", (char*)nullptr);
      _exit(127);
    }
    pids.push_back(pid);
  }
  std::vector<int> status(nranks, 0);
  std::vector<bool> done(nranks, false);
  int left = nranks;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(opts.timeout_s);
  while (left > 0 && std::chrono::steady_clock::now() < end) {
    int st;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p <= 0) {
      usleep(2000);
      continue;
    }
    for (int r = 0; r < nranks; r++)
      if (pids[r] == p && !done[r]) {
        done[r] = true;
        status[r] = st;
        left--;
      }
  }
  for (int r = 0; r < nranks; r++)
    if (!done[r]) {
      ADD_FAILURE() << "rank " << r << " still running after " << opts.timeout_s
                    << " s: killed (a hang)";
      kill(pids[r], SIGKILL);
      waitpid(pids[r], &status[r], 0);
    }
  unlink(id_file.c_str());
  for (int r = 0; r < nranks; r++) {
    if (!done[r]) continue;
    bool killed = WIFSIGNALED(status[r]) && WTERMSIG(status[r]) == SIGKILL;
    bool expect = false;
    for (int k : opts.expect_killed) expect |= k == r;
    if (expect) {
      EXPECT_TRUE(killed) << "rank " << r << " was expected to die by SIGKILL";
    } else if (WIFSIGNALED(status[r])) {
      ADD_FAILURE() << "rank " << r << " died by signal " << WTERMSIG(status[r]);
    } else {
      EXPECT_EQ(WEXITSTATUS(status[r]), 0) << "rank " << r << " failed (see its output above)";
    }
  }
}

void run_threads(int nranks, const std::function<void(Ctx&)>& body, const Opts& opts) {
  std::string id_file = "/tmp/loomtest-" + std::to_string(getpid()) + "-" + random_hex() + ".id";
  std::mutex m;
  std::condition_variable cv;
  int finished = 0;
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; r++) {
    threads.emplace_back([&, r] {
      Ctx ctx;
      ctx.rank = r;
      ctx.nranks = nranks;
      ctx.mode = Mode::Thread;
      ctx.id_file = id_file;
      Opts o = opts;
      if (o.init == Init::FromEnv) o.init = Init::UniqueId;
      init_rank(ctx, o);
      if (ctx.comm || o.init == Init::None) body(ctx);
      finish_rank(ctx);
      std::lock_guard<std::mutex> g(m);
      finished++;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> g(m);
    if (!cv.wait_for(g, std::chrono::seconds(opts.timeout_s), [&] { return finished == nranks; })) {
      fprintf(stderr, "harness: thread ranks still running after %d s: a hang; aborting\n",
              opts.timeout_s);
      fflush(nullptr);
      std::abort();
    }
  }
  for (auto& t : threads) t.join();
  unlink(id_file.c_str());
}

}  // namespace

void share_id(const Ctx& ctx, loomUniqueId* id) {
  if (ctx.rank == 0) {
    ASSERT_LOOM_OK(loomGetUniqueId(id));
    write_id_file(ctx.id_file, *id);
  } else {
    ASSERT_TRUE(read_id_file(ctx.id_file, id, 60000)) << "no unique id from rank 0";
  }
}

void run(int nranks, Mode mode, const std::function<void(Ctx&)>& body, const Opts& opts) {
  if (getenv("LOOM_TEST_CHILD")) child_main(nranks, body, opts);
  if (mode == Mode::Proc)
    run_procs(nranks, body, opts);
  else
    run_threads(nranks, body, opts);
}

std::vector<std::string> shm_entries() {
  std::vector<std::string> out;
  DIR* d = opendir("/dev/shm");
  if (!d) return out;
  while (dirent* e = readdir(d))
    if (strncmp(e->d_name, "loom-", 5) == 0) out.push_back(e->d_name);
  closedir(d);
  return out;
}

int free_port(int family) {
  int fd = socket(family, SOCK_STREAM, 0);
  sockaddr_storage ss{};
  socklen_t len;
  if (family == AF_INET6) {
    auto* a = (sockaddr_in6*)&ss;
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    len = sizeof(*a);
  } else {
    auto* a = (sockaddr_in*)&ss;
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof(*a);
  }
  bind(fd, (sockaddr*)&ss, len);
  getsockname(fd, (sockaddr*)&ss, &len);
  close(fd);
  return family == AF_INET6 ? ntohs(((sockaddr_in6*)&ss)->sin6_port)
                            : ntohs(((sockaddr_in*)&ss)->sin_port);
}

void meet(const Ctx& c, int expected, const std::string& tag) {
  const std::string path = c.id_file + ".meet" + tag;
  int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_APPEND, 0600);
  ASSERT_GE(fd, 0) << "cannot open " << path;
  ASSERT_EQ(write(fd, "x", 1), 1);
  close(fd);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < end) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return;  // removed: everyone was in
    if (st.st_size >= expected) {
      unlink(path.c_str());
      return;
    }
    usleep(1000);
  }
  ADD_FAILURE() << "rank " << c.rank << ": the other ranks never arrived";
}

::testing::AssertionResult names_rank(const std::string& text, int k) {
  for (const std::string word : {"peer ", "rank "}) {
    const std::string want = word + std::to_string(k);
    for (size_t at = text.find(want); at != std::string::npos; at = text.find(want, at + 1)) {
      size_t end = at + want.size();
      bool starts = at == 0 || !isalnum((unsigned char)text[at - 1]);
      bool ends = end == text.size() || !isdigit((unsigned char)text[end]);
      if (starts && ends) return ::testing::AssertionSuccess();
    }
  }
  return ::testing::AssertionFailure() << "the error text \"" << text << "\" does not name rank "
                                       << k << " (\"peer " << k << "\" or \"rank " << k << "\")";
}

::testing::AssertionResult noticed_at_once(const std::string& text) {
  for (const char* slow : {"timed out", "has sent nothing"})
    if (text.find(slow) != std::string::npos)
      return ::testing::AssertionFailure()
             << "the error text \"" << text << "\" says \"" << slow
             << "\": a deadline or the heartbeats noticed the failure, not the failure itself";
  return ::testing::AssertionSuccess();
}

std::string own_log() {
  const char* f = getenv("LOOM_DEBUG_FILE");
  std::string path = f ? f : "";
  size_t at = path.find("%p");
  if (at != std::string::npos) path.replace(at, 2, std::to_string(getpid()));
  return path;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string unique_tag() {
  static std::atomic<int> n{0};
  return std::to_string(getpid()) + "-" + std::to_string(n++) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count() % 1000000);
}

std::vector<std::pair<std::string, std::string>> log_env(const std::string& prefix,
                                                         const std::string& subsys) {
  return {{"LOOM_DEBUG", "INFO"},
          {"LOOM_DEBUG_SUBSYS", subsys},
          {"LOOM_DEBUG_FILE", prefix + "%p.log"}};
}

}  // namespace harness
