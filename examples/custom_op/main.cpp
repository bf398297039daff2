// "Call your C code": wrap an existing C function as a differentiable kiln op.
#include <cstdio>

#include <kiln/kiln.h>

extern "C" {
void softclip_forward(const float* x, float* y, size_t n);
void softclip_backward(const float* x, const float* grad_y, float* grad_x, size_t n);
}

using namespace kiln;
using autograd::AutogradContext;

struct SoftClip : autograd::Function<SoftClip> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x) {
    Tensor xc = x.to(DType::Float32).contiguous();
    Tensor y = empty_like(xc);
    softclip_forward(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel());
    ctx->save_for_backward({xc});
    return y;
  }
  static TensorList backward(AutogradContext* ctx, TensorList grads) {
    Tensor x = ctx->get_saved_variables()[0];
    Tensor g = grads[0].to(DType::Float32).contiguous();
    Tensor gx = empty_like(x);
    softclip_backward(x.data_ptr<float>(), g.data_ptr<float>(), gx.data_ptr<float>(), x.numel());
    return {gx};
  }
};

int main() {
  Tensor x = tensor({-2.0, -0.5, 0.0, 1.0, 3.0}).requires_grad_();
  Tensor y = SoftClip::apply(x);
  sum(y * y).backward();
  std::printf("y = %s\n", to_string(y).c_str());
  std::printf("dx = %s\n", to_string(x.grad()).c_str());
  return 0;
}
