// ProcessGroupLoom: a torch.distributed process group (torch 1.13's c10d::ProcessGroup) whose
// collectives run on Loom, for CPU tensors.
//
// Every call is enqueued on the group's one Loom host stream and returns a Work at once, so
// the caller's thread never blocks in an operation. A Work completes when a
// loomStreamSynchronize that began after its call returns: the stream has no per-call
// completion, so a wait covers the stream's work issued so far (a Work can complete later
// than its own operation did, never earlier). The thread that waits does that synchronize
// itself; a completer thread does it for Works whose future was asked for (DDP's reducer).
// The first failed operation fails the group: its Work and every later one raise the error
// Loom gave (loomGetLastError of the communicator).
#pragma once

#include <loom.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

namespace loom_torch {

class ProcessGroupLoom;

// One operation's Work. It holds every tensor the operation reads or writes until it
// completes, and the steps that run once it succeeded (copies back into non-contiguous or
// listed outputs).
class LoomWork : public c10d::Work {
 public:
  LoomWork(ProcessGroupLoom* pg, int rank, c10d::OpType type);
  ~LoomWork() override;

  bool isCompleted() override;
  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  friend class ProcessGroupLoom;
  // Runs the finishing steps (on success) and marks the Work done, with error if not empty.
  void settle(const std::string& error);
  // Completes the future, once, if one was asked for and the Work is done.
  void fireFuture();

  ProcessGroupLoom* pg_;             // the group completes every Work before it goes
  uint64_t seq_ = 0;                 // its place in the stream, set by launch
  std::vector<at::Tensor> keep_;     // alive until completion
  std::vector<at::Tensor> outputs_;  // result() and the future's value
  std::vector<std::function<void()>> finish_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  bool futureFired_ = false;
};

class ProcessGroupLoom : public c10d::ProcessGroup {
 public:
  ProcessGroupLoom(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout);
  ~ProcessGroupLoom() override;

  const std::string getBackendName() const override { return "loom"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

 private:
  friend class LoomWork;
  using Issue = std::function<loomResult_t()>;

  // Enqueues one operation: issue() makes the Loom calls on stream_ (under issueMutex_, as a
  // communicator takes one thread at a time); the Work keeps the tensors and steps.
  c10::intrusive_ptr<c10d::Work> launch(const c10::intrusive_ptr<LoomWork>& work, const char* name,
                                        const Issue& issue);
  c10::intrusive_ptr<LoomWork> newWork(c10d::OpType type);
  // Completes the Works issued before the call: one loomStreamSynchronize at a time.
  void progress();
  void completerMain();
  void wantFuture();
  std::string loomError(loomResult_t r, const char* what) const;
  loomResult_t loomOpOf(const c10d::ReduceOp& op, at::ScalarType s, const char* name,
                        loomRedOp_t* out);
  Issue reduceInPlace(LoomWork* w, const char* name, const at::Tensor& buf,
                      const c10d::ReduceOp& op, int root);
  Issue reduceScatterInto(LoomWork* w, const char* name, const at::Tensor& src,
                          const at::Tensor& out, const c10d::ReduceOp& op);
  // A reduction with a bitwise op, which Loom lacks: src is all-gathered and combined here
  // once the gather is done; dst gets the result's elements from offset on (only on root
  // when root >= 0).
  Issue bitwise(LoomWork* w, const char* name, const at::Tensor& src, const at::Tensor& dst,
                int64_t offset, c10d::ReduceOp::RedOpType op, int root);

  // How long Work::wait polls the stream before it sleeps in loomStreamSynchronize
  // (LOOM_TORCH_SPIN_US).
  std::chrono::microseconds spin_{50};
  loomComm_t comm_ = nullptr;
  loomStream_t stream_ = nullptr;

  std::mutex issueMutex_;            // one thread at a time on comm_; orders seq_ with the stream
  std::atomic<uint64_t> issued_{0};  // the last Work enqueued
  std::vector<std::pair<uint64_t, loomRedOp_t>> premulOps_;  // destroyed once done

  std::mutex syncMutex_;  // one loomStreamSynchronize at a time, so errors are not lost
  std::atomic<uint64_t> completed_{0};

  std::mutex pendingMutex_;
  std::deque<c10::intrusive_ptr<LoomWork>> pending_;
  std::string error_;  // set once: the group's first failure
  std::condition_variable completerCv_;
  bool futureWanted_ = false;
  bool stop_ = false;
  std::thread completer_;
};

}  // namespace loom_torch
