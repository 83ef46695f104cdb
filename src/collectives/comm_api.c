/* comm_api.c - communicator lifecycle through the public API: the order in
 * which the layers come up (bootstrap, transports, collectives) and go down.
 * It lives in the top layer because it is the one place that knows them all;
 * src/core keeps only what is generic (see docs/DESIGN.md). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/coll.h"
#include "collectives/exec.h"
#include "core/bootstrap.h"
#include "core/checks.h"
#include "core/fault.h"
#include "core/handle.h"
#include "core/params.h"
#include "core/recorder.h"
#include "topo/topo.h"
#include "transport/transport.h"

/* Which host each rank is on (numbered in order of first appearance), and
 * the shape the tuner needs: the same on every rank, from the peer table. */
static loomResult_t shape_init(struct loom_comm* comm, struct coll_comm* cc) {
  int n = comm->nranks;
  cc->host_of = malloc((size_t)n * sizeof(int));
  int* per_host = calloc((size_t)n, sizeof(int));
  int* cross = calloc((size_t)n, sizeof(int));
  if (!cc->host_of || !per_host || !cross) {
    free(per_host);
    free(cross);
    return err_set(comm, loomSystemError, "out of memory");
  }
  int nhosts = 0;
  for (int r = 0; r < n; r++) {
    int h = -1;
    for (int q = 0; q < r && h < 0; q++)
      if (comm->peers[q].host_id == comm->peers[r].host_id) h = cc->host_of[q];
    cc->host_of[r] = h >= 0 ? h : nhosts++;
    per_host[cc->host_of[r]]++;
  }
  int local = 0, even = 1, ring_cross = 0;
  for (int r = 0; r < n; r++) {
    int h = cc->host_of[r];
    if (h != cc->host_of[(r + 1) % n]) cross[h]++;
  }
  for (int h = 0; h < nhosts; h++) {
    local = LOOM_MAX(local, per_host[h]);
    even &= per_host[h] == per_host[0];
    ring_cross = LOOM_MAX(ring_cross, cross[h]);
  }
  cc->tune.nhosts = nhosts;
  cc->tune.local = local;
  cc->tune.even = even;
  cc->tune.ring_cross = ring_cross;
  if (comm->rank == 0 && nhosts > 1)
    LOOM_INFO(SUB_INIT,
              "%d ranks on %d hosts, %d on the fullest%s; the ring leaves a host %d times", n,
              nhosts, local, even ? " (all alike)" : "", ring_cross);
  free(per_host);
  free(cross);
  return loomSuccess;
}

loomResult_t coll_comm_init(struct loom_comm* comm) {
  struct coll_comm* cc = calloc(1, sizeof(*cc));
  if (!cc) return err_set(comm, loomSystemError, "out of memory");
  pthread_mutex_init(&cc->exec_lock, NULL);
  pthread_mutex_init(&cc->ops_lock, NULL);
  atomic_init(&cc->inflight, 0);
  atomic_init(&cc->serving, 0);
  atomic_init(&cc->turn_waiters, 0);
  comm->coll = cc;
  /* One set of constants for the whole communicator: rank 0's. */
  struct tune_consts* all = calloc((size_t)comm->nranks, sizeof(*all));
  if (!all) return err_set(comm, loomSystemError, "out of memory");
  struct deadline dl = deadline_in_ms(comm->timeout_ms);
  loomResult_t r = boot_allgather(comm, tune_consts_get(), sizeof(*all), all, &dl);
  if (r == loomSuccess) cc->tune = all[0];
  int loads = tp_direct_loads(comm);
  /* Thread ranks read with loads (one copy); processes by cross-memory
   * attach, its own table (read_gbps 0). */
  cc->tune.read_gbps = loads ? 2 * cc->tune.copy_gbps : 0;
  cc->tune.read_call_us = loads ? 0 : cc->tune.cma_us;
  free(all);
  if (r != loomSuccess) return r;
  cc->proto = tune_proto_pick();
  if (comm->rank == 0)
    LOOM_INFO(SUB_TUNE, "protocol %s (%s)", tune_proto_name(cc->proto),
              tune_proto_forced() ? "LOOM_PROTO" : "the host path's only protocol");
  return shape_init(comm, cc);
}

void coll_comm_fini(struct loom_comm* comm) {
  struct coll_comm* cc = comm->coll;
  if (!cc) return;
  exec_cuda_comm_fini(comm);
  pthread_mutex_destroy(&cc->exec_lock);
  pthread_mutex_destroy(&cc->ops_lock);
  scratch_obj_unref(cc->scratch);
  free(cc->host_of);
  for (int i = 0; i < PLAN_CACHE; i++) plan_obj_unref(cc->plans[i].obj);
  free(cc);
  comm->coll = NULL;
}

static void self_info(const struct loom_comm* comm, struct peer_info* self) {
  memset(self, 0, sizeof(*self));
  self->rank = comm->rank;
  self->pid = (int32_t)getpid();
  cuda_notice(); /* a program that uses CUDA has loaded its driver by now */
  self->cuda_dev = comm->cuda_dev;
  /* The device's identity, for peers in other processes (its ordinal means
   * nothing to them). Checked already by whoever bound the rank. */
  if (comm->cuda_dev >= 0 && cuda_device_identity(comm->cuda_dev, &self->dev) != loomSuccess)
    memset(&self->dev, 0, sizeof(self->dev));
  /* Probed, or given by LOOM_TOPO_FILE or LOOM_HOSTID (tests that make
   * hosts of processes of one machine, containers that share a boot id and
   * a namespace). */
  const struct topo_facts* topo = topo_get();
  self->host_id = topo->host_id;
  self->machine_id = topo->machine_id;
  self->cpus = topo->cpus;
  self->process_token = process_token_get();
  LOOM_INFO(SUB_INIT, "rank %d: host %s (%s), machine %s (%s), %d cpus (%s)", comm->rank,
            topo->host, topo->given & TOPO_HOST ? "given" : "probed", topo->machine,
            topo->given & TOPO_MACHINE ? "given" : "probed", topo->cpus,
            topo->given & TOPO_CPUS ? "given" : "probed");
  params_agreed_digest(self->settings);
  /* What the ranks agree on is the communicator's value: config.checkArgs
   * and config.deterministic override their variables. */
  comm_settings_own(comm, self->settings);
  gethostname(self->hostname, sizeof(self->hostname) - 1);
}

/* Brings every layer up, in order. On failure the caller tears down. */
static loomResult_t init_body(struct loom_comm* comm, const struct boot_id* id) {
  struct peer_info self;
  self_info(comm, &self);
  LOOM_CHECK(boot_init(comm, id, &self));
  LOOM_CHECK(comm_settings_check(comm));
  LOOM_CHECK(tp_comm_init(comm));
  LOOM_CHECK(coll_comm_init(comm));
  struct deadline dl = deadline_in_ms(comm->timeout_ms);
  fault_point("initdone", comm->rank);
  LOOM_CHECK(boot_barrier_init_done(comm, &dl));
  /* Everyone passed the last barrier: init is done. A peer that fails from
   * here on (even at once) is the next operation's error, not init's. */
  int expect = loomInProgress;
  atomic_compare_exchange_strong(&comm->async_error, &expect, loomSuccess);
  LOOM_INFO(SUB_INIT, "rank %d of %d ready (comm %016llx%s%s)", comm->rank, comm->nranks,
            (unsigned long long)comm->comm_hash, comm->name[0] ? ", " : "", comm->name);
  memstat_log(comm, "after init");
  recorder_publish(comm);
  return loomSuccess;
}

/* Tears down whatever init_body brought up; never blocks on peers. */
static void comm_teardown(struct loom_comm* comm, int clean) {
  memstat_log(comm, "before release");
  boot_fini(comm, clean);
  if (comm->coll) reg_comm_fini(comm); /* deregistered while the transports are up */
  exec_cuda_comm_fini(comm);           /* its stream done before the device areas go */
  tp_comm_fini(comm);
  coll_comm_fini(comm);
  comm_free(comm);
}

struct init_job {
  struct loom_comm* comm;
  struct boot_id id;
};

static void* init_thread_main(void* arg) {
  struct init_job* job = arg;
  loomResult_t r = init_body(job->comm, &job->id);
  loomResult_t cause = comm_forming_end(job->comm, r == loomSuccess);
  if (cause != loomSuccess) r = cause;
  if (r != loomSuccess && r != loomInProgress) {
    int expect = loomInProgress;
    atomic_compare_exchange_strong(&job->comm->async_error, &expect, (int)r);
  }
  comm_state_changed(job->comm); /* calls waiting for the init go on */
  free(job);
  return NULL;
}

loomResult_t coll_settings_check(void) {
  LOOM_CHECK(params_check());
  LOOM_CHECK(tune_algo_check(params_get()->algo));
  LOOM_CHECK(tune_proto_check(params_get()->proto));
  LOOM_CHECK(topo_check());
  LOOM_CHECK(recorder_signal_setup());
  return tp_transports_check(params_get()->transports);
}

loomResult_t coll_check_config(const loomConfig_t* config) {
  if (config && config->magic != LOOM_CONFIG_MAGIC)
    return err_set(NULL, loomInvalidArgument,
                   "invalid argument: config was not initialised with LOOM_CONFIG_INITIALIZER");
  return loomSuccess;
}

loomResult_t coll_init_rank(loomComm_t* out, int nranks, const struct boot_id* id, int rank,
                            const loomConfig_t* config, struct loom_comm* parent, int cuda_dev) {
  if (!out) return err_set(NULL, loomInvalidArgument, "invalid argument: comm pointer is NULL");
  if (nranks < 1)
    return err_set(NULL, loomInvalidArgument, "invalid argument: nranks %d is less than 1", nranks);
  if (rank < 0 || rank >= nranks)
    return err_set(NULL, loomInvalidArgument, "invalid argument: rank %d is out of range [0, %d)",
                   rank, nranks);
  if (id->magic != BOOT_ID_MAGIC || id->version != BOOT_WIRE_VERSION)
    return err_set(
        NULL, loomInvalidArgument,
        "invalid argument: the unique id was not made by loomGetUniqueId of this version");
  LOOM_CHECK(coll_check_config(config));
  LOOM_CHECK(coll_settings_check());
  struct loom_comm* comm;
  LOOM_CHECK(comm_alloc(nranks, rank, config, &comm));
  comm->cuda_dev = cuda_dev;
  if (parent) comm_forming_begin(parent, comm);
  if (comm->blocking) {
    loomResult_t r = init_body(comm, id);
    loomResult_t cause = comm_forming_end(comm, r == loomSuccess);
    if (r != loomSuccess) {
      comm_teardown(comm, 0);
      return cause != loomSuccess ? cause : r;
    }
    *out = comm_handle(comm);
    return loomSuccess;
  }
  struct init_job* job = malloc(sizeof(*job));
  if (!job) {
    comm_free(comm);
    return err_set(NULL, loomSystemError, "out of memory");
  }
  job->comm = comm;
  job->id = *id;
  int rc = pthread_create(&comm->init_thread, NULL, init_thread_main, job);
  if (rc != 0) {
    free(job);
    comm_free(comm);
    return err_set(NULL, loomSystemError, "cannot start the init thread: %s", strerror(rc));
  }
  comm->init_thread_live = 1;
  *out = comm_handle(comm);
  return loomInProgress;
}

/* A loomUniqueId is bytes: the caller may keep it at any address (a field
 * at offset 4, a packed message), so it is copied to an aligned boot_id, never
 * read through a cast. */
static struct boot_id id_of(const loomUniqueId* u) {
  struct boot_id id;
  _Static_assert(sizeof(id) == sizeof(u->internal), "boot_id must fill the id");
  memcpy(&id, u->internal, sizeof(id));
  return id;
}

loomResult_t loomCommInitRankConfig(loomComm_t* comm, int nranks, loomUniqueId commId, int rank,
                                    loomConfig_t* config) {
  struct boot_id id = id_of(&commId);
  return coll_init_rank(comm, nranks, &id, rank, config, NULL, -1);
}

loomResult_t loomCommInitRank(loomComm_t* comm, int nranks, loomUniqueId commId, int rank) {
  struct boot_id id = id_of(&commId);
  return coll_init_rank(comm, nranks, &id, rank, NULL, NULL, -1);
}

loomResult_t loomGetUniqueId(loomUniqueId* uniqueId) {
  if (!uniqueId) return err_set(NULL, loomInvalidArgument, "invalid argument: uniqueId is NULL");
  _Static_assert(sizeof(struct boot_id) == LOOM_UNIQUE_ID_BYTES, "boot_id must fill the id");
  memset(uniqueId, 0, sizeof(*uniqueId));
  LOOM_CHECK(coll_settings_check());
  struct boot_id id;
  memset(&id, 0, sizeof(id));
  LOOM_CHECK(boot_id_create(&id));
  memcpy(uniqueId->internal, &id, sizeof(id)); /* any alignment: see id_of */
  return loomSuccess;
}

loomResult_t coll_comm_settled(struct loom_comm* comm) {
  /* A non-blocking init still running: wait for its end. */
  if (atomic_load(&comm->async_error) == loomInProgress) LOOM_CHECK(comm_await_init(comm));
  if (comm->coll) return loomSuccess;
  return comm_health(comm);
}

loomResult_t coll_comm_ready(struct loom_comm* comm) {
  LOOM_CHECK(coll_comm_settled(comm));
  if (atomic_load(&comm->aborted))
    return err_set(comm, loomInvalidUsage, "the communicator was aborted");
  return comm_health(comm);
}

static void join_init_thread(struct loom_comm* comm) {
  if (comm->init_thread_live) {
    pthread_join(comm->init_thread, NULL);
    comm->init_thread_live = 0;
  }
}

/* A bootstrap exchange that timed out or lost a peer leaves the
 * communicator in error, like any other wait. */
static loomResult_t boot_broke(struct loom_comm* comm, loomResult_t r) {
  if (r == loomTimeout || r == loomRemoteError)
    comm_set_failed(comm, -1, r, "%s", err_thread_last());
  return r;
}

/* Every launch prepared on the communicator (queued on streams, or running
 * on other threads) must be released before the communicator goes. Each
 * has deadlines of its own, and fails fast once the communicator is
 * aborted or broken. */
static void wait_queued(struct loom_comm* comm) {
  struct coll_comm* cc = comm->coll;
  if (!cc) return;
  coll_inflight_wait(cc);
}

loomResult_t loomCommFinalize(loomComm_t handle) {
  struct loom_comm* comm = NULL;
  LOOM_CHECK(comm_get(handle, "loomCommFinalize", &comm));
  join_init_thread(comm);
  LOOM_CHECK(comm_health(comm));
  wait_queued(comm);
  LOOM_CHECK(comm_health(comm));
  struct deadline dl = deadline_in_ms(comm->timeout_ms);
  comm_boot_enter(comm);
  loomResult_t r = boot_broke(comm, boot_barrier(comm, &dl));
  comm_boot_leave(comm);
  return r;
}

loomResult_t loomCommDestroy(loomComm_t handle) {
  struct loom_comm* comm = NULL;
  LOOM_CHECK(comm_end(handle, "loomCommDestroy", &comm));
  join_init_thread(comm);
  wait_queued(comm);
  comm_teardown(comm, 1);
  return loomSuccess;
}

loomResult_t loomCommAbort(loomComm_t handle) {
  struct loom_comm* comm = NULL;
  LOOM_CHECK(comm_end(handle, "loomCommAbort", &comm));
  recorder_dump(comm, "loomCommAbort"); /* what was in flight, before the flag stops it */
  atomic_store(&comm->aborted, COMM_ABORT_USER);
  comm_wake(comm);
  comm_fail_hook_run(comm); /* device waits released */
  join_init_thread(comm);   /* its waits watch the abort flag */
  /* Launches queued on streams or running on other threads notice the flag
   * at their next wake-up and fail fast. */
  wait_queued(comm);
  /* Splits and finalizes inside the bootstrap watch the flag too. One that
   * does not leave in time keeps the communicator: freeing it under that
   * call would be worse than the leak. */
  if (!comm_await_boot_users(comm, comm->timeout_ms)) {
    LOOM_WARN(SUB_INIT,
              "rank %d: loomCommAbort: a split or finalize on another thread is still inside "
              "the bootstrap after %lld ms; the communicator stays allocated",
              comm->rank, comm->timeout_ms);
    return loomSuccess;
  }
  comm_teardown(comm, 0);
  return loomSuccess;
}

loomResult_t loomCommGetAsyncError(loomComm_t handle, loomResult_t* asyncError) {
  struct loom_comm* comm = NULL;
  LOOM_CHECK(comm_get(handle, "loomCommGetAsyncError", &comm));
  if (!asyncError)
    return err_set(comm, loomInvalidArgument, "invalid argument: asyncError is NULL");
  *asyncError = (loomResult_t)atomic_load(&comm->async_error);
  return loomSuccess;
}

loomResult_t loomCommCount(const loomComm_t handle, int* count) {
  struct loom_comm* comm = NULL;
  LOOM_CHECK(comm_get(handle, "loomCommCount", &comm));
  if (!count) return err_set(comm, loomInvalidArgument, "invalid argument: count is NULL");
  *count = comm->nranks;
  return loomSuccess;
}

loomResult_t loomCommUserRank(const loomComm_t handle, int* rank) {
  struct loom_comm* comm = NULL;
  LOOM_CHECK(comm_get(handle, "loomCommUserRank", &comm));
  if (!rank) return err_set(comm, loomInvalidArgument, "invalid argument: rank is NULL");
  *rank = comm->rank;
  return loomSuccess;
}

loomResult_t loomCommCuDevice(const loomComm_t handle, int* device) {
  struct loom_comm* comm = NULL;
  LOOM_CHECK(comm_get(handle, "loomCommCuDevice", &comm));
  if (!device) return err_set(comm, loomInvalidArgument, "invalid argument: device is NULL");
  *device = comm->cuda_dev; /* -1 for host ranks */
  return loomSuccess;
}

/* ---- Split ---- */

/* A split whose new communicator could not be made says why on the parent
 * too (loomGetLastError(parent)), and a failure of the parent (a dead rank)
 * is the parent's error, naming the rank as the parent numbers it, as for
 * any collective on it. The new communicator's own bootstrap may see a dead
 * member before the parent's watcher does: a remote error waits a moment
 * for the parent to name the cause. */
static loomResult_t split_failed(struct loom_comm* comm, loomResult_t r) {
  if (r == loomRemoteError) comm_await_failure(comm, tp_self_bell(comm), 1500);
  loomResult_t health = comm_health(comm); /* copies the cause to this thread */
  if (health != loomSuccess) return health;
  pthread_mutex_lock(&comm->err_lock);
  snprintf(comm->last_error, sizeof(comm->last_error), "%s", err_thread_last());
  pthread_mutex_unlock(&comm->err_lock);
  return r;
}

struct split_key {
  int32_t color, key;
};

loomResult_t loomCommSplit(loomComm_t handle, int color, int key, loomComm_t* newcomm,
                           loomConfig_t* config) {
  struct loom_comm* comm = NULL;
  LOOM_CHECK(comm_get(handle, "loomCommSplit", &comm));
  LOOM_CHECK(coll_comm_ready(comm));
  if (!newcomm) return err_set(comm, loomInvalidArgument, "invalid argument: newcomm is NULL");
  if (color < 0 && color != LOOM_SPLIT_NOCOLOR)
    return err_set(comm, loomInvalidArgument, "invalid argument: color %d is negative", color);
  LOOM_CHECK(coll_check_config(config));
  int n = comm->nranks;
  struct deadline dl = deadline_in_ms(comm->timeout_ms);
  struct split_key mine = {color, key};
  struct split_key* all = malloc((size_t)n * sizeof(*all));
  struct boot_id* ids = calloc((size_t)n, sizeof(*ids));
  loomResult_t r = loomSuccess;
  if (!all || !ids) {
    r = err_set(comm, loomSystemError, "out of memory");
    goto out;
  }
  comm_boot_enter(comm);
  r = boot_broke(comm, boot_allgather(comm, &mine, sizeof(mine), all, &dl));
  if (r != loomSuccess) goto out;
  /* New rank = place among the same color, ordered by (key, old rank). */
  int newrank = 0, newsize = 0, leader = -1;
  for (int p = 0; p < n; p++) {
    if (all[p].color != color || color == LOOM_SPLIT_NOCOLOR) continue;
    newsize++;
    if (all[p].key < key || (all[p].key == key && p < comm->rank)) newrank++;
    if (leader < 0 || all[p].key < all[leader].key) leader = p;
  }
  struct boot_id myid = {0};
  if (color != LOOM_SPLIT_NOCOLOR && newrank == 0) LOOM_CHECK_GOTO(boot_id_create(&myid), r, out);
  LOOM_CHECK_GOTO(boot_broke(comm, boot_allgather(comm, &myid, sizeof(myid), ids, &dl)), r, out);
  if (color == LOOM_SPLIT_NOCOLOR) {
    *newcomm = NULL;
    goto out;
  }
  loomConfig_t inherit;
  comm_config_inherit(comm, &inherit);
  r = coll_init_rank(newcomm, newsize, &ids[leader], newrank, config ? config : &inherit, comm,
                     comm->cuda_dev);
  if (r != loomSuccess && r != loomInProgress) r = split_failed(comm, r);
out:
  if (all && ids) comm_boot_leave(comm);
  free(all);
  free(ids);
  return r;
}

/* ---- Environment ---- */

static const char* env_get(const char* name) {
  const char* v = getenv(name);
  return v && *v ? v : NULL;
}

/* A decimal integer, the whole string. */
static int env_int(const char* text, long long* out) {
  char* end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || end == text || *end || !(text[0] == '-' || (text[0] >= '0' && text[0] <= '9')))
    return -1;
  *out = v;
  return 0;
}

/* Finds rank, size and the root address in the families API.md lists. */
static loomResult_t env_rendezvous(int* rank, int* size, char* root, size_t root_len) {
  static const char* const fam[][2] = {{"LOOM_RANK", "LOOM_WORLD_SIZE"},
                                       {"RANK", "WORLD_SIZE"},
                                       {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                       {"PMI_RANK", "PMI_SIZE"},
                                       {"SLURM_PROCID", "SLURM_NTASKS"}};
  int f = 0;
  while (f < 5 && !(env_get(fam[f][0]) && env_get(fam[f][1]))) f++;
  if (f == 5)
    return err_set(NULL, loomInvalidUsage,
                   "loomCommInitFromEnv: no rank and size in the environment (LOOM_RANK/"
                   "LOOM_WORLD_SIZE, RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, PMI_*, SLURM_PROCID/"
                   "SLURM_NTASKS)");
  long long r = -1, sz = 0;
  if (env_int(env_get(fam[f][0]), &r) != 0 || env_int(env_get(fam[f][1]), &sz) != 0 || sz < 1 ||
      sz > INT32_MAX || r < 0 || r >= sz)
    return err_set(NULL, loomInvalidArgument,
                   "invalid argument: loomCommInitFromEnv: %s=%s with %s=%s: the rank must be an "
                   "integer from 0 to the size - 1, the size an integer from 1",
                   fam[f][0], env_get(fam[f][0]), fam[f][1], env_get(fam[f][1]));
  *rank = (int)r;
  *size = (int)sz;
  const char* loom_root = env_get("LOOM_ROOT");
  const char *maddr = env_get("MASTER_ADDR"), *mport = env_get("MASTER_PORT");
  /* The torchrun family names its own root first; every other family takes
   * LOOM_ROOT first. */
  if (f == 1 && maddr && mport)
    snprintf(root, root_len, "%s:%s", maddr, mport);
  else if (loom_root)
    snprintf(root, root_len, "%s", loom_root);
  else if (maddr && mport)
    snprintf(root, root_len, "%s:%s", maddr, mport);
  else
    return err_set(NULL, loomInvalidUsage,
                   "loomCommInitFromEnv: no rendezvous address: set LOOM_ROOT=host:port or "
                   "MASTER_ADDR and MASTER_PORT");
  return loomSuccess;
}

loomResult_t loomCommInitFromEnv(loomComm_t* comm, loomConfig_t* config) {
  if (!comm) return err_set(NULL, loomInvalidArgument, "invalid argument: comm pointer is NULL");
  LOOM_CHECK(coll_check_config(config));
  LOOM_CHECK(coll_settings_check());
  int rank = 0, size = 0;
  char root[256];
  LOOM_CHECK(env_rendezvous(&rank, &size, root, sizeof(root)));
  uint64_t secret;
  const char* hex = params_get()->secret;
  if (hex && *hex) {
    char* end;
    secret = strtoull(hex, &end, 16);
    if (*end) return err_set(NULL, loomInvalidArgument, "invalid argument: LOOM_SECRET is not hex");
  } else {
    /* Without LOOM_SECRET every rank derives the same value from what it
     * shares; it keeps strays out, not attackers (docs/bootstrap.md). */
    char seed[300];
    snprintf(seed, sizeof(seed), "%s/%d", root, size);
    secret = hash64(seed, strlen(seed), 0x6c6f6f6d);
  }
  struct boot_id id;
  LOOM_CHECK(boot_id_from_addr(root, secret, rank == 0, &id));
  loomResult_t r = coll_init_rank(comm, size, &id, rank, config, NULL, -1);
  if (r != loomSuccess && r != loomInProgress) boot_id_release(&id); /* a retry can bind again */
  return r;
}

/* ---- Init of several ranks in this process ---- */

struct all_job {
  loomComm_t* slot;
  const struct boot_id* id;
  int n, rank;
  int dev; /* devlist[rank], or -1 */
  loomResult_t res;
  char err[LOOM_ERR_LEN];
};

static void* all_thread(void* arg) {
  struct all_job* j = arg;
  j->res = coll_init_rank(j->slot, j->n, j->id, j->rank, NULL, NULL, j->dev);
  if (j->res != loomSuccess) snprintf(j->err, sizeof(j->err), "%s", err_thread_last());
  return NULL;
}

loomResult_t loomCommInitAll(loomComm_t* comms, int ndev, const int* devlist) {
  if (!comms) return err_set(NULL, loomInvalidArgument, "invalid argument: comms is NULL");
  if (ndev < 1) return err_set(NULL, loomInvalidArgument, "invalid argument: ndev %d < 1", ndev);
  /* Every device is checked before any rank starts, so a bad entry fails
   * the call at once, naming it. */
  for (int i = 0; devlist && i < ndev; i++) {
    struct dev_identity idn;
    if (cuda_device_identity(devlist[i], &idn) != loomSuccess) {
      char why[LOOM_ERR_LEN];
      snprintf(why, sizeof(why), "%s", err_thread_last());
      return err_set(NULL, cuda_present() ? loomInvalidArgument : loomInvalidUsage,
                     "loomCommInitAll: devlist[%d] = %d: %s%s", i, devlist[i], why,
                     cuda_present() ? "" : "; pass devlist NULL for host ranks");
    }
  }
  loomUniqueId uid;
  LOOM_CHECK(loomGetUniqueId(&uid));
  struct boot_id uid_id = id_of(&uid);
  struct all_job* jobs = calloc((size_t)ndev, sizeof(*jobs));
  pthread_t* th = calloc((size_t)ndev, sizeof(*th));
  if (!jobs || !th) {
    free(jobs);
    free(th);
    return err_set(NULL, loomSystemError, "out of memory");
  }
  int started = 0;
  for (int i = 0; i < ndev; i++) {
    jobs[i] =
        (struct all_job){&comms[i], &uid_id, ndev, i, devlist ? devlist[i] : -1, loomSuccess, ""};
    comms[i] = NULL;
    if (pthread_create(&th[i], NULL, all_thread, &jobs[i]) != 0) break;
    started++;
  }
  loomResult_t res = loomSuccess;
  for (int i = 0; i < started; i++) {
    pthread_join(th[i], NULL);
    if (jobs[i].res != loomSuccess && res == loomSuccess) {
      res = jobs[i].res;
      err_copy_to_thread(jobs[i].err);
    }
  }
  if (started < ndev && res == loomSuccess)
    res = err_set(NULL, loomSystemError, "cannot start threads for loomCommInitAll");
  if (res != loomSuccess) {
    for (int i = 0; i < ndev; i++)
      if (comms[i]) {
        loomCommAbort(comms[i]);
        comms[i] = NULL;
      }
  }
  free(jobs);
  free(th);
  return res;
}

/* ---- Versions and errors ---- */

loomResult_t loomGetVersion(int* version) {
  if (!version) return err_set(NULL, loomInvalidArgument, "invalid argument: version is NULL");
  *version = LOOM_VERSION_CODE;
  return loomSuccess;
}

const char* loomGetErrorString(loomResult_t result) {
  switch (result) {
    case loomSuccess:
      return "no error";
    case loomUnhandledCudaError:
      return "unhandled cuda error";
    case loomSystemError:
      return "unhandled system error";
    case loomInternalError:
      return "internal error";
    case loomInvalidArgument:
      return "invalid argument";
    case loomInvalidUsage:
      return "invalid usage";
    case loomRemoteError:
      return "remote process exited or there was a network error";
    case loomInProgress:
      return "operation in progress";
    case loomTimeout:
      return "operation timed out";
    default:
      return "unknown result code";
  }
}

const char* loomGetLastError(loomComm_t handle) {
  static __thread char copy[LOOM_ERR_LEN];
  struct loom_comm* comm = handle_get((uint64_t)(uintptr_t)handle, HANDLE_COMM);
  if (!comm) return err_thread_last();
  pthread_mutex_lock(&comm->err_lock);
  snprintf(copy, sizeof(copy), "%s", comm->last_error);
  pthread_mutex_unlock(&comm->err_lock);
  return copy;
}

loomResult_t loomSetLastError(loomComm_t handle, const char* message) {
  struct loom_comm* comm = handle_get((uint64_t)(uintptr_t)handle, HANDLE_COMM);
  if (handle != NULL && comm == NULL)
    return err_set(NULL, loomInvalidArgument,
                   "invalid argument: loomSetLastError: comm %p is not a live communicator",
                   (void*)handle);
  if (message == NULL)
    return err_set(comm, loomInvalidArgument,
                   "invalid argument: loomSetLastError: message is NULL");
  err_set_text(comm, message);
  return loomSuccess;
}
