// test_boot_mp.cc - the bootstrap's rank-to-rank messages and its peer
// table in whole communicators (loomCommInitRankConfig) of process and
// thread ranks, run by the harness. The calls under test are internal
// (boot_send, boot_recv, the table in comm->peers), so this binary links
// the static library and reaches a communicator through comm_get.
//
// Every communicator has a 60 s timeout: a failure that came from its
// deadline would be loomTimeout, so loomRemoteError naming the right rank is
// proof that the failure was detected, without timing anything.
#include <signal.h>
#include <unistd.h>

#include <string>
#include <tuple>
#include <vector>

#include "harness.h"

// comm.h is C11 with _Atomic members; see tests/unit/boot_ranks.h.
#define _Atomic volatile
#define atomic_load_explicit(p, mo) __atomic_load_n((p), (mo))
#define memory_order_seq_cst __ATOMIC_SEQ_CST
extern "C" {
#include "core/bootstrap.h"
#include "core/checks.h"
#include "core/comm.h"
}
#undef _Atomic

namespace {

using harness::Ctx;
using harness::Mode;
using harness::names_rank;
using harness::Opts;

constexpr int kCommTimeoutMs = 60000;

loom_comm* Internal(loomComm_t h) {
  loom_comm* c = nullptr;
  EXPECT_EQ(comm_get(h, "test", &c), loomSuccess);
  return c;
}

Opts BootOpts(int timeout_s = 240) {
  Opts o;
  o.timeout_s = timeout_s;
  o.comm_timeout_ms = kCommTimeoutMs;
  return o;
}

// A message's bytes say who sent it to whom with which tag.
std::vector<uint8_t> Payload(int from, int to, uint32_t tag, size_t len) {
  std::vector<uint8_t> v(len);
  for (size_t i = 0; i < len; i++) v[i] = (uint8_t)(from * 31 + to * 7 + tag * 3 + i * 13);
  return v;
}

// What rank `from` sends rank `to` on tag t: small ones to everyone, a big
// one to the next rank, an empty one to the one before.
size_t PairLen(int from, int to, int n, uint32_t t) {
  if (t == 2) return to == (from + 1) % n ? (6u << 20) : 0;
  if (t == 3) return 0;
  return 64 + (size_t)(from * n + to);
}

class BootExchange : public ::testing::TestWithParam<harness::RanksMode> {};

// Every rank sends to every rank (itself too) on three tags, then receives
// them all, tags in reverse order: sends never wait for their receive.
TEST_P(BootExchange, EveryPairBothWays) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        loom_comm* comm = Internal(c.comm);
        ASSERT_NE(comm, nullptr);
        int me = c.rank, n = c.nranks;
        for (int p = 0; p < n; p++)
          for (uint32_t t : {1u, 2u, 3u}) {
            size_t len = PairLen(me, p, n, t);
            if (t == 2 && len == 0) continue;
            auto v = Payload(me, p, t, len);
            ASSERT_EQ(boot_send(comm, p, t, v.data(), len, nullptr), loomSuccess)
                << "to " << p << ": " << loomGetLastError(c.comm);
          }
        for (int p = n - 1; p >= 0; p--)
          for (uint32_t t : {3u, 2u, 1u}) {
            size_t len = PairLen(p, me, n, t), got = 0;
            if (t == 2 && len == 0) continue;
            std::vector<uint8_t> buf(len + 1);
            ASSERT_EQ(boot_recv(comm, p, t, buf.data(), buf.size(), &got, nullptr), loomSuccess)
                << "from " << p << ": " << loomGetLastError(c.comm);
            ASSERT_EQ(got, len) << "from " << p << " tag " << t;
            buf.resize(len);
            ASSERT_TRUE(buf == Payload(p, me, t, len)) << "from " << p << " tag " << t;
          }
      },
      BootOpts());
}

INSTANTIATE_TEST_SUITE_P(Ranks, BootExchange,
                         ::testing::Values(harness::RanksMode{5, Mode::Proc},
                                           harness::RanksMode{8, Mode::Thread}),
                         harness::ranks_mode_name);

// Rank 2 dies in the middle of an exchange (SIGKILL; thread ranks:
// loomCommAbort, which says no goodbye either). Rank 1 was waiting for its
// answer, rank 3 sends it a message bigger than any socket buffer, rank 0
// waits for a message from it over the star: each gets loomRemoteError
// naming rank 2, not a timeout.
class BootExchangeDeath : public ::testing::TestWithParam<Mode> {};

TEST_P(BootExchangeDeath, PeersGetRemoteErrorNamingIt) {
  const int victim = 2;
  Mode mode = GetParam();
  Opts o = BootOpts(120);
  if (mode == Mode::Proc) o.expect_killed = {victim};
  harness::run(
      4, mode,
      [mode](Ctx& c) {
        loom_comm* comm = Internal(c.comm);
        ASSERT_NE(comm, nullptr);
        char ping = 'p';
        if (c.rank == victim) {
          ASSERT_EQ(boot_recv(comm, 1, 7, &ping, 1, nullptr, nullptr), loomSuccess);
          if (mode == Mode::Proc) raise(SIGKILL);
          ASSERT_LOOM_OK(loomCommAbort(c.comm));
          c.comm = nullptr;
          return;
        }
        loomResult_t r = loomSuccess;
        if (c.rank == 1) {
          ASSERT_EQ(boot_send(comm, victim, 7, &ping, 1, nullptr), loomSuccess);
          r = boot_recv(comm, victim, 8, &ping, 1, nullptr, nullptr);  // never answered
        } else if (c.rank == 3) {
          std::vector<uint8_t> big(32u << 20, 3);
          for (int i = 0; i < 8 && r == loomSuccess; i++)  // until the death is seen
            r = boot_send(comm, victim, 9, big.data(), big.size(), nullptr);
        } else {
          r = boot_recv(comm, victim, 10, &ping, 1, nullptr, nullptr);
        }
        EXPECT_EQ(r, loomRemoteError) << "rank " << c.rank << ": " << loomGetLastError(c.comm);
        EXPECT_TRUE(names_rank(loomGetLastError(c.comm), victim)) << "rank " << c.rank;
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(Modes, BootExchangeDeath, ::testing::Values(Mode::Proc, Mode::Thread),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return std::string(harness::mode_name(info.param));
                         });

// Many ranks: the table that came down the tree is right on every rank.
// Each rank all-gathers what only it knows (its pid, its process token,
// the communicator's hash as it got it) and checks its own table row by
// row against it.
struct Facts {
  int32_t pid;
  int32_t rank;
  uint64_t token;
  uint64_t comm_hash;
};

class BootTable : public ::testing::TestWithParam<harness::RanksMode> {};

TEST_P(BootTable, EveryRankHasTheWholeTable) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        loom_comm* comm = Internal(c.comm);
        ASSERT_NE(comm, nullptr);
        ASSERT_NE(comm->peers, nullptr);
        Facts mine{(int32_t)getpid(), c.rank, process_token_get(), comm->comm_hash};
        std::vector<Facts> all(c.nranks);
        ASSERT_EQ(boot_allgather(comm, &mine, sizeof(mine), all.data(), nullptr), loomSuccess)
            << loomGetLastError(c.comm);
        for (int i = 0; i < c.nranks; i++) {
          const peer_info& row = comm->peers[i];
          ASSERT_EQ(all[i].rank, i);
          ASSERT_EQ(row.rank, i) << "rank " << c.rank << " row " << i;
          ASSERT_EQ(row.pid, all[i].pid) << "rank " << c.rank << " row " << i;
          ASSERT_EQ(row.process_token, all[i].token) << "rank " << c.rank << " row " << i;
          ASSERT_EQ(row.host_id, comm->peers[c.rank].host_id) << "one host";
          ASSERT_EQ(all[i].comm_hash, comm->comm_hash) << "rank " << i << "'s hash differs";
        }
      },
      BootOpts(600));
}

INSTANTIATE_TEST_SUITE_P(Ranks, BootTable,
                         ::testing::Values(harness::RanksMode{16, Mode::Proc},
                                           harness::RanksMode{64, Mode::Thread}),
                         harness::ranks_mode_name);

}  // namespace
