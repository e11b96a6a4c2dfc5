"""CoMUDF against stemdot's com masks, com_shifts, com_products and descan_fit: the shift
field, magnitude, divergence and curl after scan rotation and flip_y, with an ROI, and
the regression (descan plane); after LiberTEM's tests/udf/test_com.py and
tests/analysis/test_analysis_com.py."""
import math
import warnings

import numpy as np
import pytest

from ltcommon import CoMUDF, assert_agree, difference, lt_run, mk_random, scipy, stemdot

INF = float("inf")


def stemdot_com(data, cy=None, cx=None, r=INF, rotation=0.0, flip_y=False, roi=None):
    """stemdot's CoM of frames: (com_shifts, com_products), the com masks about (cx, cy)
    (LiberTEM's default sig_shape // 2 where None) within radius r."""
    sig = data.shape[-2:]
    cy = sig[0] // 2 if cy is None else cy
    cx = sig[1] // 2 if cx is None else cx
    masks = stemdot.com(sig, cx, cy, None if math.isinf(r) else r)
    shifts = stemdot.com_shifts(stemdot.apply_masks(data, masks, dtype=np.float64, roi=roi), 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # positions without a shift (outside an ROI) for the iCoM
        return shifts, stemdot.com_products(shifts, rotation=rotation, flip_y=flip_y)


def lt_com(ctx, data, roi=None, **params):
    return lt_run(ctx, data, CoMUDF.with_params(**params), roi=roi)


def numpy_shifts(data, cy, cx, r):
    """The float64 reference: Σ (y − cy, x − cx)·frame / Σ frame within the disk."""
    y, x = np.mgrid[:data.shape[-2], :data.shape[-1]].astype(np.float64)
    disk = (y - cy) ** 2 + (x - cx) ** 2 <= r * r
    f = data.astype(np.float64) * disk
    total = f.sum(axis=(-2, -1))
    return np.stack([(f * (y - cy)).sum(axis=(-2, -1)) / total, (f * (x - cx)).sum(axis=(-2, -1)) / total], axis=-1)


def assert_com_agree(lt, shifts, products, where=...):
    """Shifts and field within 2e-4 pixels (LiberTEM sums the moments of the absolute
    pixel coordinates in float32), magnitude, divergence and curl within 1e-4 of their
    maximum."""
    assert_agree(shifts[where], lt["raw_shifts"].data[where], rtol=0, atol=2e-4, what="raw shifts")
    assert_agree(products["field"][where], lt["field"].data[where], rtol=0, atol=2e-4, what="field")
    for key in ("magnitude", "divergence", "curl"):
        assert_agree(products[key][where], lt[key].data[where], rtol=1e-4, what=key)


COM_PARAMS = [  # LiberTEM's test_com_params without an inner radius (see test_annular_com)
    dict(cy=2.1, cx=None, r=19, scan_rotation=0.0, flip_y=True),
    dict(cy=2.1, cx=3.7, r=INF, scan_rotation=233, flip_y=True),
    dict(cy=17, cx=None, r=INF, scan_rotation=0.0, flip_y=False),
    dict(cy=2.1, cx=None, r=10.2, scan_rotation=0.0, flip_y=True),
    dict(cy=17, cx=23, r=10.2, scan_rotation=0.0, flip_y=True),
    dict(cy=None, cx=None, r=INF, scan_rotation=0.0, flip_y=False),
    dict(cy=None, cx=23, r=INF, scan_rotation=13.3, flip_y=True),
    dict(cy=2.1, cx=3.7, r=INF, scan_rotation=13.3, flip_y=True),
    dict(cy=15.5, cx=11.25, r=7, scan_rotation=-90, flip_y=False),
]


@pytest.mark.parametrize("params", COM_PARAMS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()))
def test_com_params(ctx, params):
    data = mk_random((9, 8, 32, 24), "float32", seed=1) + 0.1  # no frame without counts in a disk
    want = lt_com(ctx, data, **params)
    shifts, products = stemdot_com(data, params["cy"], params["cx"], params["r"], params["scan_rotation"],
                                   params["flip_y"])
    assert_com_agree(want, shifts, products)
    cy, cx = (c if c is not None else n // 2 for c, n in zip((params["cy"], params["cx"]), data.shape[-2:]))
    # stemdot.com's masks are float32: (y − 2.1) is rounded to float32
    assert_agree(shifts, numpy_shifts(data, cy, cx, params["r"]), rtol=0, atol=1e-6, what="stemdot vs numpy")


def test_com_vs_scipy(ctx):
    """About (0, 0) over the whole frame, the centre of mass is scipy.ndimage's."""
    data = mk_random((4, 5, 16, 16), "float32", seed=2) + 0.5
    ref = np.array([[scipy.ndimage.center_of_mass(f.astype(np.float64)) for f in row] for row in data])
    shifts, _ = stemdot_com(data, 0, 0)
    assert_agree(shifts, ref, rtol=1e-12, what="stemdot vs scipy")
    assert_agree(lt_com(ctx, data, cy=0, cx=0)["raw_shifts"].data, ref, rtol=1e-6, what="LiberTEM vs scipy")


def test_com_roi(ctx):
    """With an ROI: the shifts and products at the selected positions (LiberTEM's NaN
    outside, and NaN in divergence and curl where a neighbour is not selected)."""
    data = mk_random((10, 9, 16, 16), "float32", seed=3) + 0.1
    roi = np.random.default_rng(3).random((10, 9)) < 0.7
    want = lt_com(ctx, data, roi=roi, scan_rotation=33, flip_y=True)
    shifts, products = stemdot_com(data, rotation=33, flip_y=True, roi=roi)
    assert_com_agree(want, shifts, products, where=roi)


def test_com_products_outside_roi(ctx):
    """Divergence and curl are NaN at the positions outside the ROI (without a shift),
    also where both neighbours have one."""
    data = mk_random((10, 9, 16, 16), "float32", seed=3) + 0.1
    roi = np.random.default_rng(3).random((10, 9)) < 0.7
    want = lt_com(ctx, data, roi=roi)
    _, products = stemdot_com(data, roi=roi)
    for key in ("divergence", "curl"):
        np.testing.assert_array_equal(np.isnan(products[key]), np.isnan(want[key].data), err_msg=key)


@pytest.mark.parametrize("field,flip_y,rotation,div,curl", [
    ("radial", False, 0, 2, 0), ("-radial", False, 0, -2, 0), ("swirl", False, 0, 0, 2), ("-swirl", False, 0, 0, -2),
    ("shear", True, 0, 0, -2), ("radial", False, -90, 0, -2), ("swirl", False, -90, 2, 0), ("radial", False, 90, 0, 2)])
def test_handcrafted_fields(ctx, field, flip_y, rotation, div, curl):
    """LiberTEM's test_analysis_com handcrafted fields: a spot that moves with the scan
    position, so that the field's divergence or curl is ±2 at the centre position."""
    data = np.zeros((3, 3, 16, 16), np.float32)
    for y in range(3):
        for x in range(3):
            sy, sx = {"radial": (y - 1, x - 1), "-radial": (1 - y, 1 - x), "swirl": (x - 1, 1 - y),
                      "-swirl": (1 - x, y - 1), "shear": (x - 1, y - 1)}[field]
            data[y, x, 8 + sy, 8 + sx] = 1
    want = lt_com(ctx, data, scan_rotation=rotation, flip_y=flip_y)
    shifts, products = stemdot_com(data, rotation=rotation, flip_y=flip_y)
    assert_com_agree(want, shifts, products)
    assert products["divergence"][1, 1] == pytest.approx(div, abs=1e-12)
    assert products["curl"][1, 1] == pytest.approx(curl, abs=1e-12)


# ---------------------------------------------------------------- regression (descan fit)


def regression_of(fit):
    """stemdot's DescanFit as LiberTEM's regression: [[y, x], [dy/dy, dx/dy], [dy/dx, dx/dx]]."""
    return np.array([fit.dy, fit.dx]).T


def test_regression_offset(ctx):
    """LiberTEM's test_com_regression offset: every frame's spot at (1, 4), CoM about (3, 3)."""
    data = np.zeros((5, 6, 7, 7), np.float32)
    data[..., 1, 4] = 1
    want = lt_com(ctx, data, cy=3, cx=3, regression=1)
    fit = stemdot.descan_fit(data, com="com:3,3")
    np.testing.assert_allclose(regression_of(fit), want["regression"].data, atol=1e-12)
    np.testing.assert_allclose(want["regression"].data, [[-2, 1], [0, 0], [0, 0]], atol=1e-12)


@pytest.mark.parametrize("with_roi", [False, True])
def test_regression_linear(ctx, with_roi):
    """LiberTEM's test_com_regression linear: a spot at (2y + 1, 45 − x) on 48×46 frames;
    the plane and the field left after subtracting it."""
    data = np.zeros((5, 8, 48, 46), np.float32)
    for y in range(5):
        for x in range(8):
            data[y, x, 2 * y + 1, 45 - x] = 1 + y + x
    roi = np.random.default_rng(4).random((5, 8)) < 0.6 if with_roi else None
    want = lt_com(ctx, data, roi=roi, regression=1)
    with stemdot.from_array(data, roi=roi) as ds:
        fit = stemdot.descan_fit(ds)
    np.testing.assert_allclose(regression_of(fit), want["regression"].data, atol=1e-9)
    np.testing.assert_allclose(want["regression"].data, [[-23, 22], [2, 0], [0, -1]], atol=1e-9)
    shifts, _ = stemdot_com(data, roi=roi)
    where = roi if with_roi else ...
    assert_agree((shifts - fit.shifts)[where], want["field"].data[where], rtol=0, atol=1e-9, what="field − plane")


def test_regression_mean(ctx):
    """Regression 0 subtracts the mean shift: the mean of stemdot's shifts."""
    data = mk_random((6, 7, 16, 16), "float32", seed=5) + 0.1
    want = lt_com(ctx, data, regression=0)
    shifts, _ = stemdot_com(data)
    np.testing.assert_allclose(want["regression"].data[0], shifts.reshape(-1, 2).mean(axis=0), rtol=1e-5)
    assert_agree(shifts - shifts.reshape(-1, 2).mean(axis=0), want["field"].data, rtol=1e-5)


# ---------------------------------------------------------------- deliberate differences


@difference("CoM of an empty frame")
def test_com_empty_frame(ctx):
    """A frame without counts: LiberTEM's shift 0 (and its regression fits it as an
    undeflected frame), stemdot's NaN (and its descan fit leaves the frame out); the other
    frames agree."""
    data = np.zeros((4, 5, 16, 16), np.float32)
    for y in range(4):
        for x in range(5):
            data[y, x, 8 + y, 8 - x] = 1
    data[2, 3] = 0
    want = lt_com(ctx, data, regression=1)
    shifts, _ = stemdot_com(data)
    assert (want["raw_shifts"].data[2, 3] == 0).all()
    assert np.isnan(shifts[2, 3]).all()
    others = np.ones((4, 5), bool)
    others[2, 3] = False
    assert_agree(shifts[others], want["raw_shifts"].data[others], rtol=1e-12)
    fit = stemdot.descan_fit(data)
    assert fit.used == 19
    np.testing.assert_allclose(regression_of(fit), [[0, 0], [1, 0], [0, -1]], atol=1e-9)  # the spots' plane
    assert np.abs(want["regression"].data - regression_of(fit)).max() > 0.01


@difference("Annular CoM")
def test_annular_com(ctx):
    """LiberTEM's CoM within a ring (ri > 0); stemdot has no spec for it, and gives the
    same shifts from masks built by hand: ring × (1, y − cy, x − cx)."""
    data = mk_random((6, 5, 32, 24), "float32", seed=6) + 0.1
    cy, cx, r, ri = 17.0, 3.7, 19.0, 3.1
    want = lt_com(ctx, data, cy=cy, cx=cx, r=r, ri=ri, scan_rotation=233, flip_y=True)
    with pytest.raises(stemdot.InvalidArgumentError, match="want com or com:CX,CY"):
        stemdot.mask(f"com:{cx},{cy},{r},{ri}", (32, 24))
    ring = stemdot.ring((32, 24), cx, cy, ri, r)[0]
    y, x = np.mgrid[:32, :24]
    masks = np.stack([ring, ring * (y - cy), ring * (x - cx)])
    shifts = stemdot.com_shifts(stemdot.apply_masks(data, masks, dtype=np.float64), 0)
    products = stemdot.com_products(shifts, rotation=233, flip_y=True)
    assert_com_agree(want, shifts, products)
