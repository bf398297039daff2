// DataLoader: workers claim batch numbers in order from a shared counter, at most
// num_workers * prefetch_factor ahead of the consumer, and park finished batches in a reorder
// buffer; the consumer takes batch b only when it is there. Batch content is a pure function of
// (dataset, options, epoch), so any num_workers gives the same batches in the same order.
#include "kiln/data/dataloader.h"

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <random>
#include <thread>

namespace kiln::data {

std::vector<int64_t> epoch_permutation(int64_t n, bool shuffle, uint64_t seed, uint64_t epoch) {
  KILN_CHECK(n >= 0, "DataLoader", "expected a dataset size >= 0, got ", n);
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  if (!shuffle || n < 2) return perm;
  // seed_seq and mt19937_64 are fully specified by the standard, and the bounded draw below is
  // ours (std::uniform_int_distribution is not), so the order is the same with every library.
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(epoch), static_cast<uint32_t>(epoch >> 32)};
  std::mt19937_64 gen(seq);
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t bound = static_cast<uint64_t>(i) + 1;
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound: reject to stay unbiased
    uint64_t r;
    do r = gen();
    while (r < threshold);
    std::swap(perm[i], perm[static_cast<size_t>(r % bound)]);
  }
  return perm;
}

struct DataLoader::Epoch {
  std::shared_ptr<const Dataset> dataset;
  DataLoaderOptions opt;
  std::vector<int64_t> perm;
  int64_t num_batches = 0;

  // Consumer side (the iterating thread only).
  int64_t position = -1;
  Example current;
  bool failed = false;

  // Shared with workers, under mu.
  std::mutex mu;
  std::condition_variable cv_work, cv_ready;
  int64_t next_dispatch = 0;
  int64_t consumed = 0;
  bool stop = false;
  struct Slot {
    Example batch;
    std::exception_ptr error;
  };
  std::map<int64_t, Slot> ready;
  std::vector<std::thread> workers;

  ~Epoch() { shutdown(); }

  Example load(int64_t b) const {
    const int64_t begin = b * opt.batch_size;
    const int64_t end =
        std::min<int64_t>(begin + opt.batch_size, static_cast<int64_t>(perm.size()));
    return dataset->get_batch(std::span<const int64_t>(perm.data() + begin, end - begin));
  }

  void start() {
    const int64_t capacity = static_cast<int64_t>(opt.num_workers) * opt.prefetch_factor;
    for (int w = 0; w < opt.num_workers; ++w) {
      workers.emplace_back([this, capacity] {
        for (;;) {
          int64_t b;
          {
            std::unique_lock<std::mutex> lock(mu);
            cv_work.wait(lock, [&] {
              return stop || next_dispatch >= num_batches || next_dispatch - consumed < capacity;
            });
            if (stop || next_dispatch >= num_batches) return;
            b = next_dispatch++;
          }
          Slot slot;
          try {
            slot.batch = load(b);
          } catch (...) {
            slot.error = std::current_exception();
          }
          {
            std::lock_guard<std::mutex> lock(mu);
            ready.emplace(b, std::move(slot));
          }
          cv_ready.notify_all();
        }
      });
    }
  }

  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv_work.notify_all();
    for (auto& t : workers) t.join();
    workers.clear();
    ready.clear();
  }

  bool at_end() const { return failed || position >= num_batches; }

  void advance() {
    KILN_CHECK(!failed, "DataLoader", "this epoch stopped after an error");
    {
      std::lock_guard<std::mutex> lock(mu);
      KILN_CHECK(!stop, "DataLoader",
                 "this epoch was ended (a newer begin() started the next one, or the loader was "
                 "destroyed)");
    }
    current = Example{};
    if (++position >= num_batches) {
      shutdown();
      return;
    }
    if (opt.num_workers == 0) {
      try {
        current = load(position);
      } catch (...) {
        failed = true;
        throw;
      }
      return;
    }
    Slot slot;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv_ready.wait(lock, [&] { return ready.count(position) != 0; });
      auto it = ready.find(position);
      slot = std::move(it->second);
      ready.erase(it);
      consumed = position + 1;
    }
    cv_work.notify_all();
    if (slot.error) {
      failed = true;
      shutdown();
      std::rethrow_exception(slot.error);
    }
    current = std::move(slot.batch);
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  KILN_CHECK(dataset_ != nullptr, "DataLoader", "expected a dataset, got null");
  KILN_CHECK(options_.batch_size >= 1, "DataLoader", "expected batch_size >= 1, got ",
             options_.batch_size);
  KILN_CHECK(options_.num_workers >= 0, "DataLoader", "expected num_workers >= 0, got ",
             options_.num_workers);
  KILN_CHECK(options_.prefetch_factor >= 1, "DataLoader", "expected prefetch_factor >= 1, got ",
             options_.prefetch_factor);
  KILN_CHECK(options_.num_replicas >= 1, "DataLoader", "expected num_replicas >= 1, got ",
             options_.num_replicas);
  KILN_CHECK(options_.rank >= 0 && options_.rank < options_.num_replicas, "DataLoader",
             "expected a rank in [0, ", options_.num_replicas, "), got ", options_.rank);
  KILN_CHECK(options_.num_replicas == 1 || dataset_->size() > 0, "DataLoader",
             "cannot shard an empty dataset among ", options_.num_replicas, " replicas");
}

std::vector<int64_t> shard_order(const std::vector<int64_t>& order, int64_t num_replicas,
                                 int64_t rank) {
  if (num_replicas == 1) return order;
  const auto n = static_cast<int64_t>(order.size());
  const int64_t per_rank = (n + num_replicas - 1) / num_replicas;
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank));
  for (int64_t k = 0; k < per_rank; ++k) mine.push_back(order[(rank + k * num_replicas) % n]);
  return mine;
}

DataLoader::~DataLoader() {
  if (current_) current_->shutdown();
}

int64_t DataLoader::size() const {
  const int64_t r = options_.num_replicas;
  const int64_t n = r == 1 ? dataset_->size() : (dataset_->size() + r - 1) / r;
  const int64_t b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

DataLoader::Iterator DataLoader::begin() {
  if (current_) current_->shutdown();
  auto e = std::make_shared<Epoch>();
  e->dataset = dataset_;
  e->opt = options_;
  e->perm = shard_order(
      epoch_permutation(dataset_->size(), options_.shuffle, options_.seed, next_epoch_++),
      options_.num_replicas, options_.rank);
  e->num_batches = size();
  current_ = e;
  e->start();
  e->advance();
  return Iterator(std::move(e));
}

bool DataLoader::Iterator::at_end() const {
  return !epoch_ || epoch_->at_end();
}

Example& DataLoader::Iterator::operator*() const {
  KILN_CHECK(!at_end(), "DataLoader", "dereferencing an iterator past the last batch");
  return epoch_->current;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  KILN_CHECK(!at_end(), "DataLoader", "incrementing an iterator past the last batch");
  epoch_->advance();
  return *this;
}

bool DataLoader::Iterator::operator==(const Iterator& other) const {
  const bool a = at_end(), b = other.at_end();
  if (a || b) return a == b;
  return epoch_ == other.epoch_;
}

}  // namespace kiln::data
