#!/usr/bin/env python3
"""PyTorch peer for bench_distributed (kiln's CPU process group and DistributedDataParallel):
torch.distributed with the Gloo backend, the same collectives, models, batches and bucket sizes.
Comparison only: PyTorch is never a dependency of kiln. bench/distributed.sh starts one process
per rank with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (as torchrun does).

  prints on rank 0: RESULT torch AllReduce/<bytes> <mean_ms> busbw_GBps=<x>
                    RESULT torch DdpStep/<model>/<mode> <mean_ms>

AllReduce: 20 float32 all_reduce calls after 3 warm-ups. DdpStep: mode 0 DDP with 25 MB buckets
(its default), 1 one bucket (bucket_cap_mb huge, so no overlap with backward), 2 no DDP; models:
0 MLP 512-2048-2048-2048-10 (global batch 128), 1 torchvision's ResNet-18 with 10 classes (global
batch 8 of 3x112x112); SGD lr 0.01 momentum 0.9, cross-entropy; mean over 20 (MLP) or 4
(ResNet-18) steps after 2 warm-ups. torch.set_num_threads(THREADS, default 1).
"""
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torchvision


def timed(fn, iterations, warmup):
    for _ in range(warmup):
        fn()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        fn()
    return (time.perf_counter() - start) / iterations * 1e3


def main():
    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    report = rank == 0
    for size in (64 << 10, 1 << 20, 16 << 20, 64 << 20):
        t = torch.ones(size // 4)
        ms = timed(lambda: dist.all_reduce(t), 20, 3)
        if report:
            busbw = size * 2 * (n - 1) / n / (ms * 1e-3) * 1e-9
            print(f"RESULT torch AllReduce/{size} {ms:.3f} busbw_GBps={busbw:.2f}", flush=True)
    for model_id in (0, 1):
        for mode in (0, 1, 2):
            torch.manual_seed(1)
            if model_id == 0:
                model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 2048),
                                      nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                                      nn.Linear(2048, 10))
                rows = 128 // n
                x = torch.randn(rows, 512)
            else:
                model = torchvision.models.resnet18(num_classes=10)
                rows = 8 // n
                x = torch.randn(rows, 3, 112, 112)
            y = torch.randint(0, 10, (rows,))
            if mode != 2:
                model = nn.parallel.DistributedDataParallel(
                    model, bucket_cap_mb=25 if mode == 0 else 1e6)
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

            def step():
                opt.zero_grad()
                F.cross_entropy(model(x), y).backward()
                opt.step()

            ms = timed(step, 20 if model_id == 0 else 4, 2)
            if report:
                print(f"RESULT torch DdpStep/{model_id}/{mode} {ms:.3f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
