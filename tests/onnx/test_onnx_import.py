"""`kiln import` against PyTorch: models exported with torch.onnx.export (tests/onnx/models.py)
import, run on kiln's runtime and match PyTorch's outputs; malformed models are refused with one
clear error each. Needs Debian's python3-torch and python3-onnx (skips without them).

usage: /usr/bin/python3 tests/onnx/test_onnx_import.py KILN_CLI"""
import os
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

KILN = sys.argv[1]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import onnx
    import onnx.helper as oh
    import torch  # noqa: F401
    import models
except ImportError as e:  # CTest reports the test as skipped (SKIP_RETURN_CODE)
    print(f"SKIP: {e} (apt-get install python3-torch python3-onnx)")
    sys.exit(77)


def kiln(*args, ok=True):
    r = subprocess.run([KILN, *args], capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise AssertionError(f"kiln {' '.join(args)} failed:\n{r.stderr}")
    return r


def rel_error(a, b):
    return float(np.max(np.abs(a.astype(np.float64) - b)) / max(np.max(np.abs(b)), 1e-30))


class ImportMatchesPyTorch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()

    def check(self, name, command="import", shape_args=(), opset=None):
        directory = self.dir
        if opset is not None:  # beside the default export, not over it
            directory = os.path.join(self.dir, f"opset{opset}")
            os.makedirs(directory, exist_ok=True)
        path = models.export(name, directory, opset)
        out = os.path.join(directory, name + ".kiln")
        t0 = time.perf_counter()
        kiln(command, path, *shape_args, "-o", out)
        seconds = time.perf_counter() - t0
        y_path = os.path.join(directory, name + "_kiln.npy")
        kiln("run", out, "--input", os.path.join(directory, name + "_x.npy"), "--output", y_path)
        got, want = np.load(y_path), np.load(os.path.join(directory, name + "_y.npy"))
        self.assertEqual(got.shape, want.shape)
        err = rel_error(got, want)
        print(f"{name}: import {seconds:.2f} s, max relative error {err:.2e}")
        self.assertLessEqual(err, 1e-4, name)
        return out

    def test_resnet18(self):
        self.check("resnet18")

    def test_mobilenet_v2(self):
        self.check("mobilenet_v2")

    def test_resnet18_imports_as_int8(self):
        # `kiln import --quantize int8`: calibrated on 8 other inputs, the integer model stays
        # close to PyTorch's float output (SQNR in dB) and `kiln quant-report` says the same.
        path = models.export("resnet18", self.dir)
        rng = np.random.default_rng(5)
        cal = os.path.join(self.dir, "resnet18_cal.npy")
        np.save(cal, rng.standard_normal((8, 3, 224, 224)).astype(np.float32))
        q = os.path.join(self.dir, "resnet18_int8.kiln")
        f = os.path.join(self.dir, "resnet18_f32.kiln")
        r = kiln("import", path, "--quantize", "int8", "--calibration", cal, "-o", q)
        self.assertIn("21 of 21 conv2d/linear layers int8", r.stdout)
        kiln("import", path, "-o", f)
        x = os.path.join(self.dir, "resnet18_x.npy")
        y_path = os.path.join(self.dir, "resnet18_int8_y.npy")
        kiln("run", q, "--input", x, "--output", y_path)
        got = np.load(y_path).astype(np.float64)
        want = np.load(os.path.join(self.dir, "resnet18_y.npy")).astype(np.float64)
        sqnr = 10 * np.log10((want ** 2).sum() / ((want - got) ** 2).sum())
        print(f"resnet18 int8 import: SQNR {sqnr:.1f} dB against PyTorch float32")
        self.assertGreaterEqual(sqnr, 25.0)
        report = kiln("quant-report", q, "--reference", f, "--input", x).stdout
        self.assertIn("output 0 (y): SQNR", report)
        self.assertLess(os.path.getsize(q), 0.3 * os.path.getsize(f))

    def test_lenet_through_kiln_export(self):
        self.check("lenet", command="export")

    def test_mlp(self):
        self.check("mlp")

    def test_transformer_block(self):
        out = self.check("transformer")
        # The written-out attention (4-D, heads transposed out) is one fused op, the exported
        # MatMul + Add + erf-GELU one linear with its epilogue.
        plan = kiln("inspect", out).stdout
        self.assertIn("attention", plan)
        self.assertIn("linear_fused", plan)
        self.assertNotIn("softmax", plan)
        self.assertNotIn(" erf ", plan)

    def test_transformer_block_opset14_layer_norms(self):
        # Before opset 17 the export writes each LayerNorm out (ReduceMean, Sub, Pow, ReduceMean,
        # Add, Sqrt, Div, Mul, Add): the import runs it as one layer_norm again.
        out = self.check("transformer", opset=14)
        plan = kiln("inspect", out).stdout
        self.assertRegex(plan, r"\blayer_norm +x2\b")
        self.assertNotIn(" sqrt ", plan)
        self.assertNotIn(" pow ", plan)

    def test_vgg(self):
        self.check("vgg")

    def test_squeezenet_fire_modules(self):
        self.check("squeezenet")

    def test_densenet_block(self):
        self.check("densenet")

    def test_lstm(self):
        out = self.check("lstm")
        # The recurrence is one loop whose body is the cell, not a copy of the cell per step.
        self.assertRegex(kiln("inspect", out).stdout, r"\n\s+for\s+x1\n")

    def test_bidirectional_two_layer_gru(self):
        out = self.check("bigru")
        self.assertRegex(kiln("inspect", out).stdout, r"\n\s+for\s+x4\n")  # layers x directions

    def test_pads_slices_concat_transposed_conv(self):
        self.check("pad_slice_concat")

    def test_open_batch_dim_takes_input_shape(self):
        m, _, _ = models.build("lenet")
        path = os.path.join(self.dir, "lenet_dyn.onnx")
        torch.onnx.export(m, torch.randn(1, 1, 28, 28), path, opset_version=13,
                          input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "N"}})
        r = kiln("import", path, "-o", os.path.join(self.dir, "dyn.kiln"), ok=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("input 'x' has open dims", r.stderr)
        out = os.path.join(self.dir, "dyn.kiln")
        kiln("import", path, "--input-shape", "x=3,1,28,28", "-o", out)
        x = np.random.default_rng(0).standard_normal((3, 1, 28, 28)).astype(np.float32)
        np.save(os.path.join(self.dir, "dyn_x.npy"), x)
        kiln("run", out, "--input", os.path.join(self.dir, "dyn_x.npy"), "--output",
             os.path.join(self.dir, "dyn_y.npy"))
        with torch.no_grad():
            want = m(torch.from_numpy(x)).numpy()
        self.assertLessEqual(rel_error(np.load(os.path.join(self.dir, "dyn_y.npy")), want), 1e-4)

    def test_external_data_beside_the_model(self):
        path = models.export("lenet", self.dir)
        sub = os.path.join(self.dir, "ext")
        os.makedirs(sub, exist_ok=True)
        model = onnx.load(path)
        onnx.save_model(model, os.path.join(sub, "lenet.onnx"), save_as_external_data=True,
                        all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
        out = os.path.join(self.dir, "ext.kiln")
        kiln("import", os.path.join(sub, "lenet.onnx"), "-o", out)
        kiln("run", out, "--input", os.path.join(self.dir, "lenet_x.npy"), "--output",
             os.path.join(self.dir, "ext_y.npy"))
        self.assertLessEqual(rel_error(np.load(os.path.join(self.dir, "ext_y.npy")),
                                       np.load(os.path.join(self.dir, "lenet_y.npy"))), 1e-4)


class OddPadding(unittest.TestCase):
    def test_same_upper_average_pool_counts_only_real_elements(self):
        """auto_pad SAME_UPPER pads 2x2 windows at the bottom/right only; count_include_pad = 0
        averages over the elements inside the image (NumPy reference)."""
        d = tempfile.mkdtemp()
        node = oh.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], auto_pad="SAME_UPPER")
        graph = oh.make_graph([node], "pool", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, 4, 5])],
                              [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 1, 4, 5])])
        onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)]), os.path.join(d, "p.onnx"))
        x = np.random.default_rng(1).standard_normal((1, 1, 4, 5)).astype(np.float32)
        np.save(os.path.join(d, "x.npy"), x)
        kiln("import", os.path.join(d, "p.onnx"), "-o", os.path.join(d, "p.kiln"))
        kiln("run", os.path.join(d, "p.kiln"), "--input", os.path.join(d, "x.npy"), "--output",
             os.path.join(d, "y.npy"))
        want = np.zeros_like(x)
        for i in range(4):
            for j in range(5):
                want[0, 0, i, j] = x[0, 0, i:i + 2, j:j + 2].mean()
        np.testing.assert_allclose(np.load(os.path.join(d, "y.npy")), want, rtol=1e-6, atol=1e-6)


class QuantizedModelsImport(unittest.TestCase):
    def test_qdq_pairs_round_and_saturate_like_int8(self):
        """x -> Q/DQ (uint8, per tensor) -> MatMul with a DQ'd int8 weight (per axis): as
        ONNX Runtime's QDQ tools write them; the reference is the same arithmetic in NumPy."""
        d = tempfile.mkdtemp()
        rng = np.random.default_rng(0)
        w_q = rng.integers(-128, 128, (3, 4)).astype(np.int8)
        w_scale = np.array([0.01, 0.02, 0.03, 0.04], np.float32)
        inits = [oh.make_tensor("s", onnx.TensorProto.FLOAT, [], [0.1]),
                 oh.make_tensor("zp", onnx.TensorProto.UINT8, [], [3]),
                 oh.make_tensor("wq", onnx.TensorProto.INT8, [3, 4], w_q.flatten().tolist()),
                 oh.make_tensor("ws", onnx.TensorProto.FLOAT, [4], w_scale.tolist()),
                 oh.make_tensor("wzp", onnx.TensorProto.INT8, [4], [0, 0, 0, 0])]
        nodes = [oh.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"]),
                 oh.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"]),
                 oh.make_node("DequantizeLinear", ["wq", "ws", "wzp"], ["wd"], axis=1),
                 oh.make_node("MatMul", ["xd", "wd"], ["y"])]
        graph = oh.make_graph(nodes, "qdq", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
                              [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 4])], initializer=inits)
        path = os.path.join(d, "qdq.onnx")
        onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)]), path)
        # Values that round half to even (0.25 / 0.1 = 2.5 -> 2), saturate (30 -> 255) and clip at 0.
        x = np.array([[0.25, 30.0, -1.0], [0.35, 0.049, 12.0]], np.float32)
        np.save(os.path.join(d, "x.npy"), x)
        kiln("import", path, "-o", os.path.join(d, "qdq.kiln"))
        kiln("run", os.path.join(d, "qdq.kiln"), "--input", os.path.join(d, "x.npy"), "--output",
             os.path.join(d, "y.npy"))
        xq = np.clip(np.rint(x / np.float32(0.1)) + 3, 0, 255)
        want = ((xq - 3) * np.float32(0.1)) @ (w_q.astype(np.float32) * w_scale)
        np.testing.assert_allclose(np.load(os.path.join(d, "y.npy")), want, rtol=1e-5, atol=1e-6)


    def test_qdq_conv_runs_as_an_integer_layer(self):
        """ONNX Runtime's QDQ form of conv + relu (uint8 activations, per-channel int8 weights,
        an int32 bias dequantized at x_scale * w_scale): kiln runs it as one kiln.qconv2d, within
        one output step of the float simulation of the same graph in NumPy."""
        d = tempfile.mkdtemp()
        rng = np.random.default_rng(1)
        w_q = rng.integers(-127, 128, (4, 2, 3, 3)).astype(np.int8)
        w_s = np.array([0.01, 0.02, 0.015, 0.03], np.float32)
        x_s, x_z, y_s, y_z = np.float32(0.05), 10, np.float32(0.1), 0
        b_q = rng.integers(-500, 500, 4).astype(np.int32)
        b_s = (x_s * w_s).astype(np.float32)
        inits = [oh.make_tensor("xs", onnx.TensorProto.FLOAT, [], [float(x_s)]),
                 oh.make_tensor("xz", onnx.TensorProto.UINT8, [], [x_z]),
                 oh.make_tensor("wq", onnx.TensorProto.INT8, list(w_q.shape), w_q.flatten().tolist()),
                 oh.make_tensor("ws", onnx.TensorProto.FLOAT, [4], w_s.tolist()),
                 oh.make_tensor("wz", onnx.TensorProto.INT8, [4], [0] * 4),
                 oh.make_tensor("bq", onnx.TensorProto.INT32, [4], b_q.tolist()),
                 oh.make_tensor("bs", onnx.TensorProto.FLOAT, [4], b_s.tolist()),
                 oh.make_tensor("bz", onnx.TensorProto.INT32, [4], [0] * 4),
                 oh.make_tensor("ys", onnx.TensorProto.FLOAT, [], [float(y_s)]),
                 oh.make_tensor("yz", onnx.TensorProto.UINT8, [], [y_z])]
        nodes = [oh.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
                 oh.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
                 oh.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
                 oh.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bd"], axis=0),
                 oh.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
                 oh.make_node("Relu", ["c"], ["r"]),
                 oh.make_node("QuantizeLinear", ["r", "ys", "yz"], ["yq"]),
                 oh.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
        graph = oh.make_graph(nodes, "qdq_conv",
                              [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2, 5, 5])],
                              [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 5, 5])],
                              initializer=inits)
        path = os.path.join(d, "qdq_conv.onnx")
        onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)]), path)
        x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
        np.save(os.path.join(d, "x.npy"), x)
        out = os.path.join(d, "qdq_conv.kiln")
        kiln("import", path, "-o", out)
        self.assertRegex(kiln("inspect", out).stdout, r"qconv2d +x1")
        kiln("run", out, "--input", os.path.join(d, "x.npy"), "--output", os.path.join(d, "y.npy"))
        got = np.load(os.path.join(d, "y.npy"))
        # The graph in float64: quantize x, conv with the dequantized weights and bias, relu, requantize.
        xd = (np.clip(np.rint(x / x_s) + x_z, 0, 255) - x_z) * np.float64(x_s)
        xp = np.pad(xd, ((0, 0), (0, 0), (1, 1), (1, 1)))
        wd = w_q.astype(np.float64) * w_s.astype(np.float64)[:, None, None, None]
        c = np.zeros((1, 4, 5, 5))
        for o in range(4):
            for i in range(5):
                for j in range(5):
                    c[0, o, i, j] = (xp[0, :, i:i + 3, j:j + 3] * wd[o]).sum() + b_q[o] * float(b_s[o])
        want = (np.clip(np.rint(np.maximum(c, 0) / y_s) + y_z, 0, 255) - y_z) * np.float64(y_s)
        self.assertLessEqual(float(np.max(np.abs(got - want))), float(y_s) * 1.001)


def raw_tensor(name, dims, data):
    """A float TensorProto holding `data` as raw bytes, whatever its shape says."""
    t = onnx.TensorProto()
    t.name, t.data_type = name, onnx.TensorProto.FLOAT
    t.dims.extend(dims)
    t.raw_data = data
    return t


def tiny_model(nodes, inits=(), opset=13, inputs=None):
    inputs = inputs or [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])]
    graph = oh.make_graph(nodes, "g", inputs,
                          [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])],
                          initializer=list(inits))
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


class BadModelsAreRefused(unittest.TestCase):
    def refused(self, model_bytes, message, name="bad.onnx", directory=None):
        directory = directory or tempfile.mkdtemp()
        path = os.path.join(directory, name)
        with open(path, "wb") as f:
            f.write(model_bytes)
        r = kiln("import", path, "-o", os.path.join(directory, "bad.kiln"), ok=False)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(message, r.stderr)
        self.assertNotIn("Traceback", r.stderr)

    def test_truncated(self):
        d = tempfile.mkdtemp()
        data = open(models.export("lenet", d), "rb").read()
        self.refused(data[: len(data) // 2], "not a valid ONNX model")

    def test_opset_above_17(self):
        m = tiny_model([oh.make_node("Relu", ["x"], ["y"])], opset=18)
        self.refused(m.SerializeToString(), "opset 18 of the default domain is not supported")

    def test_every_unknown_op_at_once(self):
        m = tiny_model([oh.make_node("FooBar", ["x"], ["a"]), oh.make_node("Relu", ["a"], ["b"]),
                        oh.make_node("NonMaxSuppression", ["b"], ["y"])])
        self.refused(m.SerializeToString(),
                     "2 op(s) kiln cannot import: FooBar (opset 13), NonMaxSuppression (opset 13)")

    def test_external_data_outside_the_folder(self):
        w = raw_tensor("w", [2, 3], b"")
        w.ClearField("raw_data")
        w.data_location = onnx.TensorProto.EXTERNAL
        entry = w.external_data.add()
        entry.key, entry.value = "location", "../secret.bin"
        m = tiny_model([oh.make_node("Add", ["x", "w"], ["y"])], inits=[w])
        self.refused(m.SerializeToString(), "leaves the model's folder")
        entry.value = "/etc/passwd"
        m = tiny_model([oh.make_node("Add", ["x", "w"], ["y"])], inits=[w])
        self.refused(m.SerializeToString(), "is absolute")

    def test_initializer_bytes_contradict_its_shape(self):
        w = raw_tensor("w", [2, 3], np.zeros(5, np.float32).tobytes())
        m = tiny_model([oh.make_node("Add", ["x", "w"], ["y"])], inits=[w])
        self.refused(m.SerializeToString(), "raw_data holds 20 bytes, its shape [2, 3] of float32 needs 24")

    def test_unsorted_graph(self):
        m = tiny_model([oh.make_node("Relu", ["a"], ["y"]), oh.make_node("Relu", ["x"], ["a"])])
        self.refused(m.SerializeToString(), "reads 'a' before anything defines it")


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
