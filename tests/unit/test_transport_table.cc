// test_transport_table.cc - the transport table has no empty slots: every
// built-in transport's table is complete and of this build's size; a table
// with an empty slot, no memory kinds or another size is refused naming
// what is wrong; the shared stub of an unsupported slot says so.
#include <gtest/gtest.h>

#include <string>

#include "loom.h"

extern "C" {
int probe_builtin_tables(void);
loomResult_t probe_broken_table(int what);
loomResult_t probe_mem_reg_stub(void);
int probe_caps(void);
}

namespace {

TEST(TransportTable, BuiltinTablesAreComplete) {
  EXPECT_EQ(probe_builtin_tables(), -1) << loomGetLastError(NULL);
}

TEST(TransportTable, EmptySlotsAndOtherLayoutsAreRefused) {
  const char* names[] = {"slot idle is empty", "slot mem_reg is empty",
                         "slot caps.mem_kinds is empty", "this build's is"};
  for (int what = 0; what < 4; what++) {
    EXPECT_EQ(probe_broken_table(what), loomInternalError) << what;
    std::string err = loomGetLastError(NULL);
    EXPECT_NE(err.find("transport shm"), std::string::npos) << err;
    EXPECT_NE(err.find(names[what]), std::string::npos) << err;
  }
}

TEST(TransportTable, StubsSayWhatIsUnsupported) {
  EXPECT_EQ(probe_mem_reg_stub(), loomInvalidUsage);
  EXPECT_NE(std::string(loomGetLastError(NULL)).find("registers no memory"), std::string::npos);
}

TEST(TransportTable, Capabilities) {
  // local reads the sender's buffer in place (rendezvous); shm and socket copy
  // it out; all three move host memory.
  EXPECT_EQ(probe_caps(), 1 | 8);
}

}  // namespace
