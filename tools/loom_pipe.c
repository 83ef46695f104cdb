/* loom_pipe: a pipeline schedule as a picture, before choosing one (PARALLEL.md section 6).
 *
 *   loom_pipe [-p RANKS] [-m MICROBATCHES] [-v CHUNKS] [-k KINDS] [-c F,B,W,COMM]
 *             [-w COLUMNS] [--svg FILE | --png FILE]
 *
 * For each kind (default: all six; KINDS a comma list of afab, 1f1b, interleaved, zbh1, zbv,
 * dualpipev), the schedule libloom_parallel generates for p ranks and m microbatches, run
 * through its binding simulator. The costs (-c, default 1,1,1,0) are those of one rank's share
 * of the model for one microbatch, so that kinds compare on one model: a kind with v chunks per
 * rank has stages of 1/v of that (f/v, b/v, w/v; comm as given). Printed: the makespan, the
 * bubble ratio, each
 * rank's idle time and peak activations, and a per-rank timeline in text. With more than one
 * kind, a table compares them. --svg and --png draw the timelines through gnuplot. A kind
 * that cannot serve p and m (DualPipeV needs m >= 2p, interleaved m % p == 0) says why. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom_parallel.h"
#include "parallel/pipe.h"

struct kind_info {
  const char* name;
  loomPipeKind_t kind;
  int v; /* chunks per rank; interleaved takes -v */
};
static const struct kind_info KINDS[] = {{"afab", loomPipeAFAB, 1},
                                         {"1f1b", loomPipe1F1B, 1},
                                         {"interleaved", loomPipeInterleaved1F1B, 2},
                                         {"zbh1", loomPipeZBH1, 1},
                                         {"zbv", loomPipeZBV, 2},
                                         {"dualpipev", loomPipeDualPipeV, 2}};
#define NKINDS ((int)(sizeof(KINDS) / sizeof(KINDS[0])))

struct opts {
  int p, m, v, width;
  int use[NKINDS];
  loomPipeCosts costs;
  const char *svg, *png;
};

/* One kind's schedule and its simulation. */
struct run {
  const struct kind_info* k;
  loomPipeCosts costs; /* per stage: the -c costs over v */
  loomPipeSchedule_t sched;
  loomPipeStats stats;
  double* idle;   /* [p] */
  int* peak;      /* [p] */
  double** start; /* [p][actions of rank r] */
};

static void usage(void) {
  fprintf(stderr,
          "usage: loom_pipe [-p RANKS] [-m MICROBATCHES] [-v CHUNKS] [-k KINDS] [-c F,B,W,COMM]\n"
          "                 [-w COLUMNS] [--svg FILE | --png FILE]\n"
          "  KINDS: all (default) or a comma list of afab,1f1b,interleaved,zbh1,zbv,dualpipev\n");
}

static int parse_kinds(const char* arg, struct opts* o) {
  if (strcmp(arg, "all") == 0) {
    for (int i = 0; i < NKINDS; i++) o->use[i] = 1;
    return 0;
  }
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", arg);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int found = 0;
    for (int i = 0; i < NKINDS; i++)
      if (strcmp(t, KINDS[i].name) == 0) o->use[i] = found = 1;
    if (!found) {
      fprintf(stderr, "loom_pipe: unknown kind '%s'\n", t);
      return -1;
    }
  }
  return 0;
}

static int parse_args(int argc, char** argv, struct opts* o) {
  *o = (struct opts){.p = 4, .m = 8, .v = 2, .width = 120, .costs = {1, 1, 1, 0}};
  int any = 0;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!val) return usage(), -1;
    i++;
    if (strcmp(a, "-p") == 0)
      o->p = atoi(val);
    else if (strcmp(a, "-m") == 0)
      o->m = atoi(val);
    else if (strcmp(a, "-v") == 0)
      o->v = atoi(val);
    else if (strcmp(a, "-w") == 0)
      o->width = atoi(val);
    else if (strcmp(a, "--svg") == 0)
      o->svg = val;
    else if (strcmp(a, "--png") == 0)
      o->png = val;
    else if (strcmp(a, "-k") == 0) {
      if (parse_kinds(val, o) != 0) return -1;
      any = 1;
    } else if (strcmp(a, "-c") == 0) {
      loomPipeCosts* c = &o->costs;
      if (sscanf(val, "%lf,%lf,%lf,%lf", &c->f, &c->b, &c->w, &c->comm) < 3) return usage(), -1;
    } else {
      return usage(), -1;
    }
  }
  if (!any) parse_kinds("all", o);
  if (o->width < 20 || o->width > 4000) o->width = 120;
  return 0;
}

/* The kind's schedule and simulation; 0 on success, else the library's message is printed. */
static int run_make(const struct opts* o, const struct kind_info* k, struct run* r) {
  memset(r, 0, sizeof(*r));
  r->k = k;
  int v = k->kind == loomPipeInterleaved1F1B ? o->v : k->v;
  if (loomPipeScheduleCreate(k->kind, o->p, o->m, v, &r->sched) != loomSuccess) {
    printf("%s: %s\n\n", k->name, loomGetLastError(NULL));
    return -1;
  }
  r->idle = calloc((size_t)o->p, sizeof(double));
  r->peak = calloc((size_t)o->p, sizeof(int));
  r->start = calloc((size_t)o->p, sizeof(double*));
  int ok = r->idle && r->peak && r->start;
  for (int q = 0; ok && q < o->p; q++) {
    const loomPipeAction* acts;
    int n;
    ok = loomPipeScheduleGetActions(r->sched, q, &acts, &n) == loomSuccess &&
         (r->start[q] = calloc((size_t)n + 1, sizeof(double))) != NULL;
  }
  r->costs = o->costs;
  r->costs.f /= v, r->costs.b /= v, r->costs.w /= v;
  if (!ok || pipe_simulate(r->sched, &r->costs, "loom_pipe", &r->stats, r->idle, r->peak,
                           r->start) != loomSuccess) {
    printf("%s: %s\n\n", k->name, ok ? loomGetLastError(NULL) : "out of memory");
    return -1;
  }
  return 0;
}

static void run_free(const struct opts* o, struct run* r) {
  for (int q = 0; r->start && q < o->p; q++) free(r->start[q]);
  free(r->start);
  free(r->idle);
  free(r->peak);
  if (r->sched) loomPipeScheduleDestroy(r->sched);
}

static double op_cost(const loomPipeCosts* c, loomPipeOp_t op) {
  return op == loomPipeF ? c->f : op == loomPipeB ? c->b : op == loomPipeW ? c->w : 0;
}

/* The chunk (0 .. v-1) of stage s on its rank: the picture tells chunks apart by case. */
static int chunk_of(const struct loomPipeSchedule* s, int stage) {
  if (s->v == 1) return 0;
  if (s->kind == loomPipeInterleaved1F1B) return stage / s->p;
  return stage < s->p ? 0 : 1;
}

static char op_letter(const struct loomPipeSchedule* s, const loomPipeAction* a) {
  char c = a->op == loomPipeF ? 'F' : a->op == loomPipeB ? 'B' : 'W';
  return chunk_of(s, a->stage) % 2 ? (char)(c - 'A' + 'a') : c;
}

/* One rank's row: each compute drawn over its columns as its letter and microbatch. */
static void print_row(const struct opts* o, const struct run* r, int q, double scale, char* line) {
  const loomPipeAction* acts;
  int n;
  loomPipeScheduleGetActions(r->sched, q, &acts, &n);
  memset(line, '.', (size_t)o->width);
  line[o->width] = '\0';
  for (int i = 0; i < n; i++) {
    double cost = op_cost(&r->costs, acts[i].op);
    if (acts[i].op > loomPipeW || cost <= 0) continue;
    int c0 = (int)lround(r->start[q][i] * scale);
    int c1 = (int)lround((r->start[q][i] + cost) * scale);
    if (c1 <= c0) c1 = c0 + 1;
    if (c0 >= o->width) continue;
    if (c1 > o->width) c1 = o->width;
    char label[24];
    int len =
        snprintf(label, sizeof(label), "%c%d", op_letter(r->sched, &acts[i]), acts[i].microbatch);
    for (int c = c0; c < c1; c++) line[c] = c - c0 < len && c1 - c0 >= len ? label[c - c0] : ' ';
    if (c1 - c0 < len) line[c0] = label[0];
  }
  printf("  rank %-3d|%s|\n", q, line);
}

static void print_run(const struct opts* o, const struct run* r) {
  const loomPipeStats* st = &r->stats;
  printf("%s: p %d, m %d, v %d, stage costs f %g b %g w %g comm %g\n", r->k->name, o->p, o->m,
         r->sched->v, r->costs.f, r->costs.b, r->costs.w, r->costs.comm);
  printf("  makespan %g, bubble ratio %.1f%%\n", st->makespan, 100.0 * st->bubbleRatio);
  printf("  idle per rank:");
  for (int q = 0; q < o->p; q++) printf(" %g", r->idle[q]);
  printf("\n  peak activations per rank:");
  for (int q = 0; q < o->p; q++) printf(" %d", r->peak[q]);
  printf("\n");
  char* line = malloc((size_t)o->width + 1);
  if (!line || st->makespan <= 0) {
    free(line);
    printf("\n");
    return;
  }
  double scale = o->width / st->makespan;
  for (int q = 0; q < o->p; q++) print_row(o, r, q, scale, line);
  free(line);
  printf(
      "  (%g time units in %d columns; F B W: forward, input gradient, weight gradient, "
      "lower case for odd chunks; the number is the microbatch; '.' idle)\n\n",
      st->makespan, o->width);
}

static void print_table(const struct opts* o, const struct run* runs, int n) {
  printf("%-12s %10s %8s %10s\n", "kind", "makespan", "bubble", "max peak");
  for (int i = 0; i < n; i++) {
    if (!runs[i].sched) continue;
    int peak = 0;
    for (int q = 0; q < o->p; q++) peak = runs[i].peak[q] > peak ? runs[i].peak[q] : peak;
    printf("%-12s %10g %7.1f%% %10d\n", runs[i].k->name, runs[i].stats.makespan,
           100.0 * runs[i].stats.bubbleRatio, peak);
  }
}

/* gnuplot's colours: F blue, B green, W orange; odd chunks darker. */
static unsigned colour_of(const struct loomPipeSchedule* s, const loomPipeAction* a) {
  static const unsigned even[3] = {0x4c72b0, 0x55a868, 0xdd8452};
  static const unsigned odd[3] = {0x2a4a80, 0x2f7a40, 0xa85a28};
  return chunk_of(s, a->stage) % 2 ? odd[a->op] : even[a->op];
}

/* One data block per kind (gnuplot's index): rank, start, end, colour, label. */
static void plot_data(FILE* f, const struct opts* o, const struct run* runs, int n) {
  for (int i = 0; i < n; i++) {
    if (!runs[i].sched) continue;
    for (int q = 0; q < o->p; q++) {
      const loomPipeAction* acts;
      int na;
      loomPipeScheduleGetActions(runs[i].sched, q, &acts, &na);
      for (int a = 0; a < na; a++) {
        double cost = op_cost(&runs[i].costs, acts[a].op);
        if (acts[a].op > loomPipeW || cost <= 0) continue;
        fprintf(f, "%d %.9g %.9g %u %c%d\n", q, runs[i].start[q][a], runs[i].start[q][a] + cost,
                colour_of(runs[i].sched, &acts[a]), op_letter(runs[i].sched, &acts[a]),
                acts[a].microbatch);
      }
    }
    fprintf(f, "\n\n");
  }
}

static int plot(const struct opts* o, const struct run* runs, int n) {
  const char* out = o->svg ? o->svg : o->png;
  char data[] = "/tmp/loom_pipe_XXXXXX";
  int fd = mkstemp(data);
  FILE* f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) return fprintf(stderr, "loom_pipe: cannot write a temporary file\n"), -1;
  plot_data(f, o, runs, n);
  fclose(f);
  int shown = 0;
  for (int i = 0; i < n; i++) shown += runs[i].sched != NULL;
  FILE* g = popen("gnuplot 2>&1", "w");
  if (!g) return remove(data), fprintf(stderr, "loom_pipe: cannot run gnuplot\n"), -1;
  fprintf(g, "set terminal %s size 1200,%d\nset output '%s'\n",
          o->svg ? "svg dynamic font 'sans,10'" : "pngcairo font 'sans,9'",
          90 + shown * (40 + 22 * o->p), out);
  fprintf(g, "set multiplot layout %d,1\nset style fill solid 0.9 border rgb 'white'\n", shown);
  fprintf(g, "set xlabel 'time'\nset ylabel 'rank'\nset yrange [%d.6:-0.6]\n", o->p - 1);
  fprintf(g, "set ytics 1\nunset key\n");
  for (int i = 0, block = 0; i < n; i++) {
    if (!runs[i].sched) continue;
    fprintf(g, "set title '%s: makespan %g, bubble %.1f%%'\nset xrange [0:%g]\n", runs[i].k->name,
            runs[i].stats.makespan, 100.0 * runs[i].stats.bubbleRatio, runs[i].stats.makespan);
    fprintf(g,
            "plot '%s' index %d using (($2+$3)/2):1:(($3-$2)/2):(0.4):4 with boxxyerror lc rgb "
            "variable, '' index %d using (($2+$3)/2):1:5 with labels font ',7' tc rgb 'white'\n",
            data, block, block);
    block++;
  }
  fprintf(g, "unset multiplot\n");
  int rc = pclose(g);
  remove(data);
  if (rc != 0) return fprintf(stderr, "loom_pipe: gnuplot failed (is gnuplot installed?)\n"), -1;
  printf("wrote %s\n", out);
  return 0;
}

int main(int argc, char** argv) {
  struct opts o;
  if (parse_args(argc, argv, &o) != 0) return 2;
  struct run runs[NKINDS];
  int n = 0, made = 0;
  for (int i = 0; i < NKINDS; i++) {
    if (!o.use[i]) continue;
    if (run_make(&o, &KINDS[i], &runs[n]) == 0) {
      print_run(&o, &runs[n]);
      made++;
    } else if (runs[n].sched) {
      loomPipeScheduleDestroy(runs[n].sched);
      runs[n].sched = NULL;
    }
    n++;
  }
  if (n > 1) print_table(&o, runs, n);
  int rc = made > 0 ? 0 : 1;
  if (made > 0 && (o.svg || o.png) && plot(&o, runs, n) != 0) rc = 1;
  for (int i = 0; i < n; i++) run_free(&o, &runs[i]);
  return rc;
}
