#!/usr/bin/python3
"""Writes the .npy fixtures that tests/frontend/test_serialize.cpp reads, with real NumPy
(Debian python3-numpy 1.24). Each array follows a formula the test recomputes independently.
Run from this directory: /usr/bin/python3 gen_npy_fixtures.py"""
import numpy as np

def save(name, arr, version=None):
    with open(name, "wb") as f:
        np.lib.format.write_array(f, arr, version=version, allow_pickle=False)

# f4 [2,3]: 0.5*(3i+j) - 1
save("f4_2x3.npy", (np.arange(6, dtype="<f4").reshape(2, 3) * 0.5 - 1).astype("<f4"))
# f8 [3,4] Fortran order: i*10 + j + 0.25
a = np.fromfunction(lambda i, j: i * 10 + j + 0.25, (3, 4), dtype="<f8")
save("f8_3x4_fortran.npy", np.asfortranarray(a))
# i4 [2,3,4] Fortran order: 100i + 10j + k - 50
b = np.fromfunction(lambda i, j, k: 100 * i + 10 * j + k - 50, (2, 3, 4)).astype("<i4")
save("i4_2x3x4_fortran.npy", np.asfortranarray(b))
# f2 [5]: [-2, -0.5, 0, 1.5, 65504]
save("f2_5.npy", np.array([-2, -0.5, 0, 1.5, 65504], dtype="<f2"))
save("i1_4.npy", np.array([-128, -1, 0, 127], dtype="i1"))
save("u1_4.npy", np.array([0, 1, 128, 255], dtype="u1"))
save("i8_3.npy", np.array([-(2**63), -1, 2**63 - 1], dtype="<i8"))
save("b1_2x2.npy", np.array([[True, False], [False, True]]))
save("f8_scalar.npy", np.array(3.25, dtype="<f8"))
save("f4_empty_0x3.npy", np.zeros((0, 3), dtype="<f4"))
# version 2.0 and 3.0 headers: i8 [2,2] = [[1,2],[3,4]]
save("i8_v2.npy", np.array([[1, 2], [3, 4]], dtype="<i8"), version=(2, 0))
save("i8_v3.npy", np.array([[1, 2], [3, 4]], dtype="<i8"), version=(3, 0))
# rejected: big-endian and complex
save("f4_bigendian.npy", np.array([1, 2], dtype=">f4"))
save("c8.npy", np.array([1 + 2j], dtype="<c8"))
