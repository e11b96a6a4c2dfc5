"""Regions of interest (roi=) and the direct beam's centre (find_centre, auto mask specs),
against numpy."""

import numpy as np
import pytest

import stemdot
from test_stemdot import read_mib, reference, assert_close


def _expect_roi(full, roi):
    """The whole result of an ROI: full where roi, NaN elsewhere."""
    want = np.full(full.shape, np.nan, dtype=full.dtype)
    want[roi] = full[roi]
    return want


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_roi_of_numpy_data_equals_the_full_result_at_the_selected_positions(dtype):
    rng = np.random.default_rng(3)
    frames = rng.integers(0, 4000, size=(6, 7, 12, 10), dtype=np.uint16)
    masks = np.concatenate([stemdot.disk((12, 10), 5, 6, 3), stemdot.com((12, 10)), rng.standard_normal((2, 12, 10))])
    full = stemdot.apply_masks(frames, masks, cpus=1, dtype=dtype)
    want, scale = reference(frames, masks)
    assert_close(full, want, scale, dtype)
    roi = rng.random((6, 7)) < 0.4
    rect = np.zeros((6, 7), dtype=bool)
    rect[1:4, 2:6] = True  # rect:2,1,4,3
    for spec, selected in [(roi, roi), (roi.astype(np.uint8), roi), ("rect:2,1,4,3", rect)]:
        got = stemdot.apply_masks(frames, masks, cpus=1, dtype=dtype, roi=spec, partition_size="2KiB")
        assert got.dtype == np.dtype(dtype) and got.shape == full.shape
        np.testing.assert_array_equal(got, _expect_roi(full, selected))
        images, positions = stemdot.apply_masks(frames, masks, cpus=1, dtype=dtype, roi=spec, roi_compact=True)
        np.testing.assert_array_equal(positions, np.flatnonzero(selected))
        np.testing.assert_array_equal(images, full.reshape(-1, masks.shape[0])[positions])
        shifts = stemdot.com_shifts(got, 1)
        assert np.isnan(shifts[~selected]).all()
        np.testing.assert_array_equal(shifts[selected], stemdot.com_shifts(full, 1)[selected])


def test_roi_of_a_file_composes_with_nav_shape_frames_and_sync_offset(data_dir, tmp_path):
    path = data_dir / "mib" / "001_4x2_6bit.mib"
    frames = read_mib(path).reshape(2, 4, 256, 256)
    masks = np.concatenate([stemdot.disk((256, 256), 128, 128, 20), stemdot.ring((256, 256), 128, 128, 40, 100)])
    want, scale = reference(frames, masks)
    roi = np.array([[0, 1, 1, 0], [1, 0, 0, 1]], dtype=bool)
    np.save(tmp_path / "roi.npy", roi)
    for spec in [roi, str(tmp_path / "roi.npy"), tmp_path / "roi.npy"]:
        with stemdot.open(path, nav_shape=(2, 4), roi=spec) as ds:
            assert ds.roi and ds.nav_shape == (4,) and ds.scan_shape == (2, 4) and ds.n_frames == 4
            np.testing.assert_array_equal(ds.positions, [1, 2, 4, 7])
            got = stemdot.apply_masks(ds, masks, dtype=np.float64)
        assert np.isnan(got[~roi]).all()
        assert_close(got[roi], want[roi], scale[roi], np.float64)
    # frames counts the selected positions, placed in the scan (NaN elsewhere) or compact;
    # a sync offset shifts the frames under them.
    with stemdot.open(path, nav_shape=(2, 4), roi=roi, frames=(1, 2)) as ds:
        assert ds.roi and ds.nav_shape == (2,)
        np.testing.assert_array_equal(ds.positions, [2, 4])
        got = stemdot.apply_masks(ds, masks, dtype=np.float64)
        compact, positions = stemdot.apply_masks(ds, masks, dtype=np.float64, roi_compact=True)
    chosen = np.zeros(8, bool)
    chosen[[2, 4]] = True
    chosen = chosen.reshape(2, 4)
    assert np.isnan(got[~chosen]).all()
    assert_close(got[chosen], want[roi][1:3], scale[roi][1:3], np.float64)
    np.testing.assert_array_equal(positions, [2, 4])
    np.testing.assert_array_equal(compact, got[chosen])
    with pytest.warns(UserWarning, match="sync offset 1"), stemdot.open(path, nav_shape=(1, 7), sync_offset=1, roi="rect:2,0,3,1") as ds:
        got = stemdot.apply_masks(ds, masks, dtype=np.float64)
    flat, flat_scale = want.reshape(8, 2), scale.reshape(8, 2)
    assert np.isnan(got[0, [0, 1, 5, 6]]).all()
    assert_close(got[0, 2:5], flat[3:6], flat_scale[3:6], np.float64)


def test_roi_errors(tmp_path):
    frames = np.zeros((3, 4, 8, 8), dtype=np.uint8)
    masks = stemdot.disk((8, 8), 4, 4, 2)
    np.save(tmp_path / "float.npy", np.ones((3, 4), dtype=np.float32))
    for roi, exc, msg in [
        (np.ones((4, 3), dtype=bool), stemdot.ShapeError, "shape (4, 3) is not the scan's nav shape (3, 4)"),
        (np.zeros((3, 4), dtype=bool), stemdot.InvalidArgumentError, "selects no scan position"),
        (np.full((3, 4), 2), stemdot.InvalidArgumentError, "only 0 and 1"),
        (np.ones((3, 4)), stemdot.InvalidArgumentError, "is not boolean"),
        ("rect:3,0,2,1", stemdot.ShapeError, "not within the scan of nav shape (3, 4)"),
        (str(tmp_path / "float.npy"), stemdot.InvalidArgumentError, "dtype '<f4' is not boolean"),
        (str(tmp_path / "missing.npy"), stemdot.StemdotIOError, "option roi"),
        ([[True]], TypeError, "roi: want a numpy boolean array"),
    ]:
        with pytest.raises(exc, match=msg.replace("(", r"\(").replace(")", r"\)")):
            stemdot.apply_masks(frames, masks, roi=roi)
    with pytest.raises(stemdot.InvalidArgumentError, match="roi_compact=True needs a region of interest"):
        stemdot.apply_masks(frames, masks, roi_compact=True)
    with stemdot.from_array(frames) as ds, pytest.raises(stemdot.InvalidArgumentError, match="give a Dataset its roi when it is opened"):
        stemdot.apply_masks(ds, masks, roi="rect:0,0,1,1")


def _disk_frame(shape, cx, cy, r, amp=1000.0, bg=20.0, sigma=5.0, seed=0):
    """A disk of known centre and radius, each pixel weighted by the part of it inside
    (16×16 samples), on a background with Gaussian noise."""
    sub = (np.arange(16) + 0.5) / 16 - 0.5
    y = np.arange(shape[0])[:, None, None, None] + sub[None, None, :, None]
    x = np.arange(shape[1])[None, :, None, None] + sub[None, None, None, :]
    inside = ((x - cx) ** 2 + (y - cy) ** 2 <= r * r).mean(axis=(2, 3))
    return bg + amp * inside + sigma * np.random.default_rng(seed).standard_normal(shape)


def test_find_centre_of_synthetic_disks():
    for shape, cx, cy, r in [((64, 64), 30.3, 33.7, 8.2), ((128, 96), 50.55, 60.45, 20.1), ((96, 96), 5.2, 47.9, 14.6)]:
        c = stemdot.find_centre(_disk_frame(shape, cx, cy, r))
        assert isinstance(c, stemdot.Centre)
        assert abs(c.x - cx) < 0.5 and abs(c.y - cy) < 0.5 and abs(c.r - r) < 0.5, (c, cx, cy, r)


def test_find_centre_of_a_real_sum_frame(data_dir):
    frames = read_mib(data_dir / "mib" / "001_4x2_6bit.mib")
    c = stemdot.find_centre(frames.sum(axis=0, dtype=np.float64))
    # The saturated disk, cut by the left edge: its longest vertical chord (column 25,
    # rows 119.5 to 166.5) is an independent estimate.
    assert abs(c.x - 25) < 1 and abs(c.y - 143) < 1 and abs(c.r - 23.5) < 1.5, c


def test_find_centre_errors():
    with pytest.raises(stemdot.InvalidArgumentError, match="no bright disk"):
        stemdot.find_centre(np.full((32, 32), 5.0))
    with pytest.raises(stemdot.InvalidArgumentError, match="no bright disk stands out"):
        stemdot.find_centre(np.random.default_rng(1).standard_normal((32, 32)))
    with pytest.raises(stemdot.ShapeError, match="want \\(sig_y, sig_x\\)"):
        stemdot.find_centre(np.zeros(10))


def test_auto_mask_specs():
    sig = (64, 48)
    c = stemdot.Centre(20.25, 30.5, 7.5)
    for auto, explicit in [("disk:auto", "disk:20.25,30.5,7.5"), ("disk:auto,4", "disk:20.25,30.5,4"),
                           ("ring:auto,9,15", "ring:20.25,30.5,9,15"), ("com:auto", "com:20.25,30.5"),
                           ("com:auto,10", "com:20.25,30.5,10")]:
        np.testing.assert_array_equal(stemdot.mask(auto, sig, centre=c), stemdot.mask(explicit, sig))
        np.testing.assert_array_equal(stemdot.mask(auto, sig, centre=(20.25, 30.5, 7.5)), stemdot.mask(explicit, sig))
        with pytest.raises(stemdot.InvalidArgumentError, match="auto needs the direct beam's centre"):
            stemdot.mask(auto, sig)
    frame = _disk_frame((64, 64), 31.4, 29.6, 9.0)
    bf = stemdot.mask("disk:auto", (64, 64), centre=stemdot.find_centre(frame))
    assert abs(bf.sum() - np.pi * 81) < 2 * np.pi * 9  # the disk of the radius found


def test_centre_of_the_sum_frame_and_mask_stack_about_it():
    """stemdot.centre is find_centre of the sum frame (what stemdot info --centre prints);
    mask_stack makes auto specs about a centre given, as mask does, and refuses them
    without one."""
    rng = np.random.default_rng(3)
    frames = np.stack([_disk_frame((48, 56), 22.4, 25.1, 6.5) * (1 + 0.1 * i) for i in range(6)]).reshape(2, 3, 48, 56)
    frames += rng.random(frames.shape)
    c = stemdot.centre(frames)
    assert c == stemdot.find_centre(frames.sum(axis=(0, 1)))
    assert abs(c.x - 22.4) < 0.5 and abs(c.y - 25.1) < 0.5 and abs(c.r - 6.5) < 0.5, c
    masks, names = stemdot.mask_stack((48, 56), specs=["disk:auto", "ring:auto,8,12"], centre=c)
    assert names == ["disk", "ring"]
    np.testing.assert_array_equal(masks, np.concatenate([stemdot.mask("disk:auto", (48, 56), centre=c),
                                                         stemdot.mask("ring:auto,8,12", (48, 56), centre=c)]))
    with pytest.raises(stemdot.InvalidArgumentError, match="auto needs the direct beam's centre"):
        stemdot.mask_stack((48, 56), specs=["disk:auto"])
    # With shifts, the centre at zero shift: the frames moved back by their shifts.
    moved = stemdot.centre(frames, shifts=(2.0, -3.0))
    assert abs(moved.x - (c.x + 3)) < 0.05 and abs(moved.y - (c.y - 2)) < 0.05 and abs(moved.r - c.r) < 0.05, (moved, c)
