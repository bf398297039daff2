#pragma once
// Data-parallel training (PyTorch's DistributedDataParallel): every rank holds a replica of the
// model and a shard of each batch; after backward every rank's gradients are the average over
// ranks, so the same optimizer step keeps the replicas equal.
//
//   kiln::distributed::init_process_group();           // rank and world size from the launcher
//   auto model = std::make_shared<kiln::distributed::DistributedDataParallel>(make_model());
//   kiln::optim::SGD opt(model->parameters(), 0.1);
//   loss_fn(model->forward(local_batch), local_target).backward();   // gradients averaged here
//   opt.step();
//
// The gradients travel in buckets of about bucket_cap_mb, filled in reverse parameter order (the
// order backward produces them). A bucket's all-reduce starts on the group's thread as soon as
// its last gradient is accumulated, while backward goes on computing the earlier layers'; the
// end of backward waits for the rest. Buckets start in the same order on every rank. A parameter
// that got no gradient in a pass adds its current .grad (zeros when it has none), as PyTorch
// does with find_unused_parameters. Afterwards each parameter's .grad is a view of its bucket
// (PyTorch's gradient_as_bucket_view): the next synchronized backward overwrites it.
//
// The parameters may be on the CPU or on a CUDA device (all on one); the buckets live there.
// A backward that throws midway leaves that step's gradients local: the next forward completes
// the all-reduces it started, resets, and throws to say so (PyTorch raises there too). Each
// bucket's all-reduce is tagged with the step (training-mode forwards with grad enabled, which
// every rank must run alike) and the bucket: ranks that fell out of step fail with both sides
// named instead of averaging different steps' gradients.
//
// Construction copies rank 0's parameters and buffers to every rank; with broadcast_buffers, each
// training-mode forward copies rank 0's buffers (batch norm's running statistics) again. Move
// the model to its device and dtype before wrapping it: the gradient hooks live on its parameters.

#include <memory>

#include "kiln/distributed/process_group.h"
#include "kiln/nn/module.h"

namespace kiln::distributed {

struct DistributedDataParallelOptions {
  // null: the default group (init_process_group).
  std::shared_ptr<ProcessGroup> group;
  double bucket_cap_mb = 25;
  bool broadcast_buffers = true;
};

class DistributedDataParallel : public nn::Module {
 public:
  explicit DistributedDataParallel(nn::ModulePtr module,
                                   DistributedDataParallelOptions options = {});
  ~DistributedDataParallel() override;

  Tensor forward(const Tensor& input) override;
  TensorList forward_list(const TensorList& inputs) override;
  const nn::ModulePtr& module() const { return module_; }
  int bucket_count() const;
  // Since construction: buckets whose all-reduce started while backward still ran (overlapped),
  // and those started by the end of backward (the last bucket, or ones held back by a parameter
  // without a gradient).
  struct Stats {
    int64_t buckets_overlapped = 0;
    int64_t buckets_at_end = 0;
  };
  Stats stats() const;

  // While the guard lives, backward accumulates gradients locally without communicating; the
  // first backward after it averages the accumulated sums (gradient accumulation over micro-
  // batches at one all-reduce per step).
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool prev_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  struct Reducer;

 private:
  void sync_buffers();
  // Before each forward: recovers from a backward that failed midway (and says so), checks the
  // module still holds the parameters the hooks are on, copies rank 0's buffers.
  void prepare_forward();

  nn::ModulePtr module_;
  std::shared_ptr<ProcessGroup> group_;
  DistributedDataParallelOptions options_;
  std::shared_ptr<Reducer> reducer_;
};

// Copies rank `root`'s values into `tensors` on every rank, one broadcast per dtype.
void broadcast_coalesced(ProcessGroup& group, const TensorList& tensors, int root = 0);

}  // namespace kiln::distributed
