// loomMemAlloc, loomCommRegister and the direct plans on them: every direct
// algorithm (and a FIFO one for contrast) on memory from loomMemAlloc
// (which peers map), on registered malloc memory and on plain malloc memory
// (both read by cross-memory attach between processes), in place and out of
// place, process and thread ranks; and the bad arguments of the memory calls.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "harness.h"

using harness::Ctx;
using harness::Mode;

namespace {

enum class Mem { Alloc, Registered, Plain };

const char* mem_name(Mem m) {
  return m == Mem::Alloc ? "memalloc" : m == Mem::Registered ? "registered" : "plain";
}

// A buffer of the chosen kind, released on scope exit.
class Buf {
 public:
  Buf(Mem kind, loomComm_t comm, size_t bytes) : kind_(kind), comm_(comm), bytes_(bytes) {
    if (kind == Mem::Alloc) {
      EXPECT_LOOM_OK(loomMemAlloc(&p_, bytes));
    } else {
      p_ = malloc(bytes);
      if (kind == Mem::Registered) EXPECT_LOOM_OK(loomCommRegister(comm, p_, bytes, &handle_));
    }
  }
  ~Buf() {
    if (kind_ == Mem::Alloc) {
      EXPECT_LOOM_OK(loomMemFree(p_));
    } else {
      if (handle_) EXPECT_LOOM_OK(loomCommDeregister(comm_, handle_));
      free(p_);
    }
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  float* f() { return static_cast<float*>(p_); }

 private:
  Mem kind_;
  loomComm_t comm_;
  size_t bytes_;
  void* p_ = nullptr;
  void* handle_ = nullptr;
};

// Small integers, so every float sum is exact.
float value(int rank, size_t i) {
  return float((rank * 7 + int(i % 23)) % 31);
}

// All-reduce (sum and avg), all-gather, reduce-scatter and broadcast on
// buffers of kind m, out of place and in place, checked element by element.
void run_all(Ctx& c, Mem m, size_t count) {
  int n = c.nranks, r = c.rank;
  Buf send(m, c.comm, count * n * sizeof(float)), recv(m, c.comm, count * n * sizeof(float));
  for (int inplace = 0; inplace < 2; inplace++) {
    std::string where = std::string(mem_name(m)) + (inplace ? " in place" : " out of place") +
                        " count " + std::to_string(count) + " rank " + std::to_string(r);
    // All-reduce.
    for (size_t i = 0; i < count; i++) send.f()[i] = value(r, i);
    float* out = inplace ? send.f() : recv.f();
    ASSERT_LOOM_OK(loomAllReduce(send.f(), out, count, loomFloat32, loomSum, c.comm, nullptr));
    for (size_t i = 0; i < count; i++) {
      float want = 0;
      for (int q = 0; q < n; q++) want += value(q, i);
      ASSERT_EQ(out[i], want) << "all-reduce " << where << " at " << i;
    }
    // All-gather: rank q's block is q's values.
    float* ag_send = inplace ? recv.f() + size_t(r) * count : send.f();
    for (size_t i = 0; i < count; i++) ag_send[i] = value(r, i);
    ASSERT_LOOM_OK(loomAllGather(ag_send, recv.f(), count, loomFloat32, c.comm, nullptr));
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < count; i++)
        ASSERT_EQ(recv.f()[size_t(q) * count + i], value(q, i)) << "all-gather " << where;
    // Reduce-scatter: block r of the sum.
    for (size_t i = 0; i < count * n; i++) send.f()[i] = value(r, i);
    float* rs_out = inplace ? send.f() + size_t(r) * count : recv.f();
    ASSERT_LOOM_OK(
        loomReduceScatter(send.f(), rs_out, count, loomFloat32, loomSum, c.comm, nullptr));
    for (size_t i = 0; i < count; i++) {
      float want = 0;
      for (int q = 0; q < n; q++) want += value(q, size_t(r) * count + i);
      ASSERT_EQ(rs_out[i], want) << "reduce-scatter " << where << " at " << i;
    }
    // Broadcast from the last rank.
    int root = n - 1;
    for (size_t i = 0; i < count; i++) send.f()[i] = value(root, i) + (r == root ? 0 : 100);
    float* bc_out = inplace ? send.f() : recv.f();
    ASSERT_LOOM_OK(loomBroadcast(send.f(), bc_out, count, loomFloat32, root, c.comm, nullptr));
    for (size_t i = 0; i < count; i++)
      ASSERT_EQ(bc_out[i], value(root, i)) << "broadcast " << where;
  }
}

using MemCase = std::tuple<int, Mode, std::string>;  // ranks, mode, LOOM_ALGO

class MemoryKinds : public ::testing::TestWithParam<MemCase> {};

TEST_P(MemoryKinds, CollectivesOnEveryKindOfBuffer) {
  auto [n, mode, algo] = GetParam();
  harness::Opts o;
  o.timeout_s = 300;
  if (!algo.empty()) o.env.push_back({"LOOM_ALGO", algo});
  harness::run(
      n, mode,
      [](Ctx& c) {
        for (Mem m : {Mem::Alloc, Mem::Registered, Mem::Plain})
          for (size_t count : {size_t(1), size_t(1000), (size_t(1) << 18) + 3}) {
            run_all(c, m, count);
            if (::testing::Test::HasFatalFailure()) return;
          }
      },
      o);
}

const char* const kDirect = "allreduce:twoshot;allgather:read;reducescatter:read;broadcast:read";
const char* const kOneShot = "allreduce:oneshot;allgather:read;reducescatter:read;broadcast:read";
const char* const kFifo = "allreduce:ring;allgather:ring;reducescatter:ring;broadcast:ring";

std::string mem_case_name(const ::testing::TestParamInfo<MemCase>& info) {
  auto [n, mode, algo] = info.param;
  std::string a = algo.empty()       ? "tuner"
                  : algo == kDirect  ? "twoshot"
                  : algo == kOneShot ? "oneshot"
                                     : "fifo";
  return std::string(harness::mode_name(mode)) + std::to_string(n) + "_" + a;
}

INSTANTIATE_TEST_SUITE_P(Ranks, MemoryKinds,
                         ::testing::Values(MemCase{2, Mode::Proc, kDirect},
                                           MemCase{3, Mode::Proc, kOneShot},
                                           MemCase{4, Mode::Proc, kDirect},
                                           MemCase{3, Mode::Proc, kFifo},
                                           MemCase{3, Mode::Thread, ""}),
                         mem_case_name);

// ---- Bad arguments -------------------------------------------------------------

TEST(MemoryArgs, BadCallsNameTheProblemAndLoseNothing) {
  void* p = nullptr;
  EXPECT_EQ(loomMemAlloc(nullptr, 64), loomInvalidArgument);
  EXPECT_NE(std::string(loomGetLastError(nullptr)).find("ptr is NULL"), std::string::npos);
  EXPECT_EQ(loomMemAlloc(&p, 0), loomInvalidArgument);
  EXPECT_NE(std::string(loomGetLastError(nullptr)).find("size is 0"), std::string::npos);
  ASSERT_LOOM_OK(loomMemAlloc(&p, 1000));
  memset(p, 0x5a, 1000);  // usable at once
  int local = 0;
  EXPECT_EQ(loomMemFree(&local), loomInvalidArgument);
  EXPECT_NE(std::string(loomGetLastError(nullptr)).find("not an allocation"), std::string::npos);
  EXPECT_EQ(loomMemFree(static_cast<char*>(p) + 8), loomInvalidArgument);
  ASSERT_LOOM_OK(loomMemFree(p));
  EXPECT_EQ(loomMemFree(p), loomInvalidArgument);  // twice: an error, not a crash
  EXPECT_LOOM_OK(loomMemFree(nullptr));
}

TEST(MemoryArgs, RegisterChecksItsArgumentsAndHandles) {
  harness::run(2, Mode::Thread, [](Ctx& c) {
    std::vector<char> buf(4096);
    void* h = nullptr;
    EXPECT_EQ(loomCommRegister(nullptr, buf.data(), buf.size(), &h), loomInvalidArgument);
    EXPECT_EQ(loomCommRegister(c.comm, nullptr, buf.size(), &h), loomInvalidArgument);
    EXPECT_EQ(loomCommRegister(c.comm, buf.data(), 0, &h), loomInvalidArgument);
    EXPECT_EQ(loomCommRegister(c.comm, buf.data(), buf.size(), nullptr), loomInvalidArgument);
    ASSERT_LOOM_OK(loomCommRegister(c.comm, buf.data(), buf.size(), &h));
    int bogus = 0;
    EXPECT_EQ(loomCommDeregister(c.comm, &bogus), loomInvalidArgument);
    EXPECT_NE(std::string(loomGetLastError(c.comm)).find("not a live registration"),
              std::string::npos);
    ASSERT_LOOM_OK(loomCommDeregister(c.comm, h));
    EXPECT_EQ(loomCommDeregister(c.comm, h), loomInvalidArgument);  // twice
    // The communicator still works after all that.
    float x = 1;
    ASSERT_LOOM_OK(loomAllReduce(&x, &x, 1, loomFloat32, loomSum, c.comm, nullptr));
    EXPECT_EQ(x, 2.0f);
  });
}

}  // namespace
