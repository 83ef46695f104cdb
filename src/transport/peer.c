/* peer.c - direct reads of the buffers of peers on this host.
 *
 * Three ways to reach a peer's byte, best first: the same address (thread
 * ranks share the process), a mapping of the peer's loomMemAlloc memfd
 * (opened through /proc/<pid>/fd, cached per region), and cross-memory
 * attach (process_vm_readv: one copy by the kernel, no staging). At init
 * every rank probes cross-memory attach against each peer in another
 * process (reading a word the peer published) and the ranks agree, with one
 * all-gather, whether direct plans may run: all or none, so every rank
 * builds the same plans. A reduction from a peer read by cross-memory attach
 * goes through a small bounce buffer that stays in cache. */
#include "transport/peer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "core/checks.h"
#include "core/params.h"
#include "kernels/cpu/cpu_kernels.h"

#define BOUNCE_BYTES (256u << 10)
#define CMA_PIECE (4u << 20)
#define MAP_CACHE 16

struct peer_map {
  int peer;
  uint64_t id; /* the peer's region id; 0: empty entry */
  void* local;
  size_t size;
};

struct peer_state {
  int direct_ok;
  uint64_t gen;        /* syncs this rank has arrived at */
  uint64_t probe_word; /* what peers read to probe cross-memory attach */
  void* bounce;
  struct peer_map maps[MAP_CACHE];
  int next_victim;
};

/* ThreadSanitizer tracks synchronisation by address, and thread ranks of one
 * process map each rank segment once per rank, at different addresses: it
 * cannot see that a release store through one mapping pairs with an acquire
 * load through another. Under it, each rank's syncs also release and
 * acquire a process-wide stand-in address for that rank's phase counter. */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
static char tsan_phase_keys[4096];
static void* tsan_key(struct loom_comm* comm, int rank) {
  return &tsan_phase_keys[(comm->comm_hash * 31 + (uint64_t)rank) % sizeof(tsan_phase_keys)];
}
#define TSAN_RELEASE(comm, rank) __tsan_release(tsan_key(comm, rank))
#define TSAN_ACQUIRE(comm, rank) __tsan_acquire(tsan_key(comm, rank))
#else
#define TSAN_RELEASE(comm, rank) ((void)0)
#define TSAN_ACQUIRE(comm, rank) ((void)0)
#endif

static struct peer_state* state_of(struct loom_comm* comm) {
  return *tp_peer_state_slot(comm);
}

static int same_process(struct loom_comm* comm, int peer) {
  return comm->peers[peer].process_token == comm->peers[comm->rank].process_token;
}

/* Reads len bytes at remote address addr of peer's process into dst.
 * Returns 0 or an errno value. */
static int cma_read(struct loom_comm* comm, int peer, uint64_t addr, void* dst, size_t len) {
  while (len > 0) {
    /* Pieces of at most CMA_PIECE: the kernel pins every page of a call
     * first, and very large calls were measured slower. */
    size_t piece = LOOM_MIN(len, (size_t)CMA_PIECE);
    struct iovec l = {dst, piece}, r = {(void*)(uintptr_t)addr, piece};
    ssize_t n = process_vm_readv(comm->peers[peer].pid, &l, 1, &r, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EFAULT;
    dst = (char*)dst + n;
    addr += (uint64_t)n;
    len -= (size_t)n;
  }
  return 0;
}

static int probe_peer(struct loom_comm* comm, int peer) {
  if (same_process(comm, peer)) return 1;
  struct peer_pub* pub = tp_pub(comm, peer);
  uint64_t got = 0;
  int e = cma_read(comm, peer, pub->probe_addr, &got, sizeof(got));
  if (e || got != pub->probe_value) {
    LOOM_INFO(SUB_SHM,
              "rank %d: cannot read peer %d's memory (process_vm_readv: %s); "
              "direct plans are off for this communicator",
              comm->rank, peer, e ? strerror(e) : "wrong value");
    return 0;
  }
  return 1;
}

loomResult_t peer_comm_init(struct loom_comm* comm) {
  struct peer_state* ps = calloc(1, sizeof(*ps));
  if (!ps) return err_set(comm, loomSystemError, "out of memory");
  *tp_peer_state_slot(comm) = ps;
  /* Published, then a barrier: every peer's probe word is out before anyone
   * probes. */
  ps->probe_word = comm->comm_hash ^ (0x9e3779b97f4a7c15ULL * (uint64_t)(comm->rank + 1));
  struct peer_pub* self = tp_pub(comm, comm->rank);
  self->probe_addr = (uint64_t)(uintptr_t)&ps->probe_word;
  self->probe_value = ps->probe_word;
  struct deadline dl = deadline_in_ms(comm->timeout_ms);
  LOOM_CHECK(boot_barrier(comm, &dl));
  /* Direct plans stand in for shm and local; when LOOM_TRANSPORTS asks for
   * neither (sockets only, say) they stay off. */
  int ok =
      params_get()->direct != 0 && (tp_transport_allowed("shm") || tp_transport_allowed("local"));
  for (int p = 0; p < comm->nranks && ok; p++)
    if (p != comm->rank) ok = tp_pub(comm, p) != NULL && probe_peer(comm, p);
  int* all = calloc((size_t)comm->nranks, sizeof(int));
  if (!all) return err_set(comm, loomSystemError, "out of memory");
  loomResult_t r = boot_allgather(comm, &ok, sizeof(ok), all, &dl);
  ps->direct_ok = r == loomSuccess;
  for (int p = 0; p < comm->nranks; p++) ps->direct_ok &= all[p] != 0;
  free(all);
  LOOM_INFO(SUB_INIT, "rank %d: direct plans %s", comm->rank, ps->direct_ok ? "on" : "off");
  return r;
}

void peer_comm_fini(struct loom_comm* comm) {
  struct peer_state** slot = tp_peer_state_slot(comm);
  struct peer_state* ps = *slot;
  if (!ps) return;
  for (int i = 0; i < MAP_CACHE; i++)
    if (ps->maps[i].id) munmap(ps->maps[i].local, ps->maps[i].size);
  if (ps->bounce) memstat_sub(comm, MEM_STAGING, -1, BOUNCE_BYTES);
  free(ps->bounce);
  free(ps);
  *slot = NULL;
}

int tp_direct_loads(struct loom_comm* comm) {
  for (int p = 0; p < comm->nranks; p++)
    if (!same_process(comm, p)) return 0;
  return 1;
}

int tp_direct_ok(struct loom_comm* comm) {
  struct peer_state* ps = state_of(comm);
  return ps && ps->direct_ok;
}

void tp_peer_publish(struct loom_comm* comm, void* const* bufs, const size_t* bytes) {
  struct peer_pub* self = tp_pub(comm, comm->rank);
  for (int b = 0; b < PEER_NBUFS; b++) {
    self->addr[b] = (uint64_t)(uintptr_t)bufs[b];
    self->bytes[b] = bufs[b] ? bytes[b] : 0;
    mem_region_find(bufs[b], self->bytes[b], &self->region[b]);
  }
}

void tp_sync_arrive(struct loom_comm* comm) {
  struct peer_state* ps = state_of(comm);
  ps->gen++;
  TSAN_RELEASE(comm, comm->rank);
  atomic_store_explicit(&tp_pub(comm, comm->rank)->phase, ps->gen, memory_order_release);
  for (int p = 0; p < comm->nranks; p++) /* only the host executor waits on syncs */
    if (p != comm->rank) bell_nudge(tp_peer_bell(comm, p));
}

int tp_sync_done(struct loom_comm* comm) {
  struct peer_state* ps = state_of(comm);
  for (int p = 0; p < comm->nranks; p++)
    if (atomic_load_explicit(&tp_pub(comm, p)->phase, memory_order_acquire) < ps->gen) return 0;
  for (int p = 0; p < comm->nranks; p++) TSAN_ACQUIRE(comm, p);
  return 1;
}

int tp_sync_missing(struct loom_comm* comm, int peer) {
  struct peer_state* ps = state_of(comm);
  return atomic_load_explicit(&tp_pub(comm, peer)->phase, memory_order_acquire) < ps->gen;
}

/* A mapping of the peer's loomMemAlloc region, made on first use. */
static void* region_map(struct loom_comm* comm, int peer, const struct mem_region* rg) {
  struct peer_state* ps = state_of(comm);
  for (int i = 0; i < MAP_CACHE; i++)
    if (ps->maps[i].id == rg->id && ps->maps[i].peer == peer) return ps->maps[i].local;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)comm->peers[peer].pid, (int)rg->fd);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  void* p = mmap(NULL, rg->size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return NULL;
  struct peer_map* m = &ps->maps[ps->next_victim];
  ps->next_victim = (ps->next_victim + 1) % MAP_CACHE;
  if (m->id) munmap(m->local, m->size);
  *m = (struct peer_map){peer, rg->id, p, rg->size};
  LOOM_INFO(SUB_SHM, "rank %d: mapped peer %d's loomMemAlloc region of %llu bytes", comm->rank,
            peer, (unsigned long long)rg->size);
  return p;
}

/* Where this process can load the peer's range directly, or NULL (then it
 * is read by cross-memory attach). Checks the range first. */
static loomResult_t peer_range(struct loom_comm* comm, int peer, unsigned buf, size_t off,
                               size_t len, uint64_t* addr_out, const void** local_out) {
  struct peer_pub* pub = tp_pub(comm, peer);
  uint64_t have = buf < PEER_NBUFS ? pub->bytes[buf] : 0;
  if (off > have || len > have - off)
    return err_set_sub(comm, SUB_COLL, loomInvalidUsage,
                       "peer %d's buffer holds %llu bytes; this rank's call reads %zu at offset "
                       "%zu (do all ranks pass the same count and datatype?)",
                       peer, (unsigned long long)have, len, off);
  uint64_t addr = pub->addr[buf] + off;
  *addr_out = addr;
  *local_out = NULL;
  if (same_process(comm, peer)) {
    *local_out = (const void*)(uintptr_t)addr;
  } else if (pub->region[buf].fd >= 0 && pub->region[buf].id != 0) {
    const struct mem_region* rg = &pub->region[buf];
    const char* base = region_map(comm, peer, rg);
    if (base) *local_out = base + (addr - rg->base);
  }
  return loomSuccess;
}

static loomResult_t read_failed(struct loom_comm* comm, int peer, int e) {
  return err_set_sub(comm, SUB_COLL, loomRemoteError,
                     "cannot read peer %d's buffer (process_vm_readv: %s); did it fail?", peer,
                     strerror(e));
}

loomResult_t tp_peer_copy(struct loom_comm* comm, int peer, unsigned buf, size_t off, void* dst,
                          size_t bytes) {
  uint64_t addr;
  const void* src;
  LOOM_CHECK(peer_range(comm, peer, buf, off, bytes, &addr, &src));
  if (src) {
    cpu_copy(dst, src, bytes);
    return loomSuccess;
  }
  int e = cma_read(comm, peer, addr, dst, bytes);
  return e ? read_failed(comm, peer, e) : loomSuccess;
}

loomResult_t tp_peer_read(struct loom_comm* comm, int peer, unsigned buf, size_t off, size_t bytes,
                          size_t unit, tp_peer_use_fn use, void* arg) {
  uint64_t addr;
  const void* src;
  LOOM_CHECK(peer_range(comm, peer, buf, off, bytes, &addr, &src));
  if (src) {
    use(arg, 0, src, bytes);
    return loomSuccess;
  }
  struct peer_state* ps = state_of(comm);
  if (!ps->bounce) {
    if (!(ps->bounce = malloc(BOUNCE_BYTES)))
      return err_set(comm, loomSystemError, "out of memory");
    memstat_add(comm, MEM_STAGING, -1, BOUNCE_BYTES);
  }
  size_t per = BOUNCE_BYTES / unit * unit;
  for (size_t done = 0; done < bytes; done += per) {
    size_t len = LOOM_MIN(per, bytes - done);
    int e = cma_read(comm, peer, addr + done, ps->bounce, len);
    if (e) return read_failed(comm, peer, e);
    use(arg, done, ps->bounce, len);
  }
  return loomSuccess;
}
