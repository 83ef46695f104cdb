// All-to-all (pairwise and Bruck), all-to-all-v, gather and scatter plans
// (alltoall.c), each proven by the symbolic checker (check.c) for every rank
// count up to 16 and a covering set above, out of place and in place.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "collectives/plan.h"
}

namespace {

typedef loomResult_t (*BuildFn)(const coll_args*, plan*);

const size_t kCounts[] = {0, 1, 3, 100};
const size_t kSlices[] = {1, 7, 1 << 20};

// 1..16, then powers of two, their neighbours and odd primes up to 64.
std::vector<int> RankCounts() {
  std::vector<int> n;
  for (int i = 1; i <= 16; i++) n.push_back(i);
  for (int i : {17, 23, 31, 32, 33, 47, 63, 64}) n.push_back(i);
  return n;
}

// One plan per rank, freed on scope exit.
class Plans {
 public:
  explicit Plans(int n) : p_(n) {
    for (int r = 0; r < n; r++) plan_init(&p_[r], r, n, "test");
  }
  ~Plans() {
    for (auto& p : p_) plan_free(&p);
  }
  Plans(const Plans&) = delete;
  Plans& operator=(const Plans&) = delete;

  int n() const { return (int)p_.size(); }
  plan& operator[](int r) { return p_[r]; }

  // Empty string when the plans do what spec asks, else the reason.
  std::string Check(check_spec spec) const {
    char why[512] = "unset";
    spec.nranks = n();
    if (plan_check_spec(&spec, p_.data(), why, sizeof(why)) == 0) return "";
    return why[0] ? std::string(why) : std::string("failed without a reason");
  }

 private:
  std::vector<plan> p_;
};

coll_args Args(int n, int r, size_t count, size_t slice, int root = 0) {
  coll_args a = {};
  a.nranks = n;
  a.rank = r;
  a.count = count;
  a.slice_elems = slice;
  a.root = root;
  return a;
}

// Builds every rank's plan with the same count, slice and root.
::testing::AssertionResult BuildAll(Plans& ps, BuildFn fn, size_t count, size_t slice,
                                    int root = 0) {
  for (int r = 0; r < ps.n(); r++) {
    coll_args a = Args(ps.n(), r, count, slice, root);
    if (fn(&a, &ps[r]) != loomSuccess) return ::testing::AssertionFailure() << "rank " << r;
  }
  return ::testing::AssertionSuccess();
}

check_spec Spec(check_kind kind, size_t count, int root = 0) {
  check_spec s = {};
  s.kind = kind;
  s.count = count;
  s.root = root;
  return s;
}

bool IsComm(const plan_op& op) {
  return op.kind == OP_SEND || op.kind == OP_RECV || op.kind == OP_RECV_REDUCE;
}

// Steps that move data between ranks.
uint32_t ExchangeSteps(const plan& p) {
  uint32_t n = 0;
  for (uint32_t s = 0; s < p.nsteps; s++) {
    bool comm = false;
    for (uint32_t o = p.steps[s].op_begin; o < p.steps[s].op_end; o++) comm |= IsComm(p.ops[o]);
    n += comm;
  }
  return n;
}

// The plan's transfers in order: kind, peer and count of each.
std::vector<std::vector<size_t>> Transfers(const plan& p) {
  std::vector<std::vector<size_t>> t;
  for (uint32_t o = 0; o < p.nops; o++)
    if (IsComm(p.ops[o]))
      t.push_back({size_t(p.ops[o].kind), size_t(p.ops[o].peer), p.ops[o].count});
  return t;
}

size_t DivUp(size_t a, size_t b) {
  return (a + b - 1) / b;
}

unsigned Log2Up(int n) {
  unsigned k = 0;
  while ((1 << k) < n) k++;
  return k;
}

// ---- Pairwise all-to-all ----

TEST(PairwiseAllToAll, ProvenForEveryShape) {
  for (int n : RankCounts())
    for (size_t c : kCounts)
      for (size_t slice : kSlices) {
        SCOPED_TRACE("n=" + std::to_string(n) + " count=" + std::to_string(c) +
                     " slice=" + std::to_string(slice));
        Plans ps(n);
        ASSERT_TRUE(BuildAll(ps, pairwise_alltoall_build, c, slice));
        ASSERT_EQ(ps.Check(Spec(CHECK_ALLTOALL, c)), "");
        for (int r = 0; r < n; r++) {
          // n - 1 exchanges per slice, then at most one step of local copies.
          size_t want = c ? (size_t)(n - 1) * DivUp(c, slice) : 0;
          ASSERT_EQ(ExchangeSteps(ps[r]), want) << "rank " << r;
          ASSERT_LE(ps[r].nsteps, want + 1) << "rank " << r;
          // In-place staging holds two slices at most.
          ASSERT_LE(ps[r].buf_count[PB_SCRATCH], 2 * std::min(c, slice)) << "rank " << r;
        }
      }
}

// Out of place (coll_args.distinct) every receive goes straight into RECV: no scratch,
// no copy but the own block's, the same exchanges as in place; proven for distinct
// buffers, and caught as wrong when the same plans run in place (2-8 ranks, a block to move).
TEST(PairwiseAllToAll, OutOfPlaceStagesNothing) {
  for (int n : RankCounts())
    for (size_t c : kCounts)
      for (size_t slice : kSlices) {
        SCOPED_TRACE("n=" + std::to_string(n) + " count=" + std::to_string(c) +
                     " slice=" + std::to_string(slice));
        Plans ps(n), in(n);
        ASSERT_TRUE(BuildAll(in, pairwise_alltoall_build, c, slice));
        for (int r = 0; r < n; r++) {
          coll_args a = Args(n, r, c, slice);
          a.distinct = 1;
          ASSERT_EQ(pairwise_alltoall_build(&a, &ps[r]), loomSuccess);
        }
        check_spec spec = Spec(CHECK_ALLTOALL, c);
        spec.distinct = 1;
        ASSERT_EQ(ps.Check(spec), "");
        if (n >= 2 && n <= 8 && c > 0) {
          EXPECT_NE(ps.Check(Spec(CHECK_ALLTOALL, c)), "");
        }
        for (int r = 0; r < n; r++) {
          EXPECT_EQ(ps[r].buf_count[PB_SCRATCH], 0u) << "rank " << r;
          EXPECT_EQ(ExchangeSteps(ps[r]), ExchangeSteps(in[r])) << "rank " << r;
          // The same transfers in the same order as the in-place plan's.
          EXPECT_EQ(Transfers(ps[r]), Transfers(in[r])) << "rank " << r;
          int copies = 0;
          for (uint32_t o = 0; o < ps[r].nops; o++) copies += ps[r].ops[o].kind == OP_COPY;
          EXPECT_EQ(copies, c > 0 ? 1 : 0) << "rank " << r;
        }
      }
}

// Every exchange step of rank r sends to r + k and receives from r - k for
// one offset k; across a slice, each offset 1..n-1 appears once.
TEST(PairwiseAllToAll, StepsArePairwise) {
  for (int n : {2, 5, 8, 13}) {
    const size_t c = 10, slice = 4;
    Plans ps(n);
    ASSERT_TRUE(BuildAll(ps, pairwise_alltoall_build, c, slice));
    for (int r = 0; r < n; r++) {
      std::vector<int> seen(n, 0);
      for (uint32_t s = 0; s < ps[r].nsteps; s++) {
        int off = -1, sends = 0, recvs = 0;
        for (uint32_t o = ps[r].steps[s].op_begin; o < ps[r].steps[s].op_end; o++) {
          const plan_op& op = ps[r].ops[o];
          if (!IsComm(op)) continue;
          int k = op.kind == OP_SEND ? (op.peer - r + n) % n : (r - op.peer + n) % n;
          if (off >= 0) {
            ASSERT_EQ(k, off) << "rank " << r << " step " << s;
          }
          off = k;
          sends += op.kind == OP_SEND;
          recvs += op.kind == OP_RECV;
          ASSERT_LE(op.count, slice);
        }
        if (off < 0) continue;
        ASSERT_EQ(sends, 1);
        ASSERT_EQ(recvs, 1);
        seen[off]++;
      }
      for (int k = 1; k < n; k++) EXPECT_EQ(seen[k], (int)DivUp(c, slice)) << "offset " << k;
    }
  }
}

TEST(PairwiseAllToAll, OneRankIsACopy) {
  Plans ps(1);
  ASSERT_TRUE(BuildAll(ps, pairwise_alltoall_build, 5, 2));
  ASSERT_EQ(ps[0].nsteps, 1u);
  ASSERT_EQ(ps[0].nops, 1u);
  EXPECT_EQ(ps[0].ops[0].kind, OP_COPY);
  EXPECT_EQ(ps[0].ops[0].count, 5u);
  EXPECT_EQ(ps[0].buf_count[PB_SCRATCH], 0u);
}

// ---- Bruck ----

TEST(BruckAllToAll, ProvenForEveryShape) {
  for (int n : RankCounts())
    for (size_t c : kCounts) {
      SCOPED_TRACE("n=" + std::to_string(n) + " count=" + std::to_string(c));
      Plans ps(n);
      ASSERT_TRUE(BuildAll(ps, bruck_alltoall_build, c, 7));
      ASSERT_EQ(ps.Check(Spec(CHECK_ALLTOALL, c)), "");
      for (int r = 0; r < n; r++) {
        ASSERT_EQ(ExchangeSteps(ps[r]), c ? Log2Up(n) : 0u) << "rank " << r;
        if (c == 0) {
          ASSERT_EQ(ps[r].nops, 0u);
        }
      }
    }
}

// One message each way per exchange step: the blocks are packed.
TEST(BruckAllToAll, OneMessagePerStep) {
  for (int n : {2, 3, 6, 7, 8, 9, 64}) {
    Plans ps(n);
    ASSERT_TRUE(BuildAll(ps, bruck_alltoall_build, 2, 1));
    for (int r = 0; r < n; r++) {
      unsigned k = 0;
      for (uint32_t s = 0; s < ps[r].nsteps; s++) {
        int sends = 0, recvs = 0;
        for (uint32_t o = ps[r].steps[s].op_begin; o < ps[r].steps[s].op_end; o++) {
          const plan_op& op = ps[r].ops[o];
          if (op.kind == OP_SEND) {
            sends++;
            EXPECT_EQ(op.peer, (r + (1 << k)) % n);
          }
          if (op.kind == OP_RECV) {
            recvs++;
            EXPECT_EQ(op.peer, ((r - (1 << k)) % n + n) % n);
          }
        }
        if (sends + recvs == 0) continue;
        EXPECT_EQ(sends, 1) << "rank " << r << " step " << s;
        EXPECT_EQ(recvs, 1) << "rank " << r << " step " << s;
        k++;
      }
      EXPECT_EQ(k, Log2Up(n));
    }
  }
}

// ---- All-to-all-v ----

// Builds each rank's view of counts[src * n + dst] with running-sum
// displacements (what the checker assumes) and checks the plans.
std::string CheckAllToAllV(int n, const std::vector<size_t>& counts, size_t slice) {
  Plans ps(n);
  for (int r = 0; r < n; r++) {
    std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
    size_t so = 0, ro = 0;
    for (int q = 0; q < n; q++) {
      sc[q] = counts[(size_t)r * n + q];
      sd[q] = so;
      so += sc[q];
      rc[q] = counts[(size_t)q * n + r];
      rd[q] = ro;
      ro += rc[q];
    }
    coll_args a = Args(n, r, 0, slice);
    a.sendcounts = sc.data();
    a.sdispls = sd.data();
    a.recvcounts = rc.data();
    a.rdispls = rd.data();
    if (pairwise_alltoallv_build(&a, &ps[r]) != loomSuccess) return "build failed";
    if (ps[r].buf_count[PB_SCRATCH] != 0) return "out of place plan uses scratch";
  }
  check_spec spec = Spec(CHECK_ALLTOALLV, 0);
  spec.a2av_counts = counts.data();
  return ps.Check(spec);
}

TEST(PairwiseAllToAllV, RandomCountsWithZeros) {
  std::mt19937 rng(20240611);
  for (int n : RankCounts()) {
    for (int trial = 0; trial < (n <= 16 ? 3 : 1); trial++) {
      // About a third of the pairs send nothing; the rest up to 20 elements.
      std::vector<size_t> counts((size_t)n * n);
      for (auto& c : counts) c = rng() % 3 == 0 ? 0 : rng() % 21;
      for (size_t slice : kSlices) {
        SCOPED_TRACE("n=" + std::to_string(n) + " trial=" + std::to_string(trial) +
                     " slice=" + std::to_string(slice));
        ASSERT_EQ(CheckAllToAllV(n, counts, slice), "");
      }
    }
  }
}

TEST(PairwiseAllToAllV, SparseAndDegenerate) {
  for (int n : {1, 2, 5, 16, 64}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    std::vector<size_t> zero((size_t)n * n, 0), diag((size_t)n * n, 0), row((size_t)n * n, 0),
        col((size_t)n * n, 0);
    for (int q = 0; q < n; q++) {
      diag[(size_t)q * n + q] = 3;     // only the own block
      row[q] = 5;                      // rank 0 sends to all, nobody else sends
      col[(size_t)q * n + n - 1] = 4;  // everyone sends to the last rank
    }
    for (size_t slice : kSlices) {
      EXPECT_EQ(CheckAllToAllV(n, zero, slice), "");
      EXPECT_EQ(CheckAllToAllV(n, diag, slice), "");
      EXPECT_EQ(CheckAllToAllV(n, row, slice), "");
      EXPECT_EQ(CheckAllToAllV(n, col, slice), "");
    }
  }
}

TEST(PairwiseAllToAllV, ZeroCountsGiveAnEmptyPlan) {
  const int n = 4;
  std::vector<size_t> zero(n, 0);
  plan p;
  plan_init(&p, 1, n, "test");
  coll_args a = Args(n, 1, 0, 7);
  a.sendcounts = a.sdispls = a.recvcounts = a.rdispls = zero.data();
  ASSERT_EQ(pairwise_alltoallv_build(&a, &p), loomSuccess);
  EXPECT_EQ(p.nsteps, 0u);
  EXPECT_EQ(p.nops, 0u);
  plan_free(&p);
}

// ---- Gather and scatter ----

std::vector<int> Roots(int n) {
  if (n <= 12) {
    std::vector<int> all(n);
    for (int r = 0; r < n; r++) all[r] = r;
    return all;
  }
  return {0, 1, n / 2, n - 1};
}

void CheckRooted(BuildFn fn, check_kind kind) {
  for (int n : RankCounts())
    for (int root : Roots(n))
      for (size_t c : kCounts) {
        SCOPED_TRACE("n=" + std::to_string(n) + " root=" + std::to_string(root) +
                     " count=" + std::to_string(c));
        Plans ps(n);
        ASSERT_TRUE(BuildAll(ps, fn, c, 7, root));
        ASSERT_EQ(ps.Check(Spec(kind, c, root)), "");
        for (int r = 0; r < n; r++) {
          // One step, all transfers posted together.
          ASSERT_LE(ps[r].nsteps, 1u) << "rank " << r;
          if (c == 0) {
            ASSERT_EQ(ps[r].nops, 0u);
          }
          if (c == 0 || n == 1) continue;
          uint32_t comm = 0;
          for (uint32_t o = 0; o < ps[r].nops; o++) comm += IsComm(ps[r].ops[o]);
          ASSERT_EQ(comm, r == root ? (uint32_t)n - 1 : 1u) << "rank " << r;
        }
      }
}

TEST(DirectGather, ProvenForEveryRoot) {
  CheckRooted(direct_gather_build, CHECK_GATHER);
}

TEST(DirectScatter, ProvenForEveryRoot) {
  CheckRooted(direct_scatter_build, CHECK_SCATTER);
}

// ---- Arguments ----

TEST(AllToAllArgs, BadArgumentsAreRefused) {
  plan p;
  plan_init(&p, 0, 4, "test");
  coll_args bad_rank = Args(4, 4, 8, 1);
  coll_args bad_slice = Args(4, 0, 8, 0);
  coll_args bad_root = Args(4, 0, 8, 1, 4);
  for (BuildFn fn :
       {pairwise_alltoall_build, bruck_alltoall_build, direct_gather_build, direct_scatter_build}) {
    EXPECT_EQ(fn(&bad_rank, &p), loomInvalidArgument);
    EXPECT_EQ(fn(&bad_slice, &p), loomInvalidArgument);
  }
  EXPECT_EQ(direct_gather_build(&bad_root, &p), loomInvalidArgument);
  EXPECT_EQ(direct_scatter_build(&bad_root, &p), loomInvalidArgument);
  coll_args no_counts = Args(4, 0, 0, 1);
  EXPECT_EQ(pairwise_alltoallv_build(&no_counts, &p), loomInvalidArgument);
  std::vector<size_t> sc = {1, 1, 1, 1}, rc = {2, 1, 1, 1}, d = {0, 1, 2, 3};
  coll_args self_mismatch = no_counts;  // sends 1 to itself, receives 2 from itself
  self_mismatch.sendcounts = sc.data();
  self_mismatch.recvcounts = rc.data();
  self_mismatch.sdispls = self_mismatch.rdispls = d.data();
  EXPECT_EQ(pairwise_alltoallv_build(&self_mismatch, &p), loomInvalidArgument);
  plan_free(&p);
}

}  // namespace
