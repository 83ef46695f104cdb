// Section 6 of PARALLEL.md, the runner: a p-stage float64 MLP (each stage tanh(x W + b) on a
// [rows, width] activation, loss = sum of squares at the last stage) run by loomPipeRunnerRun
// under every generated kind gives the loss and weight gradients bitwise equal to running the
// stages one after another on one rank; also with random sleeps in the callbacks, m < p and
// a host stream. A callback's error is returned on its rank and ends its peers' runs with an
// error, not a hang. Section 8's pipeline misuse of the runner.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "par_test.h"

namespace {

using harness::Ctx;
using harness::Mode;
using partest::RanksMode;

constexpr int kRows = 3, kWidth = 8;
constexpr size_t kActElems = (size_t)kRows * kWidth;
constexpr size_t kActBytes = kActElems * sizeof(double);

// ---- The model, shared by the pipeline callbacks and the one-rank reference ----------------

struct Model {
  int S = 0;
  std::vector<std::vector<double>> w, b;  // [S]: [width, width] and [width]
  explicit Model(int stages) : S(stages), w(stages), b(stages) {
    for (int s = 0; s < S; s++) {
      w[s] = partest::random_f64(kWidth * kWidth, 1000 + s);
      b[s] = partest::random_f64(kWidth, 2000 + s);
    }
  }
};

std::vector<double> micro_input(int i) {
  return partest::random_f64(kActElems, 5000 + i);
}

void stage_fwd(const Model& M, int s, const double* x, double* y) {
  for (int r = 0; r < kRows; r++)
    for (int c = 0; c < kWidth; c++) {
      double z = M.b[s][c];
      for (int k = 0; k < kWidth; k++) z += x[r * kWidth + k] * M.w[s][k * kWidth + c];
      y[r * kWidth + c] = std::tanh(z);
    }
}

double sum_sq(const double* y) {
  double l = 0;
  for (size_t e = 0; e < kActElems; e++) l += y[e] * y[e];
  return l;
}

// dz = gy * (1 - y^2); dx = dz W^T when dx is given.
void stage_bwd(const Model& M, int s, const double* y, const double* gy, double* dz, double* dx) {
  for (size_t e = 0; e < kActElems; e++) dz[e] = gy[e] * (1 - y[e] * y[e]);
  if (!dx) return;
  for (int r = 0; r < kRows; r++)
    for (int k = 0; k < kWidth; k++) {
      double g = 0;
      for (int c = 0; c < kWidth; c++) g += dz[r * kWidth + c] * M.w[s][k * kWidth + c];
      dx[r * kWidth + k] = g;
    }
}

void stage_wgrad(const double* x, const double* dz, double* dw, double* db) {
  for (int k = 0; k < kWidth; k++)
    for (int c = 0; c < kWidth; c++) {
      double g = 0;
      for (int r = 0; r < kRows; r++) g += x[r * kWidth + k] * dz[r * kWidth + c];
      dw[k * kWidth + c] += g;
    }
  for (int c = 0; c < kWidth; c++) {
    double g = 0;
    for (int r = 0; r < kRows; r++) g += dz[r * kWidth + c];
    db[c] += g;
  }
}

struct Grads {
  double loss = 0;
  std::vector<std::vector<double>> dw, db;
  explicit Grads(int S)
      : dw(S, std::vector<double>(kWidth * kWidth, 0.0)), db(S, std::vector<double>(kWidth, 0.0)) {}
};

// Every stage one after another, microbatch by microbatch.
Grads reference(const Model& M, int m) {
  Grads g(M.S);
  std::vector<double> losses(m);
  for (int i = 0; i < m; i++) {
    std::vector<std::vector<double>> acts(M.S + 1, std::vector<double>(kActElems));
    acts[0] = micro_input(i);
    for (int s = 0; s < M.S; s++) stage_fwd(M, s, acts[s].data(), acts[s + 1].data());
    losses[i] = sum_sq(acts[M.S].data());
    std::vector<double> gy(kActElems), dz(kActElems), dx(kActElems);
    for (size_t e = 0; e < kActElems; e++) gy[e] = 2 * acts[M.S][e];
    for (int s = M.S - 1; s >= 0; s--) {
      stage_bwd(M, s, acts[s + 1].data(), gy.data(), dz.data(), s > 0 ? dx.data() : nullptr);
      stage_wgrad(acts[s].data(), dz.data(), g.dw[s].data(), g.db[s].data());
      gy = dx;
    }
  }
  for (int i = 0; i < m; i++) g.loss += losses[i];
  return g;
}

// ---- The callbacks -------------------------------------------------------------------------

struct Saved {
  const void* input = nullptr;  // F's input pointer: valid and unchanged until B returns
  std::vector<double> x, y, dz;
};

struct Stages {
  const Model* M;
  int rank, m;
  std::vector<int> stage_rank;
  std::map<std::pair<int, int>, Saved> saved;
  std::vector<double> losses;
  Grads g;
  std::mt19937 rng;
  int max_sleep_us = 0;
  int fail_op = -1, fail_stage = -1, fail_mb = -1;  // loomPipeOp_t of the callback to fail
  bool die = false;  // the failing callback kills its process instead of returning an error
  std::vector<std::string> broken;  // contract breaches seen by the callbacks

  Stages(const Model& model, int r, int mbs, const std::vector<int>& sr)
      : M(&model), rank(r), m(mbs), stage_rank(sr), losses(mbs, 0.0), g(model.S), rng(77 + r) {}
  void nap() {
    if (max_sleep_us) usleep(rng() % max_sleep_us);
  }
  void breach(const char* what, int s, int i) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "rank %d, stage %d, microbatch %d: %s", rank, s, i, what);
    broken.push_back(buf);
  }
  bool fails(int op, int s, int i) const {
    bool f = op == fail_op && s == fail_stage && i == fail_mb;
    if (f && die) raise(SIGKILL);
    return f;
  }
};

loomResult_t cb_forward(void* user, int s, int i, const void* input, void* output, loomStream_t) {
  Stages& st = *(Stages*)user;
  st.nap();
  if (st.fails(loomPipeF, s, i)) return loomInternalError;
  if (st.stage_rank[s] != st.rank) st.breach("F of another rank's stage", s, i);
  if ((s == 0) != (input == nullptr)) st.breach("input is NULL exactly for stage 0", s, i);
  if ((s == st.M->S - 1) != (output == nullptr)) st.breach("output NULL exactly at S-1", s, i);
  if (st.saved.count({s, i})) st.breach("a second F", s, i);
  Saved& sv = st.saved[{s, i}];
  sv.input = input;
  sv.x = s == 0 ? micro_input(i) : std::vector<double>(kActElems);
  if (input) std::memcpy(sv.x.data(), input, kActBytes);
  sv.y.resize(kActElems);
  stage_fwd(*st.M, s, sv.x.data(), sv.y.data());
  if (output) std::memcpy(output, sv.y.data(), kActBytes);
  if (s == st.M->S - 1) st.losses[i] = sum_sq(sv.y.data());
  return loomSuccess;
}

loomResult_t cb_backward_input(void* user, int s, int i, const void* grad_output, void* grad_input,
                               loomStream_t) {
  Stages& st = *(Stages*)user;
  st.nap();
  if (st.fails(loomPipeB, s, i)) return loomInternalError;
  if ((s == 0) != (grad_input == nullptr)) st.breach("gradInput NULL exactly for stage 0", s, i);
  if ((s == st.M->S - 1) != (grad_output == nullptr))
    st.breach("gradOutput NULL exactly at S-1", s, i);
  auto it = st.saved.find({s, i});
  if (it == st.saved.end() || !it->second.dz.empty()) {
    st.breach("B without its F, or twice", s, i);
    return loomSuccess;
  }
  Saved& sv = it->second;
  if (sv.input && std::memcmp(sv.input, sv.x.data(), kActBytes) != 0)
    st.breach("F's input changed before B", s, i);
  std::vector<double> gy(kActElems);
  if (grad_output)
    std::memcpy(gy.data(), grad_output, kActBytes);
  else
    for (size_t e = 0; e < kActElems; e++) gy[e] = 2 * sv.y[e];
  sv.dz.resize(kActElems);
  std::vector<double> dx(kActElems);
  stage_bwd(*st.M, s, sv.y.data(), gy.data(), sv.dz.data(), grad_input ? dx.data() : nullptr);
  if (grad_input) std::memcpy(grad_input, dx.data(), kActBytes);
  return loomSuccess;
}

loomResult_t cb_backward_weight(void* user, int s, int i, loomStream_t) {
  Stages& st = *(Stages*)user;
  st.nap();
  if (st.fails(loomPipeW, s, i)) return loomInternalError;
  auto it = st.saved.find({s, i});
  if (it == st.saved.end() || it->second.dz.empty()) {
    st.breach("W before its B", s, i);
    return loomSuccess;
  }
  stage_wgrad(it->second.x.data(), it->second.dz.data(), st.g.dw[s].data(), st.g.db[s].data());
  st.saved.erase(it);
  return loomSuccess;
}

loomPipeCallbacks callbacks_of(Stages& st) {
  loomPipeCallbacks cb;
  cb.forward = cb_forward;
  cb.backwardInput = cb_backward_input;
  cb.backwardWeight = cb_backward_weight;
  cb.user = &st;
  return cb;
}

// ---- Schedules and runners -----------------------------------------------------------------

struct Sched {
  loomPipeSchedule_t s = nullptr;
  Sched() = default;
  Sched(const Sched&) = delete;
  Sched& operator=(const Sched&) = delete;
  ~Sched() {
    if (s) loomPipeScheduleDestroy(s);
  }
};

struct Runner {
  loomPipeRunner_t r = nullptr;
  Runner() = default;
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;
  ~Runner() {
    if (r) loomPipeRunnerDestroy(r);
  }
};

struct Kind {
  loomPipeKind_t kind;
  const char* name;
  int v;
};
const Kind kKinds[] = {{loomPipeAFAB, "AFAB", 1},
                       {loomPipe1F1B, "1F1B", 1},
                       {loomPipeInterleaved1F1B, "interleaved", 2},
                       {loomPipeZBH1, "ZB-H1", 1},
                       {loomPipeZBV, "ZB-V", 2},
                       {loomPipeDualPipeV, "DualPipeV", 2}};

// The microbatch counts to try for a kind on p ranks: one below p where the kind allows it.
std::vector<int> microbatches(loomPipeKind_t kind, int p) {
  switch (kind) {
    case loomPipeInterleaved1F1B:
      return {p};  // m % p == 0
    case loomPipeDualPipeV:
      return {2 * p};  // m >= 2p
    case loomPipe1F1B:
      return p > 1 ? std::vector<int>{p + 2, p - 1} : std::vector<int>{3};
    default:
      return p > 1 ? std::vector<int>{p + 1, 1} : std::vector<int>{2};
  }
}

std::vector<int> stage_ranks(loomPipeSchedule_t s, int S) {
  std::vector<int> sr(S, -1);
  for (int t = 0; t < S; t++) EXPECT_LOOM_OK(loomPipeScheduleStageRank(s, t, &sr[t]));
  return sr;
}

// One kind: create (or skip when not implemented), run twice, compare with the reference.
void run_kind(Ctx& c, const Kind& k, int m, int max_sleep_us, loomStream_t stream) {
  Sched sc;
  loomResult_t r = loomPipeScheduleCreate(k.kind, c.nranks, m, k.v, &sc.s);
  if (r == loomInvalidUsage) {
    if (c.rank == 0)
      std::printf("[  SKIPPED ] %s: %s (not implemented)\n", k.name, loomGetLastError(nullptr));
    return;
  }
  ASSERT_EQ(r, loomSuccess) << k.name << " m " << m << ": " << loomGetLastError(nullptr);
  int S = c.nranks * k.v;
  Model M(S);
  Grads want = reference(M, m);
  std::vector<size_t> act(S > 1 ? S - 1 : 1, kActBytes);
  Runner rn;
  ASSERT_LOOM_OK(loomPipeRunnerCreate(sc.s, act.data(), &rn.r, c.comm));
  std::vector<int> sr = stage_ranks(sc.s, S);
  for (int iter = 0; iter < 2; iter++) {  // the second reuses the runner's buffers
    Stages st(M, c.rank, m, sr);
    st.max_sleep_us = max_sleep_us;
    loomPipeCallbacks cb = callbacks_of(st);
    ASSERT_LOOM_OK(loomPipeRunnerRun(rn.r, &cb, stream));
    for (auto& b : st.broken) ADD_FAILURE() << k.name << " m " << m << ": " << b;
    EXPECT_TRUE(st.saved.empty()) << k.name << ": an F without its W";
    for (int s = 0; s < S; s++) {
      if (sr[s] != c.rank) continue;
      EXPECT_TRUE(st.g.dw[s] == want.dw[s]) << k.name << " m " << m << " dW of stage " << s;
      EXPECT_TRUE(st.g.db[s] == want.db[s]) << k.name << " m " << m << " db of stage " << s;
    }
    if (sr[S - 1] == c.rank) {
      double loss = 0;
      for (int i = 0; i < m; i++) loss += st.losses[i];
      EXPECT_EQ(std::memcmp(&loss, &want.loss, sizeof(loss)), 0)
          << k.name << " m " << m << " loss " << loss << " want " << want.loss;
    }
  }
}

class PipeRun : public ::testing::TestWithParam<RanksMode> {};

TEST_P(PipeRun, EveryKindMatchesOneRank) {
  auto [nranks, mode] = GetParam();
  harness::run(
      nranks, mode,
      [](Ctx& c) {
        for (const Kind& k : kKinds)
          for (int m : microbatches(k.kind, c.nranks)) {
            run_kind(c, k, m, 0, nullptr);
            if (::testing::Test::HasFatalFailure()) return;
          }
      },
      partest::opts());
}

TEST_P(PipeRun, RandomSleepsAndAHostStream) {
  auto [nranks, mode] = GetParam();
  harness::run(
      nranks, mode,
      [](Ctx& c) {
        shim::StreamGuard host;
        ASSERT_NE(host.get(), nullptr);
        for (const Kind& k : kKinds) {
          int m = microbatches(k.kind, c.nranks)[0];
          run_kind(c, k, m, 3000, host.get());
          if (::testing::Test::HasFatalFailure()) return;
        }
      },
      partest::opts());
}

INSTANTIATE_TEST_SUITE_P(, PipeRun,
                         ::testing::Values(RanksMode{1, Mode::Thread}, RanksMode{2, Mode::Proc},
                                           RanksMode{2, Mode::Thread}, RanksMode{3, Mode::Proc},
                                           RanksMode{3, Mode::Thread}, RanksMode{4, Mode::Proc},
                                           RanksMode{4, Mode::Thread}, RanksMode{8, Mode::Proc},
                                           RanksMode{8, Mode::Thread}),
                         partest::ranks_mode_name);

// ---- A callback's error ----------------------------------------------------------------------

class PipeRunError : public ::testing::TestWithParam<RanksMode> {};

// The last rank's callback op on microbatch 1 fails (1F1B, a fresh runner over c.comm).
void fail_one(Ctx& c, int op) {
  const int m = 4, S = c.nranks;
  Sched sc;
  ASSERT_LOOM_OK(loomPipeScheduleCreate(loomPipe1F1B, c.nranks, m, 1, &sc.s));
  Model M(S);
  std::vector<size_t> act(S, kActBytes);
  Runner rn;
  ASSERT_LOOM_OK(loomPipeRunnerCreate(sc.s, act.data(), &rn.r, c.comm));
  Stages st(M, c.rank, m, stage_ranks(sc.s, S));
  st.fail_op = op;
  st.fail_stage = S - 1;
  st.fail_mb = 1;
  loomPipeCallbacks cb = callbacks_of(st);
  loomResult_t r = loomPipeRunnerRun(rn.r, &cb, nullptr);
  // pp's text names the run and, on the failing rank, the callback that failed.
  std::string text = loomGetLastError(c.comm);
  const char* names[] = {"forward", "backwardInput", "backwardWeight"};
  if (c.rank == c.nranks - 1) {
    EXPECT_EQ(r, loomInternalError) << "op " << op << ": " << text;
    EXPECT_NE(text.find(std::string("loomPipeRunnerRun: ") + names[op] + " of stage " +
                        std::to_string(S - 1) + ", microbatch 1 failed"),
              std::string::npos)
        << text;
  } else {
    EXPECT_TRUE(r == loomRemoteError || r == loomTimeout)
        << "op " << op << ", rank " << c.rank << ": " << loomGetErrorString(r);
    EXPECT_EQ(text.rfind("loomPipeRunnerRun: ", 0), 0u) << text;
  }
  if (r != loomSuccess) {
    EXPECT_EQ(loomPipeRunnerRun(rn.r, &cb, nullptr), loomInvalidUsage);
    EXPECT_NE(std::string(loomGetLastError(c.comm)).find("only loomPipeRunnerDestroy"),
              std::string::npos);
  }
}

// The last rank's F, then B, then W of microbatch 1 fails: that rank gets the callback's
// result, every other rank an error (loomRemoteError or loomTimeout, within the short
// timeout, not a hang), and afterwards only destroy is valid.
TEST_P(PipeRunError, ACallbackErrorStopsEveryRank) {
  auto [nranks, mode] = GetParam();
  harness::Opts o = partest::opts();
  o.comm_timeout_ms = 4000;
  harness::run(
      nranks, mode,
      [](Ctx& c) {
        for (int op : {(int)loomPipeF, (int)loomPipeB, (int)loomPipeW}) {
          fail_one(c, op);
          if (::testing::Test::HasFatalFailure()) return;
        }
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(, PipeRunError,
                         ::testing::Values(RanksMode{2, Mode::Proc}, RanksMode{2, Mode::Thread},
                                           RanksMode{3, Mode::Proc}, RanksMode{3, Mode::Thread}),
                         partest::ranks_mode_name);

// A rank killed (SIGKILL) in the middle of a 1F1B run, in its forward of microbatch 2: every
// other rank's run returns an error (the harness bounds the whole run, so a hang fails it).
TEST(PipeRunKilled, Proc4TheOthersGetAnError) {
  const int victim = 1;
  harness::Opts o = partest::opts();
  o.comm_timeout_ms = 4000;
  o.expect_killed = {victim};
  harness::run(
      4, Mode::Proc,
      [victim](Ctx& c) {
        const int m = 6, S = c.nranks;
        Sched sc;
        ASSERT_LOOM_OK(loomPipeScheduleCreate(loomPipe1F1B, S, m, 1, &sc.s));
        Model M(S);
        std::vector<size_t> act(S, kActBytes);
        Runner rn;
        ASSERT_LOOM_OK(loomPipeRunnerCreate(sc.s, act.data(), &rn.r, c.comm));
        Stages st(M, c.rank, m, stage_ranks(sc.s, S));
        st.fail_op = loomPipeF;
        st.fail_stage = victim;
        st.fail_mb = 2;
        st.die = true;
        loomPipeCallbacks cb = callbacks_of(st);
        loomResult_t r = loomPipeRunnerRun(rn.r, &cb, nullptr);
        ASSERT_NE(c.rank, victim) << "the victim survived its SIGKILL";
        EXPECT_NE(r, loomSuccess) << "rank " << c.rank << " finished a run its peer died in";
        // pp has a text at once, whether or not its own watch has seen the death yet: the
        // run's (naming the action), or the watch's, written later (naming the victim: no
        // survivor aborts before every survivor has its text, see the meet below).
        std::string text = loomGetLastError(c.comm);
        EXPECT_TRUE(text.rfind("loomPipeRunnerRun: ", 0) == 0 || harness::names_rank(text, victim))
            << text;
        harness::meet(c, c.nranks - 1);
        EXPECT_EQ(loomPipeRunnerRun(rn.r, &cb, nullptr), loomInvalidUsage);
        loomCommAbort(c.comm);  // its peer is dead: abort rather than destroy
        c.comm = nullptr;
      },
      o);
}

// ---- Misuse ----------------------------------------------------------------------------------

class PipeRunArgs : public ::testing::TestWithParam<RanksMode> {};

TEST_P(PipeRunArgs, MisuseIsReportedAndLeavesTheRunnerUsable) {
  auto [nranks, mode] = GetParam();
  harness::run(
      nranks, mode,
      [](Ctx& c) {
        const char* C = "loomPipeRunnerCreate";
        const char* R = "loomPipeRunnerRun";
        const int m = 2, S = c.nranks;
        Sched sc;
        ASSERT_LOOM_OK(loomPipeScheduleCreate(loomPipe1F1B, c.nranks, m, 1, &sc.s));
        std::vector<size_t> act(S, kActBytes);
        loomPipeRunner_t out = nullptr;
        std::vector<loomPipeRunner_t> hold{nullptr};
        auto out_bytes = [&] {
          hold[0] = out;
          return partest::bytes_of(hold);
        };
        EXPECT_MISUSE(loomPipeRunnerCreate(nullptr, act.data(), &out, c.comm), c.comm, C,
                      out_bytes(), "sched");
        EXPECT_MISUSE(loomPipeRunnerCreate(sc.s, act.data(), nullptr, c.comm), c.comm, C,
                      out_bytes(), "runner");
        EXPECT_MISUSE(loomPipeRunnerCreate(sc.s, act.data(), &out, nullptr), nullptr, C,
                      out_bytes(), "pp");
        if (S > 1) {
          EXPECT_MISUSE(loomPipeRunnerCreate(sc.s, nullptr, &out, c.comm), c.comm, C, out_bytes(),
                        "actBytes");
        }
        Sched other;  // a schedule for one rank more than pp has
        ASSERT_LOOM_OK(loomPipeScheduleCreate(loomPipe1F1B, c.nranks + 1, m, 1, &other.s));
        std::vector<size_t> act2(S + 1, kActBytes);
        EXPECT_MISUSE(loomPipeRunnerCreate(other.s, act2.data(), &out, c.comm), c.comm, C,
                      out_bytes(), "pp", "ranks");
        EXPECT_EQ(out, nullptr);

        Runner rn;
        ASSERT_LOOM_OK(loomPipeRunnerCreate(sc.s, act.data(), &rn.r, c.comm));
        Model M(S);
        Stages st(M, c.rank, m, stage_ranks(sc.s, S));
        loomPipeCallbacks cb = callbacks_of(st);
        std::vector<int> none;
        auto nothing = [&] { return partest::bytes_of(none); };
        EXPECT_MISUSE(loomPipeRunnerRun(nullptr, &cb, nullptr), nullptr, R, nothing(), "runner");
        EXPECT_MISUSE(loomPipeRunnerRun(rn.r, nullptr, nullptr), c.comm, R, nothing(), "callbacks");
        loomPipeCallbacks bad = cb;
        bad.forward = nullptr;
        EXPECT_MISUSE(loomPipeRunnerRun(rn.r, &bad, nullptr), c.comm, R, nothing(), "forward");
        bad = cb;
        bad.backwardInput = nullptr;
        EXPECT_MISUSE(loomPipeRunnerRun(rn.r, &bad, nullptr), c.comm, R, nothing(),
                      "backwardInput");
        bad = cb;
        bad.backwardWeight = nullptr;
        EXPECT_MISUSE(loomPipeRunnerRun(rn.r, &bad, nullptr), c.comm, R, nothing(),
                      "backwardWeight");
        // Still usable: a run gives the reference's gradients.
        ASSERT_LOOM_OK(loomPipeRunnerRun(rn.r, &cb, nullptr));
        EXPECT_TRUE(st.broken.empty());
        Grads want = reference(M, m);
        for (int s = 0; s < S; s++)
          if (st.stage_rank[s] == c.rank) {
            EXPECT_TRUE(st.g.dw[s] == want.dw[s]) << s;
          }
        EXPECT_LOOM_OK(loomPipeRunnerDestroy(nullptr));
      },
      partest::opts());
}

INSTANTIATE_TEST_SUITE_P(, PipeRunArgs,
                         ::testing::Values(RanksMode{1, Mode::Proc}, RanksMode{3, Mode::Proc},
                                           RanksMode{3, Mode::Thread}),
                         partest::ranks_mode_name);

}  // namespace
