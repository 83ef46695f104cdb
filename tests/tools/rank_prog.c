/* rank_prog: a stand-in rank for tests/tools/test_loomrun.sh. It does not use Loom; it only
 * reads what loomrun put in its environment, speaks the cause channel's format by hand
 * (src/core/report.h) where a mode says "blames", and behaves as its first argument says:
 *
 *   env [NAME...]        print one line with the LOOM_* variables and NAME=value for each NAME
 *   exit R CODE          rank R exits with CODE, the others sleep
 *   kill R               rank R raises SIGKILL, the others sleep
 *   sleep                every rank sleeps
 *   stubborn             every rank ignores SIGTERM and sleeps
 *   signals DIR          write DIR/ready.<rank>, then on SIGUSR1 write DIR/usr1.<rank> and keep
 *                        going, on SIGTERM write DIR/term.<rank> and exit 0
 *   lines                print whole and partial lines on stdout and stderr
 *   race DIR BLAME       every rank writes its pid to DIR/pid.<rank> and waits for DIR/go; then
 *                        rank 0 exits 1, after it blames rank 1 if BLAME is 1, and rank 1 dies
 *                        of SIGSEGV; the others sleep
 *   blame DIR MS [child] rank 1 writes its pid to DIR/pid.1, sleeps MS milliseconds and dies of
 *                        SIGSEGV; rank 0 waits for DIR/pid.1, blames rank 1 (from a child
 *                        process, which is no rank, with "child") and exits 1; the others sleep
 *
 * To blame a rank is to send loomrun, on LOOM_RUN_FD, what libloom sends when a peer's failure
 * makes a communicator fail: "this process failed because process <pid> failed".
 * Arguments after these are ignored, so a test can add a marker to find its processes by.
 * "Sleep" means five minutes: long enough that a rank loomrun failed to stop is noticed.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/report.h"

#define SLEEP_S 300

static int g_rank;
static const char* g_dir;

static void sleep_long(void) {
  for (time_t end = time(NULL) + SLEEP_S; time(NULL) < end;) sleep(1);
}

static void touch(const char* what) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.%d", g_dir, what, g_rank);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) close(fd);
}

static void on_usr1(int sig) {
  touch("usr1");
}

/* Waits (SLEEP_S at most) for DIR/name to exist. */
static int wait_for(const char* name) {
  char path[4096];
  struct stat st;
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  for (time_t end = time(NULL) + SLEEP_S; time(NULL) < end; usleep(5 * 1000))
    if (stat(path, &st) == 0) return 0;
  return -1;
}

/* DIR/pid.<rank> holds this process's pid; it appears whole (rename). */
static void write_pid(void) {
  char tmp[4096], path[4096];
  snprintf(tmp, sizeof tmp, "%s/.pid.%d", g_dir, g_rank);
  snprintf(path, sizeof path, "%s/pid.%d", g_dir, g_rank);
  FILE* f = fopen(tmp, "w");
  if (!f) return;
  fprintf(f, "%d\n", (int)getpid());
  fclose(f);
  rename(tmp, path);
}

static int read_pid(int rank) {
  char path[4096];
  int pid = 0;
  snprintf(path, sizeof path, "%s/pid.%d", g_dir, rank);
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  if (fscanf(f, "%d", &pid) != 1) pid = 0;
  fclose(f);
  return pid;
}

/* Sends loomrun what libloom would: "this process failed because `rank` failed". */
static void blame(int rank, int from_child) {
  const char* fd_text = getenv("LOOM_RUN_FD");
  struct report_msg msg = {.magic = REPORT_MAGIC, .version = REPORT_VERSION};
  msg.peer_pid = read_pid(rank);
  if (!fd_text || msg.peer_pid <= 0) {
    fprintf(stderr, "rank_prog: rank %d: cannot blame rank %d: LOOM_RUN_FD=%s, pid %d\n", g_rank,
            rank, fd_text ? fd_text : "unset", msg.peer_pid);
    return;
  }
  pid_t child = from_child ? fork() : 0;
  if (child == 0) {
    send(atoi(fd_text), &msg, sizeof msg, MSG_NOSIGNAL);
    if (from_child) _exit(0);
  } else if (child > 0) {
    waitpid(child, NULL, 0);
  }
}

static void sleep_ms(long ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void die_of_sigsegv(void) {
  signal(SIGSEGV, SIG_DFL);
  raise(SIGSEGV);
}

static void on_term(int sig) {
  touch("term");
  _exit(0);
}

static const char* env_or(const char* name, const char* fallback) {
  const char* v = getenv(name);
  return v ? v : fallback;
}

static void print_env(int argc, char** argv) {
  static const char* const vars[] = {"LOOM_RANK",   "LOOM_WORLD_SIZE", "LOOM_ROOT",
                                     "LOOM_SECRET", "LOOM_LOCAL_RANK", "LOOM_LOCAL_SIZE"};
  char line[8192];
  size_t n = 0;
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    n += (size_t)snprintf(line + n, sizeof line - n, "%s=%s ", vars[i], env_or(vars[i], "unset"));
  for (int i = 2; i < argc && n < sizeof line; i++)
    n += (size_t)snprintf(line + n, sizeof line - n, "%s=%s ", argv[i], env_or(argv[i], "unset"));
  if (n >= sizeof line) n = sizeof line - 1;
  line[n - 1] = '\n';
  fwrite(line, 1, n, stdout);
}

static void put(int fd, const char* fmt, int a, int b) {
  char buf[256];
  int n = snprintf(buf, sizeof buf, fmt, a, b);
  for (int off = 0; off < n;) {
    ssize_t w = write(fd, buf + off, (size_t)(n - off));
    if (w <= 0) return;
    off += (int)w;
  }
}

/* Pieces written separately, with a pause, so that loomrun reads them as separate chunks. */
static void print_lines(void) {
  put(STDOUT_FILENO, "out-%d-1\nout-%d-2\n", g_rank, g_rank);
  put(STDERR_FILENO, "err-%d-1\n", g_rank, 0);
  put(STDOUT_FILENO, "part-%d-a", g_rank, 0);
  usleep(100 * 1000);
  put(STDOUT_FILENO, "part-%d-b\nout-%d-3\n", g_rank, g_rank);
  put(STDOUT_FILENO, "tail-%d", g_rank, 0);
  put(STDERR_FILENO, "errtail-%d", g_rank, 0);
}

int main(int argc, char** argv) {
  const char* rank_env = getenv("LOOM_RANK");
  if (argc < 2 || !rank_env) {
    fprintf(stderr, "usage: LOOM_RANK=r rank_prog MODE [ARGS...] (see the source)\n");
    return 2;
  }
  g_rank = atoi(rank_env);
  const char* mode = argv[1];
  if (strcmp(mode, "env") == 0) {
    print_env(argc, argv);
  } else if (strcmp(mode, "exit") == 0 && argc >= 4) {
    if (g_rank == atoi(argv[2])) return atoi(argv[3]);
    sleep_long();
  } else if (strcmp(mode, "kill") == 0 && argc >= 3) {
    if (g_rank == atoi(argv[2])) raise(SIGKILL);
    sleep_long();
  } else if (strcmp(mode, "sleep") == 0) {
    sleep_long();
  } else if (strcmp(mode, "stubborn") == 0) {
    signal(SIGTERM, SIG_IGN);
    sleep_long();
  } else if (strcmp(mode, "signals") == 0 && argc >= 3) {
    g_dir = argv[2];
    signal(SIGUSR1, on_usr1);
    signal(SIGTERM, on_term);
    touch("ready");
    sleep_long();
  } else if (strcmp(mode, "lines") == 0) {
    print_lines();
  } else if (strcmp(mode, "race") == 0 && argc >= 4) {
    g_dir = argv[2];
    write_pid();
    if (wait_for("go") != 0) return 3;
    if (g_rank == 0 && atoi(argv[3])) blame(1, 0);
    if (g_rank == 0) return 1;
    if (g_rank == 1) die_of_sigsegv();
    sleep_long();
  } else if (strcmp(mode, "blame") == 0 && argc >= 4) {
    g_dir = argv[2];
    if (g_rank == 1) {
      write_pid();
      sleep_ms(atol(argv[3]));
      die_of_sigsegv();
    } else if (g_rank == 0) {
      if (wait_for("pid.1") != 0) return 3;
      blame(1, argc >= 5 && strcmp(argv[4], "child") == 0);
      return 1;
    }
    sleep_long();
  } else {
    fprintf(stderr, "rank_prog: unknown mode or missing arguments: %s\n", mode);
    return 2;
  }
  return 0;
}
