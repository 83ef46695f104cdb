/* util.h - small helpers used by every layer: clocks, deadlines, the doorbell
 * (an event count on a futex, shareable across processes), random bytes,
 * hashing. */
#ifndef LOOM_CORE_UTIL_H
#define LOOM_CORE_UTIL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "loom.h"

#define LOOM_MIN(a, b) ((a) < (b) ? (a) : (b))
#define LOOM_MAX(a, b) ((a) > (b) ? (a) : (b))
#define LOOM_DIV_UP(a, b) (((a) + (b)-1) / (b))
#define LOOM_ALIGN_UP(a, b) (LOOM_DIV_UP(a, b) * (b))
/* Marks a thread-local read on every call. It used to select the initial-exec
 * model (a fixed offset from the thread pointer), but one such variable puts
 * the whole library's TLS block (errors' and streams' buffers too, about 1.8
 * KiB) into static TLS, which a library loaded with dlopen (Python's ctypes,
 * torch extensions, a dlopen'ed libnccl.so.2) cannot get: glibc keeps only a
 * few hundred bytes spare. The default model costs a few nanoseconds a launch
 * (docs/PERFORMANCE.md, "Launch overhead"); tests/tools/test_symbols.sh checks
 * that no initial-exec access comes back. */
#define LOOM_TLS_HOT

/* Monotonic clock in nanoseconds. */
uint64_t time_now_ns(void);

/* A point in time after which a wait gives up. */
struct deadline {
  uint64_t at_ns; /* 0: never */
};
struct deadline deadline_in_ms(long long ms);
int deadline_passed(const struct deadline* d);
/* Milliseconds left, at least 0; a large number when there is no deadline. */
long long deadline_left_ms(const struct deadline* d);

/*
 * A doorbell: an event count a waiter can sleep on. The waiter reads the
 * count, looks for work, and sleeps only if the count has not moved; a
 * ringer bumps the count and wakes sleepers. Lives in shared memory when
 * peers are processes (the futex is not private).
 */
struct bell {
  _Atomic uint32_t seq;
  _Atomic uint32_t sleepers;
};
static inline uint32_t bell_read(struct bell* b) {
  return atomic_load_explicit(&b->seq, memory_order_seq_cst);
}
void bell_ring(struct bell* b);
/* Sleeps until the count differs from seen or timeout_us passes. May return
 * early. Never blocks longer than timeout_us. */
void bell_wait(struct bell* b, uint32_t seen, long timeout_us);
/* A ring for waiters that announce themselves (bell_announce) before their
 * last look: rings only when one is announced or asleep, so a waiter that
 * spins or yields costs the ringer no atomic on its cache line, and keeps
 * the line in its own cache. The caller's stores before it are seen by any
 * waiter it does not ring. */
void bell_nudge(struct bell* b);
/* A waiter says it may sleep (+1) or no longer will (-1). Between +1 and a
 * sleep it must look for its work once more: a bell_nudge after that look
 * rings, and one before it left its stores for the look to see. */
void bell_announce(struct bell* b, int delta);

/* Fills buf with random bytes from the kernel. */
loomResult_t random_bytes(void* buf, size_t len);
/* FNV-1a 64-bit, for host ids and names; not for security. */
uint64_t hash64(const void* data, size_t len, uint64_t seed);

/* The host as text: boot id plus network namespace ("<boot id>/netns:<dev>:
 * <inode>"), which tells hosts apart for real; and its id, host_id_of that
 * text (any host name gives its id so: LOOM_HOSTID, LOOM_TOPO_FILE). */
void host_name_get(char* buf, size_t len);
uint64_t host_id_of(const char* name);
uint64_t host_id_get(void);
/* The machine as text: its boot id alone (the host name where there is
 * none). Hosts that are namespaces (or containers) of one machine share it,
 * and with it the machine's cores. Its id is machine_id_of that text. */
void machine_name_get(char* buf, size_t len);
uint64_t machine_id_of(const char* name);
uint64_t machine_id_get(void);
/* A random number chosen once per process, so ranks can tell they share one. */
uint64_t process_token_get(void);

/* The number of CPUs this process may run on. */
int cpus_online(void);
/* Pause hint for spin loops. */
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  __asm__ __volatile__("" ::: "memory");
#endif
}

#endif
