/* util.c - clocks, deadlines, doorbells, randomness, host identity. */
#include "core/util.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/checks.h"

uint64_t time_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct deadline deadline_in_ms(long long ms) {
  struct deadline d = {0};
  if (ms > 0) d.at_ns = time_now_ns() + (uint64_t)ms * 1000000ull;
  return d;
}

int deadline_passed(const struct deadline* d) {
  return d->at_ns && time_now_ns() >= d->at_ns;
}

long long deadline_left_ms(const struct deadline* d) {
  if (!d->at_ns) return 1LL << 40;
  uint64_t now = time_now_ns();
  return now >= d->at_ns ? 0 : (long long)((d->at_ns - now) / 1000000ull);
}

void bell_ring(struct bell* b) {
  atomic_fetch_add_explicit(&b->seq, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&b->sleepers, memory_order_seq_cst) > 0)
    syscall(SYS_futex, &b->seq, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
}

/* Both sides fence between their store and their load (the waiter's
 * sleepers, the ringer's data), so at least one sees the other's: the
 * ringer the announcement, or the waiter's last look the data. */
void bell_nudge(struct bell* b) {
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&b->sleepers, memory_order_relaxed) > 0) bell_ring(b);
}

void bell_announce(struct bell* b, int delta) {
  if (delta > 0)
    atomic_fetch_add_explicit(&b->sleepers, (uint32_t)delta, memory_order_seq_cst);
  else
    atomic_fetch_sub_explicit(&b->sleepers, (uint32_t)-delta, memory_order_seq_cst);
  atomic_thread_fence(memory_order_seq_cst);
}

void bell_wait(struct bell* b, uint32_t seen, long timeout_us) {
  struct timespec ts = {timeout_us / 1000000, (timeout_us % 1000000) * 1000};
  atomic_fetch_add_explicit(&b->sleepers, 1, memory_order_seq_cst);
  /* The kernel compares seq with seen atomically before sleeping, so a ring
   * between our last look and this call is never lost. */
  if (atomic_load_explicit(&b->seq, memory_order_seq_cst) == seen)
    syscall(SYS_futex, &b->seq, FUTEX_WAIT, seen, &ts, NULL, 0);
  atomic_fetch_sub_explicit(&b->sleepers, 1, memory_order_seq_cst);
}

loomResult_t random_bytes(void* buf, size_t len) {
  uint8_t* p = buf;
  while (len > 0) {
    ssize_t n = getrandom(p, len, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return err_set(NULL, loomSystemError, "getrandom failed: %s", strerror(errno));
    }
    p += n;
    len -= (size_t)n;
  }
  return loomSuccess;
}

uint64_t hash64(const void* data, size_t len, uint64_t seed) {
  const uint8_t* p = data;
  uint64_t h = 1469598103934665603ull ^ seed;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

void machine_name_get(char* buf, size_t len) {
  char boot[128] = "";
  FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(boot, sizeof(boot), f)) boot[0] = '\0';
    fclose(f);
  }
  boot[strcspn(boot, "\n")] = '\0';
  if (!boot[0]) gethostname(boot, sizeof(boot) - 1);
  snprintf(buf, len, "%s", boot);
}

void host_name_get(char* buf, size_t len) {
  char machine[128];
  machine_name_get(machine, sizeof(machine));
  /* Two network namespaces of one machine are two hosts, as in a cluster. */
  struct stat st;
  if (stat("/proc/self/ns/net", &st) == 0)
    snprintf(buf, len, "%s/netns:%llu:%llu", machine, (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
  else
    snprintf(buf, len, "%s", machine);
}

uint64_t machine_id_of(const char* name) {
  return hash64(name, strlen(name), 0);
}

uint64_t host_id_of(const char* name) {
  return hash64(name, strlen(name), 0x686f7374);
}

uint64_t machine_id_get(void) {
  char name[128];
  machine_name_get(name, sizeof(name));
  return machine_id_of(name);
}

uint64_t host_id_get(void) {
  char name[192];
  host_name_get(name, sizeof(name));
  return host_id_of(name);
}

static uint64_t token_value;
static pthread_once_t token_once = PTHREAD_ONCE_INIT;
static void token_make(void) {
  if (random_bytes(&token_value, sizeof(token_value)) != loomSuccess)
    token_value = time_now_ns() ^ ((uint64_t)getpid() << 32);
}
static void token_reset_child(void) {
  /* A forked child is another process: give it its own token. */
  token_make();
}
static pthread_once_t token_atfork_once = PTHREAD_ONCE_INIT;
static void token_atfork(void) {
  pthread_atfork(NULL, NULL, token_reset_child);
}

uint64_t process_token_get(void) {
  pthread_once(&token_atfork_once, token_atfork);
  pthread_once(&token_once, token_make);
  return token_value;
}

int cpus_online(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}
