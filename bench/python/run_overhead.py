#!/usr/bin/env python3
"""What Python adds to a run: kiln.Session.run from Python against the C++ Session::run that
`kiln bench` times, on the same artifact, interleaved rounds (medians of per-call times).

usage: PYTHONPATH=build/release/python /usr/bin/python3 bench/python/run_overhead.py \
           build/release/bin/kiln M.kiln [ROUNDS=5] [RUNS=2000]"""
import re
import statistics
import subprocess
import sys
import time

import numpy as np

import kiln


def python_median_us(session, inputs, runs):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        session.run(inputs)
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


def cpp_median_us(cli, artifact, runs):
    out = subprocess.run([cli, "bench", artifact, "--bench", str(runs), "--warmup", "200"],
                         check=True, capture_output=True, text=True).stdout
    return float(re.search(r"steady state over \d+ runs: median ([0-9.]+) ms", out).group(1)) * 1e3


def main(cli, artifact, rounds=5, runs=2000):
    model = kiln.load(artifact)
    session = model.session()
    rng = np.random.default_rng(0)
    inputs = {name: rng.standard_normal(shape).astype(dtype)
              for name, dtype, shape in model.inputs}
    for _ in range(200):
        session.run(inputs)  # warm up, as kiln bench --warmup
    py, cpp = [], []
    for _ in range(rounds):
        py.append(python_median_us(session, inputs, runs))
        cpp.append(cpp_median_us(cli, artifact, runs))
    p, c = statistics.median(py), statistics.median(cpp)
    print(f"{artifact}: Python run {p:.1f} us, C++ run {c:.1f} us (medians of {rounds} rounds of "
          f"{runs}); Python adds {p - c:.1f} us per call")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:]))
