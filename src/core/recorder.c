/* recorder.c - the flight recorder (see recorder.h). */
#include "core/recorder.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/checks.h"
#include "core/comm.h"
#include "core/debug.h"
#include "core/dtype.h"
#include "core/memstat.h"
#include "core/params.h"

struct rec_slot {
  _Atomic uint64_t id; /* the call's number + 1 on this communicator; 0: never used */
  _Atomic int64_t seq; /* its collective number, or its point-to-point number (is_p2p) */
  _Atomic int32_t kind, is_p2p, dtype, op, root, state, result, peer, is_send;
  _Atomic uint32_t step, nsteps;
  _Atomic uint64_t count, stream, bytes;
  _Atomic int64_t t_enqueue, t_start, t_wait, t_end; /* ns since the epoch; 0: not yet */
  _Atomic(const char*) algo;
};

struct recorder {
  struct loom_comm* comm;
  uint32_t size;
  _Atomic uint64_t calls, colls, p2ps; /* numbered so far */
  _Atomic int dumped;
  struct recorder* next_live; /* the registry, for signals */
  size_t bytes;               /* counted in memstat */
  struct rec_slot slots[];
};

#define R(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)
#define RL(p) atomic_load_explicit((p), memory_order_relaxed)

/* The coarse clock (a few ms of resolution, enough to order a hang's events) costs a few ns
 * where the precise one costs tens on a virtual machine: three reads per call. */
static int64_t wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- The registry (signals dump every live communicator) --------------------------- */

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct recorder* live_head;

static void live_add(struct recorder* r) {
  pthread_mutex_lock(&live_lock);
  r->next_live = live_head;
  live_head = r;
  pthread_mutex_unlock(&live_lock);
}

static void live_remove(struct recorder* r) {
  pthread_mutex_lock(&live_lock); /* never added: nothing found */
  for (struct recorder** p = &live_head; *p; p = &(*p)->next_live)
    if (*p == r) {
      *p = r->next_live;
      break;
    }
  pthread_mutex_unlock(&live_lock);
}

/* ---- Recording ------------------------------------------------------------------ */

loomResult_t recorder_create(struct loom_comm* comm, struct recorder** out) {
  *out = NULL;
  long long n = params_get()->recorder_size;
  if (n <= 0) return loomSuccess;
  size_t bytes = sizeof(struct recorder) + (size_t)n * sizeof(struct rec_slot);
  /* Mapped with its pages in place: each call writes the next slot, and a fresh page's first
   * write faults. On the 2-vCPU VM of docs/PERFORMANCE.md a fault cost 13 us where populating
   * the map cost under 1 us a page, and with ranks outnumbering cores a rank that faults loses
   * its core: a communicator's first 2048 calls (the default ring, 64 pages) ran 1.5x slower
   * (docs/PERFORMANCE.md, "Page faults on the call path"). Zero, as a fresh anonymous map is. */
  struct recorder* r =
      mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (r == MAP_FAILED)
    return err_set(comm, loomSystemError, "cannot map %zu bytes for the flight recorder: %s", bytes,
                   strerror(errno));
  r->comm = comm;
  r->size = (uint32_t)n;
  r->bytes = bytes;
  memstat_add(comm, MEM_RECORDER, -1, bytes);
  *out = r;
  return loomSuccess;
}

void recorder_publish(struct loom_comm* comm) {
  if (comm->rec) live_add(comm->rec);
}

void recorder_destroy(struct loom_comm* comm) {
  struct recorder* r = comm->rec;
  if (!r) return;
  live_remove(r); /* a signal's dump holds live_lock while it reads */
  comm->rec = NULL;
  memstat_sub(comm, MEM_RECORDER, -1, r->bytes);
  munmap(r, r->bytes);
}

/* The slot of call id, if it still holds it. */
static struct rec_slot* slot_of(struct recorder* r, uint64_t id) {
  if (!r || id == 0) return NULL;
  struct rec_slot* s = &r->slots[(id - 1) % r->size];
  return RL(&s->id) == id ? s : NULL;
}

uint64_t recorder_enqueue(struct recorder* r, const struct rec_call* c) {
  if (!r) return 0;
  uint64_t id = atomic_fetch_add_explicit(&r->calls, 1, memory_order_relaxed) + 1;
  int64_t seq =
      (int64_t)atomic_fetch_add_explicit(c->is_p2p ? &r->p2ps : &r->colls, 1, memory_order_relaxed);
  struct rec_slot* s = &r->slots[(id - 1) % r->size];
  R(&s->id, 0); /* readers skip it while it changes hands */
  R(&s->seq, seq);
  R(&s->kind, c->kind);
  R(&s->is_p2p, c->is_p2p);
  R(&s->dtype, (int32_t)c->dtype);
  R(&s->op, (int32_t)c->op);
  R(&s->root, c->root);
  R(&s->count, (uint64_t)c->count);
  R(&s->stream, c->stream);
  R(&s->state, REC_ENQUEUED);
  R(&s->result, loomSuccess);
  R(&s->peer, -1);
  R(&s->is_send, 0);
  R(&s->bytes, 0);
  R(&s->step, 0);
  R(&s->nsteps, 0);
  R(&s->algo, NULL);
  R(&s->t_enqueue, wall_ns());
  R(&s->t_start, 0);
  R(&s->t_wait, 0);
  R(&s->t_end, 0);
  atomic_store_explicit(&s->id, id, memory_order_release);
  return id;
}

void recorder_start(struct recorder* r, uint64_t id, const char* algo, uint32_t nsteps) {
  struct rec_slot* s = slot_of(r, id);
  if (!s) return;
  R(&s->algo, algo);
  R(&s->nsteps, nsteps);
  R(&s->t_start, wall_ns());
  R(&s->state, REC_STARTED);
}

void recorder_wait(struct recorder* r, uint64_t id, uint32_t step, int peer, int is_send,
                   size_t bytes) {
  struct rec_slot* s = slot_of(r, id);
  if (!s) return;
  R(&s->step, step);
  R(&s->peer, peer);
  R(&s->is_send, is_send);
  R(&s->bytes, (uint64_t)bytes);
  if (RL(&s->t_wait) == 0) R(&s->t_wait, wall_ns());
  R(&s->state, REC_WAITING);
}

void recorder_end(struct recorder* r, uint64_t id, loomResult_t result) {
  struct rec_slot* s = slot_of(r, id);
  if (!s || (result != loomSuccess && RL(&s->state) == REC_DONE)) return;
  R(&s->result, (int32_t)result);
  R(&s->t_end, wall_ns());
  R(&s->state, result == loomSuccess ? REC_DONE : REC_FAILED);
}

/* ---- Writing -------------------------------------------------------------------- */

static const char* state_name(int s) {
  switch (s) {
    case REC_ENQUEUED:
      return "enqueued";
    case REC_STARTED:
      return "started";
    case REC_WAITING:
      return "waiting";
    case REC_DONE:
      return "done";
    case REC_FAILED:
      return "failed";
  }
  return "unknown";
}

static const char* kind_name(int kind, int is_p2p) {
  static const char* const names[] = {
#define COLL(id, token, text, flags) token,
#include "core/colls.def"
#undef COLL
  };
  if (is_p2p) return kind == (int)(sizeof(names) / sizeof(names[0])) ? "send" : "recv";
  return kind >= 0 && kind < (int)(sizeof(names) / sizeof(names[0])) ? names[kind] : "unknown";
}

static const char* op_name(int op) {
  static const char* const names[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < 5 ? names[op] : "premulsum";
}

/* s as a JSON string body. */
static void json_string(FILE* f, const char* s) {
  fputc('"', f);
  for (const unsigned char* p = (const unsigned char*)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20 || *p >= 0x7f)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

/* "loom-rec-<comm hash>-r<rank>.json" */
static void recorder_file_name(uint64_t hash, int rank, char* buf, size_t len) {
  snprintf(buf, len, "loom-rec-%016llx-r%d.json", (unsigned long long)hash, rank);
}

static void write_slot(FILE* f, const struct rec_slot* s, uint64_t id) {
  int p2p = RL(&s->is_p2p), kind = RL(&s->kind), state = RL(&s->state);
  const char* algo = RL(&s->algo);
  fprintf(f, "  {\"call\": %llu, \"%s\": %lld, \"kind\": \"%s\", \"algo\": \"%s\", ",
          (unsigned long long)(id - 1), p2p ? "p2p_seq" : "seq", (long long)RL(&s->seq),
          kind_name(kind, p2p), algo ? algo : "");
  fprintf(f, "\"count\": %llu, \"dtype\": \"%s\", \"op\": \"%s\", \"root\": %d, ",
          (unsigned long long)RL(&s->count), dtype_name((loomDataType_t)RL(&s->dtype)),
          op_name(RL(&s->op)), (int)RL(&s->root));
  fprintf(f, "\"stream\": \"%llx\", \"state\": \"%s\", \"step\": %u, \"nsteps\": %u, ",
          (unsigned long long)RL(&s->stream), state_name(state), RL(&s->step), RL(&s->nsteps));
  fprintf(f, "\"wait_peer\": %d, \"wait_dir\": \"%s\", \"wait_bytes\": %llu, \"result\": \"%s\", ",
          (int)RL(&s->peer), RL(&s->is_send) ? "send" : "recv", (unsigned long long)RL(&s->bytes),
          state == REC_FAILED ? loomGetErrorString((loomResult_t)RL(&s->result)) : "");
  fprintf(f,
          "\"t_enqueue_ns\": %lld, \"t_start_ns\": %lld, \"t_wait_ns\": %lld, "
          "\"t_end_ns\": %lld}",
          (long long)RL(&s->t_enqueue), (long long)RL(&s->t_start), (long long)RL(&s->t_wait),
          (long long)RL(&s->t_end));
}

/* Writes the file (a temporary, renamed over it). 0 or an errno value. */
static int dump_write(struct recorder* r, const char* dir, const char* reason) {
  struct loom_comm* comm = r->comm;
  char name[96], path[4096], tmp[4200];
  recorder_file_name(comm->comm_hash, comm->rank, name, sizeof(name));
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
  FILE* f = fopen(tmp, "w");
  if (!f) return errno;
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  uint64_t calls = RL(&r->calls);
  fprintf(f, "{\"loom_flight_record\": 1, \"comm\": \"%016llx\", \"name\": ",
          (unsigned long long)comm->comm_hash);
  json_string(f, comm->name);
  fprintf(f, ", \"rank\": %d, \"nranks\": %d, \"pid\": %d, \"host\": ", comm->rank, comm->nranks,
          (int)getpid());
  json_string(f, host);
  fprintf(f, ", \"time_ns\": %lld, \"reason\": ", (long long)wall_ns());
  json_string(f, reason);
  fprintf(f,
          ", \"failed_peer\": %d, \"calls\": %llu, \"collectives\": %llu, \"p2p\": %llu, "
          "\"size\": %u,\n \"ops\": [\n",
          atomic_load(&comm->failed_peer), (unsigned long long)calls,
          (unsigned long long)RL(&r->colls), (unsigned long long)RL(&r->p2ps), r->size);
  uint64_t first = calls > r->size ? calls - r->size + 1 : 1;
  const char* sep = "";
  for (uint64_t id = first; id <= calls; id++) {
    const struct rec_slot* s = &r->slots[(id - 1) % r->size];
    if (atomic_load_explicit(&s->id, memory_order_acquire) != id) continue; /* changing hands */
    fputs(sep, f);
    write_slot(f, s, id);
    sep = ",\n";
  }
  fputs("\n ]}\n", f);
  int e = ferror(f) ? EIO : 0;
  if (fclose(f) != 0 && !e) e = errno;
  if (!e && rename(tmp, path) != 0) e = errno;
  if (e) unlink(tmp);
  return e;
}

static void dump_now(struct recorder* r, const char* reason) {
  struct loom_comm* comm = r->comm;
  const char* dir = params_get()->dump_dir;
  if (!dir || !*dir) return;
  int e = dump_write(r, dir, reason);
  if (e)
    LOOM_WARN(SUB_INIT, "rank %d: cannot write the flight record to %s: %s", comm->rank, dir,
              strerror(e));
  else
    LOOM_INFO(SUB_INIT, "rank %d: flight record written to %s (%s)", comm->rank, dir, reason);
}

void recorder_dump(struct loom_comm* comm, const char* reason) {
  if (!comm->rec || atomic_exchange(&comm->rec->dumped, 1)) return;
  dump_now(comm->rec, reason);
}

/* ---- LOOM_DUMP_SIGNAL ----------------------------------------------------------- */

static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig) {
  int saved = errno;
  unsigned char b = (unsigned char)sig;
  ssize_t n = write(sig_pipe[1], &b, 1); /* async-signal-safe; a full pipe drops it */
  (void)n;
  errno = saved;
}

static void* signal_thread(void* arg) {
  (void)arg;
  for (;;) {
    unsigned char b;
    ssize_t n = read(sig_pipe[0], &b, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return NULL;
    char reason[64];
    snprintf(reason, sizeof(reason), "signal %s", params_get()->dump_signal);
    pthread_mutex_lock(&live_lock);
    for (struct recorder* r = live_head; r; r = r->next_live) dump_now(r, reason);
    pthread_mutex_unlock(&live_lock);
  }
}

loomResult_t recorder_signal_setup(void) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  static int done;
  const char* name = params_get()->dump_signal;
  if (!name || !*name) return loomSuccess;
  pthread_mutex_lock(&lock);
  loomResult_t res = loomSuccess;
  if (!done) {
    int sig = strcasestr(name, "USR2") ? SIGUSR2 : SIGUSR1;
    pthread_t th;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0 ||
        fcntl(sig_pipe[0], F_SETFL, 0) != 0 /* the thread blocks on it */ ||
        pthread_create(&th, NULL, signal_thread, NULL) != 0) {
      res = err_set(NULL, loomSystemError, "LOOM_DUMP_SIGNAL=%s: cannot set up its handler: %s",
                    name, strerror(errno));
    } else {
      pthread_detach(th);
      sigaction(sig, &sa, NULL);
      done = 1;
      LOOM_INFO(SUB_INIT, "LOOM_DUMP_SIGNAL: SIG%s writes every communicator's flight record",
                sig == SIGUSR2 ? "USR2" : "USR1");
    }
  }
  pthread_mutex_unlock(&lock);
  return res;
}
