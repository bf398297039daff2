// Fit y = 3x - 1 with a tiny linear model: tensors, autograd, an SGD step by hand.
#include <kiln/kiln.h>

#include <cstdio>

int main() {
  using namespace kiln;
  Tensor x = linspace(-1, 1, 64).reshape({64, 1});
  Tensor y = x * 3.0 - 1.0;
  Tensor w = zeros({1, 1}).requires_grad_();
  Tensor b = zeros({1}).requires_grad_();
  for (int step = 0; step < 200; ++step) {
    Tensor loss = mse_loss(linear(x, w, b), y);
    loss.backward();
    {
      autograd::NoGradGuard no_grad;  // update parameters in place, outside the graph
      sub_(w, w.grad(), 0.5);
      sub_(b, b.grad(), 0.5);
    }
    w.set_grad({});
    b.set_grad({});
    if (step % 50 == 0) std::printf("step %3d  loss %.6f\n", step, loss.item<double>());
  }
  std::printf("w = %.4f, b = %.4f\n", w.item<double>(), b.item<double>());
}
