// test_departure.cc - a rank that leaves (loomCommDestroy) while its peers
// still need it. A clean goodbye is no failure in itself, but a wait on a
// rank that left can never end: each peer that still needs it gets
// loomRemoteError naming it, instead of loomTimeout at its deadline
// ("connecting to its peers", 10 s in the reproducer). Every
// communicator here has a timeout far above the harness's (kNeverMs), so a
// run that ends at all ended because the departure was noticed.
#include <unistd.h>

#include <string>
#include <tuple>
#include <vector>

#include "harness.h"

namespace {

using harness::Ctx;
using harness::Mode;
using harness::Opts;

constexpr int kLeaver = 1;

Opts DepartureOpts() {
  Opts o;
  o.timeout_s = 90;
  o.comm_timeout_ms = harness::kNeverMs;
  return o;
}

// The leaver destroys its communicator; the others call `op`, which must
// fail naming the leaver and its departure. No survivor ends (destroying a
// failed communicator, without a goodbye) before every survivor has its
// error: otherwise a survivor still waiting could fail for that one first.
// (meet_tag: a test that met already meets again under another tag.)
template <typename Op>
void LeaveThen(Ctx& c, Op op, const std::string& meet_tag = "") {
  if (c.rank == kLeaver) {
    ASSERT_LOOM_OK(loomCommDestroy(c.comm));
    c.comm = nullptr;
    return;
  }
  loomResult_t r = op(c);
  std::string text = loomGetLastError(c.comm);
  EXPECT_EQ(r, loomRemoteError) << text;
  EXPECT_TRUE(harness::names_rank(text, kLeaver));
  EXPECT_TRUE(harness::noticed_at_once(text));
  EXPECT_TRUE(text.find("left the communicator") != std::string::npos ||
              text.find("destroyed") != std::string::npos)
      << text;
  harness::meet(c, c.nranks - 1, meet_tag);
}

class Departure : public ::testing::TestWithParam<std::tuple<Mode, int>> {};

// The case: destroy right after init, the peers enter an
// all-reduce (before: loomTimeout "connecting to its peers" at the deadline).
TEST_P(Departure, DestroyRightAfterInitThenAllReduce) {
  auto [mode, n] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        LeaveThen(c, [](Ctx& c) {
          std::vector<float> v(1000, 1.0f + c.rank);
          return loomAllReduce(v.data(), v.data(), v.size(), loomFloat32, loomSum, c.comm, nullptr);
        });
      },
      DepartureOpts());
}

// Connections are up (an all-reduce first); the leaver then goes, and the
// others wait for a broadcast from it.
TEST_P(Departure, BroadcastFromARankThatLeft) {
  auto [mode, n] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        std::vector<int> v(4096, c.rank);
        ASSERT_LOOM_OK(
            loomAllReduce(v.data(), v.data(), v.size(), loomInt32, loomSum, c.comm, nullptr));
        // Every rank is out of the all-reduce before the leaver goes: the first survivor to
        // find it gone breaks the communicator, and a rank still finishing the all-reduce
        // (with no need of the leaver) would fail there instead.
        harness::meet(c, c.nranks);
        LeaveThen(
            c,
            [&v](Ctx& c) {
              return loomBroadcast(v.data(), v.data(), v.size(), loomInt32, kLeaver, c.comm,
                                   nullptr);
            },
            ".after");
      },
      DepartureOpts());
}

// A send larger than a FIFO to a rank that left and never received.
TEST_P(Departure, SendToARankThatLeft) {
  auto [mode, n] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        LeaveThen(c, [](Ctx& c) {
          std::vector<char> big((size_t)9 << 20, 'x');
          return loomSend(big.data(), big.size(), loomInt8, kLeaver, c.comm, nullptr);
        });
      },
      DepartureOpts());
}

// A split (an exchange through the bootstrap) with a rank that left.
TEST_P(Departure, SplitWithARankThatLeft) {
  auto [mode, n] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        LeaveThen(c, [](Ctx& c) {
          loomComm_t sub = nullptr;
          loomResult_t r = loomCommSplit(c.comm, 0, c.rank, &sub, nullptr);
          EXPECT_EQ(sub, nullptr);
          return r;
        });
      },
      DepartureOpts());
}

// Ranks that leave after every operation they share with the others is
// done take nothing from them: the others' later operations among
// themselves still work (point-to-point), and their teardown is clean.
TEST_P(Departure, LeavingAfterTheLastSharedOperationIsFine) {
  auto [mode, n] = GetParam();
  harness::run(
      n, mode,
      [n = n](Ctx& c) {
        std::vector<int> v(1 << 16, c.rank + 1);
        ASSERT_LOOM_OK(
            loomAllReduce(v.data(), v.data(), v.size(), loomInt32, loomSum, c.comm, nullptr));
        ASSERT_EQ(v[7], n * (n + 1) / 2);
        if (c.rank == kLeaver) {
          ASSERT_LOOM_OK(loomCommDestroy(c.comm));
          c.comm = nullptr;
          return;
        }
        if (c.rank > 1) return;  // rank 0 alone sends to itself below
        int x = 42, y = 0;
        ASSERT_LOOM_OK(loomGroupStart());
        ASSERT_LOOM_OK(loomSend(&x, 1, loomInt32, 0, c.comm, nullptr));
        ASSERT_LOOM_OK(loomRecv(&y, 1, loomInt32, 0, c.comm, nullptr));
        ASSERT_LOOM_OK(loomGroupEnd());
        EXPECT_EQ(y, 42);
      },
      DepartureOpts());
}

INSTANTIATE_TEST_SUITE_P(Ranks, Departure,
                         ::testing::Combine(::testing::Values(Mode::Proc, Mode::Thread),
                                            ::testing::Values(2, 4)),
                         [](const ::testing::TestParamInfo<Departure::ParamType>& i) {
                           return std::string(harness::mode_name(std::get<0>(i.param))) +
                                  std::to_string(std::get<1>(i.param));
                         });

// Over sockets too (LOOM_TRANSPORTS=socket): a connection the leaver never
// made is refused at its closed listener; the departure ends the wait.
TEST(DepartureSocket, DestroyRightAfterInitThenAllReduce) {
  Opts o = DepartureOpts();
  o.env = {{"LOOM_TRANSPORTS", "socket"}};
  harness::run(
      3, Mode::Proc,
      [](Ctx& c) {
        LeaveThen(c, [](Ctx& c) {
          std::vector<float> v(1000, 1.0f);
          return loomAllReduce(v.data(), v.data(), v.size(), loomFloat32, loomSum, c.comm, nullptr);
        });
      },
      o);
}

}  // namespace
