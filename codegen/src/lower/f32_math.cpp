// The float32 math of the generated loops (f32_math.h): the runtime's vector math
// (runtime/src/kernels/elementwise_vecmath.inc) emitted as scalar arith/math ops, which LLVM
// vectorizes with the loop around them. Additions and multiplications may contract into FMAs
// (fastmath<contract>, where the target has them): no step relies on a product being rounded
// before its sum, and the sweep's bounds hold either way (without FMAs the loops run about 1.5x
// slower).

#include "f32_math.h"

#include <cmath>

#include "mlir/Dialect/Math/IR/Math.h"

namespace kiln::codegen::detail {
namespace arith = mlir::arith;
namespace math = mlir::math;
using mlir::Type;
using mlir::Value;
using P = arith::CmpFPredicate;

// e^x. Cephes expf: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6 polynomial, 2^n applied in two
// halves so that results down to the smallest subnormal (and the overflow to inf) come out right.
Value F32Math::exp(Value x) {
  // NaN clamps to -104 here (no NaN reaches the integer conversion) and is passed through last.
  Value xc = sel(cmp(P::OGE, x, c(-104.0f)), x, c(-104.0f));
  xc = sel(cmp(P::OLE, xc, c(88.8f)), xc, c(88.8f));
  // n = round(x / ln2) by the 1.5 * 2^23 trick (the sum drops the fraction, rounding to even).
  Value n = sub(add(mul(xc, c(1.44269504088896341f)), c(12582912.0f)), c(12582912.0f));
  Value r = sub(xc, mul(n, c(0.693359375f)));
  r = sub(r, mul(n, c(-2.12194440e-4f)));
  Value z = mul(r, r);
  Value p = c(1.9875691500E-4f);
  p = add(mul(p, r), c(1.3981999507E-3f));
  p = add(mul(p, r), c(8.3334519073E-3f));
  p = add(mul(p, r), c(4.1665795894E-2f));
  p = add(mul(p, r), c(1.6666665459E-1f));
  p = add(mul(p, r), c(5.0000001201E-1f));
  p = add(mul(p, z), r);
  p = add(p, c(1.0f));
  Type i32 = b_.getI32Type();
  Value ni = b_.create<arith::FPToSIOp>(loc_, i32, n);
  Value n1 = b_.create<arith::ShRSIOp>(loc_, ni, ci(1));
  Value n2 = b_.create<arith::SubIOp>(loc_, ni, n1);
  auto pow2 = [&](Value k) {  // 2^k for k in [-75, 64], built as float bits
    Value bits = b_.create<arith::ShLIOp>(loc_, b_.create<arith::AddIOp>(loc_, k, ci(127)), ci(23));
    return Value(b_.create<arith::BitcastOp>(loc_, b_.getF32Type(), bits));
  };
  Value res = mul(mul(p, pow2(n1)), pow2(n2));
  return sel(is_nan(x), x, res);
}

// ln x. Cephes logf: x = m 2^e with m in [sqrt(1/2), sqrt(2)), ln(m) by a degree-9 polynomial;
// subnormal x scaled by 2^23 first.
Value F32Math::log(Value x) {
  Type i32 = b_.getI32Type(), f32 = b_.getF32Type();
  Value subnormal = cmp(P::OLT, x, c(1.17549435e-38f));  // (or <= 0: fixed up below)
  Value xs = sel(subnormal, mul(x, c(8388608.0f)), x);
  Value ix = b_.create<arith::BitcastOp>(loc_, i32, xs);
  Value e = b_.create<arith::SubIOp>(
      loc_, b_.create<arith::AndIOp>(loc_, b_.create<arith::ShRSIOp>(loc_, ix, ci(23)), ci(0xff)),
      ci(126));
  e = b_.create<arith::SelectOp>(loc_, subnormal, b_.create<arith::SubIOp>(loc_, e, ci(23)), e);
  Value m = b_.create<arith::BitcastOp>(
      loc_, f32,
      b_.create<arith::OrIOp>(loc_, b_.create<arith::AndIOp>(loc_, ix, ci(0x007fffff)),
                              ci(0x3f000000)));  // [0.5, 1)
  Value ef = b_.create<arith::SIToFPOp>(loc_, f32, e);
  Value small = cmp(P::OLT, m, c(0.707106781186547524f));
  ef = sel(small, sub(ef, c(1.0f)), ef);
  m = sel(small, sub(add(m, m), c(1.0f)), sub(m, c(1.0f)));
  Value z = mul(m, m);
  Value y = c(7.0376836292E-2f);
  y = sub(mul(y, m), c(1.1514610310E-1f));
  y = add(mul(y, m), c(1.1676998740E-1f));
  y = sub(mul(y, m), c(1.2420140846E-1f));
  y = add(mul(y, m), c(1.4249322787E-1f));
  y = sub(mul(y, m), c(1.6668057665E-1f));
  y = add(mul(y, m), c(2.0000714765E-1f));
  y = sub(mul(y, m), c(2.4999993993E-1f));
  y = add(mul(y, m), c(3.3333331174E-1f));
  y = mul(mul(y, m), z);
  y = add(y, mul(ef, c(-2.12194440e-4f)));
  y = sub(y, mul(c(0.5f), z));
  Value r = add(m, y);
  r = add(r, mul(ef, c(0.693359375f)));
  r = sel(cmp(P::OLT, x, c(0.0f)), c(NAN), r);
  r = sel(cmp(P::OEQ, x, c(0.0f)), c(-INFINITY), r);
  r = sel(cmp(P::OEQ, x, c(INFINITY)), c(INFINITY), r);
  return sel(is_nan(x), x, r);
}

// ln(1 + x) = ln(u) - ((u - 1) - x) / u with u = 1 + x rounded: the quotient restores what the
// rounding of u lost. Where u rounds to 1, x itself (which keeps the sign of -0).
Value F32Math::log1p(Value x) {
  Value u = add(x, c(1.0f));
  Value r = sub(log(u), div(sub(sub(u, c(1.0f)), x), u));
  r = sel(cmp(P::OEQ, u, c(0.0f)), c(-INFINITY), r);
  r = sel(cmp(P::OEQ, x, c(INFINITY)), c(INFINITY), r);
  r = sel(cmp(P::OEQ, u, c(1.0f)), x, r);
  return sel(is_nan(x), x, r);
}

// tanh: odd polynomial below 0.625 (Cephes tanhf), 1 - 2 / (e^{2|x|} + 1) above.
Value F32Math::tanh(Value x) {
  Value ax = abs(x);
  Value z = mul(x, x);
  Value p = c(-5.70498872745E-3f);
  p = add(mul(p, z), c(2.06390887954E-2f));
  p = sub(mul(p, z), c(5.37397155531E-2f));
  p = add(mul(p, z), c(1.33314422036E-1f));
  p = sub(mul(p, z), c(3.33332819422E-1f));
  Value small = copysign(add(mul(mul(p, z), x), x), x);  // (the sign keeps tanh(-0) = -0)
  Value e = exp(add(ax, ax));
  Value big = copysign(sub(c(1.0f), div(c(2.0f), add(e, c(1.0f)))), x);
  return sel(cmp(P::OLT, ax, c(0.625f)), small, big);
}

// 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below: e^-|x| never overflows, so the negative tail
// keeps its relative accuracy down to the subnormals.
Value F32Math::sigmoid(Value x) {
  Value e = exp(neg(abs(x)));
  return div(sel(cmp(P::OLT, x, c(0.0f)), e, c(1.0f)), add(c(1.0f), e));
}

Value F32Math::silu(Value x) {
  return x_sigmoid(x, x);
}

// x sigmoid(v). Where v < -80 the result is x e^v (1 + e^v is 1) and may be subnormal: e^v is
// computed as e^(v+64) (an exact shift, a normal number) and x e^(v+64) e^-64 rounds once, instead
// of x times an already rounded subnormal sigmoid (up to |x| / 2 steps of 2^-149 off).
Value F32Math::x_sigmoid(Value x, Value v) {
  Value far = cmp(P::OLT, v, c(-80.0f));
  Value vs = sel(far, add(v, c(64.0f)), v);
  Value e = exp(neg(abs(vs)));
  Value s = div(sel(cmp(P::OLT, vs, c(0.0f)), e, c(1.0f)), add(c(1.0f), e));
  return sel(far, mul(mul(x, e), c(1.60381089e-28f)), mul(x, s));  // e^-64
}

// erf(x)/x - 1 for |x| <= 0.875, as a polynomial in x^2.
Value F32Math::erf_small_y(Value x) {
  Value t = mul(x, x);
  Value p = c(-0.0006214585361977137f);
  p = add(mul(p, t), c(0.005034370663204096f));
  p = sub(mul(p, t), c(0.02679294777783731f));
  p = add(mul(p, t), c(0.11282496599586316f));
  p = sub(mul(p, t), c(0.37612554506584434f));
  p = add(mul(p, t), c(0.1283791581332128f));
  return p;
}

// erfc(|x|) exp(x^2) for |x| >= 0.875, as a polynomial in t = 1 / (1 + |x|/2); valid to |x| = 10.
Value F32Math::erfcx_tail(Value ax) {
  Value t = div(c(1.0f), add(c(1.0f), mul(c(0.5f), ax)));
  Value q = c(-0.0758140604822636f);
  q = add(mul(q, t), c(0.35759298866453537f));
  q = sub(mul(q, t), c(0.6232132457984959f));
  q = add(mul(q, t), c(0.41960253720341356f));
  q = sub(mul(q, t), c(0.11694844065768045f));
  q = add(mul(q, t), c(0.23920201095934845f));
  q = add(mul(q, t), c(0.23378627581034211f));
  q = add(mul(q, t), c(0.28381792220311863f));
  q = add(mul(q, t), c(0.28196369871862065f));
  q = add(mul(q, t), c(4.365648630595515e-06f));
  return q;
}

// erfc(|x|) for |x| >= 0.875 (|x| clamped to 20: exp(-x^2) is 0 from about 10.1 on), exp(-x^2)
// with the rounding error of x*x folded back in (an FMA gives it exactly).
Value F32Math::erfc_tail(Value ax) {
  Value a = sel(cmp(P::OGT, ax, c(20.0f)), c(20.0f), ax);
  Value a2 = mul(a, a);
  Value lo = fma(a, a, neg(a2));
  return mul(mul(exp(neg(a2)), sub(c(1.0f), lo)), erfcx_tail(a));
}

Value F32Math::erf(Value x) {
  Value ax = abs(x);
  Value small = add(x, mul(x, erf_small_y(x)));
  Value big = copysign(sub(c(1.0f), erfc_tail(ax)), x);
  return sel(cmp(P::OLE, ax, c(0.875f)), small, sel(is_nan(x), x, big));
}

// x Phi(x) = x/2 (1 + erf(x / sqrt 2)) = x/2 * 2 Phi(x), 2 Phi(x) without cancellation for negative
// x (erfc there), and exp(-x^2 / 2) computed from x itself (x^2 split exactly by an FMA, then
// halved exactly), so the far tail keeps its relative accuracy.
Value F32Math::gelu(Value x) {
  Value y = mul(x, c(0.70710678118654752440f));
  Value ay = abs(y);
  Value small = add(c(1.0f), add(y, mul(y, erf_small_y(y))));
  Value ax = sel(cmp(P::OGT, abs(x), c(28.0f)), c(28.0f), abs(x));
  Value x2 = mul(ax, ax);
  Value lo = fma(ax, ax, neg(x2));
  Value e = mul(exp(mul(c(-0.5f), x2)), sub(c(1.0f), mul(c(0.5f), lo)));
  Value tail = mul(e, erfcx_tail(sel(cmp(P::OGT, ay, c(20.0f)), c(20.0f), ay)));
  Value big = sel(cmp(P::OLT, y, c(0.0f)), tail, sub(c(2.0f), tail));
  Value two_phi = sel(cmp(P::OLE, ay, c(0.875f)), small, sel(is_nan(y), y, big));
  return mul(mul(c(0.5f), x), two_phi);
}

// x/2 (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): no cancellation.
Value F32Math::gelu_tanh(Value x) {
  Value u = mul(c(0.79788456080286535588f), add(x, mul(mul(mul(c(0.044715f), x), x), x)));
  return x_sigmoid(x, add(u, u));
}

Value F32Math::c(float v) {
  return b_.create<arith::ConstantOp>(loc_, b_.getF32FloatAttr(v));
}
Value F32Math::ci(int32_t v) {
  return b_.create<arith::ConstantIntOp>(loc_, v, 32);
}
Value F32Math::add(Value a, Value b) {
  return b_.create<arith::AddFOp>(loc_, a, b, arith::FastMathFlags::contract);
}
Value F32Math::sub(Value a, Value b) {
  return b_.create<arith::SubFOp>(loc_, a, b, arith::FastMathFlags::contract);
}
Value F32Math::mul(Value a, Value b) {
  return b_.create<arith::MulFOp>(loc_, a, b, arith::FastMathFlags::contract);
}
Value F32Math::div(Value a, Value b) {
  return b_.create<arith::DivFOp>(loc_, a, b);
}
Value F32Math::neg(Value a) {
  return b_.create<arith::NegFOp>(loc_, a);
}
Value F32Math::fma(Value a, Value b, Value c) {
  return b_.create<math::FmaOp>(loc_, a, b, c);
}
Value F32Math::abs(Value x) {
  return b_.create<math::AbsFOp>(loc_, x);
}
Value F32Math::copysign(Value mag, Value sign) {
  return b_.create<math::CopySignOp>(loc_, mag, sign);
}
Value F32Math::cmp(P p, Value a, Value b) {
  return b_.create<arith::CmpFOp>(loc_, p, a, b);
}
Value F32Math::is_nan(Value x) {
  return cmp(P::UNO, x, x);
}
Value F32Math::sel(Value cond, Value a, Value b) {
  return b_.create<arith::SelectOp>(loc_, cond, a, b);
}

namespace {

template <typename Op>
struct ExpandF32 : mlir::OpRewritePattern<Op> {
  using Fn = Value (F32Math::*)(Value);
  ExpandF32(mlir::MLIRContext* ctx, Fn fn) : mlir::OpRewritePattern<Op>(ctx), fn(fn) {}
  mlir::LogicalResult matchAndRewrite(Op op, mlir::PatternRewriter& rewriter) const override {
    if (!op.getType().isF32()) return mlir::failure();  // scalars only, as the loops emit them
    F32Math m(rewriter, op.getLoc());
    rewriter.replaceOp(op, (m.*fn)(op.getOperand()));
    return mlir::success();
  }
  Fn fn;
};

}  // namespace

void populate_f32_math_patterns(mlir::RewritePatternSet& patterns) {
  mlir::MLIRContext* ctx = patterns.getContext();
  patterns.add<ExpandF32<math::ExpOp>>(ctx, &F32Math::exp);
  patterns.add<ExpandF32<math::LogOp>>(ctx, &F32Math::log);
  patterns.add<ExpandF32<math::Log1pOp>>(ctx, &F32Math::log1p);
  patterns.add<ExpandF32<math::TanhOp>>(ctx, &F32Math::tanh);
  patterns.add<ExpandF32<math::ErfOp>>(ctx, &F32Math::erf);
}

}  // namespace kiln::codegen::detail
