#pragma once
// The runtime's thread pool: parallel_for over [begin, end) split into chunks of at least `grain`
// iterations. The caller runs one share itself; a parallel_for called from inside a worker runs
// serially (no oversubscription when kernels nest). Size from KILN_NUM_THREADS, else the core count.

#include <cstdint>
#include <functional>

namespace kiln {

int num_threads();
// Takes effect for later parallel_for calls; n >= 1.
void set_num_threads(int n);
bool in_parallel_region();

using RangeFn = std::function<void(int64_t begin, int64_t end)>;
void parallel_for_impl(int64_t begin, int64_t end, int64_t grain, const RangeFn& fn);

template <typename Fn>
inline void parallel_for(int64_t begin, int64_t end, int64_t grain, Fn&& fn) {
  if (end <= begin) return;
  if (end - begin <= grain || num_threads() == 1 || in_parallel_region()) {
    fn(begin, end);
    return;
  }
  parallel_for_impl(begin, end, grain, RangeFn(std::forward<Fn>(fn)));
}

}  // namespace kiln
