// test_topo.cc - LOOM_TOPO_FILE's format (docs/topology.md): one fact per
// line, `#` comments, the facts a file gives replacing the probed ones; every
// mistake refused naming the file, the line and what is wrong; what
// loom_info --topo prints reads back as the probed facts themselves.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

extern "C" {
#include "topo/topo.h"
// core/util.h has C atomics: its two functions used here.
uint64_t host_id_of(const char* name);
uint64_t host_id_get(void);
}

namespace {

class TopoFile : public ::testing::Test {
 protected:
  std::string path_ = "/tmp/loomtest-topo-" + std::to_string(getpid()) + ".txt";
  void TearDown() override { unlink(path_.c_str()); }
  void Write(const std::string& text) { std::ofstream(path_) << text; }
  // Reads the file over the probed facts: 0 or -1, with why.
  int Read(topo_facts* f, std::string* why) {
    topo_probe(f);
    char buf[600] = "";
    int r = topo_read(path_.c_str(), f, buf, sizeof(buf));
    *why = buf;
    return r;
  }
};

TEST_F(TopoFile, FactsReplaceTheProbedOnes) {
  Write(
      "# two hosts of one machine\n"
      "\n"
      "host   node-a.example:1   # the grouping name\n"
      "\tcpus 3\n");
  topo_facts probed, f;
  topo_probe(&probed);
  std::string why;
  ASSERT_EQ(Read(&f, &why), 0) << why;
  EXPECT_STREQ(f.host, "node-a.example:1");
  EXPECT_EQ(f.host_id, host_id_of("node-a.example:1"));
  EXPECT_NE(f.host_id, probed.host_id);
  EXPECT_EQ(f.cpus, 3);
  EXPECT_STREQ(f.machine, probed.machine) << "a fact the file does not give is probed";
  EXPECT_EQ(f.machine_id, probed.machine_id);
  EXPECT_EQ(f.given, (unsigned)(TOPO_HOST | TOPO_CPUS));
}

// loom_info --topo's output, given back, is what probing finds: the same
// ids, so ranks that read it and ranks that probe still group alike.
TEST_F(TopoFile, PrintedFactsReadBackAsProbed) {
  topo_facts probed, f;
  topo_probe(&probed);
  FILE* out = fopen(path_.c_str(), "w");
  ASSERT_NE(out, nullptr);
  topo_print(&probed, out);
  fclose(out);
  std::string why;
  ASSERT_EQ(Read(&f, &why), 0) << why;
  EXPECT_EQ(f.host_id, probed.host_id);
  EXPECT_EQ(f.machine_id, probed.machine_id);
  EXPECT_EQ(f.cpus, probed.cpus);
  EXPECT_EQ(f.host_id, host_id_get()) << "the probed id is the id of the printed name";
  EXPECT_EQ(f.given, (unsigned)(TOPO_HOST | TOPO_MACHINE | TOPO_CPUS));
}

TEST_F(TopoFile, EmptyFileGivesNothing) {
  Write("# nothing\n\n");
  topo_facts probed, f;
  topo_probe(&probed);
  std::string why;
  ASSERT_EQ(Read(&f, &why), 0) << why;
  EXPECT_EQ(f.host_id, probed.host_id);
  EXPECT_EQ(f.given, 0u);
}

struct Bad {
  std::string text;
  int line;
  const char* why;
};

TEST_F(TopoFile, MistakesAreRefusedNamingFileAndLine) {
  const Bad bad[] = {
      {"hots a\n", 1, "'hots' is not a fact (accepted: host NAME, machine NAME or cpus N)"},
      {"# ok\nhost\n", 2, "host without a value"},
      {"host a b\n", 1, "host has more than one value ('b')"},
      {"host a\nhost b\n", 2, "host given twice"},
      {"host a=b\n", 1, "host 'a=b' is not a name"},
      {"machine " + std::string(128, 'm') + "\n", 1, "is not a name (1 to 127 characters"},
      {"cpus 0\n", 1, "cpus '0' is not an integer from 1 to 65536"},
      {"cpus 4x\n", 1, "cpus '4x' is not an integer"},
      {"cpus -2\n", 1, "cpus '-2' is not an integer"},
      {"cpus 99999999999999999999\n", 1, "is not an integer"},
      {"host a\n" + std::string(600, ' ') + "\n", 2, "longer than 512 characters"},
      {"HOST a\n", 1, "'HOST' is not a fact"},
  };
  for (const Bad& b : bad) {
    Write(b.text);
    topo_facts f;
    std::string why;
    EXPECT_EQ(Read(&f, &why), -1) << b.text;
    std::string where = path_ + ":" + std::to_string(b.line) + ": ";
    EXPECT_EQ(why.rfind(where, 0), 0u) << "'" << why << "' does not start with " << where;
    EXPECT_NE(why.find(b.why), std::string::npos) << "'" << why << "' lacks '" << b.why << "'";
  }
}

TEST_F(TopoFile, AFileThatCannotBeReadIsNamed) {
  topo_facts f;
  std::string why;
  EXPECT_EQ(Read(&f, &why), -1);  // not written
  EXPECT_NE(why.find(path_ + ": cannot open: No such file"), std::string::npos) << why;
  char dir[] = "/tmp";
  char buf[600];
  topo_probe(&f);
  EXPECT_EQ(topo_read(dir, &f, buf, sizeof(buf)), -1);
  EXPECT_NE(std::string(buf).find("/tmp: cannot read"), std::string::npos) << buf;
}

}  // namespace
