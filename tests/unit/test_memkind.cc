// test_memkind.cc - memory kinds and executors: each buffer of a call is
// classified once in the API layer; a call whose buffers mix kinds, or
// whose memory its stream cannot serve, is loomInvalidArgument naming the
// buffer, on the calling rank alone, and loses nothing (the next correct
// call works). Device memory is simulated on machines without a GPU by the
// classifier's test ranges (mem_kind_fake_add); the real classifier and
// device identities have no GPU test yet.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "collectives/exec.h"
#include "core/memkind.h"
#include "core/stream.h"
#include "loom.h"

namespace {

// Removes a fake device range at the end of a scope.
struct FakeDevice {
  const void* p;
  FakeDevice(const void* ptr, size_t bytes) : p(ptr) {
    EXPECT_EQ(mem_kind_fake_add(ptr, bytes, 0), 0);
  }
  ~FakeDevice() { mem_kind_fake_remove(p); }
};

TEST(MemKind, HostMemoryIsHost) {
  std::vector<float> v(100);
  int dev = 7;
  EXPECT_EQ(mem_kind_of(v.data(), &dev), MEM_HOST);
  EXPECT_EQ(dev, -1);
  EXPECT_EQ(mem_kind_of(nullptr, &dev), MEM_HOST);
  void* m = malloc(1 << 20);
  EXPECT_EQ(mem_kind_of(m, nullptr), MEM_HOST);  // with a driver too: CUDA never saw it
  free(m);
  EXPECT_STREQ(mem_kind_name(MEM_HOST), "host");
  EXPECT_STREQ(mem_kind_name(MEM_CUDA), "CUDA device");
}

TEST(MemKind, NoDriverMeansNoDevice) {
  if (cuda_present())
    GTEST_SKIP() << "a CUDA driver is present here: this case is about machines without one";
  struct dev_identity id;
  EXPECT_EQ(cuda_device_identity(0, &id), loomInvalidUsage);
  EXPECT_NE(std::string(loomGetLastError(NULL)).find("no CUDA driver"), std::string::npos);
  EXPECT_EQ(cuda_current_device(), -1);
  for (unsigned char b : id.uuid) EXPECT_EQ(b, 0);
}

TEST(MemKind, FakeRangesHaveExactBounds) {
  std::vector<char> buf(4096);
  {
    FakeDevice f(buf.data() + 100, 1000);
    int dev = -1;
    EXPECT_EQ(mem_kind_of(buf.data() + 99, nullptr), MEM_HOST);
    EXPECT_EQ(mem_kind_of(buf.data() + 100, &dev), MEM_CUDA);
    EXPECT_EQ(dev, 0);
    EXPECT_EQ(mem_kind_of(buf.data() + 1099, nullptr), MEM_CUDA);
    EXPECT_EQ(mem_kind_of(buf.data() + 1100, nullptr), MEM_HOST);
  }
  EXPECT_EQ(mem_kind_of(buf.data() + 100, nullptr), MEM_HOST);
}

TEST(Executors, PickedByStreamKindAndMemoryKind) {
  loomStream_t h = nullptr;
  ASSERT_EQ(loomStreamCreate(&h), loomSuccess);
  struct loom_stream* hs = nullptr;
  ASSERT_EQ(stream_get(h, "test", &hs), loomSuccess);
  EXPECT_EQ(stream_kind_of(hs), STREAM_HOST);
  EXPECT_EQ(stream_kind_of(nullptr), STREAM_NONE);
  EXPECT_EQ(exec_pick(nullptr, MEM_HOST), &exec_host);
  EXPECT_EQ(exec_pick(hs, MEM_HOST), &exec_host);
  // Device memory on a host stream is refused with a reason.
  EXPECT_EQ(exec_pick(hs, MEM_CUDA), nullptr);
  EXPECT_NE(std::string(exec_refusal(hs, MEM_CUDA)).find("host stream cannot serve"),
            std::string::npos);
  EXPECT_NE(std::string(exec_refusal(nullptr, MEM_CUDA)).find("NULL stream"), std::string::npos);
  // A borrowed CUDA stream: a view for one call, no handle, no worker.
  int fake_cuda_stream = 0;
  struct loom_stream* b = stream_borrow_cuda(&fake_cuda_stream);
  EXPECT_EQ(stream_kind_of(b), STREAM_CUDA);
  EXPECT_EQ(stream_cuda(b), &fake_cuda_stream);
  EXPECT_EQ(exec_pick(b, MEM_HOST), nullptr);
  EXPECT_NE(std::string(exec_refusal(b, MEM_HOST)).find("CUDA stream"), std::string::npos);
  struct stream_work w = {nullptr, nullptr, nullptr};
  EXPECT_EQ(stream_enqueue(b, &w), loomInternalError);
  // loomStreamGetCuda: NULL for a host stream.
  void* cs = &fake_cuda_stream;
  EXPECT_EQ(loomStreamGetCuda(h, &cs), loomSuccess);
  EXPECT_EQ(cs, nullptr);
  EXPECT_EQ(loomStreamGetCuda(h, nullptr), loomInvalidArgument);
  EXPECT_EQ(loomStreamGetCuda(nullptr, &cs), loomInvalidArgument);
  EXPECT_EQ(loomStreamDestroy(h), loomSuccess);
}

// Two host ranks of this process; rank 0 makes the bad calls alone, then
// both ranks run a correct all-reduce together (one group drives both).
class KindCalls : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(loomCommInitAll(comms_, 2, nullptr), loomSuccess); }
  void TearDown() override {
    for (loomComm_t c : comms_) {
      if (c) {
        EXPECT_EQ(loomCommDestroy(c), loomSuccess);
      }
    }
  }
  void ExpectRefused(loomResult_t r, const char* what) {
    EXPECT_EQ(r, loomInvalidArgument);
    std::string err = loomGetLastError(NULL);
    EXPECT_NE(err.find(what), std::string::npos) << err;
  }
  void ExpectStillWorks() {
    const size_t n = 10007;
    std::vector<float> a(n, 1.0f), b(n, 2.0f);
    ASSERT_EQ(loomGroupStart(), loomSuccess);
    ASSERT_EQ(loomAllReduce(a.data(), a.data(), n, loomFloat32, loomSum, comms_[0], nullptr),
              loomSuccess);
    ASSERT_EQ(loomAllReduce(b.data(), b.data(), n, loomFloat32, loomSum, comms_[1], nullptr),
              loomSuccess);
    ASSERT_EQ(loomGroupEnd(), loomSuccess) << loomGetLastError(NULL);
    for (size_t i = 0; i < n; i++) {
      ASSERT_EQ(a[i], 3.0f) << i;
      ASSERT_EQ(b[i], 3.0f) << i;
    }
  }
  loomComm_t comms_[2] = {nullptr, nullptr};
};

TEST_F(KindCalls, MixedBuffersAreRefusedNamingTheBuffer) {
  const size_t n = 1000;
  std::vector<float> host(n, 1.0f), dev(n, 5.0f);
  FakeDevice f(dev.data(), dev.size() * sizeof(float));
  ExpectRefused(loomAllReduce(host.data(), dev.data(), n, loomFloat32, loomSum, comms_[0], nullptr),
                "recvbuff is CUDA device memory but sendbuff is host memory");
  ExpectRefused(loomAllReduce(dev.data(), host.data(), n, loomFloat32, loomSum, comms_[0], nullptr),
                "sendbuff is CUDA device memory");  // (no executor here serves it at all)
  std::vector<float> gathered(2 * n);
  ExpectRefused(loomAllGather(dev.data(), gathered.data(), n, loomFloat32, comms_[0], nullptr),
                "sendbuff is CUDA device memory");
  ExpectRefused(loomAllGather(host.data(), dev.data(), n / 2, loomFloat32, comms_[0], nullptr),
                "recvbuff is CUDA device memory but sendbuff is host memory");
  for (size_t i = 0; i < n; i++) ASSERT_EQ(host[i], 1.0f) << "a refused call wrote " << i;
  ExpectStillWorks();
}

TEST_F(KindCalls, DeviceMemoryTheStreamCannotServe) {
  const size_t n = 1000;
  std::vector<float> dev(2 * n, 5.0f);
  FakeDevice f(dev.data(), dev.size() * sizeof(float));
  ExpectRefused(loomAllReduce(dev.data(), dev.data(), n, loomFloat32, loomSum, comms_[0], nullptr),
                "sendbuff is CUDA device memory, which a NULL stream cannot serve");
  loomStream_t s = nullptr;
  ASSERT_EQ(loomStreamCreate(&s), loomSuccess);
  ExpectRefused(loomAllReduce(dev.data(), dev.data(), n, loomFloat32, loomSum, comms_[0], s),
                "which a host stream cannot serve");
  ExpectRefused(loomSend(dev.data(), n, loomFloat32, 1, comms_[0], s),
                "sendbuff is CUDA device memory");
  // Broadcast: a non-root's sendbuff is not read, so not classified.
  ExpectRefused(loomBroadcast(dev.data(), dev.data() + n, n, loomFloat32, 1, comms_[0], nullptr),
                "recvbuff is CUDA device memory");
  EXPECT_EQ(loomStreamSynchronize(s), loomSuccess);
  EXPECT_EQ(loomStreamDestroy(s), loomSuccess);
  ExpectStillWorks();
}

}  // namespace
