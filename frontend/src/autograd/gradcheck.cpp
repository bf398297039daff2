#include "kiln/gradcheck.h"

#include <cmath>
#include <sstream>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "kiln/runtime/kernels/copy.h"

namespace kiln::autograd {
namespace {

// Reads/writes element i of a tensor through a float64 view of it (inputs may be any float
// dtype; the perturbation is applied in that dtype).
double get(const Tensor& t, int64_t i) {
  return t.contiguous().reshape(Dims{-1}).select(0, i).item_double();
}

void set(Tensor& t, int64_t i, double v) {
  NoGradGuard guard;
  // Walk the multi-index of flat element i over t's strides.
  int64_t rem = i, offset = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    offset += (rem % t.size(d)) * t.stride(d);
    rem /= t.size(d);
  }
  // Written without a version bump: every perturbation is undone before gradients are read, and
  // the graph built at the start must stay usable.
  auto elem = make_view(*t.impl(), Dims{}, Dims{}, t.storage_offset() + offset);
  kernels::copy_(*elem, *kiln::from_blob(&v, Dims{}, DType::Float64));
}

TensorList run(const TensorFn& fn, const TensorList& inputs) {
  return fn(inputs);
}

}  // namespace

GradcheckResult gradcheck(const TensorFn& fn, const TensorList& inputs, GradcheckOptions o) {
  GradcheckResult result;
  TensorList outputs = run(fn, inputs);
  TensorList diff_inputs;
  std::vector<size_t> diff_index;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].defined() && inputs[i].requires_grad()) {
      diff_inputs.push_back(inputs[i]);
      diff_index.push_back(i);
    }
  }
  for (size_t oi = 0; oi < outputs.size(); ++oi) {
    const Tensor& out = outputs[oi];
    if (!out.defined() || !is_floating(out.dtype())) continue;
    for (int64_t oe = 0; oe < out.numel(); ++oe) {
      // Analytical row: d out[oe] / d inputs via a one-hot grad_output.
      TensorList analytical(diff_inputs.size());
      if (out.requires_grad()) {
        Tensor onehot = zeros_like(out);
        set(onehot, oe, 1.0);
        analytical = grad({out}, diff_inputs, {onehot}, /*retain_graph=*/true, false,
                          /*allow_unused=*/true);
      }
      for (size_t k = 0; k < diff_inputs.size(); ++k) {
        Tensor x = diff_inputs[k];
        for (int64_t xe = 0; xe < x.numel(); ++xe) {
          const double orig = get(x, xe);
          set(x, xe, orig + o.eps);
          // Evaluated with grad mode on: fn may itself differentiate (gradgradcheck).
          const double plus = get(run(fn, inputs)[oi], oe);
          set(x, xe, orig - o.eps);
          const double minus = get(run(fn, inputs)[oi], oe);
          set(x, xe, orig);
          const double numerical = (plus - minus) / (2 * o.eps);
          const double a = analytical[k].defined() ? get(analytical[k], xe) : 0.0;
          if (!(std::abs(a - numerical) <= o.atol + o.rtol * std::abs(numerical))) {
            std::ostringstream os;
            os << "gradient mismatch for output " << oi << " element " << oe << " w.r.t. input "
               << diff_index[k] << " element " << xe << ": analytical " << a << ", numerical "
               << numerical;
            result.ok = false;
            result.message = os.str();
            return result;
          }
        }
      }
    }
  }
  return result;
}

GradcheckResult gradgradcheck(const TensorFn& fn, const TensorList& inputs, GradcheckOptions o) {
  // Fixed grad_outputs; the function under test becomes inputs -> first-order gradients.
  TensorList outputs = fn(inputs);
  TensorList vs;
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor v = zeros_like(outputs[i]);
    for (int64_t e = 0; e < v.numel(); ++e) set(v, e, 0.5 + 0.37 * std::sin(1.7 * e + i));
    vs.push_back(v);
  }
  TensorFn first = [&](const TensorList& xs) {
    TensorList outs = fn(xs);
    TensorList diff;
    for (const Tensor& x : xs) {
      if (x.defined() && x.requires_grad()) diff.push_back(x);
    }
    return grad(outs, diff, vs, /*retain_graph=*/true, /*create_graph=*/true, true);
  };
  return gradcheck(first, inputs, o);
}

}  // namespace kiln::autograd
