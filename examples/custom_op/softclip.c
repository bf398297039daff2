/* A plain C function a user already has: y = x / (1 + |x|) and its derivative. kiln calls it
 * through a custom autograd Function (see main.cpp). */
#include <math.h>
#include <stddef.h>

void softclip_forward(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + fabsf(x[i]));
}

/* dy/dx = 1 / (1 + |x|)^2 */
void softclip_backward(const float* x, const float* grad_y, float* grad_x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float d = 1.0f + fabsf(x[i]);
    grad_x[i] = grad_y[i] / (d * d);
  }
}
