// test_lines.cc - the low-latency lines family ("lines": all-reduce,
// all-gather, reduce-scatter, broadcast, reduce and all-to-all in one
// exchange through each rank's lines):
// thousands of calls back to back with ranks skewed (a rank that runs ahead
// must never overwrite lines a slow peer still reads), runs of broadcasts
// whose roots run ahead of their readers and of reduces whose other ranks
// run ahead of their roots, every result
// checked; float sums bit for bit the fold in rank order on every rank; and
// the flight recorder shows lines ran where they fit and not where they do
// not. The cover matrices (test_collectives.cc) run every type, op and
// placement through them as through every other family.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

namespace {

using harness::Ctx;
using harness::Mode;
using harness::Opts;

const char* const kLines =
    "allreduce:lines;allgather:lines;reducescatter:lines;broadcast:lines;reduce:lines;"
    "alltoall:lines";

Opts lines_opts() {
  Opts o;
  o.timeout_s = 180;
  o.env.push_back({"LOOM_ALGO", kLines});
  return o;
}

int32_t val(int rank, int call, size_t j) {
  return rank * 100000 + (call % 1000) * 97 + (int32_t)j;
}

using LinesCase = std::tuple<Mode, int>;

class LinesRanks : public ::testing::TestWithParam<LinesCase> {};

// 1500 calls of the six kinds (broadcast and reduce from every root in
// turn), sizes from 4 bytes to 2.4 KB, in place on every third; every 40th
// call one rank sleeps first, so the others run ahead until their reads of
// its lines hold them.
TEST_P(LinesRanks, ManyCallsOnSkewedRanksAllRight) {
  auto [mode, n] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        const int n = c.nranks, r = c.rank;
        std::vector<int32_t> send, recv;
        for (int i = 0; i < 1500; i++) {
          if (i % 40 == 0 && i / 40 % n == r)
            std::this_thread::sleep_for(std::chrono::microseconds(300));
          int kind = i % 6;
          size_t count = 1 + (size_t)(i * 7919) % 600;
          bool in_place = i % 3 == 1;
          bool blocks_in = kind == 2 || kind == 5, blocks_out = kind == 1 || kind == 5;
          if (blocks_in) count = 1 + count / n;  // reduce-scatter, all-to-all: per-rank blocks
          size_t in_n = blocks_in ? count * n : count, out_n = blocks_out ? count * n : count;
          send.assign(std::max(in_n, out_n), 0);
          recv.assign(out_n, -1);
          for (size_t j = 0; j < in_n; j++) send[j] = val(r, i, j);
          loomResult_t res;
          const char* what = kind == 0   ? "all-reduce"
                             : kind == 1 ? "all-gather"
                             : kind == 2 ? "reduce-scatter"
                             : kind == 3 ? "broadcast"
                             : kind == 4 ? "reduce"
                                         : "all-to-all";
          if (kind == 0) {
            int32_t* out = in_place ? send.data() : recv.data();
            res = loomAllReduce(send.data(), out, count, loomInt32, loomSum, c.comm, nullptr);
            ASSERT_EQ(res, loomSuccess) << what << " " << i << ": " << loomGetLastError(c.comm);
            for (size_t j = 0; j < count; j++) {
              int64_t want = 0;
              for (int q = 0; q < n; q++) want += val(q, i, j);
              ASSERT_EQ(out[j], want) << what << " call " << i << " element " << j;
            }
          } else if (kind == 1) {
            std::vector<int32_t> all(count * n, -1);
            for (size_t j = 0; j < count; j++) all[r * count + j] = val(r, i, j);
            const int32_t* in = in_place ? all.data() + r * count : send.data();
            res = loomAllGather(in, all.data(), count, loomInt32, c.comm, nullptr);
            ASSERT_EQ(res, loomSuccess) << what << " " << i << ": " << loomGetLastError(c.comm);
            for (int q = 0; q < n; q++)
              for (size_t j = 0; j < count; j++)
                ASSERT_EQ(all[q * count + j], val(q, i, j))
                    << what << " call " << i << " block " << q << " element " << j;
          } else if (kind == 4) {
            int root = (i / 6 + 1) % n;
            int32_t* out = in_place && r == root ? send.data() : recv.data();
            res = loomReduce(send.data(), out, count, loomInt32, loomSum, root, c.comm, nullptr);
            ASSERT_EQ(res, loomSuccess) << what << " " << i << ": " << loomGetLastError(c.comm);
            for (size_t j = 0; r == root && j < count; j++) {
              int64_t want = 0;
              for (int q = 0; q < n; q++) want += val(q, i, j);
              ASSERT_EQ(out[j], want) << what << " call " << i << " element " << j;
            }
            // The others' inputs are theirs: a reduce never writes them.
            for (size_t j = 0; r != root && j < count; j++)
              ASSERT_EQ(send[j], val(r, i, j)) << what << " call " << i << " element " << j;
          } else if (kind == 5) {
            // Block q of rank r's input: val(r, i, q * count + j), for rank q.
            int32_t* out = in_place ? send.data() : recv.data();
            res = loomAlltoAll(send.data(), out, count, loomInt32, c.comm, nullptr);
            ASSERT_EQ(res, loomSuccess) << what << " " << i << ": " << loomGetLastError(c.comm);
            for (int q = 0; q < n; q++)
              for (size_t j = 0; j < count; j++)
                ASSERT_EQ(out[q * count + j], val(q, i, r * count + j))
                    << what << " call " << i << " block " << q << " element " << j;
          } else if (kind == 3) {
            int root = i / 6 % n;
            int32_t* out = in_place && r == root ? send.data() : recv.data();
            res = loomBroadcast(send.data(), out, count, loomInt32, root, c.comm, nullptr);
            ASSERT_EQ(res, loomSuccess) << what << " " << i << ": " << loomGetLastError(c.comm);
            for (size_t j = 0; j < count; j++)
              ASSERT_EQ(out[j], val(root, i, j)) << what << " call " << i << " element " << j;
          } else {
            int32_t* out = in_place ? send.data() + r * count : recv.data();
            res = loomReduceScatter(send.data(), out, count, loomInt32, loomSum, c.comm, nullptr);
            ASSERT_EQ(res, loomSuccess) << what << " " << i << ": " << loomGetLastError(c.comm);
            for (size_t j = 0; j < count; j++) {
              int64_t want = 0;
              for (int q = 0; q < n; q++) want += val(q, i, r * count + j);
              ASSERT_EQ(out[j], want) << what << " call " << i << " element " << j;
            }
          }
        }
      },
      lines_opts());
}

// Runs of broadcasts, where the root runs up to TP_LINES_AREAS - 2 calls
// ahead of its slowest reader, and of reduces, where every rank but the
// root runs so far ahead of it: 1200 calls in runs of 1 to 24 (the root
// moving every call or staying a while), each run closed by an all-reduce
// or an all-gather, which reuse the areas the runs left behind. In every
// run one rank sleeps at a random call (a broadcast's reader, any rank of a
// reduce), so the others go ahead until what they may overwrite holds them.
// Every element is checked: an area overwritten too early shows as a wrong
// value, a wait that is never met as the harness's timeout.
TEST_P(LinesRanks, RootedRunsGoAheadWithoutOverwritingWhatAPeerStillReads) {
  auto [mode, n] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        const int n = c.nranks, r = c.rank;
        std::vector<int32_t> buf, all;
        uint32_t rng = 12345;  // the same on every rank: the same calls
        auto next = [&rng]() {
          rng = rng * 1103515245u + 12345u;
          return rng >> 16;
        };
        for (int i = 0; i < 1200;) {
          int run = 1 + (int)(next() % 24), stay = (int)(next() % 2), root0 = (int)(next() % n);
          int sleeper = (int)(next() % n), sleep_at = (int)(next() % run);
          bool reduces = next() % 3 == 0;
          for (int k = 0; k < run; k++, i++) {
            int root = stay ? root0 : (root0 + k) % n;
            size_t count = 1 + (size_t)(next() % 700);
            if (r == sleeper && (reduces || r != root) && k == sleep_at)
              std::this_thread::sleep_for(std::chrono::microseconds(500));
            if (reduces) {
              buf.assign(count, 0);
              for (size_t j = 0; j < count; j++) buf[j] = val(r, i, j);
              ASSERT_EQ(loomReduce(buf.data(), buf.data(), count, loomInt32, loomSum, root, c.comm,
                                   nullptr),
                        loomSuccess)
                  << "reduce " << i << ": " << loomGetLastError(c.comm);
              for (size_t j = 0; j < count; j++) {
                int64_t want = val(r, i, j);
                if (r == root) {
                  want = 0;
                  for (int q = 0; q < n; q++) want += val(q, i, j);
                }
                ASSERT_EQ(buf[j], want)
                    << "reduce call " << i << " (root " << root << ") element " << j;
              }
              continue;
            }
            buf.assign(count, -1);
            if (r == root)
              for (size_t j = 0; j < count; j++) buf[j] = val(root, i, j);
            loomResult_t res =
                loomBroadcast(buf.data(), buf.data(), count, loomInt32, root, c.comm, nullptr);
            ASSERT_EQ(res, loomSuccess) << "broadcast " << i << ": " << loomGetLastError(c.comm);
            for (size_t j = 0; j < count; j++)
              ASSERT_EQ(buf[j], val(root, i, j))
                  << "broadcast call " << i << " (root " << root << ") element " << j;
          }
          size_t count = 1 + (size_t)(next() % 300);
          if (next() % 2) {
            buf.assign(count, 0);
            for (size_t j = 0; j < count; j++) buf[j] = val(r, i, j);
            ASSERT_EQ(
                loomAllReduce(buf.data(), buf.data(), count, loomInt32, loomSum, c.comm, nullptr),
                loomSuccess)
                << "all-reduce " << i << ": " << loomGetLastError(c.comm);
            for (size_t j = 0; j < count; j++) {
              int64_t want = 0;
              for (int q = 0; q < n; q++) want += val(q, i, j);
              ASSERT_EQ(buf[j], want) << "all-reduce call " << i << " element " << j;
            }
          } else {
            all.assign(count * n, -1);
            for (size_t j = 0; j < count; j++) all[r * count + j] = val(r, i, j);
            ASSERT_EQ(loomAllGather(all.data() + r * count, all.data(), count, loomInt32, c.comm,
                                    nullptr),
                      loomSuccess)
                << "all-gather " << i << ": " << loomGetLastError(c.comm);
            for (int q = 0; q < n; q++)
              for (size_t j = 0; j < count; j++)
                ASSERT_EQ(all[q * count + j], val(q, i, j))
                    << "all-gather call " << i << " block " << q << " element " << j;
          }
          i++;
        }
      },
      lines_opts());
}

// Float sums are folded in rank order on every rank: bit for bit
// ((x0 + x1) + x2) + ..., whatever rank computes them, for float32 and
// float64 with magnitudes so spread that any other order rounds otherwise.
TEST_P(LinesRanks, FloatSumsAreTheRankOrderFoldOnEveryRank) {
  auto [mode, n] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        const int n = c.nranks;
        const size_t count = 333;
        auto input = [](int q, size_t j) {
          std::mt19937_64 g(q * 1000003u + j);
          double mag = std::ldexp(1.0, (int)(g() % 40) - 20);
          return (double)(g() % 2000001) / 1000000.0 * mag - mag;
        };
        std::vector<float> f(count), fw(count);
        std::vector<double> d(count), dw(count);
        for (size_t j = 0; j < count; j++) {
          f[j] = (float)input(c.rank, j);
          d[j] = input(c.rank, j);
          float fs = (float)input(0, j);
          double ds = input(0, j);
          for (int q = 1; q < n; q++) fs += (float)input(q, j), ds += input(q, j);
          fw[j] = fs;
          dw[j] = ds;
        }
        ASSERT_LOOM_OK(
            loomAllReduce(f.data(), f.data(), count, loomFloat32, loomSum, c.comm, nullptr));
        ASSERT_LOOM_OK(
            loomAllReduce(d.data(), d.data(), count, loomFloat64, loomSum, c.comm, nullptr));
        EXPECT_EQ(std::memcmp(f.data(), fw.data(), count * sizeof(float)), 0);
        EXPECT_EQ(std::memcmp(d.data(), dw.data(), count * sizeof(double)), 0);
      },
      lines_opts());
}

std::string lines_name(const ::testing::TestParamInfo<LinesCase>& info) {
  auto [mode, n] = info.param;
  return std::string(harness::mode_name(mode)) + std::to_string(n);
}

INSTANTIATE_TEST_SUITE_P(Ranks, LinesRanks,
                         ::testing::Values(LinesCase{Mode::Proc, 2}, LinesCase{Mode::Proc, 4},
                                           LinesCase{Mode::Proc, 5}, LinesCase{Mode::Thread, 3}),
                         lines_name);

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// What each rank's flight record says ran: LOOM_ALGO asks for lines, which
// serve the 8-byte all-reduce, a small reduce and all-to-all, and not the
// 64 KiB all-reduce (past what the lines hold: the tuner's choice instead).
TEST(LinesRecord, LinesRunWhereTheyFitAndNowhereElse) {
  // The ranks run this test body again in processes of their own: only the
  // parent makes the directory, which they find in LOOM_DUMP_DIR.
  char dir[] = "/tmp/loom-lines-XXXXXX";
  const char* child_dir = getenv("LOOM_TEST_CHILD") ? getenv("LOOM_DUMP_DIR") : nullptr;
  if (!child_dir) {
    ASSERT_NE(mkdtemp(dir), nullptr);
  }
  const std::string d = child_dir ? child_dir : dir;
  Opts o = lines_opts();
  o.env.push_back({"LOOM_DUMP_DIR", d});
  o.env.push_back({"LOOM_DUMP_SIGNAL", "USR1"});
  harness::run(
      2, Mode::Proc,
      [&d](Ctx& c) {
        std::vector<double> small(1, 1.0), big(8192, 1.0);
        ASSERT_LOOM_OK(
            loomAllReduce(small.data(), small.data(), 1, loomFloat64, loomSum, c.comm, nullptr));
        ASSERT_LOOM_OK(loomAllReduce(big.data(), big.data(), big.size(), loomFloat64, loomSum,
                                     c.comm, nullptr));
        EXPECT_EQ(small[0], 2.0);
        EXPECT_EQ(big[8191], 2.0);
        // A reduce of 3 and an all-to-all of 5 a rank fit the lines too.
        std::vector<double> red(3, 1.0), a2a(10, c.rank), got(10, -1.0);
        ASSERT_LOOM_OK(
            loomReduce(red.data(), red.data(), 3, loomFloat64, loomSum, 1, c.comm, nullptr));
        ASSERT_LOOM_OK(loomAlltoAll(a2a.data(), got.data(), 5, loomFloat64, c.comm, nullptr));
        EXPECT_EQ(red[2], c.rank == 1 ? 2.0 : 1.0);
        EXPECT_EQ(got[0], 0.0);
        EXPECT_EQ(got[9], 1.0);
        raise(SIGUSR1);
        // The record is written by the library's thread: wait for it.
        std::string text;
        for (int t = 0; t < 1000 && text.find("\"t_end_ns\"") == std::string::npos; t++) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          DIR* dd = opendir(d.c_str());
          if (!dd) continue;
          while (dirent* e = readdir(dd)) {
            std::string name = e->d_name;
            if (name.find("-r" + std::to_string(c.rank) + ".json") != std::string::npos &&
                name.find(".tmp") == std::string::npos)
              text = read_file(d + "/" + name);
          }
          closedir(dd);
        }
        ASSERT_NE(text.find("\"t_end_ns\""), std::string::npos) << "no flight record in " << d;
        EXPECT_NE(text.find("\"algo\": \"lines\", \"count\": 1,"), std::string::npos) << text;
        EXPECT_EQ(text.find("\"algo\": \"lines\", \"count\": 8192,"), std::string::npos) << text;
        EXPECT_NE(text.find("\"algo\": \"lines\", \"count\": 3,"), std::string::npos) << text;
        EXPECT_NE(text.find("\"algo\": \"lines\", \"count\": 5,"), std::string::npos) << text;
        EXPECT_NE(text.find("\"count\": 8192,"), std::string::npos) << text;
      },
      o);
  std::string cmd = "rm -rf " + d;
  EXPECT_EQ(system(cmd.c_str()), 0);
}

}  // namespace
