// The registration cache (transport/regcache.h): loomMemAlloc regions are
// found by any range inside them, never by one that leaves them, and a
// freed region's id never comes back; registrations end with their
// communicator.
#include <gtest/gtest.h>

#include <string>

#include "loom.h"

extern "C" unsigned long long probe_region_id(const void* addr, size_t bytes);

TEST(RegCache, RegionsFoundByRangeAndIdsNeverReused) {
  void *a = nullptr, *b = nullptr;
  ASSERT_EQ(loomMemAlloc(&a, 10000), loomSuccess);
  ASSERT_EQ(loomMemAlloc(&b, 100), loomSuccess);
  const char* pa = static_cast<const char*>(a);
  unsigned long long ida = probe_region_id(a, 10000), idb = probe_region_id(b, 1);
  EXPECT_NE(ida, 0u);
  EXPECT_NE(idb, 0u);
  EXPECT_NE(ida, idb);
  EXPECT_EQ(probe_region_id(pa + 5000, 5000), ida);  // inside, to the end
  EXPECT_EQ(probe_region_id(pa + 1, 0), ida);
  // Past the page-rounded end: not inside the region.
  EXPECT_EQ(probe_region_id(pa + 5000, 1u << 20), 0u);
  int local = 0;
  EXPECT_EQ(probe_region_id(&local, sizeof(local)), 0u);
  EXPECT_EQ(probe_region_id(nullptr, 0), 0u);
  EXPECT_EQ(loomMemFree(a), loomSuccess);
  EXPECT_EQ(probe_region_id(a, 1), 0u);
  EXPECT_EQ(loomMemFree(a), loomInvalidArgument);  // twice
  EXPECT_NE(std::string(loomGetLastError(NULL)).find("already freed"), std::string::npos);
  void* c = nullptr;
  ASSERT_EQ(loomMemAlloc(&c, 10000), loomSuccess);
  unsigned long long idc = probe_region_id(c, 1);
  EXPECT_GT(idc, idb) << "a new region gets a new id, even at a reused address";
  EXPECT_EQ(loomMemFree(b), loomSuccess);
  EXPECT_EQ(loomMemFree(c), loomSuccess);
}

TEST(RegCache, RegistrationsEndWithTheirCommunicator) {
  loomComm_t comms[2] = {nullptr, nullptr};
  ASSERT_EQ(loomCommInitAll(comms, 2, nullptr), loomSuccess) << loomGetLastError(NULL);
  static char buf[4][4096];
  void *h0 = nullptr, *h1 = nullptr, *h2 = nullptr, *h3 = nullptr;
  ASSERT_EQ(loomCommRegister(comms[0], buf[0], sizeof(buf[0]), &h0), loomSuccess);
  ASSERT_EQ(loomCommRegister(comms[0], buf[1], sizeof(buf[1]), &h1), loomSuccess);
  ASSERT_EQ(loomCommRegister(comms[1], buf[2], sizeof(buf[2]), &h2), loomSuccess);
  // The same buffer twice on one communicator: two registrations.
  ASSERT_EQ(loomCommRegister(comms[0], buf[0], sizeof(buf[0]), &h3), loomSuccess);
  EXPECT_NE(h0, h3);
  EXPECT_EQ(loomCommDeregister(comms[1], h0), loomInvalidArgument);  // not its own
  EXPECT_NE(std::string(loomGetLastError(NULL)).find("another communicator"), std::string::npos);
  EXPECT_EQ(loomCommDeregister(comms[0], h0), loomSuccess);
  EXPECT_EQ(loomCommDeregister(comms[0], h0), loomInvalidArgument);  // twice
  EXPECT_EQ(loomCommDestroy(comms[0]), loomSuccess);                 // ends h1 and h3
  EXPECT_EQ(loomCommDeregister(comms[1], h2), loomSuccess);
  EXPECT_EQ(loomCommDeregister(comms[1], h1), loomInvalidArgument);  // stale
  EXPECT_EQ(loomCommDestroy(comms[1]), loomSuccess);
}
