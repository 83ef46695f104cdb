// test_memstat.cc - what a communicator holds (src/core/memstat.h), counted
// in whole communicators of process and thread ranks: nothing per peer exists
// before the first call (connections, FIFOs, staging, scratch and plans are
// made when first needed); after one call of each collective the shared-memory
// FIFOs are whole FIFOs of the size LOOM_BUFFSIZE and LOOM_NSLOTS give; the
// same calls again allocate nothing more; and after destroy nothing is held
// (the process's count is back where it was). The counts are internal, so this
// binary (linked to the static library) reaches them through comm_get.
#include <string>
#include <tuple>
#include <vector>

#include "harness.h"

// comm.h is C11 with _Atomic members; see tests/unit/boot_ranks.h.
#define _Atomic volatile
#define atomic_load_explicit(p, mo) __atomic_load_n((p), (mo))
#define memory_order_seq_cst __ATOMIC_SEQ_CST
extern "C" {
#include "core/comm.h"
#include "core/memstat.h"
#include "transport/fifo.h"
}
#undef _Atomic

namespace {

using harness::Ctx;
using harness::Mode;
using harness::Opts;

// The FIFO settings of the process-rank cases, and the size of one FIFO they
// give (docs/DESIGN.md, "Memory": control, then nslots slots of
// max(buffsize / nslots, 4 KiB) rounded up to 4 KiB).
constexpr size_t kBuffsize = 256 << 10;
constexpr size_t kSlots = 4;
size_t FifoBytes() {
  return fifo_ctrl_bytes() + kSlots * (kBuffsize / kSlots);
}

mem_snapshot Snap(loomComm_t h) {
  loom_comm* c = nullptr;
  EXPECT_EQ(comm_get(h, "test", &c), loomSuccess);
  mem_snapshot s{};
  if (c) memstat_get(c, &s);
  return s;
}

// One call of each collective and a ring of sends, float32 of count per rank
// (per peer for all-to-all); checks the all-reduce's sum.
void OneOfEach(const Ctx& c, size_t count) {
  int n = c.nranks, me = c.rank;
  std::vector<float> in(count * n, (float)(me + 1)), out(count * n, 0.0f);
  ASSERT_LOOM_OK(
      loomAllReduce(in.data(), out.data(), count, loomFloat32, loomSum, c.comm, nullptr));
  EXPECT_EQ(out[count - 1], (float)(n * (n + 1) / 2));
  ASSERT_LOOM_OK(
      loomReduceScatter(in.data(), out.data(), count, loomFloat32, loomSum, c.comm, nullptr));
  ASSERT_LOOM_OK(loomAllGather(in.data(), out.data(), count, loomFloat32, c.comm, nullptr));
  ASSERT_LOOM_OK(loomAlltoAll(in.data(), out.data(), count, loomFloat32, c.comm, nullptr));
  ASSERT_LOOM_OK(loomBroadcast(in.data(), out.data(), count, loomFloat32, 0, c.comm, nullptr));
  ASSERT_LOOM_OK(
      loomReduce(in.data(), out.data(), count, loomFloat32, loomSum, n - 1, c.comm, nullptr));
  ASSERT_LOOM_OK(loomGather(in.data(), out.data(), count, loomFloat32, 0, c.comm, nullptr));
  ASSERT_LOOM_OK(loomScatter(in.data(), out.data(), count, loomFloat32, 0, c.comm, nullptr));
  ASSERT_LOOM_OK(loomGroupStart());
  ASSERT_LOOM_OK(loomSend(in.data(), count, loomFloat32, (me + 1) % n, c.comm, nullptr));
  ASSERT_LOOM_OK(loomRecv(out.data(), count, loomFloat32, (me + n - 1) % n, c.comm, nullptr));
  ASSERT_LOOM_OK(loomGroupEnd());
}

enum class Tp { Shm, Socket, Local };
using Case = std::tuple<int, Mode, Tp>;

class MemStat : public ::testing::TestWithParam<Case> {};

TEST_P(MemStat, MadeWhenFirstNeededAndAllReleased) {
  auto [n, mode, tp] = GetParam();
  Opts o;
  o.comm_timeout_ms = 60000;
  o.env = {{"LOOM_BUFFSIZE", std::to_string(kBuffsize)}, {"LOOM_NSLOTS", std::to_string(kSlots)}};
  if (tp == Tp::Socket) o.env.push_back({"LOOM_TRANSPORTS", "socket"});
  size_t before = memstat_process_now();
  harness::run(
      n, mode,
      [mode, tp](Ctx& c) {
        mem_snapshot s = Snap(c.comm);
        // After init: the rank segment, the tables and the flight recorder,
        // nothing for any peer.
        EXPECT_EQ(s.peers_held, 0) << "rank " << c.rank << " connected before a call";
        for (int u : {MEM_FIFO, MEM_STAGING, MEM_SCRATCH, MEM_PLANS}) EXPECT_EQ(s.now[u], 0u) << u;
        EXPECT_GT(s.now[MEM_CONN], 0u);
        if (mode == Mode::Proc) {
          EXPECT_EQ(s.now[MEM_RANKSEG] % 4096, 0u);
        }
        EXPECT_GT(s.now[MEM_RECORDER], 0u) << "the flight recorder, on by default";
        EXPECT_EQ(s.total, s.now[MEM_RANKSEG] + s.now[MEM_CONN] + s.now[MEM_RECORDER]);

        OneOfEach(c, 10000);
        s = Snap(c.comm);
        EXPECT_GE(s.peers_held, c.nranks > 1 ? 2 : 0) << "the ring's neighbours at least";
        EXPECT_GT(s.now[MEM_PLANS], 0u);
        if (tp == Tp::Shm && c.nranks > 1) {
          EXPECT_GT(s.now[MEM_FIFO], 0u);
          EXPECT_EQ(s.now[MEM_FIFO] % FifoBytes(), 0u) << "FIFOs are whole, of the set size";
          EXPECT_LE(s.now[MEM_FIFO], FifoBytes() * (size_t)c.nranks * 4) << "a few lanes a peer";
        }
        if (tp == Tp::Socket) {
          EXPECT_EQ(s.now[MEM_FIFO], 0u) << "sockets have no FIFO";
        }
        size_t sum = 0;
        for (int u = 0; u < MEM_USES; u++) {
          EXPECT_LE(s.now[u], s.peak[u]) << u;
          sum += s.now[u];
        }
        EXPECT_EQ(s.total, sum);

        // The same calls again: everything is there already.
        OneOfEach(c, 10000);
        mem_snapshot again = Snap(c.comm);
        EXPECT_EQ(again.total, s.total) << "repeating the calls allocated more";
        EXPECT_EQ(again.peers_held, s.peers_held);

        ASSERT_LOOM_OK(loomCommDestroy(c.comm));
        c.comm = nullptr;
        // A process rank holds one communicator: nothing of it is left.
        if (mode == Mode::Proc) {
          EXPECT_EQ(memstat_process_now(), 0u) << "not released at destroy";
        }
      },
      o);
  // Thread ranks: every communicator of the run is gone.
  if (mode == Mode::Thread) {
    EXPECT_EQ(memstat_process_now(), before) << "not released at destroy";
  }
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  auto [n, mode, tp] = info.param;
  const char* t = tp == Tp::Shm ? "shm" : tp == Tp::Socket ? "socket" : "local";
  return std::string(harness::mode_name(mode)) + std::to_string(n) + "_" + t;
}

INSTANTIATE_TEST_SUITE_P(Ranks, MemStat,
                         ::testing::Values(Case{4, Mode::Proc, Tp::Shm},
                                           Case{3, Mode::Proc, Tp::Socket},
                                           Case{4, Mode::Thread, Tp::Local},
                                           Case{1, Mode::Proc, Tp::Shm}),
                         CaseName);

}  // namespace
