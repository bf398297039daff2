// DistributedDataParallel's reducer: gradient hooks mark parameters ready, full buckets start
// their all-reduce in bucket order, and a callback at the end of backward finishes the rest.

#include "kiln/distributed/data_parallel.h"

#include <map>
#include <unordered_set>

#include "copy_values.h"
#include "kiln/autograd.h"
#include "kiln/ops.h"

namespace kiln::distributed {
namespace {

// Copies src into dst (same element count) unless they are the same memory.
void copy_flat(const Tensor& dst, const Tensor& src) {
  if (dst.impl()->raw_data() == src.impl()->raw_data() && src.is_contiguous()) return;
  detail::copy_values(dst, src.reshape(dst.sizes()));
}

// The parameters the reducer averages: those that require grad, each once.
TensorList trainable_parameters(const nn::Module& module) {
  TensorList out;
  std::unordered_set<const TensorImpl*> seen;
  for (const Tensor& p : module.parameters()) {
    if (p.requires_grad() && seen.insert(p.impl()).second) out.push_back(p);
  }
  return out;
}

Tensor empty_on(int64_t numel, DType dtype, Device device) {
  return Tensor(kiln::empty(Dims{numel}, dtype, device));
}

}  // namespace

void broadcast_coalesced(ProcessGroup& group, const TensorList& tensors, int root) {
  if (group.size() == 1) return;
  std::map<std::pair<Device, DType>, TensorList> groups;
  for (const Tensor& t : tensors) {
    if (t.defined() && t.numel() > 0) groups[{t.device(), t.dtype()}].push_back(t.detach());
  }
  for (auto& [key, list] : groups) {
    int64_t total = 0;
    for (const Tensor& t : list) total += t.numel();
    Tensor flat = empty_on(total, key.second, key.first);
    int64_t at = 0;
    for (const Tensor& t : list) {
      copy_flat(flat.narrow(0, at, t.numel()), t);
      at += t.numel();
    }
    group.broadcast(flat, root);
    at = 0;
    for (const Tensor& t : list) {
      copy_flat(t, flat.narrow(0, at, t.numel()));
      t.impl()->storage()->bump_version();
      at += t.numel();
    }
  }
}

struct DistributedDataParallel::Reducer
    : std::enable_shared_from_this<DistributedDataParallel::Reducer> {
  struct Bucket {
    std::vector<size_t> params;  // indices into `params`
    std::vector<int64_t> offsets;
    Tensor flat;
    size_t pending = 0;
    Work work;
  };

  std::shared_ptr<ProcessGroup> group;
  TensorList params;
  std::vector<size_t> handles;  // hook handles, per parameter
  std::vector<size_t> bucket_of;
  std::vector<Bucket> buckets;
  std::vector<bool> ready;
  size_t next_launch = 0;
  bool callback_queued = false;
  bool sync = true;
  bool at_end = false;  // finish() is launching
  // Training forwards so far: with the bucket, the tag of each all-reduce, so that ranks whose
  // steps went out of step (a backward that failed on one of them) get an error, not each
  // other's gradients of another step.
  uint64_t step = 0;
  DistributedDataParallel::Stats stats;

  void build(double bucket_cap_mb) {
    const double cap = bucket_cap_mb * 1024 * 1024;
    bucket_of.assign(params.size(), 0);
    ready.assign(params.size(), false);
    // Reverse registration order: backward finishes the last layers first. A bucket holds one
    // dtype; it closes once it reaches the cap.
    std::map<DType, size_t> open;  // dtype -> bucket index being filled
    for (size_t k = params.size(); k-- > 0;) {
      const Tensor& p = params[k];
      auto it = open.find(p.dtype());
      if (it == open.end()) {
        buckets.emplace_back();
        it = open.emplace(p.dtype(), buckets.size() - 1).first;
      }
      Bucket& b = buckets[it->second];
      const int64_t at = b.offsets.empty() ? 0 : b.offsets.back() + params[b.params.back()].numel();
      b.params.push_back(k);
      b.offsets.push_back(at);
      bucket_of[k] = it->second;
      const double bytes = double(at + p.numel()) * double(dtype_size(p.dtype()));
      if (bytes >= cap) open.erase(it);
    }
    for (Bucket& b : buckets) {
      const int64_t total = b.offsets.back() + params[b.params.back()].numel();
      const Tensor& first = params[b.params.front()];
      b.flat = empty_on(total, first.dtype(), first.device());
      b.pending = b.params.size();
    }
  }

  void on_grad_ready(size_t k) {
    if (!sync) return;
    if (!callback_queued) {
      callback_queued = true;
      autograd::queue_callback([self = shared_from_this()] { self->finish(); });
    }
    if (ready[k]) return;
    ready[k] = true;
    if (--buckets[bucket_of[k]].pending == 0) launch_ready();
  }

  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) launch(next_launch++);
  }

  void launch(size_t index) {
    Bucket& b = buckets[index];
    for (size_t j = 0; j < b.params.size(); ++j) {
      const Tensor& p = params[b.params[j]];
      Tensor slot = b.flat.narrow(0, b.offsets[j], p.numel());
      Tensor g = p.grad();
      if (g.defined()) {
        copy_flat(slot, g);
      } else {
        autograd::NoGradGuard no_grad;
        slot.zero_();
      }
    }
    b.work = group->all_reduce_async(b.flat, ReduceOp::Avg, (step << 20) | (index + 1));
    ++(at_end ? stats.buckets_at_end : stats.buckets_overlapped);
  }

  void reset() {
    callback_queued = false;
    at_end = false;
    next_launch = 0;
    ready.assign(params.size(), false);
    for (Bucket& b : buckets) b.pending = b.params.size();
  }

  // A backward that threw after its first gradient never ran finish(): its started all-reduces
  // are waited for (their buffers are about to be refilled) and the reducer reset; the caller
  // hears of it, since that step's gradients were never averaged.
  void recover_from_failed_backward() {
    if (!callback_queued) return;
    std::string errors;
    for (Bucket& b : buckets) {
      if (!b.work.valid()) continue;
      try {
        b.work.wait();
      } catch (const Error& e) {
        errors = e.what();
      }
      b.work = Work();
    }
    reset();
    fail("DistributedDataParallel",
         "the previous backward ended with an error before its gradients were averaged (they "
         "are this rank's alone; zero them before the next step)",
         errors.empty() ? "" : "; its all-reduce also failed: ", errors);
  }

  // The end of backward: start what a missing gradient held back, wait, hand out the averages.
  void finish() {
    struct Reset {
      Reducer& r;
      ~Reset() { r.reset(); }
    } reset{*this};
    for (Bucket& b : buckets) b.pending = 0;
    at_end = true;
    launch_ready();
    for (Bucket& b : buckets) {
      b.work.wait();
      b.work = Work();
      for (size_t j = 0; j < b.params.size(); ++j) {
        Tensor& p = params[b.params[j]];
        p.set_grad(b.flat.narrow(0, b.offsets[j], p.numel()).view(p.sizes()));
      }
    }
  }
};

DistributedDataParallel::DistributedDataParallel(nn::ModulePtr module,
                                                 DistributedDataParallelOptions options)
    : nn::Module("DistributedDataParallel"),
      module_(std::move(module)),
      group_(options.group ? options.group : default_group()),
      options_(std::move(options)),
      reducer_(std::make_shared<Reducer>()) {
  KILN_CHECK(module_, "DistributedDataParallel", "expected a module, got null");
  KILN_CHECK(options_.bucket_cap_mb > 0, "DistributedDataParallel",
             "expected bucket_cap_mb > 0, got ", options_.bucket_cap_mb);
  register_module("module", module_);
  const TensorList params = module_->parameters();
  for (const Tensor& p : params) {
    KILN_CHECK(p.device() == params.front().device(), "DistributedDataParallel",
               "expected every parameter on one device, got ", device_name(params.front().device()),
               " and ", device_name(p.device()));
  }
  broadcast_coalesced(*group_, module_->parameters());
  broadcast_coalesced(*group_, module_->buffers());

  Reducer& r = *reducer_;
  r.group = group_;
  r.params = trainable_parameters(*module_);
  for (const Tensor& p : r.params) {
    KILN_CHECK(p.dtype() == DType::Float32 || p.dtype() == DType::Float64,
               "DistributedDataParallel", "expected float32 or float64 parameters, got ",
               dtype_name(p.dtype()));
  }
  r.build(options_.bucket_cap_mb);
  for (size_t k = 0; k < r.params.size(); ++k) {
    std::weak_ptr<Reducer> weak = reducer_;
    r.handles.push_back(r.params[k].register_post_accumulate_grad_hook([weak, k](const Tensor&) {
      if (auto reducer = weak.lock()) reducer->on_grad_ready(k);
    }));
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (size_t k = 0; k < reducer_->params.size(); ++k) {
    reducer_->params[k].remove_hook(reducer_->handles[k]);
  }
}

int DistributedDataParallel::bucket_count() const {
  return static_cast<int>(reducer_->buckets.size());
}

DistributedDataParallel::Stats DistributedDataParallel::stats() const {
  return reducer_->stats;
}

void DistributedDataParallel::sync_buffers() {
  if (options_.broadcast_buffers && is_training() && group_->size() > 1) {
    broadcast_coalesced(*group_, module_->buffers());
  }
}

void DistributedDataParallel::prepare_forward() {
  reducer_->recover_from_failed_backward();
  if (is_training() && autograd::grad_enabled()) ++reducer_->step;
  // Module::to() after wrapping puts new tensors in the slots; the hooks stayed on the old ones.
  const TensorList now = trainable_parameters(*module_);
  bool same = now.size() == reducer_->params.size();
  for (size_t k = 0; same && k < now.size(); ++k)
    same = now[k].impl() == reducer_->params[k].impl();
  KILN_CHECK(same, "DistributedDataParallel",
             "the module's parameters changed after it was wrapped (Module::to or a replaced "
             "parameter): wrap the module after moving it");
  sync_buffers();
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  prepare_forward();
  return (*module_)(input);
}

TensorList DistributedDataParallel::forward_list(const TensorList& inputs) {
  prepare_forward();
  return module_->call(inputs);
}

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : ddp_(ddp), prev_(ddp.reducer_->sync) {
  ddp_.reducer_->sync = false;
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() {
  ddp_.reducer_->sync = prev_;
}

}  // namespace kiln::distributed
