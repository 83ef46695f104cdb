// test_collectives_long.cc - the full product of the collective matrix
// (suites CollLong/*, label "long", run outside CI): every collective x every
// algorithm that serves it (forced by LOOM_ALGO on process ranks; the
// tuner's choice on thread ranks) x 1, 2, 3, 4, 5 and 8 ranks x every
// datatype, and inside each test every count (0, 1, 7, 1000, 2^20 + 3,
// capped as capped_count says), op (reducing collectives), root (roots_for)
// and placement, or every all-to-all-v matrix shape. LongPipeline: small
// slices and FIFOs, four datatypes. LongGroup, LongStream: the group and
// stream tests at every rank count. One test per collective, algorithm,
// ranks and datatype, so each stays far inside a per-test timeout; the
// covering subset is test_collectives.cc.
#include <ostream>
#include <string>
#include <vector>

#include "test_collectives.h"

namespace colltest {
namespace {

using harness::Ctx;
using harness::Mode;

constexpr int kLongTimeoutS = 280;
const int kRankCounts[] = {1, 2, 3, 4, 5, 8};

struct LongCase {
  Coll coll;
  std::string algo;  // "" on thread ranks: the tuner's choice
  Mode mode;
  int nranks;
  loomDataType_t type;
};

std::vector<LongCase> long_cases(Mode mode) {
  std::vector<LongCase> v;
  for (int ci = 0; ci < kNumColls; ci++) {
    Coll coll = (Coll)ci;
    std::vector<std::string> algos =
        mode == Mode::Proc ? algos_of(coll) : std::vector<std::string>{""};
    for (const std::string& algo : algos)
      for (int n : kRankCounts)
        for (loomDataType_t t : kAllTypes) v.push_back({coll, algo, mode, n, t});
  }
  return v;
}

void PrintTo(const LongCase& lc, std::ostream* os) {
  *os << coll_name(lc.coll) << " " << (lc.algo.empty() ? "tuner" : lc.algo) << " "
      << harness::mode_name(lc.mode) << lc.nranks << " " << shim::dtype_name(lc.type);
}

class LongMatrix : public ::testing::TestWithParam<LongCase> {};

TEST_P(LongMatrix, EveryCountOpRootPlacement) {
  const LongCase lc = GetParam();
  harness::run(
      lc.nranks, lc.mode,
      [&](Ctx& c) {
        Runner r(c, lc.algo.empty() ? "tuner" : lc.algo);
        full_matrix(r, c, lc.coll, lc.type);
      },
      opts_for(lc.algo, kLongTimeoutS));
}

std::string long_name(const ::testing::TestParamInfo<LongCase>& info) {
  const LongCase& lc = info.param;
  return std::string(harness::mode_name(lc.mode)) + std::to_string(lc.nranks) + "_" +
         coll_name(lc.coll) + "_" + (lc.algo.empty() ? "tuner" : lc.algo) + "_" +
         shim::dtype_name(lc.type);
}

INSTANTIATE_TEST_SUITE_P(CollLong, LongMatrix, ::testing::ValuesIn([] {
                           std::vector<LongCase> v = long_cases(Mode::Proc);
                           std::vector<LongCase> t = long_cases(Mode::Thread);
                           v.insert(v.end(), t.begin(), t.end());
                           return v;
                         }()),
                         long_name);

// Rank counts beyond the matrix's: the non-powers of two that recursive
// halving/doubling, Bruck and the trees fold differently (6, 7, 9) and a
// larger power of two (16), on two datatypes.
std::vector<LongCase> long_more_ranks_cases() {
  std::vector<LongCase> v;
  for (int ci = 0; ci < kNumColls; ci++)
    for (const std::string& algo : algos_of((Coll)ci))
      for (int n : {6, 7, 9, 16})
        for (loomDataType_t t : {loomUint8, loomFloat32})
          v.push_back({(Coll)ci, algo, Mode::Proc, n, t});
  for (int ci = 0; ci < kNumColls; ci++)
    for (int n : {6, 7, 9, 16}) v.push_back({(Coll)ci, "", Mode::Thread, n, loomBfloat16});
  return v;
}

INSTANTIATE_TEST_SUITE_P(CollLongMoreRanks, LongMatrix,
                         ::testing::ValuesIn(long_more_ranks_cases()), long_name);

class LongPipeline : public ::testing::TestWithParam<LongCase> {};

TEST_P(LongPipeline, SmallSlicesAndFifos) {
  const LongCase lc = GetParam();
  harness::run(
      lc.nranks, lc.mode,
      [&](Ctx& c) {
        Runner r(c, lc.algo + ", small slices");
        pipeline_matrix(r, c, lc.coll, lc.type);
      },
      pipeline_opts(lc.algo, kLongTimeoutS));
}

std::vector<LongCase> long_pipeline_cases() {
  std::vector<LongCase> v;
  for (int ci = 0; ci < kNumColls; ci++)
    for (const std::string& algo : algos_of((Coll)ci))
      for (int n : {2, 3, 4, 5, 8})
        for (loomDataType_t t : {loomInt8, loomBfloat16, loomFloat32, loomFloat64})
          v.push_back({(Coll)ci, algo, Mode::Proc, n, t});
  return v;
}

INSTANTIATE_TEST_SUITE_P(CollLong, LongPipeline, ::testing::ValuesIn(long_pipeline_cases()),
                         long_name);

class LongGroup : public ::testing::TestWithParam<GroupCase> {};

TEST_P(LongGroup, EveryCollectiveAndSendRecvInOneGroup) {
  const GroupCase g = GetParam();
  harness::run(
      g.nranks, g.mode, [&](Ctx& c) { group_body(c, g.algo.empty() ? "tuner" : g.algo); },
      opts_for(g.algo, kLongTimeoutS));
}

std::vector<GroupCase> long_group_cases() {
  std::vector<GroupCase> v;
  for (int n : kRankCounts) {
    v.push_back({Mode::Proc, n, kGroupAlgosA});
    v.push_back({Mode::Proc, n, kGroupAlgosB});
    v.push_back({Mode::Thread, n, ""});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(CollLong, LongGroup, ::testing::ValuesIn(long_group_cases()), group_name);

class LongStream : public ::testing::TestWithParam<GroupCase> {};

TEST_P(LongStream, EveryCollectiveQueuedOnAHostStream) {
  const GroupCase g = GetParam();
  harness::run(
      g.nranks, g.mode, [&](Ctx& c) { stream_body(c, g.algo.empty() ? "tuner" : g.algo); },
      opts_for(g.algo, kLongTimeoutS));
}

INSTANTIATE_TEST_SUITE_P(CollLong, LongStream, ::testing::ValuesIn(long_group_cases()), group_name);

}  // namespace
}  // namespace colltest
