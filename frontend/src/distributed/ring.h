#pragma once
// The ring collectives over raw buffers: rank r sends to rank r+1 (`next`) and receives from
// rank r-1 (`prev`). Every rank of the ring runs the same function with the same sizes.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/distributed/process_group.h"
#include "kiln/runtime/dtype.h"
#include "socket.h"

namespace kiln::distributed::detail {

struct Ring {
  int rank = 0;
  int size = 1;
  Socket next, prev;
  std::string next_name, prev_name;  // "rank 3", for errors
  std::chrono::milliseconds timeout{};
  std::vector<char> scratch;  // reduce-scatter's piece buffer, kept between collectives

  Clock::time_point deadline() const { return Clock::now() + timeout; }

  // In place; every rank ends with the same bytes (each element is reduced once, on one rank,
  // in ring order, then copied).
  void all_reduce(void* data, int64_t numel, DType dtype, ReduceOp op, const char* name);
  void broadcast(void* data, size_t bytes, int root, const char* name);
  // parts[i] is rank i's buffer of `bytes`; parts[rank] holds this rank's data on entry.
  void all_gather(const std::vector<void*>& parts, size_t bytes, const char* name);
};

// dst[i] = dst[i] op src[i] for n elements.
void reduce_into(void* dst, const void* src, int64_t n, DType dtype, ReduceOp op);

}  // namespace kiln::distributed::detail
