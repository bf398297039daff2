#include "ShapeRules.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "llvm/ADT/SmallVector.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"

namespace kiln::ir::shape {

using llvm::SmallVector;
using mlir::failure;
using mlir::RankedTensorType;
using mlir::ShapedType;
using mlir::success;

namespace {

constexpr int64_t kDyn = ShapedType::kDynamic;

RankedTensorType tensor(Value v) {
  return v ? llvm::dyn_cast<RankedTensorType>(v.getType()) : RankedTensorType();
}
bool absent(Value v) {
  return !tensor(v);
}
ArrayRef<int64_t> dims(Value v) {
  return tensor(v).getShape();
}
int64_t rank(Value v) {
  return tensor(v).getRank();
}
bool same(int64_t a, int64_t b) {
  return a == b || a == kDyn || b == kDyn;
}
bool same(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same(a[i], b[i])) return false;
  return true;
}
std::string str(ArrayRef<int64_t> s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += s[i] == kDyn ? "?" : std::to_string(s[i]);
  }
  return out + "]";
}
// A size computed from others: dynamic when any input is (checked before any arithmetic, so a
// dynamic size never enters it), and kOverflow when the exact value, computed in 128 bits, leaves
// int64 (hostile attributes).
constexpr int64_t kOverflow = -2;
template <typename Fn>
int64_t derived(std::initializer_list<int64_t> inputs, Fn fn) {
  for (int64_t i : inputs)
    if (i == kDyn) return kDyn;
  const __int128 v = fn();
  if (v > std::numeric_limits<int64_t>::max() || v < std::numeric_limits<int64_t>::min())
    return kOverflow;
  return static_cast<int64_t>(v);
}
using I128 = __int128;

// The result must have `want`'s shape (dynamic dims on either side match); inferring, it gets it.
LogicalResult expect_shape(const Diag& op, const Result& result, ArrayRef<int64_t> want,
                           const char* what = "result") {
  if (llvm::is_contained(want, kOverflow))
    return op.emitOpError("its attributes make a ") << what << " size overflow int64";
  if (result.shape) {
    result.shape->assign(want.begin(), want.end());
    return success();
  }
  if (same(dims(result.value), want)) return success();
  // A rule run the other way round checks an operand (the pooled gradient of a pooling's input).
  if (op.op() && result.value.getDefiningOp() != op.op() && llvm::StringRef(what) == "result")
    what = "operand";
  return op.emitOpError(what) << " must be " << str(want) << ", got " << result.value.getType();
}

// The result's element type must be `want`; inferring, it gets it.
LogicalResult expect_type(const Diag& op, const Result& result, mlir::Type want) {
  if (result.type) {
    *result.type = want;
    return success();
  }
  if (tensor(result.value).getElementType() == want) return success();
  return op.emitOpError("result element type must be ")
         << want << ", got " << result.value.getType();
}

// A dim in [-rank, rank), normalized; rank 0 accepts -1 and 0 like PyTorch.
std::optional<int64_t> norm_dim(int64_t d, int64_t r) {
  const int64_t n = r == 0 ? 1 : r;
  if (d < -n || d >= n) return std::nullopt;
  return d < 0 ? d + n : d;
}
LogicalResult bad_dim(const Diag& op, int64_t d, int64_t r) {
  return op.emitOpError("dim ") << d << " is out of range for a tensor of rank " << r;
}

LogicalResult expect_rank(const Diag& op, Value v, std::initializer_list<int64_t> ranks,
                          const char* name) {
  for (int64_t r : ranks)
    if (rank(v) == r) return success();
  auto diag = op.emitOpError(name) << " must have rank";
  for (int64_t r : ranks) diag << " " << r;
  return diag << ", got " << v.getType();
}

// Two values, one per spatial dim (what the runtime's decoders read).
std::optional<std::pair<int64_t, int64_t>> pair_of(ArrayRef<int64_t> v) {
  if (v.size() == 2) return std::make_pair(v[0], v[1]);
  return std::nullopt;
}

}  // namespace

// ----------------------------------------------------------------------- shapes and types

mlir::InFlightDiagnostic Diag::emitOpError(const llvm::Twine& message) const {
  if (op_) return op_->emitOpError(message);
  if (!loc_) return mlir::InFlightDiagnostic();  // inactive: inference without a location
  return mlir::emitError(*loc_) << "'" << name_ << "' op " << message;
}

bool compatible(mlir::TypeRange inferred, mlir::TypeRange declared) {
  if (inferred.size() != declared.size()) return false;
  for (auto [a, b] : llvm::zip_equal(inferred, declared)) {
    if (a == b) continue;
    auto ta = llvm::dyn_cast<RankedTensorType>(a), tb = llvm::dyn_cast<RankedTensorType>(b);
    if (!ta || !tb || ta.getElementType() != tb.getElementType() ||
        !same(ta.getShape(), tb.getShape()))
      return false;
  }
  return true;
}

mlir::Type element_type(Value v) {
  return llvm::cast<mlir::ShapedType>(v.getType()).getElementType();
}

mlir::Type promote_types(mlir::Type a, mlir::Type b) {
  if (a == b) return a;
  const bool fa = llvm::isa<mlir::FloatType>(a), fb = llvm::isa<mlir::FloatType>(b);
  if (fa != fb) return fa ? a : b;
  const unsigned wa = a.getIntOrFloatBitWidth(), wb = b.getIntOrFloatBitWidth();
  if (fa && wa == wb) return mlir::Float32Type::get(a.getContext());  // f16 with bf16
  return wa >= wb ? a : b;
}

mlir::Type result_type(RankedTensorType a, RankedTensorType b) {
  mlir::Type ea = a.getElementType(), eb = b.getElementType();
  const bool a0 = a.getRank() == 0, b0 = b.getRank() == 0;
  if (a0 != b0) {
    mlir::Type dim = a0 ? eb : ea, zero = a0 ? ea : eb;
    auto category = [](mlir::Type t) {
      return llvm::isa<mlir::FloatType>(t) ? 2 : t.isInteger(1) ? 0 : 1;
    };
    if (category(zero) <= category(dim)) return dim;
    if (llvm::isa<mlir::FloatType>(zero)) return mlir::Float32Type::get(a.getContext());
    return zero;  // integer 0-dim with a bool tensor
  }
  return promote_types(ea, eb);
}

LogicalResult same_shape(const Diag& op, Value a, Value b) {
  if (absent(a) || absent(b)) return success();
  if (same(dims(a), dims(b))) return success();
  return op.emitOpError("expects equal shapes, got ") << a.getType() << " and " << b.getType();
}
LogicalResult same_shape(const Diag& op, Value a, Result b) {
  if (b.value) return same_shape(op, a, b.value);
  return expect_shape(op, b, dims(a));
}
LogicalResult same_shape(const Diag& op, Result a, Result b) {
  if (a.value && b.value) return same_shape(op, a.value, b.value);
  if (!a.shape || !b.shape)
    return op.emitOpError("internal: a rule mixes checked and inferred results");
  *b.shape = *a.shape;
  return success();
}

LogicalResult element_type_is(const Diag& op, Result v, DType dtype) {
  mlir::Builder b(op.context());
  mlir::Type want[] = {b.getF32Type(),       b.getF64Type(),       b.getF16Type(),
                       b.getBF16Type(),      b.getIntegerType(8),  b.getIntegerType(8, false),
                       b.getIntegerType(32), b.getIntegerType(64), b.getI1Type()};
  static_assert(std::size(want) == getMaxEnumValForDType() + 1, "one type per kiln DType");
  const auto code = static_cast<uint64_t>(dtype);
  if (code >= std::size(want))  // the verifier names it (verify_enum_attrs)
    return op.emitOpError("dtype must be one of DType's values, got ") << code;
  if (v.type) return expect_type(op, v, want[code]);
  if (tensor(v.value).getElementType() == want[code]) return success();
  return op.emitOpError("result element type must be ")
         << stringifyDType(dtype) << " (dtype " << code << "), got " << v.value.getType();
}

LogicalResult float_of(const Diag& op, Value input, Result result) {
  mlir::Type e = tensor(input).getElementType();
  return expect_type(op, result,
                     llvm::isa<mlir::FloatType>(e) ? e : mlir::Float32Type::get(op.context()));
}

LogicalResult sum_type_of(const Diag& op, Value input, Result result) {
  mlir::Type e = tensor(input).getElementType();
  return expect_type(op, result,
                     llvm::isa<mlir::FloatType>(e) ? e : mlir::IntegerType::get(op.context(), 64));
}

LogicalResult promoted(const Diag& op, Value a, Value b, Result result) {
  return expect_type(op, result, result_type(tensor(a), tensor(b)));
}

LogicalResult dim_in_range(const Diag& op, Value input, int64_t dim) {
  if (norm_dim(dim, rank(input))) return success();
  return bad_dim(op, dim, rank(input));
}

LogicalResult broadcast_shapes(ArrayRef<int64_t> a, ArrayRef<int64_t> b,
                               llvm::SmallVectorImpl<int64_t>& out,
                               std::optional<mlir::Location> loc, llvm::StringRef op) {
  const size_t r = std::max(a.size(), b.size());
  out.assign(r, 1);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else if (da == kDyn || db == kDyn) {
      out[i] = kDyn;
    } else {
      return mlir::emitOptionalError(loc, op, ": shapes do not broadcast at dim ", i, " (", da,
                                     " vs ", db, ")");
    }
  }
  return success();
}

namespace {
// The same without a diagnostic: the rules below name the operands themselves.
std::optional<Shape> broadcast(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  Shape out;
  if (failed(broadcast_shapes(a, b, out, std::nullopt, ""))) return std::nullopt;
  return out;
}
}  // namespace

LogicalResult broadcast3(const Diag& op, Value a, Value b, Value c, Result result) {
  auto ab = broadcast(dims(a), dims(b));
  auto abc = ab ? broadcast(*ab, dims(c)) : std::nullopt;
  if (!abc)
    return op.emitOpError("operand shapes do not broadcast: ")
           << a.getType() << ", " << b.getType() << ", " << c.getType();
  return expect_shape(op, result, *abc);
}

LogicalResult copy(const Diag& op, Value dst, Value src, Result result) {
  auto b = broadcast(dims(src), dims(dst));
  if (!b || !same(*b, dims(dst)))
    return op.emitOpError("src ") << src.getType() << " does not broadcast to dst "
                                  << dst.getType();
  if (result.value && result.value.getType() != dst.getType())
    return op.emitOpError("result must have dst's type ")
           << dst.getType() << ", got " << result.value.getType();
  return expect_shape(op, result, dims(dst));
}

LogicalResult channels(const Diag& op, Value x, int64_t dim, Result result) {
  if (rank(x) <= dim) return op.emitOpError("expects rank > ") << dim << ", got " << x.getType();
  return expect_shape(op, result, {dims(x)[dim]});
}

LogicalResult transposed_channels(const Diag& op, Value weight, int64_t groups, Result result) {
  if (rank(weight) < 2)
    return op.emitOpError("expects a weight of rank >= 2, got ") << weight.getType();
  if (groups < 1) return op.emitOpError("groups must be >= 1, got ") << groups;
  const int64_t c = dims(weight)[1];
  return expect_shape(op, result, {c == mlir::ShapedType::kDynamic ? c : c * groups});
}

LogicalResult one_element(const Diag& op, Value input) {
  int64_t n = 1;
  for (int64_t d : dims(input)) n = d == mlir::ShapedType::kDynamic || n < 0 ? -1 : n * d;
  if (n >= 0 && n != 1)
    return op.emitOpError("expects a tensor of one element, got ") << input.getType();
  return mlir::success();
}

LogicalResult shape_is(const Diag& op, Result result, ArrayRef<int64_t> size) {
  if (llvm::any_of(size, [](int64_t d) { return d < 0; }))
    return op.emitOpError("size must hold sizes >= 0, got ") << str(size);
  return expect_shape(op, result, size);
}

LogicalResult spatial_size(const Diag& op, Value input, ArrayRef<int64_t> size, Result result) {
  if (rank(input) < 3)
    return op.emitOpError("expects a (N,) C, H, W input, got ") << input.getType();
  if (size.size() != 2 || size[0] < 0 || size[1] < 0)
    return op.emitOpError("expects a spatial size of 2 dims >= 0, got ") << str(size);
  Shape want(dims(input).drop_back(2));
  want.append(size.begin(), size.end());
  return expect_shape(op, result, want);
}

// ---------------------------------------------------------------------------- reductions

LogicalResult reduce_dims(const Diag& op, Value input, ArrayRef<int64_t> reduce, bool keepdim,
                          Result result) {
  const int64_t r = rank(input);
  SmallVector<bool, 6> reduced(std::max<int64_t>(r, 1), reduce.empty());
  for (int64_t d : reduce) {
    auto n = norm_dim(d, r);
    if (!n) return bad_dim(op, d, r);
    if (reduced[*n] && !reduce.empty() && r > 0)
      return op.emitOpError("dim ") << d << " appears twice in dims";
    reduced[*n] = true;
  }
  Shape want;
  for (int64_t i = 0; i < r; ++i) {
    if (!reduced[i])
      want.push_back(dims(input)[i]);
    else if (keepdim)
      want.push_back(1);
  }
  return expect_shape(op, result, want);
}

LogicalResult reduce_dim(const Diag& op, Value input, int64_t dim, bool keepdim, bool allow_flat,
                         Result values, Result indices) {
  Shape want;
  if (allow_flat && dim == std::numeric_limits<int64_t>::min()) {  // over all elements
    if (keepdim) want.assign(rank(input), 1);
  } else {
    auto n = norm_dim(dim, rank(input));
    if (!n) return bad_dim(op, dim, rank(input));
    for (int64_t i = 0; i < rank(input); ++i) {
      if (i != *n)
        want.push_back(dims(input)[i]);
      else if (keepdim)
        want.push_back(1);
    }
  }
  if (failed(expect_shape(op, values, want))) return failure();
  return expect_shape(op, indices, want, "indices");
}

// --------------------------------------------------------------------------------- views

namespace {
int64_t numel(ArrayRef<int64_t> s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d == kDyn) return kDyn;
    n *= d;
  }
  return n;
}
}  // namespace

LogicalResult reshape(const Diag& op, Value input, ArrayRef<int64_t> shape, Result result) {
  Shape want(shape.begin(), shape.end());
  int64_t known = 1, inferred = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == -1 && inferred < 0)
      inferred = static_cast<int64_t>(i);
    else if (want[i] < 0)
      return op.emitOpError("shape ") << str(shape) << " has a negative size";
    else
      known *= want[i];
  }
  const int64_t n = numel(dims(input));
  if (inferred >= 0) want[inferred] = n == kDyn || known == 0 ? kDyn : n / known;
  if (n != kDyn && numel(want) != kDyn && numel(want) != n)
    return op.emitOpError("shape ")
           << str(shape) << " does not hold the input's " << n << " elements";
  return expect_shape(op, result, want);
}

LogicalResult transpose(const Diag& op, Value input, int64_t dim0, int64_t dim1, Result result) {
  auto a = norm_dim(dim0, rank(input)), b = norm_dim(dim1, rank(input));
  if (!a || !b) return bad_dim(op, a ? dim1 : dim0, rank(input));
  Shape want(dims(input).begin(), dims(input).end());
  if (rank(input) > 0) std::swap(want[*a], want[*b]);
  return expect_shape(op, result, want);
}

LogicalResult permute(const Diag& op, Value input, ArrayRef<int64_t> order, Result result) {
  const int64_t r = rank(input);
  if (static_cast<int64_t>(order.size()) != r)
    return op.emitOpError("dims ") << str(order) << " must name each of the " << r << " dims once";
  SmallVector<bool, 6> seen(r, false);
  Shape want;
  for (int64_t d : order) {
    auto n = norm_dim(d, r);
    if (!n || seen[*n])
      return op.emitOpError("dims ")
             << str(order) << " must name each of the " << r << " dims once";
    seen[*n] = true;
    want.push_back(dims(input)[*n]);
  }
  return expect_shape(op, result, want);
}

LogicalResult slice(const Diag& op, Value input, int64_t dim, int64_t start, int64_t end,
                    int64_t step, Result result) {
  auto d = norm_dim(dim, rank(input));
  if (!d || rank(input) == 0) return bad_dim(op, dim, rank(input));
  if (step < 1) return op.emitOpError("step must be >= 1, got ") << step;
  Shape want(dims(input).begin(), dims(input).end());
  const int64_t n = want[*d];
  if (n != kDyn) {  // PyTorch's clamping of start and end
    auto clamp = [n](int64_t v) { return std::min(std::max(v < 0 ? v + n : v, int64_t{0}), n); };
    const int64_t s = clamp(start), e = std::max(clamp(end), clamp(start));
    want[*d] = (e - s) / step + ((e - s) % step != 0);  // no overflow for any step
  }
  return expect_shape(op, result, want);
}

LogicalResult select(const Diag& op, Value input, int64_t dim, int64_t index, Result result) {
  auto d = norm_dim(dim, rank(input));
  if (!d || rank(input) == 0) return bad_dim(op, dim, rank(input));
  const int64_t n = dims(input)[*d];
  if (n != kDyn && (index < -n || index >= n))
    return op.emitOpError("index ")
           << index << " is out of range for dim " << dim << " of size " << n;
  Shape want(dims(input).begin(), dims(input).end());
  want.erase(want.begin() + *d);
  return expect_shape(op, result, want);
}

LogicalResult expand(const Diag& op, Value input, ArrayRef<int64_t> shape, Result result) {
  const size_t r = rank(input);
  if (shape.size() < r)
    return op.emitOpError("shape ")
           << str(shape) << " has fewer dims than the input " << input.getType();
  Shape want(shape.begin(), shape.end());
  for (size_t i = 0; i < r; ++i) {
    const int64_t from = dims(input)[i];
    int64_t& to = want[shape.size() - r + i];
    if (to == -1) to = from;
    if (!same(from, to) && from != 1)
      return op.emitOpError("cannot expand ") << input.getType() << " to " << str(shape);
  }
  return expect_shape(op, result, want);
}

LogicalResult as_strided(const Diag& op, Value, ArrayRef<int64_t> sizes, ArrayRef<int64_t> strides,
                         int64_t offset, Result result) {
  if (sizes.size() != strides.size() || offset < 0)
    return op.emitOpError("expects as many strides as sizes and offset >= 0, got sizes ")
           << str(sizes) << ", strides " << str(strides) << ", offset " << offset;
  return expect_shape(op, result, sizes);
}

namespace {
LogicalResult join(const Diag& op, ValueRange all, int64_t dim, Result result, bool stack) {
  if (all.empty()) return op.emitOpError("expects at least one input");
  // cat skips 1-d empty inputs, whatever the others' rank (PyTorch's legacy rule, as the runtime).
  SmallVector<Value, 4> inputs;
  for (Value v : all)
    if (stack || rank(v) != 1 || dims(v)[0] != 0) inputs.push_back(v);
  mlir::Type element = tensor(all[0]).getElementType();  // promoted over every input, as eager
  for (Value v : all) element = promote_types(element, tensor(v).getElementType());
  if (failed(expect_type(op, result, element))) return failure();
  if (inputs.empty()) return expect_shape(op, result, {0});
  const int64_t r = rank(inputs[0]);
  auto d = norm_dim(dim, r + (stack ? 1 : 0));
  if (!d || (!stack && r == 0)) return bad_dim(op, dim, r);
  Shape want(dims(inputs[0]).begin(), dims(inputs[0]).end());
  if (stack) want.insert(want.begin() + *d, static_cast<int64_t>(inputs.size()));
  for (Value v : ArrayRef<Value>(inputs).drop_front()) {
    if (rank(v) != r)
      return op.emitOpError("expects inputs of one rank, got ")
             << inputs[0].getType() << " and " << v.getType();
    for (int64_t i = 0; i < r; ++i) {
      if (!stack && i == *d) {
        const int64_t a = want[i], b = dims(v)[i];
        want[i] = derived({a, b}, [&] { return I128(a) + b; });
      } else if (!same(dims(v)[i], dims(inputs[0])[i])) {
        return op.emitOpError("inputs differ outside the joined dim: ")
               << inputs[0].getType() << " and " << v.getType();
      }
    }
  }
  return expect_shape(op, result, want);
}
}  // namespace

LogicalResult cat(const Diag& op, ValueRange inputs, int64_t dim, Result result) {
  return join(op, inputs, dim, result, false);
}
LogicalResult stack(const Diag& op, ValueRange inputs, int64_t dim, Result result) {
  return join(op, inputs, dim, result, true);
}

// --------------------------------------------------------- linear algebra and convolution

LogicalResult linear(const Diag& op, Value input, Value weight, Value bias, Result result) {
  if (rank(input) < 1 || rank(weight) != 2)
    return op.emitOpError("expects input of rank >= 1 and a 2-d weight, got ")
           << input.getType() << " and " << weight.getType();
  const int64_t out = dims(weight)[0];
  if (!same(dims(input).back(), dims(weight)[1]))
    return op.emitOpError("input features ")
           << dims(input).back() << " differ from the weight's " << dims(weight)[1];
  if (!absent(bias) && !same(dims(bias), {out}))
    return op.emitOpError("bias must be [") << out << "], got " << bias.getType();
  Shape want(dims(input).begin(), dims(input).end());
  want.back() = out;
  return expect_shape(op, result, want);
}

namespace {
// Output size of a convolution or pooling window along one dim (floor mode).
int64_t window_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return derived({in, k}, [&]() -> I128 {
    const I128 span = I128(in) + I128(2) * p - I128(d) * (k - 1) - 1;
    return span < 0 ? -1 : span / s + 1;
  });
}
}  // namespace

namespace {
// A convolution's input of c_in channels against its weight [C_out, C_in / groups, ...] and bias.
LogicalResult conv_channels_of(const Diag& op, int64_t c_in, Value weight, Value bias,
                               int64_t groups) {
  const int64_t per_group = dims(weight)[1], c_out = dims(weight)[0];
  if (c_in != kDyn && per_group != kDyn && c_in != per_group * groups)
    return op.emitOpError("input channels ")
           << c_in << " differ from weight channels " << per_group << " x groups " << groups;
  if (!absent(bias) && !same(dims(bias), {c_out}))
    return op.emitOpError("bias must be [") << c_out << "], got " << bias.getType();
  return success();
}
LogicalResult conv_channels(const Diag& op, Value input, Value weight, Value bias, int64_t groups) {
  return conv_channels_of(op, dims(input)[1], weight, bias, groups);
}

// conv2d's checks on input dims x [N, C, H, W]; its result's [N, C_out, H_out, W_out] in want.
LogicalResult conv2d_shape(const Diag& op, ArrayRef<int64_t> x, Value input, Value weight,
                           Value bias, ArrayRef<int64_t> stride, ArrayRef<int64_t> padding,
                           ArrayRef<int64_t> dilation, int64_t groups, Shape& want) {
  if (rank(input) != 4 || rank(weight) != 4)
    return op.emitOpError("expects a 4-d input and weight, got ")
           << input.getType() << " and " << weight.getType();
  if (stride.size() != 2 || padding.size() != 2 || dilation.size() != 2)
    return op.emitOpError("stride, padding and dilation must have 2 values each");
  if (groups < 1 || stride[0] < 1 || stride[1] < 1 || dilation[0] < 1 || dilation[1] < 1 ||
      padding[0] < 0 || padding[1] < 0)
    return op.emitOpError("expects groups, strides and dilations >= 1 and padding >= 0");
  if (failed(conv_channels_of(op, x[1], weight, bias, groups))) return failure();
  ArrayRef<int64_t> w = dims(weight);
  want = Shape{x[0], w[0], 0, 0};
  for (int k = 0; k < 2; ++k) {
    want[2 + k] = window_out(x[2 + k], w[2 + k], stride[k], padding[k], dilation[k]);
    if (want[2 + k] < 0 && want[2 + k] != kDyn)
      return op.emitOpError("the dilated kernel is larger than the padded input in dim ") << 2 + k;
  }
  return success();
}
}  // namespace

LogicalResult conv2d(const Diag& op, Value input, Value weight, Value bias,
                     ArrayRef<int64_t> stride, ArrayRef<int64_t> padding,
                     ArrayRef<int64_t> dilation, int64_t groups, Result result) {
  Shape want;
  if (failed(conv2d_shape(op, rank(input) == 4 ? dims(input) : ArrayRef<int64_t>(), input, weight,
                          bias, stride, padding, dilation, groups, want)))
    return failure();
  return expect_shape(op, result, want);
}

LogicalResult conv2d_layout(const Diag& op, Value input, Value weight, Value bias,
                            ArrayRef<int64_t> stride, ArrayRef<int64_t> padding,
                            ArrayRef<int64_t> dilation, int64_t groups, bool channels_last,
                            Result result) {
  if (!channels_last)
    return conv2d(op, input, weight, bias, stride, padding, dilation, groups, result);
  Shape x, want;
  if (rank(input) == 4) {
    ArrayRef<int64_t> nhwc = dims(input);
    x = Shape{nhwc[0], nhwc[3], nhwc[1], nhwc[2]};
  }
  if (failed(conv2d_shape(op, x, input, weight, bias, stride, padding, dilation, groups, want)))
    return failure();
  return expect_shape(op, result, {want[0], want[2], want[3], want[1]});
}

LogicalResult conv2d_avgpool(const Diag& op, Value input, Value weight, Value bias, int64_t groups,
                             Result result) {
  if (rank(input) != 4 || rank(weight) != 4)
    return op.emitOpError("expects a 4-d input and weight");
  if (groups < 1) return op.emitOpError("groups must be >= 1, got ") << groups;
  if (!absent(bias) && !same(dims(bias), {dims(weight)[0]}))
    return op.emitOpError("bias must be [") << dims(weight)[0] << "], got " << bias.getType();
  return expect_shape(op, result, {dims(input)[0], dims(weight)[0], 1, 1});
}

LogicalResult conv1d(const Diag& op, Value input, Value weight, Value bias, int64_t stride,
                     int64_t padding, int64_t dilation, int64_t groups, Result result) {
  if (rank(input) != 3 || rank(weight) != 3)
    return op.emitOpError("expects a 3-d input [N, C, L] and weight, got ")
           << input.getType() << " and " << weight.getType();
  if (groups < 1 || stride < 1 || dilation < 1 || padding < 0)
    return op.emitOpError("expects groups, stride and dilation >= 1 and padding >= 0");
  if (failed(conv_channels(op, input, weight, bias, groups))) return failure();
  ArrayRef<int64_t> x = dims(input), w = dims(weight);
  const int64_t l = window_out(x[2], w[2], stride, padding, dilation);
  if (l < 0 && l != kDyn) return op.emitOpError("the dilated kernel is larger than the input");
  return expect_shape(op, result, {x[0], w[0], l});
}

LogicalResult conv_transpose2d(const Diag& op, Value input, Value weight, Value bias,
                               ArrayRef<int64_t> stride, ArrayRef<int64_t> padding,
                               ArrayRef<int64_t> output_padding, int64_t groups,
                               ArrayRef<int64_t> dilation, Result result) {
  if (rank(input) != 4 || rank(weight) != 4)
    return op.emitOpError("expects a 4-d input and weight [C_in, C_out / groups, KH, KW], got ")
           << input.getType() << " and " << weight.getType();
  auto s = pair_of(stride), p = pair_of(padding), o = pair_of(output_padding),
       d = pair_of(dilation);
  if (!s || !p || !o || !d || groups < 1 || s->first < 1 || s->second < 1 || d->first < 1 ||
      d->second < 1 || p->first < 0 || p->second < 0 || o->first < 0 || o->second < 0)
    return op.emitOpError(
        "expects 2 values each, groups, strides and dilations >= 1, padding and output_padding "
        ">= 0");
  ArrayRef<int64_t> x = dims(input), w = dims(weight);
  if (!same(x[1], w[0]))
    return op.emitOpError("input channels ") << x[1] << " differ from the weight's " << w[0];
  const int64_t c_out = derived({w[1]}, [&] { return I128(w[1]) * groups; });
  if (!absent(bias) && !same(dims(bias), {c_out}))
    return op.emitOpError("bias must be [") << c_out << "], got " << bias.getType();
  auto extent = [](int64_t in, int64_t s, int64_t p, int64_t d, int64_t k, int64_t op_pad) {
    return derived(
        {in, k}, [&] { return (I128(in) - 1) * s - I128(2) * p + I128(d) * (k - 1) + op_pad + 1; });
  };
  return expect_shape(op, result,
                      {x[0], c_out, extent(x[2], s->first, p->first, d->first, w[2], o->first),
                       extent(x[3], s->second, p->second, d->second, w[3], o->second)});
}

LogicalResult mbconv(const Diag& op, Value input, Value expand_weight, Value expand_bias,
                     Value dw_weight, Value dw_bias, Value project_weight, Value project_bias,
                     ArrayRef<int64_t> stride, ArrayRef<int64_t> padding, Result result) {
  // The fused kernel is float32 only (the residual has the result's type: fused_epilogue).
  for (Value v :
       {input, expand_weight, expand_bias, dw_weight, dw_bias, project_weight, project_bias}) {
    if (!absent(v) && !tensor(v).getElementType().isF32())
      return op.emitOpError("expects float32 operands, got ") << v.getType();
  }
  if (rank(input) != 4 || rank(dw_weight) != 4 || rank(project_weight) != 4)
    return op.emitOpError("expects 4-d input, dw_weight and project_weight");
  ArrayRef<int64_t> x = dims(input), dw = dims(dw_weight), pw = dims(project_weight);
  const int64_t E = dw[0];
  if (!absent(expand_weight)) {
    if (!same(dims(expand_weight), {E, x[1], 1, 1}))
      return op.emitOpError("expand_weight must be [") << E << ", " << x[1] << ", 1, 1]";
  } else if (!same(x[1], E)) {
    return op.emitOpError("without expand_weight the input has dw_weight's ")
           << E << " channels, got " << x[1];
  }
  if (dw[1] != 1) return op.emitOpError("dw_weight must be [E, 1, KH, KW] (depthwise)");
  if (!same(pw[1], E) || pw[2] != 1 || pw[3] != 1)
    return op.emitOpError("project_weight must be [P, ") << E << ", 1, 1]";
  auto bias_ok = [&](Value b, int64_t n) { return absent(b) || same(dims(b), {n}); };
  if (!bias_ok(expand_bias, E) || !bias_ok(dw_bias, E) || !bias_ok(project_bias, pw[0]))
    return op.emitOpError("biases must be [E], [E] and [P]");
  auto s = pair_of(stride), p = pair_of(padding);
  if (!s || !p || s->first < 1 || s->second < 1 || p->first < 0 || p->second < 0 ||
      p->first >= dw[2] || p->second >= dw[3])
    return op.emitOpError("stride must be >= 1 and padding in [0, kernel) (2 values each)");
  return expect_shape(op, result,
                      {x[0], pw[0], window_out(x[2], dw[2], s->first, p->first, 1),
                       window_out(x[3], dw[3], s->second, p->second, 1)});
}

LogicalResult attention(const Diag& op, Value query, Value key, Value value, Value mask,
                        bool seq_first, Result result) {
  // The fused kernel is float32 only.
  for (Value v : {query, key, value, mask}) {
    if (!absent(v) && !tensor(v).getElementType().isF32())
      return op.emitOpError("expects float32 operands, got ") << v.getType();
  }
  const int64_t n = rank(query);
  if ((n != 3 && n != 4) || rank(key) != n || rank(value) != n)
    return op.emitOpError("expects query, key and value of rank 3 or 4 alike, got ")
           << query.getType() << ", " << key.getType() << " and " << value.getType();
  // [(outer,) batch, rows, features]; seq_first stores the rows before the batch.
  const size_t o = n - 3, b = seq_first ? o + 1 : o, r = seq_first ? o : o + 1, f = n - 1;
  ArrayRef<int64_t> q = dims(query), k = dims(key), v = dims(value);
  for (size_t d = 0; d <= o; ++d) {
    const size_t bd = d == o ? b : d;
    if (!same(k[bd], q[bd]) || !same(v[bd], q[bd]))
      return op.emitOpError("query, key and value must have ")
             << q[bd] << " batches (dim " << bd << ")";
  }
  if (!same(k[f], q[f]))
    return op.emitOpError("key features ") << k[f] << " differ from the query's " << q[f];
  if (!same(v[r], k[r]))
    return op.emitOpError("value rows ") << v[r] << " differ from the key's " << k[r];
  if (!absent(mask)) {
    Shape scores;
    if (n == 4) scores.push_back(q[0]);
    scores.append({q[b], q[r], k[r]});
    ArrayRef<int64_t> m = dims(mask);
    bool ok = m.size() <= scores.size();
    for (size_t i = 0; ok && i < m.size(); ++i)
      ok = m[i] == 1 || same(m[i], scores[scores.size() - m.size() + i]);
    if (!ok)
      return op.emitOpError("mask ")
             << str(m) << " does not broadcast to the scores " << str(scores);
  }
  Shape want(q.begin(), q.end());
  want[f] = v[f];
  return expect_shape(op, result, want);
}

LogicalResult activation(const Diag& op, Activation act, double lo, double hi) {
  if (act == Activation::Clamp && !(lo <= hi))
    return op.emitOpError("clamp bounds are not ordered: min ") << lo << " > max " << hi;
  return success();
}

LogicalResult fused_epilogue(const Diag& op, Value residual, Activation act, double lo, double hi,
                             Value result) {
  if (failed(activation(op, act, lo, hi))) return failure();
  if (!absent(residual) && residual.getType() != result.getType())
    return op.emitOpError("residual type ")
           << residual.getType() << " differs from the result type " << result.getType();
  return success();
}

// ---------------------------------------------------------------- pooling and resampling

LogicalResult pool2d(const Diag& op, Value input, ArrayRef<int64_t> kernel,
                     ArrayRef<int64_t> stride, ArrayRef<int64_t> padding,
                     ArrayRef<int64_t> dilation, bool ceil_mode, Result result) {
  if (failed(expect_rank(op, input, {3, 4}, "input"))) return failure();
  auto k = pair_of(kernel), s = pair_of(stride), p = pair_of(padding), d = pair_of(dilation);
  if (!k || !s || !p || !d || k->first < 1 || k->second < 1 || s->first < 1 || s->second < 1 ||
      d->first < 1 || d->second < 1 || p->first < 0 || p->second < 0)
    return op.emitOpError(
        "expects kernel, stride, padding and dilation of 2 values, kernel, stride and "
        "dilation >= 1 and padding >= 0");
  // The runtime's pool_output_size (kernels/pool.h), PyTorch's rule.
  auto out = [ceil_mode](int64_t in, int64_t k, int64_t s, int64_t pad, int64_t d) -> int64_t {
    if (in == kDyn) return kDyn;
    return derived({in}, [&]() -> I128 {
      const I128 num = I128(in) + I128(2) * pad - I128(d) * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
      I128 o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
      if (ceil_mode && (o - 1) * s >= I128(in) + pad) --o;
      return o;
    });
  };
  Shape want(dims(input).begin(), dims(input).end());
  const size_t r = want.size();
  want[r - 2] = out(want[r - 2], k->first, s->first, p->first, d->first);
  want[r - 1] = out(want[r - 1], k->second, s->second, p->second, d->second);
  return expect_shape(op, result, want);
}

LogicalResult adaptive_pool2d(const Diag& op, Value input, ArrayRef<int64_t> output_size,
                              Result result) {
  if (failed(expect_rank(op, input, {3, 4}, "input"))) return failure();
  auto o = pair_of(output_size);
  if (!o || o->first < 1 || o->second < 1)
    return op.emitOpError("output_size must be 2 values >= 1, got ") << str(output_size);
  Shape want(dims(input).begin(), dims(input).end());
  want[want.size() - 2] = o->first;
  want[want.size() - 1] = o->second;
  return expect_shape(op, result, want);
}

LogicalResult interpolate(const Diag& op, Value from, Value to, InterpolateMode mode,
                          bool align_corners, double scale_h, double scale_w) {
  if (align_corners && mode != InterpolateMode::Bilinear)
    return op.emitOpError("align_corners can only be set with mode 1 (bilinear)");
  if (!std::isfinite(scale_h) || !std::isfinite(scale_w) || scale_h < 0 || scale_w < 0)
    return op.emitOpError("scale factors must be finite and >= 0, got (")
           << scale_h << ", " << scale_w << ")";
  if ((scale_h > 0) != (scale_w > 0))
    return op.emitOpError("scale factors must be both set or both 0, got (")
           << scale_h << ", " << scale_w << ")";
  auto a = tensor(from), b = tensor(to);
  if (rank(from) != 4 || rank(to) != 4 || !llvm::isa<mlir::FloatType>(a.getElementType()))
    return op.emitOpError("expects 4-d float tensors, got ")
           << from.getType() << " and " << to.getType();
  if (a.getElementType() != b.getElementType() || !same(dims(from)[0], dims(to)[0]) ||
      !same(dims(from)[1], dims(to)[1]))
    return op.emitOpError("expects the same element type, N and C on both sides, got ")
           << from.getType() << " and " << to.getType();
  return success();
}

// ------------------------------------------------------ indexing, embedding, losses, random

LogicalResult index_select(const Diag& op, Value input, Value index, int64_t dim, Result result) {
  auto d = norm_dim(dim, rank(input));
  if (!d) return bad_dim(op, dim, rank(input));
  if (rank(index) > 1) return op.emitOpError("index must be 0-d or 1-d, got ") << index.getType();
  Shape want(dims(input).begin(), dims(input).end());
  if (!want.empty()) want[*d] = rank(index) == 0 ? 1 : dims(index)[0];
  return expect_shape(op, result, want);
}

LogicalResult embedding(const Diag& op, Value weight, Value indices, Result result) {
  if (rank(weight) != 2) return op.emitOpError("weight must be 2-d, got ") << weight.getType();
  Shape want(dims(indices).begin(), dims(indices).end());
  want.push_back(dims(weight)[1]);
  return expect_shape(op, result, want);
}

LogicalResult pad(const Diag& op, Value input, ArrayRef<int64_t> amounts, Result result) {
  const int64_t r = rank(input);
  if (amounts.size() % 2 != 0 || static_cast<int64_t>(amounts.size()) > 2 * r)
    return op.emitOpError("pad must hold an even number of values, at most 2 per dim (")
           << 2 * r << "), got " << str(amounts);
  Shape want(dims(input).begin(), dims(input).end());
  for (size_t i = 0; i < amounts.size() / 2; ++i) {
    int64_t& d = want[r - 1 - i];
    const int64_t before = d;
    d = derived({before}, [&] { return I128(before) + amounts[2 * i] + amounts[2 * i + 1]; });
    if (d < 0 && d != kDyn)
      return op.emitOpError("padding ") << str(amounts) << " leaves a negative size";
  }
  return expect_shape(op, result, want);
}

LogicalResult one_hot(const Diag& op, Value index, int64_t num_classes, Result result) {
  if (num_classes < -1)
    return op.emitOpError("num_classes must be -1 (from the data) or >= 0, got ") << num_classes;
  Shape want(dims(index).begin(), dims(index).end());
  want.push_back(num_classes == -1 ? kDyn : num_classes);
  return expect_shape(op, result, want);
}

LogicalResult topk(const Diag& op, Value input, int64_t k, int64_t dim, Result values,
                   Result indices) {
  auto d = norm_dim(dim, rank(input));
  if (!d) return bad_dim(op, dim, rank(input));
  Shape want(dims(input).begin(), dims(input).end());
  const int64_t n = want.empty() ? 1 : want[*d];
  if (k < 0 || (n != kDyn && k > n))
    return op.emitOpError("k must be in [0, ") << n << "], got " << k;
  if (!want.empty()) want[*d] = k;
  if (failed(expect_shape(op, values, want))) return failure();
  return expect_shape(op, indices, want, "indices");
}

LogicalResult class_loss(const Diag& op, Value input, Value target, Reduction reduction,
                         Result result) {
  if (reduction != Reduction::None) return expect_shape(op, result, {});
  // reduction none: one loss per sample, the class dim (1, or 0 for one sample) removed.
  Shape want(dims(input).begin(), dims(input).end());
  if (!want.empty()) want.erase(want.begin() + (want.size() >= 2 ? 1 : 0));
  (void)target;
  return expect_shape(op, result, want);
}

LogicalResult class_weight(const Diag& op, Value input, Value weight) {
  if (absent(weight)) return success();
  if (rank(input) == 0) return op.emitOpError("expects an input with a class dim, got a 0-d one");
  const int64_t classes = dims(input)[rank(input) >= 2 ? 1 : 0];
  if (same(dims(weight), {classes})) return success();
  return op.emitOpError("class weights must be [")
         << classes << "] (one per class), got " << weight.getType();
}

LogicalResult broadcasts_to(const Diag& op, Value v, Value to) {
  if (absent(v)) return success();
  auto b = broadcast(dims(v), dims(to));
  if (b && same(*b, dims(to))) return success();
  return op.emitOpError("operand ") << v.getType() << " does not broadcast to " << to.getType();
}

LogicalResult elementwise_loss(const Diag& op, Value input, Reduction reduction, Result result) {
  if (reduction != Reduction::None) return expect_shape(op, result, {});
  return expect_shape(op, result, dims(input));
}

LogicalResult random_state(const Diag& op, Value state, Result next_state) {
  if (!same(dims(state), {2}))
    return op.emitOpError("expects a Philox state tensor<2xi64> (seed, offset), got ")
           << state.getType();
  return expect_shape(op, next_state, {2}, "the next state");
}

LogicalResult per_tensor_quant(const Diag& op, Value scale, Value zero_point) {
  if (rank(scale) != 0 || rank(zero_point) != 0)
    return op.emitOpError("expects a 0-dim (per tensor) scale and zero point, got ")
           << scale.getType() << " and " << zero_point.getType();
  return mlir::success();
}

LogicalResult quant_params(const Diag& op, Value input, Value scale, Value zero_point,
                           int64_t axis) {
  if (!same(dims(scale), dims(zero_point)))
    return op.emitOpError("expects zero_point of scale's shape, got ")
           << zero_point.getType() << " and scale " << scale.getType();
  if (rank(scale) > 1)
    return op.emitOpError("expects scale of 0 dims (per tensor) or 1 (per channel), got ")
           << scale.getType();
  if (rank(scale) == 0) return mlir::success();
  const int64_t r = rank(input);
  if (axis < -r || axis >= r)
    return op.emitOpError("expects axis in [") << -r << ", " << r << "), got " << axis;
  const int64_t n = dims(input)[axis < 0 ? axis + r : axis], c = dims(scale)[0];
  if (n != mlir::ShapedType::kDynamic && c != mlir::ShapedType::kDynamic && n != c)
    return op.emitOpError("expects one scale per index of axis ")
           << axis << " (" << n << "), got " << c;
  return mlir::success();
}

}  // namespace kiln::ir::shape

namespace kiln::ir {
bool compatible_result_types(mlir::TypeRange inferred, mlir::TypeRange declared) {
  return shape::compatible(inferred, declared);
}
}  // namespace kiln::ir
