"""Writes the NPY files of this folder with numpy's own writer (numpy.lib.format), as
seeds of FuzzRead (internal/npy) and FuzzLoadNPY (masks) and cases of TestReadNumpyFiles.
Run once with numpy (they were made with numpy 2.4.6): python3 gen.py"""

import numpy as np
from numpy.lib import format as npf

cases = {
    "f4_2x3_v1": (np.arange(6, dtype="<f4").reshape(2, 3), (1, 0)),
    "u2_4_v1": (np.arange(4, dtype="<u2"), (1, 0)),
    "u1_2x2x2_v1": (np.arange(8, dtype="u1").reshape(2, 2, 2), (1, 0)),
    "b1_2x2_v1": (np.array([[True, False], [False, True]]), (1, 0)),
    "f8_fortran_2x3_v1": (np.asfortranarray(np.arange(6, dtype="<f8").reshape(2, 3)), (1, 0)),
    "be_f4_3_v1": (np.arange(3, dtype=">f4"), (1, 0)),
    "i8_scalar_v1": (np.array(7, dtype="<i8"), (1, 0)),
    "f4_empty_0x3_v1": (np.zeros((0, 3), dtype="<f4"), (1, 0)),
    "i4_1x2x2x2_v2": (np.arange(8, dtype="<i4").reshape(1, 2, 2, 2), (2, 0)),
    "f4_3x1x2_v3": (np.arange(6, dtype="<f4").reshape(3, 1, 2), (3, 0)),
    "structured_v3": (np.zeros(2, dtype=[("\u00e9", "<f4"), ("b", "<u2")]), (3, 0)),
}
for name, (arr, version) in cases.items():
    with open(name + ".npy", "wb") as f:
        npf.write_array(f, arr, version=version)
