// test_collectives_engine.cc - see test_collectives.h.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <utility>

#include "test_collectives.h"
#include "values.h"

namespace colltest {

// ---- Names and the shape of the matrix ------------------------------------------

const char* coll_name(Coll c) {
  static const char* names[kNumColls] = {"allreduce", "broadcast",     "reduce",
                                         "allgather", "reducescatter", "alltoall",
                                         "alltoallv", "gather",        "scatter"};
  return names[(int)c];
}

bool is_reducing(Coll c) {
  return c == Coll::AllReduce || c == Coll::Reduce || c == Coll::ReduceScatter;
}

bool is_rooted(Coll c) {
  return c == Coll::Broadcast || c == Coll::Reduce || c == Coll::Gather || c == Coll::Scatter;
}

std::vector<std::string> algos_of(Coll c) {
  switch (c) {
    case Coll::AllReduce:
      return {"ring", "tree", "rhd", "doubling", "oneshot", "twoshot", "lines"};
    case Coll::Broadcast:
      return {"ring", "tree", "read", "lines"};
    case Coll::Reduce:
      return {"ring", "tree", "lines"};
    case Coll::AllGather:
    case Coll::ReduceScatter:
      return {"ring", "rhd", "read", "lines"};
    case Coll::AlltoAll:
      return {"pairwise", "bruck", "read", "lines"};
    case Coll::AlltoAllv:
      return {"pairwise"};
    case Coll::Gather:
    case Coll::Scatter:
      return {"direct"};
  }
  return {};
}

const char* place_name(Place p) {
  switch (p) {
    case Place::Out:
      return "out-of-place";
    case Place::In:
      return "in-place";
    case Place::OutNull:
      return "out-of-place, root-only buffers NULL on non-roots";
    case Place::Mixed:
      return "in-place on odd ranks, out-of-place on even ranks";
  }
  return "?";
}

std::vector<Place> places_of(Coll c) {
  if (c == Coll::AlltoAllv) return {Place::Out};
  if (is_rooted(c)) return {Place::Out, Place::In, Place::OutNull, Place::Mixed};
  return {Place::Out, Place::In, Place::Mixed};
}

const char* op_label(int op) {
  return op == kPreMul ? "premulsum(2)" : shim::op_name((loomRedOp_t)op);
}

size_t capped_count(Coll c, int nranks, loomDataType_t t, size_t count) {
  bool blocks = c == Coll::AllGather || c == Coll::AlltoAll || c == Coll::AlltoAllv ||
                c == Coll::Gather || c == Coll::Scatter;
  size_t per = (size_t)nranks * shim::dtype_size(t);
  if (!blocks || count * per <= kMaxBufferBytes) return count;
  size_t k = kMaxBufferBytes / per;
  return k % 2 ? k - 2 : k - 3;
}

std::vector<int> roots_for(int nranks) {
  std::vector<int> v;
  if (nranks <= 5) {
    for (int r = 0; r < nranks; r++) v.push_back(r);
  } else {
    v = {0, nranks / 2, nranks - 1};
  }
  return v;
}

size_t alltoallv_count(int variant, int n, size_t count, int s, int d) {
  if (count == 0) return 0;
  switch (variant) {
    case 0: {
      size_t w = (size_t)(s * 5 + d * 3 + 1) % 4;
      return w == 0 ? 0 : count * w / 3 + (size_t)(s + d) % 3;
    }
    case 1:
      if (s == 0 || d == n - 1) return 0;
      return count * (size_t)((s + d) % 3 + 1) / 3 + (size_t)(s * d) % 2;
    default:
      if (s == (d + 1) % n) return count;
      return s == d ? 0 : 1 + (size_t)(s + 2 * d) % 3;
  }
}

harness::Opts opts_for(const std::string& algo, int timeout_s) {
  harness::Opts o;
  if (!algo.empty()) o.env.push_back({"LOOM_ALGO", algo});
  o.timeout_s = timeout_s;
  return o;
}

// ---- Contents -----------------------------------------------------------------------

namespace {

constexpr size_t kTile = 1009;  // prime: no algorithm's piece size is a multiple
constexpr size_t kGuard = 64;   // bytes checked before and past every buffer
constexpr unsigned char kGuardByte = 0xA5;
constexpr int kMaxReported = 6;

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The pattern index of tile element k (reducing collectives).
size_t red_index(size_t k) {
  return (size_t)(mix64(k) % 1000003u);
}

// The tag of a data block that src sends to dst (dst -1: to everyone).
int block_tag(int src, int dst) {
  return 1 + src * 300 + (dst + 1);
}
// The tag of the filler of a buffer that is not an input (buffer b, rank r).
int filler_tag(int b, int r) {
  return 1000000 + b * 1000 + r;
}

enum class Kind {
  Bytes,   // pseudo-random bytes of tag arg
  RedIn,   // rank arg's reduction input
  RedOut,  // the reduction's result
  Any      // not checked
};

// A run of elements [off, off + len) of a buffer whose element i holds tile
// element (g0 + i) % kTile of its kind.
struct Block {
  size_t off, len;
  Kind kind;
  int arg;
  size_t g0;
};

struct Buf {
  std::string name;
  size_t elems = 0;
  std::shared_ptr<unsigned char> raw;  // guard, data, guard
  unsigned char* mem = nullptr;        // the data: kGuard + 0, 1 or 2 elements into raw
  std::vector<Block> pre;              // what the test writes before the call
  std::vector<Block> post;             // what the call must leave (elsewhere: as pre)
};

// The test's buffers: plain new[] by default; with LOOM_TEST_BUFFERS=memalloc
// from loomMemAlloc, with =registered new[] registered with loomCommRegister
// for their lifetime (which ends before the communicator's).
std::shared_ptr<unsigned char> buffer_alloc(size_t bytes, loomComm_t comm) {
  const char* env = getenv("LOOM_TEST_BUFFERS");
  std::string mode = env ? env : "";
  if (mode == "memalloc") {
    void* p = nullptr;
    EXPECT_EQ(loomMemAlloc(&p, bytes), loomSuccess) << loomGetLastError(nullptr);
    return {static_cast<unsigned char*>(p),
            [](unsigned char* q) { EXPECT_EQ(loomMemFree(q), loomSuccess); }};
  }
  unsigned char* p = new unsigned char[bytes];
  if (mode == "registered") {
    void* h = nullptr;
    EXPECT_EQ(loomCommRegister(comm, p, bytes, &h), loomSuccess) << loomGetLastError(comm);
    return {p, [comm, h](unsigned char* q) {
              EXPECT_EQ(loomCommDeregister(comm, h), loomSuccess);
              delete[] q;
            }};
  }
  return {p, [](unsigned char* q) { delete[] q; }};
}

std::string hex(const unsigned char* p, size_t n) {
  std::string s;
  char b[4];
  for (size_t i = 0; i < n; i++) {
    snprintf(b, sizeof(b), "%02x", p[i]);
    s += b;
  }
  return s;
}

// Splits layers of blocks (later layers win) into disjoint runs covering
// [0, elems); uncovered runs get the filler.
std::vector<Block> flatten(size_t elems, int filler,
                           const std::vector<const std::vector<Block>*>& layers) {
  std::vector<size_t> cuts = {0, elems};
  for (const auto* l : layers)
    for (const Block& b : *l) {
      cuts.push_back(b.off);
      cuts.push_back(b.off + b.len);
    }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<Block> out;
  for (size_t i = 0; i + 1 < cuts.size(); i++) {
    size_t a = cuts[i], e = cuts[i + 1];
    if (a >= elems) break;
    Block run{a, e - a, Kind::Bytes, filler, a};
    for (const auto* l : layers)
      for (const Block& b : *l)
        if (b.off <= a && a < b.off + b.len)
          run = Block{a, e - a, b.kind, b.arg, b.g0 + (a - b.off)};
    out.push_back(run);
  }
  return out;
}

}  // namespace

// ---- One prepared call ---------------------------------------------------------------

class Prepared {
 public:
  Call call;
  int n = 1, me = 0;
  size_t es = 1;
  loomRedOp_t op_user = loomSum, op_ref = loomSum;
  double scale = 1;
  std::vector<Buf> bufs;
  // Where the call's pointers point: buffer index and element offset, or -1: NULL.
  int send_buf = -1, recv_buf = -1;
  size_t send_off = 0, recv_off = 0;
  std::vector<size_t> sendcounts, sdispls, recvcounts, rdispls;

  const unsigned char* tile(Kind k, int arg);
  void write(Buf& b);
  // Empty when right, else what is wrong.
  std::string check(const Buf& b);
  void* ptr(int buf, size_t off) { return buf < 0 ? nullptr : bufs[(size_t)buf].mem + off * es; }

 private:
  std::map<std::pair<int, int>, std::vector<unsigned char>> tiles_;
};

const unsigned char* Prepared::tile(Kind k, int arg) {
  auto key = std::make_pair((int)k, arg);
  auto it = tiles_.find(key);
  if (it != tiles_.end()) return it->second.data();
  std::vector<unsigned char> t(kTile * es);
  loomDataType_t type = call.type;
  if (k == Kind::Bytes) {
    for (size_t i = 0; i < t.size(); i++)
      t[i] = (unsigned char)(mix64(((uint64_t)arg << 32) ^ i) >> 56);
  } else {
    // Encode each of the pattern's few values once (narrow floats are
    // encoded by search), then lay them out.
    values::Pattern pat = values::pattern(type, op_ref);
    size_t per = (size_t)pat.period;
    std::vector<unsigned char> enc(per * es);
    for (size_t j = 0; j < per; j++) {
      double v = k == Kind::RedIn ? values::input(pat, arg, j)
                                  : values::expected(type, op_ref, pat, n, j, scale);
      values::store(type, enc.data(), j, v);
    }
    for (size_t i = 0; i < kTile; i++) memcpy(&t[i * es], &enc[(red_index(i) % per) * es], es);
  }
  return tiles_.emplace(key, std::move(t)).first->second.data();
}

// Fills b as its pre layout says (the rest with its filler), then the guard.
void Prepared::write(Buf& b) {
  int filler = filler_tag((int)(&b - bufs.data()), me);
  for (const Block& r : flatten(b.elems, filler, {&b.pre})) {
    const unsigned char* t = tile(r.kind, r.arg);
    unsigned char* dst = b.mem + r.off * es;
    for (size_t i = 0; i < r.len;) {
      size_t k = (r.g0 + i) % kTile, m = std::min(kTile - k, r.len - i);
      memcpy(dst + i * es, t + k * es, m * es);
      i += m;
    }
  }
  memset(b.mem - kGuard, kGuardByte, kGuard);
  memset(b.mem + b.elems * es, kGuardByte, kGuard);
}

std::string Prepared::check(const Buf& b) {
  int filler = filler_tag((int)(&b - bufs.data()), me);
  std::ostringstream why;
  for (const Block& r : flatten(b.elems, filler, {&b.pre, &b.post})) {
    if (r.kind == Kind::Any) continue;
    const unsigned char* t = tile(r.kind, r.arg);
    const unsigned char* got = b.mem + r.off * es;
    size_t wrong = 0, first = 0;
    for (size_t i = 0; i < r.len;) {
      size_t k = (r.g0 + i) % kTile, m = std::min(kTile - k, r.len - i);
      if (memcmp(got + i * es, t + k * es, m * es) != 0)
        for (size_t j = 0; j < m; j++)
          if (memcmp(got + (i + j) * es, t + (k + j) * es, es) != 0 && !wrong++) first = i + j;
      i += m;
    }
    if (!wrong) continue;
    size_t k = (r.g0 + first) % kTile;
    const char* what = r.kind == Kind::RedOut  ? "the result"
                       : r.kind == Kind::RedIn ? "an input"
                       : r.arg >= 1000000      ? "bytes the call must not touch"
                                               : "a data block";
    why << b.name << ": " << wrong << " wrong of " << r.len << " elements at [" << r.off << ", "
        << r.off + r.len << ") (" << what << "); the first at element " << r.off + first << ": got "
        << hex(got + first * es, es) << ", want " << hex(t + k * es, es) << ". ";
  }
  const unsigned char* g = b.mem + b.elems * es;
  for (size_t i = 0; i < kGuard; i++)
    if (g[i] != kGuardByte) {
      why << b.name << ": written past its end (" << b.elems << " elements), at byte " << i
          << " beyond it. ";
      break;
    }
  for (size_t i = 1; i <= kGuard; i++)
    if (b.mem[-(ptrdiff_t)i] != kGuardByte) {
      why << b.name << ": written before its start, " << i << " bytes before it. ";
      break;
    }
  return why.str();
}

void PreparedDeleter::operator()(Prepared* p) const {
  delete p;
}

// ---- Runner -----------------------------------------------------------------------

Runner::Runner(const harness::Ctx& ctx, std::string algo) : ctx_(ctx), algo_(std::move(algo)) {}

Runner::~Runner() {
  // After a failed call the communicator may be in error: destroy quietly.
  for (int i = 0; i < kNumTypes; i++)
    if (have_premul_[i]) {
      loomResult_t res = loomRedOpDestroy(premul_[i], ctx_.comm);
      if (ok_) {
        EXPECT_EQ(res, loomSuccess) << "loomRedOpDestroy: " << loomGetLastError(ctx_.comm);
      }
    }
  if (failed_calls_ > kMaxReported)
    ADD_FAILURE() << "rank " << ctx_.rank << ": " << failed_calls_ - kMaxReported
                  << " more failing calls not shown";
}

void Runner::report(const std::string& what) {
  if (++failed_calls_ <= kMaxReported) ADD_FAILURE() << what;
}

loomRedOp_t Runner::user_op(loomDataType_t t, int op) {
  if (op != kPreMul) return (loomRedOp_t)op;
  if (!have_premul_[t]) {
    unsigned char scalar[8] = {};
    values::store(t, scalar, 0, 2.0);
    EXPECT_LOOM_OK(
        loomRedOpCreatePreMulSum(&premul_[t], scalar, t, loomScalarHostImmediate, ctx_.comm));
    have_premul_[t] = true;
  }
  return premul_[t];
}

std::string Runner::describe(const Call& k) const {
  std::ostringstream s;
  s << coll_name(k.coll) << " (" << algo_ << "), " << harness::mode_name(ctx_.mode) << " ranks "
    << ctx_.nranks << " (this is rank " << ctx_.rank << ")";
  if (is_rooted(k.coll)) s << ", root " << k.root;
  s << ", " << shim::dtype_name(k.type);
  if (is_reducing(k.coll)) s << ", " << op_label(k.op);
  s << ", count " << k.count;
  if (k.coll == Coll::AlltoAllv) s << " (matrix shape " << k.variant << ")";
  s << ", " << place_name(k.place);
  return s.str();
}

PreparedPtr Runner::prepare(const Call& k) {
  PreparedPtr p(new Prepared);
  Prepared& P = *p;
  P.call = k;
  P.n = ctx_.nranks;
  P.me = ctx_.rank;
  P.es = shim::dtype_size(k.type);
  if (is_reducing(k.coll)) {
    P.op_user = user_op(k.type, k.op);
    P.op_ref = k.op == kPreMul ? loomSum : (loomRedOp_t)k.op;
    P.scale = k.op == kPreMul ? 2.0 : 1.0;
  }
  const int n = P.n, me = P.me;
  const size_t c = k.count, nc = (size_t)n * c;
  // This rank's own placement.
  const Place place = k.place != Place::Mixed ? k.place : me % 2 ? Place::In : Place::Out;
  const bool root = me == k.root, in = place == Place::In, null = place == Place::OutNull;
  auto add = [&](const char* name, size_t elems) {
    Buf b;
    b.name = name;
    b.elems = elems;
    // Buffers start 0, 1 or 2 elements past an allocation's (16-byte)
    // alignment, so kernels meet every alignment an element allows.
    size_t skew = (size_t)(me + (int)P.bufs.size() + (int)k.count) % 3 * P.es;
    b.raw = buffer_alloc(kGuard + skew + elems * P.es + kGuard, ctx_.comm);
    b.mem = b.raw.get() + kGuard + skew;
    P.bufs.push_back(std::move(b));
    return (int)P.bufs.size() - 1;
  };
  auto pre = [&](int b, Block blk) { P.bufs[(size_t)b].pre.push_back(blk); };
  auto post = [&](int b, Block blk) { P.bufs[(size_t)b].post.push_back(blk); };
  // n blocks of c elements, block q tagged tag_of(q).
  auto blocks = [&](int b, bool is_post, const std::function<int(int)>& tag_of) {
    for (int q = 0; q < n; q++) {
      Block blk{(size_t)q * c, c, Kind::Bytes, tag_of(q), 0};
      is_post ? post(b, blk) : pre(b, blk);
    }
  };
  auto own = [](int q) { return block_tag(q, -1); };
  if (k.coll == Coll::AlltoAllv) {
    for (int q = 0; q < n; q++) {
      P.sendcounts.push_back(alltoallv_count(k.variant, n, c, me, q));
      P.recvcounts.push_back(alltoallv_count(k.variant, n, c, q, me));
    }
    P.sdispls.assign((size_t)n, 0);
    P.rdispls.assign((size_t)n, 0);
  }
  int S = -1, R = -1;
  if (c == 0 && null) {
    // Every buffer NULL: a count of zero needs none.
  } else if (k.coll == Coll::AllReduce) {
    S = add("sendbuff", c);
    pre(S, {0, c, Kind::RedIn, me, 0});
    R = in ? S : add("recvbuff", c);
    post(R, {0, c, Kind::RedOut, 0, 0});
  } else if (k.coll == Coll::Reduce) {
    S = add("sendbuff", c);
    pre(S, {0, c, Kind::RedIn, me, 0});
    if (in)
      R = S;
    else if (root || !null)
      R = add(root ? "recvbuff" : "recvbuff (non-root, not to be touched)", c);
    if (root) post(R, {0, c, Kind::RedOut, 0, 0});
  } else if (k.coll == Coll::Broadcast) {
    if (in) {
      R = S = add("recvbuff (== sendbuff)", c);
    } else {
      if (root || !null) S = add(root ? "sendbuff" : "sendbuff (non-root, not to be touched)", c);
      R = add("recvbuff", c);
    }
    if (root) pre(S, {0, c, Kind::Bytes, block_tag(me, -1), 0});
    post(R, {0, c, Kind::Bytes, block_tag(k.root, -1), 0});
  } else if (k.coll == Coll::AllGather) {
    R = add("recvbuff", nc);
    if (in) {
      pre(R, {(size_t)me * c, c, Kind::Bytes, block_tag(me, -1), 0});
      S = R;
      P.send_off = (size_t)me * c;
    } else {
      S = add("sendbuff", c);
      pre(S, {0, c, Kind::Bytes, block_tag(me, -1), 0});
    }
    blocks(R, true, own);
  } else if (k.coll == Coll::ReduceScatter) {
    S = add("sendbuff", nc);
    pre(S, {0, nc, Kind::RedIn, me, 0});
    if (in) {
      R = S;
      P.recv_off = (size_t)me * c;
      post(S, {(size_t)me * c, c, Kind::RedOut, 0, (size_t)me * c});
    } else {
      R = add("recvbuff", c);
      post(R, {0, c, Kind::RedOut, 0, (size_t)me * c});
    }
  } else if (k.coll == Coll::AlltoAll) {
    S = add("sendbuff", nc);
    blocks(S, false, [me](int q) { return block_tag(me, q); });
    R = in ? S : add("recvbuff", nc);
    blocks(R, true, [me](int q) { return block_tag(q, me); });
  } else if (k.coll == Coll::Gather) {
    if (root && in) {
      R = S = add("recvbuff", nc);
      P.send_off = (size_t)me * c;
      pre(R, {(size_t)me * c, c, Kind::Bytes, block_tag(me, -1), 0});
    } else {
      S = add("sendbuff", c);
      pre(S, {0, c, Kind::Bytes, block_tag(me, -1), 0});
      if (root || place == Place::Out)
        R = add(root ? "recvbuff" : "recvbuff (non-root, not to be touched)", nc);
    }
    if (root) blocks(R, true, own);
  } else if (k.coll == Coll::Scatter) {
    if (root || place == Place::Out)
      S = add(root ? "sendbuff" : "sendbuff (non-root, not to be touched)", nc);
    if (root) blocks(S, false, [me](int q) { return block_tag(me, q); });
    if (root && in) {
      R = S;
      P.recv_off = (size_t)me * c;
    } else {
      R = add("recvbuff", c);
      post(R, {0, c, Kind::Bytes, block_tag(k.root, me), 0});
    }
  } else {  // all-to-all-v: blocks out of order, with gaps that must stay untouched
    size_t off = 3;
    for (int q = n - 1; q >= 0; q--, off += 3) {
      P.sdispls[(size_t)q] = off;
      off += P.sendcounts[(size_t)q];
    }
    S = add("sendbuff", off);
    off = 2;
    for (int q = 0; q < n; q++, off += 5) {
      P.rdispls[(size_t)q] = off;
      off += P.recvcounts[(size_t)q];
    }
    R = add("recvbuff", off);
    for (int q = 0; q < n; q++) {
      pre(S, {P.sdispls[(size_t)q], P.sendcounts[(size_t)q], Kind::Bytes, block_tag(me, q), 0});
      post(R, {P.rdispls[(size_t)q], P.recvcounts[(size_t)q], Kind::Bytes, block_tag(q, me), 0});
    }
  }
  P.send_buf = S;
  P.recv_buf = R;
  for (Buf& b : P.bufs) P.write(b);
  return p;
}

loomResult_t Runner::issue(Prepared& P) {
  const Call& k = P.call;
  const void* s = P.ptr(P.send_buf, P.send_off);
  void* r = P.ptr(P.recv_buf, P.recv_off);
  loomComm_t cm = ctx_.comm;
  loomStream_t st = stream_;
  switch (k.coll) {
    case Coll::AllReduce:
      return loomAllReduce(s, r, k.count, k.type, P.op_user, cm, st);
    case Coll::Broadcast:
      return loomBroadcast(s, r, k.count, k.type, k.root, cm, st);
    case Coll::Reduce:
      return loomReduce(s, r, k.count, k.type, P.op_user, k.root, cm, st);
    case Coll::AllGather:
      return loomAllGather(s, r, k.count, k.type, cm, st);
    case Coll::ReduceScatter:
      return loomReduceScatter(s, r, k.count, k.type, P.op_user, cm, st);
    case Coll::AlltoAll:
      return loomAlltoAll(s, r, k.count, k.type, cm, st);
    case Coll::AlltoAllv:
      return loomAlltoAllv(s, P.sendcounts.data(), P.sdispls.data(), r, P.recvcounts.data(),
                           P.rdispls.data(), k.type, cm, st);
    case Coll::Gather:
      return loomGather(s, r, k.count, k.type, k.root, cm, st);
    case Coll::Scatter:
      return loomScatter(s, r, k.count, k.type, k.root, cm, st);
  }
  return loomInternalError;
}

void Runner::clobber_arguments(Prepared& P) {
  for (auto* v : {&P.sendcounts, &P.sdispls, &P.recvcounts, &P.rdispls})
    for (size_t& x : *v) x = (size_t)0x5A5A5A5A5A5A5A5Aull;
}

bool Runner::verify(Prepared& P) {
  std::string why;
  for (const Buf& b : P.bufs) why += P.check(b);
  if (why.empty()) return true;
  report(describe(P.call) + ": " + why);
  return false;
}

bool Runner::run(const Call& k) {
  if (!ok_) return false;
  PreparedPtr p = prepare(k);
  loomResult_t res = issue(*p);
  if (res != loomSuccess) {
    ok_ = false;
    report(describe(k) + ": returned " + loomGetErrorString(res) + ": " +
           loomGetLastError(ctx_.comm) + " (stopping this run)");
    return false;
  }
  return verify(*p);
}

// ---- The full matrix -------------------------------------------------------------------

void full_matrix(Runner& r, const harness::Ctx& ctx, Coll coll, loomDataType_t t) {
  const int n = ctx.nranks;
  Call k;
  k.coll = coll;
  k.type = t;
  for (size_t count : kCounts) {
    k.count = capped_count(coll, n, t, count);
    if (coll == Coll::AlltoAllv) {
      for (int v = 0; v < kNumVariants && r.ok(); v++) {
        k.variant = v;
        r.run(k);
      }
      continue;
    }
    std::vector<Place> places = places_of(coll);
    if (count == 0 && !is_rooted(coll)) places.push_back(Place::OutNull);
    int nops = is_reducing(coll) ? kNumOps : 1;
    std::vector<int> roots = is_rooted(coll) ? roots_for(n) : std::vector<int>{0};
    for (int op = 0; op < nops; op++)
      for (int root : roots)
        for (Place pl : places) {
          if (!r.ok()) return;
          k.op = op;
          k.root = root;
          k.place = pl;
          r.run(k);
        }
  }
}

}  // namespace colltest

namespace colltest {

const char* const kPipelineEnv[][2] = {
    {"LOOM_SLICE_SIZE", "1000"}, {"LOOM_BUFFSIZE", "12K"}, {"LOOM_NSLOTS", "3"}};

harness::Opts pipeline_opts(const std::string& algo, int timeout_s) {
  harness::Opts o = opts_for(algo, timeout_s);
  for (const auto& kv : kPipelineEnv) o.env.push_back({kv[0], kv[1]});
  return o;
}

void pipeline_matrix(Runner& r, const harness::Ctx& ctx, Coll coll, loomDataType_t t) {
  const int n = ctx.nranks;
  const size_t counts[] = {1, 7, 1000, 4099, 65537};
  const int ops[] = {loomSum, kPreMul, loomAvg, loomMax, loomSum};
  int i = 0;
  for (size_t count : counts)
    for (Place pl : places_of(coll))
      for (int root : {n - 1, 0}) {
        if (!r.ok()) return;
        Call k =
            make(coll, t, is_reducing(coll) ? ops[i % 5] : 0, count, root, pl, i % kNumVariants);
        r.run(k);
        i++;
        if (!is_rooted(coll) || n == 1) break;
      }
}

}  // namespace colltest
