/* loomrun: starts N ranks of a program on this host.
 *
 *   loomrun -n N [options] PROGRAM [ARGS...]
 *
 * Every rank gets the variables loomCommInitFromEnv reads (LOOM_RANK, LOOM_WORLD_SIZE, LOOM_ROOT,
 * LOOM_SECRET, LOOM_LOCAL_RANK, LOOM_LOCAL_SIZE) and LOOM_RUN_FD (below), and runs in its own
 * process group, so that loomrun can signal a rank together with whatever it started. The
 * ranks die with loomrun (PR_SET_PDEATHSIG) even when loomrun itself is killed -9.
 *
 * One thread, one poll loop. Signals are blocked and read from a signalfd, so a signal is just
 * another readable fd and the loop never races with a handler. With --prefix the ranks' stdout
 * and stderr are pipes read by the same loop and copied out a whole line at a time.
 *
 * Stopping: the first rank to fail, --timeout, or a terminating signal sent to loomrun starts
 * the stop: the ranks get SIGTERM (or the signal loomrun got), SIGKILL --grace seconds later,
 * and loomrun waits a bounded time for them to die. Nothing here waits without a deadline
 * except the run itself when no --timeout was given.
 *
 * The first failing rank is the one whose failure made the others fail, which is not always
 * the first one reaped: ranks that die close together are all zombies when loomrun wakes, the
 * kernel hands them over in fork order and keeps no time of death. The library knows the
 * causes, so loomrun asks it: before forking it makes an AF_UNIX datagram socket pair, keeps
 * the read end (with SO_PASSCRED, so the kernel names each sender's pid) and leaves the write
 * end open in every rank, named by LOOM_RUN_FD. A rank whose communicator fails because a peer
 * failed sends one message there naming that peer's pid (src/core/report.h). When a rank fails,
 * loomrun reaps every rank that has died, reads every message, and follows the blame from
 * rank to rank through ranks that failed too (a bounded walk: a cycle has no end and counts as
 * no blame); the rank at the end of the chain is the cause. If that chain points at a rank not
 * yet reaped, loomrun waits for it up to CAUSE_WAIT_MS, still serving signals and output,
 * before it stops anyone, so that the cause's own status is the one reported. Among several
 * ends (ranks that failed together, each for reasons of its own), one killed by a crash signal
 * (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) comes first, then one that others blame, then the
 * first reaped. So without messages (a program that does not use Loom), a crash beats a
 * non-zero exit among the ranks reaped together, and otherwise fork order decides, as before.
 *
 * Exit status: 0 when every rank exits 0; otherwise that of the first failing rank (its exit
 * code, or 128 + the signal that killed it); 124 after --timeout; 128 + S when loomrun was
 * stopped by signal S; 2 for bad usage; 127 when PROGRAM cannot be run; 125 when loomrun itself
 * fails (no free port, fork failed, ...).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/report.h"

#define LOOMRUN_VERSION "0.1.0"
#define MAX_RANKS 4096
#define LINE_CAP 65536               /* longer lines are split; shorter ones stay whole */
#define OBUF_CAP (2 * LINE_CAP + 64) /* a pending part, a read's worth, prefix and '\n' */
#define KILL_WAIT_MIN_MS 1000        /* floor for waiting after SIGKILL and for draining pipes */
#define CAUSE_WAIT_MS 500            /* longest wait for a blamed rank to die before reporting */
#define LIST_MAX 8                   /* ranks named in one message; the rest are counted */

enum { EXIT_USAGE = 2, EXIT_TIMEOUT = 124, EXIT_INTERNAL = 125, EXIT_NOEXEC = 127 };

struct options {
  int np;
  int prefix;
  double timeout_s; /* 0: none */
  double grace_s;
  const char* host;
  int port; /* 0: find a free one */
  char** argv;
};

/* One of a rank's output pipes (--prefix only). */
struct stream {
  int fd;     /* read end, -1 once closed */
  char* part; /* bytes of a line whose '\n' has not come yet */
  size_t part_len, part_cap;
};

struct rank {
  pid_t pid;            /* 0 once reaped or given up */
  pid_t started;        /* the pid it was started with: cause messages name it after the reap */
  int code;             /* once reaped: its exit code, or 128 + the signal that killed it */
  int how, status;      /* once reaped: si_code (CLD_EXITED, ...) and si_status */
  int fail_seq;         /* 1 + the order in which it was reaped with a failure; 0: it was not */
  int blame;            /* the rank it says made it fail, or -1 */
  int cause, echoes;    /* decide()'s: where its blame leads, and how many failed because of it */
  struct stream out[2]; /* the rank's stdout and stderr */
};

/* Output to loomrun's own stdout or stderr, flushed after each batch of lines. */
struct obuf {
  int fd;
  int broken; /* a write failed (EPIPE, ...): the rest is dropped */
  size_t len;
  char data[OBUF_CAP];
};

/* RUN_DECIDING: a rank failed and loomrun waits (CAUSE_WAIT_MS at most) for the rank it
 * blames to die before it names the cause and stops the others. */
enum run_state { RUN_RUNNING, RUN_DECIDING, RUN_STOPPING, RUN_KILLED, RUN_DRAINING };

struct run {
  struct options opt;
  struct rank* ranks;
  int nlive;    /* ranks not yet reaped */
  int nstreams; /* pipes still open */
  int sigfd;
  int cause_fd;  /* read end of the cause channel */
  int cause_wfd; /* its write end, for the ranks; -1 once they are started */
  int nfailed;   /* ranks reaped with a failure while RUNNING or DECIDING */
  enum run_state state;
  int64_t timeout_at, deadline; /* ms, CLOCK_MONOTONIC; deadline belongs to the state */
  int exit_code;
  pid_t self;
  sigset_t orig_mask;
  struct sigaction orig_pipe;
  struct rlimit orig_nofile;
};

static const int forwarded_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
static struct obuf g_out[2] = {{.fd = STDOUT_FILENO}, {.fd = STDERR_FILENO}};
static char g_scratch[LINE_CAP];

/* ---- Small helpers -------------------------------------------------------- */

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void write_all(int fd, const char* p, size_t n, int* broken) {
  while (n > 0 && !*broken) {
    ssize_t w = write(fd, p, n);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
    } else if (w < 0 && errno == EAGAIN) {
      struct pollfd pfd = {.fd = fd, .events = POLLOUT};
      poll(&pfd, 1, 100);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else {
      *broken = 1;
    }
  }
}

/* One message line on stderr, written with one write() so ranks' lines never split it. */
static void __attribute__((format(printf, 1, 2))) say(const char* fmt, ...) {
  char buf[1024];
  int n = snprintf(buf, sizeof buf, "loomrun: ");
  va_list ap;
  va_start(ap, fmt);
  n += vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof buf - 2) n = (int)sizeof buf - 2;
  buf[n++] = '\n';
  int broken = 0;
  write_all(STDERR_FILENO, buf, (size_t)n, &broken);
}

static void __attribute__((noreturn, format(printf, 1, 2))) usage_error(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  say("%s (try 'loomrun --help')", buf);
  exit(EXIT_USAGE);
}

static void print_help(void) {
  printf(
      "usage: loomrun -n N [options] PROGRAM [ARGS...]\n"
      "Starts N ranks of PROGRAM on this host for loomCommInitFromEnv.\n\n"
      "  -n, --np N            number of ranks, 1..%d (required)\n"
      "  -p, --prefix          prefix each output line of rank r with \"[r] \"\n"
      "      --timeout SEC     stop all ranks after SEC seconds and exit 124\n"
      "      --grace SEC       seconds between SIGTERM and SIGKILL when stopping (default 3)\n"
      "      --host H          host of LOOM_ROOT (default 127.0.0.1)\n"
      "      --port P          port of LOOM_ROOT (default: a free one)\n"
      "  -x, --env NAME=VALUE  set a variable in every rank (repeatable)\n"
      "  -h, --help            this help\n"
      "      --version         loomrun's version\n"
      "  --                    ends the options\n\n"
      "Each rank gets LOOM_RANK, LOOM_WORLD_SIZE, LOOM_ROOT, LOOM_SECRET, LOOM_LOCAL_RANK,\n"
      "LOOM_LOCAL_SIZE and LOOM_RUN_FD, a socket on which Loom tells loomrun which peer's\n"
      "failure made the rank fail. Rank 0 reads loomrun's stdin (unless it is a terminal),\n"
      "the others /dev/null. SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are\n"
      "forwarded to the ranks; the first four also stop the run.\n\n"
      "The first failing rank is the one whose failure made the others fail, as Loom\n"
      "reports it (loomrun waits up to %d ms for a rank so blamed to die); without\n"
      "reports, among ranks that failed together, one killed by SIGSEGV, SIGBUS, SIGILL,\n"
      "SIGFPE or SIGABRT comes before one that exited non-zero.\n\n"
      "Exit status: 0 if all ranks exit 0, else the first failing rank's status (128+signal\n"
      "if it was killed), 124 on --timeout, 128+S if loomrun got signal S, 2 for bad usage,\n"
      "127 if PROGRAM cannot be run, 125 if loomrun itself failed.\n",
      MAX_RANKS, CAUSE_WAIT_MS);
}

/* ---- Options -------------------------------------------------------------- */

static long parse_long(const char* s, const char* what, long lo, long hi) {
  char* end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi)
    usage_error("%s must be an integer from %ld to %ld, not '%s'", what, lo, hi, s);
  return v;
}

static double parse_seconds(const char* s, const char* what, double lo) {
  char* end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= lo && v <= 1e8))
    usage_error("%s must be a number of seconds, not '%s'", what, s);
  return v;
}

static int is_launcher_var(const char* name, size_t len) {
  static const char* const vars[] = {"LOOM_RANK",   "LOOM_WORLD_SIZE", "LOOM_ROOT",
                                     "LOOM_SECRET", "LOOM_LOCAL_RANK", "LOOM_LOCAL_SIZE",
                                     "LOOM_RUN_FD"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (strlen(vars[i]) == len && memcmp(vars[i], name, len) == 0) return 1;
  return 0;
}

/* -x NAME=VALUE goes straight into loomrun's environment, which every rank inherits. */
static void apply_env_option(const char* arg) {
  const char* eq = strchr(arg, '=');
  size_t len = eq ? (size_t)(eq - arg) : 0;
  int ok = len > 0 && !(arg[0] >= '0' && arg[0] <= '9');
  for (size_t i = 0; ok && i < len; i++)
    ok = arg[i] == '_' || (arg[i] >= 'A' && arg[i] <= 'Z') || (arg[i] >= 'a' && arg[i] <= 'z') ||
         (arg[i] >= '0' && arg[i] <= '9');
  if (!ok) usage_error("-x needs NAME=VALUE, not '%s'", arg);
  if (is_launcher_var(arg, len))
    usage_error("%.*s is set by loomrun itself (see --host and --port)", (int)len, arg);
  char* name = strndup(arg, len);
  if (!name || setenv(name, eq + 1, 1) != 0) {
    say("cannot set %s: %s", arg, strerror(errno));
    exit(EXIT_INTERNAL);
  }
  free(name);
}

static void parse_options(int argc, char** argv, struct options* o) {
  enum { OPT_TIMEOUT = 256, OPT_GRACE, OPT_HOST, OPT_PORT, OPT_VERSION };
  static const struct option longopts[] = {{"np", required_argument, NULL, 'n'},
                                           {"prefix", no_argument, NULL, 'p'},
                                           {"timeout", required_argument, NULL, OPT_TIMEOUT},
                                           {"grace", required_argument, NULL, OPT_GRACE},
                                           {"host", required_argument, NULL, OPT_HOST},
                                           {"port", required_argument, NULL, OPT_PORT},
                                           {"env", required_argument, NULL, 'x'},
                                           {"help", no_argument, NULL, 'h'},
                                           {"version", no_argument, NULL, OPT_VERSION},
                                           {NULL, 0, NULL, 0}};
  *o = (struct options){.grace_s = 3.0, .host = "127.0.0.1"};
  opterr = 0;
  int c;
  /* '+': the first non-option is PROGRAM, and its own options are left alone. */
  while ((c = getopt_long(argc, argv, "+:n:px:h", longopts, NULL)) != -1) {
    switch (c) {
      case 'n':
        o->np = (int)parse_long(optarg, "-n", 1, MAX_RANKS);
        break;
      case 'p':
        o->prefix = 1;
        break;
      case 'x':
        apply_env_option(optarg);
        break;
      case OPT_TIMEOUT:
        o->timeout_s = parse_seconds(optarg, "--timeout", 0.001);
        break;
      case OPT_GRACE:
        o->grace_s = parse_seconds(optarg, "--grace", 0);
        break;
      case OPT_HOST:
        if (!*optarg) usage_error("--host must not be empty");
        o->host = optarg;
        break;
      case OPT_PORT:
        o->port = (int)parse_long(optarg, "--port", 0, 65535);
        break;
      case 'h':
        print_help();
        exit(0);
      case OPT_VERSION:
        printf("loomrun (Loom) %s\n", LOOMRUN_VERSION);
        exit(0);
      case ':':
        usage_error("%s needs a value", argv[optind - 1]);
      default:
        if (optopt) usage_error("unknown option '-%c'", optopt);
        usage_error("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (o->np == 0) usage_error("-n N is required");
  if (optind >= argc) usage_error("no PROGRAM given");
  o->argv = argv + optind;
}

/* ---- Setup ---------------------------------------------------------------- */

/* A pipe or /dev/null must not land on 0, 1 or 2 by accident when loomrun was started
 * with one of them closed. */
static void ensure_std_fds(void) {
  for (int fd = 0; fd < 3; fd++)
    if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) < 0) {
      exit(EXIT_INTERNAL);
    }
}

/* Asks the kernel for a free port by binding port 0 on the root host. Rank 0 binds it again a
 * moment later; another process could take it in between, which --port avoids. */
static int find_free_port(const char* host) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
  int rc = getaddrinfo(host, "0", &hints, &res);
  if (rc != 0) {
    say("cannot resolve --host %s: %s", host, gai_strerror(rc));
    return -1;
  }
  int port = -1, err = 0;
  for (struct addrinfo* ai = res; ai && port < 0; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (fd >= 0 && bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, (struct sockaddr*)&ss, &len) == 0)
      port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6*)&ss)->sin6_port
                                            : ((struct sockaddr_in*)&ss)->sin_port);
    else
      err = errno;
    if (fd >= 0) close(fd);
  }
  freeaddrinfo(res);
  if (port < 0) say("cannot bind a port on %s: %s", host, strerror(err));
  return port;
}

/* The variables every rank shares go into loomrun's own environment. */
static int set_common_env(const struct options* o) {
  uint64_t secret = 0;
  for (size_t got = 0; got < sizeof secret;) {
    ssize_t n = getrandom((char*)&secret + got, sizeof secret - got, 0);
    if (n < 0 && errno != EINTR) {
      say("getrandom failed: %s", strerror(errno));
      return -1;
    }
    if (n > 0) got += (size_t)n;
  }
  int port = o->port ? o->port : find_free_port(o->host);
  if (port < 0) return -1;
  char root[1100], num[32], hex[17];
  int v6 = strchr(o->host, ':') && o->host[0] != '[';
  snprintf(root, sizeof root, v6 ? "[%s]:%d" : "%s:%d", o->host, port);
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)secret);
  snprintf(num, sizeof num, "%d", o->np);
  if (setenv("LOOM_WORLD_SIZE", num, 1) || setenv("LOOM_LOCAL_SIZE", num, 1) ||
      setenv("LOOM_ROOT", root, 1) || setenv("LOOM_SECRET", hex, 1)) {
    say("cannot set the environment: %s", strerror(errno));
    return -1;
  }
  return 0;
}

/* 0 if exec would accept the file at all, else the errno it would give. */
static int file_check(const char* file) {
  struct stat st;
  if (stat(file, &st) != 0) return errno;
  if (!S_ISREG(st.st_mode)) return EACCES;
  return access(file, X_OK) == 0 ? 0 : errno;
}

/* Searches as execvp will: 0 if PROGRAM can be run, else the errno execvp would give. Lets
 * loomrun say so once instead of once per rank. */
static int program_check(const char* prog) {
  if (strchr(prog, '/')) return file_check(prog);
  const char* path = getenv("PATH");
  if (!path) path = "/bin:/usr/bin";
  int err = ENOENT;
  for (const char* p = path;; p++) {
    const char* end = strchrnul(p, ':');
    char full[4096];
    int len = end == p ? snprintf(full, sizeof full, "%s", prog)
                       : snprintf(full, sizeof full, "%.*s/%s", (int)(end - p), p, prog);
    int e = len < (int)sizeof full ? file_check(full) : ENAMETOOLONG;
    if (e == 0) return 0;
    if (e == EACCES) err = EACCES; /* execvp reports EACCES over ENOENT as well */
    if (!*end) return err;
    p = end;
  }
}

/* The cause channel (see the top of this file). The write end is left open across exec in
 * every rank; the read end is loomrun's alone. Never blocks. */
static int cause_open(struct run* r) {
  int sv[2], on = 1;
  if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) != 0) {
    say("cannot make the cause socket: %s", strerror(errno));
    return -1;
  }
  /* Room for a message from every rank even before loomrun reads any; the kernel caps it. */
  int sndbuf = r->opt.np > 128 ? r->opt.np * 1024 : 128 * 1024;
  char num[16];
  snprintf(num, sizeof num, "%d", sv[1]);
  if (fcntl(sv[0], F_SETFD, FD_CLOEXEC) || fcntl(sv[0], F_SETFL, O_NONBLOCK) ||
      setsockopt(sv[0], SOL_SOCKET, SO_PASSCRED, &on, sizeof on) ||
      setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf) ||
      setenv("LOOM_RUN_FD", num, 1)) {
    say("cannot set up the cause socket: %s", strerror(errno));
    close(sv[0]);
    close(sv[1]);
    return -1;
  }
  r->cause_fd = sv[0];
  r->cause_wfd = sv[1];
  return 0;
}

static int raise_fd_limit(struct run* r) {
  rlim_t need = 64 + (r->opt.prefix ? 2 * (rlim_t)r->opt.np : 0);
  getrlimit(RLIMIT_NOFILE, &r->orig_nofile);
  if (r->orig_nofile.rlim_cur >= need) return 0;
  struct rlimit rl = r->orig_nofile;
  rl.rlim_cur = need;
  if (rl.rlim_max < need || setrlimit(RLIMIT_NOFILE, &rl) != 0) {
    say("%d ranks need %llu file descriptors; the limit is %llu", r->opt.np,
        (unsigned long long)need, (unsigned long long)r->orig_nofile.rlim_max);
    return -1;
  }
  return 0;
}

static int signals_setup(struct run* r) {
  sigset_t set;
  sigemptyset(&set);
  for (size_t i = 0; i < sizeof forwarded_signals / sizeof forwarded_signals[0]; i++)
    sigaddset(&set, forwarded_signals[i]);
  sigaddset(&set, SIGCHLD);
  /* An inherited SIG_IGN for SIGCHLD would make the kernel reap the ranks behind our back. */
  signal(SIGCHLD, SIG_DFL);
  struct sigaction ign = {.sa_handler = SIG_IGN};
  sigaction(SIGPIPE, &ign, &r->orig_pipe); /* a closed stdout must not kill loomrun */
  sigprocmask(SIG_BLOCK, &set, &r->orig_mask);
  r->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (r->sigfd < 0) say("signalfd failed: %s", strerror(errno));
  return r->sigfd < 0 ? -1 : 0;
}

/* ---- Starting ranks ------------------------------------------------------- */

/* Runs in the child between fork and exec. loomrun is single-threaded, so setenv is safe. */
static void __attribute__((noreturn)) rank_exec(const struct run* r, int rank, int pipes[2][2]) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != r->self) _exit(EXIT_INTERNAL); /* loomrun died before prctl took effect */
  if (r->opt.prefix) {
    dup2(pipes[0][1], STDOUT_FILENO);
    dup2(pipes[1][1], STDERR_FILENO);
  }
  if (rank != 0 || isatty(STDIN_FILENO)) {
    int fd = open("/dev/null", O_RDONLY);
    if (fd > 0) {
      dup2(fd, STDIN_FILENO);
      close(fd);
    }
  }
  char num[16];
  snprintf(num, sizeof num, "%d", rank);
  setenv("LOOM_RANK", num, 1);
  setenv("LOOM_LOCAL_RANK", num, 1);
  sigaction(SIGPIPE, &r->orig_pipe, NULL);
  setrlimit(RLIMIT_NOFILE, &r->orig_nofile);
  sigprocmask(SIG_SETMASK, &r->orig_mask, NULL);
  execvp(r->opt.argv[0], r->opt.argv);
  dprintf(STDERR_FILENO, "loomrun: rank %d: cannot run '%s': %s\n", rank, r->opt.argv[0],
          strerror(errno));
  _exit(EXIT_NOEXEC);
}

static int rank_start(struct run* r, int rank) {
  struct rank* rk = &r->ranks[rank];
  int pipes[2][2] = {{-1, -1}, {-1, -1}};
  if (r->opt.prefix && (pipe2(pipes[0], O_CLOEXEC) || pipe2(pipes[1], O_CLOEXEC))) {
    say("cannot make pipes for rank %d: %s", rank, strerror(errno));
    goto fail_pipes;
  }
  pid_t pid = fork();
  if (pid < 0) {
    say("cannot start rank %d: %s", rank, strerror(errno));
    goto fail_pipes;
  }
  if (pid == 0) rank_exec(r, rank, pipes);
  setpgid(pid, pid); /* also here, so that the group exists before we might signal it */
  rk->pid = rk->started = pid;
  r->nlive++;
  for (int s = 0; s < 2 && r->opt.prefix; s++) {
    close(pipes[s][1]);
    fcntl(pipes[s][0], F_SETFL, O_NONBLOCK);
    rk->out[s].fd = pipes[s][0];
    r->nstreams++;
  }
  return 0;
fail_pipes:
  for (int s = 0; s < 2; s++)
    for (int e = 0; e < 2; e++)
      if (pipes[s][e] >= 0) close(pipes[s][e]);
  return -1;
}

/* ---- Output with --prefix -------------------------------------------------- */

static void obuf_flush(struct obuf* ob) {
  write_all(ob->fd, ob->data, ob->len, &ob->broken);
  ob->len = 0;
}

static void obuf_put(struct obuf* ob, const char* p, size_t n) {
  if (n == 0) return; /* p may be NULL: a stream with no pending part */
  memcpy(ob->data + ob->len, p, n);
  ob->len += n;
}

/* "[rank] " + a + b + "\n", never split across two write() calls. */
static void emit_line(struct obuf* ob, int rank, const char* a, size_t alen, const char* b,
                      size_t blen) {
  char prefix[16];
  size_t plen = (size_t)snprintf(prefix, sizeof prefix, "[%d] ", rank);
  if (ob->len + plen + alen + blen + 1 > OBUF_CAP) obuf_flush(ob);
  obuf_put(ob, prefix, plen);
  obuf_put(ob, a, alen);
  obuf_put(ob, b, blen);
  obuf_put(ob, "\n", 1);
}

/* Keeps the unfinished end of a line; a line that reaches LINE_CAP is emitted as it is. */
static void part_append(struct stream* s, struct obuf* ob, int rank, const char* p, size_t n) {
  while (n > 0) {
    if (s->part_len == s->part_cap) {
      size_t cap = s->part_cap ? 2 * s->part_cap : 256;
      char* grown = cap <= LINE_CAP ? realloc(s->part, cap) : NULL;
      if (!grown) {
        emit_line(ob, rank, s->part, s->part_len, "", 0);
        s->part_len = 0;
        if (s->part_cap == 0) return; /* out of memory: drop it rather than fail the run */
        continue;
      }
      s->part = grown;
      s->part_cap = cap;
    }
    size_t take = s->part_cap - s->part_len < n ? s->part_cap - s->part_len : n;
    memcpy(s->part + s->part_len, p, take);
    s->part_len += take;
    p += take;
    n -= take;
  }
}

static void stream_feed(struct stream* s, struct obuf* ob, int rank, const char* p, size_t n) {
  const char* end = p + n;
  while (p < end) {
    const char* nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl) {
      part_append(s, ob, rank, p, (size_t)(end - p));
      break;
    }
    emit_line(ob, rank, s->part, s->part_len, p, (size_t)(nl - p));
    s->part_len = 0;
    p = nl + 1;
  }
}

static void stream_close(struct run* r, int rank, int which) {
  struct stream* s = &r->ranks[rank].out[which];
  if (s->part_len) emit_line(&g_out[which], rank, s->part, s->part_len, "", 0);
  obuf_flush(&g_out[which]);
  close(s->fd);
  free(s->part);
  *s = (struct stream){.fd = -1};
  r->nstreams--;
}

static void stream_read(struct run* r, int rank, int which) {
  struct stream* s = &r->ranks[rank].out[which];
  ssize_t n = read(s->fd, g_scratch, sizeof g_scratch);
  if (n > 0) {
    stream_feed(s, &g_out[which], rank, g_scratch, (size_t)n);
    obuf_flush(&g_out[which]);
  }
  /* Once loomrun's own stdout is gone, the rank's writes must fail as they would without
   * --prefix (EPIPE or SIGPIPE), instead of being read and dropped forever. */
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) || g_out[which].broken) {
    stream_close(r, rank, which);
  }
}

/* ---- Stopping ------------------------------------------------------------- */

static void signal_ranks(struct run* r, int sig) {
  for (int i = 0; i < r->opt.np; i++)
    if (r->ranks[i].pid > 0) kill(-r->ranks[i].pid, sig);
}

static int64_t ms_of(double s) {
  return (int64_t)(s * 1000.0 + 0.5);
}

static void stop_begin(struct run* r, int sig, int exit_code) {
  r->exit_code = exit_code;
  r->state = RUN_STOPPING;
  r->deadline = now_ms() + ms_of(r->opt.grace_s);
  signal_ranks(r, sig);
}

/* ---- Naming the first failing rank ---------------------------------------- */

/* The rank that was started as pid, or -1. */
static int rank_of_pid(const struct run* r, pid_t pid) {
  for (int i = 0; pid > 0 && i < r->opt.np; i++)
    if (r->ranks[i].started == pid) return i;
  return -1;
}

/* Reads every pending cause message; never blocks. A rank's first message is the one that
 * counts. Messages from or about processes that are not ranks (a rank's children, threads
 * blaming their own process), and malformed ones, are dropped. */
static void cause_read(struct run* r) {
  for (;;) {
    struct report_msg msg;
    union {
      struct cmsghdr align;
      char buf[CMSG_SPACE(sizeof(struct ucred))];
    } ctl;
    struct iovec iov = {.iov_base = &msg, .iov_len = sizeof msg};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl};
    ssize_t n = recvmsg(r->cause_fd, &mh, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return; /* EAGAIN: all read */
    struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
    if (n != (ssize_t)sizeof msg || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || !c ||
        c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_CREDENTIALS ||
        msg.magic != REPORT_MAGIC || msg.version != REPORT_VERSION)
      continue;
    struct ucred cred;
    memcpy(&cred, CMSG_DATA(c), sizeof cred);
    int from = rank_of_pid(r, cred.pid), to = rank_of_pid(r, msg.peer_pid);
    if (from >= 0 && to >= 0 && from != to && r->ranks[from].blame < 0) r->ranks[from].blame = to;
  }
}

/* Follows rank's blame through ranks that failed too; returns the last rank of the chain.
 * *dying_out is the rank the chain points at that has not been reaped yet, or -1. A blamed
 * rank that exited 0 explains nothing, and a cycle (ranks that blame each other) has no end:
 * both count as no blame. */
static int blame_end(const struct run* r, int rank, int* dying_out) {
  *dying_out = -1;
  int cur = rank;
  for (int steps = 0; steps < r->opt.np; steps++) {
    int b = r->ranks[cur].blame;
    if (b < 0) return cur;
    if (r->ranks[b].pid > 0) {
      *dying_out = b;
      return cur;
    }
    if (!r->ranks[b].fail_seq) return cur;
    cur = b;
  }
  return rank;
}

static int is_crash_signal(int sig) {
  return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGABRT;
}

/* Between two ranks at the end of their chains: a crash beats an exit, then a rank that others
 * blame beats one they do not, then the first reaped wins. */
static int cause_better(const struct run* r, int a, int b) {
  const struct rank *ra = &r->ranks[a], *rb = &r->ranks[b];
  int sa = 2 * (ra->how != CLD_EXITED && is_crash_signal(ra->status)) + (ra->echoes > 0);
  int sb = 2 * (rb->how != CLD_EXITED && is_crash_signal(rb->status)) + (rb->echoes > 0);
  return sa != sb ? sa > sb : ra->fail_seq < rb->fail_seq;
}

/* "; rank 0 failed because of it", or "; ranks 0, 2 and 3 ...", naming LIST_MAX at most. */
static void echoes_text(const struct run* r, int root, char* buf, size_t cap) {
  int n = r->ranks[root].echoes, named = 0;
  size_t len = 0;
  buf[0] = '\0';
  if (n == 0) return;
  len += (size_t)snprintf(buf, cap, "; rank%s", n > 1 ? "s" : "");
  for (int i = 0; i < r->opt.np && named < n && named < LIST_MAX && len < cap; i++) {
    if (!r->ranks[i].fail_seq || i == root || r->ranks[i].cause != root) continue;
    const char* sep = named == 0 ? " " : named + 1 == n ? " and " : ", ";
    len += (size_t)snprintf(buf + len, cap - len, "%s%d", sep, i);
    named++;
  }
  if (len < cap && n > named)
    len += (size_t)snprintf(buf + len, cap - len, " and %d others", n - named);
  if (len < cap) snprintf(buf + len, cap - len, " failed because of it");
}

/* Says which rank is the first failing one, and why the others failed, and starts the stop
 * with its status. */
static void cause_report(struct run* r, int root) {
  const struct rank* rk = &r->ranks[root];
  char what[160], echoes[256], note[96] = "";
  if (rk->how == CLD_EXITED)
    snprintf(what, sizeof what, "rank %d exited with status %d", root, rk->status);
  else
    snprintf(what, sizeof what, "rank %d was killed by signal %d (%s)%s", root, rk->status,
             strsignal(rk->status), rk->how == CLD_DUMPED ? ", core dumped" : "");
  echoes_text(r, root, echoes, sizeof echoes);
  int b = rk->blame;
  if (b >= 0 && r->ranks[b].pid > 0)
    snprintf(note, sizeof note, "; it blamed rank %d, which was still running", b);
  else if (b >= 0 && !r->ranks[b].fail_seq)
    snprintf(note, sizeof note, "; it blamed rank %d, which exited 0", b);
  say("%s%s%s%s", what, echoes, note, r->nlive > 0 ? "; stopping the other ranks" : "");
  stop_begin(r, SIGTERM, rk->code);
}

/* While DECIDING: names the first failing rank among those that failed so far, unless a chain
 * of blame points at a rank that is still alive and force is 0; then it waits for that rank
 * to die (CAUSE_WAIT_MS at most: check_deadlines calls it again with force). */
static void decide(struct run* r, int force) {
  for (int i = 0; i < r->opt.np; i++) {
    struct rank* rk = &r->ranks[i];
    int dying;
    rk->echoes = 0;
    if (!rk->fail_seq) continue;
    rk->cause = blame_end(r, i, &dying);
    if (dying >= 0 && !force) return;
  }
  int root = -1;
  for (int i = 0; i < r->opt.np; i++)
    if (r->ranks[i].fail_seq && r->ranks[i].cause != i) r->ranks[r->ranks[i].cause].echoes++;
  for (int i = 0; i < r->opt.np; i++)
    if (r->ranks[i].fail_seq && r->ranks[i].cause == i && (root < 0 || cause_better(r, i, root)))
      root = i;
  cause_report(r, root);
}

/* ---- Supervising ---------------------------------------------------------- */

static void rank_ended(struct run* r, int rank, const siginfo_t* si) {
  struct rank* rk = &r->ranks[rank];
  rk->pid = 0;
  r->nlive--;
  rk->how = si->si_code;
  rk->status = si->si_status;
  rk->code = si->si_code == CLD_EXITED ? si->si_status : 128 + si->si_status;
  if (rk->code != 0 && (r->state == RUN_RUNNING || r->state == RUN_DECIDING))
    rk->fail_seq = ++r->nfailed;
}

/* Reaps every rank that has died, then reads the cause messages: a rank sends its message
 * before it dies, so those of every rank reaped here are in. A failure starts DECIDING.
 * Peeks with WNOWAIT first: the zombie keeps the rank's pid, and so its process group id,
 * from being reused while we kill what the rank left behind in that group. */
static void reap_ranks(struct run* r) {
  for (;;) {
    siginfo_t si = {0};
    if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0) break;
    int rank = 0;
    while (rank < r->opt.np && r->ranks[rank].pid != si.si_pid) rank++;
    kill(-si.si_pid, SIGKILL);
    siginfo_t done;
    waitid(P_PID, (id_t)si.si_pid, &done, WEXITED);
    if (rank == r->opt.np) continue; /* not a rank: cannot happen, but never loop on it */
    rank_ended(r, rank, &si);
  }
  cause_read(r);
  if (r->state == RUN_RUNNING && r->nfailed > 0) {
    r->state = RUN_DECIDING;
    r->deadline = now_ms() + CAUSE_WAIT_MS;
  }
  if (r->state == RUN_DECIDING) decide(r, 0);
}

/* Every forwarded signal reaches the ranks; the terminating ones also start the stop, with
 * the signal itself in place of SIGTERM. A failure being decided came first: it is named at
 * once, with what is known, and keeps its status. */
static void on_signal(struct run* r, int sig) {
  if (sig == SIGCHLD) return; /* reap_ranks runs after every wakeup */
  int stops = sig != SIGUSR1 && sig != SIGUSR2;
  if (stops && r->state == RUN_DECIDING) decide(r, 1); /* the failure came first: name it now */
  if (!stops || r->state != RUN_RUNNING) {
    signal_ranks(r, sig);
    return;
  }
  say("got signal %d (%s); stopping the ranks", sig, strsignal(sig));
  stop_begin(r, sig, 128 + sig);
}

static void read_signals(struct run* r) {
  struct signalfd_siginfo info;
  while (read(r->sigfd, &info, sizeof info) == (ssize_t)sizeof info)
    on_signal(r, (int)info.ssi_signo);
}

/* Moves the state machine on when its deadline has passed. */
static void check_deadlines(struct run* r, int64_t now) {
  int64_t after_kill =
      ms_of(r->opt.grace_s) > KILL_WAIT_MIN_MS ? ms_of(r->opt.grace_s) : KILL_WAIT_MIN_MS;
  if (r->state == RUN_DECIDING && (now >= r->deadline || r->nlive == 0)) decide(r, 1);
  if (r->state == RUN_RUNNING && r->timeout_at && now >= r->timeout_at) {
    say("timed out after %g s; stopping the ranks", r->opt.timeout_s);
    stop_begin(r, SIGTERM, EXIT_TIMEOUT);
  }
  if (r->nlive == 0 && r->state != RUN_DRAINING) {
    r->state = RUN_DRAINING; /* what is left: output from processes that escaped the groups */
    r->deadline = now + after_kill;
  } else if (r->state == RUN_STOPPING && now >= r->deadline) {
    say("%d rank%s still running %g s after being told to stop; sending SIGKILL", r->nlive,
        r->nlive == 1 ? "" : "s", r->opt.grace_s);
    signal_ranks(r, SIGKILL);
    r->state = RUN_KILLED;
    r->deadline = now + after_kill;
  } else if (r->state == RUN_KILLED && now >= r->deadline) {
    say("giving up on %d rank%s that did not die after SIGKILL", r->nlive,
        r->nlive == 1 ? "" : "s");
    for (int i = 0; i < r->opt.np; i++) r->ranks[i].pid = 0;
    r->nlive = 0;
  }
  if (r->state == RUN_DRAINING && now >= r->deadline)
    for (int i = 0; i < r->opt.np; i++)
      for (int s = 0; s < 2; s++)
        if (r->ranks[i].out[s].fd >= 0) stream_close(r, i, s);
}

static int poll_timeout(const struct run* r, int64_t now) {
  int64_t at = r->state == RUN_RUNNING ? r->timeout_at : r->deadline;
  if (!at) return -1;
  return at <= now ? 0 : (int)(at - now > 60000 ? 60000 : at - now);
}

static void supervise(struct run* r, struct pollfd* pfds, int* owner) {
  while (r->nlive > 0 || r->nstreams > 0) {
    int64_t now = now_ms();
    check_deadlines(r, now);
    if (r->nlive == 0 && r->nstreams == 0) break;
    int n = 0;
    pfds[n++] = (struct pollfd){.fd = r->sigfd, .events = POLLIN};
    pfds[n++] = (struct pollfd){.fd = r->cause_fd, .events = POLLIN}; /* read by reap_ranks */
    for (int i = 0; i < r->opt.np; i++)
      for (int s = 0; s < 2; s++)
        if (r->ranks[i].out[s].fd >= 0) {
          owner[n] = 2 * i + s;
          pfds[n++] = (struct pollfd){.fd = r->ranks[i].out[s].fd, .events = POLLIN};
        }
    if (poll(pfds, (nfds_t)n, poll_timeout(r, now)) < 0 && errno != EINTR) {
      say("poll failed: %s", strerror(errno));
      break;
    }
    if (pfds[0].revents) read_signals(r);
    for (int k = 2; k < n; k++)
      if (pfds[k].revents) stream_read(r, owner[k] / 2, owner[k] % 2);
    reap_ranks(r);
  }
}

int main(int argc, char** argv) {
  struct run r = {.sigfd = -1, .cause_fd = -1, .cause_wfd = -1, .self = getpid()};
  ensure_std_fds();
  parse_options(argc, argv, &r.opt);
  int err = program_check(r.opt.argv[0]);
  if (err) {
    say("cannot run '%s': %s", r.opt.argv[0], strerror(err));
    return EXIT_NOEXEC;
  }
  if (set_common_env(&r.opt) || raise_fd_limit(&r) || signals_setup(&r) || cause_open(&r))
    return EXIT_INTERNAL;
  r.ranks = calloc((size_t)r.opt.np, sizeof *r.ranks);
  struct pollfd* pfds = calloc(2 + 2 * (size_t)r.opt.np, sizeof *pfds);
  int* owner = calloc(2 + 2 * (size_t)r.opt.np, sizeof *owner);
  if (!r.ranks || !pfds || !owner) {
    say("out of memory");
    return EXIT_INTERNAL;
  }
  for (int i = 0; i < r.opt.np; i++) {
    r.ranks[i].out[0].fd = r.ranks[i].out[1].fd = -1;
    r.ranks[i].blame = -1;
  }
  if (r.opt.timeout_s > 0) r.timeout_at = now_ms() + ms_of(r.opt.timeout_s);
  /* A rank that already failed, or a signal, stops the launch: no point starting the rest. */
  for (int i = 0; i < r.opt.np && r.state == RUN_RUNNING; i++) {
    if (rank_start(&r, i) != 0) stop_begin(&r, SIGTERM, EXIT_INTERNAL);
    read_signals(&r);
    reap_ranks(&r);
  }
  close(r.cause_wfd); /* the ranks have their copies */
  r.cause_wfd = -1;
  supervise(&r, pfds, owner);
  free(owner);
  free(pfds);
  free(r.ranks);
  close(r.sigfd);
  close(r.cause_fd);
  return r.exit_code;
}
