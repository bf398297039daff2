#pragma once
// NCCL (NVIDIA's collective library), loaded with dlopen at first use like the rest of the CUDA
// backend: a communicator over the ranks of a process group, one device each, and the
// collectives the process group needs, enqueued on a stream (they complete in stream order).
// Meeting the other ranks (the unique id rank 0 makes) is the caller's job: the process group
// passes it through its store.

#include <array>
#include <cstddef>

#include "kiln/runtime/cuda/caching_allocator.h"
#include "kiln/runtime/dtype.h"

namespace kiln::cuda::nccl {

enum class Reduction { Sum, Product, Max, Min, Avg };

using UniqueId = std::array<char, 128>;

// NCCL's version code (22809 for 2.28.9). Throws kiln::Error(op, why) where NCCL cannot be loaded
// (not installed, or kiln built without its header).
int version(const char* op = "nccl");
// A new communicator id (rank 0 makes it; every rank passes it to its Communicator). Needs no
// device.
UniqueId unique_id(const char* op = "nccl");

class Communicator {
 public:
  // Joins the communicator `id` as `rank` of `size`, on this process's device (every rank
  // calls it; it returns once all have). Throws kiln::Error naming NCCL's reason.
  Communicator(const UniqueId& id, int rank, int size);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // In place on `count` elements at `data` (float32, float64, int32, int64, float16, bfloat16,
  // int8, uint8; Avg for floating types), ordered on `stream`.
  void all_reduce(DevicePtr data, size_t count, DType dtype, Reduction op, StreamId stream);
  void broadcast(DevicePtr data, size_t count, DType dtype, int root, StreamId stream);
  // recv holds size * count elements, rank r's at r * count.
  void all_gather(DevicePtr send, DevicePtr recv, size_t count, DType dtype, StreamId stream);
  // Stops the communicator's work at once (a peer failed): later calls fail.
  void abort();

 private:
  void* comm_ = nullptr;  // ncclComm_t
};

}  // namespace kiln::cuda::nccl
