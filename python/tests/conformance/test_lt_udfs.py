"""SumUDF, SumSigUDF, StdDevUDF and PickUDF against stemdot.reduce, a mask of ones and
stemdot.pick; after LiberTEM's tests/udf/test_sum.py, test_sumsig.py, test_stddev.py and
test_pick.py."""
import numpy as np
import pytest

from ltcommon import (PickUDF, StdDevUDF, SumSigUDF, SumUDF, assert_agree, difference, lt_run, mk_random, quiet,
                      random_frames, stemdot)


def reduce_of(data, roi=None, reductions=("sum",)):
    with stemdot.from_array(data, roi=roi) as ds:
        return stemdot.reduce(ds, reductions)


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "int32", "float32", "float64", ">u2"])
@pytest.mark.parametrize("with_roi", [False, True])
def test_sum(ctx, dtype, with_roi):
    data = mk_random((6, 5, 24, 20), "float64", seed=1).astype(dtype)
    roi = np.random.default_rng(1).random((6, 5)) < 0.5 if with_roi else None
    want = lt_run(ctx, data, SumUDF(), roi=roi)["intensity"].data
    assert_agree(reduce_of(data, roi)["sum"], want, rtol=1e-6)


def test_sum_nan_inf(ctx):
    """A NaN pixel makes that pixel of the sum NaN, +Inf and −Inf in one pixel too, as in
    numpy and LiberTEM."""
    data = mk_random((4, 4, 8, 8), "float32", seed=2)
    data[1, 2, 3, 3] = np.nan
    data[0, 0, 5, 5] = np.inf
    data[2, 2, 6, 6] = np.inf
    data[3, 3, 6, 6] = -np.inf
    data[1, 1, 7, 0] = -np.inf
    want = lt_run(ctx, data, SumUDF())["intensity"].data
    got = reduce_of(data)["sum"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got) * np.sign(got), np.isinf(want) * np.sign(want))
    finite = np.isfinite(want)
    assert_agree(got[finite], want[finite], rtol=1e-6)


@pytest.mark.parametrize("with_roi", [False, True])
def test_sumsig(ctx, with_roi):
    """SumSigUDF is the image of a mask of ones."""
    data = mk_random((8, 6, 32, 24), "float32", seed=3)
    roi = np.random.default_rng(3).random((8, 6)) < 0.5 if with_roi else None
    want = lt_run(ctx, data, SumSigUDF(), roi=roi)["intensity"].data
    got = stemdot.apply_masks(data, np.ones((32, 24), np.float32), roi=roi)[..., 0]
    assert_agree(got, want, rtol=1e-6)


@pytest.mark.parametrize("with_roi", [False, True])
@pytest.mark.parametrize("shape", [(30, 3, 16), (5, 6, 12, 12), (2, 3, 4, 8, 8)])
def test_stddev(ctx, shape, with_roi):
    """StdDevUDF's sum, mean, var (ddof 0) and std against stemdot.reduce, 1-D, 2-D and
    3-D scans, with and without an ROI."""
    data = random_frames(shape, "float32", seed=4)
    nav = data.shape[:-2]
    roi = np.random.default_rng(4).random(nav) < 0.5 if with_roi else None
    want = lt_run(ctx, data, StdDevUDF(), roi=roi)
    got = reduce_of(data, roi, ("sum", "mean", "std"))
    assert want["num_frames"].data[0] == (np.count_nonzero(roi) if with_roi else int(np.prod(nav)))
    assert_agree(got["sum"], want["sum"].data, rtol=1e-6, what="sum")
    assert_agree(got["mean"], want["mean"].data, rtol=1e-6, what="mean")
    assert_agree(got["std"] ** 2, want["var"].data, rtol=1e-9, what="var")
    assert_agree(got["std"], want["std"].data, rtol=1e-9, what="std")
    ref = data[roi] if with_roi else data.reshape((-1,) + data.shape[-2:])
    assert_agree(got["std"], ref.astype(np.float64).std(axis=0), rtol=1e-12, what="std vs numpy")


@pytest.mark.parametrize("sync_offset", [10, -10])
def test_stddev_sync_offset(ctx, tmp_path, sync_offset):
    """Positions without a frame (before the first or after the last frame of the file)
    count in no sum, mean or std: LiberTEM's num_frames is the frames read."""
    data = random_frames((8, 8, 8, 8), "float32", seed=5)
    path = tmp_path / "scan.npy"
    np.save(path, data)
    want = lt_run(ctx, ctx.load("npy", path=str(path), sync_offset=sync_offset), StdDevUDF())
    assert want["num_frames"].data[0] == 54
    frames = data.reshape(64, 8, 8)[max(sync_offset, 0):64 + min(sync_offset, 0)].astype(np.float64)
    got = quiet(stemdot.reduce, path, ("sum", "mean", "std"), sync_offset=sync_offset)
    assert_agree(got["sum"], frames.sum(axis=0), rtol=1e-12, what="sum vs numpy")
    assert_agree(got["mean"], want["mean"].data, rtol=1e-9, what="mean")
    assert_agree(got["std"], want["std"].data, rtol=1e-9, what="std")
    assert_agree(got["std"], frames.std(axis=0), rtol=1e-12, what="std vs numpy")


@pytest.mark.parametrize("dtype", ["uint16", "float32", "int8"])
@pytest.mark.parametrize("nav_shape", [(16, 16), (40,), (2, 3, 4)])
def test_pick(ctx, dtype, nav_shape):
    """PickUDF of an ROI: the selected frames in C order, in the frames' dtype."""
    data = mk_random(nav_shape + (12, 10), "float32", seed=6).astype(dtype)
    roi = np.random.default_rng(6).random(nav_shape) < 0.2
    roi.reshape(-1)[0] = True
    want = lt_run(ctx, data, PickUDF(), roi=roi)["intensity"].data
    got = stemdot.pick(data, np.argwhere(roi))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@difference("Pick of no position")
def test_pick_nothing(ctx):
    data = mk_random((4, 4, 8, 8), "float32")
    want = lt_run(ctx, data, PickUDF(), roi=np.zeros((4, 4), bool))["intensity"].data
    assert want.shape == (0, 8, 8)
    with pytest.raises(stemdot.InvalidArgumentError, match="no scan position to pick"):
        stemdot.pick(data, [])
    with pytest.raises(stemdot.InvalidArgumentError, match="selects no scan position"):
        stemdot.from_array(data, roi=np.zeros((4, 4), bool))
