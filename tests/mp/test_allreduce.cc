// test_allreduce.cc - the all-reduce matrix: rank counts x process/thread
// ranks x every datatype x every op (PreMulSum included) x counts x in-place
// and out-of-place, each result checked element by element against an
// independent reference.
#include <cstring>
#include <tuple>
#include <vector>

#include "harness.h"
#include "values.h"

namespace {

using harness::Ctx;
using harness::Mode;

const size_t kCounts[] = {0, 1, 7, 1000, (1u << 20) + 3};

// Runs one all-reduce and checks every element. op_user is what the call
// passes (a PreMulSum op or a built-in); op_ref and scale describe it.
void check_one(const Ctx& c, loomDataType_t t, loomRedOp_t op_user, loomRedOp_t op_ref,
               double scale, size_t count, bool in_place) {
  size_t es = shim::dtype_size(t);
  values::Pattern pat = values::pattern(t, op_ref);
  std::vector<unsigned char> send(count * es + 1), recv(count * es + 1, 0xA5);
  // Inputs repeat with the pattern's period: encode each value once.
  std::vector<unsigned char> in((size_t)pat.period * es);
  for (int k = 0; k < pat.period; k++)
    values::store(t, in.data(), (size_t)k, values::input(pat, c.rank, (size_t)k));
  for (size_t i = 0; i < count; i++)
    memcpy(send.data() + i * es, in.data() + (i % (size_t)pat.period) * es, es);
  std::vector<unsigned char> orig = send;
  void* out = in_place ? send.data() : recv.data();
  ASSERT_LOOM_OK(loomAllReduce(send.data(), out, count, t, op_user, c.comm, nullptr));
  // Expected values repeat with the pattern's period: encode each once.
  std::vector<unsigned char> want((size_t)pat.period * es);
  for (int k = 0; k < pat.period; k++)
    values::store(t, want.data(), (size_t)k,
                  values::expected(t, op_ref, pat, c.nranks, (size_t)k, scale));
  const unsigned char* got = (const unsigned char*)out;
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < count; i++)
    if (memcmp(got + i * es, want.data() + (i % (size_t)pat.period) * es, es) != 0 && !wrong++)
      first = i;
  EXPECT_EQ(wrong, 0u) << "rank " << c.rank << "/" << c.nranks << " " << shim::dtype_name(t) << " "
                       << shim::op_name(op_ref) << " count " << count
                       << (in_place ? " in-place" : " out-of-place") << ": first wrong element "
                       << first;
  if (!in_place) {
    EXPECT_EQ(memcmp(send.data(), orig.data(), send.size()), 0) << "sendbuff was modified";
    EXPECT_EQ(recv[count * es], 0xA5) << "wrote past the end of recvbuff";
  }
}

void premul_scalar(loomDataType_t t, double v, unsigned char out[8]) {
  memset(out, 0, 8);
  values::store(t, out, 0, v);
}

void matrix_body(const Ctx& c, loomDataType_t t) {
  for (size_t count : kCounts) {
    for (int op = 0; op < (int)loomNumOps; op++)
      for (bool in_place : {false, true})
        check_one(c, t, (loomRedOp_t)op, (loomRedOp_t)op, 1.0, count, in_place);
    unsigned char scalar[8];
    premul_scalar(t, 2.0, scalar);
    loomRedOp_t pm;
    ASSERT_LOOM_OK(loomRedOpCreatePreMulSum(&pm, scalar, t, loomScalarHostImmediate, c.comm));
    for (bool in_place : {false, true}) check_one(c, t, pm, loomSum, 2.0, count, in_place);
    ASSERT_LOOM_OK(loomRedOpDestroy(pm, c.comm));
  }
}

class AllReduceMatrix : public ::testing::TestWithParam<std::tuple<int, Mode, loomDataType_t>> {};

TEST_P(AllReduceMatrix, EveryOpCountAndPlacement) {
  auto [n, mode, t] = GetParam();
  harness::run(n, mode, [t = t](Ctx& c) { matrix_body(c, t); });
}

std::string param_name(const ::testing::TestParamInfo<AllReduceMatrix::ParamType>& info) {
  auto [n, mode, t] = info.param;
  return std::string(harness::mode_name(mode)) + std::to_string(n) + "_" + shim::dtype_name(t);
}

INSTANTIATE_TEST_SUITE_P(
    Ranks, AllReduceMatrix,
    ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 8),
                       ::testing::Values(Mode::Proc, Mode::Thread),
                       ::testing::Values(loomInt8, loomUint8, loomInt32, loomUint32, loomInt64,
                                         loomUint64, loomFloat16, loomFloat32, loomFloat64,
                                         loomBfloat16, loomFloat8e4m3, loomFloat8e5m2)),
    param_name);

// A device-resident PreMulSum scalar is read when the operation runs.
TEST(AllReduce, PreMulSumScalarReadAtRunTime) {
  harness::run(3, Mode::Proc, [](Ctx& c) {
    float scalar = 5.0f;
    loomRedOp_t pm;
    ASSERT_LOOM_OK(loomRedOpCreatePreMulSum(&pm, &scalar, loomFloat32, loomScalarDevice, c.comm));
    scalar = 3.0f;  // changed after creation: the run-time value counts
    std::vector<float> v(100, (float)(c.rank + 1));
    ASSERT_LOOM_OK(loomAllReduce(v.data(), v.data(), v.size(), loomFloat32, pm, c.comm, nullptr));
    for (float x : v) ASSERT_EQ(x, 3.0f * 6.0f);
    ASSERT_LOOM_OK(loomRedOpDestroy(pm, c.comm));
  });
}

// Many all-reduces back to back with sizes that cross slice and FIFO
// boundaries, so the pipeline's bookkeeping is exercised across calls.
TEST(AllReduce, ManyCallsAcrossPipelineBoundaries) {
  harness::run(4, Mode::Proc, [](Ctx& c) {
    const size_t sizes[] = {1, 65535, 65536, 65537, 262143, 262144, 262145, 1048577, 3000001};
    for (int rep = 0; rep < 3; rep++)
      for (size_t n : sizes) {
        std::vector<int32_t> v(n);
        for (size_t i = 0; i < n; i++) v[i] = (int32_t)(i % 1000) * (c.rank + 1);
        ASSERT_LOOM_OK(loomAllReduce(v.data(), v.data(), n, loomInt32, loomSum, c.comm, nullptr));
        for (size_t i = 0; i < n; i += 997) ASSERT_EQ(v[i], (int32_t)(i % 1000) * 10) << i;
        ASSERT_EQ(v[n - 1], (int32_t)((n - 1) % 1000) * 10);
      }
  });
}

}  // namespace
