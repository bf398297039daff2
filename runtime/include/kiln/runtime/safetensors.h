#pragma once
// Writing .safetensors from raw buffers, for programs that link only kiln_runtime (`kiln train`'s
// loop, the AOT executable of a training step); the eager frontend's write_safetensors
// (kiln/serialize.h) wraps the same code in Tensors, and reads the files.
//
// Layout: u64 LE header length N, N bytes of JSON header ({"name": {"dtype", "shape",
// "data_offsets": [begin, end)}, ..., "__metadata__": {strings}}), then the data buffer.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/runtime/dtype.h"

namespace kiln::safetensors {

struct Entry {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // contiguous, C order
};

// The format's names of kiln's dtypes ("F32", "BF16", ...), and back (std::nullopt for a name
// kiln has no dtype for).
const char* format_dtype_name(DType dtype);
std::optional<DType> dtype_from_format_name(std::string_view name);

// The file's bytes. Names must be unique and not "__metadata__" (kiln::Error names the
// offender, as `op`).
std::vector<uint8_t> serialize(const std::vector<Entry>& entries,
                               const std::vector<std::pair<std::string, std::string>>& metadata,
                               const char* op = "write_safetensors");
void write(const std::string& path, const std::vector<Entry>& entries,
           const std::vector<std::pair<std::string, std::string>>& metadata = {},
           const char* op = "write_safetensors");

}  // namespace kiln::safetensors
