"""sync_offset as LiberTEM defines it (#33): the nav shape is kept, the positions without a
frame read as blank frames (0 in apply_masks, named by Dataset.positions_without_frame
and the result's sidecar), and reduce counts the file's frames only (LiberTEM's
StdDevUDF: num_frames 54 for 64 positions with sync_offset -10); against numpy."""

import numpy as np
import pytest

import stemdot


@pytest.fixture
def scan(tmp_path):
    rng = np.random.default_rng(33)
    frames = (100 + 30 * rng.standard_normal((8, 8, 6, 5))).astype(np.float32)
    path = tmp_path / "scan.npy"
    np.save(path, frames)
    return path, frames.reshape(64, 6, 5).astype(np.float64)


def shifted(flat, s):
    """The frames at the 64 scan positions with sync offset s: the file's frame p + s,
    zeros where the file has none; and which positions have one."""
    out = np.zeros_like(flat)
    held = np.zeros(64, dtype=bool)
    for p in range(64):
        if 0 <= p + s < 64:
            out[p], held[p] = flat[p + s], True
    return out, held


@pytest.mark.parametrize("s, runs", [(-10, [(0, 10)]), (3, [(61, 3)]), (0, [])])
def test_apply_and_reduce(scan, s, runs):
    path, flat = scan
    masks = np.random.default_rng(1).standard_normal((2, 6, 5))
    frames, held = shifted(flat, s)
    with stemdot.open(path, sync_offset=s) as ds:
        assert ds.nav_shape == (8, 8)
        assert ds.positions_without_frame == runs
        got = stemdot.apply_masks(ds, masks, dtype=np.float64)
        want = np.einsum("pyx,myx->pm", frames, masks).reshape(8, 8, 2)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
        assert got.info.get("positions_without_frame", []) == [list(r) for r in runs]
        red = stemdot.reduce(ds, stemdot.REDUCTIONS)
    real = frames[held]
    assert len(real) == 64 - abs(s)
    np.testing.assert_allclose(red["sum"], real.sum(0), rtol=1e-12)
    np.testing.assert_allclose(red["mean"], real.mean(0), rtol=1e-12)
    np.testing.assert_array_equal(red["max"], real.max(0))
    np.testing.assert_allclose(red["std"], real.std(0), rtol=1e-10)


def test_roi_and_shifts_of_the_kept_nav_shape(scan):
    path, flat = scan
    roi = np.zeros((8, 8), dtype=bool)
    roi[0, 2:7] = roi[7, :] = True
    frames, held = shifted(flat, 3)
    with stemdot.open(path, sync_offset=3, roi=roi) as ds:
        assert ds.positions_without_frame == [(61, 3)]
        red = stemdot.reduce(ds, ["mean", "std"])
    sel = held & roi.ravel()
    np.testing.assert_allclose(red["mean"], flat[np.flatnonzero(sel) + 3].mean(0), rtol=1e-12)
    np.testing.assert_allclose(red["std"], flat[np.flatnonzero(sel) + 3].std(0), rtol=1e-10)
    # Shifts of the scan's nav shape (8, 8) (LiberTEM takes them: peer M46).
    ones = np.ones((1, 6, 5))
    with stemdot.open(path, sync_offset=3) as ds:
        got = stemdot.apply_masks(ds, ones, dtype=np.float64, shifts=np.zeros((8, 8, 2)))
    np.testing.assert_allclose(got[..., 0], frames.sum((1, 2)).reshape(8, 8), rtol=1e-12)


def test_no_frame_of_the_file(scan):
    path, _ = scan
    with stemdot.open(path, sync_offset=-10, roi="rect:0,0,8,1") as ds:
        assert ds.positions_without_frame == [(0, 8)]
        red = stemdot.reduce(ds, stemdot.REDUCTIONS)
    np.testing.assert_array_equal(red["sum"], 0)
    for name in ("mean", "max", "std"):
        assert np.isnan(red[name]).all(), name


def test_c_abi_buffer(scan):
    # stemdot_dataset_blanks: (first, count) pairs; a buffer too small for them is SHAPE
    # with the runs needed, NULL with a length INVALID_ARGUMENT.
    import ctypes

    from stemdot import _lib

    path, _ = scan
    with stemdot.open(path, sync_offset=-10, roi="rect:0,0,3,2") as ds:
        n, buf = ctypes.c_size_t(), (ctypes.c_uint64 * 4)()
        assert stemdot._LIB.stemdot_dataset_blanks(ds.handle, buf, 4, ctypes.byref(n)) == 0
        assert (n.value, list(buf)) == (2, [0, 3, 8, 2])  # (0, 0) to (0, 2), (1, 0) and (1, 1)
        assert stemdot._LIB.stemdot_dataset_blanks(ds.handle, buf, 3, ctypes.byref(n)) == _lib.ERR_SHAPE
        assert n.value == 2
        assert stemdot._LIB.stemdot_dataset_blanks(ds.handle, None, 4, ctypes.byref(n)) == _lib.ERR_INVALID_ARGUMENT
