// test_collectives.cc - the covering subset of the collective matrix, run
// in CI (suites CollCover/*; the full product is test_collectives_long.cc,
// suites CollLong/*), and the group, stream and PreMulSum tests.
//
// CoverMatrix: every collective x every algorithm that serves it (forced by
// LOOM_ALGO) on 1, 2, 3, 4, 5 and 8 process ranks, and the tuner's own
// choice on 1, 3 and 4 thread ranks; in each, every datatype (counts 7 and
// 1000, rotating ops, roots and placements), every op in every placement,
// a count that crosses pipeline slices, counts 1 and 0 (real and NULL
// buffers) and the matrix's biggest count once. CoverPipeline: the same
// through small slices and FIFOs. CoverGroup: every collective and sends and
// receives in one group. CoverStream: every collective queued on a host
// stream. CoverPreMulSum: a device-resident scalar read at run time.
// See test_collectives.h for how inputs and results are made and checked.
#include "test_collectives.h"

#include <ostream>
#include <string>
#include <vector>

namespace colltest {

Call make(Coll coll, loomDataType_t t, int op, size_t count, int root, Place pl, int variant) {
  Call k;
  k.coll = coll;
  k.type = t;
  k.op = op;
  k.count = count;
  k.root = root;
  k.place = pl;
  k.variant = variant;
  return k;
}

namespace {

using harness::Ctx;
using harness::Mode;

constexpr int kCoverTimeoutS = 200;
// Above pipeline slices (256 KiB) for every datatype of 4 bytes and more.
constexpr size_t kSliceCrossingCount = 70001;

// A few calls per datatype, rotating through ops, roots, placements and
// all-to-all-v shapes; then each op in each placement; then the edges.
void cover_body(Runner& r, const Ctx& c, Coll coll) {
  const int n = c.nranks;
  const std::vector<Place> places = places_of(coll);
  const int nops = is_reducing(coll) ? kNumOps : 1;
  for (int ti = 0; ti < kNumTypes && r.ok(); ti++)
    for (int j = 0; j < 2; j++)
      r.run(make(coll, kAllTypes[ti], (2 * ti + j) % nops, j ? 1000 : 7, (ti + j + 1) % n,
                 places[(size_t)(ti + j) % places.size()], (ti + j) % kNumVariants));
  for (int op = 0; op < nops; op++)
    for (Place pl : places) r.run(make(coll, loomFloat32, op, 1000, n - 1, pl, op % kNumVariants));
  for (Place pl : places)
    r.run(make(coll, loomFloat32, loomSum, kSliceCrossingCount, n / 2, pl, 2));
  r.run(make(coll, loomUint8, loomMax, 1, n - 1, Place::Out, 1));
  r.run(make(coll, loomInt32, loomSum, 0, n - 1, Place::Out));
  r.run(make(coll, loomInt32, loomSum, 0, n - 1, Place::OutNull));
  // The matrix's biggest count, once.
  r.run(make(coll, loomBfloat16, loomMin, capped_count(coll, n, loomBfloat16, kBigCount), n - 1,
             places.back(), 0));
}

struct CoverCase {
  Coll coll;
  std::string algo;  // "" on thread ranks: the tuner's choice
  Mode mode;
  int nranks;
};

std::vector<CoverCase> cover_cases() {
  std::vector<CoverCase> v;
  for (int ci = 0; ci < kNumColls; ci++) {
    Coll coll = (Coll)ci;
    for (const std::string& algo : algos_of(coll))
      for (int n : {1, 2, 3, 4, 5, 8}) v.push_back({coll, algo, Mode::Proc, n});
    for (int n : {1, 3, 4}) v.push_back({coll, "", Mode::Thread, n});
  }
  return v;
}

// What ctest and gtest print for a case (its test name says the same).
void PrintTo(const CoverCase& cc, std::ostream* os) {
  *os << coll_name(cc.coll) << " " << (cc.algo.empty() ? "tuner" : cc.algo) << " "
      << harness::mode_name(cc.mode) << cc.nranks;
}

class CoverMatrix : public ::testing::TestWithParam<CoverCase> {};

TEST_P(CoverMatrix, EveryTypeOpPlacement) {
  const CoverCase cc = GetParam();
  std::string label = cc.algo.empty() ? "tuner" : cc.algo;
  harness::run(
      cc.nranks, cc.mode,
      [&](Ctx& c) {
        Runner r(c, label);
        cover_body(r, c, cc.coll);
      },
      opts_for(cc.algo, kCoverTimeoutS));
}

std::string cover_name(const ::testing::TestParamInfo<CoverCase>& info) {
  const CoverCase& cc = info.param;
  return std::string(harness::mode_name(cc.mode)) + std::to_string(cc.nranks) + "_" +
         coll_name(cc.coll) + "_" + (cc.algo.empty() ? "tuner" : cc.algo);
}

INSTANTIATE_TEST_SUITE_P(CollCover, CoverMatrix, ::testing::ValuesIn(cover_cases()), cover_name);

// The same cover, every collective x algorithm on 3 process ranks, on
// buffers from loomMemAlloc (peers map them) and on registered buffers.
struct MemCoverCase {
  Coll coll;
  std::string algo;
  std::string mem;  // LOOM_TEST_BUFFERS: memalloc or registered
};

std::vector<MemCoverCase> mem_cover_cases() {
  std::vector<MemCoverCase> v;
  for (int ci = 0; ci < kNumColls; ci++)
    for (const std::string& algo : algos_of((Coll)ci))
      for (const char* mem : {"memalloc", "registered"}) v.push_back({(Coll)ci, algo, mem});
  return v;
}

void PrintTo(const MemCoverCase& mc, std::ostream* os) {
  *os << coll_name(mc.coll) << " " << mc.algo << " proc3 " << mc.mem;
}

class CoverMemory : public ::testing::TestWithParam<MemCoverCase> {};

TEST_P(CoverMemory, EveryTypeOpPlacement) {
  const MemCoverCase mc = GetParam();
  harness::Opts o = opts_for(mc.algo, kCoverTimeoutS);
  o.env.push_back({"LOOM_TEST_BUFFERS", mc.mem});
  harness::run(
      3, Mode::Proc,
      [&](Ctx& c) {
        Runner r(c, mc.algo + " on " + mc.mem + " buffers");
        cover_body(r, c, mc.coll);
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(CollCover, CoverMemory, ::testing::ValuesIn(mem_cover_cases()),
                         [](const ::testing::TestParamInfo<MemCoverCase>& info) {
                           const MemCoverCase& mc = info.param;
                           return std::string("proc3_") + coll_name(mc.coll) + "_" + mc.algo + "_" +
                                  mc.mem;
                         });

// Every reducing collective x algorithm with the executor staging each
// receive and reducing after (LOOM_FUSED_REDUCE=0), over shm and sockets:
// the path a transport without a fused receive-and-reduce takes.
struct StagedCase {
  Coll coll;
  std::string algo;
  std::string transport;
};

std::vector<StagedCase> staged_cases() {
  std::vector<StagedCase> v;
  for (Coll coll : {Coll::AllReduce, Coll::Reduce, Coll::ReduceScatter})
    for (const std::string& algo : algos_of(coll))
      for (const char* tp : {"shm", "socket"}) v.push_back({coll, algo, tp});
  return v;
}

void PrintTo(const StagedCase& sc, std::ostream* os) {
  *os << coll_name(sc.coll) << " " << sc.algo << " proc3 staged over " << sc.transport;
}

class CoverStaged : public ::testing::TestWithParam<StagedCase> {};

TEST_P(CoverStaged, EveryTypeOpPlacement) {
  const StagedCase sc = GetParam();
  harness::Opts o = opts_for(sc.algo, kCoverTimeoutS);
  o.env.push_back({"LOOM_FUSED_REDUCE", "0"});
  o.env.push_back({"LOOM_DIRECT", "0"});
  o.env.push_back({"LOOM_TRANSPORTS", sc.transport});
  harness::run(
      3, Mode::Proc,
      [&](Ctx& c) {
        Runner r(c, sc.algo + " staged over " + sc.transport);
        cover_body(r, c, sc.coll);
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(CollCover, CoverStaged, ::testing::ValuesIn(staged_cases()),
                         [](const ::testing::TestParamInfo<StagedCase>& info) {
                           const StagedCase& sc = info.param;
                           return std::string("proc3_") + coll_name(sc.coll) + "_" + sc.algo + "_" +
                                  sc.transport;
                         });

// A device-resident PreMulSum scalar (loomScalarDevice) is read when the
// operation runs, by every reducing collective and algorithm.
void premul_device_body(const Ctx& c) {
  const int n = c.nranks;
  const size_t cnt = 1000;
  const float want = 3.0f * (float)(n * (n + 1) / 2);
  float scalar = 5.0f;
  loomRedOp_t pm;
  ASSERT_LOOM_OK(loomRedOpCreatePreMulSum(&pm, &scalar, loomFloat32, loomScalarDevice, c.comm));
  scalar = 3.0f;  // changed after creation: the value when each call runs counts
  std::vector<float> v(cnt * n, (float)(c.rank + 1)), out(cnt, -1.0f);
  EXPECT_LOOM_OK(loomAllReduce(v.data(), out.data(), cnt, loomFloat32, pm, c.comm, nullptr));
  for (size_t i = 0; i < cnt; i++) ASSERT_EQ(out[i], want) << "all-reduce, element " << i;
  out.assign(cnt, -1.0f);
  EXPECT_LOOM_OK(loomReduce(v.data(), out.data(), cnt, loomFloat32, pm, n - 1, c.comm, nullptr));
  if (c.rank == n - 1) {
    for (size_t i = 0; i < cnt; i++) ASSERT_EQ(out[i], want) << "reduce, element " << i;
  }
  out.assign(cnt, -1.0f);
  EXPECT_LOOM_OK(loomReduceScatter(v.data(), out.data(), cnt, loomFloat32, pm, c.comm, nullptr));
  for (size_t i = 0; i < cnt; i++) ASSERT_EQ(out[i], want) << "reduce-scatter, element " << i;
  EXPECT_LOOM_OK(loomRedOpDestroy(pm, c.comm));
}

class CoverPreMulSum : public ::testing::TestWithParam<GroupCase> {};

TEST_P(CoverPreMulSum, DeviceScalarReadAtRunTime) {
  const GroupCase g = GetParam();
  harness::run(g.nranks, g.mode, premul_device_body, opts_for(g.algo, kCoverTimeoutS));
}

INSTANTIATE_TEST_SUITE_P(CollCover, CoverPreMulSum,
                         ::testing::Values(GroupCase{Mode::Proc, 3, kGroupAlgosA},
                                           GroupCase{Mode::Proc, 5, kGroupAlgosB},
                                           GroupCase{Mode::Thread, 4, ""},
                                           GroupCase{Mode::Proc, 4, kGroupAlgosC},
                                           GroupCase{Mode::Proc, 3, kGroupAlgosD}),
                         group_name);

// Small slices and FIFOs (pipeline_opts), every collective and algorithm,
// two datatypes.
class CoverPipeline : public ::testing::TestWithParam<CoverCase> {};

TEST_P(CoverPipeline, SmallSlicesAndFifos) {
  const CoverCase cc = GetParam();
  harness::run(
      cc.nranks, cc.mode,
      [&](Ctx& c) {
        Runner r(c, cc.algo + ", small slices");
        for (loomDataType_t t : {loomUint8, loomFloat64}) pipeline_matrix(r, c, cc.coll, t);
      },
      pipeline_opts(cc.algo, kCoverTimeoutS));
}

std::vector<CoverCase> pipeline_cover_cases() {
  std::vector<CoverCase> v;
  for (int ci = 0; ci < kNumColls; ci++)
    for (const std::string& algo : algos_of((Coll)ci)) v.push_back({(Coll)ci, algo, Mode::Proc, 5});
  return v;
}

INSTANTIATE_TEST_SUITE_P(CollCover, CoverPipeline, ::testing::ValuesIn(pipeline_cover_cases()),
                         cover_name);

}  // namespace

// ---- Groups -------------------------------------------------------------------------

namespace {

// Sends and receives in the group: to the next rank and the one before,
// with different counts, so a swapped pair shows.
struct P2P {
  int next, prev;
  std::vector<int32_t> to_next, to_prev, from_prev, from_next;
};

int32_t p2p_value(int src, int dst, size_t i) {
  return (int32_t)(src * 1000003 + dst * 7919 + (int)i);
}

P2P make_p2p(const Ctx& c) {
  P2P p;
  p.next = (c.rank + 1) % c.nranks;
  p.prev = (c.rank + c.nranks - 1) % c.nranks;
  p.to_next.resize(1000);
  p.to_prev.resize(333);
  for (size_t i = 0; i < p.to_next.size(); i++) p.to_next[i] = p2p_value(c.rank, p.next, i);
  for (size_t i = 0; i < p.to_prev.size(); i++) p.to_prev[i] = p2p_value(c.rank, p.prev, i) ^ 1;
  p.from_prev.assign(1000, -1);
  p.from_next.assign(333, -1);
  return p;
}

void check_p2p(const Ctx& c, const P2P& p) {
  for (size_t i = 0; i < p.from_prev.size(); i++)
    ASSERT_EQ(p.from_prev[i], p2p_value(p.prev, c.rank, i))
        << "rank " << c.rank << ": receive from " << p.prev << ", element " << i;
  for (size_t i = 0; i < p.from_next.size(); i++)
    ASSERT_EQ(p.from_next[i], p2p_value(p.next, c.rank, i) ^ 1)
        << "rank " << c.rank << ": receive from " << p.next << ", element " << i;
}

}  // namespace

void group_body(const harness::Ctx& c, const std::string& label) {
  const int n = c.nranks;
  Runner r(c, label);
  const std::vector<Call> calls = {
      make(Coll::AllReduce, loomFloat32, loomSum, 1000, 0, Place::Out),
      make(Coll::Broadcast, loomInt8, 0, 1000, 1 % n, Place::Out),
      make(Coll::Reduce, loomBfloat16, kPreMul, 1000, n - 1, Place::OutNull),
      make(Coll::AllGather, loomInt64, 0, 7, 0, Place::In),
      make(Coll::ReduceScatter, loomFloat16, loomAvg, 1000, 0, Place::Out),
      make(Coll::AlltoAll, loomUint8, 0, 1001, 0, Place::Out),
      make(Coll::AlltoAllv, loomFloat32, 0, 100, 0, Place::Out, 0),
      make(Coll::Gather, loomFloat64, 0, 7, n / 2, Place::In),
      make(Coll::Scatter, loomUint32, 0, 1000, n - 1, Place::Out),
      make(Coll::AllReduce, loomInt32, loomMax, kSliceCrossingCount, 0, Place::In),
  };
  for (int rep = 0; rep < 2; rep++) {
    SCOPED_TRACE("group " + std::to_string(rep));
    std::vector<PreparedPtr> prepared;
    for (const Call& k : calls) prepared.push_back(r.prepare(k));
    P2P p = make_p2p(c);
    ASSERT_LOOM_OK(loomGroupStart());
    for (size_t i = 0; i < calls.size(); i++)
      EXPECT_EQ(r.issue(*prepared[i]), loomSuccess) << r.describe(calls[i]);
    EXPECT_LOOM_OK(
        loomRecv(p.from_prev.data(), p.from_prev.size(), loomInt32, p.prev, c.comm, nullptr));
    EXPECT_LOOM_OK(
        loomSend(p.to_next.data(), p.to_next.size(), loomInt32, p.next, c.comm, nullptr));
    EXPECT_LOOM_OK(
        loomSend(p.to_prev.data(), p.to_prev.size(), loomInt32, p.prev, c.comm, nullptr));
    EXPECT_LOOM_OK(
        loomRecv(p.from_next.data(), p.from_next.size(), loomInt32, p.next, c.comm, nullptr));
    ASSERT_LOOM_OK(loomGroupEnd());
    for (auto& pp : prepared) r.verify(*pp);
    check_p2p(c, p);
    if (::testing::Test::HasFailure()) return;
  }
}

void stream_body(const harness::Ctx& c, const std::string& label) {
  const int n = c.nranks;
  Runner r(c, label);
  shim::StreamGuard stream;
  ASSERT_NE(stream.get(), nullptr) << "loomStreamCreate failed: " << loomGetLastError(nullptr);
  r.set_stream(stream.get());
  std::vector<Call> calls;
  for (int ci = 0; ci < kNumColls; ci++) {
    Coll coll = (Coll)ci;
    int i = 0;
    for (Place pl : places_of(coll))
      for (size_t count : {(size_t)1000, kSliceCrossingCount}) {
        loomDataType_t t = kAllTypes[(size_t)(ci * 5 + i) % kNumTypes];
        calls.push_back(
            make(coll, t, (ci + i) % kNumOps, count, (ci + i) % n, pl, i % kNumVariants));
        i++;
      }
  }
  std::vector<PreparedPtr> prepared;
  for (const Call& k : calls) prepared.push_back(r.prepare(k));
  for (size_t i = 0; i < calls.size(); i++) {
    EXPECT_EQ(r.issue(*prepared[i]), loomSuccess)
        << r.describe(calls[i]) << ": " << loomGetLastError(c.comm);
    r.clobber_arguments(*prepared[i]);
  }
  ASSERT_LOOM_OK(loomStreamSynchronize(stream.get()));
  EXPECT_EQ(loomStreamQuery(stream.get()), loomSuccess);
  for (auto& pp : prepared) r.verify(*pp);
}

const char* const kGroupAlgosA =
    "allreduce:tree;broadcast:ring;reduce:tree;allgather:rhd;reducescatter:rhd;alltoall:bruck";
const char* const kGroupAlgosB =
    "allreduce:rhd;broadcast:tree;reduce:ring;allgather:ring;reducescatter:ring;alltoall:pairwise";

// The direct plans (peers read each other's buffers between syncs).
const char* const kGroupAlgosC =
    "allreduce:twoshot;broadcast:read;allgather:read;reducescatter:read;alltoall:read";
const char* const kGroupAlgosD =
    "allreduce:oneshot;broadcast:read;allgather:read;reducescatter:read";

void PrintTo(const GroupCase& g, std::ostream* os) {
  *os << harness::mode_name(g.mode) << g.nranks << " " << (g.algo.empty() ? "tuner" : g.algo);
}

std::string group_name(const ::testing::TestParamInfo<GroupCase>& info) {
  const GroupCase& g = info.param;
  std::string algo = g.algo.empty()           ? "tuner"
                     : g.algo == kGroupAlgosA ? "algosA"
                     : g.algo == kGroupAlgosB ? "algosB"
                     : g.algo == kGroupAlgosC ? "algosC"
                                              : "algosD";
  return std::string(harness::mode_name(g.mode)) + std::to_string(g.nranks) + "_" + algo;
}

namespace {

using harness::Ctx;
using harness::Mode;

class CoverGroup : public ::testing::TestWithParam<GroupCase> {};

TEST_P(CoverGroup, EveryCollectiveAndSendRecvInOneGroup) {
  const GroupCase g = GetParam();
  harness::run(
      g.nranks, g.mode, [&](Ctx& c) { group_body(c, g.algo.empty() ? "tuner" : g.algo); },
      opts_for(g.algo, kCoverTimeoutS));
}

class CoverStream : public ::testing::TestWithParam<GroupCase> {};

TEST_P(CoverStream, EveryCollectiveQueuedOnAHostStream) {
  const GroupCase g = GetParam();
  harness::run(
      g.nranks, g.mode, [&](Ctx& c) { stream_body(c, g.algo.empty() ? "tuner" : g.algo); },
      opts_for(g.algo, kCoverTimeoutS));
}

INSTANTIATE_TEST_SUITE_P(CollCover, CoverStream,
                         ::testing::Values(GroupCase{Mode::Proc, 4, kGroupAlgosA},
                                           GroupCase{Mode::Proc, 3, kGroupAlgosB},
                                           GroupCase{Mode::Thread, 5, ""}),
                         group_name);

INSTANTIATE_TEST_SUITE_P(CollCover, CoverGroup,
                         ::testing::Values(GroupCase{Mode::Proc, 3, kGroupAlgosA},
                                           GroupCase{Mode::Proc, 4, kGroupAlgosB},
                                           GroupCase{Mode::Thread, 5, ""},
                                           GroupCase{Mode::Thread, 1, ""}),
                         group_name);

}  // namespace
}  // namespace colltest
