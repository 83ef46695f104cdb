// ProcessGroupLoom (see process_group_loom.hpp) and the Python module _loom_torch that makes
// it. One translation unit: torch's headers are heavy.
#include "process_group_loom.hpp"

#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <stdexcept>

namespace loom_torch {

namespace {

using c10d::OpType;
using c10d::ReduceOp;

// Whatever a tensor handed to the group must be.
void checkTensor(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.defined(), "loom: ", op, ": a tensor is undefined");
  TORCH_CHECK(t.device().is_cpu(), "loom: ", op, ": a tensor is on ", t.device().str(),
              "; the loom backend takes CPU tensors only (use nccl for CUDA tensors)");
  TORCH_CHECK(t.layout() == at::kStrided, "loom: ", op,
              ": sparse tensors are not supported; pass dense ones");
}

const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* op) {
  TORCH_CHECK(ts.size() == 1, "loom: ", op, " takes one tensor per process, got ", ts.size());
  checkTensor(ts[0], op);
  return ts[0];
}

// Checks a list that must hold one tensor per rank, each like ref.
void checkList(const std::vector<at::Tensor>& list, const at::Tensor& ref, int size,
               const char* op) {
  TORCH_CHECK(static_cast<int>(list.size()) == size, "loom: ", op, ": the list holds ", list.size(),
              " tensors, one per rank (", size, ") is needed");
  for (const auto& t : list) {
    checkTensor(t, op);
    TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "loom: ", op, ": a tensor of ",
                t.scalar_type(), " beside one of ", ref.scalar_type());
    TORCH_CHECK(t.numel() == ref.numel(), "loom: ", op, ": a tensor of ", t.numel(),
                " elements beside one of ", ref.numel());
  }
}

void checkRoot(int64_t root, int size, const char* op) {
  TORCH_CHECK(root >= 0 && root < size, "loom: ", op, ": root ", root,
              " is not a rank of this group of ", size);
}

// Loom's type for s; false when Loom has no arithmetic for it. Bool travels as uint8.
bool loomTypeOf(at::ScalarType s, loomDataType_t* out) {
  switch (s) {
    case at::kChar:
      *out = loomInt8;
      return true;
    case at::kByte:
    case at::kBool:
      *out = loomUint8;
      return true;
    case at::kInt:
      *out = loomInt32;
      return true;
    case at::kLong:
      *out = loomInt64;
      return true;
    case at::kHalf:
      *out = loomFloat16;
      return true;
    case at::kBFloat16:
      *out = loomBfloat16;
      return true;
    case at::kFloat:
      *out = loomFloat32;
      return true;
    case at::kDouble:
      *out = loomFloat64;
      return true;
    default:
      return false;
  }
}

// How a tensor's elements travel in a collective that only moves data: in Loom's own type,
// or, for a type Loom lacks (int16, complex), as bytes, `scale` of them an element.
struct Units {
  loomDataType_t type;
  size_t scale;
};

Units unitsOf(const at::Tensor& t) {
  loomDataType_t dt;
  if (loomTypeOf(t.scalar_type(), &dt)) return {dt, 1};
  return {loomUint8, static_cast<size_t>(t.element_size())};
}

loomDataType_t reduceTypeOf(const at::Tensor& t, const char* op) {
  loomDataType_t dt;
  TORCH_CHECK(loomTypeOf(t.scalar_type(), &dt), "loom: ", op, ": Loom cannot reduce ",
              t.scalar_type(),
              " tensors; it reduces int8, uint8, int32, int64, float16, bfloat16, float32, "
              "float64 and bool");
  return dt;
}

bool isBitwise(ReduceOp::RedOpType op) {
  return op == ReduceOp::BAND || op == ReduceOp::BOR || op == ReduceOp::BXOR;
}

const char* opName(ReduceOp::RedOpType op) {
  switch (op) {
    case ReduceOp::SUM:
      return "SUM";
    case ReduceOp::AVG:
      return "AVG";
    case ReduceOp::PRODUCT:
      return "PRODUCT";
    case ReduceOp::MIN:
      return "MIN";
    case ReduceOp::MAX:
      return "MAX";
    case ReduceOp::BAND:
      return "BAND";
    case ReduceOp::BOR:
      return "BOR";
    case ReduceOp::BXOR:
      return "BXOR";
    case ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "an unknown op";
  }
}

// The PREMUL_SUM factor torch 1.13 carries (torch.distributed._make_nccl_premul_sum).
double premulFactor(const ReduceOp& op, const char* name) {
  auto* sup = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(sup, "loom: ", name, ": PREMUL_SUM without its factor");
  if (sup->tensor_factors.empty()) return sup->double_factor;
  const at::Tensor& f = sup->tensor_factors[0];
  TORCH_CHECK(f.device().is_cpu() && f.numel() == 1, "loom: ", name,
              ": a PREMUL_SUM factor must be a one-element CPU tensor");
  return f.item<double>();
}

// A contiguous stand-in for t; when it is a copy and Loom writes it, the work copies it back
// into t once the operation is done.
at::Tensor dense(std::vector<std::function<void()>>* finish, const at::Tensor& t, bool written) {
  if (t.is_contiguous()) return t;
  at::Tensor d = t.contiguous();
  if (written) finish->push_back([t, d]() mutable { t.copy_(d); });
  return d;
}

// The tensors of list laid out one after the other in one flat contiguous tensor.
at::Tensor flatten(const std::vector<at::Tensor>& list) {
  std::vector<at::Tensor> flat;
  flat.reserve(list.size());
  for (const auto& t : list) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Copies consecutive pieces of flat into the tensors of list (of list[i].numel() each).
void unflatten(const at::Tensor& flat, std::vector<at::Tensor> list) {
  int64_t at = 0;
  for (auto& t : list) {
    t.copy_(flat.narrow(0, at, t.numel()).view(t.sizes()));
    at += t.numel();
  }
}

// Whether the tensors of list are contiguous and lie end to end in memory, so that Loom can
// write them as one buffer starting at list[0].
bool endToEnd(const std::vector<at::Tensor>& list) {
  for (size_t i = 0; i < list.size(); i++) {
    if (!list[i].is_contiguous()) return false;
    if (i == 0) continue;
    const char* prev = static_cast<const char*>(list[i - 1].data_ptr());
    if (static_cast<const char*>(list[i].data_ptr()) != prev + list[i - 1].nbytes()) return false;
  }
  return true;
}

}  // namespace

// ---- LoomWork ---------------------------------------------------------------

LoomWork::LoomWork(ProcessGroupLoom* pg, int rank, c10d::OpType type)
    : c10d::Work(rank, type), pg_(pg) {}

LoomWork::~LoomWork() = default;

bool LoomWork::isCompleted() {
  if (c10d::Work::isCompleted()) return true;
  // Nobody may be waiting: when the stream is idle, complete what it ran.
  if (loomStreamQuery(pg_->stream_) == loomSuccess) pg_->progress();
  return c10d::Work::isCompleted();
}

bool LoomWork::wait(std::chrono::milliseconds timeout) {
  if (timeout == kNoTimeout) {
    // A small call is done within microseconds of its turn: polling for a moment, yielding
    // the core, saves the sleep and wake-up of a synchronize that would block.
    auto spinEnd = std::chrono::steady_clock::now() + pg_->spin_;
    while (!c10d::Work::isCompleted() && loomStreamQuery(pg_->stream_) != loomSuccess &&
           std::chrono::steady_clock::now() < spinEnd)
      std::this_thread::yield();
    // Loom's own deadline (the group's timeout) bounds each synchronize.
    while (!c10d::Work::isCompleted()) pg_->progress();
  } else {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!isCompleted()) {
      TORCH_CHECK(std::chrono::steady_clock::now() < deadline,
                  "loom: ", c10d::opTypeToString(opType_), " did not complete within ",
                  timeout.count(), " ms");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  std::lock_guard<std::mutex> g(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

std::vector<at::Tensor> LoomWork::result() {
  return outputs_;
}

c10::intrusive_ptr<c10::ivalue::Future> LoomWork::getFuture() {
  bool done;
  {
    std::lock_guard<std::mutex> g(mutex_);
    if (!future_)
      future_ =
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    done = completed_;
  }
  if (done)
    fireFuture();
  else
    pg_->wantFuture();
  return future_;
}

void LoomWork::settle(const std::string& error) {
  std::exception_ptr eptr;
  if (error.empty()) {
    try {
      for (auto& step : finish_) step();
    } catch (...) {
      eptr = std::current_exception();
    }
  } else {
    eptr = std::make_exception_ptr(std::runtime_error(error));
  }
  finish_.clear();
  keep_.clear();
  finish(eptr);
}

void LoomWork::fireFuture() {
  c10::intrusive_ptr<c10::ivalue::Future> fut;
  std::exception_ptr eptr;
  {
    std::lock_guard<std::mutex> g(mutex_);
    if (!future_ || futureFired_ || !completed_) return;
    futureFired_ = true;
    fut = future_;
    eptr = exception_;
  }
  if (eptr)
    fut->setError(eptr);
  else
    fut->markCompleted(c10::IValue(outputs_));
}

// ---- ProcessGroupLoom: life -------------------------------------------------

ProcessGroupLoom::ProcessGroupLoom(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size) {
  // The store is this group's (torch prefixes its keys), so one key name serves every group.
  static const std::string key = "loom_unique_id";
  loomUniqueId id;
  if (rank == 0) {
    loomResult_t r = loomGetUniqueId(&id);
    TORCH_CHECK(r == loomSuccess, "loom: loomGetUniqueId failed: ", loomGetErrorString(r), ": ",
                loomGetLastError(nullptr));
    store->set(key, std::vector<uint8_t>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    std::vector<uint8_t> bytes = store->get(key);  // waits for rank 0, up to the store's timeout
    TORCH_CHECK(bytes.size() == sizeof(id.internal), "loom: the store's ", key, " holds ",
                bytes.size(), " bytes, not a Loom unique id of ", sizeof(id.internal));
    std::memcpy(id.internal, bytes.data(), bytes.size());
  }
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.timeoutMs = static_cast<int>(std::clamp<int64_t>(timeout.count(), 1, INT_MAX));
  config.commName = "torch";
  loomResult_t r = loomCommInitRankConfig(&comm_, size, id, rank, &config);
  TORCH_CHECK(r == loomSuccess, "loom: rank ", rank, " of ", size,
              " could not form the process group: ", loomGetErrorString(r), ": ",
              loomGetLastError(nullptr));
  r = loomStreamCreate(&stream_);
  if (r != loomSuccess) {
    std::string why = loomGetLastError(nullptr);
    loomCommDestroy(comm_);
    TORCH_CHECK(false, "loom: cannot create the group's host stream: ", why);
  }
  if (const char* us = std::getenv("LOOM_TORCH_SPIN_US"))
    spin_ = std::chrono::microseconds(std::atoll(us));
  completer_ = std::thread([this] { completerMain(); });
  init();
}

ProcessGroupLoom::~ProcessGroupLoom() {
  {
    std::lock_guard<std::mutex> g(pendingMutex_);
    stop_ = true;
  }
  completerCv_.notify_all();
  completer_.join();
  progress();  // every Work completes, so none touches the group afterwards
  for (auto& p : premulOps_) loomRedOpDestroy(p.second, comm_);
  loomStreamDestroy(stream_);
  // Finalize is collective: it lets the peers finish reading this rank's buffers. A failed
  // group skips it, as its peers may be gone.
  if (error_.empty()) loomCommFinalize(comm_);
  loomCommDestroy(comm_);
}

// ---- ProcessGroupLoom: issue and completion ---------------------------------

std::string ProcessGroupLoom::loomError(loomResult_t r, const char* what) const {
  // A synchronize hands the failed call's text to this thread; an enqueue leaves it on comm.
  std::string text = loomGetLastError(nullptr);
  if (text.empty()) text = loomGetLastError(comm_);
  return std::string("loom: ") + what + " failed: " + loomGetErrorString(r) +
         (text.empty() ? "" : ": " + text);
}

c10::intrusive_ptr<LoomWork> ProcessGroupLoom::newWork(c10d::OpType type) {
  return c10::make_intrusive<LoomWork>(this, rank_, type);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::launch(const c10::intrusive_ptr<LoomWork>& work,
                                                        const char* name, const Issue& issue) {
  {
    std::lock_guard<std::mutex> g(pendingMutex_);
    TORCH_CHECK(error_.empty(), "loom: ", name, ": the process group failed earlier: ", error_);
  }
  std::lock_guard<std::mutex> lk(issueMutex_);
  // PreMulSum ops of calls that are done can go now (on this thread, the comm's user).
  uint64_t done = completed_.load();
  auto keep = std::remove_if(premulOps_.begin(), premulOps_.end(), [&](const auto& p) {
    if (p.first > done) return false;
    loomRedOpDestroy(p.second, comm_);
    return true;
  });
  premulOps_.erase(keep, premulOps_.end());

  work->seq_ = issued_.load() + 1;
  loomResult_t r = issue();
  if (r != loomSuccess) {
    // Part of it may be queued (a group): the communicator's state is unknown from here.
    std::string why = loomError(r, name);
    std::lock_guard<std::mutex> g(pendingMutex_);
    if (error_.empty()) error_ = why;
    TORCH_CHECK(false, why);
  }
  {
    std::lock_guard<std::mutex> g(pendingMutex_);
    pending_.push_back(work);
  }
  issued_.store(work->seq_);
  return work;
}

void ProcessGroupLoom::progress() {
  std::vector<c10::intrusive_ptr<LoomWork>> done;
  {
    std::lock_guard<std::mutex> s(syncMutex_);
    uint64_t target = issued_.load();
    if (completed_.load() >= target) return;
    loomResult_t r = loomStreamSynchronize(stream_);
    std::string err;
    {
      std::lock_guard<std::mutex> g(pendingMutex_);
      // The first failure fails the group: Loom's stream does not say which call failed, and
      // the communicator is in error for every later call anyway.
      if (r != loomSuccess && error_.empty()) error_ = loomError(r, "a queued operation");
      err = error_;
      while (!pending_.empty() && pending_.front()->seq_ <= target) {
        done.push_back(std::move(pending_.front()));
        pending_.pop_front();
      }
    }
    for (auto& w : done) w->settle(err);
    completed_.store(target);
  }
  // Futures run their callbacks inline; outside the lock, so a callback may wait.
  for (auto& w : done) w->fireFuture();
}

void ProcessGroupLoom::wantFuture() {
  {
    std::lock_guard<std::mutex> g(pendingMutex_);
    futureWanted_ = true;
  }
  completerCv_.notify_one();
}

void ProcessGroupLoom::completerMain() {
  std::unique_lock<std::mutex> lk(pendingMutex_);
  for (;;) {
    completerCv_.wait(lk, [this] { return stop_ || futureWanted_; });
    if (stop_) return;
    futureWanted_ = false;
    lk.unlock();
    progress();
    lk.lock();
  }
}

// ---- Reductions ---------------------------------------------------------------

ProcessGroupLoom::Issue ProcessGroupLoom::bitwise(LoomWork* w, const char* name,
                                                  const at::Tensor& src, const at::Tensor& dst,
                                                  int64_t offset, ReduceOp::RedOpType op,
                                                  int root) {
  TORCH_CHECK(at::isIntegralType(src.scalar_type(), /*includeBool=*/true), "loom: ", name, ": ",
              opName(op), " needs an integer or bool tensor, got ", src.scalar_type());
  at::Tensor gathered = at::empty({size_, src.numel()}, src.options());
  w->keep_.push_back(gathered);
  bool mine = root < 0 || root == rank_;
  w->finish_.push_back([=]() mutable {
    if (!mine) return;
    at::Tensor acc = gathered[0].clone();
    for (int i = 1; i < size_; i++) {
      if (op == ReduceOp::BAND)
        acc.bitwise_and_(gathered[i]);
      else if (op == ReduceOp::BOR)
        acc.bitwise_or_(gathered[i]);
      else
        acc.bitwise_xor_(gathered[i]);
    }
    dst.view({-1}).copy_(acc.narrow(0, offset, dst.numel()));
  });
  size_t bytes = static_cast<size_t>(src.nbytes());
  return [=] {
    return loomAllGather(src.data_ptr(), gathered.data_ptr(), bytes, loomUint8, comm_, stream_);
  };
}

// Loom's op for op on tensors of type s; a PreMulSum op is created now and destroyed once
// the call that uses it is done (see launch).
loomResult_t ProcessGroupLoom::loomOpOf(const ReduceOp& op, at::ScalarType s, const char* name,
                                        loomRedOp_t* out) {
  ReduceOp::RedOpType t = op;
  if (s == at::kBool) {
    // Loom sees bool as uint8 (0 or 1): sum and max are "any", product and min are "all".
    TORCH_CHECK(
        t == ReduceOp::SUM || t == ReduceOp::MAX || t == ReduceOp::PRODUCT || t == ReduceOp::MIN,
        "loom: ", name, ": ", opName(t), " is not defined for bool tensors");
    *out = (t == ReduceOp::SUM || t == ReduceOp::MAX) ? loomMax : loomMin;
    return loomSuccess;
  }
  switch (t) {
    case ReduceOp::SUM:
      *out = loomSum;
      return loomSuccess;
    case ReduceOp::AVG:
      *out = loomAvg;
      return loomSuccess;
    case ReduceOp::PRODUCT:
      *out = loomProd;
      return loomSuccess;
    case ReduceOp::MIN:
      *out = loomMin;
      return loomSuccess;
    case ReduceOp::MAX:
      *out = loomMax;
      return loomSuccess;
    case ReduceOp::PREMUL_SUM: {
      loomDataType_t dt = reduceTypeOf(at::empty({0}, at::TensorOptions().dtype(s)), name);
      at::Tensor scalar = at::scalar_tensor(premulFactor(op, name), at::TensorOptions().dtype(s));
      return loomRedOpCreatePreMulSum(out, scalar.data_ptr(), dt, loomScalarHostImmediate, comm_);
    }
    default:
      TORCH_CHECK(false, "loom: ", name, ": ", opName(t), " is not supported");
  }
}

// The Loom call for an all-reduce (root < 0) or reduce of buf in place.
ProcessGroupLoom::Issue ProcessGroupLoom::reduceInPlace(LoomWork* w, const char* name,
                                                        const at::Tensor& buf, const ReduceOp& op,
                                                        int root) {
  if (isBitwise(op)) return bitwise(w, name, buf, buf, 0, op, root);
  loomDataType_t dt = reduceTypeOf(buf, name);
  size_t n = static_cast<size_t>(buf.numel());
  at::ScalarType s = buf.scalar_type();
  // Runs under issueMutex_ (launch), where premulOps_ may change.
  return [=] {
    loomRedOp_t lop;
    loomResult_t r = loomOpOf(op, s, name, &lop);
    if (r != loomSuccess) return r;
    if (lop >= loomNumOps) premulOps_.emplace_back(issued_.load() + 1, lop);
    void* p = buf.data_ptr();
    return root < 0 ? loomAllReduce(p, p, n, dt, lop, comm_, stream_)
                    : loomReduce(p, p, n, dt, lop, root, comm_, stream_);
  };
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  const at::Tensor& t = single(tensors, "allreduce");
  auto w = newWork(OpType::ALLREDUCE);
  at::Tensor d = dense(&w->finish_, t, true);
  w->keep_ = {t, d};
  w->outputs_ = {t};
  Issue issue = reduceInPlace(w.get(), "allreduce", d, opts.reduceOp, -1);
  return launch(w, "allreduce", issue);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "loom: allreduce_coalesced: no tensors");
  for (const auto& t : tensors) {
    checkTensor(t, "allreduce_coalesced");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                "loom: allreduce_coalesced: tensors of ", t.scalar_type(), " and ",
                tensors[0].scalar_type(), " cannot be reduced together");
  }
  auto w = newWork(OpType::ALLREDUCE_COALESCED);
  at::Tensor flat = flatten(tensors);
  w->keep_ = {flat};
  w->outputs_ = tensors;
  Issue issue = reduceInPlace(w.get(), "allreduce_coalesced", flat, opts.reduceOp, -1);
  std::vector<at::Tensor> outs = tensors;
  w->finish_.push_back([flat, outs] { unflatten(flat, outs); });
  return launch(w, "allreduce_coalesced", issue);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  const at::Tensor& t = single(tensors, "reduce");
  checkRoot(opts.rootRank, size_, "reduce");
  auto w = newWork(OpType::REDUCE);
  at::Tensor d = dense(&w->finish_, t, true);
  w->keep_ = {t, d};
  w->outputs_ = {t};
  Issue issue = reduceInPlace(w.get(), "reduce", d, opts.reduceOp, static_cast<int>(opts.rootRank));
  return launch(w, "reduce", issue);
}

ProcessGroupLoom::Issue ProcessGroupLoom::reduceScatterInto(LoomWork* w, const char* name,
                                                            const at::Tensor& src,
                                                            const at::Tensor& out,
                                                            const ReduceOp& op) {
  at::Tensor d = dense(&w->finish_, out, true);
  w->keep_.insert(w->keep_.end(), {src, out, d});
  w->outputs_ = {out};
  if (isBitwise(op)) return bitwise(w, name, src, d, rank_ * d.numel(), op, -1);
  loomDataType_t dt = reduceTypeOf(d, name);
  size_t n = static_cast<size_t>(d.numel());
  at::ScalarType s = d.scalar_type();
  return [=] {
    loomRedOp_t lop;
    loomResult_t r = loomOpOf(op, s, name, &lop);
    if (r != loomSuccess) return r;
    if (lop >= loomNumOps) premulOps_.emplace_back(issued_.load() + 1, lop);
    return loomReduceScatter(src.data_ptr(), d.data_ptr(), n, dt, lop, comm_, stream_);
  };
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1, "loom: reduce_scatter takes one input list per process");
  checkList(inputs[0], out, size_, "reduce_scatter");
  auto w = newWork(OpType::REDUCE_SCATTER);
  Issue issue =
      reduceScatterInto(w.get(), "reduce_scatter", flatten(inputs[0]), out, opts.reduceOp);
  return launch(w, "reduce_scatter", issue);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  checkTensor(output, "reduce_scatter_tensor");
  checkTensor(input, "reduce_scatter_tensor");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), "loom: reduce_scatter_tensor: input of ",
              input.scalar_type(), ", output of ", output.scalar_type());
  TORCH_CHECK(input.numel() == output.numel() * size_,
              "loom: reduce_scatter_tensor: the input has ", input.numel(),
              " elements, not the output's ", output.numel(), " times ", size_);
  auto w = newWork(OpType::_REDUCE_SCATTER_BASE);
  Issue issue = reduceScatterInto(w.get(), "reduce_scatter_tensor", input.contiguous(), output,
                                  opts.reduceOp);
  return launch(w, "reduce_scatter_tensor", issue);
}

// ---- Data movement ------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = single(tensors, "broadcast");
  checkRoot(opts.rootRank, size_, "broadcast");
  int root = static_cast<int>(opts.rootRank);
  auto w = newWork(OpType::BROADCAST);
  at::Tensor d = dense(&w->finish_, t, rank_ != root);
  w->keep_ = {t, d};
  w->outputs_ = {t};
  Units u = unitsOf(d);
  size_t n = static_cast<size_t>(d.numel()) * u.scale;
  return launch(w, "broadcast", [=] {
    return loomBroadcast(d.data_ptr(), d.data_ptr(), n, u.type, root, comm_, stream_);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const at::Tensor& in = single(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1, "loom: allgather takes one output list per process");
  const std::vector<at::Tensor>& outs = outputs[0];
  checkList(outs, in, size_, "allgather");
  auto w = newWork(OpType::ALLGATHER);
  at::Tensor src = in.contiguous();
  // Outputs that lie end to end (chunks of one tensor) are written in place.
  at::Tensor flat = endToEnd(outs) ? at::Tensor() : at::empty({size_ * in.numel()}, in.options());
  if (flat.defined()) w->finish_.push_back([flat, outs] { unflatten(flat, outs); });
  void* dst = flat.defined() ? flat.data_ptr() : outs[0].data_ptr();
  w->keep_ = outs;
  w->keep_.insert(w->keep_.end(), {src, flat});
  w->outputs_ = outs;
  Units u = unitsOf(src);
  size_t n = static_cast<size_t>(src.numel()) * u.scale;
  return launch(w, "allgather",
                [=] { return loomAllGather(src.data_ptr(), dst, n, u.type, comm_, stream_); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  checkTensor(output, "all_gather_into_tensor");
  checkTensor(input, "all_gather_into_tensor");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(),
              "loom: all_gather_into_tensor: input of ", input.scalar_type(), ", output of ",
              output.scalar_type());
  TORCH_CHECK(output.numel() == input.numel() * size_,
              "loom: all_gather_into_tensor: the output has ", output.numel(),
              " elements, not the input's ", input.numel(), " times ", size_);
  auto w = newWork(OpType::_ALLGATHER_BASE);
  at::Tensor src = input.contiguous();
  at::Tensor d = dense(&w->finish_, output, true);
  w->keep_ = {src, output, d};
  w->outputs_ = {output};
  Units u = unitsOf(src);
  size_t n = static_cast<size_t>(src.numel()) * u.scale;
  return launch(w, "all_gather_into_tensor", [=] {
    return loomAllGather(src.data_ptr(), d.data_ptr(), n, u.type, comm_, stream_);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const at::Tensor& in = single(inputs, "gather");
  checkRoot(opts.rootRank, size_, "gather");
  int root = static_cast<int>(opts.rootRank);
  auto w = newWork(OpType::GATHER);
  at::Tensor src = in.contiguous();
  at::Tensor flat;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1, "loom: gather: the root takes one output list");
    checkList(outputs[0], in, size_, "gather");
    std::vector<at::Tensor> outs = outputs[0];
    flat = at::empty({size_ * in.numel()}, in.options());
    w->finish_.push_back([flat, outs] { unflatten(flat, outs); });
    w->outputs_ = outs;
  } else {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(),
                "loom: gather: only the root passes output tensors");
  }
  w->keep_ = {src, flat};
  Units u = unitsOf(src);
  size_t n = static_cast<size_t>(src.numel()) * u.scale;
  void* dst = flat.defined() ? flat.data_ptr() : nullptr;
  return launch(w, "gather",
                [=] { return loomGather(src.data_ptr(), dst, n, u.type, root, comm_, stream_); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "scatter");
  checkRoot(opts.rootRank, size_, "scatter");
  int root = static_cast<int>(opts.rootRank);
  auto w = newWork(OpType::SCATTER);
  at::Tensor flat;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1, "loom: scatter: the root takes one input list");
    checkList(inputs[0], out, size_, "scatter");
    flat = flatten(inputs[0]);
  } else {
    TORCH_CHECK(inputs.empty() || inputs[0].empty(),
                "loom: scatter: only the root passes input tensors");
  }
  at::Tensor d = dense(&w->finish_, out, true);
  w->keep_ = {flat, out, d};
  w->outputs_ = {out};
  Units u = unitsOf(d);
  size_t n = static_cast<size_t>(d.numel()) * u.scale;
  const void* src = flat.defined() ? flat.data_ptr() : nullptr;
  return launch(w, "scatter",
                [=] { return loomScatter(src, d.data_ptr(), n, u.type, root, comm_, stream_); });
}

namespace {

// Counts and displacements, in Loom's units, of an all-to-all's pieces along dim 0: splits
// in rows (empty: equal pieces).
void splitsToCounts(const at::Tensor& t, const std::vector<int64_t>& splits, int size, size_t scale,
                    const char* side, std::vector<size_t>* counts, std::vector<size_t>* displs) {
  int64_t rows = t.dim() > 0 ? t.size(0) : 1;
  int64_t rowElems = rows > 0 ? t.numel() / rows : 0;
  std::vector<int64_t> s = splits;
  if (s.empty()) {
    TORCH_CHECK(rows % size == 0, "loom: all_to_all_single: the ", side, "'s ", rows,
                " rows do not split evenly ", size, " ways; pass split sizes");
    s.assign(size, rows / size);
  }
  TORCH_CHECK(static_cast<int>(s.size()) == size, "loom: all_to_all_single: ", s.size(), " ", side,
              " split sizes for ", size, " ranks");
  int64_t total = 0;
  for (int64_t v : s) {
    TORCH_CHECK(v >= 0, "loom: all_to_all_single: a negative ", side, " split size");
    total += v;
  }
  TORCH_CHECK(total == rows, "loom: all_to_all_single: the ", side, " split sizes add up to ",
              total, ", the tensor has ", rows, " rows");
  size_t at = 0;
  for (int64_t v : s) {
    size_t c = static_cast<size_t>(v * rowElems) * scale;
    counts->push_back(c);
    displs->push_back(at);
    at += c;
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::alltoall_base(at::Tensor& output,
                                                               at::Tensor& input,
                                                               std::vector<int64_t>& outputSplits,
                                                               std::vector<int64_t>& inputSplits,
                                                               const c10d::AllToAllOptions& opts) {
  checkTensor(output, "all_to_all_single");
  checkTensor(input, "all_to_all_single");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), "loom: all_to_all_single: input of ",
              input.scalar_type(), ", output of ", output.scalar_type());
  auto w = newWork(OpType::ALLTOALL_BASE);
  at::Tensor src = input.contiguous();
  at::Tensor d = dense(&w->finish_, output, true);
  w->keep_ = {src, output, d};
  w->outputs_ = {output};
  Units u = unitsOf(src);
  auto sc = std::make_shared<std::vector<size_t>>(), sd = std::make_shared<std::vector<size_t>>();
  auto rc = std::make_shared<std::vector<size_t>>(), rd = std::make_shared<std::vector<size_t>>();
  splitsToCounts(src, inputSplits, size_, u.scale, "input", sc.get(), sd.get());
  splitsToCounts(d, outputSplits, size_, u.scale, "output", rc.get(), rd.get());
  return launch(w, "all_to_all_single", [=] {
    return loomAlltoAllv(src.data_ptr(), sc->data(), sd->data(), d.data_ptr(), rc->data(),
                         rd->data(), u.type, comm_, stream_);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "loom: all_to_all: one input and one output tensor per rank (", size_,
              ") are needed, got ", inputs.size(), " and ", outputs.size());
  for (int i = 0; i < size_; i++) {
    checkTensor(inputs[i], "all_to_all");
    checkTensor(outputs[i], "all_to_all");
    TORCH_CHECK(inputs[i].scalar_type() == inputs[0].scalar_type() &&
                    outputs[i].scalar_type() == inputs[0].scalar_type(),
                "loom: all_to_all: every tensor must have one type");
  }
  auto w = newWork(OpType::ALLTOALL);
  at::Tensor src = flatten(inputs);
  int64_t total = 0;
  for (const auto& t : outputs) total += t.numel();
  at::Tensor flat = at::empty({total}, src.options());
  std::vector<at::Tensor> outs = outputs;
  w->finish_.push_back([flat, outs] { unflatten(flat, outs); });
  w->keep_ = {src, flat};
  w->outputs_ = outs;
  Units u = unitsOf(src);
  auto sc = std::make_shared<std::vector<size_t>>(), sd = std::make_shared<std::vector<size_t>>();
  auto rc = std::make_shared<std::vector<size_t>>(), rd = std::make_shared<std::vector<size_t>>();
  size_t s = 0, r = 0;
  for (int i = 0; i < size_; i++) {
    sc->push_back(static_cast<size_t>(inputs[i].numel()) * u.scale);
    sd->push_back(s);
    s += sc->back();
    rc->push_back(static_cast<size_t>(outputs[i].numel()) * u.scale);
    rd->push_back(r);
    r += rc->back();
  }
  return launch(w, "all_to_all", [=] {
    return loomAlltoAllv(src.data_ptr(), sc->data(), sd->data(), flat.data_ptr(), rc->data(),
                         rd->data(), u.type, comm_, stream_);
  });
}

// Tags are accepted and not matched: between two ranks, messages pair up in the order they
// were issued, as in NCCL.
c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::send(std::vector<at::Tensor>& tensors, int dstRank,
                                                      int tag) {
  const at::Tensor& t = single(tensors, "send");
  checkRoot(dstRank, size_, "send");
  auto w = newWork(OpType::SEND);
  at::Tensor src = t.contiguous();
  w->keep_ = {src};
  Units u = unitsOf(src);
  size_t n = static_cast<size_t>(src.numel()) * u.scale;
  return launch(w, "send",
                [=] { return loomSend(src.data_ptr(), n, u.type, dstRank, comm_, stream_); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::recv(std::vector<at::Tensor>& tensors, int srcRank,
                                                      int tag) {
  const at::Tensor& t = single(tensors, "recv");
  checkRoot(srcRank, size_, "recv");
  auto w = newWork(OpType::RECV);
  at::Tensor d = dense(&w->finish_, t, true);
  w->keep_ = {t, d};
  w->outputs_ = {t};
  Units u = unitsOf(d);
  size_t n = static_cast<size_t>(d.numel()) * u.scale;
  return launch(w, "recv",
                [=] { return loomRecv(d.data_ptr(), n, u.type, srcRank, comm_, stream_); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::recvAnysource(std::vector<at::Tensor>& tensors,
                                                               int tag) {
  TORCH_CHECK(false,
              "loom: recv without a source is not supported: Loom receives from a named "
              "peer; pass src");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::barrier(const c10d::BarrierOptions& opts) {
  auto w = newWork(OpType::BARRIER);
  at::Tensor token = at::zeros({1}, at::kByte);
  w->keep_ = {token};
  return launch(w, "barrier", [=] {
    return loomAllReduce(token.data_ptr(), token.data_ptr(), 1, loomUint8, loomMax, comm_, stream_);
  });
}

}  // namespace loom_torch

namespace py = pybind11;

PYBIND11_MODULE(_loom_torch, m) {
  m.doc() = "The loom backend of torch.distributed (CPU tensors); import loom_torch instead.";
  // torch.distributed registers c10d::ProcessGroup and c10d::Store with pybind11.
  py::module_::import("torch.distributed");
  py::class_<loom_torch::ProcessGroupLoom, c10d::ProcessGroup,
             c10::intrusive_ptr<loom_torch::ProcessGroupLoom>>(m, "ProcessGroupLoom")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<loom_torch::ProcessGroupLoom>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>());
  m.def("loom_version", [] {
    int v = 0;
    loomGetVersion(&v);
    return v;
  });
}
