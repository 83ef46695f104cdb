// Section 2 of PARALLEL.md: the device mesh. Every rank checks its own communicators against
// an independent model of the layout: who the members are (gathered over the communicator),
// in which order (its rank per the formula), and that a flattened group's all-reduce equals
// all-reducing over its dims one after the other. The contract's two worked examples are
// checked against their literal lists.
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "par_test.h"

namespace {

using harness::Ctx;
using harness::Mode;
using partest::RanksMode;

constexpr int kDims = loomMeshNumDims;
const char* const kNames[kDims] = {"dp", "pp", "cp", "tp", "ep"};

// Like ASSERT_LOOM_OK, with the text of the communicator the error went to.
#define MESH_OK(call, comm)                                                       \
  do {                                                                            \
    loomResult_t r_ = (call);                                                     \
    ASSERT_EQ(r_, loomSuccess) << #call << ": " << loomGetErrorString(r_) << ": " \
                               << loomGetLastError(comm);                         \
  } while (0)

using Coords = std::array<int, kDims>;

struct MeshCase {
  Coords sizes;       // indexed by loomMeshDim_t
  const char* order;  // nullptr: the default
  std::vector<const char*> groups;
};

// "dp-cp" -> {loomMeshDp, loomMeshCp}; the test's own parser, not the library's.
std::vector<int> dims_of(const std::string& s) {
  std::vector<int> out;
  size_t at = 0;
  while (true) {
    size_t end = s.find('-', at);
    std::string name = s.substr(at, end == std::string::npos ? std::string::npos : end - at);
    for (int d = 0; d < kDims; d++)
      if (name == kNames[d]) out.push_back(d);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return out;
}

// The layout of PARALLEL.md section 2, written out from the text.
struct Model {
  Coords sizes{}, stride{};
  explicit Model(const MeshCase& mc) : sizes(mc.sizes) {
    std::vector<int> order = dims_of(mc.order ? mc.order : "tp-cp-ep-dp-pp");
    for (int d = 0; d < kDims; d++)
      if (std::find(order.begin(), order.end(), d) == order.end()) order.push_back(d);
    int s = 1;
    for (int d : order) {
      stride[d] = s;
      s *= sizes[d];
    }
  }
  Coords coords(int rank) const {
    Coords c{};
    for (int d = 0; d < kDims; d++) c[d] = rank / stride[d] % sizes[d];
    return c;
  }
  int rank(const Coords& c) const {
    int r = 0;
    for (int d = 0; d < kDims; d++) r += c[d] * stride[d];
    return r;
  }
  // The members of rank's group over dims, in group rank order (mixed radix, first fastest).
  std::vector<int> members(int rank, const std::vector<int>& dims) const {
    int n = 1;
    for (int d : dims) n *= sizes[d];
    std::vector<int> out;
    for (int k = 0; k < n; k++) {
      Coords c = coords(rank);
      int rest = k;
      for (int d : dims) {
        c[d] = rest % sizes[d];
        rest /= sizes[d];
      }
      out.push_back(this->rank(c));
    }
    return out;
  }
  int group_rank(int rank, const std::vector<int>& dims) const {
    Coords c = coords(rank);
    int key = 0, radix = 1;
    for (int d : dims) {
      key += c[d] * radix;
      radix *= sizes[d];
    }
    return key;
  }
};

// The world ranks of comm's members, in comm rank order.
std::vector<int> members_of(loomComm_t comm, int world_rank) {
  int n = 0;
  EXPECT_LOOM_OK(loomCommCount(comm, &n));
  std::vector<int> all(n, -1);
  EXPECT_EQ(loomAllGather(&world_rank, all.data(), 1, loomInt32, comm, nullptr), loomSuccess)
      << loomGetLastError(comm);
  return all;
}

// comm is exactly rank's group over dims, and this rank has the formula's rank in it.
void check_group(const Model& m, loomComm_t comm, int rank, const std::vector<int>& dims,
                 const std::string& what) {
  ASSERT_NE(comm, nullptr) << what;
  int crank = -1;
  EXPECT_LOOM_OK(loomCommUserRank(comm, &crank));
  EXPECT_EQ(crank, m.group_rank(rank, dims)) << what << " on world rank " << rank;
  EXPECT_EQ(members_of(comm, rank), m.members(rank, dims)) << what << " on world rank " << rank;
}

// Distinct integer-valued doubles per rank, so that every order of summation is exact.
std::vector<double> values_of(int rank) {
  return {double(rank + 1), double(3 * rank * rank - 7), double(1000 - 13 * rank)};
}

// A flattened group's all-reduce equals all-reducing over its dims one after the other.
void check_group_reduce(loomMesh_t mesh, loomComm_t group, const std::vector<int>& dims, int rank) {
  std::vector<double> x = values_of(rank), flat(x.size()), steps = x;
  ASSERT_EQ(loomAllReduce(x.data(), flat.data(), x.size(), loomFloat64, loomSum, group, nullptr),
            loomSuccess);
  for (int d : dims) {
    loomComm_t dc = nullptr;
    ASSERT_LOOM_OK(loomMeshGetComm(mesh, (loomMeshDim_t)d, &dc));
    ASSERT_EQ(
        loomAllReduce(steps.data(), steps.data(), steps.size(), loomFloat64, loomSum, dc, nullptr),
        loomSuccess);
  }
  EXPECT_EQ(flat, steps);
}

// Coordinates, sizes and rank <-> coords, against the model and against every rank's own view.
void check_coords(const Model& m, loomMesh_t mesh, const Ctx& c) {
  Coords mine{};
  for (int d = 0; d < kDims; d++) {
    int v = -1;
    ASSERT_LOOM_OK(loomMeshGetCoord(mesh, (loomMeshDim_t)d, &mine[d]));
    ASSERT_LOOM_OK(loomMeshGetSize(mesh, (loomMeshDim_t)d, &v));
    EXPECT_EQ(v, m.sizes[d]) << kNames[d];
  }
  EXPECT_EQ(mine, m.coords(c.rank));
  std::vector<int> all(kDims * c.nranks, -1);
  ASSERT_EQ(loomAllGather(mine.data(), all.data(), kDims, loomInt32, c.comm, nullptr), loomSuccess);
  for (int r = 0; r < c.nranks; r++) {
    Coords of{}, theirs{};
    std::copy(all.begin() + r * kDims, all.begin() + (r + 1) * kDims, theirs.begin());
    ASSERT_LOOM_OK(loomMeshGetCoordsOf(mesh, r, of.data()));
    EXPECT_EQ(of, theirs) << "GetCoordsOf(" << r << ") vs that rank's GetCoord";
    int back = -1;
    ASSERT_LOOM_OK(loomMeshGetRankOf(mesh, of.data(), &back));
    EXPECT_EQ(back, r);
  }
}

void check_case(const Ctx& c, const MeshCase& mc) {
  std::vector<const char*> groups = mc.groups;
  groups.push_back(nullptr);
  loomMesh_t mesh = nullptr;
  MESH_OK(loomMeshCreate(c.comm, mc.sizes.data(), mc.order, groups.data(), &mesh), c.comm);
  Model m(mc);
  std::string name = std::string("order ") + (mc.order ? mc.order : "(default)");
  check_coords(m, mesh, c);
  for (int d = 0; d < kDims; d++) {
    loomComm_t dc = nullptr;
    ASSERT_LOOM_OK(loomMeshGetComm(mesh, (loomMeshDim_t)d, &dc));
    check_group(m, dc, c.rank, {d}, name + ", dim " + kNames[d]);
  }
  for (const char* g : mc.groups) {
    loomComm_t gc = nullptr;
    MESH_OK(loomMeshGetGroup(mesh, g, &gc), c.comm);
    check_group(m, gc, c.rank, dims_of(g), name + ", group " + g);
    check_group_reduce(mesh, gc, dims_of(g), c.rank);
  }
  MESH_OK(loomMeshDestroy(mesh), c.comm);
}

// A few layouts of each world size used below: every dim first somewhere, left-out dims,
// groups in both orders, sizes of 1 everywhere.
std::vector<MeshCase> cases_for(int n) {
  //                 dp pp cp tp ep
  switch (n) {
    case 1:
      return {{{1, 1, 1, 1, 1}, nullptr, {"dp-cp", "tp-dp-pp-cp-ep"}},
              {{1, 1, 1, 1, 1}, "dp", {"ep"}}};
    case 2:
      return {{{2, 1, 1, 1, 1}, nullptr, {"dp-ep", "ep-dp"}},
              {{1, 1, 1, 2, 1}, "tp", {"tp-pp"}},
              {{1, 1, 1, 1, 2}, "pp-ep", {"dp-cp-ep"}}};
    case 3:
      return {{{1, 3, 1, 1, 1}, nullptr, {"pp-dp", "pp"}},
              {{1, 1, 3, 1, 1}, "cp-pp-dp-tp-ep", {"dp-cp"}},
              {{1, 1, 1, 1, 3}, "ep", {"dp-ep"}}};
    case 4:
      return {{{2, 1, 1, 2, 1}, nullptr, {"dp-cp", "tp-dp", "dp-tp"}},
              {{1, 2, 1, 1, 2}, "ep-pp-dp-tp-cp", {"dp-ep", "ep-pp"}},
              {{1, 1, 1, 4, 1}, "tp", {"tp", "dp-cp-ep"}},
              {{2, 1, 2, 1, 1}, "dp-cp", {"cp-dp"}}};
    case 6:
      return {{{3, 1, 1, 2, 1}, "tp-dp-pp", {"dp-tp", "tp-dp"}},
              {{1, 3, 2, 1, 1}, nullptr, {"pp-cp", "cp-ep"}},
              {{2, 3, 1, 1, 1}, "pp-dp", {"dp-pp"}}};
    case 8:
      return {{{2, 1, 2, 2, 1}, nullptr, {"dp-cp", "cp-dp", "dp-cp-ep", "tp-cp-dp"}},
              {{2, 2, 1, 1, 2}, "pp-ep-dp", {"dp-ep", "ep-pp-dp"}},
              {{1, 4, 1, 2, 1}, "pp-tp", {"tp-pp"}}};
    case 16:
      return {{{2, 2, 2, 2, 1}, nullptr, {"dp-cp", "dp-cp-ep", "tp-pp"}},
              {{2, 2, 2, 1, 2}, "ep-cp-dp-pp", {"dp-ep", "dp-cp-ep"}}};
    default:
      return {{{n, 1, 1, 1, 1}, nullptr, {"dp-tp"}}};
  }
}

class MeshLayout : public ::testing::TestWithParam<RanksMode> {};

TEST_P(MeshLayout, GroupsPartitionTheWorldByTheFormula) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        for (const MeshCase& mc : cases_for(c.nranks)) {
          check_case(c, mc);
          if (::testing::Test::HasFatalFailure()) return;
        }
      },
      partest::opts());
}

class MeshSizeOne : public ::testing::TestWithParam<RanksMode> {};

// Every communicator of size 1 works as one: a collective over it is a copy.
TEST_P(MeshSizeOne, CommunicatorsOfOneRankWork) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        int sizes[kDims] = {1, 1, c.nranks, 1, 1};  // everything in cp
        const char* groups[] = {"dp-tp", "ep", nullptr};
        loomMesh_t mesh = nullptr;
        MESH_OK(loomMeshCreate(c.comm, sizes, "cp", groups, &mesh), c.comm);
        std::vector<loomComm_t> ones;
        for (int d : {loomMeshDp, loomMeshPp, loomMeshTp, loomMeshEp}) {
          ones.emplace_back();
          ASSERT_LOOM_OK(loomMeshGetComm(mesh, (loomMeshDim_t)d, &ones.back()));
        }
        for (const char* g : {"dp-tp", "ep"}) {
          ones.emplace_back();
          ASSERT_LOOM_OK(loomMeshGetGroup(mesh, g, &ones.back()));
        }
        for (loomComm_t one : ones) {
          int rank = -1, count = -1;
          ASSERT_NE(one, nullptr);
          ASSERT_LOOM_OK(loomCommUserRank(one, &rank));
          ASSERT_LOOM_OK(loomCommCount(one, &count));
          EXPECT_EQ(rank, 0);
          EXPECT_EQ(count, 1);
          std::vector<double> x = values_of(c.rank), y(x.size());
          ASSERT_EQ(loomAllReduce(x.data(), y.data(), x.size(), loomFloat64, loomSum, one, nullptr),
                    loomSuccess);
          EXPECT_EQ(x, y);
        }
        MESH_OK(loomMeshDestroy(mesh), c.comm);
      },
      partest::opts());
}

// Process ranks at a few sizes (each process start costs); thread ranks up to 16.
INSTANTIATE_TEST_SUITE_P(Ranks, MeshLayout,
                         ::testing::Values(RanksMode{3, Mode::Proc}, RanksMode{4, Mode::Proc},
                                           RanksMode{8, Mode::Proc}, RanksMode{1, Mode::Thread},
                                           RanksMode{2, Mode::Thread}, RanksMode{3, Mode::Thread},
                                           RanksMode{4, Mode::Thread}, RanksMode{6, Mode::Thread},
                                           RanksMode{8, Mode::Thread}, RanksMode{16, Mode::Thread}),
                         partest::ranks_mode_name);
INSTANTIATE_TEST_SUITE_P(Ranks, MeshSizeOne,
                         ::testing::Values(RanksMode{3, Mode::Proc}, RanksMode{1, Mode::Thread},
                                           RanksMode{3, Mode::Thread}, RanksMode{8, Mode::Thread}),
                         partest::ranks_mode_name);

// The lists of world ranks each rank's communicator over dim holds, per rank.
std::vector<int> members_in(loomMesh_t mesh, loomMeshDim_t dim, int rank) {
  loomComm_t comm = nullptr;
  EXPECT_LOOM_OK(loomMeshGetComm(mesh, dim, &comm));
  return comm ? members_of(comm, rank) : std::vector<int>{};
}

// The group in list that holds rank (empty when none does).
std::vector<int> group_holding(const std::vector<std::vector<int>>& list, int rank) {
  for (const auto& g : list)
    if (std::find(g.begin(), g.end(), rank) != g.end()) return g;
  return {};
}

// Megatron's example: tp=2, dp=3, pp=4, order "tp-dp-pp" on 24 ranks.
TEST(MeshExamples, MegatronTp2Dp3Pp4Thread24) {
  harness::run(
      24, Mode::Thread,
      [](Ctx& c) {
        int sizes[kDims] = {3, 4, 1, 2, 1};
        loomMesh_t mesh = nullptr;
        MESH_OK(loomMeshCreate(c.comm, sizes, "tp-dp-pp", nullptr, &mesh), c.comm);
        const std::vector<std::vector<int>> dp = {{0, 2, 4},    {1, 3, 5},    {6, 8, 10},
                                                  {7, 9, 11},   {12, 14, 16}, {13, 15, 17},
                                                  {18, 20, 22}, {19, 21, 23}};
        std::vector<std::vector<int>> pp, tp;
        for (int j = 0; j < 6; j++) pp.push_back({j, j + 6, j + 12, j + 18});
        for (int j = 0; j < 12; j++) tp.push_back({2 * j, 2 * j + 1});
        EXPECT_EQ(members_in(mesh, loomMeshDp, c.rank), group_holding(dp, c.rank));
        EXPECT_EQ(members_in(mesh, loomMeshPp, c.rank), group_holding(pp, c.rank));
        EXPECT_EQ(members_in(mesh, loomMeshTp, c.rank), group_holding(tp, c.rank));
        EXPECT_EQ(members_in(mesh, loomMeshCp, c.rank), std::vector<int>{c.rank});
        EXPECT_EQ(members_in(mesh, loomMeshEp, c.rank), std::vector<int>{c.rank});
        MESH_OK(loomMeshDestroy(mesh), c.comm);
      },
      partest::opts());
}

// The worked example: 16 ranks, tp=2, cp=2, ep=1, dp=2, pp=2, the default order.
TEST(MeshExamples, WorkedSixteenRanksThread16) {
  harness::run(
      16, Mode::Thread,
      [](Ctx& c) {
        int sizes[kDims] = {2, 2, 2, 2, 1};
        const char* groups[] = {"dp-cp", nullptr};
        loomMesh_t mesh = nullptr;
        MESH_OK(loomMeshCreate(c.comm, sizes, nullptr, groups, &mesh), c.comm);
        Coords of{};
        ASSERT_LOOM_OK(loomMeshGetCoordsOf(mesh, 13, of.data()));
        EXPECT_EQ(of, (Coords{1, 1, 0, 1, 0}));  // dp 1, pp 1, cp 0, tp 1, ep 0
        loomComm_t flat = nullptr;
        ASSERT_LOOM_OK(loomMeshGetGroup(mesh, "dp-cp", &flat));
        std::vector<int> dp = members_in(mesh, loomMeshDp, c.rank);
        std::vector<int> cp = members_in(mesh, loomMeshCp, c.rank);
        std::vector<int> pp = members_in(mesh, loomMeshPp, c.rank);
        std::vector<int> tp = members_in(mesh, loomMeshTp, c.rank);
        std::vector<int> ep = members_in(mesh, loomMeshEp, c.rank);
        std::vector<int> dpcp = members_of(flat, c.rank);
        if (c.rank == 13) {
          EXPECT_EQ(tp, (std::vector<int>{12, 13}));
          EXPECT_EQ(cp, (std::vector<int>{13, 15}));
          EXPECT_EQ(dp, (std::vector<int>{9, 13}));
          EXPECT_EQ(pp, (std::vector<int>{5, 13}));
          EXPECT_EQ(ep, (std::vector<int>{13}));
          EXPECT_EQ(dpcp, (std::vector<int>{9, 13, 11, 15}));
          int r = -1;
          ASSERT_LOOM_OK(loomCommUserRank(flat, &r));
          EXPECT_EQ(r, 1);
        }
        // rank = tp + 2*cp + 4*dp + 8*pp for every rank.
        Coords mine{};
        for (int d = 0; d < kDims; d++)
          ASSERT_LOOM_OK(loomMeshGetCoord(mesh, (loomMeshDim_t)d, &mine[d]));
        EXPECT_EQ(c.rank, mine[loomMeshTp] + 2 * mine[loomMeshCp] + 4 * mine[loomMeshDp] +
                              8 * mine[loomMeshPp]);
        MESH_OK(loomMeshDestroy(mesh), c.comm);
      },
      partest::opts());
}

// ---- Errors (PARALLEL.md section 8, "Mesh") ------------------------------------------------

class MeshArgs : public ::testing::TestWithParam<RanksMode> {};

// Every rank makes the same misuse, so none waits on another; a valid call follows.
void misuse_create(const Ctx& c) {
  const int n = c.nranks;
  int ok[kDims] = {n, 1, 1, 1, 1};
  std::vector<loomMesh_t> out(1, reinterpret_cast<loomMesh_t>(&out));
  loomMesh_t* m = out.data();
  auto bytes = [&] { return partest::bytes_of(out); };
  const char* fn = "loomMeshCreate";
  EXPECT_MISUSE(loomMeshCreate(nullptr, ok, nullptr, nullptr, m), nullptr, fn, bytes(), "world");
  EXPECT_MISUSE(loomMeshCreate(c.comm, nullptr, nullptr, nullptr, m), c.comm, fn, bytes(),
                "sizes is NULL");
  EXPECT_MISUSE(loomMeshCreate(c.comm, ok, nullptr, nullptr, nullptr), c.comm, fn, bytes(),
                "mesh is NULL");
  int zero[kDims] = {n, 1, 0, 1, 1}, neg[kDims] = {n, 1, 1, 1, -2}, big[kDims] = {n, 1, 1, 2, 1};
  EXPECT_MISUSE(loomMeshCreate(c.comm, zero, nullptr, nullptr, m), c.comm, fn, bytes(), "sizes[cp]",
                "is 0");
  EXPECT_MISUSE(loomMeshCreate(c.comm, neg, nullptr, nullptr, m), c.comm, fn, bytes(), "sizes[ep]",
                "-2");
  std::string prod = "multiply to " + std::to_string(2 * n),
              world = "size of world is " + std::to_string(n);
  EXPECT_MISUSE(loomMeshCreate(c.comm, big, nullptr, nullptr, m), c.comm, fn, bytes(), prod.c_str(),
                world.c_str());
  struct {
    const char* order;
    std::vector<const char*> needles;
  } orders[] = {{"tp-xx-dp", {"order", "tp-xx-dp", "unknown", "\"xx\""}},
                {"dp-tp-dp", {"order", "\"dp\"", "twice"}},
                {"dp--tp", {"order", "missing"}},
                {"", {"order", "missing"}},
                {"TP-dp", {"order", "\"TP\""}}};
  for (const auto& o : orders) {
    EXPECT_MISUSE(loomMeshCreate(c.comm, ok, o.order, nullptr, m), c.comm, fn, bytes());
    std::string why = loomGetLastError(c.comm);
    for (const char* needle : o.needles) EXPECT_NE(why.find(needle), std::string::npos) << why;
  }
  if (n > 1) {
    std::string size = "size " + std::to_string(n);
    EXPECT_MISUSE(loomMeshCreate(c.comm, ok, "tp-cp", nullptr, m), c.comm, fn, bytes(),
                  "leaves out", "\"dp\"", size.c_str());
  }
  const char* unknown[] = {"dp-cp", "dp-zz", nullptr};
  const char* twice[] = {"cp-cp", nullptr};
  const char* empty[] = {"dp-", nullptr};
  EXPECT_MISUSE(loomMeshCreate(c.comm, ok, nullptr, unknown, m), c.comm, fn, bytes(), "groups[1]",
                "\"zz\"");
  EXPECT_MISUSE(loomMeshCreate(c.comm, ok, nullptr, twice, m), c.comm, fn, bytes(), "groups[0]",
                "\"cp\"", "twice");
  EXPECT_MISUSE(loomMeshCreate(c.comm, ok, nullptr, empty, m), c.comm, fn, bytes(), "groups[0]",
                "missing");
}

// The local calls' misuses on a valid mesh (dp = n, the rest 1; group "dp-cp").
void misuse_local(const Ctx& c, loomMesh_t mesh) {
  const int n = c.nranks;
  std::vector<loomComm_t> comm(1, reinterpret_cast<loomComm_t>(&comm));
  auto comm_bytes = [&] { return partest::bytes_of(comm); };
  EXPECT_MISUSE(loomMeshGetComm(nullptr, loomMeshDp, comm.data()), nullptr, "loomMeshGetComm",
                comm_bytes(), "mesh is NULL");
  EXPECT_MISUSE(loomMeshGetComm(mesh, (loomMeshDim_t)5, comm.data()), c.comm, "loomMeshGetComm",
                comm_bytes(), "dim is 5");
  EXPECT_MISUSE(loomMeshGetComm(mesh, (loomMeshDim_t)-1, comm.data()), c.comm, "loomMeshGetComm",
                comm_bytes(), "dim is -1");
  EXPECT_MISUSE(loomMeshGetComm(mesh, loomMeshDp, nullptr), c.comm, "loomMeshGetComm", comm_bytes(),
                "comm is NULL");
  EXPECT_MISUSE(loomMeshGetGroup(mesh, "cp-dp", comm.data()), c.comm, "loomMeshGetGroup",
                comm_bytes(), "\"cp-dp\"", "not a group named at creation", "named: \"dp-cp\"");
  EXPECT_MISUSE(loomMeshGetGroup(mesh, "dp", comm.data()), c.comm, "loomMeshGetGroup", comm_bytes(),
                "\"dp\"");
  EXPECT_MISUSE(loomMeshGetGroup(mesh, nullptr, comm.data()), c.comm, "loomMeshGetGroup",
                comm_bytes(), "dims is NULL");
  EXPECT_MISUSE(loomMeshGetGroup(mesh, "dp-cp", nullptr), c.comm, "loomMeshGetGroup", comm_bytes(),
                "comm is NULL");
  EXPECT_MISUSE(loomMeshGetGroup(nullptr, "dp-cp", comm.data()), nullptr, "loomMeshGetGroup",
                comm_bytes(), "mesh is NULL");

  std::vector<int> v(kDims, -7);
  auto v_bytes = [&] { return partest::bytes_of(v); };
  EXPECT_MISUSE(loomMeshGetCoord(mesh, (loomMeshDim_t)7, v.data()), c.comm, "loomMeshGetCoord",
                v_bytes(), "dim is 7");
  EXPECT_MISUSE(loomMeshGetCoord(mesh, loomMeshTp, nullptr), c.comm, "loomMeshGetCoord", v_bytes(),
                "coord is NULL");
  EXPECT_MISUSE(loomMeshGetSize(mesh, (loomMeshDim_t)-3, v.data()), c.comm, "loomMeshGetSize",
                v_bytes(), "dim is -3");
  EXPECT_MISUSE(loomMeshGetSize(nullptr, loomMeshTp, v.data()), nullptr, "loomMeshGetSize",
                v_bytes(), "mesh is NULL");
  EXPECT_MISUSE(loomMeshGetSize(mesh, loomMeshTp, nullptr), c.comm, "loomMeshGetSize", v_bytes(),
                "size is NULL");

  int far[kDims] = {n, 0, 0, 0, 0}, below[kDims] = {0, 0, 0, -1, 0}, at = -7;
  // Needles are named strings: a temporary's text would die inside EXPECT_MISUSE's loop.
  std::string is_n = "is " + std::to_string(n), range = "[0, " + std::to_string(n) + ")";
  std::string worldrank_n = "worldRank " + is_n;
  EXPECT_MISUSE(loomMeshGetRankOf(mesh, far, &at), c.comm, "loomMeshGetRankOf",
                partest::bytes_of(std::vector<int>{at}), "coords[dp]", is_n.c_str(), range.c_str());
  EXPECT_MISUSE(loomMeshGetRankOf(mesh, below, &at), c.comm, "loomMeshGetRankOf",
                partest::bytes_of(std::vector<int>{at}), "coords[tp]", "-1", "[0, 1)");
  EXPECT_MISUSE(loomMeshGetRankOf(mesh, nullptr, &at), c.comm, "loomMeshGetRankOf",
                partest::bytes_of(std::vector<int>{at}), "coords is NULL");
  EXPECT_MISUSE(loomMeshGetRankOf(mesh, far, nullptr), c.comm, "loomMeshGetRankOf",
                partest::bytes_of(std::vector<int>{at}), "worldRank is NULL");
  EXPECT_MISUSE(loomMeshGetCoordsOf(mesh, -1, v.data()), c.comm, "loomMeshGetCoordsOf", v_bytes(),
                "worldRank is -1", range.c_str());
  EXPECT_MISUSE(loomMeshGetCoordsOf(mesh, n, v.data()), c.comm, "loomMeshGetCoordsOf", v_bytes(),
                worldrank_n.c_str());
  EXPECT_MISUSE(loomMeshGetCoordsOf(mesh, 0, nullptr), c.comm, "loomMeshGetCoordsOf", v_bytes(),
                "coords is NULL");
  EXPECT_MISUSE(loomMeshDestroy(nullptr), nullptr, "loomMeshDestroy", v_bytes(), "mesh is NULL");
}

TEST_P(MeshArgs, MisuseNamesTheArgumentAndAValidCallFollows) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        misuse_create(c);
        // A valid mesh on the same world after the misuses, and a collective over it.
        int sizes[kDims] = {c.nranks, 1, 1, 1, 1};
        const char* groups[] = {"dp-cp", nullptr};
        loomMesh_t mesh = nullptr;
        MESH_OK(loomMeshCreate(c.comm, sizes, nullptr, groups, &mesh), c.comm);
        misuse_local(c, mesh);
        loomComm_t dp = nullptr;
        ASSERT_LOOM_OK(loomMeshGetComm(mesh, loomMeshDp, &dp));
        std::vector<double> x = values_of(c.rank), y(x.size());
        ASSERT_EQ(loomAllReduce(x.data(), y.data(), x.size(), loomFloat64, loomSum, dp, nullptr),
                  loomSuccess);
        double want = 0;
        for (int r = 0; r < c.nranks; r++) want += values_of(r)[0];
        EXPECT_EQ(y[0], want);
        int at = -1, coords[kDims] = {c.nranks - 1, 0, 0, 0, 0};
        ASSERT_LOOM_OK(loomMeshGetRankOf(mesh, coords, &at));
        EXPECT_EQ(at, c.nranks - 1);
        MESH_OK(loomMeshDestroy(mesh), c.comm);
        // world is not the mesh's: it still works.
        EXPECT_EQ(partest::sum_ranks(1.0, c.comm), c.nranks);
      },
      partest::opts());
}

INSTANTIATE_TEST_SUITE_P(Ranks, MeshArgs,
                         ::testing::Values(RanksMode{3, Mode::Proc}, RanksMode{3, Mode::Thread},
                                           RanksMode{1, Mode::Thread}),
                         partest::ranks_mode_name);

}  // namespace
