// Recursive halving and doubling (rhd.c): every rank count from 1 to 64,
// proven by the symbolic checker (check.c) out of place and in place, and
// the log-step shape that is the point of the algorithm.
#include <gtest/gtest.h>

#include <string>
#include <vector>

extern "C" {
#include "collectives/plan.h"
}

namespace {

using Build = loomResult_t (*)(const coll_args*, plan*);

struct Algo {
  const char* name;
  Build build;
  check_kind kind;
};

const Algo kAllReduce = {"all-reduce", rhd_allreduce_build, CHECK_ALLREDUCE};
const Algo kReduceScatter = {"reduce-scatter", rhd_reducescatter_build, CHECK_REDUCESCATTER};
const Algo kAllGather = {"all-gather", rhd_allgather_build, CHECK_ALLGATHER};
const Algo kDoubling = {"doubling all-reduce", doubling_allreduce_build, CHECK_ALLREDUCE};

// One plan per rank, built by an rhd generator, freed on scope exit.
class Plans {
 public:
  Plans(const Algo& algo, int n, size_t count, size_t slice, bool premul = false, bool avg = false)
      : algo_(algo), count_(count), p_(n) {
    for (int r = 0; r < n; r++) {
      plan_init(&p_[r], r, n, "test");
      coll_args a = {};
      a.nranks = n;
      a.rank = r;
      a.count = count;
      a.slice_elems = slice;
      a.premul = premul ? 1 : 0;
      a.avg = avg ? 1 : 0;
      loomResult_t res = algo.build(&a, &p_[r]);
      if (res != loomSuccess && build_error_.empty())
        build_error_ = "rank " + std::to_string(r) + " failed to build: " + std::to_string(res);
    }
  }
  ~Plans() {
    for (auto& p : p_) plan_free(&p);
  }
  Plans(const Plans&) = delete;
  Plans& operator=(const Plans&) = delete;

  int n() const { return (int)p_.size(); }
  const plan& operator[](int r) const { return p_[r]; }

  // Empty when the plans are a correct collective, else the reason.
  std::string Check() const {
    if (!build_error_.empty()) return build_error_;
    check_spec spec = {};
    spec.kind = algo_.kind;
    spec.nranks = n();
    spec.count = count_;
    char why[512] = "unset";
    if (plan_check_spec(&spec, p_.data(), why, sizeof(why)) == 0) return "";
    return why[0] ? std::string(why) : std::string("failed without a reason");
  }

  // Steps of rank r that send or receive (local-only steps excluded).
  int ExchangeSteps(int r) const {
    const plan& p = p_[r];
    int steps = 0;
    for (uint32_t s = 0; s < p.nsteps; s++) {
      bool comm = false;
      for (uint32_t o = p.steps[s].op_begin; o < p.steps[s].op_end; o++)
        comm |=
            p.ops[o].kind == OP_SEND || p.ops[o].kind == OP_RECV || p.ops[o].kind == OP_RECV_REDUCE;
      steps += comm;
    }
    return steps;
  }

  // Elements rank r sends in all.
  size_t SentElems(int r) const {
    size_t sum = 0;
    for (uint32_t o = 0; o < p_[r].nops; o++)
      if (p_[r].ops[o].kind == OP_SEND) sum += p_[r].ops[o].count;
    return sum;
  }

  std::string Print(int r) const {
    std::vector<char> buf(1 << 16);
    plan_print(&p_[r], buf.data(), buf.size());
    return buf.data();
  }

 private:
  const Algo& algo_;
  size_t count_;
  std::vector<plan> p_;
  std::string build_error_;
};

int Log2Floor(int n) {
  int k = 0;
  while ((2 << k) <= n) k++;
  return k;
}
int Log2Ceil(int n) {
  int k = 0;
  while ((1 << k) < n) k++;
  return k;
}
bool IsPow2(int n) {
  return (n & (n - 1)) == 0;
}

// Rank counts where the costly cases run: the smallest, powers of two and
// their neighbours (the fold with rem = 1 and rem = p - 1).
bool Spread(int n) {
  for (int k : {2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 17, 31, 32, 33, 48, 63, 64})
    if (n == k) return true;
  return false;
}

// Checks one algorithm for every n = 1..64 over counts 0, 1, 7, n - 1,
// 3n + 1 and 1000 and slices 1, 3 and 1 << 20, with the premul and avg
// variants for the reductions, as far as the checker's cost allows.
//
// The checker simulates every element of every rank's buffers (n * n * c
// for the collectives with a block per rank) and compares the ops of a step
// pairwise (n * k^2 for k pieces in a step), so cases past a budget on that
// cost run only on the Spread rank counts, and the variants, which add only
// local ops, only on cheap cases. What that leaves out, all at slices of 1
// or 3 or at count 1000: all-reduce of 1000 in slices of 1 (3) runs at
// every n to 9 (17), then on Spread; reduce-scatter and all-gather (n * c
// elements per rank) run 1000 at every n to 44, then on Spread, and in
// slices of 3 (1) to 8 (4) ranks only; 3n + 1 in slices of 3 (1) at every
// n to 18 (12), then on Spread to 33 (17).
void CheckAll(const Algo& algo, bool per_rank_blocks, bool reduces) {
  const double kEveryN = 2e6, kSpread = 7e7, kVariants = 1e6;
  const size_t slices[] = {size_t(1) << 20, 3, 1};
  for (int n = 1; n <= 64; n++) {
    const size_t counts[] = {0, 1, 7, size_t(n - 1), size_t(3 * n + 1), 1000};
    for (size_t slice : slices)
      for (size_t count : counts) {
        size_t elems = per_rank_blocks ? count * (size_t)n : count;
        double pieces = double((elems + slice - 1) / slice);
        double cost = n * pieces * pieces + double(n) * double(elems);
        if (cost > (Spread(n) ? kSpread : kEveryN)) continue;
        for (int variant = 0; variant < (reduces && cost <= kVariants ? 4 : 1); variant++) {
          bool premul = variant & 1, avg = variant & 2;
          Plans ps(algo, n, count, slice, premul, avg);
          std::string why = ps.Check();
          ASSERT_EQ(why, "") << algo.name << " n=" << n << " count=" << count << " slice=" << slice
                             << " premul=" << premul << " avg=" << avg << "\nrank 0:\n"
                             << ps.Print(0);
        }
      }
  }
}

// ---- Correctness, proven by the checker ----

TEST(RhdAllReduce, EveryRankCountIsCorrect) {
  CheckAll(kAllReduce, false, true);
}

TEST(RhdReduceScatter, EveryRankCountIsCorrect) {
  CheckAll(kReduceScatter, true, true);
}

TEST(RhdAllGather, EveryRankCountIsCorrect) {
  CheckAll(kAllGather, true, false);
}

TEST(DoublingAllReduce, EveryRankCountIsCorrect) {
  CheckAll(kDoubling, false, true);
}

// log2 p exchanges of the whole buffer; the fold adds one step on each side
// of them for its pairs, and the ranks it folds away take two steps in all.
TEST(DoublingAllReduce, TakesLog2ExchangesOfTheWholeBuffer) {
  for (int n = 2; n <= 64; n++) {
    int p = 1 << Log2Floor(n), rem = n - p, logp = Log2Floor(n);
    Plans ps(kDoubling, n, 1000, size_t(1) << 20);
    for (int r = 0; r < n; r++) {
      bool away = r < 2 * rem && r % 2 == 0, pair = r < 2 * rem && r % 2 == 1;
      int want = away ? 2 : logp + (pair ? 2 : 0);
      EXPECT_EQ(ps.ExchangeSteps(r), want) << "n=" << n << " rank " << r;
      size_t sent = away ? 1000 : 1000 * (size_t)(logp + (pair ? 1 : 0));
      EXPECT_EQ(ps.SentElems(r), sent) << "n=" << n << " rank " << r;
    }
  }
}

// ---- The log-step shape ----

TEST(RhdAllReduce, PowerOfTwoTakesTwoLog2Steps) {
  for (int n = 2; n <= 64; n *= 2) {
    Plans ps(kAllReduce, n, 960, size_t(1) << 20);  // blocks of equal size
    for (int r = 0; r < n; r++) {
      EXPECT_EQ(ps[r].nsteps, 2u * (unsigned)Log2Floor(n)) << "n=" << n << " rank " << r;
      // Bandwidth: 2 (n - 1) / n of the buffer, as the ring.
      EXPECT_EQ(ps.SentElems(r), 2 * (960 - 960 / (size_t)n)) << "n=" << n << " rank " << r;
    }
  }
}

TEST(RhdAllReduce, SlicingKeepsTheStepCount) {
  Plans ps(kAllReduce, 8, 1000, 3);
  EXPECT_EQ(ps[5].nsteps, 6u);
  EXPECT_GT(ps[5].nops, 300u);  // the pieces all went into those steps
  for (uint32_t o = 0; o < ps[5].nops; o++) EXPECT_LE(ps[5].ops[o].count, 3u);
}

TEST(RhdAllReduce, FoldAddsTwoStepsForActiveRanks) {
  for (int n = 3; n <= 64; n++) {
    if (IsPow2(n)) continue;
    int p = 1 << Log2Floor(n), rem = n - p, logp = Log2Floor(n);
    Plans ps(kAllReduce, n, 4096, size_t(1) << 20);
    for (int r = 0; r < n; r++) {
      int want = r >= 2 * rem ? 2 * logp : r % 2 ? 2 * logp + 2 : 2;
      EXPECT_EQ(ps.ExchangeSteps(r), want) << "n=" << n << " rank " << r;
    }
  }
}

TEST(RhdAllReduce, PremulAndAvgAddLocalStepsOnly) {
  Plans plain(kAllReduce, 16, 160, size_t(1) << 20);
  Plans both(kAllReduce, 16, 160, size_t(1) << 20, true, true);
  EXPECT_EQ(both[3].nsteps, plain[3].nsteps + 2);  // premul first, div between the phases
  EXPECT_EQ(both.ExchangeSteps(3), plain.ExchangeSteps(3));
  // avg divides only the block the rank owns: 160 / 16 elements.
  size_t divided = 0;
  for (uint32_t o = 0; o < both[3].nops; o++)
    if (both[3].ops[o].kind == OP_DIV) divided += both[3].ops[o].count;
  EXPECT_EQ(divided, 10u);
}

TEST(RhdAllReduce, OneRankIsACopy) {
  Plans ps(kAllReduce, 1, 10, 3);
  ASSERT_EQ(ps[0].nsteps, 1u);
  ASSERT_EQ(ps[0].nops, 1u);
  EXPECT_EQ(ps[0].ops[0].kind, OP_COPY);
  EXPECT_EQ(ps[0].buf_count[PB_SCRATCH], 0u);
  EXPECT_EQ(ps.Check(), "");
}

TEST(RhdReduceScatter, TakesLog2StepsPlusTheFold) {
  for (int n = 2; n <= 64; n++) {
    int p = 1 << Log2Floor(n), rem = n - p, logp = Log2Floor(n);
    Plans ps(kReduceScatter, n, 100, size_t(1) << 20);
    ASSERT_EQ(ps.Check(), "") << "n=" << n;
    for (int r = 0; r < n; r++) {
      int want = r >= 2 * rem ? logp : r % 2 ? logp + 2 : 2;
      EXPECT_EQ(ps.ExchangeSteps(r), want) << "n=" << n << " rank " << r;
      if (IsPow2(n)) {
        EXPECT_EQ(ps[r].nsteps, (unsigned)logp) << "n=" << n;
        EXPECT_EQ(ps.SentElems(r), 100u * (size_t)(n - 1)) << "n=" << n;
      }
    }
  }
}

TEST(RhdReduceScatter, ScratchOnlyWhereNeeded) {
  // Two ranks, no premul: one exchange from SEND straight into RECV.
  Plans two(kReduceScatter, 2, 50, size_t(1) << 20);
  EXPECT_EQ(two[0].buf_count[PB_SCRATCH], 0u);
  EXPECT_EQ(two[0].nsteps, 1u);
  // Premul scales the whole input into scratch, never into SEND.
  Plans pre(kReduceScatter, 2, 50, size_t(1) << 20, true, false);
  EXPECT_EQ(pre[0].buf_count[PB_SCRATCH], 100u);
  EXPECT_EQ(pre.Check(), "");
  // Without fold or premul a rank keeps partials only of the half it keeps
  // after the first step: half of SEND.
  Plans eight(kReduceScatter, 8, 10, size_t(1) << 20);
  for (int r = 0; r < 8; r++) EXPECT_LE(eight[r].buf_count[PB_SCRATCH], 40u) << "rank " << r;
  EXPECT_EQ(eight.Check(), "");
  // A folded-away rank only hands its input over and takes its block back.
  Plans fold(kReduceScatter, 5, 50, size_t(1) << 20);
  EXPECT_EQ(fold[0].buf_count[PB_SCRATCH], 0u);
  EXPECT_EQ(fold.SentElems(0), 250u);
}

TEST(RhdAllGather, TakesCeilLog2Steps) {
  for (int n = 1; n <= 64; n++) {
    Plans ps(kAllGather, n, 5, size_t(1) << 20);
    for (int r = 0; r < n; r++) {
      EXPECT_EQ(ps.ExchangeSteps(r), Log2Ceil(n)) << "n=" << n << " rank " << r;
      EXPECT_EQ(ps[r].nsteps, 1u + (unsigned)Log2Ceil(n)) << "n=" << n;  // the copy first
      EXPECT_EQ(ps.SentElems(r), 5u * (size_t)(n - 1)) << "n=" << n;     // each block once
      EXPECT_EQ(ps[r].buf_count[PB_SCRATCH], 0u);
    }
  }
}

TEST(RhdAllGather, PowerOfTwoExchangesPairwise) {
  Plans ps(kAllGather, 16, 4, size_t(1) << 20);
  for (int r = 0; r < 16; r++)
    for (uint32_t s = 1; s < ps[r].nsteps; s++)
      for (uint32_t o = ps[r].steps[s].op_begin; o < ps[r].steps[s].op_end; o++)
        EXPECT_EQ(ps[r].ops[o].peer, r ^ (1 << (s - 1))) << "rank " << r << " step " << s;
}

// The checker infers premul and avg from the ops the plans hold, so a plan
// that forgot them would pass it: count them here. Each rank scales all of
// its input; all-reduce divides each element once across the ranks (each
// active rank its own block), reduce-scatter each rank its c elements.
TEST(RhdVariants, PremulAndAvgAreApplied) {
  for (int n = 1; n <= 17; n++) {
    const size_t c = 3 * (size_t)n + 2;
    Plans ar(kAllReduce, n, c, 4, true, true), rs(kReduceScatter, n, c, 4, true, true);
    Plans plain(kReduceScatter, n, c, 4);
    size_t ar_div = 0;
    for (int r = 0; r < n; r++) {
      size_t ar_pre = 0, rs_pre = 0, rs_div = 0, plain_local = 0;
      for (uint32_t o = 0; o < ar[r].nops; o++) {
        ar_pre += ar[r].ops[o].kind == OP_PREMUL ? ar[r].ops[o].count : 0;
        ar_div += ar[r].ops[o].kind == OP_DIV ? ar[r].ops[o].count : 0;
      }
      for (uint32_t o = 0; o < rs[r].nops; o++) {
        rs_pre += rs[r].ops[o].kind == OP_PREMUL ? rs[r].ops[o].count : 0;
        rs_div += rs[r].ops[o].kind == OP_DIV ? rs[r].ops[o].count : 0;
      }
      for (uint32_t o = 0; o < plain[r].nops; o++)
        plain_local += plain[r].ops[o].kind == OP_PREMUL || plain[r].ops[o].kind == OP_DIV;
      EXPECT_EQ(ar_pre, c) << "n=" << n << " rank " << r;
      EXPECT_EQ(rs_pre, n == 1 ? c : c * (size_t)n) << "n=" << n << " rank " << r;
      EXPECT_EQ(rs_div, c) << "n=" << n << " rank " << r;
      EXPECT_EQ(plain_local, 0u) << "n=" << n << " rank " << r;
    }
    EXPECT_EQ(ar_div, c) << "n=" << n;
    EXPECT_EQ(ar.Check(), "") << "n=" << n;
    EXPECT_EQ(rs.Check(), "") << "n=" << n;
  }
}

// ---- Arguments ----

TEST(RhdArgs, BadArgumentsAreRefused) {
  plan p;
  plan_init(&p, 0, 4, "test");
  coll_args a = {};
  a.nranks = 4;
  a.rank = 4;
  a.count = 8;
  a.slice_elems = 1;
  EXPECT_EQ(rhd_allreduce_build(&a, &p), loomInvalidArgument);
  a.rank = 0;
  a.slice_elems = 0;
  EXPECT_EQ(rhd_reducescatter_build(&a, &p), loomInvalidArgument);
  a.slice_elems = 1;
  a.count = SIZE_MAX / 2;
  EXPECT_EQ(rhd_allgather_build(&a, &p), loomInvalidArgument);
  plan_free(&p);
}

}  // namespace
