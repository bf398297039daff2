// Linked with only kiln + kiln_runtime; check_ldd.sh asserts it loads no LLVM/MLIR library.
#include <cstdio>

#include "kiln/kiln.h"

int main() {
  auto t = kiln::zeros(kiln::Dims{2, 3}, kiln::DType::Float32);
  std::printf("kiln %s: %lld elements\n", kiln::version(), static_cast<long long>(t->numel()));
  return t->numel() == 6 ? 0 : 1;
}
