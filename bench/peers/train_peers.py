#!/usr/bin/env python3
"""PyTorch peer for kiln's eager training step (issue #25's `train_sgd` scenario). Comparison only:
PyTorch is never a dependency of kiln. Debian 12: apt-get install python3-torch python3-torchvision.

  /usr/bin/python3 bench/peers/train_peers.py --model mlp|lenet|resnet18 [--steps N] [--warmup W]
      prints: RESULT torch <model> <batch> <median_ms> <min_ms> <n> peak_growth_mb=<MB>

One step = zero_grad, forward, cross-entropy, backward, SGD (lr 0.01, momentum 0.9) — the models
and batches of `bench_train`'s BM_MlpB64 / BM_LeNetB64 / BM_ResNet18B8 (random inputs, train mode):
MLP 784-512-256-10 with ReLUs at batch 64, LeNet-5 (the zoo's: 5x5 convs, max pools) at batch 64,
torchvision's ResNet-18 with 10 classes at batch 8x3x224x224. torch.set_num_threads(THREADS,
default 2). peak_growth_mb: how far the process's peak resident set rose above its resident set
before the first step (Linux's VmHWM, reset through /proc/self/clear_refs) — what training adds
on top of the model and the data; `bench_train --benchmark_filter=<row>/0/0` reports the same
counter for kiln.
"""
import argparse
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


class LeNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(400, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv1(x)), 2)
        h = F.max_pool2d(F.relu(self.conv2(h)), 2)
        h = h.flatten(1)
        h = F.relu(self.fc1(h))
        h = F.relu(self.fc2(h))
        return self.fc3(h)


def build(name):
    if name == "mlp":
        m = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                          nn.Linear(256, 10))
        return m, torch.randn(64, 784), torch.randint(0, 10, (64,))
    if name == "lenet":
        return LeNet(), torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
    if name == "resnet18":
        m = torchvision.models.resnet18(weights=None, num_classes=10)
        return m, torch.randn(8, 3, 224, 224), torch.randint(0, 10, (8,))
    raise SystemExit(f"unknown model {name}")


def status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise SystemExit(f"no {field} in /proc/self/status")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, choices=["mlp", "lenet", "resnet18"])
    ap.add_argument("--steps", type=int, default=0, help="timed steps (default: by model)")
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    torch.manual_seed(0)
    model, x, y = build(a.model)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident set
    base_kb = status_kb("VmRSS")
    for _ in range(a.warmup):
        step()
    steps = a.steps or {"mlp": 200, "lenet": 100, "resnet18": 10}[a.model]
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append((time.perf_counter() - t) * 1e3)
    growth_mb = (status_kb("VmHWM") - base_kb) / 1024
    print(f"RESULT torch {a.model} {x.shape[0]} {statistics.median(times):.3f} {min(times):.3f} "
          f"{steps} peak_growth_mb={growth_mb:.1f}")


if __name__ == "__main__":
    main()
