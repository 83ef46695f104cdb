// test_hier.cc - communicators that span hosts, made on this machine with
// LOOM_HOSTID (each rank names its host; ranks of different hosts talk over
// the socket transport, ranks of one host over shared memory), and the
// hierarchical all-reduce (src/collectives/hier.c) on them.
//
// HierHosts.*: the hierarchical plan forced (LOOM_ALGO=allreduce:hier) on
// hosts numbered in blocks and round robin, every datatype class, op,
// placement and count up to 2^20+3, checked exactly; the INFO log shows
// which peers a rank connected to, which is how the plan is told apart from
// a flat one (a flat ring of 2 x 2 never joins rank 0 and rank 2). The tuner
// takes the plan by itself across hosts (fixed tuning constants, so the
// choice does not depend on this machine's load), and an uneven layout,
// which the plan cannot serve, falls back to a flat plan with correct
// results. HierTopoFile.*: the same hosts declared by topology files
// (LOOM_TOPO_FILE, docs/topology.md) instead of LOOM_HOSTID.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <ostream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "test_collectives.h"

namespace {

using colltest::Coll;
using colltest::make;
using colltest::Place;
using colltest::Runner;
using harness::Ctx;
using harness::Mode;
using Env = std::vector<std::pair<std::string, std::string>>;

// host(rank) names each rank's host; body runs after init.
void run_hosts(int n, const std::function<int(int)>& host, const Env& env,
               const std::function<void(Ctx&)>& body) {
  harness::Opts o;
  o.init = harness::Init::None;
  o.timeout_s = 280;
  o.env = env;
  harness::run(
      n, Mode::Proc,
      [&](Ctx& c) {
        // Before the library reads its variables (share_id is the first call).
        setenv("LOOM_HOSTID", ("host" + std::to_string(host(c.rank))).c_str(), 1);
        loomUniqueId id;
        harness::share_id(c, &id);
        if (::testing::Test::HasFatalFailure()) return;
        loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
        cfg.timeoutMs = 60000;
        ASSERT_LOOM_OK(loomCommInitRankConfig(&c.comm, c.nranks, id, c.rank, &cfg));
        body(c);
      },
      o);
}

Env log_env(const std::string& prefix) {
  Env e = harness::log_env(prefix, "INIT,TUNE");
  e.push_back({"LOOM_DIRECT", "0"});
  return e;
}

// The peers this rank connected to, with the transport of each.
std::set<std::pair<int, std::string>> peers_in_log(const std::string& log) {
  std::set<std::pair<int, std::string>> out;
  std::regex over("peer (\\d+) over (\\w+)");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), over); it != std::sregex_iterator();
       ++it)
    out.insert({std::stoi((*it)[1].str()), (*it)[2].str()});
  return out;
}

// All-reduce of every datatype class, op (premul, avg), placement and count.
void allreduce_body(const Ctx& c, const std::string& label) {
  const loomDataType_t types[] = {loomFloat32, loomInt8, loomBfloat16, loomFloat64, loomUint32};
  const Place places[] = {Place::Out, Place::In, Place::Mixed};
  Runner r(c, label);
  int i = 0;
  for (size_t count : colltest::kCounts)
    for (int op = 0; op < colltest::kNumOps && r.ok(); op++, i++) {
      if (count == colltest::kBigCount && op % 2) continue;
      r.run(make(Coll::AllReduce, types[i % 5], op, count, 0, places[i % 3]));
    }
}

struct Layout {
  const char* name;
  int hosts, per_host;
  bool round_robin;  // host = rank % hosts, else rank / per_host
};

// gtest would otherwise print the bytes of the struct, padding included.
void PrintTo(const Layout& l, std::ostream* os) {
  *os << l.name;
}

class HierHosts : public ::testing::TestWithParam<Layout> {};

TEST_P(HierHosts, ForcedPlanIsCorrectAndCrossesOnlyToCounterparts) {
  const Layout l = GetParam();
  const int n = l.hosts * l.per_host;
  auto host = [l](int r) { return l.round_robin ? r % l.hosts : r / l.per_host; };
  Env env = log_env("/tmp/loomtest-hier-" + harness::unique_tag() + "-");
  env.push_back({"LOOM_ALGO", "allreduce:hier"});
  run_hosts(n, host, env, [&](Ctx& c) {
    allreduce_body(c, std::string("hier, ") + l.name);
    std::string log = harness::read_file(harness::own_log());
    unlink(harness::own_log().c_str());
    EXPECT_EQ(log.find("cannot serve"), std::string::npos) << "the plan fell back:\n" << log;
    auto peers = peers_in_log(log);
    EXPECT_FALSE(peers.empty()) << log;
    // Index of a rank among its host's ranks (ranks in order).
    auto local_index = [&](int r) {
      int k = 0;
      for (int q = 0; q < r; q++) k += host(q) == host(r);
      return k;
    };
    for (const auto& p : peers) {
      bool same = host(p.first) == host(c.rank);
      EXPECT_EQ(p.second, same ? "shm" : "socket") << "peer " << p.first;
      if (!same) {
        EXPECT_EQ(local_index(p.first), local_index(c.rank))
            << "rank " << c.rank << " crossed to peer " << p.first << ", not its counterpart";
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, HierHosts,
    ::testing::Values(Layout{"blocks2x2", 2, 2, false}, Layout{"roundrobin2x2", 2, 2, true},
                      Layout{"blocks3x2", 3, 2, false}, Layout{"blocks2x3", 2, 3, false}),
    [](const ::testing::TestParamInfo<Layout>& i) { return std::string(i.param.name); });

// Fixed constants: shared memory 5 GB/s and 2 us a step, the network
// 1.25 GB/s and 25 us a message.
std::string tuning_file() {
  std::string path = "/tmp/loomtest-hier-tuning-" + harness::unique_tag() + ".txt";
  std::ofstream f(path);
  f << "step_us 2\ncopy_gbps 5\nreduce_gbps 10\nncpus 2\ncma_gbps 3\ncma_us 1\nnet_gbps "
       "1.25\nnet_us 25\n";
  return path;
}

// Two hosts of two: from 8 bytes to 2 MiB the tuner's all-reduce joins rank
// 0 to rank 1 (its host) and rank 2 (its counterpart) only; a flat ring or
// tree would join it to rank 3 or leave rank 2 out.
TEST(HierTuner, TakesTheHierarchicalPlanAcrossHosts) {
  const std::string tf = tuning_file();
  Env env = log_env("/tmp/loomtest-hiertune-" + harness::unique_tag() + "-");
  env.push_back({"LOOM_TUNING_FILE", tf});
  run_hosts(
      4, [](int r) { return r / 2; }, env,
      [&](Ctx& c) {
        for (size_t count = 2; count <= (1u << 20); count *= 8) {
          std::vector<float> v(count, float(c.rank + 1));
          ASSERT_LOOM_OK(
              loomAllReduce(v.data(), v.data(), count, loomFloat32, loomSum, c.comm, nullptr));
          for (float x : v) ASSERT_EQ(x, 10.0f);
        }
        std::string log = harness::read_file(harness::own_log());
        unlink(harness::own_log().c_str());
        std::set<int> peers;
        for (const auto& p : peers_in_log(log)) peers.insert(p.first);
        std::set<int> want = {c.rank ^ 1, (c.rank + 2) % 4};
        EXPECT_EQ(peers, want) << log;
      });
  unlink(tf.c_str());
}

// Three ranks on two hosts cannot split evenly: a forced hierarchical plan
// falls back (one INFO line) and the results stay right.
TEST(HierTuner, UnevenHostsFallBackToAFlatPlan) {
  Env env = log_env("/tmp/loomtest-hieruneven-" + harness::unique_tag() + "-");
  env.push_back({"LOOM_ALGO", "allreduce:hier"});
  run_hosts(
      3, [](int r) { return r < 2 ? 0 : 1; }, env,
      [&](Ctx& c) {
        allreduce_body(c, "hier forced, uneven hosts");
        std::string log = harness::read_file(harness::own_log());
        unlink(harness::own_log().c_str());
        EXPECT_NE(log.find("LOOM_ALGO asks for 'hier', which cannot serve allreduce"),
                  std::string::npos)
            << log;
      });
}

// Two "hosts" of this machine declared by topology files (one file per
// rank, written by the rank itself before the library reads its settings):
// every collective and a group of them give right answers; each rank reads
// its host from the file (INFO log), connects to its host's rank over shm
// and to the other host's over sockets, rank 0 sees 4 ranks on 2 hosts, and
// the hierarchical all-reduce, which needs those two levels, is served.
TEST(HierTopoFile, TwoHostsOfOneMachineTalkOverSockets) {
  const std::string prefix = "/tmp/loomtest-topofile-" + harness::unique_tag() + "-";
  harness::Opts o;
  o.init = harness::Init::None;
  o.timeout_s = 280;
  o.env = log_env(prefix);
  o.env.push_back({"LOOM_ALGO", "allreduce:hier"});
  harness::run(
      4, Mode::Proc,
      [&](Ctx& c) {
        const std::string host = "topo-host-" + std::to_string(c.rank / 2);
        const std::string file = harness::own_log() + ".topo";
        {
          std::ofstream f(file);
          f << "# rank " << c.rank << "\nhost " << host << "   # two ranks a host\n";
        }
        setenv("LOOM_TOPO_FILE", file.c_str(), 1);  // before the library reads its settings
        loomUniqueId id;
        harness::share_id(c, &id);
        if (::testing::Test::HasFatalFailure()) return;
        loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
        cfg.timeoutMs = 60000;
        ASSERT_LOOM_OK(loomCommInitRankConfig(&c.comm, c.nranks, id, c.rank, &cfg));
        unlink(file.c_str());
        Runner r(c, "hosts from topology files");
        for (int ci = 0; ci < colltest::kNumColls && r.ok(); ci++)
          for (size_t count : {(size_t)1, (size_t)1000, (size_t)70001})
            r.run(make((Coll)ci, loomFloat32, loomSum, count, c.nranks - 1, Place::Out));
        colltest::group_body(c, "hosts from topology files");
        std::string log = harness::read_file(harness::own_log());
        unlink(harness::own_log().c_str());
        EXPECT_NE(log.find("host " + host + " (given)"), std::string::npos) << log;
        EXPECT_EQ(log.find("cannot serve"), std::string::npos) << "hier fell back:\n" << log;
        if (c.rank == 0) {
          EXPECT_NE(log.find("4 ranks on 2 hosts"), std::string::npos) << log;
        }
        int sockets = 0;
        for (const auto& p : peers_in_log(log)) {
          bool same = p.first / 2 == c.rank / 2;
          EXPECT_EQ(p.second, same ? "shm" : "socket") << "peer " << p.first;
          sockets += p.second == "socket";
        }
        EXPECT_GT(sockets, 0) << "no peer of the other host over sockets:\n" << log;
      },
      o);
}

}  // namespace
