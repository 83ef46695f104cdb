// Plans as data: the builder (plan.c), ring all-reduce (ring.c) and the
// symbolic checker (check.c). No transport, no data: the checker proves each
// plan, and hand-made broken plans prove the checker.
#include <gtest/gtest.h>

#include <string>
#include <vector>

extern "C" {
#include "collectives/plan.h"
}

namespace {

// One plan per rank, freed on scope exit.
class Plans {
 public:
  explicit Plans(int n, size_t count = 0) : p_(n) {
    for (int r = 0; r < n; r++) {
      plan_init(&p_[r], r, n, "test");
      p_[r].buf_count[PB_SEND] = p_[r].buf_count[PB_RECV] = count;
    }
  }
  ~Plans() {
    for (auto& p : p_) plan_free(&p);
  }
  Plans(const Plans&) = delete;
  Plans& operator=(const Plans&) = delete;

  int n() const { return (int)p_.size(); }
  plan& operator[](int r) { return p_[r]; }
  const plan* data() const { return p_.data(); }

  // Empty string when the plans are a correct all-reduce, else the reason.
  std::string Check(size_t count) const {
    char why[512] = "unset";
    int rc = plan_check(CHECK_ALLREDUCE, n(), count, data(), why, sizeof(why));
    if (rc == 0) return "";
    return why[0] ? std::string(why) : std::string("failed without a reason");
  }

 private:
  std::vector<plan> p_;
};

// coll_args for a collective without a root or counts.
coll_args Args(int n, int rank, size_t count, size_t slice, bool premul = false, bool avg = false) {
  coll_args a{};
  a.nranks = n;
  a.rank = rank;
  a.count = count;
  a.slice_elems = slice;
  a.premul = premul ? 1 : 0;
  a.avg = avg ? 1 : 0;
  return a;
}

plan_ref Ref(plan_buf b, size_t off) {
  return plan_ref_make(b, off);
}

void Send(plan& p, int peer, plan_buf b, size_t off, size_t n) {
  plan_add(&p, OP_SEND, peer, Ref(b, off), Ref(b, off), n);
}
void Recv(plan& p, int peer, plan_buf b, size_t off, size_t n) {
  plan_add(&p, OP_RECV, peer, Ref(b, off), Ref(b, off), n);
}
void Local(plan& p, plan_op_kind k, plan_buf db, plan_buf sb, size_t n) {
  plan_add(&p, k, -1, Ref(sb, 0), Ref(db, 0), n);
}

void BuildRing(Plans& ps, size_t count, size_t slice, bool premul, bool avg) {
  for (int r = 0; r < ps.n(); r++) {
    coll_args a = Args(ps.n(), r, count, slice, premul, avg);
    ASSERT_EQ(ring_allreduce_build(&a, &ps[r]), loomSuccess) << "rank " << r;
  }
}

std::string Print(const plan& p) {
  std::vector<char> buf(1 << 16);
  plan_print(&p, buf.data(), buf.size());
  return buf.data();
}

bool Has(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

// ---- The builder ----

TEST(PlanBuild, DropsEmptyOpsAndSteps) {
  Plans ps(2, 8);
  plan& p = ps[0];
  plan_step_begin(&p);
  plan_step_begin(&p);        // the empty one before it is dropped
  Send(p, 1, PB_SEND, 0, 0);  // count 0 adds nothing
  plan_step_begin(&p);
  Send(p, 1, PB_SEND, 0, 4);
  Recv(p, 1, PB_RECV, 4, 4);
  plan_step_begin(&p);
  plan_step_begin(&p);
  ASSERT_EQ(plan_finish(&p), loomSuccess);
  ASSERT_EQ(p.nsteps, 1u);
  ASSERT_EQ(p.nops, 2u);
  EXPECT_EQ(p.steps[0].op_begin, 0u);
  EXPECT_EQ(p.steps[0].op_end, 2u);
  EXPECT_EQ(p.ops[1].kind, OP_RECV);
  EXPECT_EQ(p.ops[1].peer, 1);
  EXPECT_EQ(p.ops[1].dst.off, 4u);
}

TEST(PlanBuild, OpWithoutStepOpensOne) {
  Plans ps(1, 4);
  Local(ps[0], OP_COPY, PB_RECV, PB_SEND, 4);
  ASSERT_EQ(plan_finish(&ps[0]), loomSuccess);
  EXPECT_EQ(ps[0].nsteps, 1u);
  EXPECT_EQ(ps[0].nops, 1u);
}

TEST(PlanBuild, GrowsAndResetKeepsStorage) {
  Plans ps(2, 4096);
  plan& p = ps[0];
  for (size_t i = 0; i < 4096; i++) {
    plan_step_begin(&p);
    Send(p, 1, PB_SEND, i, 1);
  }
  ASSERT_EQ(plan_finish(&p), loomSuccess);
  EXPECT_EQ(p.nsteps, 4096u);
  EXPECT_EQ(p.ops[4095].src.off, 4095u);
  const plan_op* ops = p.ops;
  plan_reset(&p);
  EXPECT_EQ(p.nsteps, 0u);
  EXPECT_EQ(p.nops, 0u);
  EXPECT_EQ(p.ops, ops);
  EXPECT_GE(p.ops_cap, 4096u);
}

TEST(PlanBuild, FailureIsReportedByFinish) {
  Plans ps(1, 4);
  ps[0].failed = 1;  // what a failed realloc leaves
  Local(ps[0], OP_COPY, PB_RECV, PB_SEND, 4);
  EXPECT_EQ(ps[0].nops, 0u);
  EXPECT_EQ(plan_finish(&ps[0]), loomSystemError);
}

TEST(PlanPrint, NamesEveryOp) {
  Plans ps(4);
  BuildRing(ps, 10, 1 << 20, true, true);
  std::string text = Print(ps[1]);
  for (const char* name : {"premul", "send", "recv_reduce", "recv ", "div", "rank 1/4", "ring"})
    EXPECT_TRUE(Has(text, name)) << name << " not in:\n" << text;
  Plans one(1);
  BuildRing(one, 5, 2, false, false);
  EXPECT_TRUE(Has(Print(one[0]), "copy"));
}

TEST(PlanPrint, CutListingStaysTerminated) {
  Plans ps(8);
  BuildRing(ps, 1000, 1, false, false);
  char buf[64];
  memset(buf, 'x', sizeof(buf));
  plan_print(&ps[0], buf, sizeof(buf));
  std::string text(buf);
  EXPECT_EQ(text.size(), sizeof(buf) - 1);
  EXPECT_TRUE(Has(text, "...")) << text;
}

// ---- Ring all-reduce: shape ----

TEST(RingAllReduce, ShapeOfOneSlice) {
  Plans ps(4);
  BuildRing(ps, 8, 1 << 20, false, false);
  for (int r = 0; r < 4; r++) {
    const plan& p = ps[r];
    EXPECT_STREQ(p.algo, "ring");
    EXPECT_EQ(p.buf_count[PB_SEND], 8u);
    EXPECT_EQ(p.buf_count[PB_RECV], 8u);
    EXPECT_EQ(p.buf_count[PB_SCRATCH], 0u);
    ASSERT_EQ(p.nsteps, 6u);  // 3 reduce-scatter + 3 all-gather
    ASSERT_EQ(p.nops, 12u);
    EXPECT_EQ(p.ops[0].kind, OP_SEND);
    EXPECT_EQ(p.ops[0].peer, (r + 1) % 4);
    EXPECT_EQ(p.ops[0].src.buf, PB_SEND);
    EXPECT_EQ(p.ops[0].src.off, (size_t)r * 2);
    EXPECT_EQ(p.ops[1].kind, OP_RECV_REDUCE);
    EXPECT_EQ(p.ops[1].peer, (r + 3) % 4);
    EXPECT_EQ(p.ops[11].kind, OP_RECV);
  }
}

TEST(RingAllReduce, PremulAndAvgFrameTheRing) {
  Plans ps(3);
  BuildRing(ps, 9, 2, true, true);
  const plan& p = ps[2];
  ASSERT_GE(p.nsteps, 3u);
  EXPECT_EQ(p.ops[0].kind, OP_PREMUL);
  EXPECT_EQ(p.steps[0].op_end, 1u);
  const plan_op& last = p.ops[p.nops - 1];
  EXPECT_EQ(last.kind, OP_DIV);
  EXPECT_EQ(last.count, 9u);
  EXPECT_EQ(p.steps[p.nsteps - 1].op_begin, p.nops - 1);
  for (uint32_t i = 1; i + 1 < p.nops; i++) {
    EXPECT_LE(p.ops[i].count, 2u) << "op " << i << " exceeds the slice";
    if (p.ops[i].kind == OP_RECV_REDUCE) {
      EXPECT_EQ(p.ops[i].src.buf, PB_RECV);
    }
  }
}

TEST(RingAllReduce, NeverWritesTheInput) {
  Plans ps(5);
  BuildRing(ps, 23, 3, false, true);
  for (int r = 0; r < 5; r++)
    for (uint32_t i = 0; i < ps[r].nops; i++)
      if (ps[r].ops[i].kind != OP_SEND) {
        EXPECT_NE(ps[r].ops[i].dst.buf, PB_SEND);
      }
}

TEST(RingAllReduce, OneRank) {
  Plans a(1), b(1), c(1);
  BuildRing(a, 5, 2, false, false);
  ASSERT_EQ(a[0].nsteps, 1u);
  EXPECT_EQ(a[0].ops[0].kind, OP_COPY);
  BuildRing(b, 5, 2, true, true);  // premul alone leaves the result in RECV
  ASSERT_EQ(b[0].nsteps, 2u);
  EXPECT_EQ(b[0].ops[0].kind, OP_PREMUL);
  EXPECT_EQ(b[0].ops[1].kind, OP_DIV);
  BuildRing(c, 0, 2, true, true);
  EXPECT_EQ(c[0].nsteps, 0u);
  EXPECT_EQ(a.Check(5), "");
  EXPECT_EQ(b.Check(5), "");
  EXPECT_EQ(c.Check(0), "");
}

TEST(RingAllReduce, RejectsBadArguments) {
  plan p;
  plan_init(&p, 0, 2, "ring");
  coll_args zero_slice = Args(2, 0, 10, 0);
  coll_args bad_rank = Args(2, 2, 10, 4);
  EXPECT_EQ(ring_allreduce_build(&zero_slice, &p), loomInvalidArgument);
  EXPECT_EQ(ring_allreduce_build(&bad_rank, &p), loomInvalidArgument);
  plan_free(&p);
}

// ---- Ring all-reduce: proved at every rank count ----

class RingEveryRankCount : public ::testing::TestWithParam<int> {};

// The full product up to 16 ranks; above, one premul/avg variant per
// (count, slice), rotating with n so that every variant runs at every size.
TEST_P(RingEveryRankCount, CheckerAcceptsEveryCase) {
  const int n = GetParam();
  const size_t counts[] = {0, 1, 7, (size_t)n - 1, 3 * (size_t)n + 1, 1000};
  const size_t slices[] = {1, 3, 1 << 20};
  int cases = 0;
  for (size_t ci = 0; ci < 6; ci++)
    for (size_t si = 0; si < 3; si++)
      for (int v = 0; v < 4; v++) {
        if (n > 16 && v != (int)((n + ci + si) % 4)) continue;
        bool premul = v & 1, avg = v & 2;
        Plans ps(n);
        BuildRing(ps, counts[ci], slices[si], premul, avg);
        EXPECT_EQ(ps.Check(counts[ci]), "")
            << "n=" << n << " count=" << counts[ci] << " slice=" << slices[si]
            << " premul=" << premul << " avg=" << avg;
        cases++;
      }
  EXPECT_GT(cases, 0);
}

INSTANTIATE_TEST_SUITE_P(Ranks, RingEveryRankCount, ::testing::Range(1, 65));

// ---- The checker catches what it must ----

// A correct two-rank all-reduce, in place too: exchange inputs through
// scratch, then add. Variants below break it one way each.
void Exchange(Plans& ps, size_t c, bool reduce_twice = false, bool skip_reduce = false) {
  for (int r = 0; r < 2; r++) {
    plan& p = ps[r];
    p.buf_count[PB_SCRATCH] = c;
    plan_step_begin(&p);
    Send(p, 1 - r, PB_SEND, 0, c);
    Recv(p, 1 - r, PB_SCRATCH, 0, c);
    plan_step_begin(&p);
    Local(p, OP_COPY, PB_RECV, PB_SEND, c);
    plan_step_begin(&p);
    if (!skip_reduce) Local(p, OP_REDUCE, PB_RECV, PB_SCRATCH, c);
    plan_step_begin(&p);
    if (reduce_twice) Local(p, OP_REDUCE, PB_RECV, PB_SCRATCH, c);
    ASSERT_EQ(plan_finish(&p), loomSuccess);
  }
}

TEST(PlanCheck, AcceptsHandMadeExchange) {
  Plans ps(2, 6);
  Exchange(ps, 6);
  EXPECT_EQ(ps.Check(6), "");
}

TEST(PlanCheck, CatchesMissingReceive) {
  Plans ps(2, 6);
  Send(ps[0], 1, PB_SEND, 0, 6);
  Recv(ps[1], 0, PB_RECV, 0, 6);
  Send(ps[1], 0, PB_SEND, 0, 6);  // rank 0 never receives it
  std::string why = ps.Check(6);
  EXPECT_TRUE(Has(why, "rank 1 has 1 sends to rank 0, which has 0 receives from it")) << why;
}

TEST(PlanCheck, CatchesWrongCount) {
  Plans ps(2, 6);
  Send(ps[0], 1, PB_SEND, 0, 6);
  Recv(ps[1], 0, PB_RECV, 0, 5);
  std::string why = ps.Check(6);
  EXPECT_TRUE(Has(why, "sends 6 elements to rank 1, whose receive (step 0) takes 5")) << why;
}

TEST(PlanCheck, CatchesContributionCountedTwice) {
  Plans ps(2, 6);
  Exchange(ps, 6, /*reduce_twice=*/true);
  std::string why = ps.Check(6);
  EXPECT_TRUE(Has(why, "step 3: contribution of rank ")) << why;
  EXPECT_TRUE(Has(why, " counted twice in recv[0]")) << why;
}

TEST(PlanCheck, CatchesMissingContribution) {
  Plans ps(2, 6);
  Exchange(ps, 6, false, /*skip_reduce=*/true);
  std::string why = ps.Check(6);
  EXPECT_TRUE(Has(why, "rank 0: recv[0] ends missing the contribution of rank 1")) << why;
}

TEST(PlanCheck, CatchesRendezvousDeadlock) {
  Plans ps(2, 6);
  for (int r = 0; r < 2; r++) {  // both send first: fine eagerly, stuck under rendezvous
    plan_step_begin(&ps[r]);
    Send(ps[r], 1 - r, PB_SEND, 0, 6);
    plan_step_begin(&ps[r]);
    Recv(ps[r], 1 - r, PB_RECV, 0, 6);
  }
  std::string why = ps.Check(6);
  EXPECT_TRUE(Has(why, "deadlock")) << why;
  EXPECT_TRUE(Has(why, "rank 0 step 0")) << why;
  EXPECT_TRUE(Has(why, "rank 1 step 0")) << why;
}

TEST(PlanCheck, OrderedSendsAreNoDeadlock) {
  // The same exchange with rank 1 receiving first completes; the result is
  // still wrong (no reduction), which is the error reported.
  Plans ps(2, 6);
  plan_step_begin(&ps[0]);
  Send(ps[0], 1, PB_SEND, 0, 6);
  plan_step_begin(&ps[0]);
  Recv(ps[0], 1, PB_RECV, 0, 6);
  plan_step_begin(&ps[1]);
  Recv(ps[1], 0, PB_RECV, 0, 6);
  plan_step_begin(&ps[1]);
  Send(ps[1], 0, PB_SEND, 0, 6);
  std::string why = ps.Check(6);
  EXPECT_FALSE(Has(why, "deadlock")) << why;
  EXPECT_TRUE(Has(why, "missing the contribution")) << why;
}

TEST(PlanCheck, CatchesOutOfBounds) {
  Plans ps(2, 6);
  Exchange(ps, 6);
  ps[1].buf_count[PB_SCRATCH] = 5;
  std::string why = ps.Check(6);
  EXPECT_TRUE(Has(why, "rank 1 step 0: recv touches scratch[0..6), out of bounds")) << why;
}

TEST(PlanCheck, CatchesIntraStepHazard) {
  Plans ps(2, 8);
  for (int r = 0; r < 2; r++) {  // the receive lands on half of what the send reads
    ps[r].buf_count[PB_SCRATCH] = 8;
    Send(ps[r], 1 - r, PB_SCRATCH, 0, 4);
    Recv(ps[r], 1 - r, PB_SCRATCH, 2, 4);
  }
  std::string why = ps.Check(8);
  EXPECT_TRUE(Has(why, "rank 0 step 0: recv writes scratch[2..6) while send reads scratch[0..4)"))
      << why;
  Plans ws(1, 8);  // two local writes to overlapping ranges
  plan_add(&ws[0], OP_COPY, -1, Ref(PB_SEND, 0), Ref(PB_RECV, 0), 5);
  plan_add(&ws[0], OP_COPY, -1, Ref(PB_SEND, 4), Ref(PB_RECV, 4), 4);
  why = ws.Check(8);
  EXPECT_TRUE(Has(why, "rank 0 step 0: copy writes recv[0..5) while copy writes recv[4..8)"))
      << why;
}

TEST(PlanCheck, CatchesPlanWrongOnlyInPlace) {
  // Each rank adds its own input to what arrives, all in one step. Out of
  // place that is right; in place the receive writes the buffer the send
  // is still reading.
  Plans ps(2, 6);
  for (int r = 0; r < 2; r++) {
    Send(ps[r], 1 - r, PB_SEND, 0, 6);
    plan_add(&ps[r], OP_RECV_REDUCE, 1 - r, Ref(PB_SEND, 0), Ref(PB_RECV, 0), 6);
  }
  std::string why = ps.Check(6);
  EXPECT_TRUE(Has(why,
                  "in-place: rank 0 step 0: recv_reduce writes recv[0..6) while send reads "
                  "send[0..6)"))
      << why;
}

TEST(PlanCheck, CatchesDataWrongOnlyInPlace) {
  // No hazard inside any step, but rank 1 receives over its input before it
  // sends it, which in place sends rank 0's own data back.
  Plans ps(2, 6);
  plan_step_begin(&ps[0]);
  Send(ps[0], 1, PB_SEND, 0, 6);
  plan_step_begin(&ps[0]);
  Recv(ps[0], 1, PB_RECV, 0, 6);
  plan_step_begin(&ps[1]);
  Recv(ps[1], 0, PB_RECV, 0, 6);
  plan_step_begin(&ps[1]);
  Send(ps[1], 0, PB_SEND, 0, 6);
  for (int r = 0; r < 2; r++) {
    plan_step_begin(&ps[r]);
    Local(ps[r], OP_REDUCE, PB_RECV, PB_SEND, 6);
  }
  std::string why = ps.Check(6);
  EXPECT_EQ(why.rfind("in-place: ", 0), 0u) << why;
  EXPECT_TRUE(Has(why, "counted twice")) << why;
}

TEST(PlanCheck, CatchesPremulAndDivMisuse) {
  Plans twice(1, 4);
  Local(twice[0], OP_PREMUL, PB_RECV, PB_SEND, 4);
  plan_step_begin(&twice[0]);
  Local(twice[0], OP_PREMUL, PB_RECV, PB_RECV, 4);
  EXPECT_TRUE(Has(twice.Check(4), "premul of recv[0], which is not rank 0's own raw input"))
      << twice.Check(4);

  Plans early(2, 4);  // divides before the reduction is complete
  for (int r = 0; r < 2; r++) {
    Local(early[r], OP_COPY, PB_RECV, PB_SEND, 4);
    plan_step_begin(&early[r]);
    Local(early[r], OP_DIV, PB_RECV, PB_RECV, 4);
  }
  EXPECT_TRUE(Has(early.Check(4),
                  "rank 0 step 1: div of recv[0], which misses the contribution "
                  "of rank 1"))
      << early.Check(4);

  Plans partial(2, 4);  // only rank 0 divides: rank 1's result is not averaged
  Exchange(partial, 4);
  plan_step_begin(&partial[0]);
  Local(partial[0], OP_DIV, PB_RECV, PB_RECV, 4);
  EXPECT_TRUE(Has(partial.Check(4), "rank 1: recv[0] ends not divided")) << partial.Check(4);
}

TEST(PlanCheck, CatchesBadPeersAndGarbage) {
  Plans self(2, 4);
  Send(self[0], 0, PB_SEND, 0, 4);
  EXPECT_TRUE(Has(self.Check(4), "rank 0 step 0: send with peer 0"));
  Plans junk(1, 4);
  junk[0].buf_count[PB_SCRATCH] = 4;
  Local(junk[0], OP_COPY, PB_RECV, PB_SEND, 4);
  plan_step_begin(&junk[0]);
  Local(junk[0], OP_REDUCE, PB_RECV, PB_SCRATCH, 4);
  EXPECT_TRUE(Has(junk.Check(4), "rank 0 step 1: reduces garbage into recv[0]"));
  Plans writer(1, 4);  // the caller's send buffer is const
  Local(writer[0], OP_COPY, PB_SEND, PB_RECV, 4);
  EXPECT_TRUE(Has(writer.Check(4), "rank 0 step 0: copy writes the send buffer"));
  Plans many(65);
  EXPECT_NE(many.Check(0), "");
}

}  // namespace
