// Double binary tree plans (tree.c): all-reduce, broadcast and reduce for
// every rank count from 1 to 64, proved by the symbolic checker; the two
// trees read back from the plans' own traffic and checked for shape; step
// counts that show the pipeline and the latency.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

extern "C" {
#include "collectives/plan.h"
}

namespace {

enum class Coll { kAllReduce, kBroadcast, kReduce };

const char* Name(Coll c) {
  switch (c) {
    case Coll::kAllReduce:
      return "all-reduce";
    case Coll::kBroadcast:
      return "broadcast";
    case Coll::kReduce:
      return "reduce";
  }
  return "?";
}

struct Case {
  Coll coll;
  int n;
  size_t count;
  size_t slice;
  int root;
  bool premul;
  bool avg;
};

std::string Describe(const Case& c) {
  return std::string(Name(c.coll)) + " n=" + std::to_string(c.n) +
         " count=" + std::to_string(c.count) + " slice=" + std::to_string(c.slice) +
         " root=" + std::to_string(c.root) + (c.premul ? " premul" : "") + (c.avg ? " avg" : "");
}

// One plan per rank, built for a case and freed on scope exit.
class Plans {
 public:
  explicit Plans(const Case& c) : c_(c), p_(c.n) {
    for (int r = 0; r < c.n; r++) plan_init(&p_[r], r, c.n, "test");
    for (int r = 0; r < c.n; r++) {
      coll_args a = {};
      a.nranks = c.n;
      a.rank = r;
      a.count = c.count;
      a.slice_elems = c.slice;
      a.premul = c.premul;
      a.avg = c.avg;
      a.root = c.root;
      loomResult_t res = loomInternalError;
      switch (c.coll) {
        case Coll::kAllReduce:
          res = tree_allreduce_build(&a, &p_[r]);
          break;
        case Coll::kBroadcast:
          res = tree_broadcast_build(&a, &p_[r]);
          break;
        case Coll::kReduce:
          res = tree_reduce_build(&a, &p_[r]);
          break;
      }
      if (res != loomSuccess && built_) {
        built_ = false;
        error_ = "rank " + std::to_string(r) + " failed to build (" + std::to_string(res) + ")";
      }
    }
  }
  ~Plans() {
    for (auto& p : p_) plan_free(&p);
  }
  Plans(const Plans&) = delete;
  Plans& operator=(const Plans&) = delete;

  const plan& operator[](int r) const { return p_[r]; }

  // Empty when the plans build and are a correct collective, else why not.
  std::string Check() const {
    if (!built_) return Describe(c_) + ": " + error_;
    static const check_kind kinds[] = {CHECK_ALLREDUCE, CHECK_BROADCAST, CHECK_REDUCE};
    check_spec spec = {};
    spec.kind = kinds[(int)c_.coll];
    spec.nranks = c_.n;
    spec.count = c_.count;
    spec.root = c_.root;
    char why[512] = "unset";
    if (plan_check_spec(&spec, p_.data(), why, sizeof(why)) == 0) return "";
    return Describe(c_) + ": " + (why[0] ? why : "failed without a reason");
  }

 private:
  Case c_;
  std::vector<plan> p_;
  bool built_ = true;
  std::string error_;
};

int CeilLog2(int n) {
  int d = 0;
  while ((1 << d) < n) d++;
  return d;
}

int FloorLog2(int n) {
  int d = 0;
  while ((2 << d) <= n) d++;
  return d;
}

// ---- Correctness: the checker over the whole matrix ----

const size_t kCounts[] = {0, 1, 2, 7, 1000};
const size_t kSlices[] = {1, 3, 1 << 20};

// The root of the long plans below.
int LongRoot(int n) {
  return 2 * n / 3 % n;
}

// Every root for small rank counts; the ends, the middle, a neighbour of the
// first and the root of the long plans above.
std::vector<int> Roots(int n) {
  std::vector<int> roots;
  if (n <= 12) {
    for (int r = 0; r < n; r++) roots.push_back(r);
    return roots;
  }
  for (int r : {0, 1, n / 2, LongRoot(n), n - 1})
    if (std::find(roots.begin(), roots.end(), r) == roots.end()) roots.push_back(r);
  return roots;
}

// Plans of hundreds of slices (count 1000 cut into slices of 1 or 3) are
// what the checker spends its time on, and their pipeline is the same from
// any root: they run for one root per rank count, without premul/avg, and
// slices of 1 only for a spread of rank counts. Everything else runs for
// every root and variant.
bool LongOnes(int n, size_t slice) {
  return slice == 3 || n <= 12 || n % 8 == 0 || n % 8 == 1 || n % 8 == 7;
}

// All counts and slices for one collective, rank count and root; premul and
// avg in every combination where vary.
void CheckMatrix(Coll coll, int n, int root, bool vary) {
  bool long_root = coll == Coll::kAllReduce || root == LongRoot(n);
  for (size_t count : kCounts)
    for (size_t slice : kSlices)
      for (int v = 0; v < (vary ? 4 : 1); v++) {
        bool is_long = count == 1000 && slice < 1000;
        if (is_long && (v > 0 || !long_root || !LongOnes(n, slice))) continue;
        Case c = {coll, n, count, slice, root, (v & 1) != 0, (v & 2) != 0};
        std::string why = Plans(c).Check();
        ASSERT_EQ(why, "");
      }
}

class TreeRanks : public ::testing::TestWithParam<int> {};

TEST_P(TreeRanks, AllReduceIsCorrect) {
  CheckMatrix(Coll::kAllReduce, GetParam(), 0, true);
}

TEST_P(TreeRanks, BroadcastIsCorrectFromEveryRoot) {
  for (int root : Roots(GetParam())) CheckMatrix(Coll::kBroadcast, GetParam(), root, false);
}

TEST_P(TreeRanks, ReduceIsCorrectAtEveryRoot) {
  for (int root : Roots(GetParam())) CheckMatrix(Coll::kReduce, GetParam(), root, true);
}

INSTANTIATE_TEST_SUITE_P(Tree, TreeRanks, ::testing::Range(1, 65),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "n" + std::to_string(i.param);
                         });

// ---- The trees, read back from the plans ----

struct Tree {
  int root = -1;
  std::vector<int> parent;
  std::vector<std::set<int>> children;
  std::vector<int> depth;
  int height = 0;
};

bool InHalf(const plan_op& op, size_t lo, size_t hi) {
  size_t off = op.kind == OP_SEND ? op.src.off : op.dst.off;
  return off >= lo && off < hi;
}

// The tree that carries elements [lo, hi): who receives from whom. Up the
// tree a child's data arrives by recv_reduce, down it by a plain recv; an
// all-reduce has both, which must agree. Returns "" or what is wrong.
std::string ReadTree(const Plans& ps, Coll coll, int n, size_t lo, size_t hi, Tree* t) {
  t->parent.assign(n, -1);
  t->children.assign(n, {});
  std::vector<std::set<int>> parents(n);
  for (int r = 0; r < n; r++)
    for (uint32_t i = 0; i < ps[r].nops; i++) {
      const plan_op& op = ps[r].ops[i];
      if (!InHalf(op, lo, hi)) continue;
      if (op.kind == OP_RECV_REDUCE) parents[op.peer].insert(r);
      if (op.kind == OP_RECV) parents[r].insert(op.peer);
      if (op.kind == OP_SEND && coll == Coll::kBroadcast) parents[op.peer].insert(r);
      if (op.kind == OP_SEND && coll == Coll::kReduce) parents[r].insert(op.peer);
    }
  for (int r = 0; r < n; r++) {
    if (parents[r].size() > 1) return "rank " + std::to_string(r) + " has several parents";
    if (parents[r].empty()) {
      if (t->root >= 0) return "two roots";
      t->root = r;
      continue;
    }
    t->parent[r] = *parents[r].begin();
    t->children[t->parent[r]].insert(r);
  }
  if (t->root < 0) return "no root";
  // Walk down from the root: every rank once, so the parent links are a tree.
  t->depth.assign(n, -1);
  std::vector<int> todo = {t->root};
  t->depth[t->root] = 0;
  int seen = 0;
  while (!todo.empty()) {
    int r = todo.back();
    todo.pop_back();
    seen++;
    t->height = std::max(t->height, t->depth[r]);
    if (t->children[r].size() > 2) return "rank " + std::to_string(r) + " has >2 children";
    for (int c : t->children[r]) {
      if (t->depth[c] >= 0) return "rank " + std::to_string(c) + " reached twice";
      t->depth[c] = t->depth[r] + 1;
      todo.push_back(c);
    }
  }
  if (seen != n) return std::to_string(n - seen) + " ranks unreachable from the root";
  return "";
}

// Both trees of a collective, with enough data that each carries slices.
void ReadTrees(Coll coll, int n, int root, Tree t[2]) {
  Case c = {coll, n, 40, 7, root, false, false};
  Plans ps(c);
  ASSERT_EQ(ps.Check(), "");
  ASSERT_EQ(ReadTree(ps, coll, n, 0, 20, &t[0]), "") << Describe(c) << ", tree 0";
  ASSERT_EQ(ReadTree(ps, coll, n, 20, 40, &t[1]), "") << Describe(c) << ", tree 1";
}

// No rank is a leaf of both trees.
void ExpectComplementary(const Tree t[2], int n, const std::string& what) {
  for (int r = 0; r < n; r++)
    EXPECT_FALSE(t[0].children[r].empty() && t[1].children[r].empty())
        << what << ": rank " << r << " is a leaf in both trees";
}

TEST(TreeShape, AllReduceTreesAreComplementaryAndShallow) {
  for (int n = 2; n <= 64; n++) {
    Tree t[2];
    ASSERT_NO_FATAL_FAILURE(ReadTrees(Coll::kAllReduce, n, 0, t));
    std::string what = "all-reduce n=" + std::to_string(n);
    if (n > 2) ExpectComplementary(t, n, what);
    for (int k = 0; k < 2; k++) {
      // A binary tree cannot be shallower than floor(log2 n).
      EXPECT_GE(t[k].height, FloorLog2(n)) << what;
      EXPECT_LE(t[k].height, CeilLog2(n)) << what << " tree " << k;
    }
    // Each rank is interior in exactly one tree, but for one rank in both
    // when n is odd (the trees then have n / 2 leaves each).
    int both = 0;
    for (int r = 0; r < n; r++) both += !t[0].children[r].empty() && !t[1].children[r].empty();
    EXPECT_EQ(both, n % 2) << what;
  }
}

TEST(TreeShape, RootedTreesHangFromTheRoot) {
  for (int n = 2; n <= 64; n++)
    for (int root : Roots(n)) {
      Tree b[2], r[2];
      ASSERT_NO_FATAL_FAILURE(ReadTrees(Coll::kBroadcast, n, root, b));
      ASSERT_NO_FATAL_FAILURE(ReadTrees(Coll::kReduce, n, root, r));
      std::string what = "n=" + std::to_string(n) + " root=" + std::to_string(root);
      if (n > 2) ExpectComplementary(b, n, what);
      for (int k = 0; k < 2; k++) {
        EXPECT_EQ(b[k].root, root) << what;
        EXPECT_EQ(b[k].children[root].size(), 1u) << what;  // one child per tree: one half each
        // One level above the pair over the other n - 1 ranks.
        EXPECT_GE(b[k].height, 1 + FloorLog2(n - 1)) << what;
        EXPECT_LE(b[k].height, 1 + CeilLog2(n - 1)) << what;
        // Reduce goes up the very trees broadcast goes down.
        EXPECT_EQ(r[k].parent, b[k].parent) << what << " tree " << k;
      }
    }
}

TEST(TreeShape, TwoRanks) {
  Tree t[2];
  ASSERT_NO_FATAL_FAILURE(ReadTrees(Coll::kAllReduce, 2, 0, t));
  EXPECT_NE(t[0].root, t[1].root);  // each rank is the root of one half
}

// ---- Steps: pipelined, and few ----

// How many rounds the plans take when each step lasts one round and a
// transfer holds both its ends in the same round: the critical path, which
// a plan's own step count hides (a rank drops the steps where it waits).
uint32_t Rounds(const Plans& ps, int n) {
  std::vector<std::vector<uint32_t>> round(n);
  // Both ends of each transfer: the k-th send a -> b and b's k-th receive.
  std::map<std::pair<int, int>, std::vector<std::pair<int, uint32_t>>> sends, recvs;
  for (int r = 0; r < n; r++)
    for (uint32_t k = 0; k < ps[r].nsteps; k++) {
      round[r].push_back(k);
      for (uint32_t o = ps[r].steps[k].op_begin; o < ps[r].steps[k].op_end; o++) {
        const plan_op& op = ps[r].ops[o];
        if (op.kind == OP_SEND) sends[{r, op.peer}].push_back({r, k});
        if (op.kind == OP_RECV || op.kind == OP_RECV_REDUCE) recvs[{op.peer, r}].push_back({r, k});
      }
    }
  // Push rounds up until both ends agree and each rank's steps follow each
  // other. No schedule needs more rounds than all steps together: past
  // that, the plans deadlock and never settle.
  uint32_t limit = 0;
  for (int r = 0; r < n; r++) limit += ps[r].nsteps;
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < n; r++)
      for (size_t k = 1; k < round[r].size(); k++)
        if (round[r][k] <= round[r][k - 1]) round[r][k] = round[r][k - 1] + 1, moved = true;
    for (const auto& [pair, list] : sends)
      for (size_t i = 0; i < list.size() && i < recvs[pair].size(); i++) {
        auto [a, sa] = list[i];
        auto [b, sb] = recvs[pair][i];
        uint32_t m = std::max(round[a][sa], round[b][sb]);
        if (m > limit) return UINT32_MAX;
        if (round[a][sa] != m || round[b][sb] != m) moved = true;
        round[a][sa] = round[b][sb] = m;
      }
  }
  uint32_t total = 0;
  for (int r = 0; r < n; r++)
    if (!round[r].empty()) total = std::max(total, round[r].back() + 1);
  return total;
}

// Rounds for half-buffers of exactly nslices slices of 4 elements.
uint32_t Rounds(Coll coll, int n, size_t nslices, int root = 0) {
  Case c = {coll, n, 2 * 4 * nslices, 4, root, false, false};
  Plans ps(c);
  std::string why = ps.Check();
  EXPECT_EQ(why, "");
  return why.empty() ? Rounds(ps, n) : UINT32_MAX;
}

TEST(TreeSteps, EachSliceAddsOneRound) {
  for (int n : {2, 3, 5, 8, 13, 16, 33, 64})
    for (Coll coll : {Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce}) {
      uint32_t one = Rounds(coll, n, 1, n / 2);
      EXPECT_EQ(Rounds(coll, n, 20, n / 2), one + 19) << Name(coll) << " n=" << n;
    }
}

TEST(TreeSteps, LatencyGrowsWithTheLogOfRanks) {
  for (int n = 2; n <= 64; n++) {
    uint32_t d = (uint32_t)CeilLog2(n);
    // Broadcast: down the rooted trees, one round a level. Reduce: up them,
    // one round a level and one more where siblings' subtrees finish
    // together (their slices cannot land in one accumulator in one step).
    // All-reduce: up, then down.
    EXPECT_LE(Rounds(Coll::kBroadcast, n, 1), d + 1) << "n=" << n;
    EXPECT_LE(Rounds(Coll::kReduce, n, 1), 2 * d - 1) << "n=" << n;
    uint32_t all = Rounds(Coll::kAllReduce, n, 1);
    EXPECT_LE(all, 3 * d - 1) << "n=" << n;
    EXPECT_LE(all, 2 * d + 4) << "n=" << n;
  }
  // Pinned, so a change of tree shape that costs latency shows.
  EXPECT_EQ(Rounds(Coll::kAllReduce, 8, 1), 7u);
  EXPECT_EQ(Rounds(Coll::kAllReduce, 33, 1), 13u);
  EXPECT_EQ(Rounds(Coll::kAllReduce, 64, 1), 16u);
  EXPECT_EQ(Rounds(Coll::kBroadcast, 64, 1), 7u);
  EXPECT_EQ(Rounds(Coll::kReduce, 64, 1), 10u);
}

// ---- Buffers: what each rank may touch ----

TEST(TreeBuffers, RootOnlyBuffersStayUntouched) {
  for (int n : {1, 2, 3, 7, 16, 31})
    for (int root : {0, n / 2, n - 1})
      for (bool premul : {false, true})
        for (Coll coll : {Coll::kBroadcast, Coll::kReduce, Coll::kAllReduce}) {
          Case c = {coll, n, 25, 4, root, premul && coll != Coll::kBroadcast, false};
          Plans ps(c);
          for (int r = 0; r < n; r++)
            for (uint32_t i = 0; i < ps[r].nops; i++) {
              const plan_op& op = ps[r].ops[i];
              bool reads = op.kind != OP_RECV, writes = op.kind != OP_SEND;
              std::string what = Describe(c) + " rank " + std::to_string(r);
              EXPECT_FALSE(writes && op.dst.buf == PB_SEND) << what;
              if (r == root) continue;
              if (coll == Coll::kBroadcast) {
                EXPECT_FALSE(reads && op.src.buf == PB_SEND) << what;
              }
              if (coll == Coll::kReduce) {
                EXPECT_FALSE((reads && op.src.buf == PB_RECV) || (writes && op.dst.buf == PB_RECV))
                    << what;
              }
            }
        }
}

TEST(TreeArgs, RejectsBadArguments) {
  plan p;
  plan_init(&p, 0, 4, "test");
  coll_args a = {};
  a.nranks = 4;
  a.count = 10;
  a.slice_elems = 4;
  a.root = 4;
  EXPECT_EQ(tree_broadcast_build(&a, &p), loomInvalidArgument);
  EXPECT_EQ(tree_reduce_build(&a, &p), loomInvalidArgument);
  a.root = -1;
  EXPECT_EQ(tree_reduce_build(&a, &p), loomInvalidArgument);
  a.root = 0;
  a.slice_elems = 0;
  EXPECT_EQ(tree_allreduce_build(&a, &p), loomInvalidArgument);
  a.slice_elems = 4;
  a.rank = 4;
  EXPECT_EQ(tree_allreduce_build(&a, &p), loomInvalidArgument);
  plan_free(&p);
}

}  // namespace
