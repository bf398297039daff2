// Datasets and collation.
#include "kiln/data/dataset.h"

#include "kiln/ops.h"

namespace kiln::data {

namespace {
void check_index(int64_t index, int64_t size, const char* op) {
  KILN_CHECK(index >= 0 && index < size, op, "index ", index, " is out of range [0, ", size, ")");
}
Tensor index_tensor(std::span<const int64_t> indices, int64_t size, const char* op) {
  Tensor idx = kiln::empty({static_cast<int64_t>(indices.size())}, TensorOptions(DType::Int64));
  int64_t* p = idx.data_ptr<int64_t>();
  for (size_t i = 0; i < indices.size(); ++i) {
    check_index(indices[i], size, op);
    p[i] = indices[i];
  }
  return idx;
}
}  // namespace

Example Dataset::get_batch(std::span<const int64_t> indices) const {
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (int64_t i : indices) examples.push_back(get(i));
  return collate(examples);
}

Example collate(const std::vector<Example>& examples) {
  KILN_CHECK(!examples.empty(), "collate", "expected at least one example, got none");
  const Example& first = examples.front();
  KILN_CHECK(first.data.defined(), "collate", "example 0 has no data");
  const bool has_target = first.target.defined();
  TensorList data, targets;
  data.reserve(examples.size());
  if (has_target) targets.reserve(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    const Example& e = examples[i];
    KILN_CHECK(e.data.defined(), "collate", "example ", i, " has no data");
    KILN_CHECK(e.data.sizes() == first.data.sizes() && e.data.dtype() == first.data.dtype(),
               "collate", "example ", i, " has data ", describe(*e.data.impl()), ", example 0 has ",
               describe(*first.data.impl()));
    KILN_CHECK(
        e.target.defined() == has_target, "collate", "example ", i,
        has_target ? " has no target, example 0 has one" : " has a target, example 0 has none");
    if (has_target) {
      KILN_CHECK(
          e.target.sizes() == first.target.sizes() && e.target.dtype() == first.target.dtype(),
          "collate", "example ", i, " has target ", describe(*e.target.impl()), ", example 0 has ",
          describe(*first.target.impl()));
      targets.push_back(e.target);
    }
    data.push_back(e.data);
  }
  Example batch;
  batch.data = stack(data, 0);
  if (has_target) batch.target = stack(targets, 0);
  return batch;
}

TensorDataset::TensorDataset(Tensor data, Tensor targets)
    : data_(std::move(data)), targets_(std::move(targets)) {
  KILN_CHECK(data_.defined() && data_.dim() >= 1, "TensorDataset",
             "expected data with at least one dim (examples along dim 0)");
  if (targets_.defined()) {
    KILN_CHECK(targets_.dim() >= 1 && targets_.size(0) == data_.size(0), "TensorDataset",
               "expected targets with ", data_.size(0), " rows along dim 0, got ",
               describe(*targets_.impl()));
  }
}

int64_t TensorDataset::size() const {
  return data_.size(0);
}

Example TensorDataset::get(int64_t index) const {
  check_index(index, size(), "TensorDataset");
  Example e;
  e.data = data_.select(0, index);
  if (targets_.defined()) e.target = targets_.select(0, index);
  return e;
}

Example TensorDataset::get_batch(std::span<const int64_t> indices) const {
  KILN_CHECK(!indices.empty(), "TensorDataset", "expected a non-empty batch of indices");
  Tensor idx = index_tensor(indices, size(), "TensorDataset");
  Example e;
  e.data = index_select(data_, 0, idx);
  if (targets_.defined()) e.target = index_select(targets_, 0, idx);
  return e;
}

MapDataset::MapDataset(std::shared_ptr<const Dataset> base, Fn data_fn, Fn target_fn)
    : base_(std::move(base)), data_fn_(std::move(data_fn)), target_fn_(std::move(target_fn)) {
  KILN_CHECK(base_ != nullptr, "MapDataset", "expected a dataset, got null");
}

Example MapDataset::get(int64_t index) const {
  Example e = base_->get(index);
  if (data_fn_) e.data = data_fn_(e.data);
  if (target_fn_ && e.target.defined()) e.target = target_fn_(e.target);
  return e;
}

}  // namespace kiln::data
