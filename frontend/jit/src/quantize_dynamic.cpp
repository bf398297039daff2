// kiln::quant::quantize_dynamic (kiln/jit/quantize.h): int8 weights for every kiln.linear with a
// constant weight, the input quantized per call by kiln.qlinear_dynamic. The policy (which
// layers, which weight scheme) is here; --kiln-insert-qdq rewrites the marked layers.

#include <map>

#include "kiln/ir/KilnDialect.h"
#include "kiln/jit/quantize.h"
#include "kiln/passes/Passes.h"
#include "pipeline.h"
#include "quantize_internal.h"

namespace kiln::quant {

jit::TracedFunction quantize_dynamic(jit::TracedFunction fn, const DynamicQConfig& config,
                                     std::vector<LayerReport>* layers) {
  constexpr const char* kWho = "kiln::quant::quantize_dynamic";
  detail::freeze_for_quantization(fn, kWho);
  mlir::func::FuncOp forward = detail::forward_of(fn.module());
  mlir::Builder b(fn.module()->getContext());
  // One kiln.qweight per weight: an unrolled recurrent layer's T steps share theirs (one blob).
  std::map<mlir::Operation*, mlir::DictionaryAttr> qweight_of;
  int64_t index = 0;
  forward.walk([&](ir::LinearOp linear) {
    LayerReport r;
    r.op = "linear";
    r.index = index++;
    r.location = detail::location_of(linear);
    r.weight_shape = detail::shape_of(linear->getOperand(1));
    auto is_f32 = [](mlir::Value v) {
      auto t = mlir::dyn_cast<mlir::RankedTensorType>(v.getType());
      return t && t.getElementType().isF32();
    };
    auto weight = linear->getOperand(1).getDefiningOp<ir::ConstantOp>();
    if (!weight || !is_f32(linear->getOperand(1)))
      r.reason = "its weight is not a float32 constant";
    else if (!is_f32(linear->getOperand(0)) || !is_f32(linear.getResult()))
      r.reason = "its input or result is not float32";
    r.quantized = r.reason.empty();
    if (r.quantized) {
      auto [it, fresh] = qweight_of.try_emplace(weight, mlir::DictionaryAttr{});
      if (fresh)
        it->second =
            detail::weight_attr(b, jit::constant_value(weight), config.per_channel_weights);
      linear->setAttr("kiln.qweight", it->second);
      linear->setAttr("kiln.qdynamic", b.getUnitAttr());
    }
    if (layers) layers->push_back(std::move(r));
  });
  const std::string err = jit::run_pipeline(fn.context(), fn.module(), [](mlir::OpPassManager& pm) {
    pm.addNestedPass<mlir::func::FuncOp>(passes::create_insert_qdq_pass());
    pm.addNestedPass<mlir::func::FuncOp>(passes::create_cleanup_pass());
  });
  KILN_CHECK(err.empty(), kWho, "writing the int8 weights: ", err);
  return fn;
}

jit::TracedFunction quantize_dynamic(nn::Module& module, const TensorList& example_inputs,
                                     const DynamicQConfig& config,
                                     std::vector<LayerReport>* layers) {
  return quantize_dynamic(detail::trace_for_quantization(module, example_inputs), config, layers);
}

}  // namespace kiln::quant
