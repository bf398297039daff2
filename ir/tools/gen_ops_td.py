#!/usr/bin/env python3
"""Writes the kiln dialect's ODS (KilnOps.td) from the op table below: one op per traced op family.

The table is the single place that lists kiln's traced ops with their attributes (names match the
attributes the eager dispatcher reports to the tracer). The build runs this script (see
ir/include/kiln/ir/CMakeLists.txt) and nothing it writes is committed:
    python3 ir/tools/gen_ops_td.py -o build/.../KilnOps.td    (no -o: standard output)
    python3 ir/tools/gen_ops_td.py --codegen-tables -o build/.../KilnCodegenOps.inc
The output depends on the table only, so two runs write the same bytes.
"""

import os
import sys

T = "Kiln_Tensor"       # any ranked tensor
OT = "Kiln_OptTensor"   # a ranked tensor or kiln.none

I64 = "I64Attr"
F64 = "F64Attr"
BOOL = "BoolAttr"
ARR = "DenseI64ArrayAttr"

# name: (operands, num_results, attributes, summary)
BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum"]
COMPARE = ["eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or"]
UNARY = ["neg", "abs", "exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid",
         "relu", "silu", "erf", "floor", "ceil", "round", "sign", "reciprocal", "logical_not",
         "clone"]
OPS = {
    "gelu": (["input"], 1, {"approximate": BOOL}, "GELU (erf form, or tanh approximation)"),
    "leaky_relu": (["input"], 1, {"negative_slope": F64}, "max(x,0) + slope*min(x,0)"),
    "clamp": (["input"], 1, {"min": F64, "max": F64}, "clamp to [min, max] (+-inf = no bound)"),
    "to": (["input"], 1, {"dtype": I64}, "element type conversion"),
    "where": (["condition", "lhs", "rhs"], 1, {}, "select lhs where condition else rhs"),
    "fill": (["input"], 1, {"value": F64}, "a tensor like input filled with value"),
    "copy": (["dst", "src"], 1, {}, "src broadcast into dst's shape and type (functional copy_)"),
    # reductions
    "sum": (["input"], 1, {"dims": ARR, "keepdim": BOOL}, "sum over dims (empty = all)"),
    "mean": (["input"], 1, {"dims": ARR, "keepdim": BOOL}, "mean over dims"),
    "prod": (["input"], 1, {"dims": ARR, "keepdim": BOOL}, "product over dims"),
    "amax": (["input"], 1, {"dims": ARR, "keepdim": BOOL}, "max over dims"),
    "amin": (["input"], 1, {"dims": ARR, "keepdim": BOOL}, "min over dims"),
    "max": (["input"], 2, {"dim": I64, "keepdim": BOOL}, "max values and indices along dim"),
    "min": (["input"], 2, {"dim": I64, "keepdim": BOOL}, "min values and indices along dim"),
    "argmax": (["input"], 1, {"dim": I64, "keepdim": BOOL}, "argmax (dim = INT64_MIN: flat)"),
    "argmin": (["input"], 1, {"dim": I64, "keepdim": BOOL}, "argmin (dim = INT64_MIN: flat)"),
    "var": (["input"], 1, {"dims": ARR, "unbiased": BOOL, "keepdim": BOOL}, "variance"),
    "norm": (["input"], 1, {"p": F64, "dims": ARR, "keepdim": BOOL}, "vector p-norm"),
    "logsumexp": (["input"], 1, {"dims": ARR, "keepdim": BOOL}, "log(sum(exp(x)))"),
    "softmax": (["input"], 1, {"dim": I64}, "softmax along dim"),
    "log_softmax": (["input"], 1, {"dim": I64}, "log-softmax along dim"),
    "softmax_backward": (["grad", "output"], 1, {"dim": I64}, "softmax gradient"),
    "log_softmax_backward": (["grad", "output"], 1, {"dim": I64}, "log-softmax gradient"),
    "cumsum": (["input"], 1, {"dim": I64}, "inclusive cumulative sum"),
    # views and shapes (functional: results are new values)
    "view": (["input"], 1, {"shape": ARR}, "reshape of a viewable tensor"),
    "reshape": (["input"], 1, {"shape": ARR}, "reshape"),
    "transpose": (["input"], 1, {"dim0": I64, "dim1": I64}, "swap two dims"),
    "permute": (["input"], 1, {"dims": ARR}, "reorder dims"),
    "slice": (["input"], 1, {"dim": I64, "start": I64, "end": I64, "step": I64}, "strided slice"),
    "select": (["input"], 1, {"dim": I64, "index": I64}, "index one dim away"),
    "expand": (["input"], 1, {"shape": ARR}, "broadcast to shape"),
    "as_strided": (["input"], 1, {"sizes": ARR, "strides": ARR, "offset": I64}, "strided view"),
    # linear algebra
    "linear": (["input", "weight", "bias"], 1, {}, "input @ weight^T + bias (bias may be none)"),
    # neural-network ops
    "conv2d": (["input", "weight", "bias"], 1,
               {"stride": ARR, "padding": ARR, "dilation": ARR, "groups": I64}, "2-d convolution"),
    "conv1d": (["input", "weight", "bias"], 1,
               {"stride": I64, "padding": I64, "dilation": I64, "groups": I64}, "1-d convolution"),
    "conv_transpose2d": (["input", "weight", "bias"], 1,
                         {"stride": ARR, "padding": ARR, "output_padding": ARR, "groups": I64,
                          "dilation": ARR}, "transposed 2-d convolution"),
    "max_pool2d": (["input"], 2, {"kernel": ARR, "stride": ARR, "padding": ARR, "dilation": ARR,
                                  "ceil_mode": BOOL}, "max pooling with indices"),
    "avg_pool2d": (["input"], 1, {"kernel": ARR, "stride": ARR, "padding": ARR,
                                  "ceil_mode": BOOL, "count_include_pad": BOOL}, "average pooling"),
    "adaptive_avg_pool2d": (["input"], 1, {"output_size": ARR}, "adaptive average pooling"),
    # mode: kernels::InterpolateMode (0 nearest, 1 bilinear); scale_h/w: the user's scale factors
    # (0 = none; when set the source step is 1/scale, not in/out). Output size: the result type.
    "interpolate": (["input"], 1, {"mode": I64, "align_corners": BOOL, "scale_h": F64,
                                   "scale_w": F64}, "resample H and W (F.interpolate)"),
    "batch_norm": (["input", "running_mean", "running_var", "weight", "bias"], 1,
                   {"training": BOOL, "momentum": F64, "eps": F64}, "batch normalization"),
    "batch_norm_update_stats": (["input", "running_mean", "running_var"], 2, {"momentum": F64},
                                "training-mode running-statistics update (new mean, new var)"),
    "layer_norm": (["input", "weight", "bias"], 1, {"normalized_shape": ARR, "eps": F64},
                   "layer normalization"),
    "group_norm": (["input", "weight", "bias"], 1, {"num_groups": I64, "eps": F64},
                   "group normalization"),
    # gradients of the ops whose backward runs fused kernels (traced training steps)
    "conv2d_backward": (["grad", "input", "weight"], 3,
                        {"stride": ARR, "padding": ARR, "dilation": ARR, "groups": I64},
                        "conv2d gradients (input, weight, bias)"),
    "max_pool2d_backward": (["grad", "indices"], 1, {}, "max_pool2d gradient (scatter to argmax)"),
    "avg_pool2d_backward": (["grad"], 1, {"kernel": ARR, "stride": ARR, "padding": ARR,
                                          "ceil_mode": BOOL, "count_include_pad": BOOL},
                            "avg_pool2d gradient"),
    "adaptive_avg_pool2d_backward": (["grad"], 1, {}, "adaptive_avg_pool2d gradient"),
    "interpolate_backward": (["grad"], 1, {"mode": I64, "align_corners": BOOL, "scale_h": F64,
                                            "scale_w": F64}, "interpolate gradient"),
    "batch_norm_backward": (["grad", "input", "weight", "running_mean", "running_var"], 3,
                            {"training": BOOL, "eps": F64},
                            "batch_norm gradients (input, weight, bias); batch statistics are "
                            "recomputed from input in training mode"),
    "embedding": (["weight", "indices"], 1, {"padding_idx": I64}, "row lookup"),
    "dropout": (["input", "mask"], 1, {"p": F64}, "input * mask / (1 - p)"),
    # random: each draws from an explicit Philox state operand tensor<2xi64> (seed, offset) and
    # returns (values, next state), so the ops are pure and a trace replays a fresh stream
    "uniform": (["state"], 2, {"low": F64, "high": F64}, "uniform in [low, high)"),
    "normal": (["state"], 2, {"mean": F64, "std": F64}, "normal(mean, std)"),
    "randint": (["state"], 2, {"low": I64, "high": I64}, "uniform integers in [low, high)"),
    "dropout_mask": (["state"], 2, {"p": F64}, "keep-mask: 1 with probability 1 - p"),
    "cross_entropy": (["input", "target"], 1,
                      {"ignore_index": I64, "reduction": I64, "label_smoothing": F64},
                      "cross entropy from logits"),
    "nll_loss": (["input", "target"], 1, {"ignore_index": I64, "reduction": I64},
                 "negative log likelihood"),
    "mse_loss": (["input", "target"], 1, {"reduction": I64}, "mean squared error"),
    "mse_loss_backward": (["grad", "input", "target"], 1, {"reduction": I64},
                          "gradient of mse_loss with respect to input"),
    "cross_entropy_backward": (["grad", "input", "target"], 1,
                               {"ignore_index": I64, "reduction": I64, "label_smoothing": F64},
                               "gradient of cross_entropy with respect to the logits"),
    "smooth_l1_loss": (["input", "target"], 1, {"reduction": I64, "beta": F64}, "smooth L1"),
    "binary_cross_entropy_with_logits": (["input", "target"], 1, {"reduction": I64},
                                         "binary cross entropy from logits"),
    # indexing and joining
    "index_select": (["input", "index"], 1, {"dim": I64}, "rows along dim"),
    "index_add": (["input", "index", "source"], 1, {"dim": I64, "alpha": F64}, "index add"),
    "gather": (["input", "index"], 1, {"dim": I64}, "gather along dim"),
    "scatter": (["input", "index", "src"], 1, {"dim": I64}, "scatter src along dim"),
    "scatter_value": (["input", "index"], 1, {"dim": I64, "value": F64}, "scatter a value"),
    "scatter_add": (["input", "index", "src"], 1, {"dim": I64}, "scatter-add along dim"),
    "masked_fill": (["input", "mask"], 1, {"value": F64}, "fill where mask"),
    "pad": (["input"], 1, {"pad": ARR, "mode": I64, "value": F64}, "pad trailing dims"),
    "one_hot": (["index"], 1, {"num_classes": I64}, "one-hot encoding"),
    "topk": (["input"], 2, {"k": I64, "dim": I64, "largest": BOOL, "sorted": BOOL}, "top k"),
    "sort": (["input"], 2, {"dim": I64, "descending": BOOL}, "sort along dim"),
    "argsort": (["input"], 1, {"dim": I64, "descending": BOOL}, "sorting indices along dim"),
    # fused ops made by passes (never traced): act(op(...) + bias + residual), `activation` is the
    # runtime's kernels::Activation (0 none, 1 relu, 2 relu6, 3 clamp, 4 gelu, 5 gelu-tanh,
    # 6 silu, 7 sigmoid, 8 tanh); clamp_min/clamp_max are used by clamp only.
    "conv2d_fused": (["input", "weight", "bias", "residual"], 1,
                     {"stride": ARR, "padding": ARR, "dilation": ARR, "groups": I64,
                      "activation": I64, "clamp_min": F64, "clamp_max": F64},
                     "conv2d + bias + residual + activation in one kernel"),
    # a classifier head (--kiln-fuse-conv-avgpool): adaptive_avg_pool2d to 1x1 of a conv2d_fused
    # without residual, result [N, C_out, 1, 1] (runtime conv2d_avgpool_out).
    "conv2d_avgpool": (["input", "weight", "bias"], 1,
                       {"stride": ARR, "padding": ARR, "dilation": ARR, "groups": I64,
                        "activation": I64, "clamp_min": F64, "clamp_max": F64},
                       "conv2d + bias + activation, then the mean over each output plane"),
    "linear_fused": (["input", "weight", "bias", "residual"], 1,
                     {"activation": I64, "clamp_min": F64, "clamp_max": F64},
                     "linear + bias + residual + activation in one kernel"),
    # MobileNetV2's inverted residual, made by --kiln-fuse-mbconv (runtime kernels/mbconv.h):
    # e = act(conv1x1(input, expand_weight) + expand_bias) (none: e = input),
    # d = act(depthwise(e, dw_weight, stride, padding) + dw_bias),
    # result = act(conv1x1(d, project_weight) + project_bias + residual).
    "mbconv": (["input", "expand_weight", "expand_bias", "dw_weight", "dw_bias", "project_weight",
                "project_bias", "residual"], 1,
               {"stride": ARR, "padding": ARR,
                "expand_activation": I64, "expand_clamp_min": F64, "expand_clamp_max": F64,
                "dw_activation": I64, "dw_clamp_min": F64, "dw_clamp_max": F64,
                "project_activation": I64, "project_clamp_min": F64, "project_clamp_max": F64,
                # set by --kiln-mbconv-channels-last (absent: false)
                "channels_last_in": "OptionalAttr<BoolAttr>",
                "channels_last_out": "OptionalAttr<BoolAttr>"},
               "expand 1x1 + depthwise + project 1x1 (+ residual) conv block in one kernel"),
}
VARIADIC = {
    "cat": ({"dim": I64}, "concatenate along dim"),
    "stack": ({"dim": I64}, "stack along a new dim"),
}
VERIFIED = {"conv2d", "conv2d_fused", "conv2d_avgpool", "linear_fused", "mbconv", "interpolate",
            "interpolate_backward"}  # custom verifier in ir/lib/KilnOps.cpp
OPTIONAL_OPERANDS = {"bias", "running_mean", "running_var", "weight_opt", "residual",
                     "expand_weight", "expand_bias", "dw_bias", "project_bias"}

# How code generation runs each op (codegen/src/lower): generated loops for the elementwise ops,
# strided views, and for every other op of the table a call of the runtime's kiln_abi_<op> with
# the op's attributes in table order (an optional attribute reads as 0 when absent).
ELEMENTWISE = BINARY + COMPARE + [u for u in UNARY if u != "clone"] + [
    "gelu", "leaky_relu", "clamp", "to", "where", "fill", "copy", "dropout", "masked_fill"]
VIEWS = ["view", "reshape", "transpose", "permute", "slice", "select", "expand", "as_strided",
         "clone"]


def cls(name):
    return "Kiln_" + "".join(p.capitalize() for p in name.split("_")) + "Op"


out = []
w = out.append
w("// GENERATED at build time by ir/tools/gen_ops_td.py from its op table: edit the table there.")
w("#ifndef KILN_OPS_TD\n#define KILN_OPS_TD\n")
w('include "kiln/ir/KilnDialect.td"')
w('include "mlir/Interfaces/InferTypeOpInterface.td"')
w('include "mlir/Interfaces/SideEffectInterfaces.td"\n')
w("def Kiln_Tensor : RankedTensorOf<[AnyFloat, AnyInteger]>;")
w("def Kiln_FloatTensor : RankedTensorOf<[F16, BF16, F32, F64]>;")
w("def Kiln_OptTensor : AnyTypeOf<[Kiln_Tensor, NoneType]>;\n")
w("""// Elementwise binary ops broadcast their operands NumPy-style and promote element types like
// the runtime (a 0-dim operand only raises the category).
class Kiln_BinaryOp<string mnemonic, list<Trait> traits = []>
    : Kiln_Op<mnemonic, !listconcat(traits, [Pure, InferTypeOpAdaptor])> {
  let arguments = (ins Kiln_Tensor:$lhs, Kiln_Tensor:$rhs, DefaultValuedAttr<F64Attr, "1.0">:$alpha);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)";
}
class Kiln_CompareOp<string mnemonic> : Kiln_Op<mnemonic, [Pure, InferTypeOpAdaptor]> {
  let arguments = (ins Kiln_Tensor:$lhs, Kiln_Tensor:$rhs);
  let results = (outs RankedTensorOf<[I1]>:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)";
}
// Unary elementwise ops keep the shape; float ops on integers give f32 (result type explicit).
class Kiln_UnaryOp<string mnemonic> : Kiln_Op<mnemonic, [Pure]> {
  let arguments = (ins Kiln_Tensor:$input);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}
""")
for n in BINARY:
    extra = "[Commutative]" if n in ("mul", "maximum", "minimum") else "[]"
    if n == "add":
        extra = "[]"
    w(f'def {cls(n)} : Kiln_BinaryOp<"{n}", {extra}> {{ let summary = "elementwise {n} with broadcasting"; }}')
for n in COMPARE:
    w(f'def {cls(n)} : Kiln_CompareOp<"{n}"> {{ let summary = "elementwise {n}, i1 result"; }}')
for n in UNARY:
    extra = "\n  let hasFolder = 1;" if n == "relu" else ""
    w(f'def {cls(n)} : Kiln_UnaryOp<"{n}"> {{ let summary = "elementwise {n}";{extra} }}')
w("")
for n, (operands, nres, attrs, summary) in OPS.items():
    args = []
    for o in operands:
        args.append(f"{OT if o in OPTIONAL_OPERANDS or (o == 'weight' and n in ('layer_norm','group_norm','batch_norm','batch_norm_backward')) else T}:${o}")
    for a, t in attrs.items():
        args.append(f"{t}:${a}")
    res = ", ".join(f"{T}:$result{i}" for i in range(nres)) if nres > 1 else f"{T}:$result"
    w(f'def {cls(n)} : Kiln_Op<"{n}", [Pure]> {{')
    w(f'  let summary = "{summary}";')
    w(f"  let arguments = (ins {', '.join(args)});")
    w(f"  let results = (outs {res});")
    w("  let assemblyFormat = \"operands attr-dict `:` functional-type(operands, results)\";")
    if n in VERIFIED:
        w("  let hasVerifier = 1;")
    w("}")
for n, (attrs, summary) in VARIADIC.items():
    args = [f"Variadic<{T}>:$inputs"] + [f"{t}:${a}" for a, t in attrs.items()]
    w(f'def {cls(n)} : Kiln_Op<"{n}", [Pure]> {{')
    w(f'  let summary = "{summary}";')
    w(f"  let arguments = (ins {', '.join(args)});")
    w(f"  let results = (outs {T}:$result);")
    w("  let assemblyFormat = \"$inputs attr-dict `:` functional-type($inputs, results)\";")
    w("}")
w("""
def Kiln_MatmulOp : Kiln_Op<"matmul", [Pure, InferTypeOpAdaptor]> {
  let summary = "matrix product with batch broadcasting (torch.matmul semantics for rank >= 2)";
  let arguments = (ins Kiln_FloatTensor:$lhs, Kiln_FloatTensor:$rhs);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)";
}

def Kiln_NoneOp : Kiln_Op<"none", [Pure, ConstantLike]> {
  let summary = "the absent optional operand (no bias, no running statistics)";
  let results = (outs NoneType:$result);
  let assemblyFormat = "attr-dict";
  let hasFolder = 1;  // ConstantLike ops must fold to their value: MLIR's folder uniques by it
}

// A tensor constant held by reference: a DenseResourceElementsAttr (weights frozen into the
// module without inlining them as a literal) or small DenseElementsAttr literals.
def Kiln_ConstantOp : Kiln_Op<"constant", [Pure, ConstantLike]> {
  let summary = "tensor constant";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
  let hasFolder = 1;  // ConstantLike ops must fold to their value: MLIR's folder uniques by it
}
""")
w("""
def Kiln_FusedOp : Kiln_Op<"fused", [RecursiveMemoryEffects, IsolatedFromAbove, SingleBlock]> {
  let summary = "a fused elementwise region";
  let description = [{
    Made by --kiln-fuse-elementwise, never traced. Semantics, kept simple for codegen: the body
    is one block whose arguments are the operands (same types, in order); it holds ordinary kiln
    elementwise ops (the same tensor types they would have outside the region) and ends in
    kiln.yield of the results. Running the body op by op, exactly as if it were inlined, defines
    the results; codegen emits loop nests instead. Values broadcast NumPy-style as anywhere
    else; --kiln-fuse-elementwise only makes regions whose ops all compute one shape (one loop
    nest, operands broadcast into it), but smaller intermediate shapes are valid. Isolated from above: every value the body reads is an operand (constants
    too). Pure exactly when its body is.
  }];
  let arguments = (ins Variadic<Kiln_Tensor>:$inputs);
  let results = (outs Variadic<Kiln_Tensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "`(` $inputs `)` attr-dict `:` functional-type($inputs, results) $body";
  let hasVerifier = 1;
}

def Kiln_YieldOp : Kiln_Op<"yield", [Pure, Terminator, HasParent<"FusedOp">]> {
  let summary = "the results of a kiln.fused region";
  let arguments = (ins Variadic<Kiln_Tensor>:$values);
  let assemblyFormat = "$values attr-dict `:` type($values)";
}
""")

w("#endif")
td_text = "\n".join(out) + "\n"


def codegen_tables():
    """C++ initializers for codegen's op tables (included by codegen/src/lower)."""
    q = lambda n: f'"kiln.{n}"'
    lines = ["// GENERATED at build time by ir/tools/gen_ops_td.py from its op table: edit the table there.",
             "#ifdef KILN_ELEMENTWISE_OPS", ", ".join(q(n) for n in ELEMENTWISE) + ", \"kiln.fused\"",
             "#undef KILN_ELEMENTWISE_OPS", "#endif", "#ifdef KILN_VIEW_OPS",
             ", ".join(q(n) for n in VIEWS), "#undef KILN_VIEW_OPS", "#endif", "#ifdef KILN_ABI_OPS",
             '{"matmul", {}},']
    kernels = [(n, v[2]) for n, v in OPS.items()] + [(n, v[0]) for n, v in VARIADIC.items()]
    for n, attrs in kernels:
        if n in ELEMENTWISE or n in VIEWS:
            continue
        names = [a + ("?" if t.startswith("OptionalAttr") else "") for a, t in attrs.items()]
        lines.append(f'{{"{n}", {{{", ".join(chr(34) + a + chr(34) for a in names)}}}}},')
    lines += ["#undef KILN_ABI_OPS", "#endif"]
    return "\n".join(lines) + "\n"


def write(path, text):
    # Rewritten only when it changes, so an unchanged table rebuilds nothing downstream.
    if not os.path.exists(path) or open(path, encoding="utf-8").read() != text:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(path + ".tmp", path)


args = sys.argv[1:]
if args == []:
    sys.stdout.write(td_text)
elif len(args) == 2 and args[0] == "-o":
    write(args[1], td_text)
elif len(args) == 3 and args[:2] == ["--codegen-tables", "-o"]:
    write(args[2], codegen_tables())
else:
    sys.exit("usage: gen_ops_td.py [-o OUT.td] | --codegen-tables -o OUT.inc")
