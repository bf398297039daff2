#pragma once
// Internal: the float32 math of the generated loops (see f32_math.cpp).

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"

namespace kiln::codegen::detail {

// Float32 transcendental functions for the generated loops: the runtime's vector math
// (runtime/src/kernels/elementwise_vecmath.inc) op for op, so a compiled chain computes what the
// eager kernels compute, with their accuracy: results down to the subnormals, no cancellation in
// the negative tails of gelu and sigmoid; silu and tanh-gelu go further (their subnormal results
// are rounded once). Swept in ulps by tests/jit/test_compile.cpp, JitCompile.VectorMathUlpError.
// Each function emits scalar f32 arith/math ops at the builder's insertion point.
class F32Math {
 public:
  F32Math(mlir::OpBuilder& b, mlir::Location loc) : b_(b), loc_(loc) {}

  mlir::Value exp(mlir::Value x);
  mlir::Value log(mlir::Value x);
  mlir::Value log1p(mlir::Value x);
  mlir::Value tanh(mlir::Value x);
  mlir::Value erf(mlir::Value x);
  mlir::Value sigmoid(mlir::Value x);
  mlir::Value silu(mlir::Value x);
  mlir::Value gelu(mlir::Value x);       // x Phi(x)
  mlir::Value gelu_tanh(mlir::Value x);  // the tanh approximation

 private:
  mlir::Value x_sigmoid(mlir::Value x, mlir::Value v);
  mlir::Value erf_small_y(mlir::Value x);
  mlir::Value erfcx_tail(mlir::Value ax);
  mlir::Value erfc_tail(mlir::Value ax);

  mlir::Value c(float v);
  mlir::Value ci(int32_t v);
  mlir::Value add(mlir::Value a, mlir::Value b);
  mlir::Value sub(mlir::Value a, mlir::Value b);
  mlir::Value mul(mlir::Value a, mlir::Value b);
  mlir::Value div(mlir::Value a, mlir::Value b);
  mlir::Value neg(mlir::Value a);
  mlir::Value fma(mlir::Value a, mlir::Value b, mlir::Value c);
  mlir::Value abs(mlir::Value x);
  mlir::Value copysign(mlir::Value mag, mlir::Value sign);
  mlir::Value cmp(mlir::arith::CmpFPredicate p, mlir::Value a, mlir::Value b);
  mlir::Value is_nan(mlir::Value x);
  mlir::Value sel(mlir::Value cond, mlir::Value a, mlir::Value b);

  mlir::OpBuilder& b_;
  mlir::Location loc_;
};

// Rewrites scalar f32 math.exp, math.log, math.log1p, math.tanh and math.erf (what the loops emit
// for kiln.exp, .log, .log1p, .tanh, .erf) into F32Math. In place of MLIR's polynomial
// approximations, which flush exp's results below 2^-126 to 0, clamp log's subnormal inputs and
// are about 5 ulp in tanh and erf, and whose sin / cos reduce the argument by a float32 pi/2 only
// (math.sin / math.cos are left to LLVM: calls of libm's sinf / cosf, as eager calls them).
void populate_f32_math_patterns(mlir::RewritePatternSet& patterns);

}  // namespace kiln::codegen::detail
