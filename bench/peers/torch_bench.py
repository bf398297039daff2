#!/usr/bin/env python3
"""PyTorch peer for kiln's ResNet-18 / MobileNetV2 latency (issue #8, #9). Comparison only:
PyTorch is never a dependency of kiln. Debian 12: apt-get install python3-torch python3-torchvision.

  torch_bench.py time --model resnet18 --batch 1 --engine eager|torchscript|compile [--iters N]
      [--warmup W]
      prints one line: RESULT <engine> <model> <batch> <median_ms> <min_ms> <n>
  torch_bench.py export-onnx --model resnet18 --batch 1 -o /tmp/r18_b1.onnx [--opset 13]

torchvision models with random weights, eval mode, torch.set_num_threads(THREADS, default 2),
inference_mode. TorchScript: torch.jit.trace -> torch.jit.freeze -> optimize_for_inference.
compile: PyTorch 2.x's torch.compile (Inductor, default mode; PyPI's torch in a virtual
environment), compiled during the warm-up runs, under no_grad.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torchvision


def build(name):
    torch.manual_seed(0)
    if name == "resnet18":
        m = torchvision.models.resnet18(weights=None)
    elif name == "mobilenet_v2":
        m = torchvision.models.mobilenet_v2(weights=None)
    else:
        sys.exit(f"unknown model {name}")
    return m.eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["time", "export-onnx"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--engine", default="torchscript", choices=["eager", "torchscript", "compile"])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("-o", "--output")
    a = ap.parse_args()

    threads = int(os.environ.get("THREADS", "2"))
    torch.set_num_threads(threads)
    model = build(a.model)
    x = torch.randn(a.batch, 3, 224, 224)

    if a.cmd == "export-onnx":
        torch.onnx.export(model, x, a.output, opset_version=a.opset, input_names=["x"],
                          output_names=["logits"], do_constant_folding=True)
        print(f"wrote {a.output}")
        return

    # torch.compile traces under no_grad (its guards differ under inference_mode); the others run
    # under inference_mode as before.
    mode = torch.no_grad() if a.engine == "compile" else torch.inference_mode()
    with mode:
        if a.engine == "compile":
            fn = torch.compile(model)
        elif a.engine == "torchscript":
            with torch.no_grad():
                fn = torch.jit.trace(model, x)
                fn = torch.jit.freeze(fn)
                if hasattr(torch.jit, "optimize_for_inference"):
                    fn = torch.jit.optimize_for_inference(fn)
        else:
            fn = model
        for _ in range(a.warmup):
            fn(x)
        times = []
        for _ in range(a.iters):
            t0 = time.perf_counter()
            y = fn(x)
            times.append((time.perf_counter() - t0) * 1e3)
        assert y.shape == (a.batch, 1000)
    print(f"RESULT {'torchscript' if a.engine == 'torchscript' else 'torch-' + a.engine} {a.model} "
          f"{a.batch} {statistics.median(times):.3f} {min(times):.3f} {len(times)}")


if __name__ == "__main__":
    main()
