#!/usr/bin/env python3
"""Writes the ONNX importer fuzzer's seeds (fuzz/onnx_corpus/): tiny models, a few hundred bytes
each, that reach every family of the importer (elementwise, reductions, conv and pooling, shape
arithmetic, RNNs, Q/DQ) and its checks. Needs python3-onnx.  usage: make_onnx_corpus.py OUT_DIR"""
import os
import sys

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto as T


def t(name, dtype, dims, values):
    return oh.make_tensor(name, dtype, dims, np.asarray(values).flatten().tolist())


def model(nodes, inputs, outputs, inits=(), opset=13):
    g = oh.make_graph(nodes, "seed", [oh.make_tensor_value_info(n, ty, s) for n, ty, s in inputs],
                      [oh.make_tensor_value_info(n, ty, s) for n, ty, s in outputs],
                      initializer=list(inits))
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])


F = T.FLOAT
rng = np.random.default_rng(0)
SEEDS = {
    "elementwise": model(
        [oh.make_node("Add", ["x", "b"], ["a"]), oh.make_node("Sigmoid", ["a"], ["s"]),
         oh.make_node("Mul", ["s", "x"], ["m"]), oh.make_node("Clip", ["m", "lo", "hi"], ["c"]),
         oh.make_node("Where", ["cond", "c", "x"], ["y"])],
        [("x", F, [2, 3]), ("cond", T.BOOL, [2, 3])], [("y", F, [2, 3])],
        [t("b", F, [3], [1, 2, 3]), t("lo", F, [], [0]), t("hi", F, [], [6])]),
    "reduce_softmax": model(
        [oh.make_node("ReduceMean", ["x"], ["r"], axes=[1], keepdims=1),
         oh.make_node("Sub", ["x", "r"], ["d"]), oh.make_node("Softmax", ["d"], ["y"], axis=-1)],
        [("x", F, [2, 4])], [("y", F, [2, 4])]),
    "conv_pool": model(
        [oh.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         oh.make_node("Relu", ["c"], ["r"]),
         oh.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         oh.make_node("GlobalAveragePool", ["p"], ["g"]), oh.make_node("Flatten", ["g"], ["f"]),
         oh.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)],
        [("x", F, [1, 2, 6, 6])], [("y", F, [1, 3])],
        [t("w", F, [4, 2, 3, 3], rng.standard_normal(72)), t("b", F, [4], [0, 1, 2, 3]),
         t("fw", F, [3, 4], rng.standard_normal(12)), t("fb", F, [3], [1, 1, 1])]),
    "batchnorm_avgpool_pad": model(
        [oh.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["n"]),
         oh.make_node("Pad", ["n", "pads"], ["p"], mode="reflect"),
         oh.make_node("AveragePool", ["p"], ["y"], kernel_shape=[2, 2], auto_pad="SAME_UPPER")],
        [("x", F, [1, 2, 4, 4])], [("y", F, [1, 2, 5, 5])],
        [t("s", F, [2], [1, 2]), t("b", F, [2], [0, 1]), t("m", F, [2], [0, 0]),
         t("v", F, [2], [1, 1]), t("pads", T.INT64, [8], [0, 0, 0, 1, 0, 0, 0, 0])]),
    "shape_arithmetic": model(
        [oh.make_node("Shape", ["x"], ["s"]), oh.make_node("Gather", ["s", "i"], ["n"], axis=0),
         oh.make_node("Concat", ["n", "m1"], ["shape"], axis=0),
         oh.make_node("Reshape", ["x", "shape"], ["r"]),
         oh.make_node("Transpose", ["r"], ["tr"], perm=[1, 0]),
         oh.make_node("Slice", ["tr", "st", "en", "ax", "sp"], ["sl"]),
         oh.make_node("Unsqueeze", ["sl", "ax"], ["u"]), oh.make_node("Squeeze", ["u", "ax"], ["y"])],
        [("x", F, [2, 3, 4])], [("y", F, [6, 2])],
        [t("i", T.INT64, [1], [0]), t("m1", T.INT64, [1], [-1]), t("st", T.INT64, [1], [-1]),
         t("en", T.INT64, [1], [-100]), t("ax", T.INT64, [1], [0]), t("sp", T.INT64, [1], [-2])]),
    "expand_tile_range": model(
        [oh.make_node("Range", ["a", "b", "c"], ["r"]),
         oh.make_node("Expand", ["x", "shape"], ["e"]), oh.make_node("Tile", ["e", "reps"], ["y"]),
         oh.make_node("ConstantOfShape", ["shape"], ["z"], value=t("v", F, [1], [2.5]))],
        [("x", F, [3, 1])], [("y", F, [3, 8]), ("r", T.INT64, [3]), ("z", F, [3, 4])],
        [t("a", T.INT64, [], [0]), t("b", T.INT64, [], [6]), t("c", T.INT64, [], [2]),
         t("shape", T.INT64, [2], [3, 4]), t("reps", T.INT64, [2], [1, 2])]),
    "lstm": model(
        [oh.make_node("LSTM", ["x", "w", "r", "b"], ["y", "h", "c"], hidden_size=2,
                      direction="bidirectional")],
        [("x", F, [3, 1, 2])], [("y", F, [3, 2, 1, 2]), ("h", F, [2, 1, 2]), ("c", F, [2, 1, 2])],
        [t("w", F, [2, 8, 2], rng.standard_normal(32)), t("r", F, [2, 8, 2], rng.standard_normal(32)),
         t("b", F, [2, 16], rng.standard_normal(32))]),
    "gru": model(
        [oh.make_node("GRU", ["x", "w", "r"], ["y"], hidden_size=2, linear_before_reset=1)],
        [("x", F, [2, 1, 3])], [("y", F, [2, 1, 1, 2])],
        [t("w", F, [1, 6, 3], rng.standard_normal(18)), t("r", F, [1, 6, 2], rng.standard_normal(12))]),
    "qdq_matmul": model(
        [oh.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"]),
         oh.make_node("DequantizeLinear", ["q", "s", "zp"], ["d"]),
         oh.make_node("MatMul", ["d", "w"], ["y"])],
        [("x", F, [2, 3])], [("y", F, [2, 2])],
        [t("s", F, [], [0.1]), t("zp", T.UINT8, [], [3]), t("w", F, [3, 2], rng.standard_normal(6))]),
    "layernorm_erf_opset17": model(
        [oh.make_node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1),
         oh.make_node("Erf", ["n"], ["e"]), oh.make_node("Split", ["e", "sp"], ["y", "z"], axis=1)],
        [("x", F, [2, 4])], [("y", F, [2, 1]), ("z", F, [2, 3])],
        [t("g", F, [4], [1, 1, 1, 1]), t("b", F, [4], [0, 0, 0, 0]), t("sp", T.INT64, [2], [1, 3])],
        opset=17),
    "dynamic_dims_cast_argmax": model(
        [oh.make_node("Cast", ["x"], ["c"], to=T.DOUBLE), oh.make_node("ArgMax", ["c"], ["y"], axis=1)],
        [("x", F, ["N", 5])], [("y", T.INT64, ["N", 1])]),
}

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "onnx_corpus")
    os.makedirs(out, exist_ok=True)
    for name, m in SEEDS.items():
        onnx.save(m, os.path.join(out, name + ".onnx"))
    print(f"wrote {len(SEEDS)} seeds to {out}")
