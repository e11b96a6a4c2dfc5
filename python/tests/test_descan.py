"""Shifted masks (descan compensation) and the descan fit, against numpy."""

import numpy as np
import pytest

import stemdot


def shift_int(m, sy, sx):
    """m moved by whole pixels: out[..., y, x] = m[..., y - sy, x - sx], 0 outside."""
    out = np.zeros_like(m)
    h, w = m.shape[-2:]
    ys, yd = (slice(0, max(0, h - sy)), slice(sy, h)) if sy >= 0 else (slice(-sy, h), slice(0, max(0, h + sy)))
    xs, xd = (slice(0, max(0, w - sx)), slice(sx, w)) if sx >= 0 else (slice(-sx, w), slice(0, max(0, w + sx)))
    if abs(sy) < h and abs(sx) < w:
        out[..., yd, xd] = m[..., ys, xs]
    return out


def shifted_masks(masks, dy, dx):
    """The masks moved by (dy, dx) as the bilinear interpolation of each at (y - dy, x - dx),
    zero outside the mask."""
    m = masks.astype(np.float64)
    ky, kx = int(np.floor(dy)), int(np.floor(dx))
    fy, fx = dy - ky, dx - kx
    return ((1 - fy) * (1 - fx) * shift_int(m, ky, kx) + (1 - fy) * fx * shift_int(m, ky, kx + 1)
            + fy * (1 - fx) * shift_int(m, ky + 1, kx) + fy * fx * shift_int(m, ky + 1, kx + 1))


def reference(frames, masks, shifts):
    nav = frames.shape[:-2]
    f = frames.reshape((-1,) + frames.shape[-2:]).astype(np.float64)
    s = shifts.reshape(-1, 2)
    want = np.empty((len(f), len(masks)))
    scale = np.empty_like(want)
    for i in range(len(f)):
        sm = shifted_masks(masks, *s[i]).reshape(len(masks), -1)
        want[i] = sm @ f[i].ravel()
        scale[i] = np.abs(sm) @ np.abs(f[i].ravel())
    return want.reshape(nav + (len(masks),)), scale.reshape(nav + (len(masks),))


@pytest.mark.parametrize("frame_dtype", [np.uint16, np.float32, np.int8])
@pytest.mark.parametrize("out_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("integer", [False, True])
def test_shifted_masks_equal_numpy(frame_dtype, out_dtype, sparse, integer):
    rng = np.random.default_rng(5)
    frames = (rng.random((3, 4, 20, 18)) * 100).astype(frame_dtype)
    if sparse:  # under a tenth of the weights: the CSR path
        masks = np.where(rng.random((3, 20, 18)) < 0.05, rng.random((3, 20, 18)) * 2 - 1, 0).astype(np.float32)
    else:
        masks = (rng.random((3, 20, 18)) * 2 - 1).astype(np.float32)
    shifts = rng.random((3, 4, 2)) * 12 - 6
    if integer:
        shifts = np.round(shifts)
    shifts[0, 1] = (30, -2)  # every mask pixel outside the frame: 0
    got = stemdot.apply_masks(frames, masks, dtype=out_dtype, shifts=shifts, cpus=1)
    want, scale = reference(frames, masks, shifts)
    tol = 1e-6 if out_dtype == np.float32 else 1e-12
    assert got.shape == (3, 4, 3) and got.dtype == out_dtype
    assert np.all(np.abs(got - want) <= tol * scale + 1e-30)
    assert np.all(got[0, 1] == 0)


def test_constant_shift_and_errors():
    rng = np.random.default_rng(6)
    frames = rng.integers(0, 1000, (2, 3, 16, 16), dtype=np.uint16)
    masks = stemdot.disk((16, 16), 8, 8, 4)
    a = stemdot.apply_masks(frames, masks, shifts=(1.25, -2))
    b = stemdot.apply_masks(frames, masks, shifts=np.broadcast_to([1.25, -2], (2, 3, 2)))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, stemdot.apply_masks(frames, masks))
    with pytest.raises(stemdot.ShapeError, match=r"shifts of shape \(2, 2, 2\): want .* nav_shape \(2, 3\) \+ \(2,\) = \(2, 3, 2\)"):
        stemdot.apply_masks(frames, masks, shifts=np.zeros((2, 2, 2)))
    with pytest.raises(stemdot.ShapeError, match=r"shifts of shape \(3,\)"):
        stemdot.apply_masks(frames, masks, shifts=(1, 2, 3))
    with pytest.raises(stemdot.InvalidArgumentError, match="shifts must be finite"):
        stemdot.apply_masks(frames, masks, shifts=(np.nan, 0))
    with pytest.raises(stemdot.DTypeError, match="shifts of dtype complex128"):
        stemdot.apply_masks(frames, masks, shifts=np.zeros((2, 3, 2), complex))


def test_shifts_shape_is_checked_exactly():
    """#33.1: a map of as many values in another shape, e.g. transposed (nav_x, nav_y, 2), is
    refused (it was read in flat order, each shift at another scan position), as stemdot
    apply --shifts refuses it; by apply_masks and centre, for an array, a Dataset and an
    ROI's (whose frames read take their own shifts too)."""
    rng = np.random.default_rng(7)
    frames = rng.integers(0, 1000, (4, 5, 16, 16), dtype=np.uint16)
    masks = stemdot.disk((16, 16), 8, 8, 4)
    shifts = rng.random((4, 5, 2)) * 4 - 2
    want, scale = reference(frames, masks, shifts)
    got = stemdot.apply_masks(frames, masks, dtype=np.float64, shifts=shifts)
    assert np.all(np.abs(got - want) <= 1e-12 * scale)
    for bad in (shifts.transpose(1, 0, 2), shifts.reshape(20, 2), shifts.reshape(2, 10, 2), shifts[np.newaxis],
                shifts.reshape(-1)):
        with pytest.raises(stemdot.ShapeError, match=rf"^shifts of shape \({bad.shape[0]},.*\): want \(dy, dx\) for every "
                           r"frame, shape \(2,\), or one shift per scan position, nav_shape \(4, 5\) \+ \(2,\) = \(4, 5, 2\); y then x$"):
            stemdot.apply_masks(frames, masks, shifts=bad)
        with stemdot.from_array(frames) as ds, pytest.raises(stemdot.ShapeError, match=r"nav_shape \(4, 5\) \+ \(2,\)"):
            stemdot.centre(ds, shifts=bad)
    roi = np.zeros((4, 5), bool)
    roi[1:3, 2:4] = True
    got = stemdot.apply_masks(frames, masks, dtype=np.float64, roi=roi, shifts=shifts)
    assert np.all(np.abs(got[roi] - want[roi]) <= 1e-12 * scale[roi]) and np.isnan(got[~roi]).all()
    np.testing.assert_array_equal(stemdot.apply_masks(frames, masks, dtype=np.float64, roi=roi, shifts=shifts[roi]), got)
    with pytest.raises(stemdot.ShapeError, match=r"nav_shape \(4, 5\) \+ \(2,\) = \(4, 5, 2\), or one per frame read, \(4, 2\)"):
        stemdot.apply_masks(frames, masks, roi=roi, shifts=shifts.transpose(1, 0, 2))


def descan_scan(nav, sig, plane_y, plane_x):
    """Frames of a Gaussian spot whose centre moves by the planes (a, b, c): dy = a + b·y +
    c·x across the scan, about (sig_y//2, sig_x//2): its centre of mass is there exactly
    (to the spot's tails)."""
    yy, xx = np.mgrid[: sig[0], : sig[1]]
    frames = np.empty(nav + sig, np.float32)
    for y in range(nav[0]):
        for x in range(nav[1]):
            cy = sig[0] // 2 + plane_y[0] + plane_y[1] * y + plane_y[2] * x
            cx = sig[1] // 2 + plane_x[0] + plane_x[1] * y + plane_x[2] * x
            frames[y, x] = 1000 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * 2.0**2))
    return frames


def test_descan_fit_recovers_the_plane_and_flattens_the_com():
    plane_y, plane_x = (1.5, 0.2, -0.1), (-0.75, 0.05, 0.3)
    frames = descan_scan((8, 9), (40, 40), plane_y, plane_x)
    frames[2, 3] = 0  # no counts: left out of the fit
    fit = stemdot.descan_fit(frames, cpus=1)
    assert fit.used == 71
    np.testing.assert_allclose(fit.dy, plane_y, atol=1e-4)
    np.testing.assert_allclose(fit.dx, plane_x, atol=1e-4)
    assert max(fit.rms) < 1e-4
    yy, xx = np.mgrid[:8, :9]
    np.testing.assert_allclose(fit.shifts[..., 0], fit.dy[0] + fit.dy[1] * yy + fit.dy[2] * xx, atol=1e-12)
    np.testing.assert_allclose(fit.shifts[..., 1], fit.dx[0] + fit.dx[1] * yy + fit.dx[2] * xx, atol=1e-12)
    com = stemdot.com((40, 40))
    plain = stemdot.com_shifts(stemdot.apply_masks(frames, com), 0)
    corrected = stemdot.com_shifts(stemdot.apply_masks(frames, com, shifts=fit.shifts), 0)
    ok = np.isfinite(plain[..., 0])
    assert np.ptp(plain[ok]) > 2
    assert np.ptp(corrected[ok]) < 1e-3


def test_descan_fit_errors():
    with pytest.raises(stemdot.InvalidArgumentError, match="plane needs at least 3"):
        stemdot.descan_fit(np.zeros((2, 2, 8, 8), np.uint16))
    with pytest.raises(stemdot.InvalidArgumentError, match="com"):
        stemdot.descan_fit(np.ones((2, 2, 8, 8), np.uint16), com="disk:4,4,2")
