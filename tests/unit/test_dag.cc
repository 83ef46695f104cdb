// test_dag.cc - a call's plans as a graph of steps (collectives/dag.c), the
// schedule of the queued (CUDA) executor: for every family without peer or
// lines ops, at 1 to 12 ranks, (1) ranks that queue a step only once the
// steps it waits for are queued never stick, and (2) running the steps in
// random orders the graph allows, each receive reading the sender's buffer
// at that moment (what the device does), gives the collective's result.
#include <gtest/gtest.h>

#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "collectives/dag.h"
#include "collectives/plan.h"
}

namespace {

using Builder = loomResult_t (*)(const coll_args*, plan*);
enum Kind {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kAllToAll,
  kGather,
  kScatter
};

struct Family {
  const char* name;
  Builder build;
  Kind kind;
};
const Family kFamilies[] = {
    {"ring_allreduce", ring_allreduce_build, kAllReduce},
    {"ring_reducescatter", ring_reducescatter_build, kReduceScatter},
    {"ring_allgather", ring_allgather_build, kAllGather},
    {"ring_broadcast", ring_broadcast_build, kBroadcast},
    {"ring_reduce", ring_reduce_build, kReduce},
    {"tree_allreduce", tree_allreduce_build, kAllReduce},
    {"tree_broadcast", tree_broadcast_build, kBroadcast},
    {"tree_reduce", tree_reduce_build, kReduce},
    {"rhd_allreduce", rhd_allreduce_build, kAllReduce},
    {"rhd_reducescatter", rhd_reducescatter_build, kReduceScatter},
    {"rhd_allgather", rhd_allgather_build, kAllGather},
    {"doubling_allreduce", doubling_allreduce_build, kAllReduce},
    {"ordered_allreduce", ordered_allreduce_build, kAllReduce},
    {"ordered_reducescatter", ordered_reducescatter_build, kReduceScatter},
    {"ordered_reduce", ordered_reduce_build, kReduce},
    {"pairwise_alltoall", pairwise_alltoall_build, kAllToAll},
    {"bruck_alltoall", bruck_alltoall_build, kAllToAll},
    {"direct_gather", direct_gather_build, kGather},
    {"direct_scatter", direct_scatter_build, kScatter},
};

void PrintTo(const Family& f, std::ostream* os) {
  *os << f.name;
}

bool rooted(Kind k) {
  return k == kBroadcast || k == kReduce || k == kGather || k == kScatter;
}

// The plans of one call and their graph, freed on scope exit.
struct Call {
  std::vector<plan> plans;
  std::vector<dag_rank> dag;
  bool built = false;
  Call(int n) : plans(n), dag(n) {
    for (int r = 0; r < n; r++) plan_init(&plans[r], r, n, "test");
  }
  ~Call() {
    if (built) dag_free(dag.data(), (int)dag.size());
    for (auto& p : plans) plan_free(&p);
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;
};

bool build(Call& c, const Family& f, size_t count, size_t slice, int root, bool avg) {
  const int n = (int)c.plans.size();
  for (int r = 0; r < n; r++) {
    coll_args a{};
    a.nranks = n, a.rank = r, a.count = count, a.slice_elems = slice, a.root = root;
    a.avg = avg ? 1 : 0;
    a.distinct = 1;
    if (f.build(&a, &c.plans[r]) != loomSuccess) return false;
  }
  c.built = dag_build(c.plans.data(), n, c.dag.data()) == loomSuccess;
  return c.built;
}

bool ready(const dag_rank& d, uint32_t k, const std::vector<uint32_t>& progress) {
  for (uint32_t w = d.wait_begin[k]; w < d.wait_begin[k + 1]; w++)
    if (progress[d.waits[w].peer] < d.waits[w].after) return false;
  return true;
}

// (1): ranks queue in turn, each as far as its waits allow. Empty string, or
// where it stuck.
std::string queue_order(const Call& c) {
  const int n = (int)c.dag.size();
  std::vector<uint32_t> queued(n, 0);  // steps queued (the end counts as step nsteps)
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < n; r++)
      while (queued[r] <= c.dag[r].nsteps && ready(c.dag[r], queued[r], queued))
        queued[r]++, moved = true;
  }
  for (int r = 0; r < n; r++)
    if (queued[r] <= c.dag[r].nsteps)
      return "rank " + std::to_string(r) + " stuck before step " + std::to_string(queued[r]) +
             " of " + std::to_string(c.dag[r].nsteps);
  return "";
}

using Bufs = std::vector<std::vector<double>>;  // [PB_SEND, PB_RECV, PB_SCRATCH]

// (2): runs every rank's steps in a random order the graph allows; a step
// runs whole. Returns false if it sticks.
bool run_random(const Call& c, std::vector<Bufs>& mem, unsigned seed) {
  const int n = (int)c.dag.size();
  std::mt19937 rng(seed);
  std::vector<uint32_t> done(n, 0);
  for (;;) {
    std::vector<int> can;
    for (int r = 0; r < n; r++)
      if (done[r] < c.dag[r].nsteps && ready(c.dag[r], done[r], done)) can.push_back(r);
    if (can.empty()) break;
    int r = can[rng() % can.size()];
    const plan& p = c.plans[r];
    const plan_step& st = p.steps[done[r]];
    for (uint32_t i = st.op_begin; i < st.op_end; i++) {
      const plan_op& o = p.ops[i];
      double* dst = mem[r][o.dst.buf].data() + o.dst.off;
      const double* src = mem[r][o.src.buf].data() + o.src.off;
      const double* peer = nullptr;
      if (o.kind == OP_RECV || o.kind == OP_RECV_REDUCE) {
        const dag_read& rd = c.dag[r].read[i];
        peer = mem[rd.peer][rd.src.buf].data() + rd.src.off;
      }
      for (size_t j = 0; j < o.count; j++) switch (o.kind) {
          case OP_SEND:
            break;  // the receiver reads
          case OP_RECV:
            dst[j] = peer[j];
            break;
          case OP_RECV_REDUCE:
            dst[j] = src[j] + peer[j];
            break;
          case OP_COPY:
            dst[j] = src[j];
            break;
          case OP_REDUCE:
            dst[j] += src[j];
            break;
          case OP_DIV:
            dst[j] = src[j] / n;
            break;
          default:
            ADD_FAILURE() << "op " << plan_op_name(o.kind);
            return false;
        }
    }
    done[r]++;
  }
  for (int r = 0; r < n; r++)
    if (done[r] < c.dag[r].nsteps || !ready(c.dag[r], c.dag[r].nsteps, done)) return false;
  return true;
}

double input(int rank, size_t i) {
  return rank * 100003.0 + (double)i + 1;
}

// Fresh buffers: the inputs in SEND, NaN elsewhere (a read of what nothing
// wrote shows).
std::vector<Bufs> fresh(const Call& c, Kind k, size_t count) {
  const int n = (int)c.plans.size();
  size_t nc = count * (size_t)n;
  size_t send = k == kReduceScatter || k == kAllToAll || k == kScatter ? nc : count;
  size_t recv = k == kAllGather || k == kAllToAll || k == kGather ? nc : count;
  std::vector<Bufs> mem(n);
  for (int r = 0; r < n; r++) {
    mem[r].assign(PB_COUNT, {});
    mem[r][PB_SEND].resize(std::max(send, c.plans[r].buf_count[PB_SEND]));
    for (size_t i = 0; i < send; i++) mem[r][PB_SEND][i] = input(r, i);
    mem[r][PB_RECV].assign(std::max(recv, c.plans[r].buf_count[PB_RECV]), NAN);
    mem[r][PB_SCRATCH].assign(c.plans[r].buf_count[PB_SCRATCH] + 1, NAN);
  }
  return mem;
}

// Empty string when every rank holds the collective's result.
std::string verify(Kind k, const std::vector<Bufs>& mem, size_t c, int root, bool avg) {
  const int n = (int)mem.size();
  auto sum = [&](size_t i) {
    double s = 0;
    for (int q = 0; q < n; q++) s += input(q, i);
    return avg ? s / n : s;
  };
  for (int r = 0; r < n; r++) {
    const std::vector<double>& recv = mem[r][PB_RECV];
    std::function<double(size_t)> want;
    size_t len = c;
    switch (k) {
      case kAllReduce:
        want = sum;
        break;
      case kReduceScatter:
        want = [&](size_t i) { return sum((size_t)r * c + i); };
        break;
      case kAllGather:
        want = [&](size_t i) { return input((int)(i / c), i % c); }, len = n * c;
        break;
      case kBroadcast:
        want = [&](size_t i) { return input(root, i); };
        break;
      case kReduce:
        if (r != root) continue;
        want = sum;
        break;
      case kAllToAll:
        want = [&](size_t i) { return input((int)(i / c), (size_t)r * c + i % c); }, len = n * c;
        break;
      case kGather:
        if (r != root) continue;
        want = [&](size_t i) { return input((int)(i / c), i % c); }, len = n * c;
        break;
      case kScatter:
        want = [&](size_t i) { return input(root, (size_t)r * c + i); };
        break;
    }
    for (size_t i = 0; i < len; i++)
      if (!(recv[i] == want(i)))
        return "rank " + std::to_string(r) + " element " + std::to_string(i) + " is " +
               std::to_string(recv[i]) + ", want " + std::to_string(want(i));
  }
  return "";
}

class Dag : public ::testing::TestWithParam<Family> {};

TEST_P(Dag, QueuesWithoutStickingAndReadsInAnyAllowedOrderGiveTheResult) {
  const Family& f = GetParam();
  for (int n = 1; n <= 12; n++)
    for (size_t count : {1, 5, 64, 257})
      for (size_t slice : {3, 1 << 20})
        for (int root : {0, n - 1}) {
          if (root != 0 && !rooted(f.kind)) continue;
          for (bool avg : {false, true}) {
            if (avg && f.kind != kAllReduce) continue;
            std::string what = std::string(f.name) + " n=" + std::to_string(n) +
                               " count=" + std::to_string(count) +
                               " slice=" + std::to_string(slice) + " root=" + std::to_string(root) +
                               (avg ? " avg" : "");
            Call c(n);
            ASSERT_TRUE(build(c, f, count, slice, root, avg)) << what;
            ASSERT_EQ(queue_order(c), "") << what;
            for (unsigned seed = 1; seed <= 3; seed++) {
              std::vector<Bufs> mem = fresh(c, f.kind, count);
              ASSERT_TRUE(run_random(c, mem, seed * 7919u + n)) << what << ": stuck";
              ASSERT_EQ(verify(f.kind, mem, count, root, avg), "") << what << " seed " << seed;
            }
          }
        }
}

INSTANTIATE_TEST_SUITE_P(Families, Dag, ::testing::ValuesIn(kFamilies),
                         [](const auto& p) { return std::string(p.param.name); });

// The waits are what makes the reads right: without them some order the
// graph would then allow reads data too early or too late.
TEST(DagWaits, WithoutThemSomeOrderGivesAWrongResult) {
  int wrong = 0;
  for (unsigned seed = 1; seed <= 40 && !wrong; seed++) {
    Call c(4);
    ASSERT_TRUE(build(c, kFamilies[0], 64, 3, 0, false));
    for (auto& d : c.dag)
      for (uint32_t k = 0; k <= d.nsteps + 1; k++) d.wait_begin[k] = 0;
    std::vector<Bufs> mem = fresh(c, kAllReduce, 64);
    run_random(c, mem, seed);
    wrong += verify(kAllReduce, mem, 64, 0, false) != "";
  }
  EXPECT_GT(wrong, 0);
}

TEST(DagRefuses, PlansWithPeerOrLinesOps) {
  const int n = 3;
  Call c(n);
  for (int r = 0; r < n; r++) {
    coll_args a{};
    a.nranks = n, a.rank = r, a.count = 16, a.slice_elems = 1 << 20;
    ASSERT_EQ(oneshot_allreduce_build(&a, &c.plans[r]), loomSuccess);
  }
  EXPECT_EQ(dag_build(c.plans.data(), n, c.dag.data()), loomInvalidUsage);
}

TEST(DagRefuses, SendsWithoutReceives) {
  Call c(2);
  plan_step_begin(&c.plans[0]);
  plan_add(&c.plans[0], OP_SEND, 1, plan_ref_make(PB_SEND, 0), plan_ref_make(PB_SEND, 0), 4);
  ASSERT_EQ(plan_finish(&c.plans[0]), loomSuccess);
  ASSERT_EQ(plan_finish(&c.plans[1]), loomSuccess);
  EXPECT_EQ(dag_build(c.plans.data(), 2, c.dag.data()), loomInvalidUsage);
}

}  // namespace
