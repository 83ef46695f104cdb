/* loom_info - what this build of Loom is and what it can use here.
 *   loom_info          version, features compiled in, transports usable here
 *   loom_info --env    every LOOM_* variable: value, default, help
 *   loom_info --topo   the probed topology, in LOOM_TOPO_FILE's format */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "collectives/coll.h"
#include "core/params.h"
#include "kernels/cpu/cpu_kernels.h"
#include "loom.h"
#include "topo/topo.h"
#include "topo/tune.h"

static const char* type_name(enum param_type t) {
  switch (t) {
    case PARAM_STR:
      return "string";
    case PARAM_INT:
      return "int";
    case PARAM_SIZE:
      return "size";
    case PARAM_BOOL:
      return "bool";
  }
  return "?";
}

/* The table, with each bad value marked; then one line per bad setting
 * (what init would say). Returns 1 when a setting is bad. */
static int print_env(void) {
  int n, bad = 0;
  const struct param_desc* rows = params_table(&n);
  printf("%-22s %-7s %-10s %-10s %s\n", "variable", "type", "default", "value", "help");
  for (int i = 0; i < n; i++) {
    char value[128], def[64];
    const char* why = params_bad(i);
    const char* env = getenv(rows[i].env);
    if (why)
      snprintf(value, sizeof(value), "%s  <-- BAD: %s%s", env ? env : "", why,
               rows[i].flags & P_HINT ? " (ignored: the default is used)" : "");
    else
      params_value_str(i, value, sizeof(value));
    size_t len = strlen(rows[i].def);
    if (len >= 2 && rows[i].def[0] == '"')
      snprintf(def, sizeof(def), "%.*s", (int)(len - 2), rows[i].def + 1);
    else
      snprintf(def, sizeof(def), "%s", rows[i].def);
    printf("%-22s %-7s %-10s %-10s %s%s\n", rows[i].env, type_name(rows[i].type),
           def[0] ? def : "(empty)", value[0] ? value : "(empty)", rows[i].help,
           rows[i].flags & P_AGREE ? " [same on every rank]" : "");
  }
  if (coll_settings_check() != loomSuccess) {
    printf("\n%s\n", loomGetLastError(NULL));
    bad = 1;
  }
  return bad;
}

static void size_text(size_t b, char* buf, size_t len) {
  if (b >= (1u << 20))
    snprintf(buf, len, "%zu MiB", b >> 20);
  else if (b >= 1024)
    snprintf(buf, len, "%zu KiB", b >> 10);
  else
    snprintf(buf, len, "%zu B", b);
}

/* Per collective, rank count and size range: what the tuner would pick and
 * what it predicts. */
static void print_tuning(void) {
  const struct tune_consts* k = tune_consts_get();
  size_t slice = params_get()->slice_size;
  printf(
      "tuning constants: step %.2f us, copy %.2f GB/s, reduce %.2f GB/s, %d cpus, "
      "cross-memory attach %.2f GB/s\n(direct plans, oneshot/twoshot/read, are costed as between "
      "processes: they need every rank on this host)\n",
      k->step_us, k->copy_gbps, k->reduce_gbps, k->ncpus, k->cma_gbps);
  printf("%-14s %5s  %-22s %-9s %s\n", "collective", "ranks", "sizes", "algorithm",
         "predicted time");
  const int ranks[] = {2, 4, 8, 16};
  for (int c = 0; c < TUNE_COLL_COUNT; c++) {
    unsigned avail = algo_available((enum coll_kind)c);
    if (!avail) continue;
    for (size_t ri = 0; ri < sizeof(ranks) / sizeof(ranks[0]); ri++) {
      int n = ranks[ri];
      size_t lo = 8;
      enum tune_algo cur = tune_pick_model(k, (enum tune_coll)c, n, lo, slice, avail);
      double t_lo = tune_predict_us(k, (enum tune_coll)c, cur, n, lo, slice);
      for (size_t b = 8;; b *= 2) {
        int last = b >= (256u << 20);
        size_t nb = b * 2;
        enum tune_algo next =
            last ? TUNE_ALGO_COUNT : tune_pick_model(k, (enum tune_coll)c, n, nb, slice, avail);
        if (next != cur) {
          char a[32], z[32], range[80];
          size_text(lo, a, sizeof(a));
          size_text(b, z, sizeof(z));
          snprintf(range, sizeof(range), "%s - %s", a, z);
          printf("%-14s %5d  %-22s %-9s %.1f us .. %.1f us\n", tune_coll_name((enum tune_coll)c), n,
                 range, tune_algo_name(cur), t_lo,
                 tune_predict_us(k, (enum tune_coll)c, cur, n, b, slice));
          if (last) break;
          lo = nb;
          cur = next;
          t_lo = tune_predict_us(k, (enum tune_coll)c, cur, n, lo, slice);
        }
      }
    }
  }
}

/* Shared memory works here if a segment can be made and mapped. */
static int shm_usable(void) {
  char name[64];
  snprintf(name, sizeof(name), "/loom-info-%d", (int)getpid());
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return 0;
  shm_unlink(name);
  int ok = ftruncate(fd, 4096) == 0;
  void* p = ok ? mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  if (p == MAP_FAILED) return 0;
  munmap(p, 4096);
  return 1;
}

static void print_info(void) {
  int v = 0;
  loomGetVersion(&v);
  printf("Loom %d.%d.%d (version code %d)\n", v / 10000, (v / 100) % 100, v % 100, v);
  printf("features compiled in: %s\n", LOOM_FEATURES);
  printf("cpu reduction kernels: %s (supported:%s%s scalar)\n", cpu_isa_name(cpu_isa_active()),
         cpu_isa_supported(CPU_ISA_AVX512) ? " avx512" : "",
         cpu_isa_supported(CPU_ISA_AVX2) ? " avx2" : "");
  printf("transports usable here:\n");
  printf("  local   yes (ranks that are threads of one process: direct copy)\n");
  printf("  shm     %s (processes on one host: POSIX shared-memory FIFOs)\n",
         shm_usable() ? "yes" : "no: /dev/shm is not usable");
  printf("  socket  yes (ranks on other hosts, or all with LOOM_TRANSPORTS=socket: TCP)\n");
  printf(
      "  direct  %s (ranks of one host read each other's buffers: loomMemAlloc memory is\n"
      "          mapped, other memory read by process_vm_readv, probed per communicator)\n",
      params_get()->direct ? "allowed" : "off (LOOM_DIRECT=0)");
  printf("  p2p, verbs, ucx: not built yet\n");
  printf("algorithms:");
  for (int c = 0; c < TUNE_COLL_COUNT; c++) {
    unsigned avail = algo_available((enum coll_kind)c);
    if (!avail) continue;
    printf(" %s(", tune_coll_name((enum tune_coll)c));
    const char* sep = "";
    for (int a = 0; a < TUNE_ALGO_COUNT; a++)
      if (avail & TUNE_ALGO_BIT(a)) {
        printf("%s%s", sep, tune_algo_name((enum tune_algo)a));
        sep = ",";
      }
    printf(")");
  }
  printf("\n");
}

/* The probed facts on stdout, ready to edit into a LOOM_TOPO_FILE; a file
 * already set is checked, its error on stderr (exit status 1). */
static int print_topo(void) {
  struct topo_facts probed;
  topo_probe(&probed);
  topo_print(&probed, stdout);
  if (topo_check() == loomSuccess) return 0;
  fprintf(stderr, "loom_info: %s\n", loomGetLastError(NULL));
  return 1;
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--env") == 0) return print_env();
    if (strcmp(argv[i], "--topo") == 0) return print_topo();
    if (strcmp(argv[i], "--tuning") == 0) {
      print_tuning();
      return 0;
    }
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      printf(
          "usage: loom_info [--env | --topo | --tuning]\n"
          "  --env     print every LOOM_* variable with its value, default and help\n"
          "  --topo    print the topology probed here, in LOOM_TOPO_FILE's format\n"
          "            (docs/topology.md): save it, edit it, give it to a rank\n"
          "  --tuning  print, per collective, rank count and size range, the algorithm the\n"
          "            tuner picks and the time it predicts\n");
      return 0;
    }
    fprintf(stderr, "loom_info: unknown option %s (try --help)\n", argv[i]);
    return 2;
  }
  print_info();
  return 0;
}
