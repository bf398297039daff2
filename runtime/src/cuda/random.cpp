// Random fills and dropout on CUDA tensors (see kiln/runtime/cuda/random.h): the CPU's
// Philox4x32-10 streams (kernels/random.h) computed on the device, one thread per counter block,
// each element reading the same block and word as on the CPU.

#include "kiln/runtime/cuda/random.h"

#include <algorithm>
#include <cmath>

#include "kiln/runtime/cuda/compile.h"
#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/cuda/eager.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/views.h"

namespace kiln::cuda {

namespace {

// The kernels' CUDA C (random_kernels.cuh), embedded at build time.
constexpr const char* kSource =
#include "random_kernels_source.inc"
    ;

enum Kind { kUniform = 0, kNormal = 1, kBernoulliFloat = 2, kKeepMask = 3, kBernoulliBytes = 4 };

// 1 with probability p from one 32-bit word (as the CPU's threshold()).
uint64_t threshold(double p) {
  return static_cast<uint64_t>(std::ldexp(p, 32));
}

unsigned grid_for(long long work) {
  return static_cast<unsigned>(std::max<long long>(
      1, std::min<long long>((work + 255) / 256, device_info().multiprocessors * 16LL)));
}

void fill(std::string_view op, TensorImpl& t, Generator& g, Kind kind, float a, float b,
          uint64_t thr) {
  const bool bytes = kind == kKeepMask || kind == kBernoulliBytes;
  KILN_CHECK(t.device() == Device::CUDA, op, "expected a cuda tensor, got ", describe(t));
  if (bytes) {
    KILN_CHECK(t.dtype() == DType::Bool || t.dtype() == DType::UInt8, op,
               "expected a bool or uint8 tensor on cuda, got ", describe(t));
    KILN_CHECK(t.is_contiguous(), op, "expected a contiguous mask on cuda, got ", describe(t));
  } else {
    KILN_CHECK(t.dtype() == DType::Float32, op,
               "the CUDA backend fills float32 tensors only so far, got ", describe(t));
  }
  long long n = t.numel();
  if (n == 0) return;
  const uint64_t blocks = static_cast<uint64_t>((n + 3) / 4);
  unsigned long long base = g.reserve(blocks);  // the CPU's counter consumption
  unsigned long long seed = g.seed();
  TensorImplPtr buffer =
      t.is_contiguous() ? TensorImplPtr() : empty(t.sizes(), DType::Float32, Device::CUDA);
  TensorImpl& target = buffer ? *buffer : t;
  void* out = bytes ? nullptr : target.raw_data();
  void* byte_out = bytes ? target.raw_data() : nullptr;
  int k = kind;
  unsigned long long th = thr;
  void* args[] = {&out, &byte_out, &n, &base, &seed, &k, &a, &b, &th};
  static const Kernel& kernel_ref = kernel("random", kSource, "kiln_random_fill");
  kernel_ref.launch(op, grid_for(static_cast<long long>(blocks)), 256, args, current_stream());
  if (buffer) copy_out(t, *buffer);
}

}  // namespace

std::string random_source() {
  return kSource;
}

void uniform_(TensorImpl& t, double lo, double hi, Generator& g) {
  fill("uniform_", t, g, kUniform, static_cast<float>(lo), static_cast<float>(hi), 0);
}
void normal_(TensorImpl& t, double mean, double std, Generator& g) {
  fill("normal_", t, g, kNormal, static_cast<float>(mean), static_cast<float>(std), 0);
}
void bernoulli_(TensorImpl& t, double p, Generator& g) {
  const bool bytes = t.dtype() == DType::Bool || t.dtype() == DType::UInt8;
  fill("bernoulli_", t, g, bytes ? kBernoulliBytes : kBernoulliFloat, 0, 0, threshold(p));
}
void dropout_mask_out(double p, TensorImpl& mask, Generator& g) {
  fill("dropout_mask", mask, g, kKeepMask, 0, 0, threshold(p));
}

void dropout_out(std::string_view op, const TensorImpl& input, const TensorImpl& mask, double p,
                 TensorImpl& out) {
  for (const TensorImpl* t : {&input, &mask, static_cast<const TensorImpl*>(&out)}) {
    KILN_CHECK(t->device() == Device::CUDA, op, "expected every tensor on cuda, got ", describe(*t),
               " on ", device_name(t->device()));
  }
  KILN_CHECK(input.dtype() == DType::Float32 && out.dtype() == DType::Float32, op,
             "the CUDA backend runs float32 only so far, got ", describe(input));
  KILN_CHECK(mask.sizes() == input.sizes() && mask.is_contiguous(), op,
             "expected a contiguous mask of the input's shape ", describe(input), " on cuda, got ",
             describe(mask));
  long long n = input.numel();
  if (n == 0) return;
  TensorImplPtr x = views::contiguous(input);
  TensorImplPtr y =
      out.is_contiguous() ? TensorImplPtr(&out) : empty(out.sizes(), DType::Float32, Device::CUDA);
  float scale = p >= 1.0 ? 0.0f : static_cast<float>(1.0 / (1.0 - p));
  void *yp = y->raw_data(), *xp = x->raw_data(), *mp = mask.raw_data();
  void* args[] = {&yp, &xp, &mp, &n, &scale};
  static const Kernel& k = kernel("dropout", kSource, "kiln_dropout");
  k.launch(op, grid_for(n), 256, args, current_stream());
  if (y.get() != &out) copy_out(out, *y);
}

}  // namespace kiln::cuda
