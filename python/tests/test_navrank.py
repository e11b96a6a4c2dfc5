"""Nav shapes of 1 to 3 axes (#33): a 5-D NPY or HDF5 file (nav_z, nav_y, nav_x, sig_y,
sig_x) keeps its nav shape, as LiberTEM 0.16 does, through open, apply_masks, roi, shifts,
pick and reduce, against numpy; what is of 2-D scans only is refused naming nav_shape."""
import numpy as np
import pytest

import stemdot

NAV, SIG = (2, 3, 4), (6, 7)


@pytest.fixture(scope="module")
def frames():
    rng = np.random.default_rng(33)
    return rng.integers(0, 1000, size=NAV + SIG, dtype=np.uint16)


@pytest.fixture(scope="module")
def masks():
    rng = np.random.default_rng(34)
    return rng.standard_normal((3,) + SIG).astype(np.float32)


def _reference(frames, masks):
    return np.einsum("...yx,myx->...m", frames.astype(np.float64), masks.astype(np.float64))


def _files(tmp_path, frames):
    """The frames as a 5-D NPY file and, when h5py is there, a 5-D HDF5 dataset chunked
    across the nav axes and compressed."""
    npy = tmp_path / "planes.npy"
    np.save(npy, frames)
    files = [(npy, {})]
    h5py = pytest.importorskip("h5py")
    h5 = tmp_path / "planes.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("/entry/frames", data=frames, chunks=(1, 2, 3) + SIG, compression="gzip")
    files.append((h5, {}))
    return files


def test_five_d_files_keep_their_nav_shape(tmp_path, frames, masks):
    want = _reference(frames, masks)
    for path, opts in _files(tmp_path, frames):
        with stemdot.open(path, **opts) as ds:
            assert ds.nav_shape == NAV, path
            assert ds.scan_shape == NAV
            assert ds.warnings == []
            got = stemdot.apply_masks(ds, masks, dtype=np.float64)
        assert got.shape == NAV + (3,)
        assert got.info["nav_shape"] == list(NAV)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
        # nav_shape=(y, x) reads the planes as one scan of 6 rows.
        with stemdot.open(path, nav_shape=(6, 4)) as ds:
            assert ds.nav_shape == (6, 4)
            np.testing.assert_array_equal(np.asarray(stemdot.apply_masks(ds, masks, dtype=np.float64)),
                                          np.asarray(got).reshape(6, 4, 3))


def test_nav_shape_of_three_axes(tmp_path, frames, masks):
    series = tmp_path / "series.npy"
    np.save(series, frames.reshape((24,) + SIG))
    with stemdot.open(series, nav_shape=(2, 3, 4)) as ds:
        assert ds.nav_shape == NAV
        got = stemdot.apply_masks(ds, masks, dtype=np.float64)
    np.testing.assert_allclose(np.asarray(got), _reference(frames, masks), rtol=1e-6, atol=1e-3)
    with pytest.raises(stemdot.InvalidArgumentError, match=r"option nav_shape \"1,2,3,4\": want Y,X, N or Z,Y,X, got 4 sizes"):
        stemdot.open(series, nav_shape=(1, 2, 3, 4))
    # from_array keeps the array's nav axes too.
    got = stemdot.apply_masks(frames, masks, dtype=np.float64)
    assert got.shape == NAV + (3,)


def test_more_than_three_nav_axes(tmp_path, frames, masks):
    six = tmp_path / "six.npy"
    np.save(six, frames.reshape((2, 1, 3, 4) + SIG))
    with pytest.raises(stemdot.ShapeError, match=r"nav shape \(2, 1, 3, 4\) from the NPY shape has 4 axes: .* give option "
                                                  r"nav_shape of its 24 positions in at most 3 axes \(e\.g\. 2,3,4\)"):
        stemdot.open(six)
    with stemdot.open(six, nav_shape=NAV) as ds:
        got = stemdot.apply_masks(ds, masks, dtype=np.float64)
    np.testing.assert_allclose(np.asarray(got), _reference(frames, masks), rtol=1e-6, atol=1e-3)


def test_roi_shifts_pick_and_reduce(tmp_path, frames, masks):
    path = tmp_path / "planes.npy"
    np.save(path, frames)
    want = _reference(frames, masks)
    roi = np.zeros(NAV, bool)
    roi[0, 1, 2] = roi[1, 2, 3] = True
    for r, sel in ((roi, roi), ("rect:1,2,2,1", np.s_[:, 2, 1:3])):
        with stemdot.open(path, roi=r) as ds:
            assert ds.scan_shape == NAV
            got = np.asarray(stemdot.apply_masks(ds, masks, dtype=np.float64))
        inside = np.zeros(NAV, bool)
        inside[sel] = True
        np.testing.assert_allclose(got[inside], want[inside], rtol=1e-6, atol=1e-3)
        assert np.isnan(got[~inside]).all()
    # Shifts of nav_shape + (2,): a point mask moved down one row reads the row below.
    point = stemdot.point(SIG, 2, 3)
    shifts = np.zeros(NAV + (2,))
    shifts[..., 0] = 1
    with stemdot.open(path) as ds:
        got = stemdot.apply_masks(ds, point, shifts=shifts, dtype=np.float64)
    np.testing.assert_array_equal(np.asarray(got)[..., 0], frames[..., 4, 2])
    # pick (z, y, x), and reduce over every frame.
    with stemdot.open(path) as ds:
        np.testing.assert_array_equal(stemdot.pick(ds, [(1, 2, 3), (0, 1, 0)]), frames[[1, 0], [2, 1], [3, 0]])
        with pytest.raises(stemdot.ShapeError, match=r"nav shape's 3 coordinates \(z, y, x\)"):
            stemdot.pick(ds, [(1, 2, 3), (1, 2)])
        with pytest.raises(stemdot.ShapeError, match=r"has 4 coordinates, but the nav shape \(2, 3, 4\) has 3 axes: give Z,Y,X"):
            stemdot.pick(ds, [(1, 2, 3, 0)])
        sums = stemdot.reduce(ds, ("sum",))
    np.testing.assert_array_equal(sums["sum"], frames.astype(np.float64).sum(axis=(0, 1, 2)))


def test_two_d_products_refuse_a_scan_of_planes(tmp_path, frames):
    path = tmp_path / "planes.npy"
    np.save(path, frames)
    with stemdot.open(path) as ds:
        images = stemdot.apply_masks(ds, stemdot.com(SIG), dtype=np.float64)
        with pytest.raises(stemdot.ShapeError, match=r"give option nav_shape 6,4 to read the scan as a 2-D one"):
            stemdot.descan_fit(ds)
    shifts = stemdot.com_shifts(images, 0)
    assert shifts.shape == NAV + (2,)
    with pytest.raises(stemdot.ShapeError, match=r"the shift maps of a scan of planes .* shifts\[z\]"):
        stemdot.com_products(shifts)
    assert stemdot.com_products(shifts[1])["magnitude"].shape == NAV[1:]
