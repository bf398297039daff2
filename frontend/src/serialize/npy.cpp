// NumPy .npy files as Tensors, on the runtime's reader and writer (kiln/runtime/npy.h).
#include "kiln/runtime/npy.h"

#include <cstring>

#include "kiln/ops.h"
#include "kiln/serialize.h"

namespace kiln {

Tensor read_npy(const std::string& path) {
  npy::Array a = npy::read(path);
  Tensor t = kiln::empty(Dims(a.shape), TensorOptions(a.dtype));
  if (!a.data.empty()) std::memcpy(t.data(), a.data.data(), a.data.size());
  return t;
}

void write_npy(const std::string& path, const Tensor& tensor) {
  KILN_CHECK(tensor.defined(), "write_npy", "expected a defined tensor");
  const Tensor c = tensor.detach().contiguous();
  const Dims& sizes = c.sizes();
  npy::write(path, c.dtype(), std::vector<int64_t>(sizes.begin(), sizes.end()), c.data());
}

}  // namespace kiln
