// The bootstrap's links and the peer table's tree: link hellos and the
// table's layout (wire parsing), the binomial tree's shape at every size,
// and rank-to-rank messages between thread ranks of this process (pairs
// both ways, big and empty messages, tags, threads, strangers on a link
// port, failures and departures). Process ranks and whole communicators are
// in tests/mp/boot.
#include <atomic>
#include <cmath>
#include <set>

#include "unit/boot_ranks.h"

namespace {

using namespace boot_test;

// ---- Link hellos ------------------------------------------------------------------

constexpr uint64_t kSecret = 0x5ec2e7, kHash = 0xc0ffee;

boot_link_hello LinkHello(int from, int to) {
  boot_link_hello h{};
  h.secret = kSecret;
  h.comm_hash = kHash;
  h.nranks = 8;
  h.from = from;
  h.to = to;
  return h;
}

loomResult_t LinkCheck(const boot_link_hello& h, size_t len, int self, std::string* why = nullptr) {
  char buf[200] = "";
  loomResult_t r = boot_link_hello_check(&h, len, kSecret, kHash, 8, self, buf, sizeof(buf));
  if (why) *why = buf;
  return r;
}

TEST(BootLinkWire, HelloAcceptsValid) {
  for (int from = 1; from < 8; from++)
    for (int to = 1; to < 8; to++)
      if (from != to) {
        EXPECT_EQ(LinkCheck(LinkHello(from, to), sizeof(boot_link_hello), to), loomSuccess);
      }
}

TEST(BootLinkWire, StrangersAreRemoteErrors) {
  std::string why;
  boot_link_hello h = LinkHello(1, 2);
  EXPECT_EQ(LinkCheck(h, sizeof(h) - 1, 2, &why), loomRemoteError);
  EXPECT_NE(why.find("link hello of"), std::string::npos) << why;
  EXPECT_EQ(LinkCheck(h, 0, 2), loomRemoteError);
  h.secret ^= 1;
  EXPECT_EQ(LinkCheck(h, sizeof(h), 2, &why), loomRemoteError);
  EXPECT_NE(why.find("wrong secret"), std::string::npos) << why;
}

TEST(BootLinkWire, KnownSecretWrongPlaceIsToldWhy) {
  std::string why;
  boot_link_hello h = LinkHello(1, 2);
  h.comm_hash ^= 1;
  EXPECT_EQ(LinkCheck(h, sizeof(h), 2, &why), loomInvalidUsage);
  EXPECT_NE(why.find("another communicator"), std::string::npos) << why;
  h = LinkHello(1, 2);
  h.nranks = 9;
  EXPECT_EQ(LinkCheck(h, sizeof(h), 2), loomInvalidUsage);
  EXPECT_EQ(LinkCheck(LinkHello(1, 3), sizeof(h), 2, &why), loomInvalidUsage);
  EXPECT_NE(why.find("meant for rank 3"), std::string::npos) << why;
  // Rank 0 never dials (the star is its link); nobody dials itself.
  for (int from : {0, 2, 8, -1, 1000}) {
    EXPECT_EQ(LinkCheck(LinkHello(from, 2), sizeof(h), 2, &why), loomInvalidUsage) << from;
    EXPECT_NE(why.find("not a rank that may dial"), std::string::npos) << why;
  }
}

TEST(BootLinkWire, TableRoundTrip) {
  const int n = 5;
  ASSERT_EQ(boot_table_len(n), 8 + n * (sizeof(peer_info) + sizeof(boot_addr)));
  std::vector<uint8_t> table(boot_table_len(n));
  uint64_t hash = 0x1122334455667788ull;
  std::vector<peer_info> rows(n);
  std::vector<boot_addr> addrs(n);
  for (int r = 0; r < n; r++) {
    rows[r] = SelfInfo(r);
    addrs[r].family = AF_INET;
    addrs[r].port = htons((uint16_t)(1000 + r));
  }
  memcpy(table.data(), &hash, 8);
  memcpy(table.data() + 8, rows.data(), n * sizeof(peer_info));
  memcpy(table.data() + 8 + n * sizeof(peer_info), addrs.data(), n * sizeof(boot_addr));
  uint64_t got_hash = 0;
  std::vector<peer_info> got_rows(n);
  std::vector<boot_addr> got_addrs(n);
  boot_table_parse(table.data(), n, &got_hash, got_rows.data(), got_addrs.data());
  EXPECT_EQ(got_hash, hash);
  for (int r = 0; r < n; r++) {
    EXPECT_EQ(memcmp(&got_rows[r], &rows[r], sizeof(peer_info)), 0) << r;
    EXPECT_EQ(ntohs(got_addrs[r].port), 1000 + r);
  }
  got_hash = 0;
  boot_table_parse(table.data(), n, &got_hash, nullptr, nullptr);  // the hash alone
  EXPECT_EQ(got_hash, hash);
}

// ---- The tree ----------------------------------------------------------------------

int Depth(int r) {
  int d = 0;
  for (; r > 0; r = boot_tree_parent(r)) d++;
  return d;
}

int SubtreeSize(int r, int n) {
  int kids[32], size = 1;
  int k = boot_tree_children(r, n, kids, 32);
  for (int i = 0; i < k; i++) size += SubtreeSize(kids[i], n);
  return size;
}

void CheckTree(int n) {
  int levels = n > 1 ? (int)std::ceil(std::log2((double)n)) : 0;
  std::vector<int> seen(n, 0);
  for (int r = 0; r < n; r++) {
    int kids[32];
    int k = boot_tree_children(r, n, kids, 32);
    ASSERT_LE(k, 32);
    int prev_size = n + 1;
    for (int i = 0; i < k; i++) {
      ASSERT_GT(kids[i], r);
      ASSERT_LT(kids[i], n);
      ASSERT_EQ(boot_tree_parent(kids[i]), r) << "n " << n << " child " << kids[i];
      seen[kids[i]]++;
      int size = SubtreeSize(kids[i], n);  // biggest first
      ASSERT_LE(size, prev_size) << "n " << n << " rank " << r;
      prev_size = size;
    }
    ASSERT_LE(Depth(r), levels) << "n " << n << " rank " << r;
  }
  ASSERT_EQ(seen[0], 0);
  for (int r = 1; r < n; r++) ASSERT_EQ(seen[r], 1) << "n " << n << " rank " << r;
  int root_kids[32];
  EXPECT_EQ(boot_tree_children(0, n, root_kids, 32), levels) << n;
  EXPECT_EQ(SubtreeSize(0, n), n);
}

TEST(BootTree, EveryRankHasOneParentAndDepthIsLog) {
  EXPECT_EQ(boot_tree_parent(0), -1);
  for (int n = 1; n <= 300; n++) ASSERT_NO_FATAL_FAILURE(CheckTree(n));
  for (int n : {1023, 1024, 1025, 4096, 4097}) ASSERT_NO_FATAL_FAILURE(CheckTree(n));
}

TEST(BootTree, ChildrenBeyondCapAreCounted) {
  int kids[2];
  EXPECT_EQ(boot_tree_children(0, 8, kids, 2), 3);
  EXPECT_EQ(kids[0], 1);
  EXPECT_EQ(kids[1], 2);
  EXPECT_EQ(boot_tree_children(1, 8, kids, 2), 2);  // 3, 5
  EXPECT_EQ(kids[0], 3);
  EXPECT_EQ(kids[1], 5);
  EXPECT_EQ(boot_tree_children(7, 8, kids, 2), 0);
}

// ---- Messages between thread ranks ----------------------------------------------------

// A message's bytes say who sent it to whom with which tag.
std::vector<uint8_t> Payload(int from, int to, uint32_t tag, size_t len) {
  std::vector<uint8_t> v(len);
  for (size_t i = 0; i < len; i++) v[i] = (uint8_t)(from * 31 + to * 7 + tag * 3 + i);
  return v;
}

// Runs fn(rank's comm) on one thread per rank and waits for all.
void OnEveryRank(std::vector<Rank>& ranks, const std::function<void(loom_comm*)>& fn) {
  std::vector<std::thread> ts;
  for (auto& rk : ranks) ts.emplace_back([&rk, &fn] { fn(rk.comm); });
  for (auto& t : ts) t.join();
}

std::string LastError() {
  return err_thread_last();
}

TEST(BootLink, EveryPairBothWays) {
  const int n = 6;
  std::vector<Rank> ranks;
  ASSERT_NO_FATAL_FAILURE(Bringup(ranks, n));
  OnEveryRank(ranks, [n](loom_comm* c) {
    int me = c->rank;
    // Sends never wait for the matching receive: every rank sends first.
    for (int p = 0; p < n; p++) {
      auto v = Payload(me, p, 40 + p, 100 + p);
      EXPECT_EQ(boot_send(c, p, 40 + p, v.data(), v.size(), nullptr), loomSuccess) << LastError();
    }
    for (int p = 0; p < n; p++) {
      std::vector<uint8_t> got(100 + me);
      EXPECT_EQ(boot_recv(c, p, 40 + me, got.data(), got.size(), nullptr, nullptr), loomSuccess)
          << "rank " << me << " from " << p << ": " << LastError();
      EXPECT_EQ(got, Payload(p, me, 40 + me, 100 + me)) << "rank " << me << " from " << p;
    }
  });
  for (auto& rk : ranks) FreeRank(rk, 1);
}

TEST(BootLink, BigAndEmptyMessages) {
  const int n = 3;
  const size_t big = 24u << 20;  // far beyond any socket buffer
  std::vector<Rank> ranks;
  ASSERT_NO_FATAL_FAILURE(Bringup(ranks, n));
  OnEveryRank(ranks, [&](loom_comm* c) {
    int me = c->rank;
    for (int p = 0; p < n; p++) {  // a link (1 <-> 2) and the star (0 <-> *)
      if (p == me) continue;
      auto v = Payload(me, p, 1, big);
      EXPECT_EQ(boot_send(c, p, 1, v.data(), v.size(), nullptr), loomSuccess) << LastError();
      EXPECT_EQ(boot_send(c, p, 2, nullptr, 0, nullptr), loomSuccess) << LastError();
    }
    for (int p = 0; p < n; p++) {
      if (p == me) continue;
      std::vector<uint8_t> got(big);
      EXPECT_EQ(boot_recv(c, p, 1, got.data(), big, nullptr, nullptr), loomSuccess) << LastError();
      EXPECT_TRUE(got == Payload(p, me, 1, big)) << "rank " << me << " from " << p;
      size_t len = 99;
      EXPECT_EQ(boot_recv(c, p, 2, nullptr, 0, &len, nullptr), loomSuccess) << LastError();
      EXPECT_EQ(len, 0u);
    }
  });
  for (auto& rk : ranks) FreeRank(rk, 1);
}

TEST(BootLink, TagsMatchAndKeepTheirOrder) {
  std::vector<Rank> ranks;
  ASSERT_NO_FATAL_FAILURE(Bringup(ranks, 3));
  loom_comm* a = ranks[1].comm;
  loom_comm* b = ranks[2].comm;
  for (auto [tag, text] :
       {std::pair<uint32_t, const char*>{7, "first"}, {5, "other"}, {7, "second"}})
    ASSERT_EQ(boot_send(a, 2, tag, text, strlen(text) + 1, nullptr), loomSuccess) << LastError();
  char buf[32];
  size_t len = 0;
  ASSERT_EQ(boot_recv(b, 1, 5, buf, sizeof(buf), &len, nullptr), loomSuccess) << LastError();
  EXPECT_STREQ(buf, "other");
  EXPECT_EQ(len, 6u);
  ASSERT_EQ(boot_recv(b, 1, 7, buf, sizeof(buf), &len, nullptr), loomSuccess);
  EXPECT_STREQ(buf, "first");
  ASSERT_EQ(boot_recv(b, 1, 7, buf, sizeof(buf), &len, nullptr), loomSuccess);
  EXPECT_STREQ(buf, "second");
  // Nothing of tag 7 from rank 0: the deadline, naming the rank it waited on.
  deadline dl = deadline_in_ms(200);
  EXPECT_EQ(boot_recv(b, 0, 7, buf, sizeof(buf), &len, &dl), loomTimeout);
  EXPECT_NE(LastError().find("from rank 0"), std::string::npos) << LastError();
  // The wrong size is an error that says both sizes (and the message is gone).
  ASSERT_EQ(boot_send(a, 2, 9, "12345", 5, nullptr), loomSuccess);
  EXPECT_EQ(boot_recv(b, 1, 9, buf, 4, nullptr, nullptr), loomInvalidUsage);
  EXPECT_NE(LastError().find("has 5 bytes, expected 4"), std::string::npos) << LastError();
  ASSERT_EQ(boot_send(a, 2, 9, "12345", 5, nullptr), loomSuccess);
  EXPECT_EQ(boot_recv(b, 1, 9, buf, 4, &len, nullptr), loomInvalidUsage);
  EXPECT_NE(LastError().find("expected at most 4"), std::string::npos) << LastError();
  // To itself, through its own mailbox.
  ASSERT_EQ(boot_send(b, 2, 3, "me", 3, nullptr), loomSuccess);
  ASSERT_EQ(boot_recv(b, 2, 3, buf, 3, nullptr, nullptr), loomSuccess);
  EXPECT_STREQ(buf, "me");
  for (auto& rk : ranks) FreeRank(rk, 1);
}

TEST(BootLink, BadArgumentsAreRefused) {
  std::vector<Rank> ranks;
  ASSERT_NO_FATAL_FAILURE(Bringup(ranks, 3));
  loom_comm* c = ranks[1].comm;
  char buf[4];
  EXPECT_EQ(boot_send(c, 3, 0, buf, 1, nullptr), loomInvalidArgument);
  EXPECT_NE(LastError().find("out of range"), std::string::npos) << LastError();
  EXPECT_EQ(boot_recv(c, -1, 0, buf, 1, nullptr, nullptr), loomInvalidArgument);
  EXPECT_EQ(boot_send(c, 2, 0, nullptr, 1, nullptr), loomInvalidArgument);
  EXPECT_EQ(boot_send(c, 2, 0, buf, (size_t)BOOT_MAX_PAYLOAD + 1, nullptr), loomInvalidArgument);
  loom_comm* none = NewComm(2, 0, 1000);  // no bootstrap
  EXPECT_EQ(boot_send(none, 1, 0, buf, 1, nullptr), loomInvalidUsage);
  comm_free(none);
  for (auto& rk : ranks) FreeRank(rk, 1);
}

// Four threads of rank 1 talk to four peers at once, each on its own tag;
// the peers answer.
TEST(BootLink, ThreadsOfOneRankTalkToDifferentPeers) {
  const int n = 6, rounds = 20;
  std::vector<Rank> ranks;
  ASSERT_NO_FATAL_FAILURE(Bringup(ranks, n));
  std::vector<std::thread> ts;
  for (int p : {0, 2, 3, 5}) {
    ts.emplace_back([&, p] {  // rank 1's thread for peer p
      for (int i = 0; i < rounds; i++) {
        auto v = Payload(1, p, i, 1000 + i);
        ASSERT_EQ(boot_send(ranks[1].comm, p, 100 + p, v.data(), v.size(), nullptr), loomSuccess);
        std::vector<uint8_t> got(1000 + i);
        ASSERT_EQ(boot_recv(ranks[1].comm, p, 200 + p, got.data(), got.size(), nullptr, nullptr),
                  loomSuccess)
            << LastError();
        ASSERT_EQ(got, Payload(p, 1, i, 1000 + i));
      }
    });
    ts.emplace_back([&, p] {  // peer p echoes
      for (int i = 0; i < rounds; i++) {
        std::vector<uint8_t> got(1000 + i);
        ASSERT_EQ(boot_recv(ranks[p].comm, 1, 100 + p, got.data(), got.size(), nullptr, nullptr),
                  loomSuccess)
            << LastError();
        ASSERT_EQ(got, Payload(1, p, i, 1000 + i));
        auto v = Payload(p, 1, i, 1000 + i);
        ASSERT_EQ(boot_send(ranks[p].comm, 1, 200 + p, v.data(), v.size(), nullptr), loomSuccess);
      }
    });
  }
  for (auto& t : ts) t.join();
  for (auto& rk : ranks) FreeRank(rk, 1);
}

// A rank that crashes (no goodbye) while a peer waits for its message: the
// wait ends with loomRemoteError naming it, long before the 20 s deadline;
// sends to it fail the same way.
TEST(BootLink, DeadPeerEndsWaitsNamingIt) {
  const int n = 4, victim = 3;
  std::vector<Rank> ranks;
  ASSERT_NO_FATAL_FAILURE(Bringup(ranks, n));
  char one = 1;
  ASSERT_EQ(boot_send(ranks[victim].comm, 1, 0, &one, 1, nullptr), loomSuccess);  // a link up
  ASSERT_EQ(boot_recv(ranks[1].comm, victim, 0, &one, 1, nullptr, nullptr), loomSuccess);
  std::thread waiter([&] {
    char buf;
    EXPECT_EQ(boot_recv(ranks[1].comm, victim, 1, &buf, 1, nullptr, nullptr), loomRemoteError);
    EXPECT_NE(LastError().find("peer 3"), std::string::npos) << LastError();
  });
  std::this_thread::sleep_for(50ms);  // let it wait (it passes either way)
  boot_fini(ranks[victim].comm, 0);
  waiter.join();
  std::vector<uint8_t> big(8u << 20);
  for (int r : {0, 2}) {
    std::string why;
    ASSERT_TRUE(WaitForFailure(ranks[r].comm, victim, &why)) << why;
    EXPECT_EQ(boot_send(ranks[r].comm, victim, 1, big.data(), big.size(), nullptr),
              loomRemoteError);
    EXPECT_NE(LastError().find("peer 3"), std::string::npos) << LastError();
  }
  for (auto& rk : ranks) FreeRank(rk, 0);
}

// A rank that leaves cleanly after sending: what it sent is still received
// (its goodbye follows on the same link), then a wait for more ends at once
// with loomRemoteError saying it left.
TEST(BootLink, PeerThatLeftDeliversThenFailsWaits) {
  const int n = 4, leaver = 2;
  std::vector<Rank> ranks;
  ASSERT_NO_FATAL_FAILURE(Bringup(ranks, n));
  const char text[] = "last words";
  for (int p : {1, 3, 0})
    ASSERT_EQ(boot_send(ranks[leaver].comm, p, 4, text, sizeof(text), nullptr), loomSuccess);
  boot_fini(ranks[leaver].comm, 1);
  for (int p : {1, 3, 0}) {
    loom_comm* c = ranks[p].comm;
    ASSERT_TRUE(WaitFor([&] { return boot_peer_left(c, leaver) != 0; })) << "rank " << p;
    char buf[sizeof(text)];
    ASSERT_EQ(boot_recv(c, leaver, 4, buf, sizeof(buf), nullptr, nullptr), loomSuccess)
        << "rank " << p << ": " << LastError();
    EXPECT_STREQ(buf, text);
    EXPECT_EQ(boot_recv(c, leaver, 5, buf, sizeof(buf), nullptr, nullptr), loomRemoteError);
    EXPECT_NE(LastError().find("peer 2 left the communicator"), std::string::npos) << LastError();
  }
  for (auto& rk : ranks) FreeRank(rk, 0);
}

// A peer that never dialled this rank and has left: nothing can come, so
// the wait fails at once; a send to it too.
TEST(BootLink, PeerThatLeftWithoutALinkFailsAtOnce) {
  std::vector<Rank> ranks;
  ASSERT_NO_FATAL_FAILURE(Bringup(ranks, 4));
  boot_fini(ranks[3].comm, 1);
  loom_comm* c = ranks[1].comm;
  ASSERT_TRUE(WaitFor([&] { return boot_peer_left(c, 3) != 0; }));
  char buf[1];
  EXPECT_EQ(boot_recv(c, 3, 0, buf, 1, nullptr, nullptr), loomRemoteError);
  EXPECT_NE(LastError().find("peer 3 left"), std::string::npos) << LastError();
  EXPECT_EQ(boot_send(ranks[2].comm, 3, 0, buf, 1, nullptr), loomRemoteError);
  for (auto& rk : ranks) FreeRank(rk, 0);
}

// Strangers at a rank's link port: garbage and a wrong secret are closed
// without a word; a rank of another communicator is told why. The links of
// the communicator work all the while.
TEST(BootLink, StrangersAtTheLinkPort) {
  std::vector<Rank> ranks;
  ASSERT_NO_FATAL_FAILURE(Bringup(ranks, 3));
  loom_comm* target = ranks[2].comm;
  sock_addr a;
  boot_addr_unpack(&target->boot->lsn_addr, &a);
  ASSERT_NE(a.sa.sa_family, 0);
  int garbage = DialBlocking(a), wrong = DialBlocking(a), other = DialBlocking(a);
  ASSERT_GE(garbage, 0);
  ASSERT_GE(wrong, 0);
  ASSERT_GE(other, 0);
  std::vector<uint8_t> junk(100, 0xab);
  ASSERT_EQ(send(garbage, junk.data(), junk.size(), MSG_NOSIGNAL), (ssize_t)junk.size());
  struct {
    boot_hdr h;
    boot_link_hello hello;
  } msg{Hdr(BOOT_LINK, sizeof(boot_link_hello)), {}};
  msg.hello.secret = target->boot->secret ^ 1;
  msg.hello.comm_hash = target->comm_hash;
  msg.hello.nranks = 3;
  msg.hello.from = 1;
  msg.hello.to = 2;
  ASSERT_EQ(send(wrong, &msg, sizeof(msg), MSG_NOSIGNAL), (ssize_t)sizeof(msg));
  msg.hello.secret ^= 1;
  msg.hello.comm_hash ^= 1;
  ASSERT_EQ(send(other, &msg, sizeof(msg), MSG_NOSIGNAL), (ssize_t)sizeof(msg));
  EXPECT_TRUE(ClosedByPeer(garbage, 10000)) << "garbage";
  EXPECT_TRUE(ClosedByPeer(wrong, 10000)) << "wrong secret";
  boot_hdr reply{};
  deadline dl = deadline_in_ms(10000);
  ASSERT_EQ(sock_recv_all(other, &reply, sizeof(reply), &dl, nullptr), 0);
  EXPECT_EQ(reply.type, BOOT_REFUSED);
  std::vector<char> why(reply.length + 1, '\0');
  ASSERT_LE(reply.length, (uint32_t)BOOT_REFUSED_MAX);
  ASSERT_EQ(sock_recv_all(other, why.data(), reply.length, &dl, nullptr), 0);
  EXPECT_NE(std::string(why.data()).find("another communicator"), std::string::npos) << why.data();
  for (int fd : {garbage, wrong, other}) close(fd);
  char buf[3];
  ASSERT_EQ(boot_send(ranks[1].comm, 2, 0, "ok", 3, nullptr), loomSuccess) << LastError();
  ASSERT_EQ(boot_recv(target, 1, 0, buf, 3, nullptr, nullptr), loomSuccess) << LastError();
  EXPECT_STREQ(buf, "ok");
  for (auto& rk : ranks) FreeRank(rk, 1);
}

// Enough thread ranks for a tree of six levels: every rank's table is rank
// 0's, row for row, and every rank but 0 has an address for links.
TEST(BootLink, TableOfFortyRanks) {
  const int n = 40;
  std::vector<Rank> ranks;
  ASSERT_NO_FATAL_FAILURE(Bringup(ranks, n, 60000));
  for (int r = 0; r < n; r++) {
    loom_comm* c = ranks[r].comm;
    ASSERT_NE(c->peers, nullptr) << r;
    EXPECT_EQ(c->comm_hash, ranks[0].comm->comm_hash) << r;
    for (int i = 0; i < n; i++) {
      ASSERT_EQ(c->peers[i].rank, i) << "rank " << r;
      ASSERT_EQ(std::string(c->peers[i].hostname), "thread-rank-" + std::to_string(i))
          << "rank " << r << " row " << i;
      if (r == 0) continue;
      EXPECT_EQ(memcmp(&c->boot->addrs[i], &ranks[1].comm->boot->addrs[i], sizeof(boot_addr)), 0);
      EXPECT_EQ(c->boot->addrs[i].family != 0, i != 0) << "rank " << r << " row " << i;
    }
  }
  for (auto& rk : ranks) FreeRank(rk, 1);
}

}  // namespace
