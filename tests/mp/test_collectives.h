// test_collectives.h - the engine behind the collective matrices
// (test_collectives*.cc): one call of any collective, set up on this rank
// with inputs whose every result is known exactly, made, and checked element
// by element against an independent reference, together with the bytes
// around it (out-of-place inputs unchanged, root-only buffers of non-roots
// untouched, nothing written before or past any buffer). Buffers start 0, 1
// or 2 elements past a 16-byte boundary, so kernels meet every alignment.
//
// Inputs. Reducing collectives take values::pattern values (exact in any
// order of reduction); element g of a rank's send buffer (g counted over the
// whole buffer, so reduce-scatter's blocks differ) holds the pattern's value
// for index mix(g % kTile), and the expected result is values::expected at
// that index. Data-moving collectives take pseudo-random bytes, a function of
// (source rank, destination, g % kTile, byte), so a block that lands in the
// wrong place, or at the wrong offset, or from the wrong rank, is seen; any
// bit pattern (NaN payloads included) must travel unchanged. kTile is a prime
// above 1000, so no slice, chunk or block size of an algorithm is a multiple
// of it, and both inputs and expected values are encoded once per tile: big
// counts stay cheap.
#ifndef LOOM_TESTS_COLLECTIVES_H
#define LOOM_TESTS_COLLECTIVES_H

#include <cstddef>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "harness.h"

namespace colltest {

enum class Coll {
  AllReduce,
  Broadcast,
  Reduce,
  AllGather,
  ReduceScatter,
  AlltoAll,
  AlltoAllv,
  Gather,
  Scatter,
};
constexpr int kNumColls = 9;

// The collective's name as LOOM_ALGO spells it ("allreduce", "broadcast"...).
const char* coll_name(Coll c);
bool is_reducing(Coll c);
bool is_rooted(Coll c);
// The algorithms that serve c (src/collectives/algos.c), as LOOM_ALGO names them.
std::vector<std::string> algos_of(Coll c);

// How the buffers are passed.
//  Out:     out-of-place; non-roots pass real root-only buffers, which must
//           stay untouched.
//  In:      in place as API.md (and NCCL) define it: sendbuff == recvbuff;
//           all-gather sendbuff == recvbuff + rank*count; reduce-scatter
//           recvbuff == sendbuff + rank*count; gather (root) sendbuff ==
//           recvbuff + root*count; scatter (root) recvbuff == sendbuff +
//           root*count. Non-roots of gather and scatter pass NULL for the
//           root-only buffer, those of reduce pass recvbuff == sendbuff.
//  OutNull: out-of-place with every root-only buffer NULL on non-roots; with
//           count 0, every buffer NULL on every rank.
//  Mixed:   in place on odd ranks, out of place on even ones (each rank
//           chooses for itself; the root is either, by its parity).
enum class Place { Out, In, OutNull, Mixed };
const char* place_name(Place p);
// The placements that apply to c (all-to-all-v has no in-place form).
std::vector<Place> places_of(Coll c);

// Ops as the tests index them: the five built-ins, then kPreMul, a PreMulSum
// with scalar 2 (reduced as a sum of doubled inputs).
constexpr int kPreMul = 5;
constexpr int kNumOps = 6;
const char* op_label(int op);

const loomDataType_t kAllTypes[] = {loomInt8,    loomUint8,    loomInt32,      loomUint32,
                                    loomInt64,   loomUint64,   loomFloat16,    loomFloat32,
                                    loomFloat64, loomBfloat16, loomFloat8e4m3, loomFloat8e5m2};
constexpr int kNumTypes = 12;

// The counts of the full matrix; kBigCount is capped by capped_count().
constexpr size_t kBigCount = (1u << 20) + 3;
const size_t kCounts[] = {0, 1, 7, 1000, kBigCount};
// count, or for all-gather, all-to-all(-v), gather and scatter (whose
// largest buffer holds nranks blocks) the largest odd count below it whose
// largest buffer stays under kMaxBufferBytes.
constexpr size_t kMaxBufferBytes = 32u << 20;
size_t capped_count(Coll c, int nranks, loomDataType_t t, size_t count);

// The roots the full matrix tries: all of them up to 5 ranks, else 0, a
// middle one and the last.
std::vector<int> roots_for(int nranks);

// One call: the collective, its datatype, op (reducing collectives), count
// (per rank, as the API's count argument), root (rooted collectives) and
// placement. For all-to-all-v, count scales the count matrix and variant
// picks its shape (see alltoallv_count).
struct Call {
  Coll coll = Coll::AllReduce;
  loomDataType_t type = loomFloat32;
  int op = 0;
  size_t count = 0;
  int root = 0;
  Place place = Place::Out;
  int variant = 0;
};

// All-to-all-v: elements rank s sends rank d, for the given shape:
//  0: uneven, about a quarter of the pairs zero;
//  1: rank 0 sends nothing and the last rank receives nothing; others uneven;
//  2: every rank sends `count` elements to the rank before it (itself, on
//     one rank), 1 to 3 to each other rank, nothing to itself.
constexpr int kNumVariants = 3;
size_t alltoallv_count(int variant, int nranks, size_t count, int s, int d);

// A call set up on this rank: its buffers, filled, and what they must hold after.
class Prepared;
struct PreparedDeleter {
  void operator()(Prepared* p) const;
};
using PreparedPtr = std::unique_ptr<Prepared, PreparedDeleter>;

// Runs calls on one rank and checks them. Failures are reported with
// everything needed to repeat the call; after the first few, further
// failing calls are counted and summed up at the end, so a broken algorithm
// does not bury the log. A call that returns an error stops the run (ok()
// turns false): the peers' view of the communicator is no longer known.
class Runner {
 public:
  // algo: what chose the algorithm, for messages ("ring", "tuner").
  Runner(const harness::Ctx& ctx, std::string algo);
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // Makes one call and checks it; false if this rank saw anything wrong.
  bool run(const Call& call);
  bool ok() const { return ok_; }

  // For group and stream tests: set up a call's buffers, make the call
  // (only), check. After issue, the call's own argument arrays (all-to-all-v
  // counts and displacements) may be overwritten by clobber_arguments: the
  // library must have taken what it needs.
  PreparedPtr prepare(const Call& call);
  loomResult_t issue(Prepared& p);
  void clobber_arguments(Prepared& p);
  bool verify(Prepared& p);
  // The stream calls go on (NULL, the default: each call returns when done).
  void set_stream(loomStream_t s) { stream_ = s; }
  std::string describe(const Call& call) const;

 private:
  loomRedOp_t user_op(loomDataType_t t, int op);
  void report(const std::string& what);

  const harness::Ctx& ctx_;
  std::string algo_;
  loomStream_t stream_ = nullptr;
  bool ok_ = true;
  int failed_calls_ = 0;
  loomRedOp_t premul_[kNumTypes];
  bool have_premul_[kNumTypes] = {};
};

// The full matrix of one collective and datatype on this rank: every count,
// op (reducing collectives), root (roots_for) and placement, or for
// all-to-all-v every shape. Stops early if a call fails.
void full_matrix(Runner& r, const harness::Ctx& ctx, Coll coll, loomDataType_t t);

// Harness options for a run with algo forced ("" for the tuner's choice).
harness::Opts opts_for(const std::string& algo, int timeout_s);

// Pipeline stress (process ranks): as opts_for, with slices of 1000 bytes
// (125 to 1000 elements: no power of two, so chunks split into uneven
// slices) through connection FIFOs of 3 slots of 4 KiB, so every call of
// more than a few elements takes many slices and wraps the FIFOs.
harness::Opts pipeline_opts(const std::string& algo, int timeout_s);
// Counts 1 to 65537 in every placement, roots 0 and n-1, a rotation of ops.
void pipeline_matrix(Runner& r, const harness::Ctx& ctx, Coll coll, loomDataType_t t);

Call make(Coll coll, loomDataType_t t, int op, size_t count, int root, Place pl, int variant = 0);

// Every collective (two all-reduces) and sends and receives to both
// neighbours, issued between one loomGroupStart and loomGroupEnd, all
// checked after; twice, so the second group finds the communicator as the
// first left it. label: what chose the algorithms, for messages.
void group_body(const harness::Ctx& c, const std::string& label);

// Every collective in every placement, two counts each, queued on one host
// stream (loomStreamCreate) without waiting; the all-to-all-v argument
// arrays overwritten as soon as each call returns; then one
// loomStreamSynchronize, and every result checked.
void stream_body(const harness::Ctx& c, const std::string& label);

// Group and stream tests: ranks, and LOOM_ALGO ("" for the tuner's choice).
struct GroupCase {
  harness::Mode mode;
  int nranks;
  std::string algo;
};
// Two LOOM_ALGO settings that between them force every algorithm of every
// collective, each collective named on its own.
extern const char* const kGroupAlgosA;
extern const char* const kGroupAlgosB;
extern const char* const kGroupAlgosC;
extern const char* const kGroupAlgosD;
std::string group_name(const ::testing::TestParamInfo<GroupCase>& info);
void PrintTo(const GroupCase& g, std::ostream* os);

}  // namespace colltest

#endif
