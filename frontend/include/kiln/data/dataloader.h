#pragma once
// DataLoader: batches of a Dataset, optionally shuffled with a seed, loaded by background worker
// threads into a bounded prefetch queue. Batch order and content depend only on the dataset, the
// options and the epoch number — never on num_workers or thread timing: batch b of epoch e is
// collate(get(perm_e[b*B .. b*B+B))) with perm_e a Fisher-Yates shuffle seeded by (seed, e).
//
//   DataLoader loader(dataset, {.batch_size = 64, .shuffle = true, .seed = 1, .num_workers = 2});
//   for (auto& batch : loader) { ... batch.data, batch.target ... }   // one epoch
//
// Each begin() starts the next epoch (and ends an unfinished previous one). Breaking out of the
// loop or destroying the loader mid-epoch stops and joins the workers.

#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;
  bool drop_last = false;  // drop a last batch smaller than batch_size
  int num_workers = 0;     // 0: load in the calling thread
  // Batches loaded ahead, per worker (the queue holds at most num_workers * prefetch_factor).
  int prefetch_factor = 2;
  // Data-parallel sharding (PyTorch's DistributedSampler): each epoch's order, the same on every
  // rank (same seed), is wrapped around to a multiple of num_replicas and this loader takes
  // every num_replicas-th element from position `rank`, so the ranks see disjoint examples
  // (except the few repeated to even them out) and the same number of batches. Call
  // set_epoch(e) on every rank so that their epochs shuffle alike.
  int64_t num_replicas = 1;
  int64_t rank = 0;
};

// The permutation DataLoader uses for `epoch` (identity when !shuffle).
std::vector<int64_t> epoch_permutation(int64_t n, bool shuffle, uint64_t seed, uint64_t epoch);
// Rank `rank`'s share of `order` among num_replicas (see DataLoaderOptions::num_replicas).
std::vector<int64_t> shard_order(const std::vector<int64_t>& order, int64_t num_replicas,
                                 int64_t rank);

class DataLoader {
  struct Epoch;

 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Example;
    using difference_type = std::ptrdiff_t;
    using pointer = Example*;
    using reference = Example&;

    Iterator() = default;
    Example& operator*() const;
    Example* operator->() const { return &**this; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const;
    bool operator!=(const Iterator& other) const { return !(*this == other); }

   private:
    friend class DataLoader;
    explicit Iterator(std::shared_ptr<Epoch> epoch) : epoch_(std::move(epoch)) {}
    bool at_end() const;
    std::shared_ptr<Epoch> epoch_;
  };

  Iterator begin();
  Iterator end() { return Iterator(); }

  // Batches per epoch.
  int64_t size() const;
  // Epochs started so far (the next begin() uses this number).
  uint64_t epoch() const { return next_epoch_; }
  void set_epoch(uint64_t epoch) { next_epoch_ = epoch; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  uint64_t next_epoch_ = 0;
  std::shared_ptr<Epoch> current_;
};

}  // namespace kiln::data
