// The plain-data description of a connection's FIFO (transport.h's
// fifo_describe): a probe drives one end from the description alone, as a
// kernel would, against the transport's code at the other end.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "loom.h"

extern "C" {
int probe_fifo_desc_shm(loomComm_t c0, loomComm_t c1, char* msg, char* got, size_t cap, char* why,
                        size_t len);
loomResult_t probe_fifo_desc_socket(void);
}

TEST(FifoDesc, ShmDrivenFromItsDescriptionBothWays) {
  // Read before the library parses its settings: thread ranks over shm.
  setenv("LOOM_TRANSPORTS", "shm", 1);
  loomComm_t comms[2] = {nullptr, nullptr};
  ASSERT_EQ(loomCommInitAll(comms, 2, nullptr), loomSuccess) << loomGetLastError(NULL);
  std::vector<char> msg(8 << 20), got(8 << 20);
  char why[200] = "";
  EXPECT_EQ(
      probe_fifo_desc_shm(comms[0], comms[1], msg.data(), got.data(), msg.size(), why, sizeof(why)),
      0)
      << why;
  for (loomComm_t c : comms) EXPECT_EQ(loomCommDestroy(c), loomSuccess);
}

TEST(FifoDesc, SocketSaysItHasNone) {
  EXPECT_EQ(probe_fifo_desc_socket(), loomInvalidUsage);
  std::string err = loomGetLastError(NULL);
  EXPECT_NE(err.find("no FIFO in memory"), std::string::npos) << err;
}
