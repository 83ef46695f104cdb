// gloo_perf: nccl-tests' table for Gloo's collectives (Debian's libgloo-dev), so that Loom can be
// compared with the library PyTorch uses on CPUs. On one host Gloo offers its TCP transport over
// loopback only (its shared-memory path is not in this version); the header says so.
//
// One process per rank, started by perf/compare/run (or any launcher): rank and size come from
// GLOO_RANK/GLOO_SIZE, RANK/WORLD_SIZE or LOOM_RANK/LOOM_WORLD_SIZE (loomrun), the rendezvous
// from a gloo::rendezvous::FileStore in GLOO_STORE (a directory every rank can reach). The TCP
// device binds to GLOO_SOCKET_IFNAME (an interface) or GLOO_HOSTNAME (an address), else to
// 127.0.0.1; perf/compare/run --net sets GLOO_SOCKET_IFNAME=eth0 in each network namespace.
//
//   GLOO_STORE=/tmp/s GLOO_RANK=0 GLOO_SIZE=2 gloo_perf -C allreduce -a ring -b 8 -e 256M -f 4 &
//   GLOO_STORE=/tmp/s GLOO_RANK=1 GLOO_SIZE=2 gloo_perf -C allreduce -a ring -b 8 -e 256M -f 4
//
// Flags as nccl-tests (perf_common.h); -a picks the algorithm:
//   allreduce      ring, ring_chunked, halving_doubling, bcube: the classes AllreduceRing,
//                  AllreduceRingChunked, AllreduceHalvingDoubling, AllreduceBcube, which reduce in
//                  place; out of place is memcpy(send -> recv) and the class on recv.
//                  opts_ring, opts_bcube: gloo::allreduce() with AllreduceOptions (what PyTorch's
//                  ProcessGroupGloo calls), natively out of place.
//   allgather      gloo::allgather(); in place: no input buffer, own block at rank*count.
//   reducescatter  ReduceScatterHalvingDoubling, in place, result at the start of the buffer (as
//                  MPI_IN_PLACE; NCCL's is at rank*recvcount); out of place is memcpy(send ->
//                  scratch), the class on scratch, memcpy(result -> recv).
//   alltoall       gloo::alltoall(); it has no in-place form, so in place is memcpy(buf ->
//                  scratch) and gloo::alltoall(scratch -> buf).
//   broadcast      gloo::broadcast(); in place: no input buffer.
// Timing as mpi_perf: warm-up, barrier, -n calls, mean per call, max across ranks.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "perf_common.h"

namespace {

using Context = std::shared_ptr<gloo::Context>;

const char* const kAllreduceAlgos[] = {"ring",  "ring_chunked", "halving_doubling",
                                       "bcube", "opts_ring",    "opts_bcube"};

struct GlooBench {
  bench_opts o;
  Context ctx;
  int rank = 0, nranks = 1;
  std::string algo;
  float* send = nullptr;
  float* recv = nullptr;
  float* scratch = nullptr;  // the extra copy the in-place/out-of-place emulations need
};

const gloo::ReductionFunction<float>* classic_fn(red_kind op) {
  switch (op) {
    case RED_SUM:
      return gloo::ReductionFunction<float>::sum;
    case RED_PROD:
      return gloo::ReductionFunction<float>::product;
    case RED_MAX:
      return gloo::ReductionFunction<float>::max;
    case RED_MIN:
      return gloo::ReductionFunction<float>::min;
  }
  return gloo::ReductionFunction<float>::sum;
}

using OptsFn = void (*)(void*, const void*, const void*, size_t);
OptsFn opts_fn(red_kind op) {
  switch (op) {
    case RED_SUM:
      return &gloo::sum<float>;
    case RED_PROD:
      return &gloo::product<float>;
    case RED_MAX:
      return &gloo::max<float>;
    case RED_MIN:
      return &gloo::min<float>;
  }
  return &gloo::sum<float>;
}

// Max (or sum) of one double over all ranks, through Gloo itself.
double reduce_double(const Context& ctx, double v, OptsFn fn) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(&v, 1);
  opts.setReduceFunction(fn);
  opts.setTag(0x7e57);
  gloo::allreduce(opts);
  return v;
}

void barrier(const Context& ctx) {
  gloo::BarrierOptions opts(ctx);
  opts.setTag(0xba55);
  gloo::barrier(opts);
}

// One call of the collective as the program's header describes it. Algorithm objects bind their
// buffers when built, so the caller builds a call once per size and placement, outside the timing.
using Call = std::function<void()>;

Call make_allreduce(const GlooBench& b, size_t count, bool in_place) {
  float* buf = b.recv;
  float* send = b.send;
  size_t bytes = count * sizeof(float);
  if (b.algo == "opts_ring" || b.algo == "opts_bcube") {
    auto algorithm = b.algo == "opts_ring" ? gloo::AllreduceOptions::Algorithm::RING
                                           : gloo::AllreduceOptions::Algorithm::BCUBE;
    Context ctx = b.ctx;
    OptsFn fn = opts_fn(b.o.op);
    return [=]() {
      gloo::AllreduceOptions opts(ctx);
      if (!in_place) opts.setInput(send, count);
      opts.setOutput(buf, count);
      opts.setAlgorithm(algorithm);
      opts.setReduceFunction(fn);
      opts.setTag(1);
      gloo::allreduce(opts);
    };
  }
  std::vector<float*> ptrs{buf};
  int n = (int)count;
  std::shared_ptr<gloo::Algorithm> a;
  if (b.algo == "ring")
    a = std::make_shared<gloo::AllreduceRing<float>>(b.ctx, ptrs, n, classic_fn(b.o.op));
  else if (b.algo == "ring_chunked")
    a = std::make_shared<gloo::AllreduceRingChunked<float>>(b.ctx, ptrs, n, classic_fn(b.o.op));
  else if (b.algo == "halving_doubling")
    a = std::make_shared<gloo::AllreduceHalvingDoubling<float>>(b.ctx, ptrs, n, classic_fn(b.o.op));
  else
    a = std::make_shared<gloo::AllreduceBcube<float>>(b.ctx, ptrs, n, classic_fn(b.o.op));
  return [=]() {
    if (!in_place) memcpy(buf, send, bytes);
    a->run();
  };
}

Call make_reducescatter(const GlooBench& b, size_t count, bool in_place) {
  size_t per = count / (size_t)b.nranks;
  float* work = in_place ? b.recv : b.scratch;
  std::vector<int> recv_elems((size_t)b.nranks, (int)per);
  std::vector<float*> ptrs{work};
  auto a = std::make_shared<gloo::ReduceScatterHalvingDoubling<float>>(
      b.ctx, ptrs, (int)count, recv_elems, classic_fn(b.o.op));
  float *send = b.send, *recv = b.recv;
  return [=]() {
    if (!in_place) memcpy(work, send, count * sizeof(float));
    a->run();
    if (!in_place) memcpy(recv, work, per * sizeof(float));
  };
}

Call make_call(const GlooBench& b, size_t count, bool in_place) {
  Context ctx = b.ctx;
  float *send = b.send, *recv = b.recv, *scratch = b.scratch;
  size_t per = count / (size_t)b.nranks;
  int root = b.o.root;
  bool is_root = b.rank == root;
  switch (b.o.coll) {
    case COLL_ALLREDUCE:
      return make_allreduce(b, count, in_place);
    case COLL_REDUCESCATTER:
      return make_reducescatter(b, count, in_place);
    case COLL_ALLGATHER:
      return [=]() {
        gloo::AllgatherOptions opts(ctx);
        if (!in_place) opts.setInput(send, per);
        opts.setOutput(recv, count);
        opts.setTag(2);
        gloo::allgather(opts);
      };
    case COLL_ALLTOALL:
      return [=]() {
        gloo::AlltoallOptions opts(ctx);
        if (in_place) memcpy(scratch, recv, count * sizeof(float));
        opts.setInput(in_place ? scratch : send, count);
        opts.setOutput(recv, count);
        opts.setTag(3);
        gloo::alltoall(opts);
      };
    case COLL_BROADCAST:
      return [=]() {
        gloo::BroadcastOptions opts(ctx);
        if (!in_place && is_root) opts.setInput(send, count);
        opts.setOutput(recv, count);
        opts.setRoot(root);
        opts.setTag(4);
        gloo::broadcast(opts);
      };
  }
  return Call();
}

// Input where the call reads it, NaN where it writes, as in mpi_perf.
void measure(const GlooBench& b, size_t count, bool in_place, bench_result* r) {
  long wrong = -1;
  if (count == 0) {  // Gloo refuses empty buffers; nccl-tests shows these rows as no-ops
    fill_result(r, &b.o, count, b.nranks, 0.0, b.o.check ? 0 : -1);
    return;
  }
  Call call = make_call(b, count, in_place);
  if (in_place) bench_prepare_check(b.o.coll, b.o.root, b.send, b.recv, count, b.rank, b.nranks, 1);
  for (int i = 0; i < b.o.warmup; i++) call();
  barrier(b.ctx);
  double t0 = now_seconds();
  for (int i = 0; i < b.o.iters; i++) call();
  double spent = now_seconds() - t0;
  double slowest = reduce_double(b.ctx, spent / b.o.iters, &gloo::max<double>);
  int more = bench_more_iters(&b.o, slowest);
  if (more > 0) {  // --min_ms
    barrier(b.ctx);
    t0 = now_seconds();
    for (int i = 0; i < more; i++) call();
    spent += now_seconds() - t0;
    slowest = reduce_double(b.ctx, spent / (b.o.iters + more), &gloo::max<double>);
  }
  if (b.o.check) {
    bench_prepare_check(b.o.coll, b.o.root, b.send, b.recv, count, b.rank, b.nranks, in_place);
    call();
    double w = (double)check_output(b.o.coll, b.o.op, b.recv, count, b.rank, b.nranks, b.o.root);
    wrong = (long)reduce_double(b.ctx, w, &gloo::sum<double>);
  }
  fill_result(r, &b.o, count, b.nranks, slowest, wrong);
}

int env_int(const char* const names[], int n, int fallback) {
  for (int i = 0; i < n; i++) {
    const char* v = getenv(names[i]);
    if (v && *v) return atoi(v);
  }
  return fallback;
}

bool pick_algo(GlooBench* b) {
  if (b->o.coll == COLL_ALLREDUCE) {
    b->algo = b->o.algo ? b->o.algo : "ring";
    for (const char* a : kAllreduceAlgos)
      if (b->algo == a) return true;
    fprintf(stderr, "gloo_perf: unknown all-reduce algorithm '%s'\n", b->algo.c_str());
    return false;
  }
  const char* only = b->o.coll == COLL_REDUCESCATTER ? "halving_doubling" : "default";
  b->algo = b->o.algo ? b->o.algo : only;
  if (b->algo == only) return true;
  fprintf(stderr, "gloo_perf: %s has only the algorithm '%s'\n", coll_descs[b->o.coll].name, only);
  return false;
}

// Where the TCP device listens, and what the header says of it: the interface in
// GLOO_SOCKET_IFNAME (PyTorch's name for it; its first IPv4 address), else the address or name in
// GLOO_HOSTNAME, else loopback 127.0.0.1 (one host).
std::string g_where = "loopback 127.0.0.1";

Context connect(int rank, int nranks, const std::string& store_dir) {
  gloo::transport::tcp::attr attr;
  const char* ifname = getenv("GLOO_SOCKET_IFNAME");
  const char* host = getenv("GLOO_HOSTNAME");
  if (ifname && *ifname) {
    attr.iface = ifname;
    g_where = std::string("interface ") + ifname;
  } else if (host && *host) {
    attr.hostname = host;
    g_where = std::string("address ") + host;
  } else {
    attr.hostname = "127.0.0.1";
  }
  attr.ai_family = AF_INET;
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(store_dir);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, nranks);
  ctx->setTimeout(std::chrono::seconds(600));
  ctx->connectFullMesh(store, dev);
  return ctx;
}

void print_info(const GlooBench& b) {
  std::vector<int> pids((size_t)b.nranks, 0);
  pids[(size_t)b.rank] = (int)getpid();
  for (auto& p : pids) p = (int)reduce_double(b.ctx, p, &gloo::sum<double>);
  if (b.rank != 0) return;
  char library[160], how[256], host[64] = "";
  gethostname(host, sizeof(host) - 1);
  bool loopback = g_where.rfind("loopback", 0) == 0;
  snprintf(library, sizeof(library), "Gloo %d.%d.%d (Debian libgloo-dev), TCP transport over %s",
           GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH, g_where.c_str());
  snprintf(how, sizeof(how), "algorithm %s; %s", b.algo.c_str(),
           loopback ? "Gloo has no shared-memory transport: every byte goes through the "
                      "kernel's TCP loopback"
                    : "TCP between the ranks' hosts");
  print_header(&b.o, library, how, b.nranks);
  print_devices(pids.data(), b.nranks, host);
  print_rule_lines();
}

int run(GlooBench& b) {
  bench_totals totals = {0, 0, 0};
  size_t cap = b.o.max_bytes / sizeof(float) + 1;
  b.send = bench_alloc(cap);
  b.recv = bench_alloc(cap);
  bool needs_scratch = b.o.coll == COLL_ALLTOALL || b.o.coll == COLL_REDUCESCATTER;
  b.scratch = needs_scratch ? bench_alloc(cap) : nullptr;
  if (!b.send || !b.recv || (needs_scratch && !b.scratch)) {
    fprintf(stderr, "gloo_perf: rank %d: out of memory for %zu bytes\n", b.rank, b.o.max_bytes);
    return 1;
  }
  print_info(b);
  for (size_t bytes = b.o.min_bytes; bytes <= b.o.max_bytes; bytes = bench_next_size(&b.o, bytes)) {
    size_t count = coll_count(b.o.coll, bytes, b.nranks);
    bench_result oop, ip;
    measure(b, count, false, &oop);
    measure(b, count, true, &ip);
    if (b.rank == 0) print_row(&b.o, count, b.nranks, &oop, &ip, &totals);
  }
  if (b.rank == 0) print_footer(&totals);
  barrier(b.ctx);
  free(b.send);
  free(b.recv);
  free(b.scratch);
  return totals.wrong != 0;
}

}  // namespace

int main(int argc, char** argv) {
  static const char* const rank_vars[] = {"GLOO_RANK", "RANK", "LOOM_RANK"};
  static const char* const size_vars[] = {"GLOO_SIZE", "WORLD_SIZE", "LOOM_WORLD_SIZE"};
  GlooBench b;
  if (bench_parse_args(argc, argv, &b.o) != 0) {
    bench_usage(
        argv[0],
        "  -a ring|ring_chunked|halving_doubling|bcube|opts_ring|opts_bcube (all-reduce)\n"
        "  environment: GLOO_RANK, GLOO_SIZE, GLOO_STORE (a directory shared by the ranks),\n"
        "  GLOO_SOCKET_IFNAME (interface) or GLOO_HOSTNAME (address) to bind, else 127.0.0.1\n");
    return 2;
  }
  if (!pick_algo(&b)) return 2;
  b.rank = env_int(rank_vars, 3, 0);
  b.nranks = env_int(size_vars, 3, 1);
  const char* store = getenv("GLOO_STORE");
  if (!store || !*store || b.nranks < 1 || b.rank < 0 || b.rank >= b.nranks) {
    fprintf(stderr, "gloo_perf: set GLOO_STORE, GLOO_RANK and GLOO_SIZE (0 <= rank < size)\n");
    return 2;
  }
  if (b.o.root >= b.nranks) b.o.root = 0;
  try {
    b.ctx = connect(b.rank, b.nranks, store);
    return run(b);
  } catch (const std::exception& e) {
    fprintf(stderr, "gloo_perf: rank %d: %s\n", b.rank, e.what());
    return 1;
  }
}
