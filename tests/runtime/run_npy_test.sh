#!/usr/bin/env bash
# `kiln run` with .npy input and output: writes an input with Python's struct (no NumPy needed),
# runs the artifact twice, and checks the output file's header and that both runs agree.
set -euo pipefail
kiln=$1
artifact=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir/x.npy" <<'PY'
import struct, sys
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 28, 28), }"
header += " " * (118 - len(header)) + "\n"  # 10-byte preamble + header = 128 bytes
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(b"".join(struct.pack("<f", ((i * 37) % 17) / 17.0) for i in range(784)))
PY
"$kiln" run "$artifact" --input "$dir/x.npy" --output "$dir/y1.npy"
"$kiln" run "$artifact" --input "$dir/x.npy" --output "$dir/y2.npy" >/dev/null
cmp "$dir/y1.npy" "$dir/y2.npy"
python3 - "$dir/y1.npy" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:6] == b"\x93NUMPY", "not an npy file"
n = struct.unpack("<H", data[8:10])[0]
header = data[10:10 + n].decode()
assert "'shape': (1, 10)" in header and "<f4" in header, header
values = struct.unpack("<10f", data[10 + n:10 + n + 40])
assert all(v == v for v in values) and any(v != 0 for v in values), values
print("npy output ok:", header.strip())
PY
# A wrong input shape is refused with the guard message and a non-zero exit.
python3 - "$dir/bad.npy" <<'PY'
import struct, sys
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 28, 27), }"
header += " " * (118 - len(header)) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(b"\0" * (28 * 27 * 4))
PY
if "$kiln" run "$artifact" --input "$dir/bad.npy" 2>"$dir/err"; then
  echo "expected a guard failure" >&2
  exit 1
fi
grep -q 'input "x": expected \[1,1,28,28\] f32, got \[1,1,28,27\] f32' "$dir/err"
echo "guard ok"
