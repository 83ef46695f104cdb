/* c2c: how far apart two CPUs are right now, the state that a shared-memory collective between
 * two ranks on them depends on (docs/PERFORMANCE.md, "Two states of the VM's cores").
 *
 *   c2c [-s BYTES] [-r ROUNDS] [-p PINGS]
 *
 * Two threads, pinned to the first two CPUs the process may use. A hand-off: the first thread
 * copies BYTES (default 1 MiB) from a buffer of its own into a shared one and raises a flag; the
 * second copies the shared buffer into a buffer of its own and answers; ROUNDS rounds (default
 * 500), GB/s = 2 x BYTES x ROUNDS / time (each round copies BYTES twice, as a FIFO does). Then
 * PINGS round trips of one flag (default 20,000), microseconds each. Both are best of 3. One
 * line:
 *
 *   c2c cpus 0 1 bytes 1048576 handoff_gbs 26.81 pingpong_us 0.095
 *
 * On a VM whose vCPUs the host moves between cores, the figures can change by 5x from one
 * second to the next while each stays steady for seconds. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Atomic long flag;
static char *shared, *src, *dst;
static size_t bytes = 1u << 20;
static long rounds = 500, pings = 20000;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int pin(int c) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(c, &s);
  return pthread_setaffinity_np(pthread_self(), sizeof(s), &s);
}

/* Waits for the flag to reach want; the other thread moves it. */
static void await(long want) {
  while (atomic_load_explicit(&flag, memory_order_acquire) != want) {
  }
}

static void* answer(void* arg) {
  (void)arg;
  long f = 0;
  for (int rep = 0; rep < 3; rep++) {
    for (long i = 0; i < rounds; i++) {
      await(++f);
      memcpy(dst, shared, bytes);
      atomic_store_explicit(&flag, ++f, memory_order_release);
    }
    for (long i = 0; i < pings; i++) {
      await(++f);
      atomic_store_explicit(&flag, ++f, memory_order_release);
    }
  }
  return NULL;
}

int main(int argc, char** argv) {
  int c;
  while ((c = getopt(argc, argv, "s:r:p:")) != -1) {
    switch (c) {
      case 's':
        bytes = strtoull(optarg, NULL, 0);
        break;
      case 'r':
        rounds = atol(optarg);
        break;
      case 'p':
        pings = atol(optarg);
        break;
      default:
        fprintf(stderr, "usage: c2c [-s BYTES] [-r ROUNDS] [-p PINGS]\n");
        return 2;
    }
  }
  if (bytes == 0 || rounds < 1 || pings < 1) {
    fprintf(stderr, "c2c: -s, -r and -p must be positive\n");
    return 2;
  }
  int cpu[2] = {-1, -1};
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return 1;
  for (int i = 0, k = 0; i < CPU_SETSIZE && k < 2; i++)
    if (CPU_ISSET(i, &mask)) cpu[k++] = i;
  if (cpu[1] < 0) {
    fprintf(stderr, "c2c: this process may use one CPU only\n");
    return 1;
  }
  shared = malloc(bytes);
  src = malloc(bytes);
  dst = malloc(bytes);
  if (!shared || !src || !dst) return 1;
  memset(shared, 0, bytes);
  memset(src, 1, bytes);
  memset(dst, 2, bytes);
  if (pin(cpu[0]) != 0) return 1;
  /* The second thread starts on its CPU, or not at all. */
  pthread_attr_t attr;
  cpu_set_t other;
  CPU_ZERO(&other);
  CPU_SET(cpu[1], &other);
  pthread_t t;
  if (pthread_attr_init(&attr) != 0 ||
      pthread_attr_setaffinity_np(&attr, sizeof(other), &other) != 0 ||
      pthread_create(&t, &attr, answer, NULL) != 0)
    return 1;
  pthread_attr_destroy(&attr);
  double best_copy = 1e300, best_ping = 1e300;
  long f = 0;
  for (int rep = 0; rep < 3; rep++) {
    double t0 = now_us();
    for (long i = 0; i < rounds; i++) {
      memcpy(shared, src, bytes);
      atomic_store_explicit(&flag, ++f, memory_order_release);
      await(++f);
    }
    double t1 = now_us();
    for (long i = 0; i < pings; i++) {
      atomic_store_explicit(&flag, ++f, memory_order_release);
      await(++f);
    }
    double t2 = now_us();
    if (t1 - t0 < best_copy) best_copy = t1 - t0;
    if (t2 - t1 < best_ping) best_ping = t2 - t1;
  }
  pthread_join(t, NULL);
  printf("c2c cpus %d %d bytes %zu handoff_gbs %.2f pingpong_us %.3f\n", cpu[0], cpu[1], bytes,
         2.0 * (double)bytes * (double)rounds / best_copy / 1e3, best_ping / (double)pings);
  return 0;
}
