#!/usr/bin/env bash
# `kiln export mlp --weights W.safetensors`: Python writes known weights (no NumPy needed), kiln
# exports and runs the artifact on a nonzero input (so every weight reaches the output), and
# Python checks the output against the MLP computed in float64: y = W2 relu(W0 x + b0) + b2.
set -euo pipefail
kiln=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir" <<'PY'
import json, struct, sys
d = sys.argv[1]
def vals(n, k):
    return [((i * k) % 13 - 6) / 50.0 for i in range(n)]
t = {"0.weight": ([256, 784], vals(256 * 784, 7)), "0.bias": ([256], vals(256, 5)),
     "2.weight": ([10, 256], vals(10 * 256, 3)), "2.bias": ([10], vals(10, 11))}
header, blobs, off = {}, [], 0
for name, (shape, v) in t.items():
    data = struct.pack("<%df" % len(v), *v)
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(data)]}
    off += len(data)
    blobs.append(data)
h = json.dumps(header).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(d + "/w.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 784), }"
hdr += " " * (118 - len(hdr)) + "\n"
x = [((i * 5) % 17 - 8) / 16.0 for i in range(784)]  # exact in f32
open(d + "/x.npy", "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode()
                               + struct.pack("<784f", *x))
# Reference in float64 from the same values (stored as f32: compared with a tolerance).
f32 = lambda v: [struct.unpack("<f", struct.pack("<f", a))[0] for a in v]  # what kiln reads
w0, b0, w2, b2 = (f32(t[k][1]) for k in ("0.weight", "0.bias", "2.weight", "2.bias"))
hid = [max(sum(w0[j * 784 + i] * x[i] for i in range(784)) + b0[j], 0.0) for j in range(256)]
assert sum(h > 0 for h in hid) > 64 and sum(h == 0 for h in hid) > 16  # both relu branches
ref = [sum(w2[o * 256 + j] * hid[j] for j in range(256)) + b2[o] for o in range(10)]
open(d + "/ref.json", "w").write(json.dumps(ref))
PY
"$kiln" export mlp --input-shape 1,784 --weights "$dir/w.safetensors" -o "$dir/m.kiln"
"$kiln" run "$dir/m.kiln" --input "$dir/x.npy" --output "$dir/y.npy"
python3 - "$dir" <<'PY'
import json, struct, sys
d = sys.argv[1]
data = open(d + "/y.npy", "rb").read()
n = struct.unpack("<H", data[8:10])[0]
y = struct.unpack("<10f", data[10 + n:10 + n + 40])
ref = json.load(open(d + "/ref.json"))
err = max(abs(a - b) for a, b in zip(y, ref))
print("max abs error vs float64 reference: %.3g" % err)
assert err < 1e-4, (y, ref)
print("weights ok")
PY
