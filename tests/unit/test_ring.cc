// The ring generators (ring.c) proved by the symbolic checker (check.c) at
// every rank count, and the checker's rules for the collectives other than
// all-reduce: hand-made plans it must accept, and broken ones it must catch.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

extern "C" {
#include "collectives/plan.h"
}

namespace {

using Builder = loomResult_t (*)(const coll_args*, plan*);

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

  // Empty string when the plans are correct for spec, else the reason.
  std::string Check(check_spec spec) const {
    char why[512] = "unset";
    spec.nranks = n();
    if (plan_check_spec(&spec, p_.data(), why, sizeof(why)) == 0) return "";
    return why[0] ? std::string(why) : std::string("failed without a reason");
  }

 private:
  std::vector<plan> p_;
};

check_spec Spec(check_kind kind, size_t count, int root = 0, const size_t* counts = nullptr) {
  check_spec s{};
  s.kind = kind;
  s.count = count;
  s.root = root;
  s.a2av_counts = counts;
  return s;
}

coll_args Args(int n, int rank, size_t count, size_t slice, int root = 0, bool premul = false,
               bool avg = false) {
  coll_args a{};
  a.nranks = n;
  a.rank = rank;
  a.count = count;
  a.slice_elems = slice;
  a.root = root;
  a.premul = premul ? 1 : 0;
  a.avg = avg ? 1 : 0;
  return a;
}

// Builds every rank's plan; false (with a gtest failure) if a build fails.
bool Build(Plans& ps, Builder build, size_t count, size_t slice, int root = 0, bool premul = false,
           bool avg = false) {
  for (int r = 0; r < ps.n(); r++) {
    coll_args a = Args(ps.n(), r, count, slice, root, premul, avg);
    loomResult_t res = build(&a, &ps[r]);
    EXPECT_EQ(res, loomSuccess) << "rank " << r;
    if (res != loomSuccess) return false;
  }
  return true;
}

bool Has(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

plan_ref Ref(plan_buf b, size_t off) {
  return plan_ref_make(b, off);
}

// ---- Every ring generator at every rank count ----

struct Gen {
  const char* name;
  Builder build;
  check_kind kind;
  bool rooted, reduces;
};
const Gen kGens[] = {
    {"reduce-scatter", ring_reducescatter_build, CHECK_REDUCESCATTER, false, true},
    {"all-gather", ring_allgather_build, CHECK_ALLGATHER, false, false},
    {"broadcast", ring_broadcast_build, CHECK_BROADCAST, true, false},
    {"reduce", ring_reduce_build, CHECK_REDUCE, true, true},
};

// All roots up to 12 ranks; above, the ends of the chain and one between.
std::vector<int> RootsFor(int n) {
  std::vector<int> roots;
  if (n <= 12) {
    for (int r = 0; r < n; r++) roots.push_back(r);
  } else {
    for (int r : {0, n / 2 + 1, n - 1}) roots.push_back(r);
  }
  return roots;
}

// What checking one case costs, roughly: sends and receives of all ranks,
// and elements of all receive buffers.
size_t CaseCost(const Gen& g, int n, size_t count, size_t slice) {
  const size_t nslices = (count + slice - 1) / slice;
  const size_t per_rank = g.rooted ? 1 : (size_t)n;  // blocks each rank moves
  return (size_t)n * per_rank * (nslices * 8 + count);
}
// Up to 16 ranks, every premul/avg combination below kFull, else one; above
// 16 ranks, one combination per case, and only the cases below kOne.
const size_t kFull = 1 << 16, kOne = 1 << 19;

class RingCollectives : public ::testing::TestWithParam<std::tuple<int, int>> {};

// Every count, slice and root (all roots up to 12 ranks) at every rank count
// up to 16, and above the cases that cost less than kOne: the block-per-rank
// collectives with a slice of 1 or a count of 1000 at large n are left to
// the smaller rank counts, where they run the same code paths. Premul and
// avg rotate with n and the case where one combination runs.
TEST_P(RingCollectives, ProvedAtEveryRankCount) {
  const Gen& g = kGens[std::get<0>(GetParam())];
  const int n = std::get<1>(GetParam());
  const size_t counts[] = {0, 1, 7, (size_t)n - 1, 3 * (size_t)n + 1, 1000};
  const size_t slices[] = {1, 3, 1 << 20};
  int cases = 0;
  for (size_t ci = 0; ci < 6; ci++)
    for (size_t si = 0; si < 3; si++) {
      const size_t count = counts[ci], slice = slices[si];
      const size_t cost = CaseCost(g, n, count, slice);
      if (n > 16 && cost > kOne) continue;
      const bool one = n > 16 || cost > kFull;
      const std::vector<int> roots = g.rooted ? RootsFor(n) : std::vector<int>{0};
      for (size_t ri = 0; ri < roots.size(); ri++)
        for (int v = 0; v < (g.reduces ? 4 : 1); v++) {
          if (g.reduces && one && v != (int)((n + ci + si + ri) % 4)) continue;
          const bool premul = v & 1, avg = v & 2;
          Plans ps(n);
          if (!Build(ps, g.build, count, slice, roots[ri], premul, avg)) return;
          EXPECT_EQ(ps.Check(Spec(g.kind, count, roots[ri])), "")
              << g.name << " n=" << n << " root=" << roots[ri] << " count=" << count
              << " slice=" << slice << " premul=" << premul << " avg=" << avg;
          cases++;
        }
    }
  EXPECT_GT(cases, 0);
}

INSTANTIATE_TEST_SUITE_P(Ranks, RingCollectives,
                         ::testing::Combine(::testing::Range(0, 4), ::testing::Range(1, 65)),
                         [](const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
                           std::string name = kGens[std::get<0>(info.param)].name;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name + "_n" + std::to_string(std::get<1>(info.param));
                         });

// ---- Shapes ----

TEST(RingReduceScatter, EachRankEndsWithItsOwnBlock) {
  Plans ps(4);
  ASSERT_TRUE(Build(ps, ring_reducescatter_build, 6, 1 << 20));
  for (int r = 0; r < 4; r++) {
    const plan& p = ps[r];
    EXPECT_EQ(p.buf_count[PB_SEND], 24u);
    EXPECT_EQ(p.buf_count[PB_RECV], 6u);
    EXPECT_EQ(p.buf_count[PB_SCRATCH], 12u);  // two slots of one slice
    ASSERT_EQ(p.nsteps, 3u);
    const plan_op& last = p.ops[p.nops - 1];
    EXPECT_EQ(last.kind, OP_RECV_REDUCE);
    EXPECT_EQ(last.dst.buf, PB_RECV);
    EXPECT_EQ(last.src.buf, PB_SEND);
    EXPECT_EQ(last.src.off, (size_t)r * 6);  // its own block, read only here
    for (uint32_t i = 0; i < p.nops; i++)
      if (p.ops[i].kind != OP_SEND) {
        EXPECT_NE(p.ops[i].dst.buf, PB_SEND);
      }
  }
}

TEST(RingReduceScatter, PremulScalesIntoScratch) {
  Plans ps(3);
  ASSERT_TRUE(Build(ps, ring_reducescatter_build, 5, 2, 0, true, true));
  const plan& p = ps[1];
  EXPECT_EQ(p.ops[0].kind, OP_PREMUL);
  EXPECT_EQ(p.ops[0].src.buf, PB_SEND);
  EXPECT_EQ(p.ops[0].dst.buf, PB_SCRATCH);
  EXPECT_EQ(p.ops[0].count, 15u);
  EXPECT_EQ(p.buf_count[PB_SCRATCH], 15u + 4u);
  EXPECT_EQ(p.ops[p.nops - 1].kind, OP_DIV);
  EXPECT_EQ(p.ops[p.nops - 1].count, 5u);
}

TEST(RingAllGather, CopiesItsBlockThenForwards) {
  Plans ps(3);
  ASSERT_TRUE(Build(ps, ring_allgather_build, 4, 1 << 20));
  const plan& p = ps[2];
  EXPECT_EQ(p.buf_count[PB_SEND], 4u);
  EXPECT_EQ(p.buf_count[PB_RECV], 12u);
  EXPECT_EQ(p.buf_count[PB_SCRATCH], 0u);
  ASSERT_EQ(p.nsteps, 3u);
  EXPECT_EQ(p.ops[0].kind, OP_COPY);
  EXPECT_EQ(p.ops[0].dst.off, 8u);
  EXPECT_EQ(p.ops[1].kind, OP_SEND);
  EXPECT_EQ(p.ops[1].src.off, 8u);
  EXPECT_EQ(p.ops[2].kind, OP_RECV);
  EXPECT_EQ(p.ops[2].dst.off, 4u);
}

TEST(RingBroadcast, ChainIsPipelined) {
  Plans ps(4);
  ASSERT_TRUE(Build(ps, ring_broadcast_build, 10, 3, /*root=*/2));
  // Root 2: four slices out, then its copy; it alone has SEND.
  EXPECT_EQ(ps[2].buf_count[PB_SEND], 10u);
  EXPECT_EQ(ps[2].nsteps, 5u);
  EXPECT_EQ(ps[2].ops[4].kind, OP_COPY);
  // Rank 3 receives slice k while forwarding slice k - 1.
  EXPECT_EQ(ps[3].buf_count[PB_SEND], 0u);
  ASSERT_EQ(ps[3].nsteps, 5u);
  const plan_step& st = ps[3].steps[1];
  ASSERT_EQ(st.op_end - st.op_begin, 2u);
  EXPECT_EQ(ps[3].ops[st.op_begin].kind, OP_RECV);
  EXPECT_EQ(ps[3].ops[st.op_begin].dst.off, 3u);
  EXPECT_EQ(ps[3].ops[st.op_begin + 1].kind, OP_SEND);
  EXPECT_EQ(ps[3].ops[st.op_begin + 1].src.off, 0u);
  EXPECT_EQ(ps[3].ops[st.op_begin + 1].peer, 0);
  // Rank 1, last of the chain, only receives.
  for (uint32_t i = 0; i < ps[1].nops; i++) EXPECT_EQ(ps[1].ops[i].kind, OP_RECV);
}

TEST(RingReduce, ChainEndsAtTheRoot) {
  Plans ps(4);
  ASSERT_TRUE(Build(ps, ring_reduce_build, 10, 3, /*root=*/1, true, true));
  // Rank 2 starts: it scales into scratch and sends, nothing more.
  EXPECT_EQ(ps[2].buf_count[PB_RECV], 0u);
  EXPECT_EQ(ps[2].ops[0].kind, OP_PREMUL);
  for (uint32_t i = 1; i < ps[2].nops; i++) EXPECT_EQ(ps[2].ops[i].kind, OP_SEND);
  // Rank 3, between: partials in two slots past its scaled input.
  EXPECT_EQ(ps[3].buf_count[PB_SCRATCH], 10u + 6u);
  // The root reduces into RECV and divides at the end.
  EXPECT_EQ(ps[1].buf_count[PB_RECV], 10u);
  EXPECT_EQ(ps[1].buf_count[PB_SCRATCH], 0u);
  EXPECT_EQ(ps[1].ops[ps[1].nops - 1].kind, OP_DIV);
  for (int r = 0; r < 4; r++)
    for (uint32_t i = 0; i < ps[r].nops; i++) {
      const plan_op& op = ps[r].ops[i];
      if (op.kind == OP_SEND) continue;
      EXPECT_NE(op.dst.buf, PB_SEND) << "rank " << r;
      if (r != 1) {
        EXPECT_NE(op.dst.buf, PB_RECV) << "rank " << r;
      }
    }
}

TEST(RingGenerators, RejectBadArguments) {
  plan p;
  plan_init(&p, 0, 2, "ring");
  coll_args bad_root = Args(2, 0, 10, 4, /*root=*/2);
  coll_args zero_slice = Args(2, 0, 10, 0);
  EXPECT_EQ(ring_broadcast_build(&bad_root, &p), loomInvalidArgument);
  EXPECT_EQ(ring_reduce_build(&bad_root, &p), loomInvalidArgument);
  EXPECT_EQ(ring_reducescatter_build(&zero_slice, &p), loomInvalidArgument);
  EXPECT_EQ(ring_allgather_build(&zero_slice, &p), loomInvalidArgument);
  plan_free(&p);
}

// ---- Hand-made plans for the kinds ring.c does not build ----

// Every rank posts all its sends and receives in one step (never deadlocks)
// into scratch, copies its own part, then moves what arrived into RECV.
// blocks[src][dst] = {offset in src's SEND, offset in dst's RECV, count}.
struct Move {
  size_t send_off, recv_off, count;
};
void Direct(Plans& ps, const std::vector<std::vector<Move>>& m, const std::vector<size_t>& send,
            const std::vector<size_t>& recv) {
  const int n = ps.n();
  for (int r = 0; r < n; r++) {
    plan& p = ps[r];
    p.buf_count[PB_SEND] = send[r];
    p.buf_count[PB_RECV] = recv[r];
    size_t scratch = 0;
    std::vector<size_t> at(n);
    for (int q = 0; q < n; q++) {
      at[q] = scratch;
      if (q != r) scratch += m[q][r].count;
    }
    p.buf_count[PB_SCRATCH] = scratch;
    plan_step_begin(&p);
    for (int q = 0; q < n; q++) {
      if (q == r) continue;
      plan_add(&p, OP_SEND, q, Ref(PB_SEND, m[r][q].send_off), Ref(PB_SEND, 0), m[r][q].count);
      plan_add(&p, OP_RECV, q, Ref(PB_SCRATCH, at[q]), Ref(PB_SCRATCH, at[q]), m[q][r].count);
    }
    plan_step_begin(&p);  // after the sends: in place, SEND may lie in RECV
    plan_add(&p, OP_COPY, -1, Ref(PB_SEND, m[r][r].send_off), Ref(PB_RECV, m[r][r].recv_off),
             m[r][r].count);
    for (int q = 0; q < n; q++)
      if (q != r)
        plan_add(&p, OP_COPY, -1, Ref(PB_SCRATCH, at[q]), Ref(PB_RECV, m[q][r].recv_off),
                 m[q][r].count);
    ASSERT_EQ(plan_finish(&p), loomSuccess);
  }
}

void AllToAll(Plans& ps, size_t c) {
  const int n = ps.n();
  std::vector<std::vector<Move>> m(n, std::vector<Move>(n));
  for (int s = 0; s < n; s++)
    for (int d = 0; d < n; d++) m[s][d] = {d * c, s * c, c};
  Direct(ps, m, std::vector<size_t>(n, n * c), std::vector<size_t>(n, n * c));
}

// counts[src * n + dst], displacements the running sums.
void AllToAllV(Plans& ps, const std::vector<size_t>& counts) {
  const int n = ps.n();
  std::vector<std::vector<Move>> m(n, std::vector<Move>(n));
  std::vector<size_t> send(n), recv(n);
  for (int s = 0; s < n; s++)
    for (int d = 0; d < n; d++) {
      size_t c = counts[s * n + d];
      m[s][d] = {send[s], recv[d], c};
      send[s] += c;
      recv[d] += c;
    }
  Direct(ps, m, send, recv);
}

TEST(CheckKinds, AcceptsDirectAllToAll) {
  for (int n : {1, 2, 5}) {
    Plans ps(n);
    AllToAll(ps, 3);
    EXPECT_EQ(ps.Check(Spec(CHECK_ALLTOALL, 3)), "") << n;
  }
}

TEST(CheckKinds, AcceptsDirectAllToAllV) {
  const std::vector<size_t> counts = {0, 2, 1, 3, 1, 0, 4, 0, 2};  // 3 ranks, some empty
  Plans ps(3);
  AllToAllV(ps, counts);
  EXPECT_EQ(ps.Check(Spec(CHECK_ALLTOALLV, 0, 0, counts.data())), "");
}

TEST(CheckKinds, AcceptsDirectGatherAndScatter) {
  const int n = 4, root = 2;
  const size_t c = 3;
  for (int scatter = 0; scatter < 2; scatter++) {
    std::vector<std::vector<Move>> m(n, std::vector<Move>(n, Move{0, 0, 0}));
    std::vector<size_t> send(n, scatter ? 0 : c), recv(n, scatter ? c : 0);
    (scatter ? send : recv)[root] = n * c;
    for (int q = 0; q < n; q++)
      if (scatter)
        m[root][q] = {q * c, 0, c};
      else
        m[q][root] = {0, q * c, c};
    Plans ps(n);
    Direct(ps, m, send, recv);
    EXPECT_EQ(ps.Check(Spec(scatter ? CHECK_SCATTER : CHECK_GATHER, c, root)), "") << scatter;
  }
}

// ---- Broken plans the checker catches ----

TEST(CheckKinds, CatchesBroadcastReadingSendOffTheRoot) {
  Plans ps(3);
  ASSERT_TRUE(Build(ps, ring_broadcast_build, 4, 2));
  // Rank 1 forwards from the send buffer it does not have.
  for (uint32_t i = 0; i < ps[1].nops; i++)
    if (ps[1].ops[i].kind == OP_SEND) ps[1].ops[i].src.buf = PB_SEND;
  std::string why = ps.Check(Spec(CHECK_BROADCAST, 4));
  EXPECT_TRUE(Has(why,
                  "rank 1 step 1: send reads the send buffer, which only the root (rank 0) "
                  "has in a broadcast"))
      << why;
  // Declared with its full size, it is still off limits.
  ps[1].buf_count[PB_SEND] = 4;
  why = ps.Check(Spec(CHECK_BROADCAST, 4));
  EXPECT_TRUE(Has(why, "send reads the send buffer")) << why;
}

TEST(CheckKinds, CatchesReduceWritingRecvOffTheRoot) {
  Plans ps(3);
  ASSERT_TRUE(Build(ps, ring_reduce_build, 4, 4, /*root=*/2));
  // Rank 1, between, keeps its partial in RECV instead of scratch.
  ps[1].buf_count[PB_RECV] = 4;
  for (uint32_t i = 0; i < ps[1].nops; i++) {
    plan_op& op = ps[1].ops[i];
    if (op.kind == OP_RECV_REDUCE) op.dst = Ref(PB_RECV, 0);
    if (op.kind == OP_SEND) op.src = Ref(PB_RECV, 0);
  }
  std::string why = ps.Check(Spec(CHECK_REDUCE, 4, 2));
  EXPECT_TRUE(Has(why,
                  "rank 1 step 0: recv_reduce writes the receive buffer, which only the root "
                  "(rank 2) has in a reduce"))
      << why;
  // Plans for root 2 are no reduce to rank 1.
  Plans ok(3);
  ASSERT_TRUE(Build(ok, ring_reduce_build, 4, 4, 2));
  EXPECT_NE(ok.Check(Spec(CHECK_REDUCE, 4, 1)), "");
  EXPECT_EQ(ok.Check(Spec(CHECK_REDUCE, 4, 2)), "");
}

TEST(CheckKinds, CatchesGatherAndScatterOffTheRoot) {
  Plans g(2);  // rank 1 keeps a copy of its block in a RECV it does not have
  ASSERT_TRUE(Build(g, ring_allgather_build, 2, 8));
  std::string why = g.Check(Spec(CHECK_GATHER, 2, 0));
  EXPECT_TRUE(Has(why,
                  "rank 1 step 0: copy writes the receive buffer, which only the root "
                  "(rank 0) has in a gather"))
      << why;
  Plans s(2);  // a broadcast's plan, checked as a scatter from rank 1
  ASSERT_TRUE(Build(s, ring_broadcast_build, 2, 8, 1));
  s[0].buf_count[PB_SEND] = 4;
  s[1].buf_count[PB_SEND] = 4;
  why = s.Check(Spec(CHECK_SCATTER, 2, 1));
  EXPECT_TRUE(Has(why, "rank 1: recv[0] ends with rank 1's element 0, not rank 1's element 2"))
      << why;
}

TEST(CheckKinds, CatchesAllGatherBlockInTheWrongPlace) {
  Plans ps(3);
  ASSERT_TRUE(Build(ps, ring_allgather_build, 2, 8));
  // Rank 0 keeps its own block at block 1.
  ps[0].ops[0].dst.off = 2;
  ps[0].ops[1].src.off = 2;
  std::string why = ps.Check(Spec(CHECK_ALLGATHER, 2));
  EXPECT_TRUE(Has(why, "rank 0: recv[0] ends with garbage, not rank 0's element 0")) << why;
  Plans swapped(2);  // each rank stores its block where the other's goes
  for (int r = 0; r < 2; r++) {
    plan& p = swapped[r];
    p.buf_count[PB_SEND] = 3;
    p.buf_count[PB_RECV] = 6;
    plan_add(&p, OP_SEND, 1 - r, Ref(PB_SEND, 0), Ref(PB_SEND, 0), 3);
    plan_add(&p, OP_RECV, 1 - r, Ref(PB_RECV, 3 * r), Ref(PB_RECV, 3 * r), 3);
    plan_add(&p, OP_COPY, -1, Ref(PB_SEND, 0), Ref(PB_RECV, 3 - 3 * r), 3);
  }
  why = swapped.Check(Spec(CHECK_ALLGATHER, 3));
  EXPECT_TRUE(Has(why, "rank 0: recv[0] ends with rank 1's element 0, not rank 0's element 0"))
      << why;
}

TEST(CheckKinds, CatchesReduceScatterEndingWithTheWrongBlock) {
  // The reduce-scatter half of the ring all-reduce leaves rank r block
  // r + 1: a correct all-reduce step, the wrong reduce-scatter.
  Plans ps(3);
  for (int r = 0; r < 3; r++) {
    plan& p = ps[r];
    p.buf_count[PB_SEND] = 6;
    p.buf_count[PB_RECV] = 2;
    p.buf_count[PB_SCRATCH] = 2;
    for (int j = 0; j < 2; j++) {
      int sb = ((r - j) % 3 + 3) % 3, rb = ((r - j - 1) % 3 + 3) % 3;
      plan_step_begin(&p);
      plan_ref from = j == 0 ? Ref(PB_SEND, 2 * sb) : Ref(PB_SCRATCH, 0);
      plan_add(&p, OP_SEND, (r + 1) % 3, from, from, 2);
      plan_add(&p, OP_RECV_REDUCE, (r + 2) % 3, Ref(PB_SEND, 2 * rb),
               j == 0 ? Ref(PB_SCRATCH, 0) : Ref(PB_RECV, 0), 2);
    }
  }
  std::string why = ps.Check(Spec(CHECK_REDUCESCATTER, 2));
  EXPECT_TRUE(Has(why, "rank 0: recv[0] ends with element 2, not 0")) << why;
}

TEST(CheckKinds, CatchesReduceScatterWrongOnlyInPlace) {
  // Each rank receives the other's part of its block into RECV, then adds
  // its own input. In place RECV is that input: the receive overwrote it.
  Plans ps(2);
  for (int r = 0; r < 2; r++) {
    plan& p = ps[r];
    p.buf_count[PB_SEND] = 6;
    p.buf_count[PB_RECV] = 3;
    plan_add(&p, OP_SEND, 1 - r, Ref(PB_SEND, 3 * (1 - r)), Ref(PB_SEND, 0), 3);
    plan_add(&p, OP_RECV, 1 - r, Ref(PB_RECV, 0), Ref(PB_RECV, 0), 3);
    plan_step_begin(&p);
    plan_add(&p, OP_REDUCE, -1, Ref(PB_SEND, 3 * r), Ref(PB_RECV, 0), 3);
  }
  std::string why = ps.Check(Spec(CHECK_REDUCESCATTER, 3));
  EXPECT_TRUE(Has(why, "in-place: rank 1 step 1: contribution of rank 0 counted twice in recv[0]"))
      << why;
}

TEST(CheckKinds, CatchesAllToAllVCountMismatch) {
  const std::vector<size_t> counts = {1, 2, 3, 4};
  Plans ps(2);
  AllToAllV(ps, counts);
  // Checked against other counts: the buffers no longer fit.
  const std::vector<size_t> other = {1, 3, 3, 4};
  std::string why = ps.Check(Spec(CHECK_ALLTOALLV, 0, 0, other.data()));
  EXPECT_TRUE(Has(why, "rank 0: plan has send 3 recv 4 elements, all-to-all-v needs 4 and 4"))
      << why;
  // Rank 0 sends one element fewer than rank 1 receives.
  for (uint32_t i = 0; i < ps[0].nops; i++)
    if (ps[0].ops[i].kind == OP_SEND) ps[0].ops[i].count = 1;
  why = ps.Check(Spec(CHECK_ALLTOALLV, 0, 0, counts.data()));
  EXPECT_TRUE(Has(why, "rank 0 step 0 sends 1 elements to rank 1, whose receive (step 0) takes 2"))
      << why;
  EXPECT_TRUE(Has(Plans(2).Check(Spec(CHECK_ALLTOALLV, 0)), "all-to-all-v needs its counts"));
}

TEST(CheckKinds, CatchesAllToAllInPlaceHazard) {
  // Receiving straight into RECV while sending from SEND is right out of
  // place; in place (SEND == RECV) the receives land on what is being sent.
  Plans ps(2);
  for (int r = 0; r < 2; r++) {
    plan& p = ps[r];
    p.buf_count[PB_SEND] = p.buf_count[PB_RECV] = 4;
    plan_add(&p, OP_SEND, 1 - r, Ref(PB_SEND, 2 * (1 - r)), Ref(PB_SEND, 0), 2);
    plan_add(&p, OP_RECV, 1 - r, Ref(PB_RECV, 2 * (1 - r)), Ref(PB_RECV, 2 * (1 - r)), 2);
    plan_add(&p, OP_COPY, -1, Ref(PB_SEND, 2 * r), Ref(PB_RECV, 2 * r), 2);
  }
  std::string why = ps.Check(Spec(CHECK_ALLTOALL, 2));
  EXPECT_TRUE(
      Has(why, "in-place: rank 0 step 0: recv writes recv[2..4) while send reads send[2..4)"))
      << why;
}

TEST(CheckKinds, FindsHazardsInLargeSteps) {
  // 40 one-element copies in one step: sorted and swept, not compared pairwise.
  Plans ps(1);
  ps[0].buf_count[PB_SEND] = ps[0].buf_count[PB_RECV] = 40;
  for (size_t i = 0; i < 40; i++)
    plan_add(&ps[0], OP_COPY, -1, Ref(PB_SEND, i), Ref(PB_RECV, i), 1);
  EXPECT_EQ(ps.Check(Spec(CHECK_ALLREDUCE, 40)), "");
  ps[0].ops[7].dst.off = 5;
  std::string why = ps.Check(Spec(CHECK_ALLREDUCE, 40));
  EXPECT_TRUE(Has(why, "rank 0 step 0: copy writes recv[5..6) while copy writes recv[5..6)"))
      << why;
  ps[0].ops[7].dst.off = 7;
  ps[0].ops[30].count = 2;     // reads send[30..32) while op 31 reads send[31..32): fine
  ps[0].ops[30].dst.off = 29;  // but writes recv[29..31), over ops 29 and 31's writes
  why = ps.Check(Spec(CHECK_ALLREDUCE, 40));
  EXPECT_TRUE(Has(why, "rank 0 step 0: copy writes recv[29..30) while copy writes recv[29..31)"))
      << why;
}

TEST(CheckKinds, CatchesPremulOutsideReductions) {
  Plans ps(1);
  ps[0].buf_count[PB_SEND] = ps[0].buf_count[PB_RECV] = 3;
  plan_add(&ps[0], OP_PREMUL, -1, Ref(PB_SEND, 0), Ref(PB_RECV, 0), 3);
  std::string why = ps.Check(Spec(CHECK_BROADCAST, 3));
  EXPECT_TRUE(Has(why, "rank 0 step 0: premul in a broadcast plan, which reduces nothing")) << why;
}

TEST(CheckKinds, CatchesBadSpecs) {
  Plans ps(2);
  EXPECT_TRUE(Has(ps.Check(Spec(CHECK_BROADCAST, 0, 2)), "root 2 out of range"));
  EXPECT_TRUE(Has(ps.Check(Spec((check_kind)99, 0)), "unknown collective kind 99"));
  char why[64];
  EXPECT_EQ(plan_check_spec(nullptr, nullptr, why, sizeof(why)), -1);
}

}  // namespace
