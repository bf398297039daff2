#!/usr/bin/env bash
# `kiln export --quantize int8 --calibration X.npy` and `kiln quant-report` on LeNet: every layer
# becomes int8, the artifact is under a third of the float one's size, the int8 model stays
# within 20 dB SQNR of the float one on inputs calibration did not see and picks the same class;
# calibration data of the wrong shape and an unknown scheme are refused by name. Then
# `--quantize dynamic` on the MLP.
set -euo pipefail
kiln=$1
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 "$here/write_npy.py" "$dir/cal.npy" 1 16,1,28,28
python3 "$here/write_npy.py" "$dir/test.npy" 2 8,1,28,28
python3 "$here/write_npy.py" "$dir/wrong.npy" 3 16,3,28,28

"$kiln" export lenet --input-shape 4,1,28,28 -o "$dir/f.kiln" 2>/dev/null
"$kiln" export lenet --input-shape 4,1,28,28 --quantize int8 --calibration "$dir/cal.npy" \
  --sqnr-input "$dir/test.npy" -o "$dir/q.kiln" 2>/dev/null >"$dir/export.txt"
grep -q "5 of 5 conv2d/linear layers int8 (4 calibration batches)" "$dir/export.txt" ||
  { cat "$dir/export.txt"; echo "FAILED: not every layer int8"; exit 1; }
"$kiln" quant-report "$dir/q.kiln" --reference "$dir/f.kiln" --input "$dir/test.npy" >"$dir/report.txt"
cat "$dir/report.txt"
python3 - "$dir/report.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
ratio = float(re.search(r": ([0-9.]+)x the size", text).group(1))
db = float(re.search(r"output 0 \(logits\): SQNR ([0-9.]+) dB", text).group(1))
agree = re.search(r"top-1 agreement .*\((\d+) of (\d+)\)", text).groups()
assert ratio <= 0.33, f"int8 artifact is {ratio}x the float one"
assert db >= 20, f"SQNR {db} dB"
assert agree[0] == agree[1], f"top-1 agreement {agree}"
assert "conv2d #0" in text, "the per-layer table is missing"
print(f"quantized lenet: {ratio}x the size, {db} dB")
PY

if "$kiln" export lenet --input-shape 4,1,28,28 --quantize int8 --calibration "$dir/wrong.npy" \
     -o "$dir/x.kiln" 2>"$dir/err.txt" >/dev/null; then
  echo "FAILED: calibration of the wrong shape accepted"; exit 1
fi
grep -q "expected float32 of shape \[N, 1, 28, 28\]" "$dir/err.txt" || { cat "$dir/err.txt"; exit 1; }
if "$kiln" export lenet --input-shape 4,1,28,28 --quantize int4 --calibration "$dir/cal.npy" \
     -o "$dir/x.kiln" 2>"$dir/err.txt" >/dev/null; then
  echo "FAILED: --quantize int4 accepted"; exit 1
fi
grep -q "expected int8 or dynamic, got 'int4'" "$dir/err.txt" || { cat "$dir/err.txt"; exit 1; }

# --quantize dynamic: the MLP's linear layers get int8 weights, no calibration; the artifact runs
# close to the float one (kiln quant-report compares the two on kiln_runtime).
python3 "$here/write_npy.py" "$dir/mlp.npy" 4 8,784
"$kiln" export mlp --input-shape 4,784 -o "$dir/mf.kiln" 2>/dev/null
"$kiln" export mlp --input-shape 4,784 --quantize dynamic --sqnr-input "$dir/mlp.npy" \
  -o "$dir/mq.kiln" 2>/dev/null >"$dir/dyn.txt"
grep -q "2 of 2 linear layers int8 (dynamic" "$dir/dyn.txt" || { cat "$dir/dyn.txt"; exit 1; }
"$kiln" quant-report "$dir/mq.kiln" --reference "$dir/mf.kiln" --input "$dir/mlp.npy" \
  >"$dir/dyn_report.txt"
python3 - "$dir/dyn_report.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
ratio = float(re.search(r": ([0-9.]+)x the size", text).group(1))
db = float(re.search(r"output 0 .*SQNR ([0-9.]+) dB", text).group(1))
assert ratio <= 0.3, f"dynamic int8 artifact is {ratio}x the float one"
assert db >= 30, f"SQNR {db} dB"
print(f"dynamic mlp: {ratio}x the size, {db} dB")
PY
if "$kiln" export mlp --input-shape 4,784 --quantize dynamic --calibration "$dir/mlp.npy" \
     -o "$dir/x.kiln" 2>"$dir/err.txt" >/dev/null; then
  echo "FAILED: --calibration accepted with --quantize dynamic"; exit 1
fi
grep -q "takes no --calibration" "$dir/err.txt" || { cat "$dir/err.txt"; exit 1; }
echo "quantize cli ok"
