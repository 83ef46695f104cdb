// test_settings.cc - careless LOOM_* settings, as a user sets them:
// a bad value fails init at once on every rank with one line naming the
// variable, the value and what is accepted (never a hang, never a wrong
// result); a bad hint costs one WARN and its default; ranks that disagree on
// a setting they act on together are refused at init, every rank naming the
// variable and the ranks that differ.
//
// Process ranks only: settings are read once per process, so thread ranks of
// this test process cannot be given other values; loomCommInitAll is still
// checked for the bad values in a child process of its own.
//
// "At once" is checked without a clock: every communicator's timeout is far
// above the harness's (kNeverMs), so a rank that waits for anything before
// refusing, or for a rank that refused without telling it, hangs the run.
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using harness::Ctx;
using harness::Init;
using harness::Mode;
using harness::Opts;

struct Bad {
  const char* name;
  const char* value;
  const char* why;  // a piece of the reason the error must give
};

std::string BadName(const ::testing::TestParamInfo<Bad>& info) {
  std::string s = std::string(info.param.name).substr(5) + "_" + std::to_string(info.index);
  for (char& ch : s)
    if (!isalnum((unsigned char)ch)) ch = '_';
  return s;
}

class BadSetting : public ::testing::TestWithParam<Bad> {};

// The error text names the variable, the value and why.
void ExpectNamed(const std::string& text, const Bad& b) {
  std::string want = std::string(b.name) + "=" + b.value + ": ";
  EXPECT_NE(text.find(want), std::string::npos) << "'" << text << "' does not name " << want;
  EXPECT_NE(text.find(b.why), std::string::npos) << "'" << text << "' does not say " << b.why;
  EXPECT_NE(text.find("accepted: "), std::string::npos) << text;
}

// Every init path refuses at once on every rank: loomCommInitFromEnv, and
// loomGetUniqueId (rank 0's first call) for the others. Before, these hung
// in init (a deadlock in the logger) or ran with a wrapped FIFO size.
TEST_P(BadSetting, InitFailsAtOnceNamingIt) {
  const Bad b = GetParam();
  Opts o;
  o.timeout_s = 60;
  o.init = Init::None;
  o.env = {{b.name, b.value}};
  harness::run(
      2, Mode::Proc,
      [&](Ctx& c) {
        loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
        cfg.timeoutMs = harness::kNeverMs;
        loomComm_t comm = nullptr;
        EXPECT_EQ(loomCommInitFromEnv(&comm, &cfg), loomInvalidArgument);
        EXPECT_EQ(comm, nullptr);
        ExpectNamed(loomGetLastError(nullptr), b);
        loomUniqueId id;
        EXPECT_EQ(loomGetUniqueId(&id), loomInvalidArgument);
        ExpectNamed(loomGetLastError(nullptr), b);
      },
      o);
}

const Bad kBad[] = {
    {"LOOM_TIMEOUT_MS", "abc", "not an integer"},
    {"LOOM_TIMEOUT_MS", "0", "smallest"},
    {"LOOM_BUFFSIZE", "abc", "not a size"},
    {"LOOM_BUFFSIZE", "1T", "largest"},
    {"LOOM_BUFFSIZE", "-1", "not a size"},
    {"LOOM_BUFFSIZE", "-4096", "not a size"},
    {"LOOM_BUFFSIZE", "18446744073709551615", "largest"},
    {"LOOM_DIRECT", "yes", "not 0 or 1"},
    {"LOOM_NSLOTS", "8x", "not an integer"},
    {"LOOM_NSLOTS", "1", "smallest"},
    {"LOOM_SLICE_SIZE", "0", "smallest"},
    {"LOOM_SOCKET_NSTREAMS", "0", "smallest"},
    {"LOOM_SOCKET_CHUNK", "1G", "largest"},
    {"LOOM_HEARTBEAT_MS", "-5", "smallest"},
    {"LOOM_ALGO", "allreduce:rnig", "'rnig' is not an algorithm family"},
    {"LOOM_ALGO", "alreduce:ring", "'alreduce' is not a collective"},
    {"LOOM_ALGO", "allreduce:", "not coll:family"},
    {"LOOM_TRANSPORTS", "shm,sockets", "'sockets' is not a transport"},
    {"LOOM_PROTO", "ll128", "'ll128' is not a protocol"},
    {"LOOM_PROTO", "simple,ll", "not a protocol name"},
    {"LOOM_TOPO_FILE", "/nonexistent/loom.topo", "/nonexistent/loom.topo: cannot open"},
    {"LOOM_SECRET", "xyz", "hex digits"},
    {"LOOM_FAULT", "allreduce", "not point:rank"},
    {"LOOM_RECORDER_SIZE", "-1", "smallest"},
    {"LOOM_DUMP_SIGNAL", "KILL", "not one of the accepted words"},
};
INSTANTIATE_TEST_SUITE_P(Values, BadSetting, ::testing::ValuesIn(kBad), BadName);

// loomCommInitAll (thread ranks) refuses too: in a child process, whose
// environment this test may set before anything reads it.
TEST(BadSettingInitAll, RefusesNamingIt) {
  fflush(nullptr);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("LOOM_BUFFSIZE", "1T", 1);
    setenv("LOOM_DEBUG", "NONE", 1);
    loomComm_t comms[3] = {nullptr, nullptr, nullptr};
    loomResult_t r = loomCommInitAll(comms, 3, nullptr);
    std::string text = loomGetLastError(nullptr);
    bool ok = r == loomInvalidArgument && comms[0] == nullptr &&
              text.find("LOOM_BUFFSIZE=1T: ") != std::string::npos;
    if (!ok) fprintf(stderr, "loomCommInitAll gave %d: %s\n", (int)r, text.c_str());
    _exit(ok ? 0 : 1);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
}

// Hints (debugging and waiting knobs): one WARN naming the value, then the
// default; the communicator works.
TEST(BadHint, WarnsOnceAndUsesTheDefault) {
  Opts o;
  o.timeout_s = 60;
  std::string prefix = "/tmp/loomtest-hint-" + harness::unique_tag() + "-";
  o.env = {{"LOOM_SPIN_COUNT", "many"},
           {"LOOM_YIELD_US", "-3"},
           {"LOOM_DEBUG", "WARN"},
           {"LOOM_DEBUG_FILE", prefix + "%p.log"}};
  harness::run(
      2, Mode::Proc,
      [&](Ctx& c) {
        float x = 1.0f + c.rank, sum = 0;
        ASSERT_LOOM_OK(loomAllReduce(&x, &sum, 1, loomFloat32, loomSum, c.comm, nullptr));
        EXPECT_EQ(sum, 3.0f);
        std::string log = harness::read_file(harness::own_log());
        unlink(harness::own_log().c_str());
        for (const char* piece : {"ignoring LOOM_SPIN_COUNT=many: 'many' is not an integer",
                                  "ignoring LOOM_YIELD_US=-3: -3 is less than the smallest"}) {
          size_t at = log.find(piece);
          EXPECT_NE(at, std::string::npos) << "no '" << piece << "' in the log:\n" << log;
          if (at != std::string::npos) {
            EXPECT_EQ(log.find(piece, at + 1), std::string::npos) << "twice";
          }
        }
      },
      o);
}

struct Differ {
  const char* name;
  const char* value;  // rank 1's (and rank 3's); the others leave it unset
};

class SettingsDiffer : public ::testing::TestWithParam<Differ> {};

// Ranks that act on a setting together must agree: rank 1 and rank 3 with a
// value the others do not have. Before, LOOM_ALGO set on one rank gave that
// rank a wrong result with loomSuccess. Now every rank's init fails at once
// with loomInvalidUsage naming the variable and ranks 1 and 3.
TEST_P(SettingsDiffer, EveryRankRefusesNamingTheRanks) {
  const Differ d = GetParam();
  Opts o;
  o.timeout_s = 60;
  o.init = Init::None;
  o.rank_env = {{1, d.name, d.value}, {3, d.name, d.value}};
  harness::run(
      4, Mode::Proc,
      [&](Ctx& c) {
        loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
        cfg.timeoutMs = harness::kNeverMs;
        loomComm_t comm = nullptr;
        EXPECT_EQ(loomCommInitFromEnv(&comm, &cfg), loomInvalidUsage);
        std::string text = loomGetLastError(nullptr);
        EXPECT_NE(text.find(std::string(d.name) + " is not the same on every rank"),
                  std::string::npos)
            << text;
        EXPECT_NE(text.find("ranks 1,3 have another value than rank 0"), std::string::npos) << text;
        if (comm) loomCommDestroy(comm);
      },
      o);
}

const Differ kDiffer[] = {
    {"LOOM_ALGO", "allreduce:ring"},
    {"LOOM_BUFFSIZE", "1M"},
    {"LOOM_NSLOTS", "4"},
    {"LOOM_DIRECT", "0"},
    {"LOOM_SLICE_SIZE", "64K"},
    {"LOOM_TRANSPORTS", "socket"},
    {"LOOM_HEARTBEAT_MS", "5000"},
    {"LOOM_PROTO", "simple"},
};
INSTANTIATE_TEST_SUITE_P(Values, SettingsDiffer, ::testing::ValuesIn(kDiffer),
                         [](const ::testing::TestParamInfo<Differ>& info) {
                           return std::string(info.param.name).substr(5);
                         });

// The same value written two ways is the same setting.
TEST(SettingsAgree, SameValueWrittenTwoWays) {
  Opts o;
  o.timeout_s = 60;
  o.rank_env = {{0, "LOOM_BUFFSIZE", "1M"}, {1, "LOOM_BUFFSIZE", "1048576"}};
  harness::run(
      2, Mode::Proc,
      [&](Ctx& c) {
        int x = c.rank + 1, sum = 0;
        ASSERT_LOOM_OK(loomAllReduce(&x, &sum, 1, loomInt32, loomSum, c.comm, nullptr));
        EXPECT_EQ(sum, 3);
      },
      o);
}

// LOOM_PROTO read by the layer that picks the protocol: forced, it is the
// one in force (rank 0 says so under INFO) and the collectives work; unset,
// the tuner's choice is the host path's only protocol.
class ProtoSetting : public ::testing::TestWithParam<const char*> {};

TEST_P(ProtoSetting, TheChoiceIsLoggedAndWorks) {
  const std::string proto = GetParam();
  Opts o;
  o.timeout_s = 60;
  o.env = harness::log_env("/tmp/loomtest-proto-" + harness::unique_tag() + "-", "TUNE");
  if (!proto.empty()) o.env.push_back({"LOOM_PROTO", proto});
  harness::run(
      2, Mode::Proc,
      [&](Ctx& c) {
        int x = c.rank + 1, sum = 0;
        ASSERT_LOOM_OK(loomAllReduce(&x, &sum, 1, loomInt32, loomSum, c.comm, nullptr));
        EXPECT_EQ(sum, 3);
        std::string log = harness::read_file(harness::own_log());
        unlink(harness::own_log().c_str());
        if (c.rank != 0) return;
        const std::string want =
            "protocol simple (" +
            std::string(proto.empty() ? "the host path's only protocol" : "LOOM_PROTO") + ")";
        EXPECT_NE(log.find(want), std::string::npos) << "no '" << want << "' in:\n" << log;
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(Values, ProtoSetting, ::testing::Values("simple", "SIMPLE", ""),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return *info.param ? std::string(info.param) : std::string("unset");
                         });

struct BadTopo {
  const char* name;
  const char* text;    // the file every rank is given
  const char* hostid;  // LOOM_HOSTID too, or ""
  const char* why;     // after "<file>:"
};

class BadTopoFile : public ::testing::TestWithParam<BadTopo> {};

// A bad topology file fails every init path at once, in one line naming the
// variable, the file, the line and what is wrong there.
TEST_P(BadTopoFile, InitFailsNamingFileAndLine) {
  const BadTopo b = GetParam();
  Opts o;
  o.timeout_s = 60;
  o.init = Init::None;
  if (*b.hostid) o.env = {{"LOOM_HOSTID", b.hostid}};
  harness::run(
      2, Mode::Proc,
      [&](Ctx& c) {
        const std::string file = "/tmp/loomtest-badtopo-" + harness::unique_tag() + ".txt";
        {
          std::ofstream f(file);
          f << b.text;
        }
        setenv("LOOM_TOPO_FILE", file.c_str(), 1);  // before the library reads its settings
        loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
        cfg.timeoutMs = harness::kNeverMs;
        loomComm_t comm = nullptr;
        EXPECT_EQ(loomCommInitFromEnv(&comm, &cfg), loomInvalidArgument);
        EXPECT_EQ(comm, nullptr);
        const std::string want = "LOOM_TOPO_FILE=" + file + ": " + file + b.why;
        for (int call = 0; call < 2; call++) {
          std::string text = loomGetLastError(nullptr);
          EXPECT_NE(text.find(want), std::string::npos)
              << "'" << text << "' lacks '" << want << "'";
          EXPECT_NE(text.find("accepted: "), std::string::npos) << text;
          loomUniqueId id;
          if (call == 0) {
            EXPECT_EQ(loomGetUniqueId(&id), loomInvalidArgument);
          }
        }
        unlink(file.c_str());
      },
      o);
}

const BadTopo kBadTopo[] = {
    {"UnknownFact", "# a machine\nhost a\nhots b\n", "", ":3: 'hots' is not a fact"},
    {"BadCpus", "cpus many\n", "", ":1: cpus 'many' is not an integer from 1 to 65536"},
    {"HostTwice", "host a\nhost b\n", "", ":2: host given twice"},
    {"HostAndHostid", "host a\n", "node7",
     " gives this rank's host, and so does LOOM_HOSTID=node7"},
};
INSTANTIATE_TEST_SUITE_P(Files, BadTopoFile, ::testing::ValuesIn(kBadTopo),
                         [](const ::testing::TestParamInfo<BadTopo>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
