// boot_ranks.h - what the bootstrap's unit tests share: the C headers
// (internal ones included), wire headers, and ranks that are threads of
// this process, each with its own communicator and bootstrap (boot_init),
// brought up, watched and freed. Waits are hang guards with generous
// deadlines, never timing assertions.
#ifndef LOOM_TESTS_UNIT_BOOT_RANKS_H
#define LOOM_TESTS_UNIT_BOOT_RANKS_H

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

// comm.h and util.h are C11 with _Atomic members, which C++17 cannot spell.
// On the ABIs Loom builds for an _Atomic int has the layout of an int, so
// read them as volatile here and touch them only through the C functions or
// the __atomic builtins.
#define _Atomic volatile
#define atomic_load_explicit(p, mo) __atomic_load_n((p), (mo))
#define memory_order_seq_cst __ATOMIC_SEQ_CST
extern "C" {
#include "core/boot_internal.h"
#include "core/bootstrap.h"
#include "core/checks.h"
#include "core/comm.h"
#include "core/fault.h"
#include "core/sock.h"
}
#undef _Atomic

namespace boot_test {

using namespace std::chrono_literals;

inline boot_hdr Hdr(uint16_t type, uint32_t len) {
  boot_hdr h{};
  h.magic = BOOT_MSG_MAGIC;
  h.type = type;
  h.version = BOOT_WIRE_VERSION;
  h.length = len;
  return h;
}

inline peer_info SelfInfo(int rank) {
  peer_info p{};
  p.rank = rank;
  p.pid = (int32_t)getpid();
  p.cuda_dev = -1;
  p.host_id = host_id_get();
  p.process_token = process_token_get();
  snprintf(p.hostname, sizeof(p.hostname), "thread-rank-%d", rank);
  return p;
}

inline loom_comm* NewComm(int nranks, int rank, int timeout_ms) {
  loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
  cfg.timeoutMs = timeout_ms;
  loom_comm* c = nullptr;
  EXPECT_EQ(comm_alloc(nranks, rank, &cfg, &c), loomSuccess);
  return c;
}

// One rank run by a thread: its communicator, its init result and the
// error text its thread saw.
struct Rank {
  loom_comm* comm = nullptr;
  loomResult_t init = loomInternalError;
  std::string why;
  std::thread th;
};

// Starts rank r of n on its own thread; then runs body when init succeeded.
inline void StartRank(Rank& rk, const boot_id& id, int n, int r, int timeout_ms,
                      std::function<void(loom_comm*)> body = nullptr) {
  rk.th = std::thread([&rk, id, n, r, timeout_ms, body] {
    rk.comm = NewComm(n, r, timeout_ms);
    peer_info self = SelfInfo(r);
    rk.init = boot_init(rk.comm, &id, &self);
    if (rk.init != loomSuccess) rk.why = err_thread_last();
    if (rk.init == loomSuccess && body) body(rk.comm);
  });
}

inline void FreeRank(Rank& rk, int clean) {
  if (rk.th.joinable()) rk.th.join();
  if (rk.comm == nullptr) return;
  boot_fini(rk.comm, clean);
  comm_free(rk.comm);
  rk.comm = nullptr;
}

// Waits (hang guard) until pred holds.
inline bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds limit = 10s) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// Brings up n ranks and returns them ready (init done, threads joined).
inline void Bringup(std::vector<Rank>& ranks, int n, int timeout_ms = 20000) {
  boot_id id;
  ASSERT_EQ(boot_id_create(&id), loomSuccess);
  ranks.resize(n);
  for (int r = 0; r < n; r++) StartRank(ranks[r], id, n, r, timeout_ms);
  for (auto& rk : ranks) rk.th.join();
  for (int r = 0; r < n; r++) ASSERT_EQ(ranks[r].init, loomSuccess) << ranks[r].why;
}

// Waits (hang guard) until comm reports loomRemoteError with a text that
// names peer. The text is read again until it does, because comm_set_failed
// publishes the error code a moment before its text.
inline bool WaitForFailure(loom_comm* c, int peer, std::string* why) {
  std::string want = "peer " + std::to_string(peer);
  return WaitFor([&] {
    loomResult_t h = comm_health(c);
    *why = err_thread_last();
    return h == loomRemoteError && why->find(want) != std::string::npos;
  });
}

// ---- Raw connections, for strangers ----------------------------------------------

inline sock_addr IdAddr(const boot_id& id) {
  sock_addr a{};
  if (id.family == AF_INET6) {
    a.sin6.sin6_family = AF_INET6;
    a.sin6.sin6_port = id.port;
    memcpy(&a.sin6.sin6_addr, id.addr, 16);
  } else {
    a.sin.sin_family = AF_INET;
    a.sin.sin_port = id.port;
    memcpy(&a.sin.sin_addr, id.addr, 4);
  }
  return a;
}

inline int DialBlocking(const sock_addr& a) {
  int fd = socket(a.sa.sa_family, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, &a.sa, sock_addr_len(&a)) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

// True when the far end closes fd within limit (recv returns 0 or an error).
inline bool ClosedByPeer(int fd, int limit_ms) {
  struct pollfd p = {fd, POLLIN, 0};
  if (poll(&p, 1, limit_ms) <= 0) return false;
  char buf[64];
  return recv(fd, buf, sizeof(buf), MSG_DONTWAIT) <= 0;
}

}  // namespace boot_test

#endif
