#!/usr/bin/env python3
"""int8 peers for kiln's quantization numbers (issue #26). Comparison only: never a dependency.

The weights and inputs come from kiln's bench/report_quant --out DIR (DIR/<model>.safetensors,
torchvision's names; DIR/<model>_calibration.npy and DIR/<model>_test.npy, 32 samples each), so
every engine quantizes the same model on the same calibration data and is measured on the same
other 32 inputs.

  /usr/bin/python3 quant_peers.py torch --dir DIR --model resnet18 [--batches 1,8]
      PyTorch FX post-training int8 (prepare_fx / convert_fx, per-channel weights; engine onednn
      on Debian's 1.13, x86 where the build has it), then TorchScript-frozen; also writes
      DIR/<model>.onnx (dynamic batch) for the ort mode.
  python3 quant_peers.py ort --dir DIR --model resnet18 [--batches 1,8]
      ONNX Runtime quantize_static (QDQ, per-channel int8 weights, uint8 activations, MinMax).

Prints `SQNR <engine> <model> <dB> <top-1 agreement>/<n>` (int8 vs the same engine's float32 on
the test inputs) and `RESULT <engine> <model> <batch> <median_ms> <min_ms>` at THREADS threads
(default 2).
"""
import argparse
import json
import os
import statistics
import struct
import sys
import time

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    kinds = {"F32": np.float32, "I64": np.int64, "F64": np.float64, "I32": np.int32}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype=kinds[info["dtype"]]).reshape(info["shape"])
    return out


def sqnr(ref, test):
    ref = ref.astype(np.float64)
    noise = ((ref - test) ** 2).sum()
    return float("inf") if noise == 0 else 10 * np.log10((ref ** 2).sum() / noise)


def timed(fn, iters=20, warmup=3):
    for _ in range(warmup):
        fn()
    t = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        t.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(t), min(t)


def report(engine, model, ref, test):
    agree = sum(int(np.argmax(r) == np.argmax(q)) for r, q in zip(ref, test))
    print(f"SQNR {engine} {model} {sqnr(np.concatenate(ref), np.concatenate(test)):.1f} "
          f"{agree}/{len(ref)}", flush=True)


def run_torch(a, calib, test, batches):
    import torch
    import torchvision
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    engines = torch.backends.quantized.supported_engines
    engine = "x86" if "x86" in engines else "fbgemm" if "fbgemm" in engines else "onednn"
    torch.backends.quantized.engine = engine
    model = getattr(torchvision.models, a.model)(weights=None).eval()
    state = {k: torch.from_numpy(v.copy()) for k, v in read_safetensors(
        f"{a.dir}/{a.model}.safetensors").items()}
    model.load_state_dict(state)
    example = torch.from_numpy(test[:1])
    torch.onnx.export(model, example, f"{a.dir}/{a.model}.onnx", opset_version=13,
                      input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "n"}, "logits": {0: "n"}})
    with torch.no_grad():
        prepared = prepare_fx(model, get_default_qconfig_mapping(engine), (example,))
        for i in range(calib.shape[0]):
            prepared(torch.from_numpy(calib[i:i + 1]))
        q = convert_fx(prepared)
        q = torch.jit.freeze(torch.jit.trace(q, example))
        ref = [model(torch.from_numpy(test[i:i + 1])).numpy() for i in range(test.shape[0])]
        out = [q(torch.from_numpy(test[i:i + 1])).numpy() for i in range(test.shape[0])]
        report(f"torch-fx-{engine}", a.model, ref, out)
        for b in batches:
            x = torch.from_numpy(np.concatenate([test] * ((b + 31) // 32))[:b])
            med, lo = timed(lambda: q(x))
            print(f"RESULT torch-fx-{engine} {a.model} {b} {med:.3f} {lo:.3f}", flush=True)


def run_ort(a, calib, test, batches):
    import onnxruntime as ort
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                          QuantType, quantize_static)

    fp32 = f"{a.dir}/{a.model}.onnx"
    int8 = f"{a.dir}/{a.model}_int8.onnx"

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.i = 0

        def get_next(self):
            if self.i >= calib.shape[0]:
                return None
            self.i += 1
            return {"x": calib[self.i - 1:self.i]}

    quantize_static(fp32, int8, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = int(os.environ.get("THREADS", "2"))
    opts.inter_op_num_threads = 1
    sessions = {name: ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
                for name, path in (("ort-fp32", fp32), ("ort-qdq-int8", int8))}
    ref = [sessions["ort-fp32"].run(None, {"x": test[i:i + 1]})[0] for i in range(test.shape[0])]
    out = [sessions["ort-qdq-int8"].run(None, {"x": test[i:i + 1]})[0]
           for i in range(test.shape[0])]
    report("ort-qdq-int8", a.model, ref, out)
    for b in batches:
        x = np.ascontiguousarray(np.concatenate([test] * ((b + 31) // 32))[:b])
        for name, s in sessions.items():
            med, lo = timed(lambda: s.run(None, {"x": x}))
            print(f"RESULT {name} {a.model} {b} {med:.3f} {lo:.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("engine", choices=["torch", "ort"])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--model", required=True, choices=["resnet18", "mobilenet_v2"])
    ap.add_argument("--batches", default="1,8")
    a = ap.parse_args()
    calib = np.load(f"{a.dir}/{a.model}_calibration.npy")
    test = np.load(f"{a.dir}/{a.model}_test.npy")
    batches = [int(b) for b in a.batches.split(",")]
    (run_torch if a.engine == "torch" else run_ort)(a, calib, test, batches)


if __name__ == "__main__":
    sys.exit(main())
