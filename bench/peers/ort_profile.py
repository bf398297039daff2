#!/usr/bin/env python3
"""Summarizes an ONNX Runtime profile (ort_bench.js with ORT_PROFILE=PREFIX): time per node and
per op type, averaged over the profiled runs, to set beside `kiln bench M.kiln --profile`.

    python3 bench/peers/ort_profile.py PREFIX_<date>.json [TOP]
"""
import collections
import json
import sys


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    events = json.load(open(path))
    nodes = [e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")]
    runs = max(1, sum(1 for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"))
    per_node = collections.defaultdict(float)
    kind = {}
    shape = {}
    for e in nodes:
        name = e["name"][: -len("_kernel_time")]
        per_node[name] += e["dur"] / 1000.0
        args = e.get("args", {})
        kind[name] = args.get("op_name", "?")
        outs = args.get("output_type_shape") or []
        shape[name] = ",".join(str(list(o.values())[0]) for o in outs[:1])
    total = sum(per_node.values())
    print(f"{runs} runs, {total / runs:.3f} ms per run in nodes")
    for name, ms in sorted(per_node.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {ms / runs:8.3f} ms {100 * ms / total:5.1f}%  {kind[name]:24s} {shape[name]}  {name}")
    per_kind = collections.defaultdict(lambda: [0.0, 0])
    for name, ms in per_node.items():
        per_kind[kind[name]][0] += ms
        per_kind[kind[name]][1] += 1
    print("per op type:")
    for k, (ms, n) in sorted(per_kind.items(), key=lambda kv: -kv[1][0]):
        print(f"  {k:24s} {ms / runs:8.3f} ms {100 * ms / total:5.1f}%  x{n}")


if __name__ == "__main__":
    main()
