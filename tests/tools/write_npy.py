#!/usr/bin/env python3
"""Writes a float32 .npy of standard normal values with the standard library only (the CLI tests
must not need NumPy): write_npy.py OUT.npy SEED D0,D1,..."""
import random
import struct
import sys

out, seed, dims = sys.argv[1], int(sys.argv[2]), [int(d) for d in sys.argv[3].split(",")]
rng = random.Random(seed)
n = 1
for d in dims:
    n *= d
shape = "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"
header = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % shape
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
with open(out, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
    f.write(struct.pack("<%df" % n, *(rng.gauss(0.0, 1.0) for _ in range(n))))
