// The bootstrap: wire parsing (headers, hellos), the socket helpers (address
// parsing, interface lists, deadline-bound transfers), LOOM_FAULT parsing, and
// in-process rendezvous with threads as ranks: strangers on the port, missing
// and duplicate ranks, failure detection after init. Waits on other threads
// are hang guards with generous deadlines, never timing assertions.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "unit/boot_ranks.h"

namespace {

using namespace std::chrono_literals;
using namespace boot_test;

// ---- Wire checks ---------------------------------------------------------------

std::string HdrWhy(const boot_hdr& h, uint32_t max_len, loomResult_t* res) {
  char why[160] = "";
  *res = boot_hdr_check(&h, max_len, why, sizeof(why));
  return why;
}

TEST(BootWire, HeaderAcceptsValid) {
  loomResult_t res;
  HdrWhy(Hdr(BOOT_HELLO, sizeof(boot_hello)), sizeof(boot_hello), &res);
  EXPECT_EQ(res, loomSuccess);
  HdrWhy(Hdr(BOOT_BYE, 0), 0, &res);
  EXPECT_EQ(res, loomSuccess);
  HdrWhy(Hdr(BOOT_DATA, BOOT_MAX_PAYLOAD), BOOT_MAX_PAYLOAD, &res);
  EXPECT_EQ(res, loomSuccess);
}

TEST(BootWire, HeaderRejectsWrongMagic) {
  boot_hdr h = Hdr(BOOT_DATA, 8);
  h.magic = 0x12345678;
  loomResult_t res;
  std::string why = HdrWhy(h, 64, &res);
  EXPECT_EQ(res, loomRemoteError);
  EXPECT_NE(why.find("magic"), std::string::npos) << why;
}

TEST(BootWire, HeaderRejectsWrongVersion) {
  boot_hdr h = Hdr(BOOT_DATA, 8);
  h.version = BOOT_WIRE_VERSION + 1;
  loomResult_t res;
  std::string why = HdrWhy(h, 64, &res);
  EXPECT_EQ(res, loomRemoteError);
  EXPECT_NE(why.find("version"), std::string::npos) << why;
}

TEST(BootWire, HeaderRejectsUnknownTypes) {
  for (unsigned type : {0u, (unsigned)BOOT_TYPE_MAX, 77u, 0xffffu}) {
    loomResult_t res;
    std::string why = HdrWhy(Hdr((uint16_t)type, 0), 64, &res);
    EXPECT_EQ(res, loomRemoteError) << "type " << type;
    EXPECT_NE(why.find("type"), std::string::npos) << why;
  }
}

TEST(BootWire, HeaderRejectsLengthOverBound) {
  loomResult_t res;
  std::string why = HdrWhy(Hdr(BOOT_DATA, 65), 64, &res);
  EXPECT_EQ(res, loomRemoteError);
  EXPECT_NE(why.find("65"), std::string::npos) << why;
  // The global bound holds whatever the caller allows.
  HdrWhy(Hdr(BOOT_DATA, BOOT_MAX_PAYLOAD + 1), 0xffffffffu, &res);
  EXPECT_EQ(res, loomRemoteError);
  HdrWhy(Hdr(BOOT_DATA, 0xffffffffu), 0xffffffffu, &res);
  EXPECT_EQ(res, loomRemoteError);
}

boot_hello Hello(uint64_t secret, int nranks, int rank) {
  boot_hello h{};
  h.secret = secret;
  h.nranks = nranks;
  h.rank = rank;
  h.info.rank = rank;
  h.link.family = AF_INET;  // 127.0.0.1:1: where peers would dial it
  h.link.port = htons(1);
  h.link.addr[0] = 127;
  h.link.addr[3] = 1;
  return h;
}

loomResult_t HelloCheck(const boot_hello& h, size_t len, std::string* why_out = nullptr) {
  char why[160] = "";
  loomResult_t res = boot_hello_check(&h, len, 0xfeedULL, 4, why, sizeof(why));
  if (why_out) *why_out = why;
  return res;
}

TEST(BootWire, HelloAcceptsValid) {
  for (int r = 1; r < 4; r++)
    EXPECT_EQ(HelloCheck(Hello(0xfeed, 4, r), sizeof(boot_hello)), loomSuccess);
}

TEST(BootWire, HelloRejectsWrongSecret) {
  std::string why;
  EXPECT_EQ(HelloCheck(Hello(0xbeef, 4, 1), sizeof(boot_hello), &why), loomRemoteError);
  EXPECT_NE(why.find("wrong secret"), std::string::npos) << why;
}

TEST(BootWire, HelloRejectsNranksMismatch) {
  std::string why;
  EXPECT_EQ(HelloCheck(Hello(0xfeed, 5, 1), sizeof(boot_hello), &why), loomInvalidUsage);
  EXPECT_NE(why.find("nranks"), std::string::npos) << why;
}

TEST(BootWire, HelloRejectsRankOutOfRange) {
  // Rank 0 is the root itself; nobody else may claim it.
  for (int r : {-1, 0, 4, 1000}) {
    std::string why;
    EXPECT_EQ(HelloCheck(Hello(0xfeed, 4, r), sizeof(boot_hello), &why), loomInvalidUsage) << r;
    EXPECT_NE(why.find("out of range"), std::string::npos) << why;
  }
}

TEST(BootWire, HelloNeedsALinkAddressBeyondTwoRanks) {
  boot_hello h = Hello(0xfeed, 4, 2);
  h.link = boot_addr{};
  std::string why;
  EXPECT_EQ(HelloCheck(h, sizeof(h), &why), loomInvalidUsage);
  EXPECT_NE(why.find("no address for its links"), std::string::npos) << why;
  h = Hello(0xfeed, 4, 2);
  h.link.port = 0;
  EXPECT_EQ(HelloCheck(h, sizeof(h)), loomInvalidUsage);
  // Two ranks make no links: rank 1 needs no address.
  boot_hello two = Hello(0xfeed, 2, 1);
  two.link = boot_addr{};
  char buf[160];
  EXPECT_EQ(boot_hello_check(&two, sizeof(two), 0xfeed, 2, buf, sizeof(buf)), loomSuccess) << buf;
}

TEST(BootWire, HelloRejectsShortPayload) {
  std::string why;
  EXPECT_EQ(HelloCheck(Hello(0xfeed, 4, 1), sizeof(boot_hello) - 1, &why), loomRemoteError);
  EXPECT_NE(why.find("short"), std::string::npos) << why;
  EXPECT_EQ(HelloCheck(Hello(0xfeed, 4, 1), 0), loomRemoteError);
}

// ---- Addresses and interfaces --------------------------------------------------

std::string AddrText(const sock_addr& a) {
  char buf[SOCK_ADDR_STRLEN];
  return sock_addr_str(&a, buf, sizeof(buf));
}

TEST(BootSock, ParseAcceptsHostPort) {
  sock_addr a;
  ASSERT_EQ(sock_addr_parse("127.0.0.1:1234", &a), loomSuccess);
  EXPECT_EQ(a.sa.sa_family, AF_INET);
  EXPECT_EQ(AddrText(a), "127.0.0.1:1234");
  ASSERT_EQ(sock_addr_parse("[::1]:80", &a), loomSuccess);
  EXPECT_EQ(a.sa.sa_family, AF_INET6);
  EXPECT_EQ(AddrText(a), "[::1]:80");
  ASSERT_EQ(sock_addr_parse("localhost:99", &a), loomSuccess);
  EXPECT_TRUE(a.sa.sa_family == AF_INET || a.sa.sa_family == AF_INET6);
  std::string text = AddrText(a);
  EXPECT_EQ(text.substr(text.size() - 3), ":99") << text;
  ASSERT_EQ(sock_addr_parse("10.1.2.3:65535", &a), loomSuccess);
  EXPECT_EQ(AddrText(a), "10.1.2.3:65535");
}

TEST(BootSock, ParseRejectsBadText) {
  for (const char* bad : {"", "host", "127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536",
                          "127.0.0.1:99999", "127.0.0.1:12a", "127.0.0.1:-1", ":80", "[::1]80",
                          "[::1]", "::1:80", "[]:80", "[not-an-ip]:80"}) {
    sock_addr a;
    EXPECT_EQ(sock_addr_parse(bad, &a), loomInvalidArgument) << "'" << bad << "'";
  }
  sock_addr a;
  EXPECT_EQ(sock_addr_parse(nullptr, &a), loomInvalidArgument);
}

TEST(BootSock, IfnameMatchPrefixList) {
  EXPECT_TRUE(sock_ifname_match("eth,ib", "eth0"));
  EXPECT_TRUE(sock_ifname_match("eth,ib", "ib1"));
  EXPECT_TRUE(sock_ifname_match("eth", "eth"));
  EXPECT_FALSE(sock_ifname_match("eth,ib", "lo"));
  EXPECT_FALSE(sock_ifname_match("eth0", "eth"));
  EXPECT_FALSE(sock_ifname_match("eth,,ib", "lo")) << "an empty entry matches nothing";
}

TEST(BootSock, IfnameMatchExclusion) {
  EXPECT_TRUE(sock_ifname_match("^docker,lo", "eth0"));
  EXPECT_FALSE(sock_ifname_match("^docker,lo", "docker0"));
  EXPECT_FALSE(sock_ifname_match("^docker,lo", "lo"));
  EXPECT_TRUE(sock_ifname_match("^", "anything"));
}

TEST(BootSock, IfnameMatchExact) {
  EXPECT_TRUE(sock_ifname_match("=eth0", "eth0"));
  EXPECT_FALSE(sock_ifname_match("=eth0", "eth01"));
  EXPECT_FALSE(sock_ifname_match("=eth0", "eth"));
  EXPECT_TRUE(sock_ifname_match("=eth0,ib0", "ib0"));
  EXPECT_FALSE(sock_ifname_match("^=eth0", "eth0"));
  EXPECT_TRUE(sock_ifname_match("^=eth0", "eth01"));
}

TEST(BootSock, IfnameMatchEmptySelectsAll) {
  EXPECT_TRUE(sock_ifname_match("", "eth0"));
  EXPECT_TRUE(sock_ifname_match(nullptr, "lo"));
}

TEST(BootSock, InterfacePickFindsOne) {
  sock_addr a;
  char name[64] = "";
  ASSERT_EQ(sock_if_pick(&a, name, sizeof(name)), loomSuccess);
  EXPECT_TRUE(a.sa.sa_family == AF_INET || a.sa.sa_family == AF_INET6);
  EXPECT_STRNE(name, "");
}

// A pair of connected non-blocking sockets, closed on scope exit.
struct SockPair {
  int fd[2] = {-1, -1};
  SockPair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fd), 0); }
  ~SockPair() {
    for (int f : fd)
      if (f >= 0) close(f);
  }
};

TEST(BootSock, TransfersMoveBytesAndHonourDeadlines) {
  SockPair p;
  deadline dl = deadline_in_ms(5000);
  std::vector<char> out(1 << 20, 'x'), in(out.size());
  // Bigger than the socket buffer: the sender has to wait for the reader.
  std::thread reader(
      [&] { EXPECT_EQ(sock_recv_all(p.fd[1], in.data(), in.size(), &dl, nullptr), 0); });
  EXPECT_EQ(sock_send_all(p.fd[0], out.data(), out.size(), &dl, nullptr), 0);
  reader.join();
  EXPECT_EQ(in, out);

  char c;
  deadline soon = deadline_in_ms(50);
  EXPECT_EQ(sock_recv_all(p.fd[1], &c, 1, &soon, nullptr), ETIMEDOUT);
  int abort_flag = 1;
  EXPECT_EQ(sock_recv_all(p.fd[1], &c, 1, &dl, (const volatile int*)&abort_flag), ECANCELED);
  close(p.fd[0]);
  p.fd[0] = -1;
  EXPECT_EQ(sock_recv_all(p.fd[1], &c, 1, &dl, nullptr), SOCK_EOF);
}

TEST(BootSock, ConnectGivesUpAtTheDeadline) {
  // A port nobody listens on: bind one, never listen, so it stays ours.
  sock_addr a;
  ASSERT_EQ(sock_addr_parse("127.0.0.1:1", &a), loomSuccess);
  int hold = socket(AF_INET, SOCK_STREAM, 0);
  a.sin.sin_port = 0;
  ASSERT_EQ(bind(hold, &a.sa, sizeof(a.sin)), 0);
  socklen_t len = sizeof(a.sin);
  ASSERT_EQ(getsockname(hold, &a.sa, &len), 0);
  deadline dl = deadline_in_ms(300);
  int fd = -1;
  EXPECT_EQ(sock_connect(nullptr, &a, "nobody", &dl, nullptr, &fd), loomTimeout);
  EXPECT_NE(std::string(err_thread_last()).find("Connection refused"), std::string::npos)
      << err_thread_last();
  close(hold);
}

// ---- LOOM_FAULT ------------------------------------------------------------------

TEST(BootFault, SpecMatch) {
  EXPECT_TRUE(fault_spec_match("init:2", "init", 2));
  EXPECT_FALSE(fault_spec_match("init:2", "init", 1));
  EXPECT_FALSE(fault_spec_match("init:2", "allreduce", 2));
  EXPECT_FALSE(fault_spec_match("init:2", "ini", 2));
  EXPECT_TRUE(fault_spec_match("init:2,allreduce:1", "allreduce", 1));
  EXPECT_TRUE(fault_spec_match("init:12", "init", 12));
  for (const char* bad : {"", "init", "init:", "init:x", ":2", "init:2x"})
    EXPECT_FALSE(fault_spec_match(bad, "init", 2)) << bad;
  EXPECT_FALSE(fault_spec_match(nullptr, "init", 2));
}

// ---- Rendezvous with threads as ranks ----------------------------------------------

// The all-gathers every rank runs once init is done: small, empty, and one
// bigger than a socket buffer, then a barrier. Returns "" or the failure.
std::string GatherRounds(loom_comm* comm) {
  int n = comm->nranks, r = comm->rank;
  std::vector<int32_t> got(n, -1);
  int32_t mine = r * 10 + 1;
  if (boot_allgather(comm, &mine, sizeof(mine), got.data(), nullptr) != loomSuccess)
    return err_thread_last();
  for (int i = 0; i < n; i++)
    if (got[i] != i * 10 + 1) return "rank " + std::to_string(r) + ": wrong small all-gather";
  if (boot_allgather(comm, nullptr, 0, nullptr, nullptr) != loomSuccess) return err_thread_last();
  const size_t big = 100000;
  std::vector<uint8_t> in(big, (uint8_t)(r + 1)), all(big * n);
  if (boot_allgather(comm, in.data(), big, all.data(), nullptr) != loomSuccess)
    return err_thread_last();
  for (int i = 0; i < n; i++)
    if (all[(size_t)i * big] != i + 1 || all[(size_t)i * big + big - 1] != i + 1)
      return "rank " + std::to_string(r) + ": wrong big all-gather";
  if (boot_barrier(comm, nullptr) != loomSuccess) return err_thread_last();
  return "";
}

TEST(BootRendezvous, FourRanksGatherAndBarrier) {
  const int n = 4;
  boot_id id;
  ASSERT_EQ(boot_id_create(&id), loomSuccess);
  std::vector<Rank> ranks(n);
  std::vector<std::string> gather(n);
  for (int r = 0; r < n; r++)
    StartRank(ranks[r], id, n, r, 20000,
              [&gather, r](loom_comm* c) { gather[r] = GatherRounds(c); });
  for (auto& rk : ranks) rk.th.join();
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(ranks[r].init, loomSuccess) << "rank " << r << ": " << ranks[r].why;
    EXPECT_EQ(gather[r], "") << "rank " << r;
    ASSERT_NE(ranks[r].comm->peers, nullptr);
    EXPECT_EQ(ranks[r].comm->comm_hash, ranks[0].comm->comm_hash);
    for (int i = 0; i < n; i++) {
      EXPECT_EQ(ranks[r].comm->peers[i].rank, i);
      EXPECT_EQ(std::string(ranks[r].comm->peers[i].hostname), "thread-rank-" + std::to_string(i));
    }
  }
  for (auto& rk : ranks) FreeRank(rk, 1);
}

TEST(BootRendezvous, SingleRank) {
  boot_id id;
  ASSERT_EQ(boot_id_create(&id), loomSuccess);
  Rank rk;
  StartRank(rk, id, 1, 0, 5000, [](loom_comm* c) { EXPECT_EQ(GatherRounds(c), ""); });
  rk.th.join();
  EXPECT_EQ(rk.init, loomSuccess) << rk.why;
  FreeRank(rk, 1);
}

TEST(BootRendezvous, IdFromAddressWithoutListener) {
  // Rank 0 binds the named address itself (the loomCommInitFromEnv path).
  sock_addr probe;
  ASSERT_EQ(sock_addr_parse("127.0.0.1:1", &probe), loomSuccess);
  int fd;
  probe.sin.sin_port = 0;
  ASSERT_EQ(sock_listen(nullptr, &probe, &fd), loomSuccess);  // find a free port
  close(fd);
  boot_id id;
  ASSERT_EQ(boot_id_from_addr(AddrText(probe).c_str(), 0x1234abcdULL, 0, &id), loomSuccess);
  std::vector<Rank> ranks(3);
  std::vector<std::string> gather(3);
  // The others start first: they retry until rank 0 listens.
  for (int r = 2; r >= 0; r--) {
    StartRank(ranks[r], id, 3, r, 20000,
              [&gather, r](loom_comm* c) { gather[r] = GatherRounds(c); });
    if (r > 0) std::this_thread::sleep_for(50ms);
  }
  for (int r = 0; r < 3; r++) {
    ranks[r].th.join();
    EXPECT_EQ(ranks[r].init, loomSuccess) << ranks[r].why;
    EXPECT_EQ(gather[r], "");
  }
  for (auto& rk : ranks) FreeRank(rk, 1);
}

TEST(BootRendezvous, Ipv6FromAddressWithListener) {
  // boot_id_from_addr(listen = 1): rank 0 finds the socket in the registry.
  sock_addr probe;
  ASSERT_EQ(sock_addr_parse("[::1]:1", &probe), loomSuccess);
  probe.sin6.sin6_port = 0;
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0 || bind(fd, &probe.sa, sizeof(probe.sin6)) != 0) {
    if (fd >= 0) close(fd);
    GTEST_SKIP() << "no IPv6 loopback on this machine: " << strerror(errno);
  }
  socklen_t len = sizeof(probe.sin6);
  ASSERT_EQ(getsockname(fd, &probe.sa, &len), 0);
  close(fd);  // a free port, to name in the address
  boot_id id;
  ASSERT_EQ(boot_id_from_addr(AddrText(probe).c_str(), 0x5eedULL, 1, &id), loomSuccess);
  EXPECT_EQ(id.family, AF_INET6);
  std::vector<Rank> ranks(3);
  std::vector<std::string> gather(3);
  for (int r = 0; r < 3; r++)
    StartRank(ranks[r], id, 3, r, 20000,
              [&gather, r](loom_comm* c) { gather[r] = GatherRounds(c); });
  for (int r = 0; r < 3; r++) {
    ranks[r].th.join();
    EXPECT_EQ(ranks[r].init, loomSuccess) << ranks[r].why;
    EXPECT_EQ(gather[r], "");
  }
  for (auto& rk : ranks) FreeRank(rk, 1);
}

// ---- Strangers on the rendezvous port ----------------------------------------------

TEST(BootRendezvous, StrangersDoNotDisturb) {
  const int n = 4;
  boot_id id;
  ASSERT_EQ(boot_id_create(&id), loomSuccess);
  sock_addr a = IdAddr(id);
  std::vector<Rank> ranks(n);
  std::vector<std::string> gather(n);
  auto start = [&](int r) {
    StartRank(ranks[r], id, n, r, 20000,
              [&gather, r](loom_comm* c) { gather[r] = GatherRounds(c); });
  };
  int silent = DialBlocking(a);  // before rank 0 even runs: sits in the backlog
  ASSERT_GE(silent, 0);
  start(0);

  int garbage = DialBlocking(a);
  ASSERT_GE(garbage, 0);
  std::vector<uint8_t> junk(100, 0xab);
  ASSERT_EQ(send(garbage, junk.data(), junk.size(), MSG_NOSIGNAL), (ssize_t)junk.size());

  int huge = DialBlocking(a);  // a valid-looking header with an absurd length
  ASSERT_GE(huge, 0);
  boot_hdr hh = Hdr(BOOT_HELLO, 0xfffffff0u);
  ASSERT_EQ(send(huge, &hh, sizeof(hh), MSG_NOSIGNAL), (ssize_t)sizeof(hh));

  int wrong = DialBlocking(a);
  ASSERT_GE(wrong, 0);
  struct {
    boot_hdr h;
    boot_hello hello;
  } msg{Hdr(BOOT_HELLO, sizeof(boot_hello)), Hello(id.secret ^ 1, n, 1)};
  ASSERT_EQ(send(wrong, &msg, sizeof(msg), MSG_NOSIGNAL), (ssize_t)sizeof(msg));

  // Rank 0 drops all three at once, while the silent one keeps its place.
  EXPECT_TRUE(ClosedByPeer(garbage, 10000)) << "garbage";
  EXPECT_TRUE(ClosedByPeer(huge, 10000)) << "huge length";
  EXPECT_TRUE(ClosedByPeer(wrong, 10000)) << "wrong secret";
  for (int r = 1; r < n; r++) start(r);
  for (auto& rk : ranks) rk.th.join();
  for (int r = 0; r < n; r++) {
    EXPECT_EQ(ranks[r].init, loomSuccess) << "rank " << r << ": " << ranks[r].why;
    EXPECT_EQ(gather[r], "") << "rank " << r;
  }
  // Once the table is out the silent stranger is closed, not left dangling.
  EXPECT_TRUE(ClosedByPeer(silent, 10000)) << "silent";
  for (int fd : {silent, garbage, huge, wrong}) close(fd);
  for (auto& rk : ranks) FreeRank(rk, 1);
}

// ---- Ranks that cannot join ------------------------------------------------------

TEST(BootRendezvous, MissingRankTimesOut) {
  boot_id id;
  ASSERT_EQ(boot_id_create(&id), loomSuccess);
  std::vector<Rank> ranks(2);  // of 3: rank 2 never comes
  for (int r = 0; r < 2; r++) StartRank(ranks[r], id, 3, r, 1500);
  for (auto& rk : ranks) rk.th.join();
  EXPECT_EQ(ranks[0].init, loomTimeout) << ranks[0].why;
  EXPECT_NE(ranks[0].why.find("missing ranks 2"), std::string::npos) << ranks[0].why;
  // Rank 1 hears it from rank 0 (or hits its own deadline): a timeout too.
  EXPECT_EQ(ranks[1].init, loomTimeout) << ranks[1].why;
  for (auto& rk : ranks) FreeRank(rk, 0);
}

TEST(BootRendezvous, RootThatNeverComesTimesOut) {
  sock_addr probe;
  ASSERT_EQ(sock_addr_parse("127.0.0.1:1", &probe), loomSuccess);
  int fd;
  probe.sin.sin_port = 0;
  ASSERT_EQ(sock_listen(nullptr, &probe, &fd), loomSuccess);
  close(fd);  // nobody listens there now
  boot_id id;
  ASSERT_EQ(boot_id_from_addr(AddrText(probe).c_str(), 77, 0, &id), loomSuccess);
  Rank rk;
  StartRank(rk, id, 2, 1, 500);
  rk.th.join();
  EXPECT_EQ(rk.init, loomTimeout) << rk.why;
  EXPECT_NE(rk.why.find("rank 0"), std::string::npos) << rk.why;
  FreeRank(rk, 0);
}

// Rank n - 1 completes the rendezvous; the others wait for it. So whatever
// ends before it starts is a refused rank.
void JoinAndCheck(std::vector<Rank>& ranks, std::vector<std::string>& gather) {
  for (auto& rk : ranks)
    if (rk.th.joinable()) rk.th.join();
  for (size_t r = 0; r < ranks.size(); r++) {
    EXPECT_EQ(ranks[r].init, loomSuccess) << "rank " << r << ": " << ranks[r].why;
    EXPECT_EQ(gather[r], "") << "rank " << r;
  }
}

TEST(BootRendezvous, NranksMismatchIsRefused) {
  const int n = 3;
  boot_id id;
  ASSERT_EQ(boot_id_create(&id), loomSuccess);
  std::vector<Rank> ranks(n);
  std::vector<std::string> gather(n);
  auto body = [&gather](loom_comm* c) { gather[c->rank] = GatherRounds(c); };
  StartRank(ranks[0], id, n, 0, 20000, body);
  Rank bad;
  StartRank(bad, id, n + 1, 1, 20000);
  bad.th.join();
  EXPECT_EQ(bad.init, loomInvalidUsage) << bad.why;
  EXPECT_NE(bad.why.find("nranks mismatch"), std::string::npos) << bad.why;
  for (int r = 1; r < n; r++) StartRank(ranks[r], id, n, r, 20000, body);
  JoinAndCheck(ranks, gather);
  FreeRank(bad, 0);
  for (auto& rk : ranks) FreeRank(rk, 1);
}

TEST(BootRendezvous, DuplicateRankIsRefused) {
  const int n = 3;
  boot_id id;
  ASSERT_EQ(boot_id_create(&id), loomSuccess);
  std::vector<Rank> ranks(n), twin(1);
  std::vector<std::string> gather(n);
  std::atomic<int> ended{0};
  auto body = [&gather](loom_comm* c) { gather[c->rank] = GatherRounds(c); };
  StartRank(ranks[0], id, n, 0, 20000, body);
  // Two claim rank 1; the first hello wins, whichever it is.
  for (Rank* rk : {&ranks[1], &twin[0]}) {
    rk->th = std::thread([rk, &id, &ended, body] {
      rk->comm = NewComm(n, 1, 20000);
      peer_info self = SelfInfo(1);
      rk->init = boot_init(rk->comm, &id, &self);
      if (rk->init != loomSuccess) rk->why = err_thread_last();
      ended++;
      if (rk->init == loomSuccess) body(rk->comm);
    });
  }
  EXPECT_TRUE(WaitFor([&] { return ended.load() > 0; })) << "no claimant of rank 1 was refused";
  StartRank(ranks[2], id, n, 2, 20000, body);
  for (Rank* rk : {&ranks[1], &twin[0]}) rk->th.join();
  if (ranks[1].init != loomSuccess) std::swap(ranks[1], twin[0]);  // keep the winner
  EXPECT_EQ(twin[0].init, loomInvalidUsage) << twin[0].why;
  EXPECT_NE(twin[0].why.find("already joined"), std::string::npos) << twin[0].why;
  JoinAndCheck(ranks, gather);
  FreeRank(twin[0], 0);
  for (auto& rk : ranks) FreeRank(rk, 1);
}

TEST(BootRendezvous, KnownSecretBadRankIsToldWhy) {
  boot_id id;
  ASSERT_EQ(boot_id_create(&id), loomSuccess);
  std::vector<Rank> ranks(2);
  std::vector<std::string> gather(2);
  auto body = [&gather](loom_comm* c) { gather[c->rank] = GatherRounds(c); };
  StartRank(ranks[0], id, 2, 0, 20000, body);
  int fd = DialBlocking(IdAddr(id));
  ASSERT_GE(fd, 0);
  struct {
    boot_hdr h;
    boot_hello hello;
  } msg{Hdr(BOOT_HELLO, sizeof(boot_hello)), Hello(id.secret, 2, 7)};
  ASSERT_EQ(send(fd, &msg, sizeof(msg), MSG_NOSIGNAL), (ssize_t)sizeof(msg));
  struct {
    boot_hdr h;
    char why[512];
  } reply{};
  deadline dl = deadline_in_ms(10000);
  ASSERT_EQ(sock_recv_all(fd, &reply.h, sizeof(reply.h), &dl, nullptr), 0);
  loomResult_t res;
  HdrWhy(reply.h, sizeof(reply.why), &res);
  ASSERT_EQ(res, loomSuccess);
  EXPECT_EQ(reply.h.type, BOOT_REFUSED);
  ASSERT_EQ(sock_recv_all(fd, reply.why, reply.h.length, &dl, nullptr), 0);
  reply.why[sizeof(reply.why) - 1] = '\0';
  EXPECT_NE(std::string(reply.why).find("rank 7 out of range"), std::string::npos) << reply.why;
  EXPECT_TRUE(ClosedByPeer(fd, 10000));
  close(fd);
  StartRank(ranks[1], id, 2, 1, 20000, body);
  JoinAndCheck(ranks, gather);
  for (auto& rk : ranks) FreeRank(rk, 1);
}

// ---- Ids sharing the listener -----------------------------------------------------------

// Two ids of this process share one listener. A rank of id B connects while
// id A's rendezvous polls (so A accepts it) and says its hello only a moment
// later, after A's rendezvous has ended: the hello must still reach B's
// rank 0, not be cut off with the pending set A's rendezvous takes down.
TEST(BootRendezvous, HelloInFlightForAnotherIdSurvives) {
  boot_id a, b;
  ASSERT_EQ(boot_id_create(&a), loomSuccess);
  ASSERT_EQ(boot_id_create(&b), loomSuccess);
  ASSERT_EQ(a.port, b.port) << "the ids do not share a listener";
  std::vector<Rank> ra(2);
  StartRank(ra[0], a, 2, 0, 20000);
  std::this_thread::sleep_for(100ms);  // A polls the listener now
  int late = DialBlocking(IdAddr(b));
  ASSERT_GE(late, 0);
  std::this_thread::sleep_for(100ms);  // A has accepted it: no hello yet
  StartRank(ra[1], a, 2, 1, 20000);
  std::this_thread::sleep_for(100ms);  // A's rendezvous is over
  struct {
    boot_hdr h;
    boot_hello hello;
  } msg{Hdr(BOOT_HELLO, sizeof(boot_hello)), Hello(b.secret, 2, 1)};
  ASSERT_EQ(send(late, &msg, sizeof(msg), MSG_NOSIGNAL), (ssize_t)sizeof(msg));
  for (auto& rk : ra) rk.th.join();
  for (auto& rk : ra) EXPECT_EQ(rk.init, loomSuccess) << rk.why;
  Rank rb;
  StartRank(rb, b, 2, 0, 20000);
  boot_hdr reply{};
  deadline dl = deadline_in_ms(10000);
  EXPECT_EQ(sock_recv_all(late, &reply, sizeof(reply), &dl, nullptr), 0)
      << "B's rank 1 lost its connection";
  EXPECT_EQ(reply.type, BOOT_TABLE);
  // Play the rest of rank 1's part: take the table, say it has it.
  std::vector<uint8_t> table(reply.length);
  EXPECT_EQ(sock_recv_all(late, table.data(), table.size(), &dl, nullptr), 0);
  boot_hdr have = Hdr(BOOT_DATA, 0);
  have.tag = BOOT_TAG_INIT;
  have.from = 1;
  EXPECT_EQ(send(late, &have, sizeof(have), MSG_NOSIGNAL), (ssize_t)sizeof(have));
  rb.th.join();
  EXPECT_EQ(rb.init, loomSuccess) << rb.why;
  close(late);
  FreeRank(rb, 0);
  for (auto& rk : ra) FreeRank(rk, 1);
}

// ---- After init: failure detection ---------------------------------------------------

class BootFailure : public ::testing::TestWithParam<int> {};

TEST_P(BootFailure, AbortedPeerIsReportedEverywhere) {
  const int n = 4, victim = GetParam();
  std::vector<Rank> ranks;
  ASSERT_NO_FATAL_FAILURE(Bringup(ranks, n));
  boot_fini(ranks[victim].comm, 0);  // like a crash: no goodbye
  for (int r = 0; r < n; r++) {
    if (r == victim) continue;
    loom_comm* c = ranks[r].comm;
    std::string why;
    ASSERT_TRUE(WaitForFailure(c, victim, &why))
        << "rank " << r << " never noticed that rank " << victim << " died: " << why;
    // A collective now fails at once instead of waiting for its deadline.
    int32_t x = r, all[n];
    EXPECT_EQ(boot_allgather(c, &x, sizeof(x), all, nullptr), loomRemoteError);
  }
  for (auto& rk : ranks) FreeRank(rk, 0);
}

INSTANTIATE_TEST_SUITE_P(Victims, BootFailure, ::testing::Values(0, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "rank" + std::to_string(info.param);
                         });

TEST(BootFailureClean, GoodbyeIsNotAFailure) {
  const int n = 4;
  std::vector<Rank> ranks;
  ASSERT_NO_FATAL_FAILURE(Bringup(ranks, n));
  boot_fini(ranks[2].comm, 1);
  boot_fini(ranks[0].comm, 1);  // the root too: its goodbye reaches everyone
  // Give the watchers time to see both closes; an error would show by then.
  std::this_thread::sleep_for(300ms);
  for (int r : {1, 3}) EXPECT_EQ(comm_health(ranks[r].comm), loomSuccess) << err_thread_last();
  for (auto& rk : ranks) FreeRank(rk, 1);
}

TEST(BootFailureClean, AllgatherTimesOutNamingTheLateRank) {
  std::vector<Rank> ranks;
  ASSERT_NO_FATAL_FAILURE(Bringup(ranks, 2));
  deadline dl = deadline_in_ms(300);
  int32_t x = 0, all[2];
  EXPECT_EQ(boot_allgather(ranks[0].comm, &x, sizeof(x), all, &dl), loomTimeout);
  EXPECT_NE(std::string(err_thread_last()).find("from rank 1"), std::string::npos)
      << err_thread_last();
  for (auto& rk : ranks) FreeRank(rk, 1);
}

TEST(BootFailureClean, AbortFlagEndsWaits) {
  std::vector<Rank> ranks;
  ASSERT_NO_FATAL_FAILURE(Bringup(ranks, 2));
  __atomic_store_n(&ranks[1].comm->aborted, 1, __ATOMIC_SEQ_CST);
  int32_t x = 0, all[2];
  EXPECT_EQ(boot_allgather(ranks[1].comm, &x, sizeof(x), all, nullptr), loomInvalidUsage);
  for (auto& rk : ranks) FreeRank(rk, 1);
}

TEST(BootFailureClean, FiniIsSafeWithoutInit) {
  loom_comm* c = NewComm(2, 0, 1000);
  boot_fini(c, 1);
  boot_fini(c, 0);
  comm_free(c);
}

// A rank in another process dies (SIGKILL) after init: the others learn it.
TEST(BootProcess, KilledRankIsDetected) {
  boot_id id;
  ASSERT_EQ(boot_id_create(&id), loomSuccess);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    loom_comm* c = NewComm(3, 1, 20000);
    peer_info self = SelfInfo(1);
    if (boot_init(c, &id, &self) == loomSuccess) raise(SIGKILL);
    _exit(3);
  }
  std::vector<Rank> ranks(3);
  for (int r : {0, 2}) StartRank(ranks[r], id, 3, r, 20000);
  for (int r : {0, 2}) ranks[r].th.join();
  int status = 0;
  EXPECT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child status " << status;
  for (int r : {0, 2}) {
    ASSERT_EQ(ranks[r].init, loomSuccess) << ranks[r].why;
    loom_comm* c = ranks[r].comm;
    std::string why;
    EXPECT_TRUE(WaitForFailure(c, 1, &why)) << "rank " << r << ": " << why;
  }
  for (auto& rk : ranks) FreeRank(rk, 0);
}

}  // namespace
