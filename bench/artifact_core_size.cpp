// A program with only the artifact core (loader, verifier, executor, C++ API) and an empty
// kernel registry: its stripped size is the "core runtime" number of issue #9. With
// KILN_SIZE_WITH_RESNET_KERNELS it registers the kernels a ResNet-18 plan uses (conv2d,
// batch_norm, relu, add, max_pool2d, adaptive_avg_pool2d, reshape, linear) and nothing else.
//   size_probe MODEL.kiln
#include <cstdio>

#include "kiln/runtime/model.h"
#include "kiln/runtime/registry.h"

#ifdef KILN_SIZE_WITH_RESNET_KERNELS
namespace kiln::rt::ops {
void register_nn(Registry& r);
void register_elementwise(Registry& r);
void register_shape(Registry& r);
}  // namespace kiln::rt::ops
#endif

int main(int argc, char** argv) {
  kiln::rt::Registry registry;
#ifdef KILN_SIZE_WITH_RESNET_KERNELS
  kiln::rt::ops::register_nn(registry);
  kiln::rt::ops::register_elementwise(registry);
  kiln::rt::ops::register_shape(registry);
#endif
  if (argc < 2) return 2;
  try {
    auto model = kiln::rt::Model::load(argv[1], registry);
    kiln::rt::Session session(model);
    std::printf("%s: %zu inputs\n", model->name().c_str(), model->inputs().size());
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
