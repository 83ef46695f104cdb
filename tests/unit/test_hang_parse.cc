// loom_info --hang's reader and diagnosis (tools/loom_hang.c) on records made here: a record
// reads back field by field; every prefix and thousands of random corruptions of it are refused
// with a reason and never read out of bounds (AddressSanitizer runs this); nesting and sizes
// are bounded; and the diagnosis of made-up communicators names the rank that diverged, the
// cycle, and the rank that holds the others back.
#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>

#include <random>
#include <string>
#include <vector>

extern "C" {
#include "loom_hang.h"
}

namespace {

// One op line as the recorder writes it.
std::string Op(int seq, const char* kind, long long count, const char* dtype, int root,
               const char* state, int wait_peer = -1) {
  char buf[1024];
  snprintf(buf, sizeof(buf),
           "{\"call\": %d, \"seq\": %d, \"kind\": \"%s\", \"algo\": \"ring\", \"count\": %lld, "
           "\"dtype\": \"%s\", \"op\": \"sum\", \"root\": %d, \"stream\": \"0\", \"state\": "
           "\"%s\", \"step\": 1, \"nsteps\": 4, \"wait_peer\": %d, \"wait_dir\": \"recv\", "
           "\"wait_bytes\": 4096, \"result\": \"\", \"t_enqueue_ns\": 1795819936938873440, "
           "\"t_start_ns\": 1, \"t_wait_ns\": 2, \"t_end_ns\": 3}",
           seq, seq, kind, count, dtype, root, state, wait_peer);
  return buf;
}

std::string Record(int rank, int nranks, const std::vector<std::string>& ops,
                   const char* comm = "00000000000000ab", int failed_peer = -1) {
  std::string s = "{\"loom_flight_record\": 1, \"comm\": \"" + std::string(comm) +
                  "\", \"name\": \"t\\u0041\\\"q\", \"rank\": " + std::to_string(rank) +
                  ", \"nranks\": " + std::to_string(nranks) +
                  ", \"pid\": 7, \"host\": \"h\", \"time_ns\": 5, \"reason\": \"why\", "
                  "\"failed_peer\": " +
                  std::to_string(failed_peer) + ", \"calls\": 3, \"ops\": [\n";
  for (size_t i = 0; i < ops.size(); i++) s += (i ? ",\n  " : "  ") + ops[i];
  return s + "\n]}\n";
}

bool Parse(const std::string& text, hang_rank* out, std::string* why = nullptr) {
  // A copy of exactly the bytes, so AddressSanitizer sees any read past them.
  std::vector<char> bytes(text.begin(), text.end());
  char w[256];
  int rc = hang_parse(bytes.data(), bytes.size(), out, w, sizeof(w));
  if (why) *why = w;
  return rc == 0;
}

std::string Diagnose(std::vector<hang_rank>& ranks) {
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  hang_diagnose(ranks.data(), (int)ranks.size(), f);
  fclose(f);
  std::string s(buf, len);
  free(buf);
  for (auto& r : ranks) hang_rank_free(&r);
  return s;
}

TEST(HangParse, ReadsARecordBack) {
  hang_rank r;
  std::string why;
  ASSERT_TRUE(Parse(Record(2, 4,
                           {Op(0, "allreduce", 1024, "float32", 0, "done"),
                            Op(1, "broadcast", 8, "int32", 3, "waiting", 1)}),
                    &r, &why))
      << why;
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.nranks, 4);
  EXPECT_STREQ(r.comm, "00000000000000ab");
  EXPECT_STREQ(r.name, "tA\"q");
  ASSERT_EQ(r.nops, 2);
  EXPECT_STREQ(r.ops[1].kind, "broadcast");
  EXPECT_EQ(r.ops[1].root, 3);
  EXPECT_EQ(r.ops[1].wait_peer, 1);
  EXPECT_EQ(r.ops[0].t_enqueue, 1795819936938873440LL);
  hang_rank_free(&r);
}

TEST(HangParse, EveryPrefixIsRefused) {
  std::string text = Record(0, 2, {Op(0, "allreduce", 1024, "float32", 0, "done")});
  size_t end = text.find_last_of('}');
  for (size_t n = 0; n <= end; n++) {
    hang_rank r;
    std::string why;
    EXPECT_FALSE(Parse(text.substr(0, n), &r, &why)) << n;
    EXPECT_FALSE(why.empty()) << n;
  }
}

TEST(HangParse, CorruptionsNeverCrash) {
  std::string text = Record(1, 3,
                            {Op(0, "allreduce", 1024, "float32", 0, "done"),
                             Op(1, "gather", 8, "int8", 2, "waiting", 0)});
  std::mt19937 rng(12345);
  const char junk[] = "{}[],:\"\\0123456789-+.eE tfnu\x01\xff";
  int parsed = 0;
  for (int i = 0; i < 5000; i++) {
    std::string t = text;
    int edits = 1 + (int)(rng() % 4);
    for (int e = 0; e < edits; e++) {
      size_t at = rng() % t.size();
      switch (rng() % 3) {
        case 0:
          t[at] = junk[rng() % (sizeof(junk) - 1)];
          break;
        case 1:
          t.erase(at, 1 + rng() % 8);
          break;
        default:
          t.insert(at, 1, junk[rng() % (sizeof(junk) - 1)]);
      }
    }
    hang_rank r;
    std::string why;
    if (Parse(t, &r, &why)) {
      parsed++;
      EXPECT_GE(r.rank, 0);
      EXPECT_LT(r.rank, r.nranks);
      hang_rank_free(&r);
    } else {
      EXPECT_FALSE(why.empty());
    }
  }
  EXPECT_LT(parsed, 5000);
}

TEST(HangParse, BoundsAndNonRecords) {
  hang_rank r;
  std::string why;
  EXPECT_FALSE(Parse(std::string(100000, '['), &r, &why));
  EXPECT_NE(why.find("nested deeper"), std::string::npos) << why;
  EXPECT_FALSE(Parse("{\"a\": 1}", &r, &why));
  EXPECT_NE(why.find("not a Loom flight record"), std::string::npos) << why;
  EXPECT_FALSE(Parse(Record(5, 4, {}), &r, &why)) << "rank past nranks";
  EXPECT_FALSE(Parse(Record(0, 0, {}), &r, &why));
  EXPECT_FALSE(
      Parse("{\"loom_flight_record\": 1, \"comm\": \"x\", \"rank\": 0, \"nranks\": 1}", &r, &why));
  EXPECT_NE(why.find("ops"), std::string::npos) << why;
  EXPECT_FALSE(Parse(Record(0, 1, {}) + "x", &r, &why));
  EXPECT_FALSE(Parse("\"" + std::string(2 << 20, 'a') + "\"", &r, &why));
  EXPECT_NE(why.find("longer than"), std::string::npos) << why;
  ASSERT_TRUE(Parse(Record(0, 1, {}), &r, &why)) << why;
  EXPECT_EQ(r.nops, 0);
  hang_rank_free(&r);
  // Numbers beyond 64 bits are clamped, not undefined.
  std::string big = Record(0, 1, {Op(0, "allreduce", 1, "float32", 0, "done")});
  big.replace(big.find("\"count\": 1"), 10, "\"count\": 99999999999999999999999");
  ASSERT_TRUE(Parse(big, &r, &why)) << why;
  EXPECT_EQ(r.ops[0].count, INT64_MAX);
  hang_rank_free(&r);
}

TEST(HangDiagnose, NamesTheRankWithAnotherCount) {
  std::vector<hang_rank> rr(3);
  for (int k = 0; k < 3; k++)
    ASSERT_TRUE(Parse(Record(k, 3,
                             {Op(0, "allreduce", 64, "float32", 0, "done"),
                              Op(1, "allreduce", k == 1 ? 65 : 64, "float32", 0, "done"),
                              Op(2, "broadcast", 8, "float32", 0, "done")}),
                      &rr[k]));
  std::string d = Diagnose(rr);
  EXPECT_NE(d.find("diagnosis: rank(s) 1 diverge at collective #1: they called it with another "
                   "count"),
            std::string::npos)
      << d;
}

TEST(HangDiagnose, NamesACycleAndWhoHoldsTheOthersBack) {
  // Ranks 0 and 1 wait on each other in different collectives; rank 2 waits on rank 3, which
  // left every collective after #0.
  std::vector<hang_rank> rr(4);
  ASSERT_TRUE(Parse(Record(0, 4,
                           {Op(0, "allreduce", 64, "float32", 0, "done"),
                            Op(1, "allgather", 64, "float32", 0, "waiting", 1)}),
                    &rr[0]));
  ASSERT_TRUE(Parse(Record(1, 4,
                           {Op(0, "allreduce", 64, "float32", 0, "done"),
                            Op(1, "allgather", 64, "float32", 0, "waiting", 0)}),
                    &rr[1]));
  ASSERT_TRUE(Parse(Record(2, 4,
                           {Op(0, "allreduce", 64, "float32", 0, "done"),
                            Op(1, "allgather", 64, "float32", 0, "waiting", 3)}),
                    &rr[2]));
  ASSERT_TRUE(Parse(Record(3, 4, {Op(0, "allreduce", 64, "float32", 0, "done")}), &rr[3]));
  std::string d = Diagnose(rr);
  EXPECT_NE(d.find("cycle: 0 -> 1 -> 0"), std::string::npos) << d;
  EXPECT_NE(d.find("diagnosis: rank(s) 3 never entered collective #1"), std::string::npos) << d;
}

TEST(HangDiagnose, MissingRankAndTwoCommunicators) {
  std::vector<hang_rank> rr(3);
  ASSERT_TRUE(
      Parse(Record(0, 2, {Op(0, "reduce", 64, "float32", 1, "waiting", 1)}, "a1", 1), &rr[0]));
  ASSERT_TRUE(Parse(Record(0, 2, {Op(0, "allreduce", 64, "float32", 0, "done")}, "b2"), &rr[1]));
  ASSERT_TRUE(Parse(Record(1, 2, {Op(0, "allreduce", 64, "float32", 0, "done")}, "b2"), &rr[2]));
  std::string d = Diagnose(rr);
  EXPECT_NE(d.find("no record from rank(s) 1"), std::string::npos) << d;
  EXPECT_NE(d.find("diagnosis: rank(s) 1 hold the others back in collective #0: no record from "
                   "them (dead, stopped, or unable to write it); the others' error names them"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("diagnosis: no divergence found"), std::string::npos) << d;
}

// Lines plans, where every rank waits on every other, and rank 2 dead: rank 0 was still in
// collective #2, waiting on rank 3, when the failure stopped it; rank 3 had finished #2 and
// waits in #3 on rank 0, as rank 1 does. Rank 0's wait is stale (rank 3 finished #2): what
// holds it is the failure, which names rank 2, so the diagnosis names rank 2, not a cycle.
// (hang_diagnose takes the records: each diagnosis parses them anew.)
std::vector<hang_rank> DeadInLines(int failed_peer) {
  std::vector<hang_rank> rr(3);
  EXPECT_TRUE(Parse(Record(0, 4,
                           {Op(1, "allreduce", 64, "float32", 0, "done"),
                            Op(2, "allreduce", 4096, "float32", 0, "waiting", 3)},
                           "c3", failed_peer),
                    &rr[0]));
  for (int k = 1; k < 3; k++)
    EXPECT_TRUE(Parse(Record(k == 1 ? 1 : 3, 4,
                             {Op(1, "allreduce", 64, "float32", 0, "done"),
                              Op(2, "allreduce", 4096, "float32", 0, "done"),
                              Op(3, "allgather", 256, "float32", 0, "waiting", 0)},
                             "c3", failed_peer),
                      &rr[k]));
  return rr;
}

TEST(HangDiagnose, AWaitEndedByTheFailureIsNoCycle) {
  std::vector<hang_rank> rr = DeadInLines(2);
  std::string d = Diagnose(rr);
  EXPECT_EQ(d.find("cycle:"), std::string::npos) << d;
  EXPECT_NE(d.find("rank 0 waited in collective #2"), std::string::npos) << d;
  EXPECT_NE(d.find("the failure ended the wait (its error names rank 2)"), std::string::npos) << d;
  EXPECT_NE(d.find("diagnosis: rank(s) 2 hold the others back in collectives #2 to #3: no "
                   "record from them (dead, stopped, or unable to write it); the others' error "
                   "names them"),
            std::string::npos)
      << d;
  // Without the failure's name the stale wait leads nowhere: no cycle, and the others wait
  // on rank 0.
  rr = DeadInLines(-1);
  d = Diagnose(rr);
  EXPECT_EQ(d.find("cycle:"), std::string::npos) << d;
  EXPECT_NE(d.find("diagnosis: rank(s) 0 hold the others back"), std::string::npos) << d;
}

// Ranks 0 and 3 wait in #3 on rank 1 (rank 3 on rank3_waits_on), whose record was lost
// (damaged), and their errors name rank 2 as failed: the failure, seen first hand, is named.
std::vector<hang_rank> WaitOnALostRecord(int failed_peer, int rank3_waits_on = 1) {
  std::vector<hang_rank> rr(2);
  for (int k = 0; k < 2; k++)
    EXPECT_TRUE(Parse(
        Record(k == 0 ? 0 : 3, 4,
               {Op(2, "allreduce", 4096, "float32", 0, "done"),
                Op(3, "allgather", 256, "float32", 0, "waiting", k == 0 ? 1 : rank3_waits_on)},
               "c4", failed_peer),
        &rr[k]));
  return rr;
}

TEST(HangDiagnose, TheFailedRankOutweighsAWaitOnAnotherWithoutRecord) {
  std::vector<hang_rank> rr = WaitOnALostRecord(2);
  std::string d = Diagnose(rr);
  EXPECT_NE(d.find("diagnosis: rank(s) 2 hold the others back in collective #3: no record from "
                   "them (dead, stopped, or unable to write it); the others' error names them as "
                   "failed (the waits lead to rank(s) 1, which left no record either)"),
            std::string::npos)
      << d;
  // No failure named: the waits decide.
  rr = WaitOnALostRecord(-1);
  d = Diagnose(rr);
  EXPECT_NE(d.find("diagnosis: rank(s) 1 hold the others back in collective #3: no record from "
                   "them"),
            std::string::npos)
      << d;
}

// As above, but rank 3 waits on rank 2 itself: the waits lead to ranks 1 and 2, neither with a
// record, and the errors name rank 2 (seen in test_hang.sh's damaged-record case under load).
TEST(HangDiagnose, TheFailedRankIsNamedAmongRanksWithoutRecord) {
  std::vector<hang_rank> rr = WaitOnALostRecord(2, 2);
  std::string d = Diagnose(rr);
  EXPECT_NE(d.find("diagnosis: rank(s) 2 hold the others back in collective #3: no record from "
                   "them (dead, stopped, or unable to write it); the others' error names them as "
                   "failed (the waits lead to rank(s) 1, which left no record either)"),
            std::string::npos)
      << d;
}

// Seen in CI: rank 2 dead; rank 3 stopped by the failure in collective #2 before its record
// said on whom it waited (no wait_peer), rank 1 waits on rank 3 in #2 and rank 0 on rank 1 in
// #3. Rank 3's error names rank 2, which left no record: the chain ends there, not at rank 3.
std::vector<hang_rank> StoppedWithoutPeer(int failed_peer) {
  std::vector<hang_rank> rr(3);
  const int ranks[3] = {0, 1, 3};
  for (int k = 0; k < 3; k++) {
    std::vector<std::string> ops = {Op(1, "broadcast", 1024, "float32", 0, "done")};
    if (ranks[k] == 0) {
      ops.push_back(Op(2, "allreduce", 4096, "float32", 0, "done"));
      ops.push_back(Op(3, "allgather", 256, "float32", 0, "waiting", 1));
    } else {
      ops.push_back(Op(2, "allreduce", 4096, "float32", 0, "waiting", ranks[k] == 1 ? 3 : -1));
    }
    EXPECT_TRUE(Parse(Record(ranks[k], 4, ops, "c5", failed_peer), &rr[k]));
  }
  return rr;
}

TEST(HangDiagnose, AWaitWithoutPeerFollowsTheFailure) {
  std::vector<hang_rank> rr = StoppedWithoutPeer(2);
  std::string d = Diagnose(rr);
  EXPECT_NE(d.find("rank 3 is in collective #2"), std::string::npos) << d;
  EXPECT_NE(d.find("stopped by the failure of rank 2 (its error names it)"), std::string::npos)
      << d;
  EXPECT_NE(d.find("diagnosis: rank(s) 2 hold the others back in collectives #2 to #3: no "
                   "record from them (dead, stopped, or unable to write it); the others' error "
                   "names them as failed"),
            std::string::npos)
      << d;
  // No failure named: rank 3 is where the waits end.
  rr = StoppedWithoutPeer(-1);
  d = Diagnose(rr);
  EXPECT_NE(d.find("diagnosis: rank(s) 3 hold the others back"), std::string::npos) << d;
}

}  // namespace
