#!/usr/bin/env bash
# `kiln compile M.kiln`: the artifact `kiln export` writes compiles to an executable whose outputs
# equal the runtime's on the same input (LeNet; MobileNetV2 with its fused mbconv blocks), and the
# embedded module refers to the artifact's weights instead of repeating them. An artifact written
# without its module, and --weights given for an artifact, are refused by name.
set -euo pipefail
kiln=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
npy() {  # write OUT.npy: float32 uniform(-1, 1) of the given shape (seeded)
  python3 - "$@" <<'PY'
import array, random, struct, sys
out, shape = sys.argv[1], [int(d) for d in sys.argv[2].split(",")]
random.seed(7)
n = 1
for d in shape: n *= d
hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s,), }" % ", ".join(map(str, shape))
hdr += " " * (-(len(hdr) + 11) % 64) + "\n"
data = array.array("f", [random.uniform(-1, 1) for _ in range(n)]).tobytes()
open(out, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + data)
PY
}
max_diff() {  # largest |a - b| over two float32 .npy files of one shape
  python3 - "$1" "$2" <<'PY'
import array, struct, sys
def read(p):
    b = open(p, "rb").read()
    n = struct.unpack("<H", b[8:10])[0]
    return array.array("f", b[10 + n:])
a, b = read(sys.argv[1]), read(sys.argv[2])
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
print(max(abs(x - y) for x, y in zip(a, b)))
PY
}
for spec in lenet:2,1,28,28 mobilenet_v2:1,3,64,64; do
  model=${spec%%:*}
  shape=${spec#*:}
  "$kiln" export "$model" --input-shape "$shape" -o "$model.kiln" 2>/dev/null
  weights=$("$kiln" inspect "$model.kiln" | awk '/^weights:/ {print $2}')
  ir=$("$kiln" inspect "$model.kiln" | awk '/^ir:/ {print $2}')
  # The module refers to the weights: its bytecode is a small fraction of them.
  test "$ir" -gt 0 && test $((ir * 20)) -lt "$weights" ||
    { echo "$model: embedded module of $ir bytes for $weights bytes of weights" >&2; exit 1; }
  "$kiln" compile "$model.kiln" --emit exe -o "$model.exe" --quiet
  npy x.npy "$shape"
  "$kiln" run "$model.kiln" --input x.npy --output runtime.npy >/dev/null
  "./$model.exe" x.npy -o exe.npy
  d=$(max_diff runtime.npy exe.npy)
  python3 -c "import sys; sys.exit(0 if $d <= 1e-4 else 1)" ||
    { echo "$model: compiled artifact differs from the runtime by $d" >&2; exit 1; }
  echo "$model: compiled artifact matches the runtime (max diff $d; ir $ir bytes)"
done
"$kiln" export lenet --input-shape 1,1,28,28 --no-embed-ir -o bare.kiln 2>/dev/null
if "$kiln" compile bare.kiln --emit exe -o bare.exe 2>err.txt; then exit 1; fi
grep -q "holds no module to compile" err.txt || { cat err.txt >&2; exit 1; }
if "$kiln" compile lenet.kiln --weights w.safetensors --emit exe -o x.exe 2>err.txt; then exit 1; fi
grep -q "carries its weights" err.txt || { cat err.txt >&2; exit 1; }
echo "compile artifact ok"
