#!/usr/bin/env python3
"""Peers for kiln's sequence models (issue #24), the models bench_codegen's `lstm` and
`transformer` rows compile, batch 1 and 8: one LSTM layer 128 -> 256 over 64 steps (sequence
first), and one transformer encoder layer (d_model 256, 4 heads, feed-forward 1024, GELU, post-norm,
batch first, 128 tokens). Comparison only: never a dependency. Random weights: latency does not
depend on them.

  /usr/bin/python3 seq_peers.py torch --dir DIR [--model lstm|transformer] [--batches 1,8]
      PyTorch eager (Debian's 1.13) under no_grad; writes DIR/<model>_b<B>.onnx for the ort mode.
  python3 seq_peers.py ort --dir DIR [--model lstm|transformer] [--batches 1,8]
      ONNX Runtime (all graph optimizations, intra-op spinning on: its default) on those files.
  python3 seq_peers.py compile [--model lstm|transformer] [--batches 1,8]
      PyTorch 2.x's torch.compile (Inductor, its default mode) under no_grad, from PyPI
      (`pip install torch` in a virtual environment; the CPU path needs only a C++ compiler).
      Compilation happens in the untimed warm-up runs.

Prints `RESULT <engine> <model> <batch> <median_ms> <min_ms>` at THREADS threads (default 2), each
the median of ITERS (default 40) timed runs after 5 untimed ones, as bench_codegen's series do.
"""
import argparse
import os
import statistics
import time

import numpy as np

T, INPUT, HIDDEN = 64, 128, 256  # the LSTM
TOKENS, D_MODEL, HEADS, FF = 128, 256, 4, 1024  # the transformer layer


def make_model(torch, name):
    if name == "lstm":
        return torch.nn.LSTM(INPUT, HIDDEN).eval()
    return torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.0, activation="gelu",
                                            batch_first=True).eval()


def input_shape(name, b):
    return (T, b, INPUT) if name == "lstm" else (b, TOKENS, D_MODEL)


def timed(run, iters):
    for _ in range(5):
        run()
    ms = []
    for _ in range(iters):
        t0 = time.perf_counter()
        run()
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms), min(ms)


def torch_mode(args, threads, iters):
    import torch

    torch.set_num_threads(threads)
    model = make_model(torch, args.model)
    for b in args.batches:
        x = torch.randn(*input_shape(args.model, b))
        path = os.path.join(args.dir, f"{args.model}_b{b}.onnx")
        if not os.path.exists(path):
            torch.onnx.export(model, (x,), path, input_names=["x"], opset_version=14)
        with torch.no_grad():
            med, low = timed(lambda: model(x), iters)
        print(f"RESULT torch-eager {args.model} {b} {med:.4f} {low:.4f}", flush=True)


def compile_mode(args, threads, iters):
    import torch

    torch.set_num_threads(threads)
    print(f"# torch {torch.__version__}, torch.compile (Inductor)", flush=True)
    for b in args.batches:
        model = make_model(torch, args.model)
        compiled = torch.compile(model)
        x = torch.randn(*input_shape(args.model, b))
        with torch.no_grad():
            med, low = timed(lambda: compiled(x), iters)
        print(f"RESULT torch-compile {args.model} {b} {med:.4f} {low:.4f}", flush=True)


def ort_mode(args, threads, iters):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    for b in args.batches:
        sess = ort.InferenceSession(os.path.join(args.dir, f"{args.model}_b{b}.onnx"), opts,
                                    providers=["CPUExecutionProvider"])
        x = np.random.default_rng(0).standard_normal(input_shape(args.model, b), dtype=np.float32)
        med, low = timed(lambda: sess.run(None, {"x": x}), iters)
        print(f"RESULT ort {args.model} {b} {med:.4f} {low:.4f}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("engine", choices=["torch", "ort", "compile"])
    p.add_argument("--dir", default=None, help="ONNX files (torch writes them, ort reads them)")
    p.add_argument("--model", choices=["lstm", "transformer"], default="lstm")
    p.add_argument("--batches", default="1,8")
    args = p.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    if args.engine != "compile":
        if not args.dir:
            p.error(f"{args.engine} needs --dir")
        os.makedirs(args.dir, exist_ok=True)
    threads = int(os.environ.get("THREADS", "2"))
    iters = int(os.environ.get("ITERS", "40"))
    {"torch": torch_mode, "ort": ort_mode, "compile": compile_mode}[args.engine](args, threads, iters)


if __name__ == "__main__":
    main()
