#pragma once
// Where a tensor's bytes live. A CUDA tensor's storage holds a device address: CPU kernels never
// see it (TensorImpl::data() refuses), only the CUDA backend's kernels (TensorImpl::raw_data()).

#include <cstdint>
#include <string_view>

namespace kiln {

enum class Device : uint8_t { CPU = 0, CUDA = 1 };

constexpr std::string_view device_name(Device d) {
  return d == Device::CPU ? "cpu" : "cuda";
}

}  // namespace kiln
