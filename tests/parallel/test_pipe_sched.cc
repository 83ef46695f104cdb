// Section 6 of PARALLEL.md, the schedule half: the six generated kinds against the contract's
// makespans, bubble ratios and peaks under the binding simulator, over a grid of p and m; every
// generated list fed back through loomPipeScheduleFromActions; a literal Format; user schedules
// breaking each validity rule (and one that deadlocks) refused naming rank and action; and the
// argument errors. All local: no ranks.
#include <algorithm>
#include <string>
#include <vector>

#include "par_test.h"

namespace {

using Acts = std::vector<std::vector<loomPipeAction>>;

// A schedule that destroys itself.
struct Sched {
  loomPipeSchedule_t s = nullptr;
  ~Sched() {
    if (s != nullptr) loomPipeScheduleDestroy(s);
  }
};

Acts lists_of(loomPipeSchedule_t s, int p) {
  Acts out(p);
  for (int r = 0; r < p; r++) {
    const loomPipeAction* a = nullptr;
    int n = 0;
    EXPECT_EQ(loomPipeScheduleGetActions(s, r, &a, &n), loomSuccess);
    out[r].assign(a, a + n);
  }
  return out;
}

std::string format(loomPipeSchedule_t s, int r) {
  size_t len = 0;
  EXPECT_EQ(loomPipeScheduleFormat(s, r, nullptr, 0, &len), loomSuccess);
  std::string buf(len + 1, '\0');
  EXPECT_EQ(loomPipeScheduleFormat(s, r, &buf[0], buf.size(), &len), loomSuccess);
  buf.resize(len);
  return buf;
}

struct Sim {
  loomPipeStats st{};
  std::vector<double> idle;
  std::vector<int> peak;
};

Sim simulate(loomPipeSchedule_t s, int p, loomPipeCosts c) {
  Sim o;
  o.idle.assign(p, -1);
  o.peak.assign(p, -1);
  EXPECT_EQ(loomPipeSimulate(s, &c, &o.st, o.idle.data(), o.peak.data()), loomSuccess)
      << loomGetLastError(nullptr);
  return o;
}

// Feeds a generated schedule's lists (peers cleared) back as a user schedule: it must pass and
// come back with the same lists and peers.
void check_roundtrip(loomPipeSchedule_t s, int p, int S, int m) {
  std::vector<int> stage_rank(S);
  for (int k = 0; k < S; k++)
    ASSERT_EQ(loomPipeScheduleStageRank(s, k, &stage_rank[k]), loomSuccess);
  Acts acts = lists_of(s, p), blank = acts;
  for (auto& l : blank)
    for (auto& a : l) a.peer = 99;
  std::vector<const loomPipeAction*> ptr(p);
  std::vector<int> n(p);
  for (int r = 0; r < p; r++) ptr[r] = blank[r].data(), n[r] = (int)blank[r].size();
  Sched u;
  ASSERT_EQ(loomPipeScheduleFromActions(p, S, stage_rank.data(), m, ptr.data(), n.data(), &u.s),
            loomSuccess)
      << loomGetLastError(nullptr);
  Acts back = lists_of(u.s, p);
  for (int r = 0; r < p; r++) {
    ASSERT_EQ(back[r].size(), acts[r].size());
    for (size_t k = 0; k < acts[r].size(); k++) {
      EXPECT_EQ(back[r][k].op, acts[r][k].op);
      EXPECT_EQ(back[r][k].peer, acts[r][k].peer) << "rank " << r << " action " << k;
    }
  }
}

// The generated-list rules common to every kind: a receive right before its F/B, SendF right
// after its F, SendB right after W or B, peers as the placement says, per-stage order.
void check_shape(loomPipeSchedule_t s, int p, int S, int m, bool sendb_after_b) {
  Acts acts = lists_of(s, p);
  std::vector<int> rank_of(S);
  for (int k = 0; k < S; k++) loomPipeScheduleStageRank(s, k, &rank_of[k]);
  for (int r = 0; r < p; r++) {
    const auto& l = acts[r];
    std::vector<std::vector<int>> next(3, std::vector<int>(S, 0));
    for (size_t k = 0; k < l.size(); k++) {
      const auto& a = l[k];
      ASSERT_EQ(rank_of[a.stage], r);
      if (a.op <= loomPipeW) {
        EXPECT_EQ(a.peer, -1);
        EXPECT_EQ(a.microbatch, next[a.op][a.stage]++) << "rank " << r << " action " << k;
        continue;
      }
      int nb = (a.op == loomPipeSendF || a.op == loomPipeRecvB) ? a.stage + 1 : a.stage - 1;
      EXPECT_EQ(a.peer, rank_of[nb]);
      EXPECT_NE(a.peer, r);
      size_t j = (a.op == loomPipeRecvF || a.op == loomPipeRecvB) ? k + 1 : k - 1;
      ASSERT_LT(j, l.size());
      loomPipeOp_t want = a.op == loomPipeRecvF || a.op == loomPipeSendF ? loomPipeF
                          : a.op == loomPipeRecvB || sendb_after_b       ? loomPipeB
                                                                         : loomPipeW;
      EXPECT_EQ(l[j].op, want) << "rank " << r << " action " << k;
      EXPECT_EQ(l[j].stage, a.stage);
      EXPECT_EQ(l[j].microbatch, a.microbatch);
    }
  }
}

struct Made {
  Sched s;
  int p, S, m;
};

void make(Made& g, loomPipeKind_t kind, int p, int m, int v) {
  g.p = p, g.S = p * v, g.m = m;
  ASSERT_EQ(loomPipeScheduleCreate(kind, p, m, v, &g.s.s), loomSuccess)
      << loomGetLastError(nullptr);
  check_shape(g.s.s, p, g.S, m, kind >= loomPipeZBH1);
  check_roundtrip(g.s.s, p, g.S, m);
}

const loomPipeCosts kCosts[] = {{1, 1, 1, 0}, {1, 2, 1, 0}, {2, 3, 0.5, 0}, {0.25, 4, 2, 0}};

TEST(PipeSched, AfabAnd1f1bMakespanBubblePeaks) {
  for (int kind : {loomPipeAFAB, loomPipe1F1B})
    for (int p = 1; p <= 8; p++)
      for (int m : {1, 2, 3, p, 2 * p + 1, 9, 4 * p}) {
        Made g;
        make(g, (loomPipeKind_t)kind, p, m, 1);
        for (const auto& c : kCosts) {
          Sim o = simulate(g.s.s, p, c);
          SCOPED_TRACE("kind " + std::to_string(kind) + " p " + std::to_string(p) + " m " +
                       std::to_string(m));
          EXPECT_DOUBLE_EQ(o.st.makespan, (m + p - 1) * (c.f + c.b + c.w));
          EXPECT_DOUBLE_EQ(o.st.bubbleRatio, double(p - 1) / (m + p - 1));
          for (int r = 0; r < p; r++) {
            EXPECT_DOUBLE_EQ(o.idle[r], (p - 1) * (c.f + c.b + c.w));
            EXPECT_EQ(o.peak[r], kind == loomPipeAFAB ? m : std::min(p - r, m)) << "rank " << r;
          }
        }
      }
}

TEST(PipeSched, InterleavedMakespanPeaks) {
  for (int p = 1; p <= 8; p++)
    for (int v : {2, 3})
      for (int m : {p, 2 * p, 3 * p, 4 * p}) {
        Made g;
        make(g, loomPipeInterleaved1F1B, p, m, v);
        Sim o = simulate(g.s.s, p, {1, 1, 1, 0});
        SCOPED_TRACE("p " + std::to_string(p) + " v " + std::to_string(v) + " m " +
                     std::to_string(m));
        EXPECT_DOUBLE_EQ(o.st.makespan, 3.0 * (v * m + p - 1));
        for (int r = 0; r < p; r++)
          EXPECT_EQ(o.peak[r], std::min(2 * (p - r - 1) + (v - 1) * p + 1, v * m)) << "rank " << r;
      }
}

TEST(PipeSched, Zbh1MakespanPeaks) {
  for (int p = 1; p <= 8; p++)
    for (int m = 1; m <= 4 * p; m++) {
      Made g;
      make(g, loomPipeZBH1, p, m, 1);
      Sim o = simulate(g.s.s, p, {1, 1, 1, 0});
      if (m < p) continue;  // valid (checked above), no figure promised
      SCOPED_TRACE("p " + std::to_string(p) + " m " + std::to_string(m));
      EXPECT_DOUBLE_EQ(o.st.makespan, 3.0 * m + p - 1);
      for (int r = 0; r < p; r++) EXPECT_EQ(o.peak[r], std::min(p - r, m)) << "rank " << r;
    }
}

TEST(PipeSched, ZbvMakespanPeaks) {
  for (int p = 1; p <= 8; p++)
    for (int m = 1; m <= 4 * p; m++) {
      Made g;
      make(g, loomPipeZBV, p, m, 2);
      Sim o = simulate(g.s.s, p, {1, 1, 1, 0});
      SCOPED_TRACE("p " + std::to_string(p) + " m " + std::to_string(m));
      for (int r = 0; r < p; r++) EXPECT_LE(o.peak[r], 2 * p) << "rank " << r;
      if (m >= 2 * p) {
        EXPECT_DOUBLE_EQ(o.st.makespan, 6.0 * m + p - 1);
      }
    }
}

TEST(PipeSched, DualPipeVMakespanPeaks) {
  for (int p = 1; p <= 8; p++)
    for (int m = 2 * p; m <= 4 * p; m++) {
      Made g;
      make(g, loomPipeDualPipeV, p, m, 2);
      Sim o = simulate(g.s.s, p, {1, 1, 1, 0});
      SCOPED_TRACE("p " + std::to_string(p) + " m " + std::to_string(m));
      EXPECT_DOUBLE_EQ(o.st.makespan, 6.0 * m + p - 1);
      for (int r = 0; r < p; r++) EXPECT_EQ(o.peak[r], 2 * p + 1) << "rank " << r;
    }
}

TEST(PipeSched, PlacementAndComm) {
  Made g;
  make(g, loomPipeZBV, 3, 6, 2);
  const int want[6] = {0, 1, 2, 2, 1, 0};
  for (int k = 0; k < 6; k++) {
    int r = -1;
    EXPECT_EQ(loomPipeScheduleStageRank(g.s.s, k, &r), loomSuccess);
    EXPECT_EQ(r, want[k]);
  }
  Made h;
  make(h, loomPipeInterleaved1F1B, 2, 4, 3);
  for (int k = 0; k < 6; k++) {
    int r = -1;
    EXPECT_EQ(loomPipeScheduleStageRank(h.s.s, k, &r), loomSuccess);
    EXPECT_EQ(r, k % 2);
  }
  // A communication cost delays every hand-over: 1F1B on 2 ranks, 1 microbatch.
  Made o1;
  make(o1, loomPipe1F1B, 2, 1, 1);
  Sim o = simulate(o1.s.s, 2, {1, 1, 1, 0.5});
  EXPECT_DOUBLE_EQ(o.st.makespan, 7.0);  // F 1, comm, F B W 3, comm, B W 2
}

TEST(PipeSched, FormatLiteral) {
  Made g;
  make(g, loomPipe1F1B, 2, 2, 1);
  EXPECT_EQ(format(g.s.s, 0), "F0.0 SF0.0 F0.1 SF0.1 RB0.0 B0.0 W0.0 RB0.1 B0.1 W0.1");
  EXPECT_EQ(format(g.s.s, 1), "RF1.0 F1.0 B1.0 W1.0 SB1.0 RF1.1 F1.1 B1.1 W1.1 SB1.1");
  Made z;
  make(z, loomPipeZBH1, 2, 2, 1);
  EXPECT_EQ(format(z.s.s, 1), "RF1.0 F1.0 B1.0 SB1.0 RF1.1 F1.1 B1.1 SB1.1 W1.0 W1.1");
  // Truncated like snprintf: the full length, a NUL at size-1.
  char buf[8];
  size_t len = 0;
  ASSERT_EQ(loomPipeScheduleFormat(g.s.s, 0, buf, sizeof buf, &len), loomSuccess);
  EXPECT_EQ(len, 53u);
  EXPECT_STREQ(buf, "F0.0 SF");
}

// ---- User schedules ----------------------------------------------------------------------

loomPipeAction act(loomPipeOp_t op, int s, int i) {
  return loomPipeAction{op, s, i, -1};
}

// 1F1B on 2 ranks, 2 microbatches, written out (FormatLiteral's lists).
Acts base_1f1b() {
  using A = loomPipeAction;
  auto F = [](int s, int i) -> A { return act(loomPipeF, s, i); };
  auto B = [](int s, int i) -> A { return act(loomPipeB, s, i); };
  auto W = [](int s, int i) -> A { return act(loomPipeW, s, i); };
  auto SF = [](int s, int i) -> A { return act(loomPipeSendF, s, i); };
  auto RF = [](int s, int i) -> A { return act(loomPipeRecvF, s, i); };
  auto SB = [](int s, int i) -> A { return act(loomPipeSendB, s, i); };
  auto RB = [](int s, int i) -> A { return act(loomPipeRecvB, s, i); };
  return {{F(0, 0), SF(0, 0), F(0, 1), SF(0, 1), RB(0, 0), B(0, 0), W(0, 0), RB(0, 1), B(0, 1),
           W(0, 1)},
          {RF(1, 0), F(1, 0), B(1, 0), W(1, 0), SB(1, 0), RF(1, 1), F(1, 1), B(1, 1), W(1, 1),
           SB(1, 1)}};
}

loomResult_t from(const Acts& acts, const std::vector<int>& stage_rank, int m, Sched& out) {
  int p = (int)acts.size();
  std::vector<const loomPipeAction*> ptr(p);
  std::vector<int> n(p);
  for (int r = 0; r < p; r++) ptr[r] = acts[r].data(), n[r] = (int)acts[r].size();
  return loomPipeScheduleFromActions(p, (int)stage_rank.size(), stage_rank.data(), m, ptr.data(),
                                     n.data(), &out.s);
}

// The user schedule is refused, the message naming the rank, the action and the rule.
void expect_refused(const Acts& acts, const std::vector<int>& stage_rank, int m, const char* rank,
                    const char* action, const char* rule) {
  Sched out;
  std::vector<unsigned char> untouched(sizeof(out.s), 0);
  EXPECT_MISUSE(from(acts, stage_rank, m, out), nullptr, "loomPipeScheduleFromActions", untouched,
                rank, action, rule);
  EXPECT_EQ(out.s, nullptr);
}

TEST(PipeSchedRules, BaseIsAccepted) {
  Sched s;
  ASSERT_EQ(from(base_1f1b(), {0, 1}, 2, s), loomSuccess) << loomGetLastError(nullptr);
  EXPECT_EQ(format(s.s, 1), "RF1.0 F1.0 B1.0 W1.0 SB1.0 RF1.1 F1.1 B1.1 W1.1 SB1.1");
  EXPECT_EQ(lists_of(s.s, 2)[0][1].peer, 1);  // peers recomputed
}

TEST(PipeSchedRules, EachRuleRefused) {
  Acts a = base_1f1b();
  a[0].push_back(act(loomPipeF, 0, 0));
  expect_refused(a, {0, 1}, 2, "rank 0", "action 10", "a second F0.0");
  a = base_1f1b();
  a[0].pop_back();
  expect_refused(a, {0, 1}, 2, "rank 0", "action 9", "no W0.1");
  a = base_1f1b();
  std::swap(a[1][1], a[1][2]);  // B1.0 before F1.0
  expect_refused(a, {0, 1}, 2, "rank 1", "action 1", "B1.0 must come after F1.0");
  a = base_1f1b();
  std::swap(a[1][2], a[1][3]);  // W1.0 before B1.0
  expect_refused(a, {0, 1}, 2, "rank 1", "action 2", "W1.0 must come after B1.0");
  a = base_1f1b();
  std::swap(a[1][0], a[1][1]);  // F1.0 before its RecvF
  expect_refused(a, {0, 1}, 2, "rank 1", "action 0", "F1.0 must come after RF1.0");
  a = base_1f1b();
  std::swap(a[0][4], a[0][5]);  // B0.0 before its RecvB
  expect_refused(a, {0, 1}, 2, "rank 0", "action 4", "B0.0 must come after RB0.0");
  a = base_1f1b();
  std::swap(a[0][0], a[0][1]);  // SF0.0 before F0.0
  expect_refused(a, {0, 1}, 2, "rank 0", "action 0", "SF0.0 must come after F0.0");
  a = base_1f1b();
  a[1].erase(a[1].begin() + 5);  // RF1.1 gone: SF0.1 has no receive
  expect_refused(a, {0, 1}, 2, "rank 0", "action 3", "no matching RF1.1");
  a = base_1f1b();
  a[1].erase(a[1].begin() + 4);  // SB1.0 gone: RB0.0 has no send
  expect_refused(a, {0, 1}, 2, "rank 0", "action 4", "no matching SB1.0");
  a = base_1f1b();
  a[1].insert(a[1].begin(), act(loomPipeF, 0, 0));  // stage 0 is rank 0's
  expect_refused(a, {0, 1}, 2, "rank 1", "action 0", "stage 0 is on rank 0");
  a = base_1f1b();
  a[0][2].microbatch = 5;
  expect_refused(a, {0, 1}, 2, "rank 0", "action 2", "microbatch 5");
  a = base_1f1b();
  a[0][3].op = (loomPipeOp_t)9;
  expect_refused(a, {0, 1}, 2, "rank 0", "action 3", "op 9");
  a = base_1f1b();
  a[1].push_back(act(loomPipeSendF, 1, 0));  // the last stage has no next stage
  expect_refused(a, {0, 1}, 2, "rank 1", "action 10", "no neighbour stage 2");
}

TEST(PipeSchedRules, NoSendsOnOneRank) {
  Acts a = {{act(loomPipeF, 0, 0), act(loomPipeSendF, 0, 0), act(loomPipeRecvF, 1, 0),
             act(loomPipeF, 1, 0), act(loomPipeB, 1, 0), act(loomPipeW, 1, 0), act(loomPipeB, 0, 0),
             act(loomPipeW, 0, 0)}};
  expect_refused(a, {0, 0}, 1, "rank 0", "action 1", "both on rank 0");
  a[0].erase(a[0].begin() + 1, a[0].begin() + 3);  // without them it is valid
  Sched s;
  EXPECT_EQ(from(a, {0, 0}, 1, s), loomSuccess) << loomGetLastError(nullptr);
  a = {{act(loomPipeF, 1, 0), act(loomPipeF, 0, 0), act(loomPipeB, 1, 0), act(loomPipeW, 1, 0),
        act(loomPipeB, 0, 0), act(loomPipeW, 0, 0)}};
  expect_refused(a, {0, 0}, 1, "rank 0", "action 0", "F1.0 must come after F0.0");
  a = {{act(loomPipeF, 0, 0), act(loomPipeF, 1, 0), act(loomPipeB, 0, 0), act(loomPipeB, 1, 0),
        act(loomPipeW, 1, 0), act(loomPipeW, 0, 0)}};
  expect_refused(a, {0, 0}, 1, "rank 0", "action 2", "B0.0 must come after B1.0");
}

TEST(PipeSchedRules, ChannelOrderAndDeadlock) {
  // AFAB's lists with rank 1 receiving microbatch 1 before 0: orders differ.
  Sched g;
  ASSERT_EQ(loomPipeScheduleCreate(loomPipeAFAB, 2, 2, 1, &g.s), loomSuccess);
  Acts a = lists_of(g.s, 2);
  ASSERT_EQ(format(g.s, 1), "RF1.0 F1.0 RF1.1 F1.1 B1.0 W1.0 SB1.0 B1.1 W1.1 SB1.1");
  Acts b = a;
  b[1] = {act(loomPipeRecvF, 1, 1), act(loomPipeRecvF, 1, 0)};
  for (size_t k : {1, 3, 4, 5, 6, 7, 8, 9}) b[1].push_back(a[1][k]);
  expect_refused(b, {0, 1}, 2, "rank 0", "action 1", "different orders");
  // Rank 0 waits for B0.0's gradient before sending microbatch 1, which rank 1 needs first.
  b = a;
  b[0] = {act(loomPipeF, 0, 0),     act(loomPipeSendF, 0, 0), act(loomPipeRecvB, 0, 0),
          act(loomPipeB, 0, 0),     act(loomPipeW, 0, 0),     act(loomPipeF, 0, 1),
          act(loomPipeSendF, 0, 1), act(loomPipeRecvB, 0, 1), act(loomPipeB, 0, 1),
          act(loomPipeW, 0, 1)};
  expect_refused(b, {0, 1}, 2, "rank 0", "action 2", "deadlock");
}

// ---- Argument errors ---------------------------------------------------------------------

TEST(PipeSchedArgs, Create) {
  loomPipeSchedule_t s = nullptr;
  std::vector<unsigned char> none;
  auto bad = [&](int kind, int p, int m, int v, const char* what) {
    EXPECT_MISUSE(loomPipeScheduleCreate((loomPipeKind_t)kind, p, m, v, &s), nullptr,
                  "loomPipeScheduleCreate", none, what);
    EXPECT_EQ(s, nullptr);
  };
  bad(6, 2, 2, 1, "kind is 6");
  bad(-1, 2, 2, 1, "kind is -1");
  bad(loomPipe1F1B, 0, 2, 1, "numRanks is 0");
  bad(loomPipe1F1B, 2, 0, 1, "numMicrobatches is 0");
  bad(loomPipeAFAB, 2, 2, 2, "numChunks is 2");
  bad(loomPipeZBH1, 2, 2, 0, "numChunks is 0");
  bad(loomPipeInterleaved1F1B, 2, 4, 1, "numChunks is 1");
  bad(loomPipeInterleaved1F1B, 2, 3, 2, "not a multiple");
  bad(loomPipeZBV, 2, 4, 3, "numChunks is 3");
  bad(loomPipeDualPipeV, 2, 4, 1, "numChunks is 1");
  bad(loomPipeDualPipeV, 3, 5, 2, "numMicrobatches 5");
  EXPECT_MISUSE(loomPipeScheduleCreate(loomPipe1F1B, 2, 2, 1, nullptr), nullptr,
                "loomPipeScheduleCreate", none, "sched is NULL");
  for (int m : {1, 2, 3}) {  // ZB-V takes any m
    Sched z;
    EXPECT_EQ(loomPipeScheduleCreate(loomPipeZBV, 3, m, 2, &z.s), loomSuccess);
  }
}

TEST(PipeSchedArgs, FromActions) {
  Acts a = base_1f1b();
  const loomPipeAction* ptr[2] = {a[0].data(), a[1].data()};
  int n[2] = {10, 10}, sr[2] = {0, 1}, bad_sr[2] = {0, 2}, neg[2] = {10, -1};
  loomPipeSchedule_t s = nullptr;
  std::vector<unsigned char> none;
  const char* fn = "loomPipeScheduleFromActions";
  EXPECT_MISUSE(loomPipeScheduleFromActions(2, 2, sr, 2, ptr, n, nullptr), nullptr, fn, none,
                "sched");
  EXPECT_MISUSE(loomPipeScheduleFromActions(0, 2, sr, 2, ptr, n, &s), nullptr, fn, none,
                "numRanks is 0");
  EXPECT_MISUSE(loomPipeScheduleFromActions(2, 0, sr, 2, ptr, n, &s), nullptr, fn, none,
                "numStages is 0");
  EXPECT_MISUSE(loomPipeScheduleFromActions(2, 2, sr, 0, ptr, n, &s), nullptr, fn, none,
                "numMicrobatches is 0");
  EXPECT_MISUSE(loomPipeScheduleFromActions(2, 2, nullptr, 2, ptr, n, &s), nullptr, fn, none,
                "stageRank is NULL");
  EXPECT_MISUSE(loomPipeScheduleFromActions(2, 2, bad_sr, 2, ptr, n, &s), nullptr, fn, none,
                "stageRank[1] is 2");
  EXPECT_MISUSE(loomPipeScheduleFromActions(2, 2, sr, 2, nullptr, n, &s), nullptr, fn, none,
                "actions is NULL");
  EXPECT_MISUSE(loomPipeScheduleFromActions(2, 2, sr, 2, ptr, nullptr, &s), nullptr, fn, none,
                "numActions is NULL");
  EXPECT_MISUSE(loomPipeScheduleFromActions(2, 2, sr, 2, ptr, neg, &s), nullptr, fn, none,
                "numActions[1] is -1");
  const loomPipeAction* holes[2] = {a[0].data(), nullptr};
  EXPECT_MISUSE(loomPipeScheduleFromActions(2, 2, sr, 2, holes, n, &s), nullptr, fn, none,
                "actions[1] is NULL");
  EXPECT_EQ(s, nullptr);
}

TEST(PipeSchedArgs, AccessorsAndSimulate) {
  Sched g;
  ASSERT_EQ(loomPipeScheduleCreate(loomPipe1F1B, 2, 2, 1, &g.s), loomSuccess);
  std::vector<unsigned char> none;
  const loomPipeAction* acts = nullptr;
  int n = 0, r = 0;
  size_t len = 0;
  char buf[4];
  EXPECT_MISUSE(loomPipeScheduleGetActions(nullptr, 0, &acts, &n), nullptr,
                "loomPipeScheduleGetActions", none, "sched");
  EXPECT_MISUSE(loomPipeScheduleGetActions(g.s, 2, &acts, &n), nullptr,
                "loomPipeScheduleGetActions", none, "rank is 2");
  EXPECT_MISUSE(loomPipeScheduleGetActions(g.s, 0, nullptr, &n), nullptr,
                "loomPipeScheduleGetActions", none, "NULL");
  EXPECT_MISUSE(loomPipeScheduleStageRank(g.s, 2, &r), nullptr, "loomPipeScheduleStageRank", none,
                "stage is 2");
  EXPECT_MISUSE(loomPipeScheduleStageRank(g.s, 0, nullptr), nullptr, "loomPipeScheduleStageRank",
                none, "rank is NULL");
  EXPECT_MISUSE(loomPipeScheduleFormat(g.s, -1, buf, 4, &len), nullptr, "loomPipeScheduleFormat",
                none, "rank is -1");
  EXPECT_MISUSE(loomPipeScheduleFormat(g.s, 0, nullptr, 4, &len), nullptr, "loomPipeScheduleFormat",
                none, "buf is NULL");
  EXPECT_MISUSE(loomPipeScheduleFormat(g.s, 0, buf, 4, nullptr), nullptr, "loomPipeScheduleFormat",
                none, "length is NULL");
  EXPECT_MISUSE(loomPipeScheduleDestroy(nullptr), nullptr, "loomPipeScheduleDestroy", none,
                "sched is NULL");
  loomPipeStats st{};
  double idle[2] = {7, 7};
  int peak[2] = {7, 7};
  loomPipeCosts neg = {1, -1, 1, 0}, nan = {1, 1, 1, std::nan("")}, ok = {1, 1, 1, 0};
  std::vector<unsigned char> before = partest::bytes_of(std::vector<double>(idle, idle + 2));
  EXPECT_MISUSE(loomPipeSimulate(g.s, &neg, &st, idle, peak), nullptr, "loomPipeSimulate", none,
                "costs->b is -1");
  EXPECT_MISUSE(loomPipeSimulate(g.s, &nan, &st, idle, peak), nullptr, "loomPipeSimulate", none,
                "costs->comm");
  EXPECT_MISUSE(loomPipeSimulate(g.s, nullptr, &st, idle, peak), nullptr, "loomPipeSimulate", none,
                "costs is NULL");
  EXPECT_MISUSE(loomPipeSimulate(g.s, &ok, nullptr, idle, peak), nullptr, "loomPipeSimulate", none,
                "stats is NULL");
  EXPECT_MISUSE(loomPipeSimulate(nullptr, &ok, &st, idle, peak), nullptr, "loomPipeSimulate", none,
                "sched is NULL");
  EXPECT_EQ(before, partest::bytes_of(std::vector<double>(idle, idle + 2)));
  EXPECT_EQ(peak[0], 7);
  EXPECT_EQ(loomPipeSimulate(g.s, &ok, &st, nullptr, nullptr), loomSuccess);  // both may be NULL
  EXPECT_DOUBLE_EQ(st.makespan, 9.0);
}

}  // namespace
