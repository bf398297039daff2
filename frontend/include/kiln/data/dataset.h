#pragma once
// Datasets (torch::data::datasets): a Dataset maps an index in [0, size()) to an Example (data,
// target). get() must be safe to call from several threads at once (DataLoader workers do).

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::data {

struct Example {
  Tensor data;
  Tensor target;  // may be undefined for unlabeled data
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  // A batch: data and targets stacked along a new dim 0. The default stacks get(i) for each index;
  // datasets that hold whole tensors override it with one index_select.
  virtual Example get_batch(std::span<const int64_t> indices) const;
};

// Rows of `data` and `targets` (dim 0 is the example dim; both must agree on it).
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(Tensor data, Tensor targets = {});
  int64_t size() const override;
  Example get(int64_t index) const override;
  Example get_batch(std::span<const int64_t> indices) const override;
  const Tensor& data() const { return data_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor data_, targets_;
};

// Applies `data_fn` (and `target_fn` if given) to every example of `base`, lazily.
class MapDataset : public Dataset {
 public:
  using Fn = std::function<Tensor(const Tensor&)>;
  MapDataset(std::shared_ptr<const Dataset> base, Fn data_fn, Fn target_fn = {});
  int64_t size() const override { return base_->size(); }
  Example get(int64_t index) const override;  // batches are collated from get(i)

 private:
  std::shared_ptr<const Dataset> base_;
  Fn data_fn_, target_fn_;
};

// Stacks examples into one batch (the DataLoader's collate step); throws kiln::Error naming the
// first example whose shape or dtype differs.
Example collate(const std::vector<Example>& examples);

}  // namespace kiln::data
