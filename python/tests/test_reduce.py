"""stemdot.reduce and stemdot.pick against numpy."""

import signal
import threading

import numpy as np
import pytest

import stemdot

from test_stemdot import MIB_FILES, read_mib

DTYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "float64"]


def numpy_reductions(frames):
    """The reference: numpy over the frames, in float64 (frames: (n, sig_y, sig_x))."""
    f = frames.astype(np.float64)
    return {"sum": f.sum(axis=0), "mean": f.mean(axis=0), "max": f.max(axis=0), "std": f.std(axis=0)}


def assert_reductions(got, want, n, exact_sum):
    """got equals want (numpy's): max exactly, integer sums exactly, the rest within
    1e-12 of |mean| + std (n times that for sums); NaN and ±Inf where numpy has them."""
    assert list(got) == [r for r in stemdot.REDUCTIONS if r in want]
    with np.errstate(invalid="ignore"):
        scale = np.abs(want["sum"] / n) + 1
    for name, w in want.items():
        g = got[name]
        assert g.dtype == np.float64 and g.shape == w.shape, name
        if name == "max" or (name == "sum" and exact_sum):
            np.testing.assert_array_equal(g, w, err_msg=name)
            continue
        tol = 1e-12 * (scale + (want["std"] if "std" in want else 0)) * (n if name == "sum" else 1)
        finite = np.isfinite(w)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=name)
        np.testing.assert_array_equal(g[np.isinf(w)], w[np.isinf(w)], err_msg=name)
        assert (np.abs(g - w)[finite] <= tol[finite]).all(), (name, np.abs(g - w)[finite].max())


@pytest.mark.parametrize("dtype", DTYPES)
def test_random_every_dtype(dtype):
    rng = np.random.default_rng(18)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        frames = (rng.standard_normal((6, 7, 5, 33)) * 100).astype(dt)
        frames[0, 0, 0, 0] = np.nan
        frames[5, 6, 1, 1] = np.nan
        frames[0, 0, 2, 2] = np.inf
        frames[3, 2, 2, 3] = np.inf
        frames[4, 1, 2, 3] = -np.inf
    else:
        info = np.iinfo(dt)
        frames = rng.integers(info.min, info.max, size=(6, 7, 5, 33), endpoint=True, dtype=dt)
    with np.errstate(invalid="ignore"):
        want = numpy_reductions(frames.reshape(-1, 5, 33))
    got = stemdot.reduce(frames, stemdot.REDUCTIONS, cpus=1, oversubscribe=True, partition_size="8KiB")
    assert_reductions(got, want, 42, exact_sum=dt.kind != "f")


def test_only_what_is_asked_and_the_order():
    frames = np.arange(2 * 3 * 4 * 4, dtype=np.uint16).reshape(2, 3, 4, 4)
    got = stemdot.reduce(frames, ["std", "max"])
    assert list(got) == ["max", "std"]
    np.testing.assert_array_equal(got["max"], frames.reshape(6, 4, 4).max(axis=0))
    np.testing.assert_allclose(got["std"], frames.reshape(6, 4, 4).std(axis=0), rtol=1e-14)
    assert list(stemdot.reduce(frames)) == ["sum"]
    assert list(stemdot.reduce(frames, "mean")) == ["mean"]


def test_std_is_stable_far_from_zero():
    """1e9 + N(0, 3): Σx² − (Σx)²/n in float64 would lose every digit."""
    rng = np.random.default_rng(3)
    frames = 1e9 + np.round(rng.standard_normal((400, 4, 4)) * 3)
    got = stemdot.reduce(frames, "std", cpus=2, oversubscribe=True, partition_size="4KiB")["std"]
    np.testing.assert_allclose(got, frames.std(axis=0), rtol=1e-8)


def scaled_std(frames):
    """numpy's std of float64 frames (n, ...) scaled per pixel by a power of two 2^-e ≥
    their magnitude, times 2^e: the std that numpy's own overflows to inf or NaN for
    values above about 1e154."""
    e = np.frexp(np.abs(frames).max(axis=0))[1]
    return np.ldexp(np.ldexp(frames, -e).std(axis=0), e)


def test_std_of_huge_finite_values():
    """Finite float64 frames of 1e150 to 1e300 (both signs up to ±1.7e308): a finite std
    equal to numpy's on scaled values, through several workers' merge."""
    rng = np.random.default_rng(5)
    scale = np.array([1e150, 1e200, 1e250, 1e300, 1.0])[:, None]
    frames = rng.standard_normal((60, 5, 6)) * scale
    frames[:, 0, 5] = np.finfo(np.float64).max * rng.uniform(-1, 1, 60)
    got = stemdot.reduce(frames, "std", cpus=2, oversubscribe=True, partition_size="4KiB")["std"]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, scaled_std(frames), rtol=1e-12)


@pytest.mark.parametrize("name", MIB_FILES)
def test_real_mib_against_numpy(data_dir, name):
    path = data_dir / "mib" / name
    frames = read_mib(path)
    want = numpy_reductions(frames)
    n = frames.shape[0]
    assert_reductions(stemdot.reduce(path, stemdot.REDUCTIONS), want, n, exact_sum=True)
    with stemdot.open(path) as ds:  # a Dataset too, and it stays open
        assert_reductions(stemdot.reduce(ds, ("sum", "max")), {k: want[k] for k in ("sum", "max")}, n, exact_sum=True)
        assert not ds.closed


def test_path_with_format_options(tmp_path):
    frames = np.arange(4 * 3 * 3, dtype=np.float32).reshape(4, 3, 3)
    raw = tmp_path / "scan.raw"
    frames.tofile(raw)
    got = stemdot.reduce(raw, "sum", format="raw", sig_shape=(3, 3), dtype="float32", nav_shape=(2, 2))
    np.testing.assert_array_equal(got["sum"], frames.sum(axis=0))
    with pytest.raises(TypeError, match="format options .* apply to a path only"):
        stemdot.reduce(frames, nav_shape=(2, 2))


def test_errors():
    frames = np.ones((2, 2, 4, 4), np.uint8)
    with pytest.raises(stemdot.InvalidArgumentError, match="reductions=.*'median'.*want one or more of sum, mean, max, std"):
        stemdot.reduce(frames, ["sum", "median"])
    with pytest.raises(stemdot.InvalidArgumentError):
        stemdot.reduce(frames, [])
    with pytest.raises(TypeError, match="got list"):
        stemdot.reduce([1, 2], "sum")
    with pytest.raises(TypeError):
        stemdot.reduce(frames, gpus=1)


def test_progress_and_ctrl_c(sigint_raises):
    calls = []
    stemdot.reduce(np.ones((64, 32, 32), np.uint16), progress=lambda d, t: calls.append((d, t)))
    assert calls and calls[-1] == (64, 64)

    main = threading.main_thread().ident
    sent = []

    def interrupt(done, total):
        if not sent:
            sent.append(done)
            signal.pthread_kill(main, signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        stemdot.reduce(np.ones((2048, 64, 64), np.uint16), ("sum", "std"), cpus=1, progress=interrupt)
    assert not [t for t in threading.enumerate() if t.name == "stemdot-reduce" and t.is_alive()]


def test_pick():
    frames = np.arange(3 * 4 * 2 * 2, dtype=np.int16).reshape(3, 4, 2, 2)
    got = stemdot.pick(frames, [(2, 1), (0, 3)])
    assert got.dtype == np.int16 and got.shape == (2, 2, 2)
    np.testing.assert_array_equal(got, frames[[2, 0], [1, 3]])
    np.testing.assert_array_equal(stemdot.pick(frames, np.array([[1, 1]])), frames[1, 1][np.newaxis])
    line = frames.reshape(12, 2, 2)
    np.testing.assert_array_equal(stemdot.pick(line, [5, 0]), line[[5, 0]])
    np.testing.assert_array_equal(stemdot.pick(line, [(7,)]), line[[7]])

    with pytest.raises(stemdot.ShapeError, match=r"at: scan position \(3, 0\) is outside the nav shape \(3, 4\)"):
        stemdot.pick(frames, [(0, 0), (3, 0)])
    with pytest.raises(stemdot.ShapeError, match=r"scan position \(0, -1\) is outside"):
        stemdot.pick(frames, [(0, -1)])
    with pytest.raises(stemdot.ShapeError, match="has 1 coordinate, but the nav shape"):
        stemdot.pick(frames, [(1,)])
    with pytest.raises(stemdot.ShapeError, match="want a sequence of scan positions"):
        stemdot.pick(frames, [(0.5, 1)])
    with pytest.raises(stemdot.InvalidArgumentError, match="no scan position"):
        stemdot.pick(frames, [])


def test_pick_real_mib(data_dir):
    path = data_dir / "mib" / "Quad_9_Frame_CounterDepth_12_Rows_256.mib"
    frames = read_mib(path)
    with stemdot.open(path) as ds:
        nav = ds.nav_shape
        at = [(0, 8), (0, 3)] if len(nav) == 2 else [8, 3]
        got = stemdot.pick(ds, at)
    assert got.dtype == frames.dtype
    np.testing.assert_array_equal(got, frames[[8, 3]])
