#include "ring.h"

#include <algorithm>

#include "kiln/runtime/error.h"
#include "kiln/runtime/target.h"

namespace kiln::distributed::detail {
namespace {

template <typename T>
void reduce_typed(T* dst, const T* src, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:  // summed here, divided once at the end
      for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
      break;
    case ReduceOp::Product:
      for (int64_t i = 0; i < n; ++i) dst[i] *= src[i];
      break;
    case ReduceOp::Min:  // a NaN wins, as in torch.minimum
      for (int64_t i = 0; i < n; ++i)
        dst[i] = (src[i] < dst[i] || src[i] != src[i]) ? src[i] : dst[i];
      break;
    case ReduceOp::Max:
      for (int64_t i = 0; i < n; ++i)
        dst[i] = (src[i] > dst[i] || src[i] != src[i]) ? src[i] : dst[i];
      break;
  }
}

template <typename T>
void divide_typed(T* data, int64_t n, int by) {
  const T count = static_cast<T>(by);
  for (int64_t i = 0; i < n; ++i) data[i] /= count;
}

// The broadcast chain forwards in pieces of this size so that ranks down the chain start
// receiving before the root has sent everything.
constexpr size_t kBroadcastPiece = size_t{1} << 20;

}  // namespace

void reduce_into(void* dst, const void* src, int64_t n, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::Float32:
      return reduce_typed(static_cast<float*>(dst), static_cast<const float*>(src), n, op);
    case DType::Float64:
      return reduce_typed(static_cast<double*>(dst), static_cast<const double*>(src), n, op);
    case DType::Int32:
      return reduce_typed(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), n, op);
    case DType::Int64:
      return reduce_typed(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), n, op);
    default:
      fail("all_reduce", "expected a float32, float64, int32 or int64 tensor, got ", dtype);
  }
}

void Ring::all_reduce(void* data, int64_t numel, DType dtype, ReduceOp op, const char* name) {
  const size_t es = dtype_size(dtype);
  auto* bytes = static_cast<char*>(data);
  const int n = size;
  if (n > 1) {
    auto begin = [&](int chunk) { return numel * chunk / n; };
    auto count = [&](int chunk) { return begin(chunk + 1) - begin(chunk); };
    // Reduce-scatter: after n-1 steps this rank holds chunk rank+1 summed over all ranks. Each
    // step moves its chunks in pieces and reduces a piece as soon as it arrived, while it is still
    // in the L2 (a whole chunk received first would be read back from memory).
    const int64_t piece =
        std::max<int64_t>(1, rt::active_target().l2_bytes / 4 / static_cast<int64_t>(es));
    scratch.resize(static_cast<size_t>(piece) * es);
    for (int s = 0; s < n - 1; ++s) {
      const int send = (rank - s + n) % n, recv = (rank - s - 1 + n) % n;
      const int64_t longest = std::max(count(send), count(recv));
      for (int64_t at = 0; at < longest; at += piece) {
        const int64_t out = std::clamp<int64_t>(count(send) - at, 0, piece);
        const int64_t in = std::clamp<int64_t>(count(recv) - at, 0, piece);
        send_recv(next, bytes + (begin(send) + at) * es, out * es, next_name, prev, scratch.data(),
                  in * es, prev_name, deadline(), name);
        reduce_into(bytes + (begin(recv) + at) * es, scratch.data(), in, dtype, op);
      }
    }
    // All-gather: pass the finished chunks around.
    for (int s = 0; s < n - 1; ++s) {
      const int send = (rank + 1 - s + n) % n, recv = (rank - s + n) % n;
      send_recv(next, bytes + begin(send) * es, count(send) * es, next_name, prev,
                bytes + begin(recv) * es, count(recv) * es, prev_name, deadline(), name);
    }
  }
  if (op == ReduceOp::Avg) {
    if (dtype == DType::Float32) divide_typed(static_cast<float*>(data), numel, n);
    if (dtype == DType::Float64) divide_typed(static_cast<double*>(data), numel, n);
  }
}

void Ring::broadcast(void* data, size_t bytes, int root, const char* name) {
  if (size == 1) return;
  const int position = (rank - root + size) % size;  // 0 at the root, size-1 at the chain's end
  auto* p = static_cast<char*>(data);
  for (size_t at = 0; at < bytes; at += kBroadcastPiece) {
    const size_t piece = std::min(kBroadcastPiece, bytes - at);
    if (position > 0) prev.recv_all(p + at, piece, deadline(), name, prev_name);
    if (position < size - 1) next.send_all(p + at, piece, deadline(), name, next_name);
  }
}

void Ring::all_gather(const std::vector<void*>& parts, size_t bytes, const char* name) {
  const int n = size;
  for (int s = 0; s < n - 1; ++s) {
    const int send = (rank - s + n) % n, recv = (rank - s - 1 + n) % n;
    send_recv(next, parts[send], bytes, next_name, prev, parts[recv], bytes, prev_name, deadline(),
              name);
  }
}

}  // namespace kiln::distributed::detail
