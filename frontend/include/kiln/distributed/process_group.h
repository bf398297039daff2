#pragma once
// A process group: `size()` processes (ranks), usually one per machine or device, that run the
// same program and exchange tensors through collectives (PyTorch's torch.distributed). A group
// always connects the ranks in a ring over TCP (as Gloo does) and runs host tensors' collectives
// with the ring algorithms, which move 2(n-1)/n of the data per rank whatever the rank count:
// all_reduce = reduce-scatter then all-gather (Patarasuk and Yuan, "Bandwidth optimal all-reduce
// algorithms for clusters of workstations", 2009), broadcast = a pipelined chain. With the "nccl"
// backend, CUDA tensors go through NCCL instead (ProcessGroupOptions::backend).
//
// Collectives run in call order on the group's own thread; the *_async forms return at once with
// a Work to wait on, so a caller can compute while the data moves (data-parallel training
// overlaps backward with its gradients' all-reduce that way). Every rank must call the same
// collectives in the same order with tensors of the same shape and dtype: each collective first
// compares a header (sequence number, collective, dtype, element count, shape hash) with its ring
// neighbour and fails with both sides named rather than mixing data; a call refused by its checks
// on one rank still takes its turn, so the others fail naming it. Any failure (a peer that
// exited, a timeout, a mismatch) fails this and every later collective of the group with the
// first error.

#include <chrono>
#include <memory>
#include <string>

#include "kiln/distributed/store.h"
#include "kiln/tensor.h"

namespace kiln::distributed {

enum class ReduceOp { Sum, Avg, Product, Min, Max };
const char* reduce_op_name(ReduceOp op);

// The handle of an asynchronous collective.
class Work {
 public:
  Work() = default;
  // Waits for the collective; throws its error.
  void wait() const;
  bool is_completed() const;
  bool valid() const { return static_cast<bool>(state_); }

  struct State;

 private:
  friend class ProcessGroup;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

struct ProcessGroupOptions {
  // How long any one wait may last: the rendezvous, and each collective's exchange with a peer.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  // Keys in the store start with this: several groups may share one store.
  std::string name = "default";
  // "tcp": every tensor through the ring (CUDA tensors staged through host memory). "nccl":
  // CUDA tensors through NCCL, device to device on the eager stream (one GPU per rank: the
  // device is KILN_CUDA_DEVICE, else the launcher's LOCAL_RANK); host tensors, the checks and
  // barriers still through the ring. Needs a CUDA device and NCCL (libnccl.so.2).
  std::string backend = "tcp";
};

class ProcessGroup {
 public:
  // Meets the other ranks through `store` (every rank of `world_size` constructs its group with
  // the same store address and name) and connects the ring. Blocks until all have arrived.
  ProcessGroup(std::shared_ptr<Store> store, int rank, int world_size,
               ProcessGroupOptions options = {});
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int size() const;
  const char* backend() const;

  // In place on `tensor` (float32, float64, int32 or int64; any strides). Every rank ends with
  // the same bytes. Avg is for floating types. A CUDA tensor is staged through host memory
  // (copied out on the eager stream after the work that produced it, and back), as Gloo does:
  // correct across machines and on one GPU shared by several ranks, at the host's bandwidth.
  void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  // `tag` (0: none) is compared across ranks with the rest of the call: a caller that numbers
  // its calls (DistributedDataParallel: step and bucket) gets an error instead of a pairing of
  // different calls of the same size.
  Work all_reduce_async(const Tensor& tensor, ReduceOp op = ReduceOp::Sum, uint64_t tag = 0);
  // Copies `root`'s tensor into every rank's (same shape and dtype everywhere; any dtype).
  void broadcast(const Tensor& tensor, int root = 0);
  Work broadcast_async(const Tensor& tensor, int root = 0);
  // Every rank's tensor, in rank order (same shape and dtype everywhere).
  TensorList all_gather(const Tensor& tensor);
  // Returns once every rank has called barrier().
  void barrier();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// --- the default group (torch.distributed's module-level state)

struct InitOptions {
  // -1 / empty: from the environment. torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and
  // MASTER_PORT; Open MPI's mpirun sets OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE (and Slurm's
  // srun SLURM_PROCID and SLURM_NTASKS); the address defaults to 127.0.0.1 and the port to 29500.
  int rank = -1;
  int world_size = -1;
  std::string master_addr;
  int master_port = -1;
  // "tcp" (the ring; "gloo" is accepted as its name in PyTorch scripts) or "nccl" (see
  // ProcessGroupOptions::backend).
  std::string backend = "tcp";
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
};

// Rank 0 hosts the store at master_addr:master_port; every rank connects and meets the others.
std::shared_ptr<ProcessGroup> init_process_group(InitOptions options = {});
bool is_initialized();
// The group init_process_group made; throws when there is none.
std::shared_ptr<ProcessGroup> default_group();
void destroy_process_group();
int get_rank();
int get_world_size();

// The environment's answer to InitOptions (exposed for launchers and tests).
InitOptions resolve_init_options(InitOptions options);

}  // namespace kiln::distributed
