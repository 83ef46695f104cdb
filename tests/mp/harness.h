// harness.h - runs a test body on N ranks.
//
// Process ranks: the harness starts N copies of the test binary itself,
// filtered to the running test, each told its rank through the environment
// (LOOM_TEST_CHILD). Each copy is a fresh process, so per-test environment
// (LOOM_FAULT, LOOM_TRANSPORTS ...) applies as it would for a user. A copy
// finds itself inside run(), becomes its rank, runs the body and exits with
// the body's gtest verdict. The parent enforces a timeout, kills every rank
// on expiry, and checks each rank's exit.
//
// Thread ranks: N threads of this process, each with its own communicator.
//
// In process mode a test may call run() once.
#ifndef LOOM_TESTS_HARNESS_H
#define LOOM_TESTS_HARNESS_H

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "shim/loom_shim.h"

namespace harness {

enum class Mode { Proc, Thread };
inline const char* mode_name(Mode m) {
  return m == Mode::Proc ? "proc" : "thread";
}

// The common test parameter (ranks, mode) and its name: "proc3", "thread2".
using RanksMode = std::tuple<int, Mode>;
inline std::string ranks_mode_name(const ::testing::TestParamInfo<RanksMode>& info) {
  return std::string(mode_name(std::get<1>(info.param))) + std::to_string(std::get<0>(info.param));
}

enum class Init {
  UniqueId,  // rank 0 calls loomGetUniqueId and shares the id; loomCommInitRankConfig
  FromEnv,   // loomCommInitFromEnv (process ranks), LOOM_RANK/LOOM_WORLD_SIZE/LOOM_ROOT
  None       // the body makes its own communicator
};

struct Opts {
  int timeout_s = 240;  // the whole run, from the harness's side
  Init init = Init::UniqueId;
  int comm_timeout_ms = 60000;                           // config.timeoutMs of the communicator
  int check_args = LOOM_CONFIG_UNDEF_INT;                // config.checkArgs of the communicator
  int deterministic = LOOM_CONFIG_UNDEF_INT;             // config.deterministic
  std::vector<std::pair<std::string, std::string>> env;  // process ranks only
  struct RankEnv {
    int rank;
    std::string name, value;
  };
  std::vector<RankEnv> rank_env;   // process ranks only: set in that rank alone, after env
  std::vector<int> expect_killed;  // process ranks that end by SIGKILL
};

struct Ctx {
  int rank = 0;
  int nranks = 1;
  Mode mode = Mode::Proc;
  loomComm_t comm = nullptr;  // destroyed after the body unless set to nullptr
  std::string id_file;        // Init::None: where rank 0 may share an id
};

void run(int nranks, Mode mode, const std::function<void(Ctx&)>& body, const Opts& opts = Opts());

// For bodies with Init::None: share an id through ctx.id_file.
void share_id(const Ctx& ctx, loomUniqueId* id);

// Names of /dev/shm entries that Loom made (loom-*).
std::vector<std::string> shm_entries();

// A TCP port on loopback (AF_INET or AF_INET6) that was free a moment ago.
int free_port(int family = 2 /* AF_INET */);

// Waits (at most 20 s) until `expected` ranks of this run have called it: a
// file next to the run's id file counts arrivals, and whoever sees them all
// removes it. Needs ctx.id_file (process ranks, and thread ranks of run()).
// Once per run and tag: a second call with the same tag could find the file of the first
// recreated.
void meet(const Ctx& c, int expected, const std::string& tag = "");

// A communicator timeout no test waits out: far above every harness timeout
// (and with it the heartbeats' window, half the timeout up to 30 s, stays
// below). A failure test that sets it passes only if the failure itself
// ended the waits; a wait it should have ended is a hang, which the harness
// reports. Tests time nothing: the harness's timeout is the one bound.
constexpr int kNeverMs = 3600 * 1000;

// The text gives the failure's cause as seen at once (a peer died, left,
// aborted, sent the wrong thing), not a wait that ran out: no "timed out",
// and no heartbeat's "has sent nothing" (the slow way to notice a death).
::testing::AssertionResult noticed_at_once(const std::string& text);

// The text names rank k as "peer k" or "rank k" (not "rank 12" for k = 1).
// No std::regex: thread ranks call it at once, and libstdc++'s locale
// caching races.
::testing::AssertionResult names_rank(const std::string& text, int k);

// This process's log: LOOM_DEBUG_FILE with %p expanded. (Read from the
// environment: a rank process runs the test body again, so what the parent
// computed before run() is not what the rank would compute.)
std::string own_log();

// A whole file as text ("" when it cannot be read).
std::string read_file(const std::string& path);

// A name part no other call of this process, and no other run, uses:
// pid, a counter and the clock.
std::string unique_tag();

// The environment that sends Loom's INFO log of the given subsystems to
// <prefix><pid>.log (read back with own_log()).
std::vector<std::pair<std::string, std::string>> log_env(const std::string& prefix,
                                                         const std::string& subsys);

}  // namespace harness

#endif
