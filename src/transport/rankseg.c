/* rankseg.c - rank segments: made, shared and released (see rankseg.h). */
#include "transport/rankseg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/bootstrap.h"
#include "core/checks.h"
#include "core/params.h"
#include "transport/devarea.h"

static int same_host(const struct loom_comm* comm, int peer) {
  return comm->peers[peer].host_id == comm->peers[comm->rank].host_id;
}

static void seg_name(const struct loom_comm* comm, int rank, char* buf, size_t len) {
  snprintf(buf, len, "/loom-%016llx-r%d", (unsigned long long)comm->comm_hash, rank);
}

static void seg_fill(struct loom_comm* comm, struct rank_seg* seg) {
  seg->comm_hash = comm->comm_hash;
  seg->rank = comm->rank;
  seg->nranks = comm->nranks;
  atomic_store_explicit(&seg->magic, RANK_SEG_MAGIC, memory_order_release);
}

/* 1 when seg is rank's segment of this communicator. */
static int seg_is(const struct loom_comm* comm, const struct rank_seg* seg, int rank) {
  return atomic_load_explicit(&seg->magic, memory_order_acquire) == RANK_SEG_MAGIC &&
         seg->comm_hash == comm->comm_hash && seg->rank == rank && seg->nranks == comm->nranks;
}

/* ---- Unnamed mode ------------------------------------------------------------- */

struct seg_offer {
  int32_t fd; /* -1: this rank could not make an unnamed segment */
  int32_t ok; /* the second exchange: this rank opened all it had to */
};

/* Opens every same-host peer's segment through /proc. 0 when one fails
 * (the caller falls back to named mode; the reason goes to the INFO log). */
static int unnamed_open_all(struct loom_comm* comm, struct rank_segs* rs,
                            const struct seg_offer* all) {
  for (int p = 0; p < comm->nranks; p++) {
    if (p == comm->rank || !same_host(comm, p)) continue;
    void* map = NULL;
    size_t got = 0;
    int e = all[p].fd < 0 ? EINVAL
                          : shmfile_open_peer(comm->peers[p].pid, all[p].fd, rs->bytes, rs->bytes,
                                              &map, &got);
    if (e == 0 && !seg_is(comm, map, p)) {
      munmap(map, got);
      e = EINVAL;
    }
    if (e != 0) {
      LOOM_INFO(SUB_SHM,
                "rank %d: cannot open peer %d's segment through /proc/%d/fd/%d (%s): shared "
                "memory of this communicator will be named",
                comm->rank, p, (int)comm->peers[p].pid, (int)all[p].fd, strerror(e));
      return 0;
    }
    rs->peer[p] = map;
  }
  return 1;
}

/* 1 when every rank made and opened unnamed segments. Collective. */
static loomResult_t unnamed_try(struct loom_comm* comm, struct rank_segs* rs,
                                const struct deadline* dl, int* ok_out) {
  int n = comm->nranks;
  struct seg_offer mine = {-1, 0};
  int e = shmfile_make(rs->bytes, &rs->self_file);
  if (e == 0) {
    mine.fd = rs->self_file.fd;
    seg_fill(comm, rs->self_file.map);
  } else {
    LOOM_INFO(SUB_SHM,
              "rank %d: no unnamed files in /dev/shm here (%s): shared memory will be "
              "named",
              comm->rank, strerror(e));
  }
  struct seg_offer* all = calloc((size_t)n, sizeof(*all));
  if (!all) return err_set(comm, loomSystemError, "out of memory");
  loomResult_t r = boot_allgather(comm, &mine, sizeof(mine), all, dl);
  int ok = r == loomSuccess;
  for (int p = 0; p < n && ok; p++) ok = all[p].fd >= 0;
  if (ok) ok = unnamed_open_all(comm, rs, all);
  mine.ok = ok;
  if (r == loomSuccess) r = boot_allgather(comm, &mine, sizeof(mine), all, dl);
  for (int p = 0; p < n && r == loomSuccess; p++) ok &= all[p].ok;
  free(all);
  *ok_out = ok;
  return r;
}

/* ---- Named mode ------------------------------------------------------------------ */

static loomResult_t named_create(struct loom_comm* comm, struct rank_segs* rs) {
  char name[64];
  seg_name(comm, comm->rank, name, sizeof(name));
  void* p = NULL;
  LOOM_CHECK(shmfile_named_create(comm, name, rs->bytes, "the rank segment", &p));
  rs->self = p;
  rs->counted = rs->bytes;
  memstat_add(comm, MEM_RANKSEG, -1, rs->counted);
  seg_fill(comm, p);
  return loomSuccess;
}

static loomResult_t named_open(struct loom_comm* comm, struct rank_segs* rs, int peer) {
  char name[64], what[48];
  seg_name(comm, peer, name, sizeof(name));
  snprintf(what, sizeof(what), "peer %d's rank segment", peer);
  void* p = NULL;
  LOOM_CHECK(shmfile_named_open(comm, name, rs->bytes, what, &p));
  if (!seg_is(comm, p, peer)) {
    munmap(p, rs->bytes);
    return err_set_sub(comm, SUB_SHM, loomInternalError, "segment %s of peer %d is not initialised",
                       name, peer);
  }
  rs->peer[peer] = p;
  return loomSuccess;
}

/* Every rank's segment exists before anyone opens; everyone has opened
 * before anyone unlinks (rankseg_shared), so no name stays. */
static loomResult_t named_init(struct loom_comm* comm, struct rank_segs* rs,
                               const struct deadline* dl) {
  rs->named = 1;
  LOOM_CHECK(named_create(comm, rs));
  rs->peer[comm->rank] = rs->self;
  LOOM_CHECK(boot_barrier(comm, dl));
  for (int p = 0; p < comm->nranks; p++)
    if (p != comm->rank && same_host(comm, p)) LOOM_CHECK(named_open(comm, rs, p));
  return loomSuccess;
}

/* ---- Entry points ---------------------------------------------------------------- */

/* This rank's segment with its pages in place. Its calls write their lines
 * through it in turn, and a fresh page's first write faults: 13 us a fault
 * on the 2-vCPU VM of docs/PERFORMANCE.md where populating costs under 1 us
 * a page, and with ranks outnumbering cores a rank that faults loses its
 * core ("Page faults on the call path"). Best effort: a kernel without
 * MADV_POPULATE_WRITE (before 5.14) faults them in as before. */
static void populate_self(struct rank_segs* rs) {
#ifdef MADV_POPULATE_WRITE
  if (rs->self) (void)madvise(rs->self, rs->bytes, MADV_POPULATE_WRITE);
#else
  (void)rs;
#endif
}

loomResult_t rankseg_init(struct loom_comm* comm, struct rank_segs* rs, const struct deadline* dl) {
  int n = comm->nranks;
  memset(rs, 0, sizeof(*rs));
  rs->self_file.fd = -1;
  size_t table = (size_t)LANE_COUNT * (size_t)n * sizeof(int32_t);
  rs->peer = calloc((size_t)n, sizeof(*rs->peer));
  rs->local = malloc((size_t)n * sizeof(*rs->local));
  if (!rs->peer || !rs->local) return err_set(comm, loomSystemError, "out of memory");
  for (int p = 0; p < n; p++) {
    rs->local[p] = same_host(comm, p) ? rs->same_host : -1;
    rs->same_host += same_host(comm, p);
  }
  rs->dev_off = LOOM_ALIGN_UP(sizeof(struct rank_seg) + table, (size_t)4096);
  rs->bytes = rs->dev_off + dev_area_bytes(rs->same_host);
  int ok = 0;
  if (!params_get()->shm_named) LOOM_CHECK(unnamed_try(comm, rs, dl, &ok));
  if (ok) {
    rs->self = rs->self_file.map;
    rs->peer[comm->rank] = rs->self;
    shmfile_sweep(); /* what receivers killed before collecting it left (shm.c) */
    rs->counted = rs->bytes;
    memstat_add(comm, MEM_RANKSEG, -1, rs->counted);
    populate_self(rs);
    return loomSuccess;
  }
  for (int p = 0; p < n; p++) {
    if (p != comm->rank && rs->peer[p]) munmap(rs->peer[p], rs->bytes);
    rs->peer[p] = NULL;
  }
  shmfile_release(&rs->self_file);
  LOOM_CHECK(named_init(comm, rs, dl));
  populate_self(rs);
  return loomSuccess;
}

void rankseg_shared(struct loom_comm* comm, struct rank_segs* rs) {
  if (!rs->named) {
    shmfile_close_fd(&rs->self_file);
    return;
  }
  char name[64];
  seg_name(comm, comm->rank, name, sizeof(name));
  shm_unlink(name);
}

void rankseg_fini(struct loom_comm* comm, struct rank_segs* rs) {
  /* After a failure a peer may have died before unlinking its name: every
   * survivor removes every name it could have shared. ENOENT is the norm. */
  if (rs->named && comm->peers) {
    for (int p = 0; p < comm->nranks; p++) {
      char name[64];
      if (!same_host(comm, p)) continue;
      seg_name(comm, p, name, sizeof(name));
      shm_unlink(name);
    }
  }
  for (int p = 0; p < comm->nranks && rs->peer; p++)
    if (rs->peer[p] && rs->peer[p] != rs->self) munmap(rs->peer[p], rs->bytes);
  if (rs->self_file.map) {
    shmfile_release(&rs->self_file);
  } else if (rs->self) {
    munmap(rs->self, rs->bytes);
  }
  free(rs->peer);
  free(rs->local);
  memstat_sub(comm, MEM_RANKSEG, -1, rs->counted);
  memset(rs, 0, sizeof(*rs));
  rs->self_file.fd = -1;
}
