#!/usr/bin/env python3
"""ONNX Runtime (Python, from PyPI) peer for kiln's ResNet-18 / MobileNetV2 latency: ort_bench.js's
measurement for machines without npm. Comparison only: never a dependency of kiln.

  python3 ort_bench.py MODEL.onnx MODEL_NAME BATCH [ITERS] [WARMUP]
      prints one line: RESULT ort-py <model> <batch> <median_ms> <min_ms> <n>

Session: intra_op_num_threads=THREADS (default 2), inter_op 1, all graph optimizations,
sequential execution, intra-op spinning as ORT ships it (on); ORT_SPIN=0 turns it off.
"""
import os
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort


def main():
    if len(sys.argv) < 4:
        sys.exit("usage: ort_bench.py MODEL.onnx MODEL_NAME BATCH [ITERS] [WARMUP]")
    path, name, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    iters = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    warmup = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = int(os.environ.get("THREADS", "2"))
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if os.environ.get("ORT_SPIN", "1") == "0":
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).uniform(-1, 1, (batch, 3, 224, 224)).astype(np.float32)
    feeds = {sess.get_inputs()[0].name: x}
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        out = sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    assert out[0].shape == (batch, 1000)
    print(f"RESULT ort-py {name} {batch} {statistics.median(times):.3f} {min(times):.3f} {len(times)}")


if __name__ == "__main__":
    main()
