// Hierarchical all-reduce (hier.c): proven by the symbolic checker for hosts
// numbered in blocks, interleaved and shuffled, every cross-host family,
// out of place and in place; it crosses the network with less than a flat
// ring, and refuses layouts it cannot serve.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "collectives/plan.h"
#include "topo/tune.h"
}

namespace {

struct Layout {
  std::string name;
  std::vector<int> host_of;
};

// H hosts of L ranks: numbered host by host, round robin, or shuffled.
Layout Blocks(int H, int L) {
  Layout l{"blocks" + std::to_string(H) + "x" + std::to_string(L), {}};
  for (int r = 0; r < H * L; r++) l.host_of.push_back(r / L);
  return l;
}
Layout RoundRobin(int H, int L) {
  Layout l{"roundrobin" + std::to_string(H) + "x" + std::to_string(L), {}};
  for (int r = 0; r < H * L; r++) l.host_of.push_back(r % H);
  return l;
}
// Hosts numbered in order of first appearance, as the communicator does.
Layout Shuffled(int H, int L, unsigned seed) {
  Layout l = Blocks(H, L);
  l.name = "shuffled" + std::to_string(H) + "x" + std::to_string(L);
  std::mt19937 rng(seed);
  std::shuffle(l.host_of.begin(), l.host_of.end(), rng);
  std::vector<int> rename(H, -1);
  int next = 0;
  for (int& h : l.host_of) {
    if (rename[h] < 0) rename[h] = next++;
    h = rename[h];
  }
  return l;
}

std::string Check(const Layout& l, int cross, size_t count, size_t slice, bool premul, bool avg,
                  std::vector<plan>* keep = nullptr) {
  int n = int(l.host_of.size());
  std::vector<plan> p(n);
  std::string err;
  for (int r = 0; r < n; r++) {
    plan_init(&p[r], r, n, "test");
    coll_args a = {};
    a.nranks = n;
    a.rank = r;
    a.count = count;
    a.slice_elems = slice;
    a.premul = premul;
    a.avg = avg;
    a.host_of = l.host_of.data();
    a.cross_algo = cross;
    if (hier_allreduce_build(&a, &p[r]) != loomSuccess && err.empty()) err = "build failed";
  }
  if (err.empty()) {
    char why[512] = "";
    if (plan_check(CHECK_ALLREDUCE, n, count, p.data(), why, sizeof(why)) != 0)
      err = why[0] ? why : "failed";
  }
  if (keep && err.empty())
    keep->swap(p);
  else
    for (auto& q : p) plan_free(&q);
  return err;
}

TEST(HierPlans, ProvedForEveryLayoutFamilyAndVariant) {
  std::vector<Layout> layouts = {
      Blocks(2, 2),     Blocks(2, 3),     Blocks(3, 2),      Blocks(4, 4),      Blocks(8, 2),
      Blocks(2, 8),     Blocks(16, 4),    Blocks(1, 4),      Blocks(4, 1),      RoundRobin(2, 2),
      RoundRobin(3, 4), RoundRobin(5, 3), Shuffled(4, 3, 1), Shuffled(3, 5, 2), Shuffled(6, 2, 3)};
  for (const Layout& l : layouts)
    for (int cross : {int(TUNE_RING), int(TUNE_TREE), int(TUNE_RHD), int(TUNE_DOUBLING)})
      for (size_t count : {size_t(0), size_t(1), size_t(7), l.host_of.size() + 1, size_t(1000)})
        for (size_t slice : {size_t(3), size_t(1) << 20}) {
          double cost = double(l.host_of.size()) * l.host_of.size() * count / slice;
          if (cost > 2e6) continue;
          for (int v = 0; v < 4; v++)
            ASSERT_EQ(Check(l, cross, count, slice, v & 1, v & 2), "")
                << l.name << " cross=" << tune_algo_name(tune_algo(cross)) << " count=" << count
                << " slice=" << slice << " premul=" << (v & 1) << " avg=" << (v >> 1);
        }
}

// Elements that leave each host, summed over its ranks' sends.
std::vector<size_t> SentAcross(const std::vector<plan>& p, const std::vector<int>& host_of, int H) {
  std::vector<size_t> out(H, 0);
  for (const plan& q : p)
    for (uint32_t o = 0; o < q.nops; o++)
      if (q.ops[o].kind == OP_SEND && host_of[q.ops[o].peer] != host_of[q.rank])
        out[host_of[q.rank]] += q.ops[o].count;
  return out;
}

// Two hosts of four: each host sends the buffer once across (2(H-1)/H), a
// flat ring 2(N-1)/N = 1.75 times it; and only a rank's own counterparts on
// the other hosts are its peers there.
TEST(HierPlans, CrossTheNetworkWithLessThanAFlatRing) {
  Layout l = Blocks(2, 4);
  const size_t count = 8000;
  std::vector<plan> hier;
  ASSERT_EQ(Check(l, TUNE_RING, count, 256, false, false, &hier), "");
  std::vector<plan> ring(8);
  for (int r = 0; r < 8; r++) {
    plan_init(&ring[r], r, 8, "ring");
    coll_args a = {};
    a.nranks = 8;
    a.rank = r;
    a.count = count;
    a.slice_elems = 256;
    ASSERT_EQ(ring_allreduce_build(&a, &ring[r]), loomSuccess);
  }
  std::vector<size_t> h = SentAcross(hier, l.host_of, 2), f = SentAcross(ring, l.host_of, 2);
  for (int host = 0; host < 2; host++) {
    EXPECT_EQ(h[host], count) << host;
    EXPECT_EQ(f[host], count * 2 * 7 / 8) << host;
  }
  for (const plan& q : hier)
    for (uint32_t o = 0; o < q.nops; o++) {
      if (q.ops[o].peer >= 0 && l.host_of[q.ops[o].peer] != l.host_of[q.rank]) {
        EXPECT_EQ(q.ops[o].peer % 4, q.rank % 4)
            << "rank " << q.rank << " crosses to " << q.ops[o].peer;
      }
    }
  for (auto& q : hier) plan_free(&q);
  for (auto& q : ring) plan_free(&q);
}

TEST(HierPlans, RefuseUnevenLayoutsAndMissingHostMaps) {
  std::vector<int> uneven = {0, 0, 0, 1};
  plan p;
  plan_init(&p, 0, 4, "test");
  coll_args a = {};
  a.nranks = 4;
  a.rank = 3;
  a.count = 10;
  a.slice_elems = 4;
  a.host_of = uneven.data();
  EXPECT_EQ(hier_allreduce_build(&a, &p), loomInvalidArgument);
  a.rank = 0;
  EXPECT_EQ(hier_allreduce_build(&a, &p), loomInvalidArgument);
  a.host_of = nullptr;
  EXPECT_EQ(hier_allreduce_build(&a, &p), loomInvalidArgument);
  plan_free(&p);
}

}  // namespace
