/* report.c - what the tools print, in the shape of nccl-tests' output so that the tools and
 * scripts that read that output read this one: the header comments, one "# Using devices"
 * line per rank (host ranks: the CPUs a rank may run on, and the CPU model), the two-row
 * column header, one row per size, and the closing lines. -J writes the same results as JSON
 * (docs/PERF.md gives the schema). Only global rank 0 prints. */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/* ---- The machine ---- */

static void cpu_model(char* out, size_t len) {
  snprintf(out, len, "unknown CPU");
  FILE* f = fopen("/proc/cpuinfo", "r");
  char line[512];
  while (f && fgets(line, sizeof(line), f)) {
    char* colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) != 0 || !colon) continue;
    colon += 1 + (colon[1] == ' ');
    colon[strcspn(colon, "\n")] = '\0';
    snprintf(out, len, "%s", colon);
    break;
  }
  if (f) fclose(f);
}

static void host_name(char* out, size_t len) {
  if (gethostname(out, len) != 0) snprintf(out, len, "unknown");
  out[len - 1] = '\0';
}

/* The CPUs this thread may run on, as ranges: "0-3,8". */
static void cpu_list(char* out, size_t len) {
  cpu_set_t set;
  size_t off = 0;
  out[0] = '\0';
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    snprintf(out, len, "?");
    return;
  }
  for (int c = 0; c < CPU_SETSIZE && off < len; c++) {
    if (!CPU_ISSET(c, &set)) continue;
    int e = c;
    while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, &set)) e++;
    int n = e > c ? snprintf(out + off, len - off, "%s%d-%d", off ? "," : "", c, e)
                  : snprintf(out + off, len - off, "%s%d", off ? "," : "", c);
    off += n > 0 ? (size_t)n : 0;
    c = e;
  }
}

/* ---- Header ---- */

void report_preamble(const struct perf_world* w) {
  const struct perf_opts* o = w->o;
  int version = 0;
  loomGetVersion(&version);
  int factor = o->step_factor > 1;
  printf("# Loom perf tools version %s loom-headers=%d loom-library=%d\n", PERF_VERSION,
         LOOM_VERSION_CODE, version);
  printf("# Collective test starting: %s\n", w->coll->tool);
  printf(
      "# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
      "iters: %d agg iters: %d validation: %d graph: 0 unalign: 0\n",
      o->nthreads, o->ngpus, o->min_bytes, o->max_bytes, factor ? o->step_factor : o->step_bytes,
      factor ? "factor" : "bytes", o->warmup_iters, o->iters, o->agg_iters, o->check);
  static const char* const blocking[] = {
      NULL, "wait and barrier after each call", "wait after each call, no barrier",
      "wait and barrier after each iteration, the barrier not timed"};
  if (o->blocking) printf("# Blocking (-z %d): %s\n", o->blocking, blocking[o->blocking]);
  if (o->min_ms)
    printf(
        "# Timed for at least %d ms a size and placement (--min_ms): -n is the fewest iterations\n",
        o->min_ms);
  printf("# Ranks: %d (%d process%s x %d thread%s x %d per thread), memory: %s, registration: %s\n",
         w->nranks, w->nprocs, w->nprocs == 1 ? "" : "es", o->nthreads, o->nthreads == 1 ? "" : "s",
         o->ngpus, o->mem->name,
         o->local_register == 2 ? "loomMemAlloc + loomCommRegister"
         : o->local_register    ? "loomCommRegister"
                                : "none");
  printf("#\n");
}

/* The "# Using devices" line of one rank. Host ranks have no device (-1): the bracket names
 * the memory and the CPUs the rank may run on, then comes the CPU model. */
static void device_line(const struct perf_rank* r, char* out) {
  char host[64], model[128], cpus[64];
  int dev = -1;
  host_name(host, sizeof(host));
  cpu_model(model, sizeof(model));
  cpu_list(cpus, sizeof(cpus));
  loomCommCuDevice(r->comm, &dev);
  snprintf(out, PERF_LINE, "#  Rank %2d Group %2d Pid %6d on %10s device %2d [host, cpus %s] %s\n",
           r->rank, 0, (int)getpid(), host, dev, cpus, model);
}

/* Every rank describes itself in one line; rank 0 prints them in rank order. */
int report_devices(struct perf_thread* t) {
  int n = t->w->nranks, nl = t->nlocal;
  char* lines = calloc((size_t)nl, PERF_LINE);
  char* all = calloc((size_t)nl * (size_t)n, PERF_LINE);
  if (!lines || !all) {
    free(lines), free(all);
    perf_fail(t, NULL, "out of memory for the device lines of %d ranks", n);
    return -1;
  }
  loomResult_t res = loomSuccess;
  if (nl > 1) loomGroupStart();
  for (int g = 0; g < nl && res == loomSuccess; g++) {
    struct perf_rank* r = &t->ranks[g];
    device_line(r, lines + (size_t)g * PERF_LINE);
    res = loomAllGather(lines + (size_t)g * PERF_LINE, all + (size_t)g * n * PERF_LINE, PERF_LINE,
                        loomUint8, r->comm, r->stream);
  }
  if (nl > 1) {
    loomResult_t end = loomGroupEnd();
    if (res == loomSuccess) res = end;
  }
  int rc = -1;
  if (res != loomSuccess)
    perf_fail(t, &t->ranks[0], "gathering the device lines failed: %s: %s", loomGetErrorString(res),
              loomGetLastError(t->ranks[0].comm));
  else if ((rc = perf_sync(t)) == 0 && t->is_main) {
    printf("# Using devices\n");
    for (int i = 0; i < n; i++) fputs(all + (size_t)i * PERF_LINE, stdout);
  }
  free(lines), free(all);
  return rc;
}

#define GROUP_WIDTH 33 /* "  time  algbw  busbw  #wrong" */

static void print_centered(const char* label) {
  int len = (int)strlen(label), left = (GROUP_WIDTH - len) / 2;
  printf("%*s%s%*s", left, "", label, GROUP_WIDTH - len - left, "");
}

void report_table_header(void) {
  printf("#\n");
  printf("# %10s  %12s  %8s  %6s  %6s", "", "", "", "", "");
  print_centered("out-of-place");
  print_centered("in-place");
  printf("\n");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count",
         "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
         "#wrong");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)",
         "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

/* ---- Rows ---- */

/* value in at most width characters: two decimals when they fit, fewer, then an exponent. */
static void fmt_width(char* out, int width, double value) {
  for (int prec = 2; prec >= 0; prec--)
    if (snprintf(out, (size_t)width + 1, "%*.*f", width, prec, value) <= width) return;
  snprintf(out, (size_t)width + 1, "%*.*e", width, width >= 7 ? 1 : 0, value);
}

void report_row_start(const struct perf_row* row) {
  printf("%12zu  %12zu  %8s  %6s  %6d", row->size, row->count, dtype_name(row->type),
         row->op < 0 ? "none" : op_name(row->op), row->root);
}

void report_cell(const struct perf_cell* c) {
  char time[8], alg[7], bus[7];
  fmt_width(time, 7, c->time_us);
  fmt_width(alg, 6, c->algbw);
  fmt_width(bus, 6, c->busbw);
  if (c->wrong < 0)
    printf("  %7s  %6s  %6s  %6s", time, alg, bus, "N/A");
  else
    printf("  %7s  %6s  %6s  %6g", time, alg, bus, (double)c->wrong);
}

void report_row_end(void) {
  printf("\n");
}

int report_add_row(struct perf_report* rep, const struct perf_row* row) {
  if (rep->nrows == rep->cap) {
    size_t cap = rep->cap ? 2 * rep->cap : 64;
    struct perf_row* rows = realloc(rep->rows, cap * sizeof(*rows));
    if (!rows) return -1;
    rep->rows = rows;
    rep->cap = cap;
  }
  rep->rows[rep->nrows++] = *row;
  for (int p = 0; p < 2; p++) {
    rep->bw_sum += row->cell[p].busbw;
    rep->bw_count++;
    if (row->cell[p].wrong > 0) rep->wrong_total += row->cell[p].wrong;
  }
  return 0;
}

static double avg_busbw(const struct perf_report* rep) {
  return rep->bw_count ? rep->bw_sum / rep->bw_count : 0.0;
}

void report_footer(const struct perf_world* w) {
  const struct perf_report* rep = &w->report;
  printf("# %-20s : %lld %s\n", "Out of bounds values", (long long)rep->wrong_total,
         rep->wrong_total ? "FAILED" : "OK");
  printf("# %-20s : %g \n", "Avg bus bandwidth", avg_busbw(rep));
  printf("#\n");
  printf("# Collective test concluded: %s\n", w->coll->tool);
}

/* ---- JSON ---- */

static void json_str(FILE* f, const char* s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

/* A number, or null for what JSON cannot hold (inf, NaN). */
static void json_num(FILE* f, const char* fmt, double v) {
  if (isfinite(v))
    fprintf(f, fmt, v);
  else
    fputs("null", f);
}

static void json_header(FILE* f, const struct perf_world* w) {
  const struct perf_opts* o = w->o;
  char host[64], model[128], cmd[4096] = "";
  int version = 0;
  host_name(host, sizeof(host));
  cpu_model(model, sizeof(model));
  loomGetVersion(&version);
  for (int i = 0, off = 0; i < o->argc && off < (int)sizeof(cmd); i++)
    off += snprintf(cmd + off, sizeof(cmd) - (size_t)off, "%s%s", i ? " " : "", o->argv[i]);
  char ver[32];
  snprintf(ver, sizeof(ver), "%d.%d.%d", version / 10000, version / 100 % 100, version % 100);
  double mem_gib = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) / 1073741824.0;
  fprintf(f, "{\"tool\":");
  json_str(f, w->coll->tool);
  fprintf(f, ",\"library\":\"loom\",\"version\":");
  json_str(f, ver);
  fprintf(f, ",\"command\":");
  json_str(f, cmd);
  fprintf(f, ",\"machine\":{\"hostname\":");
  json_str(f, host);
  fprintf(f, ",\"cpus\":%ld,\"cpu_model\":", sysconf(_SC_NPROCESSORS_ONLN));
  json_str(f, model);
  fprintf(f, ",\"mem_gib\":%.1f},\"nranks\":%d,\"nthreads\":%d,\"datatype\":", mem_gib, w->nranks,
          o->nthreads);
  json_str(f, o->type_arg);
  fprintf(f, ",\"op\":");
  json_str(f, o->op_arg);
  fprintf(f, ",\"root\":%d,\"mem\":", o->root);
  json_str(f, o->mem->name);
  fprintf(f, ",\"registered\":%s,\n\"results\":[", o->local_register ? "true" : "false");
}

static void json_cell(FILE* f, const char* key, const struct perf_cell* c) {
  fprintf(f, "\"%s\":{\"time_us\":", key);
  json_num(f, "%.3f", c->time_us);
  fprintf(f, ",\"algbw\":");
  json_num(f, "%.6g", c->algbw);
  fprintf(f, ",\"busbw\":");
  json_num(f, "%.6g", c->busbw);
  fprintf(f, ",\"iters\":%ld", c->iters);
  if (c->wrong < 0)
    fprintf(f, ",\"wrong\":null}");
  else
    fprintf(f, ",\"wrong\":%lld}", (long long)c->wrong);
}

int report_json(const struct perf_world* w) {
  const struct perf_report* rep = &w->report;
  FILE* f = w->json;
  json_header(f, w);
  for (size_t i = 0; i < rep->nrows; i++) {
    const struct perf_row* r = &rep->rows[i];
    fprintf(f, "%s\n{\"size\":%zu,\"count\":%zu,\"type\":\"%s\",\"redop\":\"%s\",\"root\":%d,",
            i ? "," : "", r->size, r->count, dtype_name(r->type),
            r->op < 0 ? "none" : op_name(r->op), r->root);
    json_cell(f, "out_of_place", &r->cell[0]);
    fputc(',', f);
    json_cell(f, "in_place", &r->cell[1]);
    fputc('}', f);
  }
  fprintf(f, "],\n\"out_of_bounds\":%lld,\"avg_busbw\":", (long long)rep->wrong_total);
  json_num(f, "%.6g", avg_busbw(rep));
  fprintf(f, "}\n");
  if (fflush(f) != 0 || ferror(f)) {
    fprintf(stderr, "%s: -J %s: writing the JSON file failed: %m\n", w->coll->tool,
            w->o->json_path);
    return -1;
  }
  printf("# Wrote the results as JSON to %s\n", w->o->json_path);
  return 0;
}
