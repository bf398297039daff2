#!/usr/bin/env python3
"""MobileNetV2, kiln vs ONNX Runtime per inverted-residual block, interleaved.

Alternates `kiln bench M.kiln --profile` and `ort_bench.js` with ORT_PROFILE (fresh processes,
the order flipping every round) and sums each engine's time per block: ORT's nodes by their
`features.K` name, kiln's instructions by their position in the plan. The medians over rounds set
side by side say which blocks lose; the sums carry each engine's profiling overhead (ORT times
about twice as many nodes as kiln instructions), so read ratios, not totals, and only within
one run (kiln's profile lists the instructions that make up 99% of its time: the pooling may
read 0). Needs the artifacts and models `run.sh` writes (WORK), and ORT as for `run.sh`.

    T=2 bench/peers/compare_blocks.py BATCH [ROUNDS] [RUNS]      # from the repository root
"""
import collections
import glob
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WORK = os.environ.get("WORK", "/tmp/kiln-peers")
KILN = os.environ.get("KILN", os.path.join(ROOT, "build/release/bin/kiln"))
NODE_PATH = os.environ.get("ORT_NODE_MODULES", "/tmp/ortnode/node_modules")


def kiln_blocks(batch):
    """kiln instruction index -> block name (the plan's order, as kiln export writes it)."""
    # The head (features.18) and the pool are one kiln.conv2d_avgpool: "f18" covers both, and the
    # flatten, on either side.
    if batch == "1":  # batch 1: the t=1 block stays two convs, every other block is fused
        m = {0: 0, 1: 1, 2: 1, 3: 2, 4: 3, 5: 4}
        m.update({i: i - 1 for i in range(6, 20)})
        names = {i: "f%02d" % b for i, b in m.items()}
        names.update({20: "f18", 21: "fc"})
    else:  # batch 8: every block fused
        names = {i: "f%02d" % i for i in range(19)}
        names.update({19: "f18", 20: "fc"})
    return names


def main():
    batch = sys.argv[1] if len(sys.argv) > 1 else "1"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    runs = sys.argv[3] if len(sys.argv) > 3 else "60"
    threads = os.environ.get("T", "2")
    env = dict(os.environ, KILN_NUM_THREADS=threads, THREADS=threads, NODE_PATH=NODE_PATH,
               ORT_SPIN=os.environ.get("ORT_SPIN", "1"))
    names = kiln_blocks(batch)
    per = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in range(rounds):
        for engine in (["kiln", "ort"] if r % 2 == 0 else ["ort", "kiln"]):
            blocks = collections.defaultdict(float)
            if engine == "kiln":
                out = subprocess.run([KILN, "bench", f"{WORK}/mobilenet_v2_b{batch}.kiln", "--bench",
                                      runs, "--warmup", "5", "--profile"], capture_output=True,
                                     text=True, env=env, check=True).stdout
                for line in out.splitlines():
                    m = re.match(r"\s+(\d+)\s+([\d.]+)\s+[\d.]+%\s+\S", line)
                    if m:
                        blocks[names.get(int(m.group(1)), "other")] += float(m.group(2))
            else:
                prefix = f"/tmp/compare_blocks_{os.getpid()}"
                for f in glob.glob(prefix + "_*.json"):
                    os.remove(f)
                subprocess.run(["node", os.path.join(ROOT, "bench/peers/ort_bench.js"),
                                f"{WORK}/mobilenet_v2_b{batch}.onnx", "m", batch, runs, "5"],
                               capture_output=True, text=True, env=dict(env, ORT_PROFILE=prefix),
                               check=True)
                path = glob.glob(prefix + "_*.json")[0]
                events = json.load(open(path))
                os.remove(path)
                n = max(1, sum(1 for e in events
                               if e.get("cat") == "Session" and e.get("name") == "model_run"))
                for e in events:
                    if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
                        m = re.search(r"features\.(\d+)/", e["name"])
                        key = ("f%02d" % int(m.group(1)) if m else
                               "fc" if "classifier" in e["name"] else "f18")
                        blocks[key] += e["dur"] / 1000.0 / n
            for k, v in blocks.items():
                per[k][engine].append(v)
    total = {"kiln": 0.0, "ort": 0.0}
    print(f"MobileNetV2 batch {batch}, {threads} threads, {rounds} rounds: ms per run (median)")
    for k in sorted(per):
        a = statistics.median(per[k]["kiln"]) if per[k]["kiln"] else 0.0
        b = statistics.median(per[k]["ort"]) if per[k]["ort"] else 0.0
        total["kiln"] += a
        total["ort"] += b
        ratio = f"{a / b:5.2f}" if a and b else "    -"
        print(f"  {k:6s} kiln {a:7.3f}  ort {b:7.3f}  kiln/ort {ratio}")
    print(f"  sum    kiln {total['kiln']:7.3f}  ort {total['ort']:7.3f}")


if __name__ == "__main__":
    main()
