// init_gloo: Gloo's time to a working context (perf/compare/init/run), as PyTorch's Gloo backend
// starts: the TCP device on 127.0.0.1, a FileStore rendezvous in GLOO_STORE, connectFullMesh,
// then one 1-float all-reduce; prints the slowest rank's time from the start, in milliseconds.
// Rank and size from GLOO_RANK/GLOO_SIZE.
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

static double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

template <class T>
static void allreduce(const std::shared_ptr<gloo::Context>& ctx, T* v,
                      void (*fn)(void*, const void*, const void*, size_t)) {
  gloo::AllreduceOptions opts(ctx);
  opts.setInput(v, 1);
  opts.setOutput(v, 1);
  opts.setReduceFunction(fn);
  gloo::allreduce(opts);
}

int main() {
  double t0 = now_ms();
  const char* r = getenv("GLOO_RANK");
  const char* n = getenv("GLOO_SIZE");
  const char* dir = getenv("GLOO_STORE");
  if (!r || !n || !dir) {
    fprintf(stderr, "init_gloo: set GLOO_RANK, GLOO_SIZE and GLOO_STORE\n");
    return 2;
  }
  int rank = atoi(r), size = atoi(n);
  gloo::transport::tcp::attr attr;
  const char* host = getenv("GLOO_HOST"); /* this rank's address (perf/compare/init/net) */
  attr.hostname = host && *host ? host : "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(dir);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->setTimeout(std::chrono::seconds(600));
  ctx->connectFullMesh(store, dev);
  float x = 1;
  allreduce(ctx, &x,
            [](void* c, const void* a, const void* b, size_t k) { gloo::sum<float>(c, a, b, k); });
  double ms = now_ms() - t0;
  allreduce(ctx, &ms,
            [](void* c, const void* a, const void* b, size_t k) { gloo::max<double>(c, a, b, k); });
  if (rank == 0) printf("init_ms %.3f\n", ms);
  return 0;
}
