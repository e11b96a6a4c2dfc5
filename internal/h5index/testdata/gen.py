# Writes the test files of h5index_test.go (h5py 3.16, libhdf5 2.0.0; run from this
# directory): gzip-compressed uint16 "data", frame 1 (row 1) never written but in "single".
import numpy as np, h5py
rng = np.random.default_rng(5)
cases = {
    "btree1": ("earliest", (3, 2, 4, 4), (1, 1, 4, 4), None, 0),
    "btree1_levels_userblock": ("earliest", (10, 10, 2, 2), (1, 1, 2, 2), None, 512),
    "single": (("v110", "v110"), (2, 2, 4, 4), (2, 2, 4, 4), None, 0),
    "farray": (("v110", "v110"), (3, 2, 4, 4), (1, 2, 4, 4), (4, 2, 4, 4), 0),
    "farray_paged": (("v110", "v110"), (40, 30, 1, 1), (1, 1, 1, 1), None, 0),
    "earray": (("v110", "v110"), (3, 2, 4, 4), (1, 1, 4, 4), (None, 2, 4, 4), 0),
    "btree2": (("v110", "v110"), (3, 2, 4, 4), (1, 1, 4, 4), (None, None, 4, 4), 0),
}
for name, (libver, shape, chunks, maxshape, ub) in cases.items():
    data = rng.integers(0, 9, shape).astype("<u2")
    with h5py.File(name + ".h5", "w", libver=libver, userblock_size=ub) as f:
        ds = f.create_dataset("data", shape=shape, dtype="<u2", chunks=chunks, maxshape=maxshape, compression="gzip")
        for y in range(shape[0]):
            if y != 1 or name == "single":
                ds[y] = data[y]
