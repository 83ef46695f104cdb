// The ordered family (ordered.c, LOOM_DETERMINISTIC): all-reduce,
// reduce-scatter and reduce proven by the symbolic checker for 1 to 24 ranks,
// every root, several counts and slices, PreMulSum and Avg, out of place and
// in place; and the order itself: each piece is folded starting from rank 0's
// slot, then ranks 1, 2, ..., n-1, one op per step.
#include <gtest/gtest.h>

#include <string>
#include <vector>

extern "C" {
#include "collectives/plan.h"
}

namespace {

using Build = loomResult_t (*)(const coll_args*, plan*);

struct Family {
  const char* name;
  Build build;
  check_kind kind;
  bool rooted;
};

const Family kFamilies[] = {
    {"all-reduce", ordered_allreduce_build, CHECK_ALLREDUCE, false},
    {"reduce-scatter", ordered_reducescatter_build, CHECK_REDUCESCATTER, false},
    {"reduce", ordered_reduce_build, CHECK_REDUCE, true},
};

struct Plans {
  std::vector<plan> p;
  std::string error;
  Plans(const Family& f, int n, size_t count, size_t slice, int root, bool premul, bool avg)
      : p(n) {
    for (int r = 0; r < n; r++) {
      plan_init(&p[r], r, n, "test");
      coll_args a = {};
      a.nranks = n;
      a.rank = r;
      a.count = count;
      a.slice_elems = slice;
      a.root = root;
      a.premul = premul;
      a.avg = avg;
      if (f.build(&a, &p[r]) != loomSuccess && error.empty())
        error = "rank " + std::to_string(r) + " failed to build";
    }
  }
  ~Plans() {
    for (auto& x : p) plan_free(&x);
  }
  std::string Check(const Family& f, size_t count, int root) const {
    if (!error.empty()) return error;
    check_spec spec = {};
    spec.kind = f.kind;
    spec.nranks = (int)p.size();
    spec.count = count;
    spec.root = root;
    char why[512] = "";
    return plan_check_spec(&spec, p.data(), why, sizeof(why)) == 0 ? "" : why;
  }
};

TEST(OrderedPlans, ProvenForEveryRankCountRootAndSlice) {
  for (const Family& f : kFamilies)
    for (int n = 1; n <= 24; n += (n < 9 ? 1 : 5))
      for (size_t count : {(size_t)0, (size_t)1, (size_t)7, (size_t)100})
        for (size_t slice : {(size_t)1, (size_t)3, (size_t)1000})
          for (int root = 0; root < (f.rooted ? n : 1); root += (n > 8 ? 3 : 1))
            for (int variant = 0; variant < 3; variant++) {
              bool premul = variant == 1, avg = variant == 2;
              Plans ps(f, n, count, slice, root, premul, avg);
              EXPECT_EQ(ps.Check(f, count, root), "")
                  << f.name << " n=" << n << " count=" << count << " slice=" << slice
                  << " root=" << root << (premul ? " premul" : "") << (avg ? " avg" : "");
            }
}

// The fold of each piece: a copy from slot 0, then reduces from slots 1..n-1,
// each in a step after the previous one. Slots are the scratch ranges the
// exchange received rank q's piece into (rank r's own input copied into slot
// r), so their order is the rank order.
TEST(OrderedPlans, FoldsInRankOrder) {
  const int n = 6;
  const size_t count = 50, slice = 4;
  Plans ps(kFamilies[0], n, count, slice, 0, false, false);
  ASSERT_EQ(ps.error, "");
  for (int r = 0; r < n; r++) {
    const plan& p = ps.p[r];
    // Which slot (rank) each scratch offset received from: recv ops name
    // their peer; the copy from PB_SEND fills the rank's own slot.
    std::vector<std::pair<size_t, int>> slot_rank;
    std::vector<int> order;  // ranks folded, in step order, for every piece
    int pieces = 0;
    for (uint32_t s = 0; s < p.nsteps; s++)
      for (uint32_t o = p.steps[s].op_begin; o < p.steps[s].op_end; o++) {
        const plan_op& op = p.ops[o];
        if (op.kind == OP_RECV && op.dst.buf == PB_SCRATCH)
          slot_rank.push_back({op.dst.off, op.peer});
        if (op.kind == OP_COPY && op.src.buf == PB_SEND && op.dst.buf == PB_SCRATCH)
          slot_rank.push_back({op.dst.off, r});
        bool fold_op = (op.kind == OP_COPY || op.kind == OP_REDUCE) && op.src.buf == PB_SCRATCH;
        if (!fold_op) continue;
        if (op.kind == OP_COPY) pieces++;
        int from = -1;
        for (auto it = slot_rank.rbegin(); it != slot_rank.rend() && from < 0; ++it)
          if (it->first == op.src.off) from = it->second;
        order.push_back(from);
        // One fold op per step: the order of steps is the order of the fold.
        if (op.kind == OP_REDUCE) {
          EXPECT_EQ(p.steps[s].op_end - p.steps[s].op_begin, 1u);
        }
      }
    ASSERT_EQ(order.size(), (size_t)pieces * n) << "rank " << r;
    for (size_t i = 0; i < order.size(); i++)
      EXPECT_EQ(order[i], (int)(i % n)) << "rank " << r << " fold op " << i;
  }
}

}  // namespace
