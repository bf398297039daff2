#!/usr/bin/env python3
"""Writes SpotNet's initial weights as a .safetensors file with the standard library only, named
as PyTorch's state_dict() names them. Like a checkpoint from an older converter it has no
num_batches_tracked entries (kiln's load_state_dict accepts that, as PyTorch's does).

With PyTorch the same file comes from:
    from safetensors.torch import save_file
    save_file({k: v for k, v in SpotNet().state_dict().items()
               if not k.endswith("num_batches_tracked")}, "spotnet.safetensors")

usage: make_weights.py OUT.safetensors [SEED]"""
import json
import math
import random
import struct
import sys


def main(path, seed=0):
    rng = random.Random(seed)

    def uniform(shape, fan_in):  # PyTorch's default init bound for conv and linear weights
        bound = 1.0 / math.sqrt(fan_in)
        return shape, [rng.uniform(-bound, bound) for _ in range(math.prod(shape))]

    tensors = {"stem.weight": uniform([8, 1, 3, 3], 9)}
    for bn in ("bn1", "bn2"):
        if bn == "bn2":
            tensors["conv.weight"] = uniform([8, 8, 3, 3], 72)
        tensors[f"{bn}.weight"] = ([8], [1.0] * 8)
        tensors[f"{bn}.bias"] = ([8], [0.0] * 8)
        tensors[f"{bn}.running_mean"] = ([8], [0.0] * 8)
        tensors[f"{bn}.running_var"] = ([8], [1.0] * 8)
    tensors["head.weight"] = uniform([4, 8], 8)
    tensors["head.bias"] = uniform([4], 8)

    header, data = {}, b""
    for name, (shape, values) in tensors.items():
        raw = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) == 3 else 0)
