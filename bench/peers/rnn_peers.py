#!/usr/bin/env python3
"""Peers for kiln's recurrent model (issue #24): one LSTM layer 128 -> 256 over 64 steps, sequence
first, batch 1 and 8, the model bench_codegen's `lstm` rows compile. Comparison only: never a
dependency. Random weights: latency does not depend on them.

  /usr/bin/python3 rnn_peers.py torch --dir DIR [--batches 1,8]
      PyTorch eager (Debian's 1.13) under no_grad; writes DIR/lstm_b<B>.onnx for the ort mode.
  python3 rnn_peers.py ort --dir DIR [--batches 1,8]
      ONNX Runtime (all graph optimizations, intra-op spinning on: its default) on those files.

Prints `RESULT <engine> lstm <batch> <median_ms> <min_ms>` at THREADS threads (default 2), each
the median of ITERS (default 40) timed runs after 5 untimed ones, as bench_codegen's series do.
"""
import argparse
import os
import statistics
import time

import numpy as np

T, INPUT, HIDDEN = 64, 128, 256


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
    model = torch.nn.LSTM(INPUT, HIDDEN).eval()
    for b in args.batches:
        x = torch.randn(T, b, INPUT)
        path = os.path.join(args.dir, f"lstm_b{b}.onnx")
        if not os.path.exists(path):
            torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["y", "h", "c"],
                              opset_version=14)
        with torch.no_grad():
            med, low = timed(lambda: model(x), iters)
        print(f"RESULT torch-eager lstm {b} {med:.4f} {low:.4f}", flush=True)


def ort_mode(args, threads, iters):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    for b in args.batches:
        sess = ort.InferenceSession(os.path.join(args.dir, f"lstm_b{b}.onnx"), opts,
                                    providers=["CPUExecutionProvider"])
        x = np.random.default_rng(0).standard_normal((T, b, INPUT), dtype=np.float32)
        med, low = timed(lambda: sess.run(None, {"x": x}), iters)
        print(f"RESULT ort lstm {b} {med:.4f} {low:.4f}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("engine", choices=["torch", "ort"])
    p.add_argument("--dir", required=True)
    p.add_argument("--batches", default="1,8")
    args = p.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    os.makedirs(args.dir, exist_ok=True)
    threads = int(os.environ.get("THREADS", "2"))
    iters = int(os.environ.get("ITERS", "40"))
    (torch_mode if args.engine == "torch" else ort_mode)(args, threads, iters)


if __name__ == "__main__":
    main()
