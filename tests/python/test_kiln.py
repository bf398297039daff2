"""The `kiln` Python module against the C++ runtime (`kiln run`) on an exported LeNet.

usage: test_kiln.py KILN_CLI LENET.kiln   (the module on PYTHONPATH; run by CTest python/kiln)"""
import os
import subprocess
import sys
import tempfile
import threading
import unittest

import numpy as np

import kiln

KILN_CLI, ARTIFACT = sys.argv[1], sys.argv[2]


def runtime_reference(x):
    """The C++ runtime's output for x, through `kiln run` (.npy in and out)."""
    with tempfile.TemporaryDirectory() as d:
        np.save(os.path.join(d, "x.npy"), x)
        subprocess.run([KILN_CLI, "run", ARTIFACT, "--input", os.path.join(d, "x.npy"),
                        "--output", os.path.join(d, "y.npy")], check=True, capture_output=True)
        return np.load(os.path.join(d, "y.npy"))


def batch(seed):
    return np.random.default_rng(seed).uniform(-1, 1, (1, 1, 28, 28)).astype(np.float32)


class ModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = kiln.load(ARTIFACT)

    def test_describes_its_inputs_and_outputs(self):
        self.assertEqual(self.model.input_names, ["x"])
        self.assertEqual(len(self.model.output_names), 1)
        self.assertEqual(self.model.inputs, [("x", "float32", (1, 1, 28, 28))])
        self.assertEqual(self.model.outputs[0][1:], ("float32", (1, 10)))

    def test_run_equals_the_cpp_runtime(self):
        s = self.model.session()
        x = batch(1)
        out = s.run({"x": x})
        self.assertEqual(list(out), self.model.output_names)
        y = out[self.model.output_names[0]]
        self.assertIsInstance(y, np.ndarray)
        self.assertEqual((y.dtype, y.shape), (np.float32, (1, 10)))
        np.testing.assert_array_equal(y, runtime_reference(x))
        # The same through a list, a bare array, a kiln.Tensor, and a strided (non-contiguous)
        # view of the same values.
        np.testing.assert_array_equal(s.run([x])[self.model.output_names[0]], y)
        np.testing.assert_array_equal(s.run(x)[self.model.output_names[0]], y)
        np.testing.assert_array_equal(s.run(kiln.from_numpy(x))[self.model.output_names[0]], y)
        wide = np.zeros((1, 1, 28, 56), np.float32)
        wide[..., ::2] = x
        np.testing.assert_array_equal(s.run(wide[..., ::2])[self.model.output_names[0]], y)

    def test_outputs_survive_the_session_and_the_next_run(self):
        s = self.model.session()
        x1, x2 = batch(2), batch(3)
        y1 = s.run(x1)[self.model.output_names[0]]
        first = y1.copy()
        y2 = s.run(x2)[self.model.output_names[0]]
        del s
        np.testing.assert_array_equal(y1, first)  # not overwritten by the second run
        self.assertFalse(np.array_equal(y1, y2))

    def test_sessions_on_threads(self):
        inputs = [batch(10 + i) for i in range(8)]
        want = [self.model.session().run(x)[self.model.output_names[0]] for x in inputs]
        got = [None] * len(inputs)

        def work(i):
            s = self.model.session()
            for _ in range(20):
                got[i] = s.run(inputs[i])[self.model.output_names[0]]

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)

    def test_bad_inputs_name_what_was_expected(self):
        s = self.model.session()
        cases = [
            ({"y": batch(0)}, "no input 'y'; its inputs are 'x'"),
            ({"x": batch(0).astype(np.float64)}, "input 'x' expects float32 [1, 1, 28, 28], got float64"),
            ({"x": np.zeros((2, 1, 28, 28), np.float32)}, "expects float32 [1, 1, 28, 28], got float32 [2, 1, 28, 28]"),
            ({}, "missing input 'x' (float32 [1, 1, 28, 28])"),
            ([batch(0), batch(1)], "expected 1 inputs ('x'), got 2"),
            ({"x": np.zeros((1, 1, 28, 28), np.complex64)}, "no kiln dtype for NumPy dtype complex64"),
            ({"x": batch(0)[..., ::-1]}, "negative or unaligned strides"),
        ]
        for inputs, message in cases:
            with self.assertRaises(ValueError) as e:
                s.run(inputs)
            self.assertIn(message, str(e.exception))

    def test_a_missing_or_corrupt_artifact_is_a_kiln_error(self):
        with self.assertRaises(kiln.Error) as e:
            kiln.load("/nonexistent.kiln")
        self.assertIn("/nonexistent.kiln", str(e.exception))
        with tempfile.NamedTemporaryFile(suffix=".kiln") as f:
            f.write(open(ARTIFACT, "rb").read()[:100])
            f.flush()
            with self.assertRaises(kiln.Error):
                kiln.load(f.name)


@unittest.skipUnless(hasattr(kiln, "import_onnx"), "built without the compiler or ONNX import")
class CompilerTest(unittest.TestCase):
    """kiln.import_onnx and kiln.compile on a committed seed model (fuzz/onnx_corpus): y =
    where(cond, clip(sigmoid(x + b) * x, 0, 6), x) with b = [1, 2, 3]."""

    SEED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fuzz",
                        "onnx_corpus", "elementwise.onnx")

    def test_import_run_and_compile(self):
        rng = np.random.default_rng(5)
        x = rng.uniform(-4, 4, (2, 3)).astype(np.float32)
        cond = rng.uniform(size=(2, 3)) > 0.5
        s = x + np.array([1, 2, 3], np.float32)
        want = np.where(cond, np.clip(x / (1 + np.exp(-s)), 0, 6), x)
        with tempfile.TemporaryDirectory() as d:
            path = kiln.import_onnx(self.SEED, os.path.join(d, "m.kiln"))
            m = kiln.load(path)
            self.assertEqual(m.input_names, ["x", "cond"])
            got = m.session().run({"x": x, "cond": cond})["y"]
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
            files = kiln.compile(path, os.path.join(d, "m_exe"))
            np.save(os.path.join(d, "x.npy"), x)
            np.save(os.path.join(d, "cond.npy"), cond)
            subprocess.run([files[0], os.path.join(d, "x.npy"), os.path.join(d, "cond.npy"),
                            "-o", os.path.join(d, "y.npy")], check=True, capture_output=True)
            np.testing.assert_allclose(np.load(os.path.join(d, "y.npy")), want, rtol=1e-6, atol=1e-6)

    def test_errors_name_the_problem(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(RuntimeError) as e:
                kiln.import_onnx(os.path.join(d, "missing.onnx"), os.path.join(d, "m.kiln"))
            self.assertIn("cannot open", str(e.exception))
            with self.assertRaises(RuntimeError) as e:
                kiln.compile(ARTIFACT, os.path.join(d, "x"), emit="dll")
            self.assertIn("dll", str(e.exception))


class TensorTest(unittest.TestCase):
    def test_numpy_round_trip_shares_memory(self):
        a = np.arange(12, dtype=np.int64).reshape(3, 4)
        t = kiln.from_numpy(a)
        self.assertEqual((t.shape, t.dtype), ((3, 4), "int64"))
        b = t.numpy()
        self.assertTrue(np.shares_memory(a, b))
        a[1, 2] = 99
        self.assertEqual(b[1, 2], 99)
        del a  # the tensor keeps the array's memory alive
        self.assertEqual(t.numpy()[1, 2], 99)
        for dtype in (np.float32, np.float64, np.float16, np.int8, np.uint8, np.int32, np.bool_):
            a = (np.arange(6) % 2).astype(dtype)
            np.testing.assert_array_equal(np.asarray(kiln.Tensor(a)), a)
        # A transposed view keeps its strides.
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        np.testing.assert_array_equal(kiln.from_numpy(a.T).numpy(), a.T)

    def test_dlpack_with_pytorch(self):
        try:
            import torch
            import torch.utils.dlpack
        except ImportError:
            self.skipTest("PyTorch is not installed (apt-get install python3-torch)")
        x = torch.arange(10, dtype=torch.float32).reshape(2, 5)
        t = kiln.from_dlpack(torch.utils.dlpack.to_dlpack(x))
        self.assertEqual((t.shape, t.dtype), ((2, 5), "float32"))
        x[0, 0] = -7  # shared memory
        self.assertEqual(t.numpy()[0, 0], -7)
        back = torch.utils.dlpack.from_dlpack(kiln.to_dlpack(t))
        self.assertEqual(back.data_ptr(), x.data_ptr())
        del x, t
        self.assertEqual(back[0, 0].item(), -7)  # the chain of owners keeps the memory
        # A kiln output into PyTorch without a copy, and torch.Tensor through __dlpack__.
        y = torch.arange(6, dtype=torch.int64)
        self.assertEqual(kiln.from_dlpack(y).numpy().tolist(), list(range(6)))

    def test_dlpack_capsules_are_consumed_once(self):
        cap = kiln.to_dlpack(kiln.from_numpy(np.ones(3, np.float32)))
        kiln.from_dlpack(cap)
        with self.assertRaises(ValueError):
            kiln.from_dlpack(cap)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
