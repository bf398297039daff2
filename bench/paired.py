#!/usr/bin/env python3
"""Paired A/B of Google Benchmark rows on a noisy machine.

On these shared machines anything that touches L3 or DRAM swings by up to 2x over minutes (other
tenants), while pure FMA work does not. Unpaired runs minutes apart are therefore useless for
changes under ~30%. This runs A and B alternately, one short run each per round (the order
flipping every round), and reports per row the best time of each and the median over rounds of
B/A taken within the round.

    # two binaries (e.g. a worktree build of the previous commit), same environment
    bench/paired.py --a /tmp/old/bench/bench_conv --b build/release/bench/bench_conv \\
        --filter 'MobileNetV2Prepared' --rounds 8 --env KILN_NUM_THREADS=2
    # one binary, two environments
    bench/paired.py --a build/release/bench/bench_conv --a-env KILN_MBCONV_STRATEGY=banded \\
        --b-env KILN_MBCONV_STRATEGY=channels-last --filter 'MBConv/.*fused:1' --rounds 12
    # two rows of one run (B = the row with SUBSTR_A replaced by SUBSTR_B)
    bench/paired.py --a build/release/bench/bench_conv --rows fused:0 fused:1 --filter 'MBConv/'
"""
import argparse
import collections
import json
import os
import statistics
import subprocess


def run(binary, env, flt, min_time):
    out = subprocess.run([binary, f"--benchmark_filter={flt}", f"--benchmark_min_time={min_time}",
                          "--benchmark_format=json"], capture_output=True, text=True, env=env,
                         check=True).stdout
    return [(b["run_name"], b["real_time"]) for b in json.loads(out)["benchmarks"]
            if b.get("run_type", "iteration") == "iteration"]


def with_env(pairs):
    env = dict(os.environ)
    for kv in pairs:
        k, _, v = kv.partition("=")
        env[k] = v
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="benchmark binary A")
    ap.add_argument("--b", help="benchmark binary B (default: A)")
    ap.add_argument("--env", action="append", default=[], help="K=V for both")
    ap.add_argument("--a-env", action="append", default=[], help="K=V for A only")
    ap.add_argument("--b-env", action="append", default=[], help="K=V for B only")
    ap.add_argument("--rows", nargs=2, metavar=("SUBSTR_A", "SUBSTR_B"),
                    help="compare rows of one run instead of two runs")
    ap.add_argument("--filter", required=True)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--min-time", default="0.03")
    args = ap.parse_args()

    times = collections.defaultdict(lambda: collections.defaultdict(list))  # row -> side -> [t]
    order = []
    env_a = with_env(args.env + args.a_env)
    env_b = with_env(args.env + args.b_env)
    for r in range(args.rounds):
        sides = [("A", args.a, env_a)] if args.rows else [("A", args.a, env_a),
                                                           ("B", args.b or args.a, env_b)]
        for side, binary, env in (sides if r % 2 == 0 else sides[::-1]):
            for name, t in run(binary, env, args.filter, args.min_time):
                if args.rows and args.rows[1] in name:
                    name, side = name.replace(args.rows[1], args.rows[0]), "B"
                elif args.rows:
                    side = "A"
                if name not in order:
                    order.append(name)
                times[name][side].append(t)
    print(f"{'benchmark':64s}{'A best':>11s}{'B best':>11s}{'B/A':>8s}")
    for name in order:
        a, b = times[name]["A"], times[name]["B"]
        if not a or not b:
            continue
        ratio = statistics.median(y / x for x, y in zip(a, b))
        print(f"{name[:64]:64s}{min(a):11.1f}{min(b):11.1f}{ratio:8.3f}")


if __name__ == "__main__":
    main()
