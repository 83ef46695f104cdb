// test_handles.cc - handles used as a careless or hostile program uses them:
// communicators, streams, registrations and PreMulSum ops that are destroyed,
// aborted, ended twice, of another kind, from another communicator or made
// up. Each is loomInvalidArgument naming the problem, on the calling rank,
// never a crash or an abort (before, several segfaulted or raised SIGABRT,
// and Count/UserRank/Deregister returned loomSuccess with stale values), and
// the live communicators keep working: each case ends with an all-reduce
// whose result names every rank.
#include <stdint.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using harness::Ctx;
using harness::Init;
using harness::Mode;
using harness::Opts;

class Handles : public ::testing::TestWithParam<Mode> {};

std::string Last() {
  return loomGetLastError(nullptr);
}

// r is loomInvalidArgument and the thread's last error says `what`.
void ExpectRefused(loomResult_t r, const char* what) {
  EXPECT_EQ(r, loomInvalidArgument);
  EXPECT_NE(Last().find(what), std::string::npos) << "'" << Last() << "' does not say " << what;
}

// An all-reduce over comm that only comes out right if every rank is in.
void ExpectWorks(loomComm_t comm, int nranks, int rank) {
  std::vector<int> v(64, rank + 1), out(64, -1);
  ASSERT_LOOM_OK(loomAllReduce(v.data(), out.data(), v.size(), loomInt32, loomSum, comm, nullptr));
  for (int x : out) ASSERT_EQ(x, nranks * (nranks + 1) / 2);
}

// Lets the heap reuse what a destroyed communicator freed, as the issue's
// reproducer did: a stale pointer would then point into live memory.
void ChurnHeap() {
  std::vector<void*> blocks;
  for (int i = 0; i < 256; i++) blocks.push_back(calloc(1, 64 + 64 * (i % 32)));
  for (void* b : blocks) free(b);
}

// A second communicator, destroyed; then every call on it is refused.
TEST_P(Handles, DestroyedCommunicator) {
  Opts o;
  o.timeout_s = 90;
  harness::run(
      3, GetParam(),
      [&](Ctx& c) {
        loomComm_t dead = nullptr;
        ASSERT_LOOM_OK(loomCommSplit(c.comm, 0, c.rank, &dead, nullptr));
        ExpectWorks(dead, c.nranks, c.rank);
        ASSERT_LOOM_OK(loomCommDestroy(dead));
        ChurnHeap();
        int x = 1, y = 0, count = -7, rank = -7;
        ExpectRefused(loomAllReduce(&x, &y, 1, loomInt32, loomSum, dead, nullptr), "was destroyed");
        ExpectRefused(loomBroadcast(&x, &y, 1, loomInt32, 0, dead, nullptr), "was destroyed");
        ExpectRefused(loomSend(&x, 1, loomInt32, 0, dead, nullptr), "was destroyed");
        ExpectRefused(loomCommCount(dead, &count), "loomCommCount: communicator");
        ExpectRefused(loomCommUserRank(dead, &rank), "was destroyed");
        EXPECT_EQ(count, -7);
        EXPECT_EQ(rank, -7);
        ExpectRefused(loomCommDestroy(dead), "loomCommDestroy: communicator");
        ExpectRefused(loomCommAbort(dead), "loomCommAbort: communicator");
        ExpectRefused(loomCommFinalize(dead), "was destroyed");
        loomComm_t child = nullptr;
        ExpectRefused(loomCommSplit(dead, 0, 0, &child, nullptr), "was destroyed");
        EXPECT_EQ(child, nullptr);
        loomResult_t async = loomSuccess;
        ExpectRefused(loomCommGetAsyncError(dead, &async), "was destroyed");
        // A dead handle reads the thread's text (the refusal just above); no crash.
        EXPECT_NE(std::string(loomGetLastError(dead)).find("was destroyed"), std::string::npos)
            << loomGetLastError(dead);
        ExpectWorks(c.comm, c.nranks, c.rank);
      },
      o);
}

// Abort, then destroy and abort again: refused, not SIGABRT.
TEST_P(Handles, AbortedTwiceAndDestroyedAfterAbort) {
  Opts o;
  o.timeout_s = 90;
  harness::run(
      2, GetParam(),
      [&](Ctx& c) {
        loomComm_t a = nullptr, b = nullptr;
        ASSERT_LOOM_OK(loomCommSplit(c.comm, 0, c.rank, &a, nullptr));
        ASSERT_LOOM_OK(loomCommSplit(c.comm, 0, c.rank, &b, nullptr));
        ASSERT_LOOM_OK(loomCommAbort(a));
        ExpectRefused(loomCommAbort(a), "was destroyed (or aborted)");
        ExpectRefused(loomCommDestroy(a), "was destroyed (or aborted)");
        ASSERT_LOOM_OK(loomCommDestroy(b));
        ExpectRefused(loomCommAbort(b), "was destroyed");
        ExpectWorks(c.comm, c.nranks, c.rank);
      },
      o);
}

// Handles that were never Loom's, and a handle of another kind.
TEST_P(Handles, MadeUpAndForeignHandles) {
  Opts o;
  o.timeout_s = 90;
  harness::run(
      2, GetParam(),
      [&](Ctx& c) {
        int x = 1, y = 0;
        long on_stack = 0;
        for (loomComm_t bogus :
             {(loomComm_t)(uintptr_t)0x1234, (loomComm_t)(void*)&on_stack,
              (loomComm_t)(uintptr_t)~0ull, (loomComm_t)(uintptr_t)0x7fffffffffff})
          ExpectRefused(loomAllReduce(&x, &y, 1, loomInt32, loomSum, bogus, nullptr),
                        "is not a Loom handle");
        ExpectRefused(loomAllReduce(&x, &y, 1, loomInt32, loomSum, nullptr, nullptr),
                      "communicator is NULL");
        loomStream_t s = nullptr;
        ASSERT_LOOM_OK(loomStreamCreate(&s));
        // A stream where a communicator goes, and a communicator where a stream goes.
        ExpectRefused(loomAllReduce(&x, &y, 1, loomInt32, loomSum, (loomComm_t)(void*)s, nullptr),
                      "is a live stream");
        ExpectRefused(
            loomAllReduce(&x, &y, 1, loomInt32, loomSum, c.comm, (loomStream_t)(void*)c.comm),
            "is a live communicator");
        ExpectRefused(loomStreamSynchronize((loomStream_t)(uintptr_t)0x4321),
                      "is not a Loom handle");
        ASSERT_LOOM_OK(loomStreamDestroy(s));
        ExpectWorks(c.comm, c.nranks, c.rank);
      },
      o);
}

// A destroyed stream is refused by every call that takes one.
TEST_P(Handles, DestroyedStream) {
  Opts o;
  o.timeout_s = 90;
  harness::run(
      2, GetParam(),
      [&](Ctx& c) {
        loomStream_t s = nullptr;
        ASSERT_LOOM_OK(loomStreamCreate(&s));
        int x = c.rank + 1, y = 0;
        ASSERT_LOOM_OK(loomAllReduce(&x, &y, 1, loomInt32, loomSum, c.comm, s));
        ASSERT_LOOM_OK(loomStreamSynchronize(s));
        EXPECT_EQ(y, 3);
        ASSERT_LOOM_OK(loomStreamDestroy(s));
        ChurnHeap();
        ExpectRefused(loomAllReduce(&x, &y, 1, loomInt32, loomSum, c.comm, s), "stream");
        ExpectRefused(loomStreamSynchronize(s), "was destroyed");
        ExpectRefused(loomStreamQuery(s), "was destroyed");
        ExpectRefused(loomStreamDestroy(s), "was destroyed");
        ExpectWorks(c.comm, c.nranks, c.rank);
      },
      o);
}

// Registrations: of a destroyed communicator, deregistered twice, of
// another communicator, made up.
TEST_P(Handles, Registrations) {
  Opts o;
  o.timeout_s = 90;
  harness::run(
      2, GetParam(),
      [&](Ctx& c) {
        std::vector<char> buf(4096);
        loomComm_t other = nullptr;
        ASSERT_LOOM_OK(loomCommSplit(c.comm, 0, c.rank, &other, nullptr));
        void *h_other = nullptr, *h = nullptr, *h2 = nullptr;
        ASSERT_LOOM_OK(loomCommRegister(other, buf.data(), buf.size(), &h_other));
        ASSERT_LOOM_OK(loomCommRegister(c.comm, buf.data(), buf.size(), &h));
        ExpectRefused(loomCommDeregister(c.comm, h_other), "belongs to another communicator");
        ASSERT_LOOM_OK(loomCommDestroy(other));
        ChurnHeap();
        // The registration went with its communicator.
        ExpectRefused(loomCommDeregister(other, h_other), "was destroyed");
        ExpectRefused(loomCommDeregister(c.comm, h_other), "not a live registration");
        ASSERT_LOOM_OK(loomCommDeregister(c.comm, h));
        ExpectRefused(loomCommDeregister(c.comm, h), "not a live registration");
        ExpectRefused(loomCommDeregister(c.comm, (void*)&buf), "not a live registration");
        ASSERT_LOOM_OK(loomCommRegister(c.comm, buf.data(), buf.size(), &h2));
        ExpectRefused(loomCommDeregister(c.comm, h), "not a live registration");  // slot reused
        ASSERT_LOOM_OK(loomCommDeregister(c.comm, h2));
        ExpectWorks(c.comm, c.nranks, c.rank);
      },
      o);
}

// PreMulSum ops: destroyed (then its slot reused), destroyed twice, made on
// another communicator.
TEST_P(Handles, PreMulSumOps) {
  Opts o;
  o.timeout_s = 90;
  harness::run(
      2, GetParam(),
      [&](Ctx& c) {
        float two = 2.0f, three = 3.0f, x = 1.0f, y = 0;
        loomRedOp_t op = loomSum, op2 = loomSum, op_other = loomSum;
        loomComm_t other = nullptr;
        ASSERT_LOOM_OK(loomCommSplit(c.comm, 0, c.rank, &other, nullptr));
        ASSERT_LOOM_OK(
            loomRedOpCreatePreMulSum(&op_other, &two, loomFloat32, loomScalarHostImmediate, other));
        ASSERT_LOOM_OK(
            loomRedOpCreatePreMulSum(&op, &two, loomFloat32, loomScalarHostImmediate, c.comm));
        ExpectRefused(loomAllReduce(&x, &y, 1, loomFloat32, op_other, c.comm, nullptr),
                      "made on another one");
        ASSERT_LOOM_OK(loomRedOpDestroy(op, c.comm));
        ExpectRefused(loomRedOpDestroy(op, c.comm), "not a live PreMulSum op");
        ExpectRefused(loomAllReduce(&x, &y, 1, loomFloat32, op, c.comm, nullptr), "destroyed");
        // A new op takes the freed slot: the old value must not name it.
        ASSERT_LOOM_OK(
            loomRedOpCreatePreMulSum(&op2, &three, loomFloat32, loomScalarHostImmediate, c.comm));
        EXPECT_NE(op2, op);
        ExpectRefused(loomAllReduce(&x, &y, 1, loomFloat32, op, c.comm, nullptr), "destroyed");
        ASSERT_LOOM_OK(loomAllReduce(&x, &y, 1, loomFloat32, op2, c.comm, nullptr));
        EXPECT_EQ(y, 6.0f);  // 3 x 1 from each of the two ranks
        ASSERT_LOOM_OK(loomRedOpDestroy(op2, c.comm));
        ASSERT_LOOM_OK(loomCommDestroy(other));
        ExpectRefused(loomRedOpDestroy(op_other, other), "was destroyed");
        ExpectWorks(c.comm, c.nranks, c.rank);
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Handles, ::testing::Values(Mode::Proc, Mode::Thread),
                         [](const ::testing::TestParamInfo<Mode>& i) {
                           return std::string(harness::mode_name(i.param));
                         });

// loomCommInitAll's communicators (threads of one process) destroyed, then
// used from one thread: the segfault.
TEST(HandlesInitAll, DestroyedThenUsed) {
  loomComm_t comms[3] = {nullptr, nullptr, nullptr};
  ASSERT_LOOM_OK(loomCommInitAll(comms, 3, nullptr));
  for (loomComm_t c : comms) ASSERT_LOOM_OK(loomCommDestroy(c));
  ChurnHeap();
  loomComm_t fresh[2] = {nullptr, nullptr};
  ASSERT_LOOM_OK(loomCommInitAll(fresh, 2, nullptr));  // may reuse the same memory
  int x = 1, y = 0;
  for (loomComm_t c : comms) {
    ExpectRefused(loomAllReduce(&x, &y, 1, loomInt32, loomSum, c, nullptr), "was destroyed");
    ExpectRefused(loomCommDestroy(c), "was destroyed");
  }
  int count = 0;
  ASSERT_LOOM_OK(loomCommCount(fresh[1], &count));
  EXPECT_EQ(count, 2);
  for (loomComm_t c : fresh) ASSERT_LOOM_OK(loomCommDestroy(c));
}

}  // namespace
