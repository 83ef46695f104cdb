/* args.c - nccl-tests' flags, with their long forms and defaults (src/common.cu), and the few
 * Loom adds (--mem). Flags that only mean something for CUDA are accepted with their "off"
 * value, so that scripts written for nccl-tests run, and refused with the reason otherwise. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

enum { OPT_MEM = 1000, OPT_MIN_MS };

static const struct option long_opts[] = {
    {"nthreads", required_argument, 0, 't'},
    {"ngpus", required_argument, 0, 'g'},
    {"minbytes", required_argument, 0, 'b'},
    {"maxbytes", required_argument, 0, 'e'},
    {"stepbytes", required_argument, 0, 'i'},
    {"stepfactor", required_argument, 0, 'f'},
    {"iters", required_argument, 0, 'n'},
    {"agg_iters", required_argument, 0, 'm'},
    {"warmup_iters", required_argument, 0, 'w'},
    {"run_cycles", required_argument, 0, 'N'},
    {"parallel_init", required_argument, 0, 'p'},
    {"check", required_argument, 0, 'c'},
    {"op", required_argument, 0, 'o'},
    {"datatype", required_argument, 0, 'd'},
    {"root", required_argument, 0, 'r'},
    {"blocking", required_argument, 0, 'z'},
    {"stream_null", required_argument, 0, 'y'},
    {"timeout", required_argument, 0, 'T'},
    {"cudagraph", required_argument, 0, 'G'},
    {"report_cputime", required_argument, 0, 'C'},
    {"report_timestamps", required_argument, 0, 'S'},
    {"output_file", required_argument, 0, 'J'},
    {"average", required_argument, 0, 'a'},
    {"local_register", required_argument, 0, 'R'},
    {"cta_policy", required_argument, 0, 'x'},
    {"device_implementation", required_argument, 0, 'D'},
    {"device_cta_count", required_argument, 0, 'V'},
    {"memory", required_argument, 0, 'M'},
    {"unalign", required_argument, 0, 'u'},
    {"per_iter_timing", required_argument, 0, 'I'},
    {"per_iter_skip", required_argument, 0, 'K'},
    {"mem", required_argument, 0, OPT_MEM},
    {"min_ms", required_argument, 0, OPT_MIN_MS},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};
static const char short_opts[] = ":t:g:b:e:i:f:n:m:w:N:p:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:I:K:";

/* nccl-tests flags this build does not implement: accepted only with their default value. */
static const struct {
  int flag;
  const char* dflt;
  const char* why;
} unsupported[] = {
    {'G', "0", "CUDA graphs need CUDA streams"},
    {'C', "0", "the reported time is always host wall-clock time"},
    {'S', "0", "timestamps are not reported"},
    {'x', "-1", "CTA policies are CUDA-only"},
    {'D', "0", "device-side implementations are CUDA-only"},
    {'V', "16", "device CTA counts are CUDA-only"},
    {'M', "0", "the memory report measures GPU memory"},
    {'u', "0", "misaligned buffers are not implemented"},
    {'I', "0", "per-iteration timing uses CUDA events"},
    {'K', "0", "per-iteration timing uses CUDA events"},
};

static void usage(const char* tool) {
  printf("Usage: %s [flags]     (under loomrun -n N, mpirun, srun, or alone with -t N)\n", tool);
  printf(
      "Sizes are bytes with an optional K, M or G (x1024). nccl-tests' flags and defaults:\n"
      "  -b, --minbytes SIZE      first size of the sweep (32M)\n"
      "  -e, --maxbytes SIZE      last size of the sweep (32M)\n"
      "  -i, --stepbytes SIZE     add this between sizes when -f is 1 (1M)\n"
      "  -f, --stepfactor N       multiply by N between sizes when N > 1 (1)\n"
      "  -n, --iters N            timed iterations per size and placement (20)\n"
      "  -w, --warmup_iters N     untimed calls per size before the sweep (1)\n"
      "  -m, --agg_iters N        calls per iteration, issued as one group (1)\n"
      "  -N, --run_cycles N       repeat the sweep N times; 0 forever (1)\n"
      "  -c, --check N            checked calls per size and placement; 0 none (1)\n"
      "  -d, --datatype NAME      int8 uint8 int32 uint32 int64 uint64 half float double\n"
      "                           bfloat16 f8e4m3 f8e5m2, or all (float)\n"
      "  -o, --op NAME            sum prod max min avg mulsum, or all (sum)\n"
      "  -r, --root N             root rank; -1 every root in turn (0)\n"
      "  -z, --blocking 0-3       0 wait at the end of the iterations; 1 wait and barrier\n"
      "                           after each call; 2 wait after each call; 3 wait and barrier\n"
      "                           after each iteration, the barrier left out of the time (0)\n"
      "  -a, --average 0-3        the time reported: rank 0's, the mean, min or max over the\n"
      "                           ranks (1: the mean)\n"
      "  -t, --nthreads N         thread ranks per process (1)\n"
      "  -g, --ngpus N            ranks per thread, driven by that thread in one group (1)\n"
      "  -y, --stream_null 0/1    1: the NULL stream (each call blocks); 0: a host stream (0)\n"
      "  -T, --timeout SECONDS    the communicators' timeout; 0 Loom's default (0)\n"
      "  -R, --local_register N   1: loomCommRegister the buffers; 2: take them from\n"
      "                           loomMemAlloc and register them (0)\n"
      "  -J, --output_file FILE   also write the results to FILE as JSON (docs/PERF.md)\n"
      "      --mem host|cuda      where the buffers live (host)\n"
      "      --min_ms MS          time each size and placement for at least MS milliseconds:\n"
      "                           after the -n iterations, as many more as their slowest\n"
      "                           rank's mean says fill MS (every rank runs the same count;\n"
      "                           at most 10^6 in all); 0: the -n iterations only (0)\n"
      "  -h, --help\n");
  printf(
      "Read differently from nccl-tests: -g counts host ranks, not GPUs; -T sets Loom's own\n"
      "timeout on every wait; -J overwrites FILE in Loom's schema; an unknown -d or -o is an\n"
      "error; with -m > 1 the waits of -z follow each group; -p is accepted and ignored (each\n"
      "thread initialises its own ranks). Not implemented, accepted only with their default:\n"
      "-G,--cudagraph 0  -C,--report_cputime 0  -S,--report_timestamps 0  -x,--cta_policy -1\n"
      "-D,--device_implementation 0  -V,--device_cta_count 16  -M,--memory 0  -u,--unalign 0\n"
      "-I,--per_iter_timing 0  -K,--per_iter_skip 0  (CUDA-only, or not needed on host ranks).\n");
}

/* Strict integer: all of s, within [lo, hi]. */
static int parse_int(const char* flag, const char* s, long lo, long hi, int* out, int quiet) {
  char* end;
  errno = 0;
  long v = strtol(s, &end, 0);
  if (errno || end == s || *end || v < lo || v > hi) {
    if (!quiet) fprintf(stderr, "%s %s: expected an integer from %ld to %ld\n", flag, s, lo, hi);
    return -1;
  }
  *out = (int)v;
  return 0;
}

/* A byte count with an optional K, M or G suffix (binary: K = 1024), as nccl-tests reads it. */
static int parse_size(const char* flag, const char* s, size_t* out, int quiet) {
  char* end;
  errno = 0;
  double v = strtod(s, &end);
  double unit = 1;
  if (end != s && *end && !end[1]) {
    switch (*end) {
      case 'k':
      case 'K':
        unit = 1024.0;
        end++;
        break;
      case 'm':
      case 'M':
        unit = 1024.0 * 1024;
        end++;
        break;
      case 'g':
      case 'G':
        unit = 1024.0 * 1024 * 1024;
        end++;
        break;
      default:
        break;
    }
  }
  if (errno || end == s || *end || v < 0 || v * unit > 1e18) {
    if (!quiet)
      fprintf(stderr, "%s %s: expected a size in bytes, optionally with K, M or G (binary)\n", flag,
              s);
    return -1;
  }
  *out = (size_t)(v * unit);
  return 0;
}

static void defaults(struct perf_opts* o, int argc, char** argv) {
  memset(o, 0, sizeof(*o));
  o->nthreads = 1;
  o->ngpus = 1;
  o->min_bytes = o->max_bytes = 32u << 20;
  o->step_bytes = 1u << 20;
  o->step_factor = 1;
  o->check = 1;
  o->warmup_iters = 1;
  o->iters = 20;
  o->agg_iters = 1;
  o->run_cycles = 1;
  o->op = loomSum;
  o->type = loomFloat32;
  o->root = 0;
  o->average = 1;
  o->type_arg = "float";
  o->op_arg = "sum";
  o->mem = perf_mem_find("host");
  o->argc = argc;
  o->argv = argv;
}

static int parse_unsupported(int c, const char* arg, int quiet) {
  for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++) {
    if (unsupported[i].flag != c) continue;
    if (strcmp(arg, unsupported[i].dflt) == 0) return 0;
    if (!quiet)
      fprintf(stderr, "-%c %s: not supported by Loom's perf tools: %s (only %s is accepted)\n", c,
              arg, unsupported[i].why, unsupported[i].dflt);
    return -1;
  }
  return -1;
}

static int parse_names(struct perf_opts* o, int c, const char* arg, int quiet) {
  if (c == 'd') {
    int t = dtype_parse(arg);
    if (t == -2) {
      if (!quiet)
        fprintf(stderr,
                "-d %s: unknown datatype; use int8, uint8, int32, uint32, int64, uint64, "
                "half, float, double, bfloat16, f8e4m3, f8e5m2 or all\n",
                arg);
      return -1;
    }
    o->type = t;
    o->type_arg = t == PERF_ALL ? "all" : dtype_name((loomDataType_t)t);
    return 0;
  }
  int op = op_parse(arg);
  if (op == -2) {
    if (!quiet)
      fprintf(stderr, "-o %s: unknown reduction op; use sum, prod, max, min, avg, mulsum or all\n",
              arg);
    return -1;
  }
  o->op = op;
  o->op_arg = op == PERF_ALL ? "all" : op_name(op);
  return 0;
}

static int parse_mem(struct perf_opts* o, const char* arg, int quiet) {
  const struct perf_mem_kind* k = perf_mem_find(arg);
  if (!k) {
    if (!quiet) fprintf(stderr, "--mem %s: unknown memory kind; use host or cuda\n", arg);
    return -1;
  }
  if (k->unsupported) {
    if (!quiet) fprintf(stderr, "%s\n", k->unsupported);
    return -1;
  }
  o->mem = k;
  return 0;
}

/* One flag with its value. Returns 0 or -1 (message printed). */
static int parse_one(struct perf_opts* o, int c, const char* arg, int quiet) {
  int v = 0, rc = 0;
  switch (c) {
    case 't':
      rc = parse_int("-t", arg, 1, 1024, &o->nthreads, quiet);
      break;
    case 'g':
      rc = parse_int("-g", arg, 1, 1024, &o->ngpus, quiet);
      break;
    case 'b':
      rc = parse_size("-b", arg, &o->min_bytes, quiet);
      break;
    case 'e':
      rc = parse_size("-e", arg, &o->max_bytes, quiet);
      break;
    case 'i':
      rc = parse_size("-i", arg, &o->step_bytes, quiet);
      break;
    case 'f':
      rc = parse_int("-f", arg, 0, INT_MAX, &v, quiet);
      o->step_factor = (size_t)v;
      break;
    case 'n':
      rc = parse_int("-n", arg, 1, INT_MAX, &o->iters, quiet);
      break;
    case 'm':
      rc = parse_int("-m", arg, 1, INT_MAX, &o->agg_iters, quiet);
      break;
    case 'w':
      rc = parse_int("-w", arg, 0, INT_MAX, &o->warmup_iters, quiet);
      break;
    case 'N':
      rc = parse_int("-N", arg, 0, INT_MAX, &o->run_cycles, quiet);
      break;
    case 'p':
      rc = parse_int("-p", arg, 0, 1, &v, quiet);
      break;
    case 'c':
      rc = parse_int("-c", arg, 0, INT_MAX, &o->check, quiet);
      break;
    case 'r':
      rc = parse_int("-r", arg, -1, INT_MAX, &o->root, quiet);
      break;
    case 'z':
      rc = parse_int("-z", arg, 0, 3, &o->blocking, quiet);
      break;
    case 'y':
      rc = parse_int("-y", arg, 0, 1, &o->stream_null, quiet);
      break;
    case 'T':
      rc = parse_int("-T", arg, 0, INT_MAX / 1000, &o->timeout_s, quiet);
      break;
    case 'a':
      rc = parse_int("-a", arg, 0, 3, &o->average, quiet);
      break;
    case 'R':
      rc = parse_int("-R", arg, 0, 2, &o->local_register, quiet);
      break;
    case 'J':
      o->json_path = arg;
      break;
    case 'd':
    case 'o':
      rc = parse_names(o, c, arg, quiet);
      break;
    case OPT_MEM:
      rc = parse_mem(o, arg, quiet);
      break;
    case OPT_MIN_MS:
      rc = parse_int("--min_ms", arg, 0, 3600 * 1000, &o->min_ms, quiet);
      break;
    default:
      rc = parse_unsupported(c, arg, quiet);
      break;
  }
  return rc;
}

/* What getopt could not take: an unknown flag or a missing value. */
static void report_getopt_error(int c, char** argv, int quiet) {
  if (quiet) return;
  const char* what = argv[optind - 1];
  if (c == ':')
    fprintf(stderr, "%s: this flag needs a value; see --help\n", what);
  else if (optopt)
    fprintf(stderr, "unknown flag '-%c'; see --help\n", optopt);
  else
    fprintf(stderr, "unknown flag '%s'; see --help\n", what);
}

static int validate(const struct perf_opts* o, int quiet) {
  const char* why = NULL;
  if (o->min_bytes > o->max_bytes)
    why = "invalid sizes: -b (minbytes) is larger than -e (maxbytes)";
  else if (o->step_factor > 1 && o->min_bytes == 0 && o->max_bytes > 0)
    why = "-b 0 with -f > 1 never grows; start the sweep at 1 byte or more";
  else if (o->step_factor <= 1 && o->step_bytes == 0 && o->max_bytes > o->min_bytes)
    why = "-i 0 without -f > 1 never grows; give a step or a factor";
  if (!why) return 0;
  if (!quiet) fprintf(stderr, "%s\n", why);
  return -1;
}

int perf_args_parse(struct perf_opts* o, int argc, char** argv, const char* tool, int quiet) {
  defaults(o, argc, argv);
  opterr = 0;
  for (;;) {
    int c = getopt_long(argc, argv, short_opts, long_opts, NULL);
    if (c == -1) break;
    if (c == 'h') {
      if (!quiet) usage(tool);
      return 0;
    }
    if (c == '?' || c == ':') {
      report_getopt_error(c, argv, quiet);
      return PERF_EXIT_USAGE;
    }
    if (parse_one(o, c, optarg, quiet) != 0) return PERF_EXIT_USAGE;
  }
  if (optind < argc) {
    if (!quiet) fprintf(stderr, "unexpected argument '%s'; see --help\n", argv[optind]);
    return PERF_EXIT_USAGE;
  }
  return validate(o, quiet) == 0 ? -1 : PERF_EXIT_USAGE;
}
