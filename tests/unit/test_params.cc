// test_params.cc - the LOOM_* parser: every row's syntax and range, strictly.
#include <gtest/gtest.h>

#include <string>

extern "C" {
#include "core/params.h"
}

namespace {

int Row(const char* env) {
  int n;
  const param_desc* rows = params_table(&n);
  for (int i = 0; i < n; i++)
    if (std::string(rows[i].env) == env) return i;
  ADD_FAILURE() << env << " is not in the table";
  return -1;
}

bool Accepts(const char* env, const char* text) {
  char why[200];
  return params_try(Row(env), text, why, sizeof(why)) == 0;
}

std::string Why(const char* env, const char* text) {
  char why[200] = "";
  EXPECT_NE(params_try(Row(env), text, why, sizeof(why)), 0) << env << "=" << text;
  return why;
}

TEST(ParamsParse, SizesAreDigitsWithABinarySuffix) {
  size_t v = 0;
  EXPECT_EQ(params_parse_size("4M", &v), 0);
  EXPECT_EQ(v, 4u << 20);
  EXPECT_EQ(params_parse_size("12K", &v), 0);
  EXPECT_EQ(v, 12u << 10);
  EXPECT_EQ(params_parse_size("1GiB", &v), 0);
  EXPECT_EQ(v, 1u << 30);
  EXPECT_EQ(params_parse_size("65536", &v), 0);
  EXPECT_EQ(v, 65536u);
  for (const char* bad :
       {"", "abc", "-1", "-4096", " 4M", "4M ", "4 M", "4MM", "4X", "1.5M", "0x10", "+4",
        "18446744073709551616", "18446744073709551615K", "99999999999999T"})
    EXPECT_NE(params_parse_size(bad, &v), 0) << "'" << bad << "'";
}

TEST(ParamsParse, EveryRowRejectsGarbage) {
  int n;
  const param_desc* rows = params_table(&n);
  for (int i = 0; i < n; i++) {
    char why[200];
    if (rows[i].type == PARAM_STR) continue;  // per-row syntax below
    for (const char* bad : {"", "abc", "8x", " 8", "8 ", "1.5", "0x8", "--1"})
      EXPECT_NE(params_try(i, bad, why, sizeof(why)), 0) << rows[i].env << "='" << bad << "'";
  }
}

TEST(ParamsParse, RangesAreEnforced) {
  EXPECT_TRUE(Accepts("LOOM_TIMEOUT_MS", "1"));
  EXPECT_TRUE(Accepts("LOOM_TIMEOUT_MS", "600000"));
  EXPECT_NE(Why("LOOM_TIMEOUT_MS", "0").find("smallest"), std::string::npos);
  EXPECT_NE(Why("LOOM_TIMEOUT_MS", "-5").find("smallest"), std::string::npos);
  EXPECT_NE(Why("LOOM_TIMEOUT_MS", "9223372036854775808").find("not an integer"),
            std::string::npos);
  EXPECT_TRUE(Accepts("LOOM_BUFFSIZE", "4M"));
  EXPECT_TRUE(Accepts("LOOM_BUFFSIZE", "12K"));
  EXPECT_NE(Why("LOOM_BUFFSIZE", "1T").find("largest accepted, 1G"), std::string::npos);
  EXPECT_NE(Why("LOOM_BUFFSIZE", "-1").find("not a size"), std::string::npos);
  EXPECT_NE(Why("LOOM_BUFFSIZE", "18446744073709551615").find("largest"), std::string::npos);
  EXPECT_NE(Why("LOOM_BUFFSIZE", "100").find("smallest"), std::string::npos);
  EXPECT_TRUE(Accepts("LOOM_NSLOTS", "2"));
  EXPECT_TRUE(Accepts("LOOM_NSLOTS", "64"));
  EXPECT_FALSE(Accepts("LOOM_NSLOTS", "1"));
  EXPECT_FALSE(Accepts("LOOM_NSLOTS", "65"));
  EXPECT_FALSE(Accepts("LOOM_NSLOTS", "8x"));
  EXPECT_TRUE(Accepts("LOOM_DIRECT", "0"));
  EXPECT_TRUE(Accepts("LOOM_DIRECT", "1"));
  for (const char* bad : {"yes", "2", "-1", "true", "on"})
    EXPECT_FALSE(Accepts("LOOM_DIRECT", bad));
  EXPECT_TRUE(Accepts("LOOM_SOCKET_NSTREAMS", "16"));
  EXPECT_FALSE(Accepts("LOOM_SOCKET_NSTREAMS", "17"));
  EXPECT_TRUE(Accepts("LOOM_SPIN_COUNT", "-1"));
  EXPECT_FALSE(Accepts("LOOM_SPIN_COUNT", "-2"));
}

TEST(ParamsParse, StringsHaveTheirSyntax) {
  for (const char* ok : {"WARN", "info", "TRACE", "NONE"}) EXPECT_TRUE(Accepts("LOOM_DEBUG", ok));
  for (const char* bad : {"LOUD", "", " INFO", "INFO,WARN"})
    EXPECT_FALSE(Accepts("LOOM_DEBUG", bad));
  for (const char* ok : {"ALL", "INIT,COLL", "^SHM", "init"})
    EXPECT_TRUE(Accepts("LOOM_DEBUG_SUBSYS", ok));
  for (const char* bad : {"INIT,,COLL", "FOO", "INIT,", "^"})
    EXPECT_FALSE(Accepts("LOOM_DEBUG_SUBSYS", bad));
  for (const char* ok : {"", "ring", "allreduce:ring", "allreduce:ring;allgather:rhd"})
    EXPECT_TRUE(Accepts("LOOM_ALGO", ok)) << ok;
  for (const char* bad : {"allreduce:", ":ring", "allreduce:ring;", "ring tree", "a:b:c", ";"})
    EXPECT_FALSE(Accepts("LOOM_ALGO", bad)) << bad;
  for (const char* ok : {"", "shm", "shm,socket"}) EXPECT_TRUE(Accepts("LOOM_TRANSPORTS", ok));
  for (const char* bad : {"shm,,socket", ",shm", "shm socket", "shm;socket"})
    EXPECT_FALSE(Accepts("LOOM_TRANSPORTS", bad)) << bad;
  for (const char* ok : {"", "1", "deadbeef", "0123456789abcdef"})
    EXPECT_TRUE(Accepts("LOOM_SECRET", ok));
  for (const char* bad : {"xyz", "0123456789abcdef0", "12 34", "-1"})
    EXPECT_FALSE(Accepts("LOOM_SECRET", bad)) << bad;
  for (const char* ok : {"", "init:2", "allreduce:0"}) EXPECT_TRUE(Accepts("LOOM_FAULT", ok));
  for (const char* bad : {"init", ":2", "init:x", "init:-1"})
    EXPECT_FALSE(Accepts("LOOM_FAULT", bad));
  // One name: which names are protocols is the tuner's (Tune.ProtoCheck).
  for (const char* ok : {"", "simple", "ll128"}) EXPECT_TRUE(Accepts("LOOM_PROTO", ok));
  for (const char* bad : {"simple,ll", "simple ll", "ll;simple"})
    EXPECT_FALSE(Accepts("LOOM_PROTO", bad)) << bad;
  for (const char* ok : {"auto", "avx2", "scalar"}) EXPECT_TRUE(Accepts("LOOM_CPU_KERNEL", ok));
  EXPECT_FALSE(Accepts("LOOM_CPU_KERNEL", "sse"));
  for (const char* ok : {"", "eth", "^lo,docker", "=eth0"})
    EXPECT_TRUE(Accepts("LOOM_SOCKET_IFNAME", ok));
  for (const char* bad : {"^", "=", "eth,", "eth,,lo"})
    EXPECT_FALSE(Accepts("LOOM_SOCKET_IFNAME", bad));
}

TEST(ParamsParse, AcceptedTextNamesTheRange) {
  char buf[200];
  params_accepted(Row("LOOM_NSLOTS"), buf, sizeof(buf));
  EXPECT_STREQ(buf, "an integer from 2 to 64");
  params_accepted(Row("LOOM_BUFFSIZE"), buf, sizeof(buf));
  EXPECT_NE(std::string(buf).find("from 4K to 1G"), std::string::npos) << buf;
}

TEST(ParamsParse, AgreedSettingsAreTheOnesRanksActOnTogether) {
  std::string names;
  for (int k = 0; k < params_agreed_count(); k++) names += std::string(params_agreed_env(k)) + " ";
  for (const char* env : {"LOOM_ALGO", "LOOM_PROTO", "LOOM_BUFFSIZE", "LOOM_NSLOTS", "LOOM_DIRECT",
                          "LOOM_SLICE_SIZE", "LOOM_TRANSPORTS", "LOOM_HEARTBEAT_MS"})
    EXPECT_NE(names.find(env), std::string::npos) << env;
  EXPECT_LE(params_agreed_count(), PARAMS_AGREED_MAX);
}

}  // namespace
