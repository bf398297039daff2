// --kiln-choose-layout: picks the activation layout of the convolutions by what the runtime's
// kernels run without a layout change, records it on the ops, and puts the conversions at the
// boundaries (kiln.permute, whose pairs --kiln-cleanup then cancels).
//
// float32: NCHW (the runtime's conv2d reads NCHW / OIHW; the func attribute `kiln.conv_layout =
// "nchw"` says so for the compiler and `kiln inspect`). Between consecutive channels-last
// kiln.mbconv blocks --kiln-mbconv-channels-last already hands activations over NHWC.
//
// int8: channels-last (`channels_last` on kiln.qconv2d / kiln.qconv2d_add), what MLAS, oneDNN
// and XNNPACK keep between int8 layers, for the convolutions the runtime runs that way with any
// microkernel family: depthwise ones (each pixel's channels are the vector lanes) and 1x1 ones
// of stride 1 (the product of the pixel rows with the weights), where NCHW transposes bytes on
// the way in or out. Where a function has two or more of them: each converted op gets
// permute(x, [0, 2, 3, 1]) before and permute(y, [0, 3, 1, 2]) after; between two converted
// layers the pair cancels, so only a chain's ends convert (MobileNetV2: after the stem and
// before the pooling). A single convolution keeps NCHW: it would need a conversion on each side
// for one layer (not measured either way).

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Pass/Pass.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

mlir::Value permuted(mlir::OpBuilder& b, mlir::Location loc, mlir::Value v,
                     llvm::ArrayRef<int64_t> dims) {
  auto t = mlir::cast<mlir::RankedTensorType>(v.getType());
  llvm::SmallVector<int64_t, 4> shape;
  for (int64_t d : dims) shape.push_back(t.getDimSize(d));
  mlir::OperationState state(loc, ir::PermuteOp::getOperationName());
  state.addOperands(v);
  state.addAttribute("dims", b.getDenseI64ArrayAttr(dims));
  state.addTypes(mlir::RankedTensorType::get(shape, t.getElementType()));
  return b.create(state)->getResult(0);
}

constexpr int64_t kToNhwc[] = {0, 2, 3, 1};
constexpr int64_t kToNchw[] = {0, 3, 1, 2};

// op (NCHW) -> permute(op'(permute(x)), ...) with op' channels-last; `other` of kiln.qconv2d_add
// (operand 9) permuted like the input.
void to_channels_last(mlir::Operation* op) {
  mlir::OpBuilder b(op);
  const mlir::Location loc = op->getLoc();
  llvm::SmallVector<mlir::Value> operands(op->getOperands());
  operands[0] = permuted(b, loc, operands[0], kToNhwc);
  if (mlir::isa<ir::Qconv2dAddOp>(op)) operands[9] = permuted(b, loc, operands[9], kToNhwc);
  mlir::OperationState state(loc, op->getName());
  state.addOperands(operands);
  state.addAttributes(op->getAttrs());
  state.addAttribute("channels_last", b.getBoolAttr(true));
  auto t = mlir::cast<mlir::RankedTensorType>(op->getResult(0).getType());
  state.addTypes(mlir::RankedTensorType::get(
      {t.getDimSize(0), t.getDimSize(2), t.getDimSize(3), t.getDimSize(1)}, t.getElementType()));
  mlir::Operation* nhwc = b.create(state);
  op->getResult(0).replaceAllUsesWith(permuted(b, loc, nhwc->getResult(0), kToNchw));
  op->erase();
}

bool ranked4(mlir::Value v) {
  auto t = mlir::dyn_cast<mlir::RankedTensorType>(v.getType());
  return t && t.getRank() == 4;
}

// Whether the runtime runs the int8 convolution `op` channels-last with every microkernel family
// and no layout copy: depthwise (groups = input channels = output channels) or 1x1 of stride 1
// without padding or groups. (Dense k x k ones have a channels-last kernel only where the
// family has a direct tile (AVX-512 VNNI, AMX); elsewhere they would run on NCHW copies.)
bool channels_last_kernel(mlir::Operation* op) {
  auto w = mlir::dyn_cast<mlir::RankedTensorType>(op->getOperand(3).getType());
  auto x = mlir::dyn_cast<mlir::RankedTensorType>(op->getOperand(0).getType());
  auto stride = op->getAttrOfType<mlir::DenseI64ArrayAttr>("stride");
  auto padding = op->getAttrOfType<mlir::DenseI64ArrayAttr>("padding");
  auto groups = op->getAttrOfType<mlir::IntegerAttr>("groups");
  if (!w || !x || w.getRank() != 4 || !w.hasStaticShape() || !stride || !padding || !groups)
    return false;
  const int64_t g = groups.getInt(), c_out = w.getDimSize(0);
  if (g > 1) return g == c_out && w.getDimSize(1) == 1 && x.getDimSize(1) == g;
  return w.getDimSize(2) == 1 && w.getDimSize(3) == 1 &&
         llvm::all_of(stride.asArrayRef(), [](int64_t v) { return v == 1; }) &&
         llvm::all_of(padding.asArrayRef(), [](int64_t v) { return v == 0; });
}

struct ChooseLayoutPass
    : mlir::PassWrapper<ChooseLayoutPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(ChooseLayoutPass)
  llvm::StringRef getArgument() const override { return "kiln-choose-layout"; }
  llvm::StringRef getDescription() const override {
    return "Choose the convolutions' activation layout: NCHW for float32, channels-last between "
           "int8 convolutions";
  }
  void runOnOperation() override {
    bool has_conv = false;
    llvm::SmallVector<mlir::Operation*> int8_convs;
    getOperation().walk([&](mlir::Operation* op) {
      has_conv |= mlir::isa<ir::Conv2dOp, ir::Conv2dFusedOp, ir::Conv2dAvgpoolOp, ir::MbconvOp,
                            ir::Conv1dOp>(op);
      auto flag = op->getAttrOfType<mlir::BoolAttr>("channels_last");
      if (mlir::isa<ir::Qconv2dOp, ir::Qconv2dAddOp>(op) && !(flag && flag.getValue()) &&
          ranked4(op->getOperand(0)) && ranked4(op->getResult(0)) && channels_last_kernel(op))
        int8_convs.push_back(op);
    });
    if (has_conv) {
      getOperation()->setAttr("kiln.conv_layout", mlir::StringAttr::get(&getContext(), "nchw"));
    }
    if (int8_convs.size() >= 2)
      for (mlir::Operation* op : int8_convs) to_channels_last(op);
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_choose_layout_pass() {
  return std::make_unique<ChooseLayoutPass>();
}

}  // namespace kiln::passes
