// test_socket.cc - the socket transport (src/transport/socket), forced on
// ranks of this host with LOOM_TRANSPORTS=socket.
//
// SocketColl: every collective, each algorithm family (LOOM_ALGO, the two
// settings kGroupAlgosA/B between them force every family), and sends and
// receives in a group, on 2, 3 and 4 process and thread ranks, with 1 stream
// per connection and with 4 streams and chunks small enough that one slice
// is cut over all of them; counts 0, 1, 7, 1000 and 2^20+3, rotating
// datatypes, ops, roots and placements, checked by the collective engine
// (test_collectives.h). SocketP2P: large and odd sends and receives, to
// self too. SocketAddr: the interface choice (LOOM_SOCKET_IFNAME) and IPv6.
// SocketChoice: shm (local for thread ranks) stays the choice within a host
// unless sockets are forced, read from the INFO log. SocketStranger: junk,
// wrong secrets, unknown ranks, silent and duplicate connections to a rank's
// listening port are refused (one WARN each) and the communicator keeps
// working. FaultSocket*: a rank killed mid-collective, an abort and a
// timeout, over sockets (RUN_SERIAL with the other Fault suites).
//
// Thread ranks: LOOM_* variables are read once per process, so a thread-rank
// case runs its threads inside one child process started with the variables
// set (run_ranks).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <ostream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_collectives.h"

namespace {

using colltest::Call;
using colltest::Coll;
using colltest::make;
using colltest::Place;
using colltest::Runner;
using harness::Ctx;
using harness::Mode;
using Clock = std::chrono::steady_clock;
using Env = std::vector<std::pair<std::string, std::string>>;

constexpr int kCommTimeoutMs = 60000;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs body on n ranks with env set. Process ranks: the harness. Thread
// ranks: n threads, each with its own communicator, inside one child process
// that has env (the library reads its variables once per process).
void run_ranks(int n, Mode mode, const Env& env, const std::function<void(Ctx&)>& body,
               harness::Opts o = harness::Opts()) {
  o.env.insert(o.env.end(), env.begin(), env.end());
  if (o.comm_timeout_ms == harness::Opts().comm_timeout_ms) o.comm_timeout_ms = kCommTimeoutMs;
  if (mode == Mode::Proc) {
    harness::run(n, Mode::Proc, body, o);
    return;
  }
  const int timeout_ms = o.comm_timeout_ms;
  o.init = harness::Init::None;
  harness::run(
      1, Mode::Proc,
      [&body, n, timeout_ms](Ctx&) {
        loomUniqueId id;
        ASSERT_LOOM_OK(loomGetUniqueId(&id));
        std::vector<std::thread> threads;
        for (int r = 0; r < n; r++)
          threads.emplace_back([&, r] {
            Ctx c;
            c.rank = r;
            c.nranks = n;
            c.mode = Mode::Thread;
            loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
            cfg.timeoutMs = timeout_ms;
            loomResult_t res = loomCommInitRankConfig(&c.comm, n, id, r, &cfg);
            EXPECT_EQ(res, loomSuccess) << "rank " << r << ": " << loomGetLastError(nullptr);
            if (res != loomSuccess) return;
            body(c);
            if (c.comm) EXPECT_LOOM_OK(loomCommDestroy(c.comm));
          });
        for (auto& t : threads) t.join();
      },
      o);
}

Env socket_env(int nstreams) {
  Env e = {{"LOOM_TRANSPORTS", "socket"},
           {"LOOM_DIRECT", "0"},
           {"LOOM_SOCKET_NSTREAMS", std::to_string(nstreams)}};
  // With several streams, chunks below the pipeline's slices (256 KiB), so
  // one message is cut over all the streams.
  if (nstreams > 1) e.push_back({"LOOM_SOCKET_CHUNK", "64K"});
  return e;
}

// ---- Every collective ---------------------------------------------------------------

constexpr size_t kCounts[] = {0, 1, 7, 1000, colltest::kBigCount};
const loomDataType_t kTypes[] = {loomFloat32, loomInt8, loomBfloat16, loomFloat64, loomUint32};

void coll_body(const Ctx& c, const std::string& label) {
  Runner r(c, label);
  const int n = c.nranks;
  int i = 0;
  for (int ci = 0; ci < colltest::kNumColls && r.ok(); ci++) {
    Coll coll = (Coll)ci;
    std::vector<Place> places = colltest::places_of(coll);
    int nops = colltest::is_reducing(coll) ? colltest::kNumOps : 1;
    for (size_t count : kCounts) {
      int ntypes = count == colltest::kBigCount ? 1 : 2;
      for (int k = 0; k < ntypes && r.ok(); k++, i++) {
        loomDataType_t t = kTypes[(size_t)(ci + i) % 5];
        r.run(make(coll, t, (ci + i) % nops, colltest::capped_count(coll, n, t, count), i % n,
                   places[(size_t)i % places.size()], i % colltest::kNumVariants));
      }
    }
  }
  if (r.ok()) colltest::group_body(c, label);  // every collective and sends/receives, one group
}

struct CollCase {
  Mode mode;
  int nranks;
  int nstreams;
  bool algos_a;
};

void PrintTo(const CollCase& cc, std::ostream* os) {
  *os << harness::mode_name(cc.mode) << cc.nranks << " nstreams " << cc.nstreams << " "
      << (cc.algos_a ? "algosA" : "algosB");
}

class SocketColl : public ::testing::TestWithParam<CollCase> {};

TEST_P(SocketColl, EveryCollectiveAndAlgorithm) {
  const CollCase cc = GetParam();
  Env env = socket_env(cc.nstreams);
  const char* algos = cc.algos_a ? colltest::kGroupAlgosA : colltest::kGroupAlgosB;
  env.push_back({"LOOM_ALGO", algos});
  harness::Opts o;
  o.timeout_s = 280;
  run_ranks(
      cc.nranks, cc.mode, env, [&](Ctx& c) { coll_body(c, std::string("socket, ") + algos); }, o);
}

std::vector<CollCase> coll_cases() {
  std::vector<CollCase> v;
  for (Mode m : {Mode::Proc, Mode::Thread})
    for (int n : {2, 3, 4})
      for (int ns : {1, 4})
        for (bool a : {true, false}) v.push_back({m, n, ns, a});
  return v;
}

std::string coll_case_name(const ::testing::TestParamInfo<CollCase>& info) {
  const CollCase& cc = info.param;
  return std::string(harness::mode_name(cc.mode)) + std::to_string(cc.nranks) + "_ns" +
         std::to_string(cc.nstreams) + (cc.algos_a ? "_algosA" : "_algosB");
}

INSTANTIATE_TEST_SUITE_P(Ranks, SocketColl, ::testing::ValuesIn(coll_cases()), coll_case_name);

// ---- Sends and receives ---------------------------------------------------------------

int32_t p2p_value(int src, int dst, size_t i) {
  return (int32_t)(src * 7919 + dst * 131 + (int)(i % 100003));
}

// To the next rank, the one before and to itself, sizes from 0 to 12 MiB,
// one group each; then many small messages, every tenth a larger one, in one
// group (they spread over the streams and must keep their order per peer);
// then a burst from rank 0 that reaches rank 1 before rank 1 posts its
// receives.
void p2p_body(const Ctx& c) {
  const int n = c.nranks, next = (c.rank + 1) % n, prev = (c.rank + n - 1) % n;
  for (size_t count : {(size_t)0, (size_t)1, (size_t)65537, (size_t)3 << 20}) {
    std::vector<int32_t> to_next(count), to_self(count), from_prev(count, -1), from_self(count, -1);
    for (size_t i = 0; i < count; i++) {
      to_next[i] = p2p_value(c.rank, next, i);
      to_self[i] = p2p_value(c.rank, c.rank, i) ^ 5;
    }
    ASSERT_LOOM_OK(loomGroupStart());
    EXPECT_LOOM_OK(loomSend(to_next.data(), count, loomInt32, next, c.comm, nullptr));
    EXPECT_LOOM_OK(loomRecv(from_prev.data(), count, loomInt32, prev, c.comm, nullptr));
    EXPECT_LOOM_OK(loomSend(to_self.data(), count, loomInt32, c.rank, c.comm, nullptr));
    EXPECT_LOOM_OK(loomRecv(from_self.data(), count, loomInt32, c.rank, c.comm, nullptr));
    ASSERT_LOOM_OK(loomGroupEnd());
    for (size_t i = 0; i < count; i++) {
      ASSERT_EQ(from_prev[i], p2p_value(prev, c.rank, i)) << "count " << count << ", element " << i;
      ASSERT_EQ(from_self[i], p2p_value(c.rank, c.rank, i) ^ 5)
          << "count " << count << ", element " << i;
    }
  }
  const int kMsgs = 200;
  std::vector<std::vector<int32_t>> out(kMsgs), in(kMsgs);
  ASSERT_LOOM_OK(loomGroupStart());
  for (int m = 0; m < kMsgs; m++) {
    out[m].assign(m % 10 == 9 ? (size_t)3000 + (size_t)m : (size_t)(m % 7) * 3 + 1,
                  c.rank * 1000 + m);
    in[m].assign(out[m].size(), -1);
    EXPECT_LOOM_OK(loomSend(out[m].data(), out[m].size(), loomInt32, next, c.comm, nullptr));
    EXPECT_LOOM_OK(loomRecv(in[m].data(), in[m].size(), loomInt32, prev, c.comm, nullptr));
  }
  ASSERT_LOOM_OK(loomGroupEnd());
  for (int m = 0; m < kMsgs; m++)
    for (int32_t v : in[m]) ASSERT_EQ(v, prev * 1000 + m) << "message " << m;
  if (c.rank > 1) return;
  // A burst that is in rank 1's sockets before it posts anything: one read takes several
  // frames (and parts of frames around the receive buffer's 16 KiB), the first group's
  // receives complete from them, and the frames read ahead for the second group wait in the
  // buffer until it is posted.
  const int kBurst = 64;
  std::vector<std::vector<int32_t>> burst(kBurst);
  for (int m = 0; m < kBurst; m++) {
    size_t count = m % 9 == 4 ? (size_t)4090 + (size_t)m : (size_t)(m * 37 % 101) + 1;
    burst[m].resize(count);
    for (size_t i = 0; i < count; i++) burst[m][i] = c.rank == 0 ? p2p_value(m, 1, i) : -1;
  }
  if (c.rank == 0) {
    ASSERT_LOOM_OK(loomGroupStart());
    for (int m = 0; m < kBurst; m++)
      EXPECT_LOOM_OK(loomSend(burst[m].data(), burst[m].size(), loomInt32, 1, c.comm, nullptr));
    ASSERT_LOOM_OK(loomGroupEnd());
    return;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int half : {0, 1}) {
    ASSERT_LOOM_OK(loomGroupStart());
    for (int m = half * kBurst / 2; m < (half + 1) * kBurst / 2; m++)
      EXPECT_LOOM_OK(loomRecv(burst[m].data(), burst[m].size(), loomInt32, 0, c.comm, nullptr));
    ASSERT_LOOM_OK(loomGroupEnd());
  }
  for (int m = 0; m < kBurst; m++)
    for (size_t i = 0; i < burst[m].size(); i++)
      ASSERT_EQ(burst[m][i], p2p_value(m, 1, i)) << "burst message " << m << ", element " << i;
}

struct P2PCase {
  Mode mode;
  int nranks, nstreams;
};

void PrintTo(const P2PCase& pc, std::ostream* os) {
  *os << harness::mode_name(pc.mode) << pc.nranks << " nstreams " << pc.nstreams;
}

class SocketP2P : public ::testing::TestWithParam<P2PCase> {};

TEST_P(SocketP2P, LargeOddAndToSelf) {
  const P2PCase pc = GetParam();
  run_ranks(pc.nranks, pc.mode, socket_env(pc.nstreams), p2p_body);
}

std::vector<P2PCase> p2p_cases() {
  std::vector<P2PCase> v;
  for (Mode m : {Mode::Proc, Mode::Thread})
    for (int n : {2, 3})
      for (int ns : {1, 4}) v.push_back({m, n, ns});
  return v;
}

std::string p2p_name(const ::testing::TestParamInfo<P2PCase>& info) {
  const P2PCase& pc = info.param;
  return std::string(harness::mode_name(pc.mode)) + std::to_string(pc.nranks) + "_ns" +
         std::to_string(pc.nstreams);
}

INSTANTIATE_TEST_SUITE_P(Ranks, SocketP2P, ::testing::ValuesIn(p2p_cases()), p2p_name);

// Every rank with its own stream count and chunk size (set before the
// library reads its variables): a receiver follows what its sender says.
TEST(SocketMixed, StreamsAndChunksDifferPerRank) {
  harness::Opts o;
  o.init = harness::Init::None;
  o.env = {{"LOOM_TRANSPORTS", "socket"}, {"LOOM_DIRECT", "0"}};
  harness::run(
      3, Mode::Proc,
      [](Ctx& c) {
        setenv("LOOM_SOCKET_NSTREAMS", std::to_string(1 + 2 * c.rank).c_str(), 1);
        setenv("LOOM_SOCKET_CHUNK", std::to_string(4096 << (3 * c.rank)).c_str(), 1);
        loomUniqueId id;
        harness::share_id(c, &id);
        if (::testing::Test::HasFatalFailure()) return;
        loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
        cfg.timeoutMs = kCommTimeoutMs;
        ASSERT_LOOM_OK(loomCommInitRankConfig(&c.comm, c.nranks, id, c.rank, &cfg));
        Runner r(c, "socket, mixed streams");
        for (int ci = 0; ci < colltest::kNumColls; ci++)
          r.run(make((Coll)ci, loomFloat64, loomSum,
                     colltest::capped_count((Coll)ci, c.nranks, loomFloat64, 300001), 1, Place::Out,
                     0));
        p2p_body(c);
      },
      o);
}

// ---- Logs -------------------------------------------------------------------------------

// Removes this process's log at scope exit.
struct LogRemover {
  ~LogRemover() { unlink(harness::own_log().c_str()); }
};

Env log_env(const std::string& prefix) {
  return harness::log_env(prefix, "INIT,NET");
}

void small_allreduce(const Ctx& c) {
  std::vector<float> v(1000, (float)(c.rank + 1));
  ASSERT_LOOM_OK(
      loomAllReduce(v.data(), v.data(), v.size(), loomFloat32, loomSum, c.comm, nullptr));
  for (float x : v) ASSERT_EQ(x, (float)(c.nranks * (c.nranks + 1) / 2));
}

// ---- Which transport ---------------------------------------------------------------

struct ChoiceCase {
  Mode mode;
  std::string transports;  // LOOM_TRANSPORTS ("" unset)
  std::string want;        // the transport every connection must use
};

void PrintTo(const ChoiceCase& cc, std::ostream* os) {
  *os << harness::mode_name(cc.mode) << " LOOM_TRANSPORTS='" << cc.transports << "' wants "
      << cc.want;
}

class SocketChoice : public ::testing::TestWithParam<ChoiceCase> {};

// The INFO log says which transport each connection took ("over X"), and
// whether the socket transport opened a listener at all.
TEST_P(SocketChoice, OneHostUsesSocketsOnlyWhenForced) {
  const ChoiceCase cc = GetParam();
  const std::string prefix = "/tmp/loomtest-choice-" + harness::unique_tag() + "-";
  Env env = log_env(prefix);
  env.push_back({"LOOM_DIRECT", "0"});
  if (!cc.transports.empty()) env.push_back({"LOOM_TRANSPORTS", cc.transports});
  std::atomic<int> done{0};
  run_ranks(3, cc.mode, env, [&](Ctx& c) {
    small_allreduce(c);
    // Thread ranks share one log: the last one to finish reads it.
    if (c.mode == Mode::Thread && ++done < c.nranks) return;
    std::string log = harness::read_file(harness::own_log());
    unlink(harness::own_log().c_str());
    std::regex over("over (\\w+)");
    int count = 0;
    for (auto it = std::sregex_iterator(log.begin(), log.end(), over); it != std::sregex_iterator();
         ++it, count++)
      EXPECT_EQ((*it)[1].str(), cc.want) << "a connection went over " << (*it)[1].str();
    EXPECT_GT(count, 0) << "no connection in the log:\n" << log;
    bool listens = log.find("socket transport listening") != std::string::npos;
    EXPECT_EQ(listens, cc.want == "socket") << "the socket transport's listener, in:\n" << log;
  });
}

INSTANTIATE_TEST_SUITE_P(Modes, SocketChoice,
                         ::testing::Values(ChoiceCase{Mode::Proc, "", "shm"},
                                           ChoiceCase{Mode::Proc, "socket", "socket"},
                                           ChoiceCase{Mode::Proc, "socket,shm", "shm"},
                                           ChoiceCase{Mode::Thread, "", "local"},
                                           ChoiceCase{Mode::Thread, "shm,socket", "shm"},
                                           ChoiceCase{Mode::Thread, "socket", "socket"}),
                         [](const ::testing::TestParamInfo<ChoiceCase>& info) {
                           std::string t =
                               info.param.transports.empty() ? "default" : info.param.transports;
                           for (char& ch : t)
                             if (ch == ',') ch = '_';
                           return std::string(harness::mode_name(info.param.mode)) + "_" + t;
                         });

// ---- Addresses ----------------------------------------------------------------------

struct AddrCase {
  std::string name;
  Env env;
  std::string listen_re;  // what the listening address must look like
};

void PrintTo(const AddrCase& ac, std::ostream* os) {
  *os << ac.name;
}

class SocketAddr : public ::testing::TestWithParam<AddrCase> {};

// The rendezvous over IPv6 makes the data go over IPv6 (the route to rank 0);
// LOOM_SOCKET_IFNAME picks the interface.
TEST_P(SocketAddr, ListensWhereItShould) {
  const AddrCase ac = GetParam();
  const std::string prefix = "/tmp/loomtest-addr-" + harness::unique_tag() + "-";
  Env env = log_env(prefix);
  for (auto& kv : socket_env(2)) env.push_back(kv);
  for (auto& kv : ac.env)
    env.push_back({kv.first, kv.second == "PORT6"
                                 ? "[::1]:" + std::to_string(harness::free_port(AF_INET6))
                                 : kv.second});
  harness::Opts o;
  o.init = harness::Init::FromEnv;
  run_ranks(
      3, Mode::Proc, env,
      [&](Ctx& c) {
        LogRemover remove_log;
        small_allreduce(c);
        std::string log = harness::read_file(harness::own_log());
        std::smatch m;
        ASSERT_TRUE(std::regex_search(log, m, std::regex("socket transport listening on (\\S+)")))
            << log;
        EXPECT_TRUE(std::regex_match(m[1].str(), std::regex(ac.listen_re)))
            << "listening on " << m[1].str();
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SocketAddr,
    ::testing::Values(
        AddrCase{"route_v4", {}, "127\\.0\\.0\\.1:\\d+"},
        AddrCase{"route_v6", {{"LOOM_ROOT", "PORT6"}}, "\\[::1\\]:\\d+"},
        AddrCase{"ifname_lo", {{"LOOM_SOCKET_IFNAME", "=lo"}}, "(127\\.0\\.0\\.1|\\[::1\\]):\\d+"},
        AddrCase{"ifname_not_lo", {{"LOOM_SOCKET_IFNAME", "^lo"}}, "(?!127\\.).*:\\d+"}),
    [](const ::testing::TestParamInfo<AddrCase>& info) { return info.param.name; });

// ---- Strangers --------------------------------------------------------------------

// The wire's hello as socket.h defines it (a stranger that knows it).
struct Hello {
  uint32_t magic = 0x4c4d534bu;
  uint16_t version = 2;
  uint16_t bytes = 40;
  uint64_t secret = 0;
  uint64_t comm_hash = 0;
  int32_t src = 0;
  int32_t dst = 0;
  uint16_t lane = 0;
  uint16_t stream = 0;
  uint16_t nstreams = 2;
  uint16_t pad = 0;
};
static_assert(sizeof(Hello) == 40, "the hello is 40 bytes");

int dial(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (sockaddr*)&a, sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int dial_send(int port, const void* data, size_t len) {
  int fd = dial(port);
  if (fd >= 0 && len) {
    EXPECT_EQ(send(fd, data, len, MSG_NOSIGNAL), (ssize_t)len);
  }
  return fd;
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

// Rank 1 attacks its own listening port between collectives: garbage, a
// wrong secret, another communicator, an unknown rank, a hello for another
// rank, a higher rank opening a link (the lower rank of a pair opens it), a
// second copy of a stream already up, a partial hello and a connection that
// says nothing. Each is refused with one WARN (the last two when they
// close); the communicator never notices.
void stranger_body(const Ctx& c) {
  const int n = c.nranks;
  small_allreduce(c);  // the ring's connections are up now
  std::vector<int> keep;
  if (c.rank == 1) {
    std::string log = harness::read_file(harness::own_log());
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        log, m, std::regex("rank 1: socket transport listening on 127\\.0\\.0\\.1:(\\d+)")))
        << log;
    int port = std::stoi(m[1].str());
    ASSERT_TRUE(
        std::regex_search(log, m, std::regex("rank 1 of \\d+ ready \\(comm ([0-9a-f]{16})")))
        << log;
    uint64_t hash = std::stoull(m[1].str(), nullptr, 16);
    uint64_t secret = std::stoull(getenv("LOOM_SECRET"), nullptr, 16);
    ASSERT_TRUE(std::regex_search(
        log, m, std::regex("rank 1: receive connection from peer (\\d+) over socket")))
        << log;
    Hello good;
    good.secret = secret;
    good.comm_hash = hash;
    good.src = std::stoi(m[1].str());  // rank 0: its link's streams into rank 1 are up
    good.dst = 1;
    EXPECT_EQ(good.src, 0);
    std::vector<int> fds;
    std::vector<unsigned char> junk(40);
    for (size_t i = 0; i < junk.size(); i++) junk[i] = (unsigned char)(i * 37 + 11);
    fds.push_back(dial_send(port, junk.data(), junk.size()));
    Hello h = good;
    h.secret = secret ^ 0x5a5a;
    fds.push_back(dial_send(port, &h, sizeof(h)));
    h = good;
    h.comm_hash = hash + 1;
    fds.push_back(dial_send(port, &h, sizeof(h)));
    h = good;
    h.src = 99;
    fds.push_back(dial_send(port, &h, sizeof(h)));
    h = good;
    h.dst = 0;
    fds.push_back(dial_send(port, &h, sizeof(h)));
    h = good;
    h.src = 2;
    fds.push_back(dial_send(port, &h, sizeof(h)));
    fds.push_back(dial_send(port, &good, sizeof(good)));  // its stream 0 is up already
    for (int fd : fds) EXPECT_GE(fd, 0);
    keep.push_back(dial_send(port, &good, 10));  // a partial hello, left open
    keep.push_back(dial(port));                  // silence, left open
    const char* want[] = {"not a Loom socket hello",
                          "wrong secret",
                          "another communicator",
                          "unknown rank 99",
                          "meant to reach rank 0",
                          "the lower rank of a pair opens it",
                          "opened collective stream 0 twice"};
    auto t0 = Clock::now();
    bool all = false;
    while (!all && since(t0) < 10) {
      log = harness::read_file(harness::own_log());
      all = true;
      for (const char* w : want) all &= log.find(w) != std::string::npos;
      if (!all) usleep(10000);
    }
    for (const char* w : want) EXPECT_EQ(count_of(log, w), 1) << "refusals saying \"" << w << "\"";
    for (int fd : fds) close(fd);
  }
  // The communicator works while the strangers hold their connections.
  Runner r(c, "socket, strangers");
  for (int ci = 0; ci < colltest::kNumColls; ci++)
    r.run(make((Coll)ci, loomFloat32, loomSum, 70001, n - 1, Place::Out, 0));
  colltest::group_body(c, "socket, strangers");
  if (c.rank == 1) {
    for (int fd : keep) close(fd);
    std::string log;
    auto t0 = Clock::now();
    while (since(t0) < 10) {
      log = harness::read_file(harness::own_log());
      if (count_of(log, "complete hello") >= 2) break;
      usleep(10000);
    }
    // "closed before a complete hello", or on a slow day "no complete hello in time".
    EXPECT_EQ(count_of(log, "complete hello"), 2) << log;
    EXPECT_EQ(count_of(log, "refused a connection"), 9) << log;
  }
  small_allreduce(c);
}

TEST(SocketStranger, RefusedAndHarmless) {
  const std::string prefix = "/tmp/loomtest-stranger-" + harness::unique_tag() + "-";
  Env env = log_env(prefix);
  for (auto& kv : socket_env(2)) env.push_back(kv);
  env.push_back({"LOOM_ALGO", "ring"});
  harness::Opts o;
  o.init = harness::Init::FromEnv;  // the test knows the secret (LOOM_SECRET)
  run_ranks(
      3, Mode::Proc, env,
      [](Ctx& c) {
        LogRemover remove_log;
        stranger_body(c);
      },
      o);
}

// ---- Failures ------------------------------------------------------------------------

using harness::names_rank;

// Thread ranks of run_ranks (no id file): an atomic count. Process ranks:
// harness::meet.
void meet(const Ctx& c, int expected, std::atomic<int>* threads) {
  if (c.mode != Mode::Thread) return harness::meet(c, expected);
  auto end = Clock::now() + std::chrono::seconds(20);
  ++*threads;
  while (threads->load() < expected && Clock::now() < end) usleep(1000);
}

struct Death {
  int nranks, dead, nstreams;
};

void PrintTo(const Death& d, std::ostream* os) {
  *os << d.nranks << " ranks, rank " << d.dead << " dies, nstreams " << d.nstreams;
}

class FaultSocketKill : public ::testing::TestWithParam<Death> {};

// Halfway through a large all-reduce a rank dies (SIGKILL): the others get
// loomRemoteError naming it, through the bootstrap or their sockets,
// whichever sees it first. Timed by nothing: with kNeverMs only noticing the
// death can end their wait before the harness gives up on the run.
TEST_P(FaultSocketKill, SurvivorsGetRemoteErrorNamingIt) {
  const Death d = GetParam();
  harness::Opts o;
  o.timeout_s = 90;
  o.comm_timeout_ms = harness::kNeverMs;
  o.expect_killed = {d.dead};
  Env env = socket_env(d.nstreams);
  env.push_back({"LOOM_FAULT", "allreduce:" + std::to_string(d.dead)});
  run_ranks(
      d.nranks, Mode::Proc, env,
      [d](Ctx& c) {
        std::vector<float> v(8u << 20, (float)(c.rank + 1));
        loomResult_t r =
            loomAllReduce(v.data(), v.data(), v.size(), loomFloat32, loomSum, c.comm, nullptr);
        ASSERT_NE(c.rank, d.dead) << "survived LOOM_FAULT";
        EXPECT_EQ(r, loomRemoteError) << loomGetErrorString(r) << ": " << loomGetLastError(nullptr);
        EXPECT_TRUE(names_rank(loomGetLastError(c.comm), d.dead));
        EXPECT_TRUE(harness::noticed_at_once(loomGetLastError(c.comm)));
        std::vector<float> w(16, 1.0f);  // the communicator stays broken
        EXPECT_NE(
            loomAllReduce(w.data(), w.data(), w.size(), loomFloat32, loomSum, c.comm, nullptr),
            loomSuccess);
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(Ranks, FaultSocketKill,
                         ::testing::Values(Death{2, 1, 2}, Death{3, 0, 1}, Death{3, 2, 4},
                                           Death{4, 1, 2}),
                         [](const ::testing::TestParamInfo<Death>& info) {
                           return std::to_string(info.param.nranks) + "ranks_dead" +
                                  std::to_string(info.param.dead) + "_ns" +
                                  std::to_string(info.param.nstreams);
                         });

// A mode, printable.
struct ModeCase {
  Mode mode;
};
void PrintTo(const ModeCase& m, std::ostream* os) {
  *os << harness::mode_name(m.mode) << "3";
}
std::string mode_case_name(const ::testing::TestParamInfo<ModeCase>& info) {
  return std::string(harness::mode_name(info.param.mode)) + "3";
}
const ModeCase kModes[] = {{Mode::Proc}, {Mode::Thread}};

class FaultSocketAbort : public ::testing::TestWithParam<ModeCase> {};

// Rank 1 aborts while the others are blocked in an all-reduce with it. With
// kNeverMs, an abort that blocked on them, or a wait the abort did not end,
// would hang the run.
TEST_P(FaultSocketAbort, PeersGetRemoteErrorNamingIt) {
  std::atomic<int> met{0};
  harness::Opts o;
  o.timeout_s = 90;
  o.comm_timeout_ms = harness::kNeverMs;
  run_ranks(
      3, GetParam().mode, socket_env(2),
      [&met](Ctx& c) {
        if (c.rank == 1) {
          usleep(300 * 1000);
          EXPECT_LOOM_OK(loomCommAbort(c.comm));
          c.comm = nullptr;
          meet(c, c.nranks, &met);
          return;
        }
        std::vector<float> v(1 << 20, 1.0f);
        loomResult_t r =
            loomAllReduce(v.data(), v.data(), v.size(), loomFloat32, loomSum, c.comm, nullptr);
        EXPECT_EQ(r, loomRemoteError) << loomGetErrorString(r) << ": " << loomGetLastError(nullptr);
        EXPECT_TRUE(names_rank(loomGetLastError(c.comm), 1));
        EXPECT_TRUE(harness::noticed_at_once(loomGetLastError(c.comm)));
        meet(c, c.nranks, &met);
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(Modes, FaultSocketAbort, ::testing::ValuesIn(kModes), mode_case_name);

class FaultSocketTimeout : public ::testing::TestWithParam<ModeCase> {};

// Rank 1 never calls: the others time out (loomTimeout, not an error from
// each other's sockets), not before the deadline (a lower bound, which a slow
// machine cannot break), and keep their communicators until all have.
TEST_P(FaultSocketTimeout, ARankThatNeverCalls) {
  std::atomic<int> met{0};
  harness::Opts o;
  o.comm_timeout_ms = 1500;
  run_ranks(
      3, GetParam().mode, socket_env(2),
      [&met](Ctx& c) {
        if (c.rank != 1) {
          std::vector<float> v(1 << 16, 1.0f);
          auto t0 = Clock::now();
          loomResult_t r =
              loomAllReduce(v.data(), v.data(), v.size(), loomFloat32, loomSum, c.comm, nullptr);
          EXPECT_EQ(r, loomTimeout) << loomGetErrorString(r) << ": " << loomGetLastError(nullptr);
          EXPECT_GE(since(t0), 1.5);
        }
        meet(c, c.nranks, &met);
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(Modes, FaultSocketTimeout, ::testing::ValuesIn(kModes), mode_case_name);

// A receive that expects other than what was sent fails at once, naming the
// sender and what it sent, instead of corrupting data or waiting out its
// timeout (which would end in loomTimeout, without the sizes).
struct MismatchCase {
  Mode mode;
  bool more;
};
void PrintTo(const MismatchCase& mc, std::ostream* os) {
  *os << harness::mode_name(mc.mode) << (mc.more ? " more" : " fewer");
}

class SocketMismatch : public ::testing::TestWithParam<MismatchCase> {};

TEST_P(SocketMismatch, ReceiverFailsNamingThePeer) {
  const MismatchCase mc = GetParam();
  std::atomic<int> met{0};
  harness::Opts o;
  o.comm_timeout_ms = 5000;
  run_ranks(
      2, mc.mode, socket_env(4),
      [&met, more = mc.more](Ctx& c) {
        const size_t expect = 100000, sent = more ? 200000 : 50000;
        std::vector<int32_t> buf(std::max(expect, sent), 7);
        if (c.rank == 1) {
          // What the sender sees is not specified: its data may sit in the socket
          // buffers, or wait there for a receiver that no longer reads.
          loomResult_t r = loomSend(buf.data(), sent, loomInt32, 0, c.comm, nullptr);
          EXPECT_NE(r, loomInProgress);
        } else {
          loomResult_t r = loomRecv(buf.data(), expect, loomInt32, 1, c.comm, nullptr);
          EXPECT_EQ(r, loomRemoteError)
              << loomGetErrorString(r) << ": " << loomGetLastError(nullptr);
          std::string why = loomGetLastError(c.comm);
          EXPECT_TRUE(names_rank(why, 1));
          EXPECT_NE(why.find(std::to_string(sent * 4) + " bytes"), std::string::npos) << why;
        }
        meet(c, c.nranks, &met);
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(Cases, SocketMismatch,
                         ::testing::Values(MismatchCase{Mode::Proc, true},
                                           MismatchCase{Mode::Proc, false},
                                           MismatchCase{Mode::Thread, true},
                                           MismatchCase{Mode::Thread, false}),
                         [](const ::testing::TestParamInfo<MismatchCase>& info) {
                           return std::string(harness::mode_name(info.param.mode)) +
                                  (info.param.more ? "_more" : "_fewer");
                         });

}  // namespace
