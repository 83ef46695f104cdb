// Plans with low-latency lines (collectives/lines.c: all-reduce, all-gather,
// reduce-scatter, broadcast, reduce, all-to-all): every rank count from
// 1 to 64 and every root, proven by the symbolic checker out of place and in
// place; and
// checker cases that show each rule about lines catches a broken plan.
#include <gtest/gtest.h>

#include <functional>
#include <iterator>
#include <string>
#include <vector>

extern "C" {
#include "collectives/plan.h"
int lines_probe_roundtrip(size_t off, size_t bytes, uint64_t seq, char* why, size_t len);
}

namespace {

using Build = loomResult_t (*)(const coll_args*, plan*);

struct Algo {
  const char* name;
  Build build;
  check_kind kind;
  bool blocks;  // buffers hold one block per rank
  bool reduces;
  bool rooted;
};

const Algo kAlgos[] = {
    {"lines all-reduce", lines_allreduce_build, CHECK_ALLREDUCE, false, true, false},
    {"lines all-gather", lines_allgather_build, CHECK_ALLGATHER, true, false, false},
    {"lines reduce-scatter", lines_reducescatter_build, CHECK_REDUCESCATTER, true, true, false},
    {"lines broadcast", lines_broadcast_build, CHECK_BROADCAST, false, false, true},
    {"lines reduce", lines_reduce_build, CHECK_REDUCE, false, true, true},
    {"lines all-to-all", lines_alltoall_build, CHECK_ALLTOALL, true, false, false},
};

struct Case {
  int n;
  size_t count;
  bool premul;
  bool avg;
  int root;
};

std::string Check(const Algo& algo, const Case& c,
                  const std::function<void(std::vector<plan>&)>& mutate = nullptr) {
  std::vector<plan> p(c.n);
  std::string err;
  for (int r = 0; r < c.n; r++) {
    plan_init(&p[r], r, c.n, "test");
    coll_args a = {};
    a.nranks = c.n;
    a.rank = r;
    a.count = c.count;
    a.slice_elems = 1 << 20;
    a.premul = c.premul;
    a.avg = c.avg;
    a.root = c.root;
    if (algo.build(&a, &p[r]) != loomSuccess && err.empty()) err = "build failed";
  }
  if (err.empty()) {
    if (mutate) mutate(p);
    check_spec spec = {};
    spec.kind = algo.kind;
    spec.nranks = c.n;
    spec.count = c.count;
    spec.root = c.root;
    char why[512] = "";
    if (plan_check_spec(&spec, p.data(), why, sizeof(why)) != 0) err = why[0] ? why : "failed";
  }
  for (auto& q : p) plan_free(&q);
  return err;
}

class LinesPlans : public ::testing::TestWithParam<int> {};

TEST_P(LinesPlans, EveryRankCountAndVariantIsCorrect) {
  const Algo& algo = kAlgos[GetParam()];
  for (int n = 1; n <= 64; n++)
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(n + 1), size_t(1000)}) {
      double cost = double(n) * n * (algo.blocks ? double(count) * n : double(count));
      if (cost > 4e6) continue;
      for (int root = 0; root < (algo.rooted ? n : 1); root += (n > 8 ? 7 : 1))
        for (int v = 0; v < (algo.reduces ? 4 : 1); v++) {
          Case c = {n, count, (v & 1) != 0, (v & 2) != 0, root};
          ASSERT_EQ(Check(algo, c), "")
              << algo.name << " n=" << n << " count=" << count << " root=" << root
              << " premul=" << c.premul << " avg=" << c.avg;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Algos, LinesPlans, ::testing::Range(0, int(std::size(kAlgos))),
                         [](const ::testing::TestParamInfo<int>& i) {
                           std::string n = kAlgos[i.param].name;
                           for (char& ch : n)
                             if (ch == ' ' || ch == '-') ch = '_';
                           return n;
                         });

// The peers of p's ops of the given kinds, in plan order.
std::vector<int> PeersOf(const plan& p, std::initializer_list<int> kinds) {
  std::vector<int> peers;
  for (uint32_t o = 0; o < p.nops; o++)
    for (int k : kinds)
      if (p.ops[o].kind == k) peers.push_back(p.ops[o].peer);
  return peers;
}

int FirstOp(const plan& p, int k) {
  for (uint32_t o = 0; o < p.nops; o++)
    if (p.ops[o].kind == k) return int(o);
  return -1;
}

// One put, one read per step, then the whole vector: every rank reads
// every rank's lines, its own included, in rank order.
TEST(LinesPlansShape, AllReduceIsOnePutAndARankOrderedFold) {
  EXPECT_EQ(Check(kAlgos[0], {3, 5, false, false, 0},
                  [](std::vector<plan>& p) {
                    for (const plan& q : p) {
                      ASSERT_EQ(q.nsteps, 4u);
                      EXPECT_EQ(q.lines_count, 5u);
                      EXPECT_EQ(q.ops[0].kind, OP_LINES_PUT);
                      for (int r = 0; r < 3; r++) {
                        EXPECT_EQ(q.ops[1 + r].kind, r == 0 ? OP_LINES_COPY : OP_LINES_REDUCE);
                        EXPECT_EQ(q.ops[1 + r].peer, r);
                      }
                    }
                  }),
            "");
}

TEST(LinesChecker, CatchesAReadOfLinesNeverPut) {
  // Rank 1 puts half its lines: everyone waits for the rest for ever.
  std::string why = Check(kAlgos[0], {3, 4, false, false, 0}, [](std::vector<plan>& p) {
    p[1].ops[FirstOp(p[1], OP_LINES_PUT)].count = 2;
  });
  EXPECT_NE(why.find("never all put"), std::string::npos) << why;
}

TEST(LinesChecker, CatchesAReadBeyondWhatThePeerPuts) {
  std::string why = Check(kAlgos[2], {2, 4, false, false, 0}, [](std::vector<plan>& p) {
    p[0].lines_count = 4;  // rank 0 declares (and puts) less than rank 1 reads
    p[0].ops[FirstOp(p[0], OP_LINES_PUT)].count = 4;
  });
  EXPECT_NE(why.find("out of bounds"), std::string::npos) << why;
}

TEST(LinesChecker, CatchesTwoPuts) {
  std::string why = Check(kAlgos[1], {2, 4, false, false, 0}, [](std::vector<plan>& p) {
    plan& q = p[0];
    int cp = FirstOp(q, OP_COPY);  // SEND -> RECV block 0: now a second put
    q.ops[cp].kind = OP_LINES_PUT;
    q.ops[cp].dst = {PB_LINES, 0};
  });
  EXPECT_NE(why.find("puts its lines 2 times"), std::string::npos) << why;
}

TEST(LinesChecker, CatchesAOneSidedRead) {
  // All-gather of 2: rank 0 stops reading rank 1's lines, so nothing holds
  // rank 0 back while rank 1 still reads rank 0's: rank 0 could run two
  // calls ahead and overwrite them.
  std::string why = Check(kAlgos[1], {2, 4, false, false, 0}, [](std::vector<plan>& p) {
    plan& q = p[0];
    int rd = FirstOp(q, OP_LINES_COPY);
    q.ops[rd].kind = OP_COPY;  // a local copy instead: wrong data as well
    q.ops[rd].peer = -1;
    q.ops[rd].src = plan_ref_make(PB_SEND, 0);
  });
  EXPECT_NE(why.find("rank 0 never reads rank 1's lines nor sees its put"), std::string::npos)
      << why;
}

// Broadcast's readers put a token, and every rank waits to see every
// other rank's put of an earlier call (OP_LINES_SEEN). Seeing only the
// root (as the data alone would need) lets a reader run ahead of another
// call's root when roots change: the checker refuses it.
TEST(LinesChecker, BroadcastRanksSeeEveryOtherRanksPut) {
  EXPECT_EQ(Check(kAlgos[3], {3, 5, false, false, 1},
                  [](std::vector<plan>& p) {
                    for (int r = 0; r < 3; r++) {
                      std::vector<int> seen = PeersOf(p[r], {OP_LINES_SEEN});
                      // The root sees both readers; a reader sees the other
                      // reader (the root's data is what it reads).
                      std::vector<int> want =
                          r == 1 ? std::vector<int>{2, 0} : std::vector<int>{r == 0 ? 2 : 0};
                      EXPECT_EQ(seen, want) << "rank " << r;
                    }
                  }),
            "");
  std::string why = Check(kAlgos[3], {3, 5, false, false, 1}, [](std::vector<plan>& p) {
    plan& q = p[0];  // a reader: its wait for rank 2's put becomes a local copy
    for (uint32_t o = 0; o < q.nops; o++)
      if (q.ops[o].kind == OP_LINES_SEEN && q.ops[o].peer == 2) {
        q.ops[o].kind = OP_COPY;
        q.ops[o].peer = -1;
        q.ops[o].src = plan_ref_make(PB_RECV, 0);
        q.ops[o].dst = plan_ref_make(PB_RECV, 0);
      }
  });
  EXPECT_NE(why.find("rank 0 never reads rank 2's lines nor sees its put"), std::string::npos)
      << why;
}

// Reduce: the root folds every rank's lines in rank order; the others
// read nothing and see every other rank's put, the root's included. One
// that skips the root could run K - 1 calls ahead of it and overwrite
// lines the root still folds: the checker refuses it.
TEST(LinesChecker, ReduceNonRootsSeeEveryOtherRanksPut) {
  EXPECT_EQ(Check(kAlgos[4], {3, 5, false, false, 1},
                  [](std::vector<plan>& p) {
                    for (int r = 0; r < 3; r++) {
                      std::vector<int> seen = PeersOf(p[r], {OP_LINES_SEEN});
                      std::vector<int> read = PeersOf(p[r], {OP_LINES_COPY, OP_LINES_REDUCE});
                      EXPECT_EQ(read, r == 1 ? std::vector<int>({0, 1, 2}) : std::vector<int>())
                          << "rank " << r;
                      std::vector<int> want = r == 1   ? std::vector<int>()
                                              : r == 0 ? std::vector<int>({1, 2})
                                                       : std::vector<int>({0, 1});
                      EXPECT_EQ(seen, want) << "rank " << r;
                    }
                  }),
            "");
  std::string why = Check(kAlgos[4], {3, 5, false, false, 1}, [](std::vector<plan>& p) {
    plan& q = p[2];  // a non-root: its wait for the root's put waits for rank 0's again
    for (uint32_t o = 0; o < q.nops; o++)
      if (q.ops[o].kind == OP_LINES_SEEN && q.ops[o].peer == 1) q.ops[o].peer = 0;
  });
  EXPECT_NE(why.find("rank 2 never reads rank 1's lines nor sees its put"), std::string::npos)
      << why;
}

// All-to-all: one put of the whole input, then block r of every other
// rank's lines; reading a block from the wrong offset is wrong data.
TEST(LinesChecker, AllToAllReadsItsOwnBlockOfEachPeer) {
  EXPECT_EQ(Check(kAlgos[5], {3, 4, false, false, 0},
                  [](std::vector<plan>& p) {
                    for (int r = 0; r < 3; r++) {
                      EXPECT_EQ(p[r].lines_count, 12u);
                      for (uint32_t o = 0; o < p[r].nops; o++) {
                        if (p[r].ops[o].kind == OP_LINES_COPY) {
                          EXPECT_EQ(p[r].ops[o].src.off, size_t(4 * r)) << "rank " << r;
                        }
                      }
                    }
                  }),
            "");
  std::string why = Check(kAlgos[5], {3, 4, false, false, 0}, [](std::vector<plan>& p) {
    p[0].ops[FirstOp(p[0], OP_LINES_COPY)].src.off = 4;
  });
  EXPECT_NE(why, "");
}

// A rank's put is what tells the others it finished its last call: a
// plan with lines that reads but never puts is refused.
TEST(LinesChecker, CatchesAPlanThatNeverPuts) {
  std::string why = Check(kAlgos[3], {3, 5, false, false, 1}, [](std::vector<plan>& p) {
    plan& q = p[0];  // a reader: its token's put becomes a copy onto itself
    int put = FirstOp(q, OP_LINES_PUT);
    q.ops[put].kind = OP_COPY;
    q.ops[put].src = plan_ref_make(PB_RECV, 0);
    q.ops[put].dst = plan_ref_make(PB_RECV, 0);
  });
  EXPECT_NE(why.find("rank 0: a plan with lines that never puts its own"), std::string::npos)
      << why;
}

// A wait to see a put takes no buffer and no elements.
TEST(LinesChecker, CatchesASeenWithABuffer) {
  std::string why = Check(kAlgos[3], {3, 5, false, false, 1}, [](std::vector<plan>& p) {
    plan& q = p[1];
    for (uint32_t o = 0; o < q.nops; o++)
      if (q.ops[o].kind == OP_LINES_SEEN) q.ops[o].dst = plan_ref_make(PB_RECV, 0);
  });
  EXPECT_NE(why.find("names a buffer or elements"), std::string::npos) << why;
}

TEST(LinesChecker, CatchesAReadSharingItsStep) {
  std::string why = Check(kAlgos[0], {2, 4, false, false, 0}, [](std::vector<plan>& p) {
    plan& q = p[0];
    ASSERT_GE(q.nsteps, 3u);
    // Merge the first read into the put's step.
    q.steps[0].op_end = q.steps[1].op_end;
    q.steps[1].op_begin = q.steps[1].op_end;
  });
  EXPECT_NE(why, "");
}

TEST(LinesChecker, CatchesLinesBesideASync) {
  std::string why = Check(kAlgos[0], {2, 4, false, false, 0}, [](std::vector<plan>& p) {
    for (plan& q : p) {
      plan_step_begin(&q);
      plan_add(&q, OP_SYNC, -1, plan_ref_make(PB_SCRATCH, 0), plan_ref_make(PB_SCRATCH, 0), 1);
      ASSERT_EQ(plan_finish(&q), loomSuccess);
    }
  });
  EXPECT_NE(why.find("also sends, receives or syncs"), std::string::npos) << why;
}

// The lines' format (kernels/cpu/cpu_lines.c): puts at every offset a
// plan can use (multiples of 1 to 8 bytes, across line edges), of every
// length to a few lines, read back whole and in pieces; a put makes its
// lines ready and no line after them, whatever number they held before
// (the number of the call 16 back, or 1 below: the first call's).
TEST(LinesFormat, PutsReadBackAtEveryOffsetAndLength) {
  for (uint64_t seq : {uint64_t(1), uint64_t(17), uint64_t(1) << 40})
    for (size_t off = 0; off <= 3 * 56; off += 4)
      for (size_t bytes : {0, 1, 2, 3, 4, 7, 8, 52, 55, 56, 57, 111, 112, 113, 600, 4096}) {
        char why[256] = "";
        ASSERT_EQ(lines_probe_roundtrip(off, bytes, seq, why, sizeof(why)), 0) << why;
      }
}

}  // namespace
