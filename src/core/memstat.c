/* memstat.c - what a communicator holds (see memstat.h). */
#include "core/memstat.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/comm.h"
#include "core/debug.h"

static _Atomic size_t process_now;

static const char* const use_names[MEM_USES] = {"rankseg", "fifo",  "conn",    "staging",
                                                "scratch", "plans", "recorder"};

const char* memstat_use_name(enum mem_use use) {
  return use >= 0 && use < MEM_USES ? use_names[use] : "?";
}

int memstat_init(struct mem_stat* m, int nranks) {
  m->nranks = nranks;
  m->peer = calloc((size_t)(nranks > 0 ? nranks : 1), sizeof(*m->peer));
  return m->peer ? 0 : -1;
}

static void raise_to(_Atomic size_t* peak, size_t v) {
  size_t old = atomic_load_explicit(peak, memory_order_relaxed);
  while (v > old && !atomic_compare_exchange_weak_explicit(peak, &old, v, memory_order_relaxed,
                                                           memory_order_relaxed)) {
  }
}

void memstat_add(struct loom_comm* comm, enum mem_use use, int peer, size_t bytes) {
  if (!comm || bytes == 0) return;
  struct mem_stat* m = &comm->mem;
  raise_to(&m->peak[use],
           atomic_fetch_add_explicit(&m->now[use], bytes, memory_order_relaxed) + bytes);
  raise_to(&m->peak_total,
           atomic_fetch_add_explicit(&m->total, bytes, memory_order_relaxed) + bytes);
  if (peer >= 0 && peer < m->nranks && m->peer)
    atomic_fetch_add_explicit(&m->peer[peer], bytes, memory_order_relaxed);
  atomic_fetch_add_explicit(&process_now, bytes, memory_order_relaxed);
}

void memstat_sub(struct loom_comm* comm, enum mem_use use, int peer, size_t bytes) {
  if (!comm || bytes == 0) return;
  struct mem_stat* m = &comm->mem;
  atomic_fetch_sub_explicit(&m->now[use], bytes, memory_order_relaxed);
  atomic_fetch_sub_explicit(&m->total, bytes, memory_order_relaxed);
  if (peer >= 0 && peer < m->nranks && m->peer)
    atomic_fetch_sub_explicit(&m->peer[peer], bytes, memory_order_relaxed);
  atomic_fetch_sub_explicit(&process_now, bytes, memory_order_relaxed);
}

size_t memstat_process_now(void) {
  return atomic_load_explicit(&process_now, memory_order_relaxed);
}

void memstat_get(struct loom_comm* comm, struct mem_snapshot* out) {
  struct mem_stat* m = &comm->mem;
  for (int u = 0; u < MEM_USES; u++) {
    out->now[u] = atomic_load_explicit(&m->now[u], memory_order_relaxed);
    out->peak[u] = atomic_load_explicit(&m->peak[u], memory_order_relaxed);
  }
  out->total = atomic_load_explicit(&m->total, memory_order_relaxed);
  out->peak_total = atomic_load_explicit(&m->peak_total, memory_order_relaxed);
  out->peers_held = 0;
  out->peer_max = 0;
  for (int p = 0; m->peer && p < m->nranks; p++) {
    size_t b = atomic_load_explicit(&m->peer[p], memory_order_relaxed);
    if (b) out->peers_held++;
    if (b > out->peer_max) out->peer_max = b;
  }
}

/* "1.5 MiB" */
static void bytes_text(size_t b, char* buf, size_t len) {
  if (b >= (1u << 20))
    snprintf(buf, len, "%.1f MiB", (double)b / (1u << 20));
  else if (b >= 1024)
    snprintf(buf, len, "%.1f KiB", (double)b / 1024);
  else
    snprintf(buf, len, "%zu B", b);
}

/* "total 1.2 MiB (peak 2.0 MiB): rankseg 8.0 KiB, fifo ... (peak ...), ...; for 3 peers, at
 * most 400.0 KiB each" */
static void describe(struct loom_comm* comm, char* buf, size_t len) {
  struct mem_snapshot s;
  memstat_get(comm, &s);
  char a[32], b[32];
  bytes_text(s.total, a, sizeof(a));
  bytes_text(s.peak_total, b, sizeof(b));
  int at = snprintf(buf, len, "total %s (peak %s):", a, b);
  for (int u = 0; u < MEM_USES && at > 0 && (size_t)at < len; u++) {
    bytes_text(s.now[u], a, sizeof(a));
    bytes_text(s.peak[u], b, sizeof(b));
    at += snprintf(buf + at, len - (size_t)at, "%s %s %s (peak %s)", u ? "," : "", use_names[u], a,
                   b);
  }
  if (at > 0 && (size_t)at < len) {
    bytes_text(s.peer_max, a, sizeof(a));
    snprintf(buf + at, len - (size_t)at, "; for %d peers, at most %s each", s.peers_held, a);
  }
}

void memstat_log(struct loom_comm* comm, const char* when) {
  if (!LOOM_LOG_ON(LOG_INFO, SUB_ALLOC)) return;
  char text[512];
  describe(comm, text, sizeof(text));
  LOOM_INFO(SUB_ALLOC, "rank %d of %d: memory %s: %s", comm->rank, comm->nranks, when, text);
}

void memstat_fini(struct loom_comm* comm) {
  struct mem_stat* m = &comm->mem;
  if (atomic_load_explicit(&m->total, memory_order_relaxed) != 0) {
    char text[512];
    describe(comm, text, sizeof(text));
    LOOM_WARN(SUB_ALLOC, "rank %d: memory still held at destroy (not released): %s", comm->rank,
              text);
  }
  free(m->peer);
  m->peer = NULL;
}
