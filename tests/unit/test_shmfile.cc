// test_shmfile.cc - shared-memory objects are made (create, size, map) and
// opened (open, check the size, map) one way (transport/shmfile.h): named
// objects are created exclusively and zeroed, a failed create leaves no
// name of its own but never removes another's, an object too small reads as
// not there yet and one too large as not this one, and the errors name the
// object, the step and the reason.
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "loom.h"

extern "C" {
loomResult_t probe_shm_named_create(const char* name, size_t bytes, void** map_out);
int probe_shm_named_map(const char* name, size_t min_bytes, size_t max_bytes, void** map_out,
                        size_t* bytes_out);
loomResult_t probe_shm_named_open(const char* name, size_t bytes, void** map_out);
int probe_shm_open_peer(size_t bytes, size_t min_bytes, size_t max_bytes);
}

namespace {

std::string test_name(const char* what) {
  return "/loomtest-shmfile-" + std::to_string(getpid()) + "-" + what;
}

bool exists(const std::string& name) {
  return access(("/dev/shm" + name).c_str(), F_OK) == 0;
}

TEST(ShmFileNamed, CreateThenOpenSharesZeroedMemory) {
  const std::string name = test_name("share");
  void* made = nullptr;
  ASSERT_EQ(probe_shm_named_create(name.c_str(), 8192, &made), loomSuccess)
      << loomGetLastError(NULL);
  EXPECT_EQ(((char*)made)[8191], 0);
  ((char*)made)[100] = 7;
  void* opened = nullptr;
  ASSERT_EQ(probe_shm_named_open(name.c_str(), 8192, &opened), loomSuccess)
      << loomGetLastError(NULL);
  EXPECT_EQ(((char*)opened)[100], 7);
  munmap(opened, 8192);
  munmap(made, 8192);
  shm_unlink(name.c_str());
}

TEST(ShmFileNamed, CreateOfAnExistingNameFailsAndLeavesIt) {
  const std::string name = test_name("exists");
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  void* p = nullptr;
  EXPECT_EQ(probe_shm_named_create(name.c_str(), 4096, &p), loomSystemError);
  std::string err = loomGetLastError(NULL);
  const std::string pieces[] = {"the test object", "/dev/shm" + name, "shm_open failed",
                                strerror(EEXIST)};
  for (const std::string& piece : pieces)
    EXPECT_NE(err.find(piece), std::string::npos) << "'" << err << "' lacks '" << piece << "'";
  EXPECT_TRUE(exists(name)) << "a create that failed removed a name it had not made";
  shm_unlink(name.c_str());
}

// Sizes: smaller than the least is "not there yet" (its creator is between
// shm_open and ftruncate), larger than the most is "not this one".
TEST(ShmFileNamed, MapChecksTheSize) {
  const std::string name = test_name("size");
  void* p = nullptr;
  size_t got = 0;
  EXPECT_EQ(probe_shm_named_map(name.c_str(), 1, 1 << 20, &p, &got), ENOENT);
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(probe_shm_named_map(name.c_str(), 1, 1 << 20, &p, &got), ENOENT) << "not sized yet";
  ASSERT_EQ(ftruncate(fd, 16384), 0);
  close(fd);
  EXPECT_EQ(probe_shm_named_map(name.c_str(), 1, 8192, &p, &got), EINVAL);
  ASSERT_EQ(probe_shm_named_map(name.c_str(), 4096, 16384, &p, &got), 0);
  EXPECT_EQ(got, 16384u);
  munmap(p, got);
  EXPECT_EQ(probe_shm_named_open(name.c_str(), 8192, &p), loomSystemError);
  std::string err = loomGetLastError(NULL);
  EXPECT_NE(err.find("/dev/shm" + name), std::string::npos) << err;
  EXPECT_NE(err.find("larger than it must be"), std::string::npos) << err;
  shm_unlink(name.c_str());
  EXPECT_EQ(probe_shm_named_open(name.c_str(), 8192, &p), loomSystemError);
  EXPECT_NE(std::string(loomGetLastError(NULL)).find("missing"), std::string::npos);
}

TEST(ShmFileUnnamed, OpenPeerChecksTheSize) {
  EXPECT_EQ(probe_shm_open_peer(8192, 4096, 8192), 0);
  EXPECT_EQ(probe_shm_open_peer(8192, 16384, 32768), EINVAL) << "smaller than the least";
  EXPECT_EQ(probe_shm_open_peer(8192, 1, 4096), EINVAL) << "larger than the most";
}

}  // namespace
