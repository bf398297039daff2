// Decoding of kiln_abi_* operand descriptors (layout documented in kiln/runtime/abi.h).

#include "decode.h"

namespace kiln::abi {

Args::Args(void* const* data, const int64_t* desc, const char* op) : op_(op) {
  const int64_t n = *desc++;
  tensors_.reserve(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    const int64_t dtype = *desc++;
    const int64_t rank = *desc++;
    Dims sizes(std::span<const int64_t>(desc, static_cast<size_t>(rank)));
    desc += rank;
    Dims strides(std::span<const int64_t>(desc, static_cast<size_t>(rank)));
    desc += rank;
    const int64_t offset = *desc++;
    if (dtype < 0 || data[k] == nullptr) {
      if (dtype >= 0) unbacked_.push_back({static_cast<size_t>(k), dtype, std::move(sizes)});
      tensors_.push_back(nullptr);
      continue;
    }
    KILN_CHECK(dtype < kNumDTypes, op, "operand ", k, " has an invalid dtype code ", dtype);
    const auto dt = static_cast<DType>(dtype);
    // The extent the view reaches (from its data pointer), so the borrowed storage covers it.
    int64_t extent = offset + 1;
    for (int64_t d = 0; d < rank; ++d) {
      if (sizes[d] == 0) extent = 0;
      if (extent > 0) extent += (sizes[d] - 1) * strides[d];
    }
    auto storage = make_intrusive<Storage>(
        data[k], static_cast<size_t>(std::max<int64_t>(extent, 0)) * dtype_size(dt),
        std::function<void(void*)>());
    tensors_.push_back(make_intrusive<TensorImpl>(std::move(storage), std::move(sizes),
                                                  std::move(strides), offset, dt));
  }
  attr_ = desc;
}

const Dims& Args::shape_without_data(size_t i, DType want) const {
  for (const Unbacked& u : unbacked_) {
    if (u.index != i) continue;
    KILN_CHECK(u.dtype == static_cast<int64_t>(want), op_, "expected operand ", i, " of dtype ",
               dtype_name(want), ", got dtype code ", u.dtype);
    return u.sizes;
  }
  KILN_CHECK(false, op_, "expected operand ", i, " described without data, got ",
             opt(i) ? "data" : "an absent operand");
  __builtin_unreachable();
}

TensorImpl& Args::t(size_t i) const {
  TensorImpl* p = opt(i);
  KILN_CHECK(p != nullptr, op_, "operand ", i, " is required but absent");
  return *p;
}

}  // namespace kiln::abi
