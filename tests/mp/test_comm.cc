// test_comm.cc - communicator lifecycle through the public API: versions and
// error strings; blocking, non-blocking, all-in-one-process and
// environment-based initialisation; split; finalize, destroy and abort; the
// last-error text. Every communicator made is checked by its identity
// (count, rank, device) and by an all-reduce whose result depends on exactly
// which ranks are in it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "harness.h"

namespace {

using harness::Ctx;
using harness::Init;
using harness::Mode;
using harness::Opts;

// A short hang guard: every test here finishes in well under a second per
// rank when the library works.
Opts quick_opts() {
  Opts o;
  o.timeout_s = 90;
  o.comm_timeout_ms = 30000;
  return o;
}

std::string mode_ranks_name(Mode m, int n) {
  return std::string(harness::mode_name(m)) + std::to_string(n);
}

// On a non-blocking communicator (config.blocking = 0) a call may return
// loomInProgress; loomCommGetAsyncError then says when it has finished.
// Bounded (a hang guard). On a blocking one, r as it is.
loomResult_t settle(loomComm_t comm, loomResult_t r) {
  if (r != loomInProgress) return r;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  loomResult_t async = loomInProgress;
  while (async == loomInProgress && std::chrono::steady_clock::now() < end) {
    if (loomCommGetAsyncError(comm, &async) != loomSuccess) return loomInternalError;
    if (async == loomInProgress) usleep(1000);
  }
  return async;
}

// Checks that comm has count ranks, that this rank is rank there, that it
// is a host rank, and that an all-reduce over it sums exactly its members.
// members[i] is the label (any distinct small integer) of the rank with rank
// i in comm; my_label is this rank's.
void check_members(loomComm_t comm, const std::vector<int>& members, int my_label) {
  ASSERT_NE(comm, nullptr);
  int count = -1, rank = -1, dev = 12345;
  ASSERT_LOOM_OK(loomCommCount(comm, &count));
  ASSERT_LOOM_OK(loomCommUserRank(comm, &rank));
  ASSERT_LOOM_OK(loomCommCuDevice(comm, &dev));
  ASSERT_EQ(count, (int)members.size());
  auto it = std::find(members.begin(), members.end(), my_label);
  ASSERT_NE(it, members.end()) << "label " << my_label << " is not a member";
  EXPECT_EQ(rank, (int)(it - members.begin())) << "label " << my_label;
  EXPECT_EQ(dev, -1) << "host ranks report device -1";
  // Each rank writes its label + 1 at its own rank's slot: the sum is the
  // whole rank -> label table, which checks membership and order at once.
  std::vector<int64_t> v((size_t)count, 0);
  v[(size_t)rank] = my_label + 1;
  ASSERT_LOOM_OK(
      settle(comm, loomAllReduce(v.data(), v.data(), v.size(), loomInt64, loomSum, comm, nullptr)));
  for (int i = 0; i < count; i++)
    EXPECT_EQ(v[(size_t)i], members[(size_t)i] + 1) << "new rank " << i;
}

// An all-reduce of every rank's (rank + 1) over count int32 elements.
void check_allreduce(loomComm_t comm, int rank, int nranks, size_t count = 1000) {
  std::vector<int32_t> send(count, rank + 1), recv(count, -7);
  ASSERT_LOOM_OK(settle(
      comm, loomAllReduce(send.data(), recv.data(), count, loomInt32, loomSum, comm, nullptr)));
  const int32_t want = nranks * (nranks + 1) / 2;
  for (size_t i = 0; i < count; i++) ASSERT_EQ(recv[i], want) << "element " << i;
}

// A barrier outside Loom (a file that each rank appends one byte to), for
// ordering ranks without depending on the communicator under test. Bounded:
// false when not every rank arrived in time.
bool oob_barrier(const Ctx& c, const char* tag) {
  std::string path = c.id_file + "." + tag + ".bar";
  int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_APPEND, 0600);
  if (fd < 0) return false;
  char one = 1;
  bool ok = write(fd, &one, 1) == 1;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  struct stat st;
  while (ok && fstat(fd, &st) == 0 && st.st_size < c.nranks) {
    if (std::chrono::steady_clock::now() > end) ok = false;
    usleep(1000);
  }
  // Everyone has opened the file once it reached nranks bytes: a second
  // byte each, and whoever sees 2 * nranks removes it.
  if (ok && write(fd, &one, 1) == 1 && fstat(fd, &st) == 0 && st.st_size >= 2 * c.nranks)
    unlink(path.c_str());
  close(fd);
  return ok;
}

std::vector<int> iota_vec(int n) {
  std::vector<int> v((size_t)n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// ---- Versions and error strings ----------------------------------------------

TEST(CommVersion, MatchesHeader) {
  int v = -1;
  ASSERT_LOOM_OK(loomGetVersion(&v));
  EXPECT_EQ(v, LOOM_VERSION(LOOM_MAJOR, LOOM_MINOR, LOOM_PATCH));
  EXPECT_EQ(LOOM_VERSION(1, 2, 3), 10203);
}

TEST(CommErrors, ErrorStringNeverNull) {
  for (int r = 0; r <= (int)loomNumResults; r++)
    EXPECT_NE(loomGetErrorString((loomResult_t)r), nullptr) << "code " << r;
  for (int r : {-1, -1000, 10, 100, 0x7fff, INT_MAX, INT_MIN})
    EXPECT_NE(loomGetErrorString((loomResult_t)r), nullptr) << "code " << r;
}

// ---- Blocking init ------------------------------------------------------------

class CommInit : public ::testing::TestWithParam<std::tuple<int, Mode>> {};

std::string init_name(const ::testing::TestParamInfo<CommInit::ParamType>& info) {
  return mode_ranks_name(std::get<1>(info.param), std::get<0>(info.param));
}

// loomCommInitRank, without a config.
TEST_P(CommInit, InitRank) {
  auto [n, mode] = GetParam();
  Opts o = quick_opts();
  o.init = Init::None;
  harness::run(
      n, mode,
      [](Ctx& c) {
        loomUniqueId id;
        harness::share_id(c, &id);
        if (::testing::Test::HasFatalFailure()) return;
        loomComm_t comm = nullptr;
        ASSERT_LOOM_OK(loomCommInitRank(&comm, c.nranks, id, c.rank));
        shim::CommGuard g(comm);
        check_members(comm, iota_vec(c.nranks), c.rank);
        check_allreduce(comm, c.rank, c.nranks);
      },
      o);
}

// loomCommInitRankConfig, through the harness (blocking is the default).
TEST_P(CommInit, InitRankConfig) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        check_members(c.comm, iota_vec(c.nranks), c.rank);
        check_allreduce(c.comm, c.rank, c.nranks);
      },
      quick_opts());
}

// An explicit blocking config with a name and a timeout.
TEST_P(CommInit, InitRankConfigExplicitBlocking) {
  auto [n, mode] = GetParam();
  Opts o = quick_opts();
  o.init = Init::None;
  harness::run(
      n, mode,
      [](Ctx& c) {
        loomUniqueId id;
        harness::share_id(c, &id);
        if (::testing::Test::HasFatalFailure()) return;
        loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
        cfg.blocking = 1;
        cfg.timeoutMs = 30000;
        cfg.commName = "explicit-blocking";
        loomComm_t comm = nullptr;
        ASSERT_LOOM_OK(loomCommInitRankConfig(&comm, c.nranks, id, c.rank, &cfg));
        shim::CommGuard g(comm);
        check_members(comm, iota_vec(c.nranks), c.rank);
        check_allreduce(comm, c.rank, c.nranks);
      },
      o);
}

// config.blocking = 0: loomInProgress (or loomSuccess), then the async error
// reaches loomSuccess, and the communicator works (its collectives, too,
// may return loomInProgress: API.md).
TEST_P(CommInit, NonBlocking) {
  auto [n, mode] = GetParam();
  Opts o = quick_opts();
  o.init = Init::None;
  harness::run(
      n, mode,
      [](Ctx& c) {
        loomUniqueId id;
        harness::share_id(c, &id);
        if (::testing::Test::HasFatalFailure()) return;
        loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        cfg.timeoutMs = 30000;
        loomComm_t comm = nullptr;
        loomResult_t r = loomCommInitRankConfig(&comm, c.nranks, id, c.rank, &cfg);
        ASSERT_TRUE(r == loomInProgress || r == loomSuccess)
            << "non-blocking init returned " << loomGetErrorString(r) << ": "
            << loomGetLastError(NULL);
        ASSERT_NE(comm, nullptr) << "non-blocking init must hand out the communicator at once";
        shim::CommGuard g(comm);
        loomResult_t async = loomInProgress;
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);  // hang guard
        while (std::chrono::steady_clock::now() < end) {
          ASSERT_LOOM_OK(loomCommGetAsyncError(comm, &async));
          if (async != loomInProgress) break;
          usleep(1000);
        }
        ASSERT_EQ(async, loomSuccess)
            << loomGetErrorString(async) << ": " << loomGetLastError(comm);
        check_members(comm, iota_vec(c.nranks), c.rank);
        check_allreduce(comm, c.rank, c.nranks);
      },
      o);
}

// A call on a non-blocking communicator whose init is still running waits
// for the init to end (on the communicator's condition, no polling), then
// runs: the all-reduce right after init is right on every rank. Rank 0
// calls only after the others have started theirs (the out-of-band
// barrier), so their inits cannot have ended first: they need rank 0.
TEST_P(CommInit, NonBlockingThenCallAtOnce) {
  auto [n, mode] = GetParam();
  if (n < 2) GTEST_SKIP() << "one rank's init needs no peer: nothing to wait for";
  Opts o = quick_opts();
  o.init = Init::None;
  harness::run(
      n, mode,
      [](Ctx& c) {
        loomUniqueId id;
        harness::share_id(c, &id);
        if (::testing::Test::HasFatalFailure()) return;
        loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        cfg.timeoutMs = harness::kNeverMs;
        loomComm_t comm = nullptr;
        if (c.rank == 0) {
          ASSERT_TRUE(oob_barrier(c, "nbcall"));
        }
        loomResult_t r = loomCommInitRankConfig(&comm, c.nranks, id, c.rank, &cfg);
        ASSERT_TRUE(r == loomInProgress || r == loomSuccess) << loomGetLastError(NULL);
        shim::CommGuard g(comm);
        std::vector<int32_t> v(1000, c.rank + 1);
        if (c.rank != 0) {
          loomResult_t early = loomCommGetAsyncError(comm, &r);
          ASSERT_LOOM_OK(early);
          EXPECT_EQ(r, loomInProgress) << "rank " << c.rank << "'s init ended without rank 0";
          std::thread late([&c] { EXPECT_TRUE(oob_barrier(c, "nbcall")); });
          r = loomAllReduce(v.data(), v.data(), v.size(), loomInt32, loomSum, comm, nullptr);
          late.join();
        } else {
          r = loomAllReduce(v.data(), v.data(), v.size(), loomInt32, loomSum, comm, nullptr);
        }
        ASSERT_LOOM_OK(settle(comm, r));
        EXPECT_EQ(v[999], c.nranks * (c.nranks + 1) / 2);
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CommInit,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 8),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         init_name);

// ---- loomCommInitAll ---------------------------------------------------------

class CommInitAll : public ::testing::TestWithParam<int> {};

// ndev host ranks in this one process, then an all-reduce on each comm from
// its own thread, then again from one thread inside a group (the NCCL
// single-thread multi-rank pattern), then send/receive in a ring from one
// thread inside a group.
TEST_P(CommInitAll, ThreadsAndOneThreadGroup) {
  const int n = GetParam();
  Opts o = quick_opts();
  o.init = Init::None;
  harness::run(
      1, Mode::Proc,
      [n](Ctx&) {
        std::vector<loomComm_t> comms((size_t)n, nullptr);
        ASSERT_LOOM_OK(loomCommInitAll(comms.data(), n, nullptr));
        std::vector<std::unique_ptr<shim::CommGuard>> guards;
        for (int i = 0; i < n; i++) guards.emplace_back(new shim::CommGuard(comms[(size_t)i]));
        for (int i = 0; i < n; i++) {
          int count = -1, rank = -1, dev = 0;
          ASSERT_LOOM_OK(loomCommCount(comms[(size_t)i], &count));
          ASSERT_LOOM_OK(loomCommUserRank(comms[(size_t)i], &rank));
          ASSERT_LOOM_OK(loomCommCuDevice(comms[(size_t)i], &dev));
          EXPECT_EQ(count, n);
          EXPECT_EQ(rank, i);
          EXPECT_EQ(dev, -1);
        }
        // One thread per comm.
        {
          std::vector<std::thread> th;
          for (int i = 0; i < n; i++)
            th.emplace_back([&, i] { check_members(comms[(size_t)i], iota_vec(n), i); });
          for (auto& t : th) t.join();
        }
        if (::testing::Test::HasFailure()) return;
        // One thread, every comm, one group. Large enough to need many FIFO
        // round trips, so the ranks must really progress together.
        const size_t count = (1u << 20) + 3;
        std::vector<std::vector<int32_t>> bufs((size_t)n);
        for (int i = 0; i < n; i++) bufs[(size_t)i].assign(count, i + 1);
        ASSERT_LOOM_OK(loomGroupStart());
        for (int i = 0; i < n; i++)
          ASSERT_LOOM_OK(loomAllReduce(bufs[(size_t)i].data(), bufs[(size_t)i].data(), count,
                                       loomInt32, loomSum, comms[(size_t)i], nullptr));
        ASSERT_LOOM_OK(loomGroupEnd());
        for (int i = 0; i < n; i++)
          for (size_t k = 0; k < count; k++)
            ASSERT_EQ(bufs[(size_t)i][k], n * (n + 1) / 2) << "comm " << i << " element " << k;
        // A ring of sends and receives, again from one thread.
        std::vector<std::vector<int32_t>> in((size_t)n, std::vector<int32_t>(count, -1));
        ASSERT_LOOM_OK(loomGroupStart());
        for (int i = 0; i < n; i++) {
          for (size_t k = 0; k < count; k += 4096) bufs[(size_t)i][k] = i * 1000 + (int)(k % 1000);
          ASSERT_LOOM_OK(loomSend(bufs[(size_t)i].data(), count, loomInt32, (i + 1) % n,
                                  comms[(size_t)i], nullptr));
          ASSERT_LOOM_OK(loomRecv(in[(size_t)i].data(), count, loomInt32, (i + n - 1) % n,
                                  comms[(size_t)i], nullptr));
        }
        ASSERT_LOOM_OK(loomGroupEnd());
        for (int i = 0; i < n; i++)
          ASSERT_EQ(in[(size_t)i], bufs[(size_t)((i + n - 1) % n)]) << "ring receive on comm " << i;
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CommInitAll, ::testing::Range(1, 9),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "n" + std::to_string(i.param);
                         });

// A devlist naming a device that does not exist fails at once, naming the
// entry: loomInvalidUsage where there is no CUDA driver at all (device 0 is
// refused), loomInvalidArgument where there is one (device 1 << 20 is).
TEST(CommInitAllArgs, DevlistOfMissingDevicesIsRefused) {
  loomComm_t comms[2] = {nullptr, nullptr};
  int devs[2] = {0, 1 << 20};
  loomResult_t r = loomCommInitAll(comms, 2, devs);
  std::string err = loomGetLastError(NULL);
  if (r == loomInvalidUsage) {
    EXPECT_NE(err.find("devlist[0] = 0: CUDA device 0: no CUDA driver"), std::string::npos) << err;
  } else {
    EXPECT_EQ(r, loomInvalidArgument) << err;
    EXPECT_NE(err.find("devlist[1] = 1048576"), std::string::npos) << err;
  }
  EXPECT_EQ(comms[0], nullptr);
  EXPECT_EQ(comms[1], nullptr);
}

// ---- loomCommInitFromEnv -----------------------------------------------------

using Env = std::vector<std::pair<std::string, std::string>>;

// Every variable any family reads, set empty (the library treats empty as
// unset): a clean slate whatever the environment the tests run in.
Env clear_all_families() {
  Env e;
  for (const char* v :
       {"LOOM_RANK", "LOOM_WORLD_SIZE", "LOOM_ROOT", "RANK", "WORLD_SIZE", "MASTER_ADDR",
        "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
        "SLURM_PROCID", "SLURM_NTASKS"})
    e.emplace_back(v, "");
  return e;
}

void set_env(Env& e, const std::string& k, const std::string& v) {
  for (auto& kv : e)
    if (kv.first == k) {
      kv.second = v;
      return;
    }
  e.emplace_back(k, v);
}

class CommFromEnv : public ::testing::TestWithParam<int> {};

// The harness's own FromEnv: LOOM_RANK / LOOM_WORLD_SIZE / LOOM_ROOT.
TEST_P(CommFromEnv, LoomVariables) {
  Opts o = quick_opts();
  o.init = Init::FromEnv;
  harness::run(
      GetParam(), Mode::Proc,
      [](Ctx& c) {
        check_members(c.comm, iota_vec(c.nranks), c.rank);
        check_allreduce(c.comm, c.rank, c.nranks);
      },
      o);
}

// A family of launcher variables: rank_var is set per rank by the body (it
// differs between ranks, Opts.env cannot carry it); the rest through Opts.env.
struct Family {
  const char* name;
  const char* rank_var;
  const char* size_var;
  bool master;  // rendezvous from MASTER_ADDR/MASTER_PORT, else LOOM_ROOT
};

const Family kFamilies[] = {
    {"torchrun", "RANK", "WORLD_SIZE", true},
    {"ompi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", false},
    {"pmi", "PMI_RANK", "PMI_SIZE", true},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", false},
    {"slurm_master", "SLURM_PROCID", "SLURM_NTASKS", true},
};

class CommFromEnvFamily : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(CommFromEnvFamily, InitAndAllReduce) {
  auto [fi, n] = GetParam();
  const Family f = kFamilies[fi];
  Opts o = quick_opts();
  o.init = Init::None;
  o.env = clear_all_families();
  // Launchers other than loomrun do not set a secret: the ranks must agree
  // on one by themselves.
  set_env(o.env, "LOOM_SECRET", "");
  set_env(o.env, f.size_var, std::to_string(n));
  int port = harness::free_port();
  if (f.master) {
    set_env(o.env, "MASTER_ADDR", "127.0.0.1");
    set_env(o.env, "MASTER_PORT", std::to_string(port));
  } else {
    set_env(o.env, "LOOM_ROOT", "127.0.0.1:" + std::to_string(port));
  }
  harness::run(
      n, Mode::Proc,
      [f](Ctx& c) {
        ASSERT_EQ(setenv(f.rank_var, std::to_string(c.rank).c_str(), 1), 0);
        loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
        cfg.timeoutMs = 30000;
        loomComm_t comm = nullptr;
        ASSERT_LOOM_OK(loomCommInitFromEnv(&comm, &cfg));
        shim::CommGuard g(comm);
        check_members(comm, iota_vec(c.nranks), c.rank);
        check_allreduce(comm, c.rank, c.nranks);
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CommFromEnvFamily,
                         ::testing::Combine(::testing::Range(0, (int)(sizeof(kFamilies) /
                                                                      sizeof(kFamilies[0]))),
                                            ::testing::Values(1, 2, 4)),
                         [](const ::testing::TestParamInfo<CommFromEnvFamily::ParamType>& i) {
                           return std::string(kFamilies[std::get<0>(i.param)].name) + "_" +
                                  std::to_string(std::get<1>(i.param));
                         });

INSTANTIATE_TEST_SUITE_P(Ranks, CommFromEnv, ::testing::Values(1, 2, 3, 5, 8),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "proc" + std::to_string(i.param);
                         });

// The families are read in API.md's order: with several present, the first
// one wins. Here RANK/WORLD_SIZE is the first present; the later families
// say the opposite rank order.
TEST(CommFromEnvOrder, TorchrunBeforeOmpiPmiSlurm) {
  const int n = 3;
  Opts o = quick_opts();
  o.init = Init::None;
  o.env = clear_all_families();
  set_env(o.env, "WORLD_SIZE", std::to_string(n));
  set_env(o.env, "OMPI_COMM_WORLD_SIZE", std::to_string(n));
  set_env(o.env, "PMI_SIZE", std::to_string(n));
  set_env(o.env, "SLURM_NTASKS", std::to_string(n));
  set_env(o.env, "MASTER_ADDR", "127.0.0.1");
  set_env(o.env, "MASTER_PORT", std::to_string(harness::free_port()));
  harness::run(
      n, Mode::Proc,
      [](Ctx& c) {
        std::string reversed = std::to_string(c.nranks - 1 - c.rank);
        setenv("RANK", std::to_string(c.rank).c_str(), 1);
        setenv("OMPI_COMM_WORLD_RANK", reversed.c_str(), 1);
        setenv("PMI_RANK", reversed.c_str(), 1);
        setenv("SLURM_PROCID", reversed.c_str(), 1);
        loomComm_t comm = nullptr;
        ASSERT_LOOM_OK(loomCommInitFromEnv(&comm, nullptr));
        shim::CommGuard g(comm);
        check_members(comm, iota_vec(c.nranks), c.rank);
      },
      o);
}

// LOOM_RANK/LOOM_WORLD_SIZE/LOOM_ROOT (set by the harness) come before
// RANK/WORLD_SIZE, which here say the opposite rank order.
TEST(CommFromEnvOrder, LoomBeforeTorchrun) {
  const int n = 3;
  Opts o = quick_opts();
  o.init = Init::None;
  o.env = {{"WORLD_SIZE", std::to_string(n)}};
  harness::run(
      n, Mode::Proc,
      [](Ctx& c) {
        setenv("RANK", std::to_string(c.nranks - 1 - c.rank).c_str(), 1);
        loomComm_t comm = nullptr;
        ASSERT_LOOM_OK(loomCommInitFromEnv(&comm, nullptr));
        shim::CommGuard g(comm);
        check_members(comm, iota_vec(c.nranks), c.rank);
      },
      o);
}

// No family complete: loomInvalidUsage, naming the variables it looked for.
TEST(CommFromEnvErrors, MissingRankAndSize) {
  Opts o = quick_opts();
  o.init = Init::None;
  o.env = clear_all_families();
  harness::run(
      1, Mode::Proc,
      [](Ctx&) {
        loomComm_t comm = nullptr;
        EXPECT_EQ(loomCommInitFromEnv(&comm, nullptr), loomInvalidUsage);
        std::string why = loomGetLastError(NULL);
        EXPECT_NE(why.find("LOOM_RANK"), std::string::npos) << why;
        EXPECT_NE(why.find("LOOM_WORLD_SIZE"), std::string::npos) << why;
        EXPECT_EQ(comm, nullptr);
      },
      o);
}

// A rank without a size is not a family: still loomInvalidUsage.
TEST(CommFromEnvErrors, RankWithoutSize) {
  Opts o = quick_opts();
  o.init = Init::None;
  o.env = clear_all_families();
  set_env(o.env, "LOOM_RANK", "0");
  set_env(o.env, "LOOM_ROOT", "127.0.0.1:" + std::to_string(harness::free_port()));
  harness::run(
      1, Mode::Proc,
      [](Ctx&) {
        loomComm_t comm = nullptr;
        EXPECT_EQ(loomCommInitFromEnv(&comm, nullptr), loomInvalidUsage);
        std::string why = loomGetLastError(NULL);
        EXPECT_NE(why.find("LOOM_WORLD_SIZE"), std::string::npos) << why;
      },
      o);
}

// Rank and size but no rendezvous address: an error that says what is
// missing (API.md: the last error names its cause).
TEST(CommFromEnvErrors, MissingRoot) {
  Opts o = quick_opts();
  o.init = Init::None;
  o.env = clear_all_families();
  set_env(o.env, "LOOM_RANK", "0");
  set_env(o.env, "LOOM_WORLD_SIZE", "1");
  harness::run(
      1, Mode::Proc,
      [](Ctx&) {
        loomComm_t comm = nullptr;
        EXPECT_NE(loomCommInitFromEnv(&comm, nullptr), loomSuccess);
        std::string why = loomGetLastError(NULL);
        EXPECT_TRUE(why.find("LOOM_ROOT") != std::string::npos ||
                    why.find("MASTER_ADDR") != std::string::npos)
            << why;
      },
      o);
}

// ---- loomCommSplit -----------------------------------------------------------

class CommSplit : public ::testing::TestWithParam<std::tuple<int, Mode>> {};

std::string split_name(const ::testing::TestParamInfo<CommSplit::ParamType>& info) {
  return mode_ranks_name(std::get<1>(info.param), std::get<0>(info.param));
}

// The old ranks with color c, ordered by (key, old rank).
std::vector<int> expected_members(int n, int c, int (*color)(int, int), int (*key)(int, int)) {
  std::vector<int> m;
  for (int p = 0; p < n; p++)
    if (color(p, n) == c) m.push_back(p);
  std::stable_sort(m.begin(), m.end(), [&](int a, int b) { return key(a, n) < key(b, n); });
  return m;
}

void split_and_check(const Ctx& c, int (*color)(int, int), int (*key)(int, int),
                     loomConfig_t* cfg) {
  loomComm_t sub = reinterpret_cast<loomComm_t>(0x1);  // must be overwritten
  int col = color(c.rank, c.nranks);
  ASSERT_LOOM_OK(loomCommSplit(c.comm, col, key(c.rank, c.nranks), &sub, cfg));
  if (col == LOOM_SPLIT_NOCOLOR) {
    EXPECT_EQ(sub, nullptr) << "LOOM_SPLIT_NOCOLOR gives a NULL communicator";
    return;
  }
  shim::CommGuard g(sub);
  check_members(sub, expected_members(c.nranks, col, color, key), c.rank);
}

TEST_P(CommSplit, ColorsKeysNoColorAndSplitOfSplit) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        // rank % 2, keys reversing the order.
        split_and_check(
            c, [](int r, int) { return r % 2; }, [](int r, int n) { return n - r; }, nullptr);
        // rank % 3, equal keys: the old order breaks the ties.
        loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
        cfg.commName = "split3";
        cfg.timeoutMs = 30000;
        split_and_check(
            c, [](int r, int) { return r % 3; }, [](int, int) { return 0; }, &cfg);
        // rank % 3 == 1 opts out; the others form one communicator, reversed.
        split_and_check(
            c, [](int r, int) { return r % 3 == 1 ? LOOM_SPLIT_NOCOLOR : 7; },
            [](int r, int) { return -r; }, nullptr);
        // Everyone opts out.
        split_and_check(
            c, [](int, int) { return LOOM_SPLIT_NOCOLOR; }, [](int, int) { return 0; }, nullptr);
        // A split of a split: halves by parity (reversed), then each half split
        // by its own new rank's parity with keys reversing that order again.
        loomComm_t half = nullptr;
        ASSERT_LOOM_OK(loomCommSplit(c.comm, c.rank % 2, c.nranks - c.rank, &half, nullptr));
        shim::CommGuard gh(half);
        int hrank = -1, hcount = -1;
        ASSERT_LOOM_OK(loomCommUserRank(half, &hrank));
        ASSERT_LOOM_OK(loomCommCount(half, &hcount));
        loomComm_t quarter = nullptr;
        ASSERT_LOOM_OK(loomCommSplit(half, hrank % 2, hcount - hrank, &quarter, nullptr));
        shim::CommGuard gq(quarter);
        std::vector<int> h = expected_members(
            c.nranks, c.rank % 2, [](int r, int) { return r % 2; },
            [](int r, int n) { return n - r; });
        std::vector<int> q;  // old ranks with the same half-rank parity, reversed
        for (int i = (int)h.size() - 1; i >= 0; i--)
          if (i % 2 == hrank % 2) q.push_back(h[(size_t)i]);
        check_members(quarter, q, c.rank);
        // The parent communicators still work after their children are made.
        check_members(half, h, c.rank);
        check_allreduce(c.comm, c.rank, c.nranks);
      },
      quick_opts());
}

INSTANTIATE_TEST_SUITE_P(Ranks, CommSplit,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 8),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         split_name);

// ---- Finalize, destroy, abort ------------------------------------------------

class CommTeardown : public ::testing::TestWithParam<std::tuple<int, Mode>> {};

std::string teardown_name(const ::testing::TestParamInfo<CommTeardown::ParamType>& info) {
  return mode_ranks_name(std::get<1>(info.param), std::get<0>(info.param));
}

TEST_P(CommTeardown, FinalizeThenDestroy) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        check_allreduce(c.comm, c.rank, c.nranks);
        EXPECT_LOOM_OK(loomCommFinalize(c.comm));
        EXPECT_LOOM_OK(loomCommDestroy(c.comm));
        c.comm = nullptr;
      },
      quick_opts());
}

// Every rank aborts after its work (the error path of a job that gives up).
// The out-of-band barrier makes sure every rank has finished the all-reduce
// before any aborts.
TEST_P(CommTeardown, AbortOnEveryRank) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        check_allreduce(c.comm, c.rank, c.nranks);
        ASSERT_TRUE(oob_barrier(c, "work-done"));
        EXPECT_LOOM_OK(loomCommAbort(c.comm));
        c.comm = nullptr;
      },
      quick_opts());
}

TEST_P(CommTeardown, AbortUnusedOnEveryRank) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        ASSERT_TRUE(oob_barrier(c, "init-done"));
        EXPECT_LOOM_OK(loomCommAbort(c.comm));
        c.comm = nullptr;
      },
      quick_opts());
}

// Init, then abort on every rank: every init must succeed. Regression: a peer's
// failure noticed after the closing barrier of init once failed init itself.
TEST_P(CommTeardown, AbortRightAfterInit) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        // Init has returned here, so every rank has joined.
        EXPECT_LOOM_OK(loomCommAbort(c.comm));
        c.comm = nullptr;
      },
      quick_opts());
}

INSTANTIATE_TEST_SUITE_P(Ranks, CommTeardown,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5, 8),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         teardown_name);

// One rank aborts instead of joining an all-reduce: the others get
// loomRemoteError, not a hang and not a timeout.
void abort_unblocks_peers(int n, Mode mode) {
  Opts o = quick_opts();
  o.comm_timeout_ms = 20000;
  harness::run(
      n, mode,
      [](Ctx& c) {
        ASSERT_TRUE(oob_barrier(c, "init-done"));
        if (c.rank == c.nranks - 1) {
          EXPECT_LOOM_OK(loomCommAbort(c.comm));
          c.comm = nullptr;
          return;
        }
        std::vector<float> v(1 << 20, 1.0f);
        loomResult_t r =
            loomAllReduce(v.data(), v.data(), v.size(), loomFloat32, loomSum, c.comm, nullptr);
        EXPECT_EQ(r, loomRemoteError) << loomGetErrorString(r) << ": " << loomGetLastError(NULL);
        EXPECT_STRNE(loomGetLastError(NULL), "");
        // v is freed here: the call has returned, so nobody may touch it.
      },
      o);
}

class CommAbortPeers : public ::testing::TestWithParam<int> {};

TEST_P(CommAbortPeers, Proc) {
  abort_unblocks_peers(GetParam(), Mode::Proc);
}

// Thread ranks: a rank aborts while the others are blocked with it. Regression:
// after an operation failed, peers could still read the caller's send buffer
// through a pointer left in a local FIFO slot (now withdrawn on failure).
TEST_P(CommAbortPeers, Thread) {
  abort_unblocks_peers(GetParam(), Mode::Thread);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CommAbortPeers, ::testing::Values(2, 3, 5, 8),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "n" + std::to_string(i.param);
                         });

// ---- Last error --------------------------------------------------------------

class CommLastError : public ::testing::TestWithParam<std::tuple<int, Mode>> {};

TEST_P(CommLastError, NamesTheProblem) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        // A bad peer: the text names the call's problem, the peer number.
        int bad_peer = c.nranks + 5;
        int32_t x = 1;
        ASSERT_EQ(loomSend(&x, 1, loomInt32, bad_peer, c.comm, nullptr), loomInvalidArgument);
        std::string why = loomGetLastError(NULL);
        EXPECT_NE(why.find(std::to_string(bad_peer)), std::string::npos) << why;
        EXPECT_STRNE(loomGetLastError(c.comm), "") << "the comm's own last error";
        // A NULL buffer with a count.
        ASSERT_EQ(loomAllReduce(nullptr, &x, 1, loomInt32, loomSum, c.comm, nullptr),
                  loomInvalidArgument);
        why = loomGetLastError(NULL);
        EXPECT_FALSE(why.empty());
        // An unknown datatype.
        ASSERT_EQ(loomAllReduce(&x, &x, 1, (loomDataType_t)77, loomSum, c.comm, nullptr),
                  loomInvalidArgument);
        why = loomGetLastError(NULL);
        EXPECT_NE(why.find("77"), std::string::npos) << why;
        // A NULL communicator: the per-thread text.
        ASSERT_EQ(loomAllReduce(&x, &x, 1, loomInt32, loomSum, nullptr, nullptr),
                  loomInvalidArgument);
        EXPECT_STRNE(loomGetLastError(NULL), "");
        // After the failures the communicator still works, and success does not
        // make the text NULL.
        check_allreduce(c.comm, c.rank, c.nranks);
        EXPECT_NE(loomGetLastError(c.comm), nullptr);
        EXPECT_NE(loomGetLastError(NULL), nullptr);
      },
      quick_opts());
}

// loomSetLastError: a layered library's text, read back from the comm (or the
// thread), truncated to the limit, without putting the communicator in error.
TEST_P(CommLastError, SetByALayeredLibrary) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        std::string mine =
            "loomAllGatherDim: splits sum to 10 but y.shape[1] is " + std::to_string(12 + c.rank);
        ASSERT_EQ(loomSetLastError(c.comm, mine.c_str()), loomSuccess);
        EXPECT_EQ(std::string(loomGetLastError(c.comm)), mine);
        ASSERT_EQ(loomSetLastError(nullptr, "the thread's own"), loomSuccess);
        EXPECT_STREQ(loomGetLastError(NULL), "the thread's own");
        EXPECT_EQ(std::string(loomGetLastError(c.comm)), mine)
            << "the thread's text is not the comm's";
        // Truncated, never overrun: a text far past any limit.
        std::string huge(100000, 'x');
        ASSERT_EQ(loomSetLastError(c.comm, huge.c_str()), loomSuccess);
        std::string back = loomGetLastError(c.comm);
        EXPECT_GT(back.size(), 100u);
        EXPECT_LT(back.size(), huge.size());
        EXPECT_EQ(back, huge.substr(0, back.size()));
        // Not an error of the communicator: it reports none and still works.
        loomResult_t async = loomInternalError;
        ASSERT_EQ(loomCommGetAsyncError(c.comm, &async), loomSuccess);
        EXPECT_EQ(async, loomSuccess);
        check_allreduce(c.comm, c.rank, c.nranks);
        // Misuse of the call itself.
        EXPECT_EQ(loomSetLastError(c.comm, nullptr), loomInvalidArgument);
        EXPECT_NE(std::string(loomGetLastError(NULL)).find("message is NULL"), std::string::npos);
        int not_a_comm = 0;
        EXPECT_EQ(loomSetLastError(reinterpret_cast<loomComm_t>(&not_a_comm), "x"),
                  loomInvalidArgument);
        EXPECT_NE(std::string(loomGetLastError(NULL)).find("not a live communicator"),
                  std::string::npos);
      },
      quick_opts());
}

INSTANTIATE_TEST_SUITE_P(Ranks, CommLastError,
                         ::testing::Combine(::testing::Values(1, 3),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         [](const ::testing::TestParamInfo<CommLastError::ParamType>& i) {
                           return mode_ranks_name(std::get<1>(i.param), std::get<0>(i.param));
                         });

TEST(CommLastErrorNoComm, BeforeAnyCommunicator) {
  EXPECT_NE(loomGetLastError(NULL), nullptr);
  int32_t x = 1;
  ASSERT_EQ(loomAllReduce(&x, &x, 1, loomInt32, loomSum, nullptr, nullptr), loomInvalidArgument);
  EXPECT_STRNE(loomGetLastError(NULL), "");
}

}  // namespace
