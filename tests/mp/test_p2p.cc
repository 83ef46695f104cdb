// test_p2p.cc - point-to-point: loomSend/loomRecv between every pair for
// every datatype, byte for byte; groups (rings, all-to-all orders that
// deadlock without a group, sends to self, several messages to one peer, a
// collective inside, nesting); a size mismatch that must fail fast and name
// the peer; count 0 as a no-op; loomGroupEnd without loomGroupStart.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "harness.h"

namespace {

using harness::Ctx;
using harness::Mode;
using harness::Opts;

const loomDataType_t kAllTypes[] = {loomInt8,    loomUint8,    loomInt32,      loomUint32,
                                    loomInt64,   loomUint64,   loomFloat16,    loomFloat32,
                                    loomFloat64, loomBfloat16, loomFloat8e4m3, loomFloat8e5m2};

constexpr size_t kMiB = 1u << 20;
// More than a connection's FIFO (LOOM_BUFFSIZE, 4 MiB by default), so a
// blocking send of this size cannot finish before its receive is posted.
constexpr size_t kBig = 16 * kMiB;

// Random bytes, the same on every rank (a fixed seed): a sender sends a
// window of it, the receiver compares with the same window. Random bytes
// include NaN and other special float codes, which must travel unchanged.
const unsigned char* pattern() {
  static const std::vector<unsigned char> bytes = [] {
    std::vector<unsigned char> v(kBig + 2 * kMiB);  // a window starts below 1 MiB
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < v.size(); i += 8) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      memcpy(&v[i], &x, std::min<size_t>(8, v.size() - i));
    }
    return v;
  }();
  return bytes.data();
}

// Where in the pattern the message (tag) from src to dst starts: different
// for every message, so a message delivered to the wrong place, or not at
// all, shows.
size_t window(int src, int dst, int tag, size_t esize) {
  uint64_t h = (uint64_t)src * 1000003u + (uint64_t)dst * 10007u + (uint64_t)tag * 101u + 17u;
  h ^= h >> 11;
  h *= 0x2545f4914f6cdd1dull;
  return (size_t)(h % (kMiB / 8)) * esize;  // aligned to the element
}

// A receive buffer of bytes + a guard tail, filled with a poison byte.
std::vector<unsigned char> poisoned(size_t bytes) {
  return std::vector<unsigned char>(bytes + 64, 0xA5);
}

// Checks buf[0, bytes) against the pattern window and that the guard tail is
// untouched. Reports the first wrong byte.
void expect_window(const std::vector<unsigned char>& buf, size_t bytes, size_t off,
                   const std::string& what) {
  const unsigned char* want = pattern() + off;
  if (memcmp(buf.data(), want, bytes) != 0) {
    size_t i = 0;
    while (i < bytes && buf[i] == want[i]) i++;
    ADD_FAILURE() << what << ": first wrong byte " << i << " of " << bytes << " (got "
                  << (int)buf[i] << ", want " << (int)want[i] << ")";
  }
  for (size_t i = bytes; i < buf.size(); i++)
    if (buf[i] != 0xA5) {
      ADD_FAILURE() << what << ": wrote past the end of the receive buffer (byte " << i << ")";
      break;
    }
}

std::string where(const Ctx& c) {
  return "rank " + std::to_string(c.rank) + "/" + std::to_string(c.nranks) + " (" +
         harness::mode_name(c.mode) + ")";
}

Opts p2p_opts() {
  Opts o;
  o.timeout_s = 120;
  o.comm_timeout_ms = 30000;  // a deadlock becomes an error, not a hang
  return o;
}

// Ends a body as a program should end before loomCommDestroy (which the
// harness calls): once loomCommFinalize returns, no peer needs this rank any
// more. Without it, a rank whose last call was a send that fit in the FIFO
// may destroy its communicator before the receiver has attached; that is
// supported (see SendThenDestroy), but these tests check data, not teardown.
void end_cleanly(const Ctx& c) {
  if (!::testing::Test::HasFatalFailure()) EXPECT_LOOM_OK(loomCommFinalize(c.comm));
}

// A barrier outside Loom (a file that each rank appends one byte to), for
// ordering ranks without the communicator under test. Bounded: false when
// not every rank arrived in time.
bool oob_barrier(const Ctx& c, const char* tag) {
  std::string path = c.id_file + "." + tag + ".bar";
  int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_APPEND, 0600);
  if (fd < 0) return false;
  char one = 1;
  bool ok = write(fd, &one, 1) == 1;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  struct stat st;
  while (ok && fstat(fd, &st) == 0 && st.st_size < c.nranks) {
    if (std::chrono::steady_clock::now() > end) ok = false;
    usleep(1000);
  }
  // Everyone has opened the file once it reached nranks bytes: a second
  // byte each, and whoever sees 2 * nranks removes it.
  if (ok && write(fd, &one, 1) == 1 && fstat(fd, &st) == 0 && st.st_size >= 2 * c.nranks)
    unlink(path.c_str());
  close(fd);
  return ok;
}

// A one-way signal outside Loom (a file), so that a sender keeps its
// communicator until the receiver is done with it (a sender that destroys
// its communicator before the receiver attached loses the message: see
// SendThenDestroy below).
std::string oob_path(const Ctx& c, const char* tag) {
  return c.id_file + "." + tag + ".sig";
}

void oob_post(const Ctx& c, const char* tag) {
  int fd = open(oob_path(c, tag).c_str(), O_CREAT | O_WRONLY, 0600);
  if (fd >= 0) close(fd);
}

// Waits (bounded) for oob_post and removes the mark.
bool oob_wait(const Ctx& c, const char* tag) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  struct stat st;
  while (stat(oob_path(c, tag).c_str(), &st) != 0) {
    if (std::chrono::steady_clock::now() > end) return false;
    usleep(1000);
  }
  unlink(oob_path(c, tag).c_str());
  return true;
}

using harness::RanksMode;

// ---- Every pair, every datatype, without groups --------------------------------

class P2PPairs : public ::testing::TestWithParam<RanksMode> {};

// For each (count, datatype), every ordered pair in turn: the source sends
// with loomSend, the destination receives with loomRecv, the other ranks
// wait for the next pair. Byte-exact, the guard tail untouched, the send
// buffer unchanged.
TEST_P(P2PPairs, EveryPairEveryDatatype) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        const size_t counts[] = {1, 1000, kMiB + 3};
        std::vector<unsigned char> send_copy;
        int tag = 0;
        for (size_t count : counts)
          for (loomDataType_t t : kAllTypes) {
            size_t es = shim::dtype_size(t);
            size_t bytes = count * es;
            std::vector<unsigned char> recv;
            for (int s = 0; s < c.nranks; s++)
              for (int d = 0; d < c.nranks; d++) {
                if (s == d) continue;
                size_t off = window(s, d, tag, es);
                if (c.rank == s) {
                  ASSERT_LOOM_OK(loomSend(pattern() + off, count, t, d, c.comm, nullptr));
                } else if (c.rank == d) {
                  recv = poisoned(bytes);
                  ASSERT_LOOM_OK(loomRecv(recv.data(), count, t, s, c.comm, nullptr));
                  expect_window(recv, bytes, off,
                                where(c) + " from " + std::to_string(s) + " " +
                                    shim::dtype_name(t) + " count " + std::to_string(count));
                  if (::testing::Test::HasFailure()) return;
                }
              }
            tag++;
          }
        end_cleanly(c);
      },
      p2p_opts());
}

INSTANTIATE_TEST_SUITE_P(Ranks, P2PPairs,
                         ::testing::Combine(::testing::Values(2, 3, 4, 5, 8),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         harness::ranks_mode_name);

// ---- Groups --------------------------------------------------------------------

class P2PGroup : public ::testing::TestWithParam<RanksMode> {};

// Each rank sends to the next and receives from the previous, inside one
// group; with one rank, that is a send to itself.
TEST_P(P2PGroup, Ring) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        int next = (c.rank + 1) % c.nranks, prev = (c.rank + c.nranks - 1) % c.nranks;
        int tag = 0;
        for (int big = 0; big < 4; big++)
          for (loomDataType_t t : {loomInt8, loomFloat32, loomFloat64}) {
            size_t es = shim::dtype_size(t);
            // 1, 1000, 2^20 + 3 elements, and 8 MiB + 1 element (over the FIFO).
            const size_t counts[] = {1, 1000, kMiB + 3, kBig / 2 / es + 1};
            size_t count = counts[big];
            std::vector<unsigned char> recv = poisoned(count * es);
            ASSERT_LOOM_OK(loomGroupStart());
            ASSERT_LOOM_OK(loomSend(pattern() + window(c.rank, next, tag, es), count, t, next,
                                    c.comm, nullptr));
            ASSERT_LOOM_OK(loomRecv(recv.data(), count, t, prev, c.comm, nullptr));
            ASSERT_LOOM_OK(loomGroupEnd());
            expect_window(
                recv, count * es, window(prev, c.rank, tag, es),
                where(c) + " ring " + shim::dtype_name(t) + " count " + std::to_string(count));
            tag++;
          }
        end_cleanly(c);
      },
      p2p_opts());
}

// Every rank first sends 16 MiB to every other rank, then receives from
// each: without a group every rank would block in its first send.
TEST_P(P2PGroup, AllSendsBeforeAllReceives) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        std::vector<std::vector<unsigned char>> recv((size_t)c.nranks);
        ASSERT_LOOM_OK(loomGroupStart());
        for (int k = 1; k < c.nranks; k++) {
          int d = (c.rank + k) % c.nranks;
          ASSERT_LOOM_OK(
              loomSend(pattern() + window(c.rank, d, 0, 1), kBig, loomUint8, d, c.comm, nullptr));
        }
        for (int k = 1; k < c.nranks; k++) {
          int s = (c.rank + c.nranks - k) % c.nranks;
          recv[(size_t)s] = poisoned(kBig);
          ASSERT_LOOM_OK(loomRecv(recv[(size_t)s].data(), kBig, loomUint8, s, c.comm, nullptr));
        }
        ASSERT_LOOM_OK(loomGroupEnd());
        for (int s = 0; s < c.nranks; s++)
          if (s != c.rank)
            expect_window(recv[(size_t)s], kBig, window(s, c.rank, 0, 1),
                          where(c) + " from " + std::to_string(s));
        end_cleanly(c);
      },
      p2p_opts());
}

// The receives posted before the sends, in the opposite peer order.
TEST_P(P2PGroup, AllReceivesBeforeAllSends) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        const size_t bytes = kBig / 2 + 5;
        std::vector<std::vector<unsigned char>> recv((size_t)c.nranks);
        ASSERT_LOOM_OK(loomGroupStart());
        for (int s = c.nranks - 1; s >= 0; s--) {
          if (s == c.rank) continue;
          recv[(size_t)s] = poisoned(bytes);
          ASSERT_LOOM_OK(loomRecv(recv[(size_t)s].data(), bytes, loomInt8, s, c.comm, nullptr));
        }
        for (int d = 0; d < c.nranks; d++)
          if (d != c.rank)
            ASSERT_LOOM_OK(
                loomSend(pattern() + window(c.rank, d, 1, 1), bytes, loomInt8, d, c.comm, nullptr));
        ASSERT_LOOM_OK(loomGroupEnd());
        for (int s = 0; s < c.nranks; s++)
          if (s != c.rank)
            expect_window(recv[(size_t)s], bytes, window(s, c.rank, 1, 1),
                          where(c) + " from " + std::to_string(s));
        end_cleanly(c);
      },
      p2p_opts());
}

// A send to itself inside a group, small and larger than the FIFO, with the
// receive posted before and after the send.
TEST_P(P2PGroup, SendToSelf) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        int tag = 0;
        for (size_t bytes : {(size_t)1, (size_t)4096, kBig + 8})
          for (bool recv_first : {false, true}) {
            // Whole 8-byte words as uint64, else bytes.
            loomDataType_t t = bytes % 8 ? loomUint8 : loomUint64;
            size_t count = bytes / shim::dtype_size(t);
            std::vector<unsigned char> recv = poisoned(bytes);
            size_t off = window(c.rank, c.rank, tag, 8);
            ASSERT_LOOM_OK(loomGroupStart());
            if (recv_first)
              ASSERT_LOOM_OK(loomRecv(recv.data(), count, t, c.rank, c.comm, nullptr));
            ASSERT_LOOM_OK(loomSend(pattern() + off, count, t, c.rank, c.comm, nullptr));
            if (!recv_first)
              ASSERT_LOOM_OK(loomRecv(recv.data(), count, t, c.rank, c.comm, nullptr));
            ASSERT_LOOM_OK(loomGroupEnd());
            expect_window(recv, bytes, off,
                          where(c) + " self " + std::to_string(bytes) + " bytes" +
                              (recv_first ? " (receive first)" : ""));
            tag++;
          }
        end_cleanly(c);
      },
      p2p_opts());
}

// Several sends to the same peer in one group arrive in the order they were
// posted, matched one by one with the peer's receives in their order. One
// message in the middle is larger than the FIFO.
TEST_P(P2PGroup, SeveralSendsToOnePeerInOrder) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        int next = (c.rank + 1) % c.nranks, prev = (c.rank + c.nranks - 1) % c.nranks;
        const size_t sizes[] = {4000, 4000, 4, 6 * kMiB + 4, 4000, 4000, 12, 4000};  // bytes
        const int k = (int)(sizeof(sizes) / sizeof(sizes[0]));
        std::vector<std::vector<unsigned char>> recv((size_t)k);
        ASSERT_LOOM_OK(loomGroupStart());
        for (int i = 0; i < k; i++) {  // receives first, so they wait for the sends
          recv[(size_t)i] = poisoned(sizes[i]);
          ASSERT_LOOM_OK(
              loomRecv(recv[(size_t)i].data(), sizes[i] / 4, loomInt32, prev, c.comm, nullptr));
        }
        for (int i = 0; i < k; i++)
          ASSERT_LOOM_OK(loomSend(pattern() + window(c.rank, next, 100 + i, 4), sizes[i] / 4,
                                  loomInt32, next, c.comm, nullptr));
        ASSERT_LOOM_OK(loomGroupEnd());
        for (int i = 0; i < k; i++)
          expect_window(recv[(size_t)i], sizes[i], window(prev, c.rank, 100 + i, 4),
                        where(c) + " message " + std::to_string(i));
        end_cleanly(c);
      },
      p2p_opts());
}

// A collective and sends/receives in one group. The messages are larger
// than the FIFO, so a send that had to finish before the rest of the group
// started would deadlock. order 0: collective, send, receive; 1: receive,
// send, collective; 2: send, collective, receive.
void collective_and_p2p(const Ctx& c, int order) {
  int next = (c.rank + 1) % c.nranks, prev = (c.rank + c.nranks - 1) % c.nranks;
  const size_t bytes = 6 * kMiB;
  const size_t count = 100003;
  std::vector<int64_t> v(count);
  for (size_t i = 0; i < count; i++) v[i] = (int64_t)(c.rank + 1) * (int64_t)(i % 97);
  std::vector<unsigned char> recv = poisoned(bytes);
  const void* src = pattern() + window(c.rank, next, order, 1);
  auto allreduce = [&] {
    return loomAllReduce(v.data(), v.data(), count, loomInt64, loomSum, c.comm, nullptr);
  };
  ASSERT_LOOM_OK(loomGroupStart());
  if (order == 0) {
    ASSERT_LOOM_OK(allreduce());
    ASSERT_LOOM_OK(loomSend(src, bytes, loomUint8, next, c.comm, nullptr));
    ASSERT_LOOM_OK(loomRecv(recv.data(), bytes, loomUint8, prev, c.comm, nullptr));
  } else if (order == 1) {
    ASSERT_LOOM_OK(loomRecv(recv.data(), bytes, loomUint8, prev, c.comm, nullptr));
    ASSERT_LOOM_OK(loomSend(src, bytes, loomUint8, next, c.comm, nullptr));
    ASSERT_LOOM_OK(allreduce());
  } else {
    ASSERT_LOOM_OK(loomSend(src, bytes, loomUint8, next, c.comm, nullptr));
    ASSERT_LOOM_OK(allreduce());
    ASSERT_LOOM_OK(loomRecv(recv.data(), bytes, loomUint8, prev, c.comm, nullptr));
  }
  ASSERT_LOOM_OK(loomGroupEnd());
  const int64_t tri = (int64_t)c.nranks * (c.nranks + 1) / 2;
  for (size_t i = 0; i < count; i++)
    ASSERT_EQ(v[i], tri * (int64_t)(i % 97)) << where(c) << " order " << order << " element " << i;
  expect_window(recv, bytes, window(prev, c.rank, order, 1),
                where(c) + " order " + std::to_string(order));
  end_cleanly(c);
}

TEST_P(P2PGroup, CollectiveThenP2P) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode, [](Ctx& c) { collective_and_p2p(c, 0); }, p2p_opts());
}

TEST_P(P2PGroup, P2PThenCollective) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode, [](Ctx& c) { collective_and_p2p(c, 1); }, p2p_opts());
}

// A send, a collective, then the matching receive, in one group (even to
// self). API.md: sends and receives inside one group never deadlock whatever
// their order. Point-to-point traffic runs in its own lane, side by side with
// the collectives, so this must complete.
TEST_P(P2PGroup, CollectiveBetweenSendAndRecv) {
  auto [n, mode] = GetParam();
  Opts o = p2p_opts();
  o.comm_timeout_ms = 5000;
  harness::run(
      n, mode, [](Ctx& c) { collective_and_p2p(c, 2); }, o);
}

// Nested groups issue nothing until the outermost loomGroupEnd: the
// innermost group holds only the sends (larger than the FIFO), which would
// block every rank if an inner end issued them; the middle one the
// receives; the outer one a collective.
TEST_P(P2PGroup, NestedGroups) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        int next = (c.rank + 1) % c.nranks, prev = (c.rank + c.nranks - 1) % c.nranks;
        std::vector<unsigned char> recv = poisoned(kBig);
        std::vector<int32_t> v(1000, c.rank + 1);
        ASSERT_LOOM_OK(loomGroupStart());
        ASSERT_LOOM_OK(loomGroupStart());
        ASSERT_LOOM_OK(loomGroupStart());
        ASSERT_LOOM_OK(loomSend(pattern() + window(c.rank, next, 7, 1), kBig, loomUint8, next,
                                c.comm, nullptr));
        ASSERT_LOOM_OK(loomGroupEnd());
        ASSERT_LOOM_OK(loomRecv(recv.data(), kBig, loomUint8, prev, c.comm, nullptr));
        ASSERT_LOOM_OK(loomGroupEnd());
        ASSERT_LOOM_OK(
            loomAllReduce(v.data(), v.data(), v.size(), loomInt32, loomSum, c.comm, nullptr));
        ASSERT_LOOM_OK(loomGroupEnd());
        expect_window(recv, kBig, window(prev, c.rank, 7, 1), where(c) + " nested");
        for (int32_t x : v) ASSERT_EQ(x, c.nranks * (c.nranks + 1) / 2);
        // A group with nothing in it is fine too.
        ASSERT_LOOM_OK(loomGroupStart());
        ASSERT_LOOM_OK(loomGroupEnd());
        end_cleanly(c);
      },
      p2p_opts());
}

// count 0 is a valid no-op: it returns at once with nothing posted on the
// peer, NULL buffers allowed, and it is not matched with a later real
// message (which would then see a size mismatch).
TEST_P(P2PGroup, CountZeroIsNoOp) {
  auto [n, mode] = GetParam();
  Opts o = p2p_opts();
  o.comm_timeout_ms = 10000;
  harness::run(
      n, mode,
      [](Ctx& c) {
        int next = (c.rank + 1) % c.nranks, prev = (c.rank + c.nranks - 1) % c.nranks;
        // Nobody posts anything to match these.
        ASSERT_LOOM_OK(loomSend(nullptr, 0, loomFloat32, next, c.comm, nullptr));
        ASSERT_LOOM_OK(loomRecv(nullptr, 0, loomFloat32, prev, c.comm, nullptr));
        ASSERT_LOOM_OK(loomGroupStart());
        ASSERT_LOOM_OK(loomSend(nullptr, 0, loomInt64, c.rank, c.comm, nullptr));
        ASSERT_LOOM_OK(loomRecv(nullptr, 0, loomInt64, c.rank, c.comm, nullptr));
        ASSERT_LOOM_OK(loomSend(nullptr, 0, loomInt64, next, c.comm, nullptr));
        ASSERT_LOOM_OK(loomGroupEnd());
        // A real ring exchange afterwards matches only the real messages.
        std::vector<unsigned char> recv = poisoned(4000);
        ASSERT_LOOM_OK(loomGroupStart());
        ASSERT_LOOM_OK(loomSend(nullptr, 0, loomInt32, next, c.comm, nullptr));
        ASSERT_LOOM_OK(loomSend(pattern() + window(c.rank, next, 3, 4), 1000, loomInt32, next,
                                c.comm, nullptr));
        ASSERT_LOOM_OK(loomRecv(recv.data(), 1000, loomInt32, prev, c.comm, nullptr));
        ASSERT_LOOM_OK(loomGroupEnd());
        expect_window(recv, 4000, window(prev, c.rank, 3, 4), where(c) + " after count 0");
        end_cleanly(c);
      },
      o);
}

// The same inside rank processes and threads, with a communicator in use
// before and after.
TEST_P(P2PGroup, EndWithoutStartThenWork) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        EXPECT_EQ(loomGroupEnd(), loomInvalidUsage);
        int next = (c.rank + 1) % c.nranks, prev = (c.rank + c.nranks - 1) % c.nranks;
        std::vector<unsigned char> recv = poisoned(64);
        ASSERT_LOOM_OK(loomGroupStart());
        ASSERT_LOOM_OK(
            loomSend(pattern() + window(c.rank, next, 9, 1), 64, loomInt8, next, c.comm, nullptr));
        ASSERT_LOOM_OK(loomRecv(recv.data(), 64, loomInt8, prev, c.comm, nullptr));
        ASSERT_LOOM_OK(loomGroupEnd());
        expect_window(recv, 64, window(prev, c.rank, 9, 1), where(c));
        EXPECT_EQ(loomGroupEnd(), loomInvalidUsage);
        end_cleanly(c);
      },
      p2p_opts());
}

INSTANTIATE_TEST_SUITE_P(Ranks, P2PGroup,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 8),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         harness::ranks_mode_name);

// ---- Errors --------------------------------------------------------------------

// The sender sends more (or fewer) bytes than the receiver expects. The
// receiver must fail, not hang, before its comm timeout would have passed,
// and the message must name the peer. What the sender sees is not
// specified (its data may already sit in the FIFO); it must not hang either.
class P2PMismatch : public ::testing::TestWithParam<std::tuple<int, Mode, bool>> {};

TEST_P(P2PMismatch, ReceiverFailsNamingThePeer) {
  auto [n, mode, more] = GetParam();
  Opts o = p2p_opts();
  o.timeout_s = 60;
  o.comm_timeout_ms = 3000;
  harness::run(
      n, mode,
      [more = more](Ctx& c) {
        const int src = c.nranks - 1, dst = 0;  // not (0, 1): the peer's number must be right
        const size_t expect = 1000, sent = more ? 2000 : 500;
        std::vector<int32_t> buf(std::max(expect, sent), 7);
        if (c.rank == src) {
          loomResult_t r = loomSend(buf.data(), sent, loomInt32, dst, c.comm, nullptr);
          if (r != loomSuccess) {
            EXPECT_STRNE(loomGetLastError(NULL), "") << "a failure must be explained";
          }
          EXPECT_TRUE(oob_wait(c, "received"));
        } else if (c.rank == dst) {
          loomResult_t r = loomRecv(buf.data(), expect, loomInt32, src, c.comm, nullptr);
          EXPECT_NE(r, loomSuccess)
              << "a receive of " << expect << " elements matched a send of " << sent;
          EXPECT_NE(r, loomInProgress);
          EXPECT_NE(r, loomTimeout) << "the mismatch was not detected; the receive waited out its "
                                       "timeout: "
                                    << loomGetLastError(NULL);
          std::string why = loomGetLastError(NULL);
          EXPECT_NE(why.find("peer " + std::to_string(src)), std::string::npos)
              << "the message must name the peer: " << why;
          // The communicator is in error afterwards (API.md: the communicator
          // is then in error) or at least says why it failed.
          loomResult_t async = loomSuccess;
          EXPECT_LOOM_OK(loomCommGetAsyncError(c.comm, &async));
          EXPECT_STRNE(loomGetLastError(c.comm), "");
          oob_post(c, "received");
        }
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(Ranks, P2PMismatch,
                         ::testing::Combine(::testing::Values(2, 3),
                                            ::testing::Values(Mode::Proc, Mode::Thread),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<P2PMismatch::ParamType>& i) {
                           return std::string(harness::mode_name(std::get<1>(i.param))) +
                                  std::to_string(std::get<0>(i.param)) +
                                  (std::get<2>(i.param) ? "_more" : "_fewer");
                         });

// loomGroupEnd without loomGroupStart is loomInvalidUsage and explains
// itself; it leaves the group state sound for a following group.
TEST(P2PGroupUsage, EndWithoutStart) {
  EXPECT_EQ(loomGroupEnd(), loomInvalidUsage);
  EXPECT_STRNE(loomGetLastError(NULL), "");
  ASSERT_LOOM_OK(loomGroupStart());
  ASSERT_LOOM_OK(loomGroupEnd());
  EXPECT_EQ(loomGroupEnd(), loomInvalidUsage) << "one start allows one end";
  ASSERT_LOOM_OK(loomGroupStart());
  ASSERT_LOOM_OK(loomGroupStart());
  ASSERT_LOOM_OK(loomGroupEnd());
  ASSERT_LOOM_OK(loomGroupEnd());
  EXPECT_EQ(loomGroupEnd(), loomInvalidUsage);
}

// ---- Teardown right after point-to-point (bugs) ---------------------------------

// A send that fits in the FIFO, then loomCommDestroy before the receiver has
// attached: the receiver must still get the data (the sender leaves the FIFO's
// name for its receiver).
TEST(P2PTeardown, SendThenDestroy) {
  Opts o;
  o.timeout_s = 60;
  o.comm_timeout_ms = 5000;
  harness::run(
      2, Mode::Proc,
      [](Ctx& c) {
        std::vector<int32_t> buf(1000);
        if (c.rank == 0) {
          for (size_t i = 0; i < buf.size(); i++) buf[i] = (int32_t)i;
          ASSERT_LOOM_OK(loomSend(buf.data(), buf.size(), loomInt32, 1, c.comm, nullptr));
          EXPECT_LOOM_OK(loomCommDestroy(c.comm));
          c.comm = nullptr;
          ASSERT_TRUE(oob_barrier(c, "sender-gone"));
        } else {
          ASSERT_TRUE(oob_barrier(c, "sender-gone"));
          loomResult_t r = loomRecv(buf.data(), buf.size(), loomInt32, 0, c.comm, nullptr);
          EXPECT_TRUE(r == loomSuccess || r == loomRemoteError)
              << loomGetErrorString(r) << ": " << loomGetLastError(NULL);
          if (r == loomSuccess) {
            for (size_t i = 0; i < buf.size(); i++) ASSERT_EQ(buf[i], (int32_t)i);
          }
        }
      },
      o);
}

// Thread ranks: each rank of a ring sends several messages to the next and
// receives as many from the previous in one group, then at once destroys
// its communicator. No sender may fail once its receiver has taken
// everything. A regression test for a race in local_send_progress
// (transport/local/local.c read the FIFO's tail before testing f->closed, so
// a receiver that took the last pieces and closed in between turned a
// finished send into loomRemoteError "peer N closed the connection before
// taking the data"); before its fix a few of these rounds failed.
TEST(P2PTeardown, ReceiverTakesAllThenDestroys) {
  Opts o;
  o.timeout_s = 120;
  o.init = harness::Init::None;
  harness::run(
      1, Mode::Proc,
      [](Ctx&) {
        const int n = 8, kMessages = 8, kRounds = 20;
        int failures = 0;
        std::string first;
        for (int round = 0; round < kRounds; round++) {
          std::vector<loomComm_t> comms((size_t)n, nullptr);
          ASSERT_LOOM_OK(loomCommInitAll(comms.data(), n, nullptr));
          std::vector<loomResult_t> res((size_t)n, loomSuccess);
          std::vector<std::string> why((size_t)n);
          std::vector<std::thread> th;
          for (int r = 0; r < n; r++)
            th.emplace_back([&, r] {
              std::vector<std::vector<int32_t>> in(kMessages, std::vector<int32_t>(1000, 0));
              std::vector<int32_t> out(1000, r);
              loomGroupStart();
              for (int i = 0; i < kMessages; i++)
                loomRecv(in[(size_t)i].data(), 1000, loomInt32, (r + n - 1) % n, comms[(size_t)r],
                         nullptr);
              for (int i = 0; i < kMessages; i++)
                loomSend(out.data(), 1000, loomInt32, (r + 1) % n, comms[(size_t)r], nullptr);
              res[(size_t)r] = loomGroupEnd();
              if (res[(size_t)r] != loomSuccess) why[(size_t)r] = loomGetLastError(NULL);
              loomCommDestroy(comms[(size_t)r]);
            });
          for (auto& t : th) t.join();
          // A failed rank whose receiver succeeded: the receiver took all of its
          // messages, so nothing was lost and its sends should have succeeded.
          for (int r = 0; r < n; r++)
            if (res[(size_t)r] != loomSuccess && res[(size_t)((r + 1) % n)] == loomSuccess &&
                !failures++)
              first = why[(size_t)r];
        }
        EXPECT_EQ(failures, 0) << "groups failed " << failures << " times in " << kRounds
                               << " rounds although every receiver took everything; first: "
                               << first;
      },
      o);
}

}  // namespace
