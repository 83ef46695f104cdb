// Direct plans (direct.c): every rank count from 1 to 64 and every root,
// proven by the symbolic checker out of place and in place, including the
// races between ranks that read each other's buffers; and checker cases that
// show each race rule catches a broken plan.
#include <gtest/gtest.h>

#include <functional>
#include <iterator>
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
  bool blocks;   // buffers hold one block per rank
  bool reduces;  // premul and avg variants apply
  bool rooted;
  bool distinct;  // built for distinct SEND and RECV, proven out of place only
};

const Algo kAlgos[] = {
    {"oneshot all-reduce", oneshot_allreduce_build, CHECK_ALLREDUCE, false, true, false, false},
    {"twoshot all-reduce", twoshot_allreduce_build, CHECK_ALLREDUCE, false, true, false, false},
    {"read all-gather", read_allgather_build, CHECK_ALLGATHER, true, false, false, false},
    {"read reduce-scatter", read_reducescatter_build, CHECK_REDUCESCATTER, true, true, false,
     false},
    {"read broadcast", read_broadcast_build, CHECK_BROADCAST, false, false, true, false},
    {"read all-to-all", read_alltoall_build, CHECK_ALLTOALL, true, false, false, false},
    {"read all-to-all out of place", read_alltoall_build, CHECK_ALLTOALL, true, false, false, true},
};

struct Case {
  int n;
  size_t count;
  size_t slice;
  int root;
  bool premul;
  bool avg;
};

// Builds every rank's plan, lets mutate break (or inspect) them, and runs the
// checker; in_place_too: prove them in place as well, whatever they were
// built for.
std::string Check(const Algo& algo, const Case& c,
                  const std::function<void(std::vector<plan>&)>& mutate = nullptr,
                  bool in_place_too = false) {
  std::vector<plan> p(c.n);
  std::string err;
  for (int r = 0; r < c.n; r++) {
    plan_init(&p[r], r, c.n, "test");
    coll_args a = {};
    a.nranks = c.n;
    a.rank = r;
    a.count = c.count;
    a.slice_elems = c.slice;
    a.root = c.root;
    a.premul = c.premul;
    a.avg = c.avg;
    a.distinct = algo.distinct;
    if (algo.build(&a, &p[r]) != loomSuccess && err.empty()) err = "build failed";
  }
  if (err.empty()) {
    if (mutate) mutate(p);
    check_spec spec = {};
    spec.kind = algo.kind;
    spec.nranks = c.n;
    spec.count = c.count;
    spec.root = c.root;
    spec.distinct = algo.distinct && !in_place_too;
    char why[512] = "";
    if (plan_check_spec(&spec, p.data(), why, sizeof(why)) != 0) err = why[0] ? why : "failed";
  }
  for (auto& q : p) plan_free(&q);
  return err;
}

class DirectPlans : public ::testing::TestWithParam<int> {};

TEST_P(DirectPlans, EveryRankCountRootAndVariantIsCorrect) {
  const Algo& algo = kAlgos[GetParam()];
  for (int n = 1; n <= 64; n++)
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(n + 1), size_t(1000)})
      for (size_t slice : {size_t(3), size_t(1) << 20}) {
        double cost = double(n) * n * (algo.blocks ? double(count) * n : double(count)) / slice;
        if (cost > (n <= 8 ? 4e6 : 4e5)) continue;
        int roots = algo.rooted ? n : 1;
        for (int root = 0; root < roots; root += (n > 8 ? 7 : 1))
          for (int v = 0; v < (algo.reduces ? 4 : 1); v++) {
            Case c = {n, count, slice, root, (v & 1) != 0, (v & 2) != 0};
            ASSERT_EQ(Check(algo, c), "")
                << algo.name << " n=" << n << " count=" << count << " slice=" << slice
                << " root=" << root << " premul=" << c.premul << " avg=" << c.avg;
          }
      }
}

INSTANTIATE_TEST_SUITE_P(Algos, DirectPlans, ::testing::Range(0, int(std::size(kAlgos))),
                         [](const ::testing::TestParamInfo<int>& i) {
                           std::string n = kAlgos[i.param].name;
                           for (char& ch : n)
                             if (ch == ' ' || ch == '-') ch = '_';
                           return n;
                         });

// Index of the first op of kind k in p, or -1.
int FirstOp(const plan& p, int k) {
  for (uint32_t o = 0; o < p.nops; o++)
    if (p.ops[o].kind == k) return int(o);
  return -1;
}

TEST(DirectChecker, CatchesAReadOfWhatThePeerWritesInThePhase) {
  // Two-shot, rank 0 reads rank 1's reduced block in the all-gather phase:
  // make it read rank 1's block 0 instead, which rank 1 writes there.
  std::string why = Check(kAlgos[1], {2, 8, 1 << 20, 0, false, false}, [](std::vector<plan>& p) {
    plan& q = p[0];
    for (uint32_t o = 0; o < q.nops; o++)
      if (q.ops[o].kind == OP_PEER_COPY) q.ops[o].src.off = 0, q.ops[o].dst.off = 0;
  });
  EXPECT_NE(why.find("between the syncs"), std::string::npos) << why;
}

// The one-copy all-to-all writes each block straight into RECV while peers
// still read SEND: proven out of place, and caught when the same plans run
// in place (one buffer).
TEST(DirectChecker, TheOneCopyAllToAllIsForDistinctBuffersOnly) {
  const Algo& oop = kAlgos[std::size(kAlgos) - 1];
  ASSERT_TRUE(oop.distinct);
  // One scratch-free copy per block: no staging, one op per block.
  EXPECT_EQ(Check(oop, {3, 5, 1 << 20, 0, false, false},
                  [](std::vector<plan>& p) {
                    const plan& q = p[0];
                    EXPECT_EQ(q.buf_count[PB_SCRATCH], 0u);
                    int copies = 0;
                    for (uint32_t o = 0; o < q.nops; o++)
                      copies += q.ops[o].kind == OP_COPY || q.ops[o].kind == OP_PEER_COPY;
                    EXPECT_EQ(copies, 3);
                  }),
            "");
  std::string why = Check(oop, {3, 5, 1 << 20, 0, false, false}, nullptr, true);
  EXPECT_NE(why, "");
  EXPECT_NE(why.find("in-place"), std::string::npos) << why;
}

// In place, only the peers' blocks go through scratch: n - 1 blocks read in
// and copied out, the own block left where it is (proven in place and out of
// place by EveryRankCountRootAndVariantIsCorrect).
TEST(DirectChecker, TheInPlaceAllToAllStagesOnlyThePeersBlocks) {
  const Algo& inplace = kAlgos[std::size(kAlgos) - 2];
  ASSERT_FALSE(inplace.distinct);
  for (int n : {2, 3, 5})
    EXPECT_EQ(Check(inplace, {n, 7, 1 << 20, 0, false, false},
                    [n](std::vector<plan>& p) {
                      for (int r = 0; r < n; r++) {
                        const plan& q = p[r];
                        size_t into = 0, outof = 0;
                        for (uint32_t o = 0; o < q.nops; o++) {
                          const plan_op& op = q.ops[o];
                          if (op.kind != OP_SYNC && op.dst.buf == PB_SCRATCH) into += op.count;
                          if (op.src.buf == PB_SCRATCH && op.kind == OP_COPY) outof += op.count;
                        }
                        EXPECT_EQ(into, size_t(7) * (n - 1)) << "rank " << r << " of " << n;
                        EXPECT_EQ(outof, size_t(7) * (n - 1)) << "rank " << r << " of " << n;
                      }
                    }),
              "");
}

TEST(DirectChecker, CatchesAReadBeforeTheFirstSyncOrAfterTheLast) {
  // Read all-gather: swap the first sync and the read, so the read comes
  // first.
  std::string why = Check(kAlgos[2], {3, 4, 1 << 20, 0, false, false}, [](std::vector<plan>& p) {
    plan& q = p[1];
    int s = FirstOp(q, OP_SYNC), r = FirstOp(q, OP_PEER_COPY);
    std::swap(q.ops[s], q.ops[r]);
  });
  EXPECT_NE(why.find("sync"), std::string::npos) << why;
}

TEST(DirectChecker, CatchesUnequalSyncCounts) {
  std::string why = Check(kAlgos[4], {3, 4, 1 << 20, 0, false, false}, [](std::vector<plan>& p) {
    plan& q = p[2];
    int s = FirstOp(q, OP_SYNC);
    q.ops[s].kind = OP_COPY;  // a copy of scratch onto itself: harmless but one sync fewer
    q.ops[s].count = 0;
  });
  EXPECT_NE(why, "");
}

TEST(DirectChecker, CatchesAWriteOverWhatAPeerReads) {
  // Read all-gather: rank 0 copies its own block before the last sync,
  // which in place overwrites nothing but in the checker's terms writes
  // RECV's block 0 - the very range rank 1 reads as rank 0's SEND.
  std::string why = Check(kAlgos[2], {2, 4, 1 << 20, 0, false, false}, [](std::vector<plan>& p) {
    plan& q = p[0];  // sync, peer_copy, sync, copy: one op per step
    ASSERT_EQ(q.nops, 4u);
    std::swap(q.ops[2], q.ops[3]);  // the copy now runs before the last sync
  });
  EXPECT_NE(why.find("in-place"), std::string::npos) << why;
  EXPECT_NE(why.find("between the syncs"), std::string::npos) << why;
}

}  // namespace
