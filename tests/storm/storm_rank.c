/* storm_rank - one process of a kill storm (tests/storm/storm.sh), on the public API only.
 *
 *   storm_rank --nranks N --first R --threads T --id-file F --ready-dir D --seed S
 *              [--group] [--stream] [--max-seconds M]
 *
 * Runs ranks R .. R+T-1 of one communicator of N ranks, one thread each. The process that holds
 * rank 0 makes the unique id and writes it to F; the others wait for F. Each rank writes
 * D/ready.<rank> (this process's pid) once it is initialised and one call went through, then
 * runs the same random sequence of collectives as every other rank (from S): all-reduce (whose
 * sum is checked), all-gather, reduce-scatter, broadcast, all-to-all, reduce, gather, scatter and
 * a ring of sends, of 1 to 256 Ki elements; with --group two at a time in a group, with
 * --stream on a host stream, synchronised after each. The harness kills or stops a process at
 * a random moment; every rank of the others must then see a call fail. Each prints
 *   STORM rank=<r> rc=<code> at_ms=<epoch ms> calls=<n> error: <text>
 * and destroys its communicator. Then the process compares its descriptors and threads with
 * what it had before it called Loom and prints
 *   STORM_PROC fds=<before>-><after> threads=<before>-><after>
 * (with the new descriptors' targets when there are more).
 *
 * Exit status: 0 every rank saw an error and nothing leaked; 1 a call returned a wrong sum
 * with loomSuccess; 2 usage, set-up or init failed; 4 a rank saw no error for M seconds (a hang:
 * the process ends itself); 5 descriptors or threads leaked. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loom.h"

#define MAX_COUNT (256u << 10) /* elements of the largest call, per rank */

static struct {
  int nranks, first, threads, group, stream, max_seconds;
  const char *id_file, *ready_dir;
  unsigned long long seed;
} opt = {.max_seconds = 60};

static loomUniqueId the_id;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&out_lock);
  vprintf(fmt, ap);
  fflush(stdout);
  pthread_mutex_unlock(&out_lock);
  va_end(ap);
}

/* splitmix64: the same sequence on every rank. */
static uint64_t mix(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int count_dir(const char* path) {
  DIR* d = opendir(path);
  if (!d) return -1;
  int n = 0;
  for (struct dirent* e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - (strcmp(path, "/proc/self/fd") == 0); /* the one opendir holds */
}

struct rank {
  int rank;
  loomComm_t comm;
  loomStream_t stream;
  int32_t *in, *out;
  int saw_error, wrong, init_failed;
};

enum {
  OP_ALLREDUCE,
  OP_ALLGATHER,
  OP_REDSCAT,
  OP_BCAST,
  OP_ALLTOALL,
  OP_REDUCE,
  OP_GATHER,
  OP_SCATTER,
  OP_RING,
  OP_COUNT
};

/* Enqueues one call (in a group or on a stream as the options say). */
static loomResult_t one_call(struct rank* k, int op, size_t count, int root) {
  int n = opt.nranks, me = k->rank;
  size_t per = count / (size_t)n ? count / (size_t)n : 1;
  loomStream_t s = k->stream;
  switch (op) {
    case OP_ALLREDUCE:
      return loomAllReduce(k->in, k->out, count, loomInt32, loomSum, k->comm, s);
    case OP_ALLGATHER:
      return loomAllGather(k->in, k->out, per, loomInt32, k->comm, s);
    case OP_REDSCAT:
      return loomReduceScatter(k->in, k->out, per, loomInt32, loomSum, k->comm, s);
    case OP_BCAST:
      return loomBroadcast(k->in, k->out, count, loomInt32, root, k->comm, s);
    case OP_ALLTOALL:
      return loomAlltoAll(k->in, k->out, per, loomInt32, k->comm, s);
    case OP_REDUCE:
      return loomReduce(k->in, k->out, count, loomInt32, loomSum, root, k->comm, s);
    case OP_GATHER:
      return loomGather(k->in, k->out, per, loomInt32, root, k->comm, s);
    case OP_SCATTER:
      return loomScatter(k->in, k->out, per, loomInt32, root, k->comm, s);
    default: {
      loomResult_t r = loomGroupStart();
      if (r != loomSuccess) return r;
      loomResult_t a = loomSend(k->in, count, loomInt32, (me + 1) % n, k->comm, s);
      loomResult_t b = loomRecv(k->out, count, loomInt32, (me + n - 1) % n, k->comm, s);
      r = loomGroupEnd();
      return a != loomSuccess ? a : b != loomSuccess ? b : r;
    }
  }
}

/* One step of the sequence: one call, or two in a group; synchronised on the stream. */
static loomResult_t one_step(struct rank* k, uint64_t* seq, int* checked) {
  int ncalls = opt.group ? 2 : 1;
  loomResult_t r = loomSuccess;
  *checked = 0;
  if (opt.group) r = loomGroupStart();
  for (int c = 0; c < ncalls && r == loomSuccess; c++) {
    uint64_t v = mix(seq);
    int op = (int)(v % OP_COUNT);
    if (opt.group && op == OP_RING) op = OP_ALLREDUCE; /* a ring is a group of its own */
    static const size_t counts[] = {1, 100, 4096, 65536, MAX_COUNT};
    size_t count = counts[(v >> 8) % (sizeof(counts) / sizeof(counts[0]))];
    int root = (int)((v >> 16) % (uint64_t)opt.nranks);
    r = one_call(k, op, count, root);
    /* Only a lone all-reduce's sum is checked: in a group, later calls reuse the buffers. */
    if (!opt.group && op == OP_ALLREDUCE) *checked = (int)count;
  }
  if (opt.group) {
    loomResult_t e = loomGroupEnd();
    if (r == loomSuccess) r = e;
  }
  if (r == loomSuccess && k->stream) r = loomStreamSynchronize(k->stream);
  return r;
}

static void* rank_main(void* arg) {
  struct rank* k = arg;
  loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
  cfg.commName = "storm";
  loomResult_t r = loomCommInitRankConfig(&k->comm, opt.nranks, the_id, k->rank, &cfg);
  if (r != loomSuccess) {
    say("STORM_INIT_FAILED rank=%d rc=%d error: %s\n", k->rank, (int)r, loomGetLastError(NULL));
    k->comm = NULL;
    k->init_failed = 1;
    return NULL;
  }
  if (opt.stream && loomStreamCreate(&k->stream) != loomSuccess) {
    say("STORM_INIT_FAILED rank=%d: loomStreamCreate: %s\n", k->rank, loomGetLastError(NULL));
    k->init_failed = 1;
    loomCommDestroy(k->comm);
    return NULL;
  }
  int32_t want = opt.nranks * (opt.nranks + 1) / 2;
  for (size_t i = 0; i < MAX_COUNT; i++) k->in[i] = k->rank + 1;
  uint64_t seq = opt.seed;
  double end = mono_s() + opt.max_seconds;
  long calls = 0;
  for (;;) {
    int checked = 0;
    r = one_step(k, &seq, &checked);
    if (r != loomSuccess) {
      k->saw_error = 1;
      say("STORM rank=%d rc=%d at_ms=%lld calls=%ld error: %s\n", k->rank, (int)r, now_ms(), calls,
          loomGetLastError(k->comm));
      break;
    }
    calls++;
    for (int i = 0; i < checked; i++)
      if (k->out[i] != want) {
        say("STORM_WRONG rank=%d call=%ld element %d is %d, not %d\n", k->rank, calls, i,
            (int)k->out[i], (int)want);
        k->wrong = 1;
        break;
      }
    if (calls == 1) {
      char path[4096];
      snprintf(path, sizeof(path), "%s/ready.%d", opt.ready_dir, k->rank);
      FILE* f = fopen(path, "w");
      if (f) {
        fprintf(f, "%d\n", (int)getpid());
        fclose(f);
      }
    }
    if (mono_s() > end) {
      say("STORM_HANG rank=%d: no error in %d s (%ld calls)\n", k->rank, opt.max_seconds, calls);
      break;
    }
  }
  if (k->stream) loomStreamDestroy(k->stream);
  loomCommDestroy(k->comm);
  return NULL;
}

/* Rank 0's process makes the id; the others wait for it (at most 30 s). */
static int share_id(void) {
  if (opt.first == 0) {
    if (loomGetUniqueId(&the_id) != loomSuccess) {
      fprintf(stderr, "storm_rank: loomGetUniqueId: %s\n", loomGetLastError(NULL));
      return -1;
    }
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", opt.id_file);
    FILE* f = fopen(tmp, "wb");
    if (!f || fwrite(&the_id, sizeof(the_id), 1, f) != 1 || fclose(f) != 0 ||
        rename(tmp, opt.id_file) != 0) {
      fprintf(stderr, "storm_rank: cannot write %s: %s\n", opt.id_file, strerror(errno));
      return -1;
    }
    return 0;
  }
  double end = mono_s() + 30;
  while (mono_s() < end) {
    FILE* f = fopen(opt.id_file, "rb");
    if (f) {
      size_t got = fread(&the_id, sizeof(the_id), 1, f);
      fclose(f);
      if (got == 1) return 0;
    }
    usleep(10000);
  }
  fprintf(stderr, "storm_rank: no id in %s after 30 s\n", opt.id_file);
  return -1;
}

/* Watches the ranks: a process whose ranks are still in a call long after max_seconds is
 * hung there (a call that never returns); it says so and ends. */
static void* watchdog(void* arg) {
  (void)arg;
  sleep((unsigned)opt.max_seconds + 10);
  say("STORM_HANG process %d: a rank is still inside a call after %d s\n", (int)getpid(),
      opt.max_seconds + 10);
  _exit(4);
}

static void usage(void) {
  fprintf(stderr,
          "usage: storm_rank --nranks N --first R --threads T --id-file F --ready-dir D --seed S\n"
          "                  [--group] [--stream] [--max-seconds M]\n");
  exit(2);
}

/* The descriptors open at the start (fd numbers below FD_SEEN). */
#define FD_SEEN 4096
static unsigned char fd_at_start[FD_SEEN];

static void note_fds(void) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return;
  for (struct dirent* e; (e = readdir(d));) {
    int fd = atoi(e->d_name);
    if (e->d_name[0] != '.' && fd != dirfd(d) && fd < FD_SEEN) fd_at_start[fd] = 1;
  }
  closedir(d);
}

/* The descriptors open now that were not at the start, with their targets. */
static void show_new_fds(void) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return;
  for (struct dirent* e; (e = readdir(d));) {
    int fd = atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == dirfd(d) || (fd < FD_SEEN && fd_at_start[fd])) continue;
    char path[64], target[512];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    target[n > 0 ? n : 0] = 0;
    say("STORM_LEAK fd %d -> %s\n", fd, target);
  }
  closedir(d);
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--group")) {
      opt.group = 1;
    } else if (!strcmp(a, "--stream")) {
      opt.stream = 1;
    } else if (!v) {
      usage();
    } else if (!strcmp(a, "--nranks")) {
      opt.nranks = atoi(v), i++;
    } else if (!strcmp(a, "--first")) {
      opt.first = atoi(v), i++;
    } else if (!strcmp(a, "--threads")) {
      opt.threads = atoi(v), i++;
    } else if (!strcmp(a, "--id-file")) {
      opt.id_file = v, i++;
    } else if (!strcmp(a, "--ready-dir")) {
      opt.ready_dir = v, i++;
    } else if (!strcmp(a, "--seed")) {
      opt.seed = strtoull(v, NULL, 0), i++;
    } else if (!strcmp(a, "--max-seconds")) {
      opt.max_seconds = atoi(v), i++;
    } else {
      usage();
    }
  }
  if (opt.nranks < 1 || opt.threads < 1 || opt.first < 0 || opt.first + opt.threads > opt.nranks ||
      !opt.id_file || !opt.ready_dir || opt.max_seconds < 1)
    usage();
  setvbuf(stdout, NULL, _IOLBF, 0);
  int fds_before = count_dir("/proc/self/fd"), threads_before = count_dir("/proc/self/task");
  note_fds();
  if (share_id() != 0) return 2;
  pthread_t dog;
  pthread_create(&dog, NULL, watchdog, NULL);
  pthread_detach(dog);
  struct rank* ranks = calloc((size_t)opt.threads, sizeof(*ranks));
  pthread_t* th = calloc((size_t)opt.threads, sizeof(*th));
  if (!ranks || !th) return 2;
  for (int t = 0; t < opt.threads; t++) {
    ranks[t].rank = opt.first + t;
    ranks[t].in = calloc(MAX_COUNT, sizeof(int32_t));
    ranks[t].out = calloc(MAX_COUNT * (size_t)opt.nranks, sizeof(int32_t));
    if (!ranks[t].in || !ranks[t].out || pthread_create(&th[t], NULL, rank_main, &ranks[t]) != 0)
      return 2;
  }
  int all_error = 1, wrong = 0, init_failed = 0;
  for (int t = 0; t < opt.threads; t++) {
    pthread_join(th[t], NULL);
    all_error &= ranks[t].saw_error;
    wrong |= ranks[t].wrong;
    init_failed |= ranks[t].init_failed;
    free(ranks[t].in);
    free(ranks[t].out);
  }
  free(ranks);
  free(th);
  /* What Loom still holds: its threads take a moment to be reaped after their join. */
  int fds_after = count_dir("/proc/self/fd"), threads_after = count_dir("/proc/self/task") - 1;
  for (int i = 0; i < 100 && threads_after > threads_before; i++) {
    usleep(10000);
    threads_after = count_dir("/proc/self/task") - 1; /* the watchdog */
  }
  say("STORM_PROC fds=%d->%d threads=%d->%d\n", fds_before, fds_after, threads_before,
      threads_after);
  if (fds_after > fds_before) show_new_fds();
  if (wrong) return 1;
  if (init_failed) return 2;
  if (!all_error) return 4;
  return fds_after > fds_before || threads_after > threads_before ? 5 : 0;
}
