#!/usr/bin/env python3
"""PyTorch peer for kiln's CUDA benchmarks (bench/cuda.cpp), run by scripts/gpu_check.sh on the
GPU machine: the same device-to-device copy, pointwise chain relu(x*1.5-0.25)*0.75 on 256 MB
(eager and torch.compile), SGEMM 4096^3 in float32 and TF32, and the host time of a small eager
add. Device times from CUDA events, the median of --iters runs after a warm-up. Comparison only:
PyTorch is never a dependency of kiln.
"""
import statistics
import time

import torch


def timed(fn, iters=20, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e))
    return statistics.median(out)


def resnet18_peer():
    """ResNet-18 b64 224x224 float32, TF32 convolutions (PyTorch's default), as bench/cuda.cpp:
    eval-mode inference (device time; eager and torch.compile) and an eager training step with
    cross-entropy against random classes and SGD with momentum (host wall time, synchronized).
    Eager rows run twice: with cudnn.benchmark off (PyTorch's default: the heuristic's plan) and
    on (every plan timed once, as kiln's convolutions do for large shapes)."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18().cuda().eval()
    x = torch.randn(64, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (64,), device="cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    for benchmark in (False, True):
        torch.backends.cudnn.benchmark = benchmark
        tag = "benchmark" if benchmark else "default"
        model.eval()
        with torch.no_grad():
            ms = timed(lambda: model(x))
            print(f"RESULT torch resnet18_b64_infer_eager[{tag}] {ms:.3f} ms")
            if not benchmark:
                compiled = torch.compile(model)
                ms = timed(lambda: compiled(x))
                print(f"RESULT torch resnet18_b64_infer_compile {ms:.3f} ms")
        model.train()
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        peak = torch.cuda.max_memory_allocated() / 1e6
        print(f"RESULT torch resnet18_b64_train_step[{tag}] {statistics.median(times):.3f} ms "
              f"(eager), peak {peak:.0f} MB")
    torch.backends.cudnn.benchmark = False


def main():
    dev = torch.cuda.get_device_properties(0)
    print(f"device {dev.name}, torch {torch.__version__}, cuda {torch.version.cuda}")
    n = (256 << 20) // 4
    x = torch.randn(n, device="cuda") * 0.5
    y = torch.empty_like(x)
    gb = n * 8 / 1e9
    ms = timed(lambda: y.copy_(x))
    print(f"RESULT torch copy_d2d {ms:.3f} ms {gb / ms * 1e3:.0f} GB/s")

    def chain(t):
        return torch.relu(t * 1.5 - 0.25) * 0.75

    ms = timed(lambda: chain(x))
    print(f"RESULT torch chain_eager {ms:.3f} ms {gb / ms * 1e3:.0f} GB/s")
    compiled = torch.compile(chain)
    ms = timed(lambda: compiled(x))
    print(f"RESULT torch chain_compile {ms:.3f} ms {gb / ms * 1e3:.0f} GB/s")
    del x, y
    a = torch.randn(4096, 4096, device="cuda")
    b = torch.randn(4096, 4096, device="cuda")
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        ms = timed(lambda: torch.matmul(a, b), iters=50, warmup=5)
        print(f"RESULT torch sgemm4096_{'tf32' if tf32 else 'fp32'} {ms:.3f} ms "
              f"{2 * 4096**3 / ms / 1e9:.1f} TFLOP/s")
        if tf32:  # which kernel PyTorch runs, for the comparison with kiln's cuBLASLt pick
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                torch.matmul(a, b)
                torch.cuda.synchronize()
            names = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}
            print("kernel (tf32 matmul):", ", ".join(sorted(names))[:300])
    torch.backends.cuda.matmul.allow_tf32 = False
    del a, b
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(256, 1024, device="cuda"), torch.randn(256, 1024, device="cuda")

    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(50):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    print(f"RESULT torch mlp_train_step {statistics.median(times):.3f} ms (eager)")
    resnet18_peer()
    p, q = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
    for _ in range(100):
        p + q
    torch.cuda.synchronize()
    reps = 20000
    t0 = time.perf_counter()
    for _ in range(reps):
        p + q
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    print(f"RESULT torch eager_add_launch {(t1 - t0) / reps * 1e6:.2f} us/op (python)")


if __name__ == "__main__":
    main()
