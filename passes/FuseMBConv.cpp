// --kiln-fuse-mbconv: MobileNetV2's inverted-residual block, a chain of kiln.conv2d(_fused)
//   e = conv(x)  1x1, stride 1, no padding, one group, no residual     (absent in t=1 blocks)
//   d = conv(e)  depthwise (groups = channels), dilation 1, no residual
//   y = conv(d)  1x1, stride 1, no padding, one group, any residual
// where e and d are each used by the next conv only, becomes one kiln.mbconv: the runtime runs it
// in bands of output rows so e and d never leave the cache (kernels/mbconv.h).
//
// The pass records how the runtime runs each block (kiln.mbconv's `strategy`; the kernel follows
// it). A block fuses when the expanded tensor e holds at least `min-bytes` (without an expansion:
// x, and at least `no-expand-min-bytes`; kiln::jit::save passes the target description's L2 and a
// quarter of its L3, the defaults are Zen 4's 1 MB and 8 MB), and runs in bands of rows
// (`banded`) unless one image is small (below). Since the bands' expansion
// writes the depthwise's channel-interleaved layout and the depthwise the projection's packed
// operand, the fused 112x112 and 56x56 blocks beat three convs at batch 1 too (2 threads, paired:
// 96@112 stride 2 0.84, 144@56 0.95, 144@56 stride 2 0.82; batch 8 0.69-0.79), so MobileNetV2's
// blocks 2-4 (1.8-4.8 MB at batch 1) fuse at every batch. When one image's expanded tensor (e, or
// x without expansion) holds at most `small-max-bytes` before and after the depthwise (the
// target's mbconv_whole_image_bytes, which kiln::jit::save passes; 640 KB by default:
// MobileNetV2's 28x28, 14x14 and 7x7 blocks), it runs channels-last, a whole image at a time
// (`channels_last`), which spares the transposes NCHW costs on small maps. Measured on Zen 3 with
// bench/paired.py (2 threads, median within-round ratio to three convs): channels-last 0.87-0.92 at
// batch 1 and 0.89-0.92 at batch 8 for 192@28 stride 2 and the 14x14/7x7 blocks, 0.96-1.05 for
// 384@14 and 192@28.

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

#include "ConstantData.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

llvm::ArrayRef<int64_t> shape_of(mlir::Value v) {
  return mlir::cast<mlir::RankedTensorType>(v.getType()).getShape();
}

bool is_f32(mlir::Value v) {
  auto t = mlir::dyn_cast<mlir::RankedTensorType>(v.getType());
  return t && t.getElementType().isF32() && t.hasStaticShape();
}

bool absent(mlir::Value v) {
  return mlir::isa<mlir::NoneType>(v.getType());
}

bool ints_are(mlir::Operation* op, const char* name, std::initializer_list<int64_t> want) {
  auto a = op->getAttrOfType<mlir::DenseI64ArrayAttr>(name);
  return a && a.asArrayRef() == llvm::ArrayRef<int64_t>(want.begin(), want.size());
}

// kiln.conv2d (what epilogue fusion leaves when there was nothing to absorb, e.g. a projection
// with only its folded bias) or kiln.conv2d_fused.
bool is_conv(mlir::Operation* op) {
  if (!op) return false;
  return mlir::isa<ir::Conv2dOp, ir::Conv2dFusedOp>(op);
}

// The residual operand, or null (kiln.conv2d has none).
mlir::Value residual_of(mlir::Operation* op) {
  return op->getNumOperands() > 3 && !absent(op->getOperand(3)) ? op->getOperand(3) : nullptr;
}

// A conv computing a 1x1 stride-1 unpadded one-group conv, in float32.
bool is_pointwise(mlir::Operation* op) {
  if (!is_conv(op)) return false;
  llvm::ArrayRef<int64_t> w = shape_of(op->getOperand(1));
  return is_f32(op->getOperand(0)) && is_f32(op->getResult(0)) && w.size() == 4 && w[2] == 1 &&
         w[3] == 1 && ints_are(op, "stride", {1, 1}) && ints_are(op, "padding", {0, 0}) &&
         ints_are(op, "dilation", {1, 1}) &&
         mlir::cast<mlir::IntegerAttr>(op->getAttr("groups")).getInt() == 1;
}

// A conv computing a depthwise conv (groups = in = out channels), dilation 1, float32.
bool is_depthwise(mlir::Operation* op) {
  if (!is_conv(op)) return false;
  llvm::ArrayRef<int64_t> x = shape_of(op->getOperand(0)), w = shape_of(op->getOperand(1));
  const int64_t groups = mlir::cast<mlir::IntegerAttr>(op->getAttr("groups")).getInt();
  return is_f32(op->getOperand(0)) && is_f32(op->getResult(0)) && x.size() == 4 && w.size() == 4 &&
         w[1] == 1 && groups == x[1] && groups == w[0] && groups > 1 &&
         ints_are(op, "dilation", {1, 1}) && !residual_of(op);
}

mlir::Operation* only_user(mlir::Value v) {
  return v.hasOneUse() ? *v.getUsers().begin() : nullptr;
}

// The step's activation attributes (kiln.conv2d: none), or none when `from` is null.
void copy_activation(mlir::OperationState& state, mlir::OpBuilder& b, mlir::Operation* from,
                     const std::string& step) {
  const bool fused = from && mlir::isa<ir::Conv2dFusedOp>(from);
  state.addAttribute(step + "_activation",
                     fused ? from->getAttr("activation") : b.getI64IntegerAttr(0));
  state.addAttribute(step + "_clamp_min",
                     fused ? from->getAttr("clamp_min") : b.getF64FloatAttr(0));
  state.addAttribute(step + "_clamp_max",
                     fused ? from->getAttr("clamp_max") : b.getF64FloatAttr(0));
}

bool fuse(mlir::Operation* dw, const MBConvThresholds& t) {
  if (!is_depthwise(dw)) return false;
  // What kiln.mbconv accepts beyond conv2d: padding below the kernel, stride within the padded
  // input (a conv outside those stays as it is).
  llvm::ArrayRef<int64_t> x = shape_of(dw->getOperand(0)), w = shape_of(dw->getOperand(1));
  auto stride = mlir::cast<mlir::DenseI64ArrayAttr>(dw->getAttr("stride")).asArrayRef();
  auto pad = mlir::cast<mlir::DenseI64ArrayAttr>(dw->getAttr("padding")).asArrayRef();
  if (stride.size() != 2 || pad.size() != 2 || pad[0] >= w[2] || pad[1] >= w[3] ||
      stride[0] > x[2] + 2 * pad[0] || stride[1] > x[3] + 2 * pad[1])
    return false;
  mlir::Operation* project = only_user(dw->getResult(0));
  if (!is_pointwise(project) || project->getOperand(0) != dw->getResult(0) ||
      project->getBlock() != dw->getBlock())
    return false;
  mlir::Operation* expand = dw->getOperand(0).getDefiningOp();
  if (!is_pointwise(expand) || !dw->getOperand(0).hasOneUse() || residual_of(expand) ||
      expand->getBlock() != dw->getBlock())
    expand = nullptr;
  // The expanded tensor's size decides (e, or x when the block does not expand).
  llvm::ArrayRef<int64_t> e_shape = shape_of(dw->getOperand(0));
  int64_t elems = 1;
  for (int64_t d : e_shape) elems *= d;
  const int64_t image_bytes = e_shape[0] > 0 ? elems / e_shape[0] * 4 : 0;
  const bool small = elems > 0 && image_bytes <= t.small_max_bytes;
  // The depthwise output's image too (a stride-1 kernel with wide padding grows the map).
  llvm::ArrayRef<int64_t> d_shape = shape_of(dw->getResult(0));
  const int64_t d_image_bytes = d_shape[1] * d_shape[2] * d_shape[3] * 4;
  const bool whole_images = small && d_image_bytes <= t.small_max_bytes;
  // Without an expansion, bands save only the depthwise output's round trip, which pays once it
  // no longer stays in the L3 (no-expand-min-bytes, whatever min-bytes asks): MobileNetV2's t=1
  // block fused is 1.13-1.27x two convs at batch 1 (1.6 MB) and 0.91-0.95x at batch 8 (12.8 MB);
  // 0.92-1.04 and 0.78 since the expanded blocks' rework, which left its own path as it was.
  const bool large = elems * 4 >= t.min_bytes && (expand || elems * 4 >= t.no_expand_min_bytes);
  if (!small && !large) return false;

  mlir::OpBuilder b(project);
  mlir::Location loc = dw->getLoc();
  mlir::Value none = make_none(b, loc);
  mlir::OperationState state(loc, "kiln.mbconv");
  state.addOperands({expand ? expand->getOperand(0) : dw->getOperand(0),
                     expand ? expand->getOperand(1) : none, expand ? expand->getOperand(2) : none,
                     dw->getOperand(1), dw->getOperand(2), project->getOperand(1),
                     project->getOperand(2), residual_of(project) ? residual_of(project) : none});
  state.addAttribute("stride", dw->getAttr("stride"));
  state.addAttribute("padding", dw->getAttr("padding"));
  copy_activation(state, b, expand, "expand");
  copy_activation(state, b, dw, "dw");
  copy_activation(state, b, project, "project");
  state.addAttribute(
      "strategy",
      b.getI64IntegerAttr(static_cast<int64_t>(whole_images ? ir::MBConvStrategy::ChannelsLast
                                                            : ir::MBConvStrategy::Banded)));
  state.addTypes(project->getResult(0).getType());
  mlir::Operation* block = b.create(state);
  project->getResult(0).replaceAllUsesWith(block->getResult(0));
  project->erase();
  dw->erase();
  if (expand) expand->erase();
  return true;
}

struct FuseMBConvPass : mlir::PassWrapper<FuseMBConvPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(FuseMBConvPass)
  FuseMBConvPass() = default;
  FuseMBConvPass(const FuseMBConvPass& other) : PassWrapper(other) {}
  explicit FuseMBConvPass(const MBConvThresholds& t) {
    min_bytes_ = t.min_bytes;
    no_expand_min_bytes_ = t.no_expand_min_bytes;
    small_max_bytes_ = t.small_max_bytes;
  }
  llvm::StringRef getArgument() const override { return "kiln-fuse-mbconv"; }
  llvm::StringRef getDescription() const override {
    return "Fuse expand 1x1 -> depthwise -> project 1x1 conv chains into kiln.mbconv";
  }
  void runOnOperation() override {
    llvm::SmallVector<mlir::Operation*> depthwise;
    getOperation().walk([&](mlir::Operation* op) {
      if (is_depthwise(op)) depthwise.push_back(op);
    });
    const MBConvThresholds t{min_bytes_, no_expand_min_bytes_, small_max_bytes_};
    for (mlir::Operation* op : depthwise) fuse(op, t);
  }
  Option<int64_t> min_bytes_{*this, "min-bytes",
                             llvm::cl::desc("fuse only blocks whose expanded tensor has this many "
                                            "bytes or more"),
                             llvm::cl::init(MBConvThresholds{}.min_bytes)};
  Option<int64_t> no_expand_min_bytes_{
      *this, "no-expand-min-bytes",
      llvm::cl::desc("fuse a block without expansion only when its input has this many bytes or "
                     "more (whatever min-bytes says)"),
      llvm::cl::init(MBConvThresholds{}.no_expand_min_bytes)};
  Option<int64_t> small_max_bytes_{
      *this, "small-max-bytes",
      llvm::cl::desc("also fuse blocks whose expanded tensor has at most this many bytes per "
                     "image (-1: none)"),
      llvm::cl::init(MBConvThresholds{}.small_max_bytes)};
};

}  // namespace

std::unique_ptr<mlir::Pass> create_fuse_mbconv_pass(const MBConvThresholds& thresholds) {
  return std::make_unique<FuseMBConvPass>(thresholds);
}

}  // namespace kiln::passes
