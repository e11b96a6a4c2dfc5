"""Lazy and foreign arrays (#35): dask arrays, HyperSpy and pyxem signals (lazy or not),
objects with __array__, through stemdot.apply_masks, reduce, pick, centre and
stemdot.dask.apply_masks: the same values as the file and numpy paths, bit for bit; a
dask array computed one block at a time; the scan's axes carried to a HyperSpy result."""

import gc
import json
import threading
import tracemalloc
import warnings
import weakref

import numpy as np
import pytest

import stemdot

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

NAV = (3, 5)  # not square: a transposed nav shape (5, 3) is caught
SIG = (16, 24)  # not square either


def frames(nav=NAV, sig=SIG, dtype=np.uint16, seed=35):
    """Random counts with a bright disk about (x=10, y=7) (find_centre finds it)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 50, size=nav + sig).astype(dtype)
    x += (stemdot.disk(sig, 10, 7, 4)[0] * 1000).astype(dtype)
    return x


def masks_for(sig=SIG, seed=36):
    return np.random.default_rng(seed).standard_normal((3,) + sig).astype(np.float32)


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 2 frames: a dask array of NAV is computed in many blocks."""
    monkeypatch.setattr(stemdot, "LAZY_BLOCK_BYTES", 2 * SIG[0] * SIG[1] * 2)


@pytest.fixture
def npy_file(tmp_path):
    """The frames in an NPY file, for the file path (stemdot.open)."""
    x = frames()
    path = tmp_path / "scan.npy"
    np.save(path, x)
    return path, x


def assert_same(got, want):
    assert type(got) is stemdot.Result and got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


# ---------------------------------------------------------------------- dask arrays


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dask_array_equals_file_and_numpy(small_blocks, npy_file, dtype):
    path, x = npy_file
    m = masks_for()
    with stemdot.open(path) as ds:
        want = stemdot.apply_masks(ds, m, dtype=dtype, names=["a", "b", "c"])
    assert_same(stemdot.apply_masks(x, m, dtype=dtype), want)
    lazy = da.from_array(x, chunks=(2, 3) + SIG)  # chunks that do not divide the nav shape
    got = stemdot.apply_masks(lazy, m, dtype=dtype, names=["a", "b", "c"])
    assert_same(got, want)
    assert got.names == ("a", "b", "c") and got.info["dataset"] == {"path": "", "format": "dask", "options": {}}
    assert got.info["nav_shape"] == list(NAV)


def test_dask_array_sig_chunks_and_shifts(small_blocks):
    x, m = frames(dtype=np.float32), masks_for()
    shifts = np.random.default_rng(2).uniform(-2, 2, NAV + (2,))
    lazy = da.from_array(x, chunks=(1, 2, 5, 7))  # the sig axes cut too: merged per block
    assert_same(stemdot.apply_masks(lazy, m, shifts=shifts), stemdot.apply_masks(x, m, shifts=shifts))
    assert_same(stemdot.apply_masks(lazy, m, shifts=(1.0, -2.0)), stemdot.apply_masks(x, m, shifts=(1.0, -2.0)))
    with pytest.raises(stemdot.ShapeError, match=r"shifts of shape \(5, 3, 2\)"):
        stemdot.apply_masks(lazy, m, shifts=shifts.transpose(1, 0, 2))


def test_dask_array_progress(small_blocks):
    x, m = frames(), masks_for()
    seen = []
    stemdot.apply_masks(da.from_array(x, chunks=(1, 5) + SIG), m, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (15, 15) and all(t == 15 for _, t in seen) and seen == sorted(seen)


def test_dask_array_refused_and_wrong():
    x, m = frames(), masks_for()
    lazy = da.from_array(x, chunks=(1, 5) + SIG)
    with pytest.raises(stemdot.InvalidArgumentError, match="roi= and roi_compact="):
        stemdot.apply_masks(lazy, m, roi="rect:0,0,2,2")
    with pytest.raises(stemdot.ShapeError, match=r"masks of sig_shape \(24, 16\) do not match"):
        stemdot.apply_masks(lazy, m.transpose(0, 2, 1))
    with pytest.raises(stemdot.ShapeError, match="at least one nav dimension"):
        stemdot.apply_masks(lazy[0, 0], m)
    with pytest.raises(stemdot.DTypeError, match="frames dtype complex64 is not supported"):
        stemdot.reduce(lazy.astype(np.complex64))
    with pytest.raises(stemdot.InvalidArgumentError, match="shifts= with a dask array"):
        stemdot.centre(lazy, shifts=(1, 1))
    flat = lazy.reshape((-1,) + SIG)
    unknown = flat[da.from_array(np.ones(len(flat), bool), chunks=5)]  # shape (nan, sy, sx)
    for call in (lambda: stemdot.apply_masks(unknown, m), lambda: stemdot.reduce(unknown),
                 lambda: stemdot.pick(unknown, [0]), lambda: stemdot.centre(unknown)):
        with pytest.raises(stemdot.ShapeError, match=r"unknown chunk sizes.*compute_chunk_sizes\(\)"):
            call()
    with pytest.raises(TypeError, match="open it with stemdot.open"):
        stemdot.apply_masks("scan.npy", m)
    with pytest.raises(TypeError, match="an object with __array__, got list"):
        stemdot.apply_masks([[1, 2]], m)


def test_dask_array_reduce_pick_centre(small_blocks, npy_file):
    path, x = npy_file
    lazy = da.from_array(x, chunks=(2, 2) + SIG)
    want = stemdot.reduce(path, stemdot.REDUCTIONS)
    got = stemdot.reduce(lazy, stemdot.REDUCTIONS)
    assert list(got) == list(stemdot.REDUCTIONS)
    for name in ("sum", "mean", "max"):  # integer frames: exact, whatever the blocks
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    np.testing.assert_allclose(got["std"], want["std"], rtol=1e-13, atol=0)  # merged per block: to rounding
    np.testing.assert_allclose(got["std"], x.reshape(-1, *SIG).std(axis=0), rtol=1e-12)
    assert stemdot.reduce(lazy, "max").keys() == {"max"}

    at = [(2, 4), (0, 1), (2, 4), (1, 0)]
    picked = stemdot.pick(lazy, at)
    np.testing.assert_array_equal(picked, stemdot.pick(path, at))
    np.testing.assert_array_equal(picked, x[(2, 0, 2, 1), (4, 1, 4, 0)])
    with pytest.raises(stemdot.ShapeError, match=r"scan position \(3, 0\) is outside the nav shape \(3, 5\)"):
        stemdot.pick(lazy, [(0, 0), (3, 0)])  # (3, 0) is inside (5, 3): a transposition is caught
    with pytest.raises(stemdot.ShapeError, match="outside"):
        stemdot.pick(lazy, [(-1, 0)])

    c = stemdot.centre(lazy)
    assert c == stemdot.centre(path)
    assert abs(c.x - 10) < 0.5 and abs(c.y - 7) < 0.5


class LiveFrames:
    """Counts the frames of the chunks it makes that are alive at once (each chunk a fresh
    array, freed when nothing holds it)."""

    def __init__(self, sig):
        self.sig = sig
        self.alive = self.most = self.made = 0
        self.lock = threading.Lock()

    def chunk(self, block_info=None):
        info = block_info[None]
        (y0, y1), (x0, x1) = info["array-location"][:2]
        yy, xx = np.mgrid[y0:y1, x0:x1]
        data = ((yy * 1000 + xx)[..., None, None] + np.arange(np.prod(self.sig)).reshape(self.sig)).astype(np.float64)
        n = data.shape[0] * data.shape[1]
        with self.lock:
            self.alive += n
            self.made += n
            self.most = max(self.most, self.alive)
        weakref.finalize(data, self.freed, n)
        return data

    def freed(self, n):
        with self.lock:
            self.alive -= n


def test_dask_array_never_whole_in_memory(monkeypatch):
    """A 40×60 scan of 64×64 float64 frames (75 MiB) whose chunks (4×6 frames) are made on
    the fly: the apply holds a block (16 frames here) and the chunks it is cut from, never
    the scan (2400 frames): counted by the chunks alive at once and by tracemalloc
    (numpy's allocations, and dask's)."""
    nav, sig = (40, 60), (64, 64)
    frame_bytes = sig[0] * sig[1] * 8
    monkeypatch.setattr(stemdot, "LAZY_BLOCK_BYTES", 16 * frame_bytes)
    live = LiveFrames(sig)
    chunks = ((4,) * 10, (6,) * 10, (sig[0],), (sig[1],))
    lazy = da.map_blocks(live.chunk, chunks=chunks, dtype=np.float64, meta=np.empty((0, 0, 0, 0)))
    m = masks_for(sig)
    with dask.config.set(scheduler="synchronous"):
        want = stemdot.apply_masks(lazy.compute(), m)
        live.alive = live.most = live.made = 0
        gc.collect()
        tracemalloc.start()
        try:
            got = stemdot.apply_masks(lazy, m)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert_same(got, want)
    whole = nav[0] * nav[1] * frame_bytes
    assert live.made >= nav[0] * nav[1]  # every frame was made
    assert live.most <= 48, live.most  # a block's chunks (2 of 24 frames), never the scan's 2400 frames
    assert peak < whole / 10, (peak, whole)


# ------------------------------------------------------------------- foreign arrays


class ArrayLike:
    """An object that is not an ndarray but has __array__ (as zarr, xarray, h5py's
    datasets and pint have)."""

    def __init__(self, a):
        self.a = a

    def __array__(self, dtype=None, copy=None):
        return self.a if dtype is None else self.a.astype(dtype)


def test_array_like(npy_file):
    path, x = npy_file
    m = masks_for()
    with stemdot.open(path) as ds:
        want = stemdot.apply_masks(ds, m)
    assert_same(stemdot.apply_masks(ArrayLike(x), m), want)
    np.testing.assert_array_equal(stemdot.reduce(ArrayLike(x))["sum"], stemdot.reduce(path)["sum"])
    np.testing.assert_array_equal(stemdot.pick(ArrayLike(x), [(2, 4)]), x[2:3, 4])
    assert stemdot.centre(ArrayLike(x)) == stemdot.centre(path)
    fit, want_fit = stemdot.descan_fit(ArrayLike(x)), stemdot.descan_fit(x)
    assert fit[:4] == want_fit[:4]
    np.testing.assert_array_equal(fit.shifts, want_fit.shifts)
    with pytest.raises(stemdot.InvalidArgumentError, match="descan_fit: a dask array"):
        stemdot.descan_fit(da.from_array(x))


# ----------------------------------------------------------------- HyperSpy and pyxem


def hyperspy_signal(cls, x):
    """cls(x) with calibrated nav axes; HyperSpy lists them x first: navigation_axes[0] is
    numpy's last nav axis (5 positions), [1] the first (3)."""
    s = cls(x)
    ax_x, ax_y = s.axes_manager.navigation_axes
    assert (ax_x.size, ax_y.size) == (NAV[1], NAV[0])
    ax_x.name, ax_x.scale, ax_x.offset, ax_x.units = "scan x", 1.5, -2.0, "nm"
    ax_y.name, ax_y.scale, ax_y.offset, ax_y.units = "scan y", 0.25, 7.0, "µm"
    return s


def signal_classes():
    hs = pytest.importorskip("hyperspy.api", reason="HyperSpy not installed (make py-hyperspy)")
    return hs


def assert_scan_axes(signal, result):
    """signal: stemdot's result as a HyperSpy signal; its nav axes those of
    hyperspy_signal, its data the result in numpy order."""
    am = signal.axes_manager
    assert am.navigation_shape == (NAV[1], NAV[0]) and am.signal_shape == (3,)
    nx, ny = am.navigation_axes
    assert (nx.name, nx.scale, nx.offset, nx.units) == ("scan x", 1.5, -2.0, "nm")
    assert (ny.name, ny.scale, ny.offset, ny.units) == ("scan y", 0.25, 7.0, "µm")
    assert am.signal_axes[0].name == "mask"
    np.testing.assert_array_equal(signal.data, np.asarray(result))
    np.testing.assert_array_equal(signal.inav[4, 2].data, np.asarray(result)[2, 4])  # inav is x, y
    assert list(signal.metadata.stemdot.names) == list(result.names)
    assert json.loads(signal.metadata.stemdot.info_json)["nav_shape"] == list(NAV)


@pytest.mark.parametrize("lazy", [False, True], ids=["signal", "lazy signal"])
def test_hyperspy_signal(small_blocks, npy_file, lazy):
    hs = signal_classes()
    path, x = npy_file
    m = masks_for()
    with stemdot.open(path) as ds:
        want = stemdot.apply_masks(ds, m, names=["a", "b", "c"])
    s = hyperspy_signal(hs.signals.Signal2D, x)
    if lazy:
        s = s.as_lazy()
        assert stemdot._is_dask(s.data)
    assert_same(stemdot.apply_masks(s, m, names=["a", "b", "c"]), want)
    assert_scan_axes(stemdot.apply_masks(s, m, names=["a", "b", "c"], as_signal=True), want)
    np.testing.assert_array_equal(stemdot.reduce(s, "sum")["sum"], stemdot.reduce(path, "sum")["sum"])
    np.testing.assert_array_equal(stemdot.pick(s, [(2, 4)]), x[2:3, 4])
    assert stemdot.centre(s) == stemdot.centre(path)


@pytest.mark.parametrize("lazy", [False, True], ids=["Diffraction2D", "LazyDiffraction2D"])
def test_pyxem_signal(small_blocks, npy_file, lazy):
    pyxem = pytest.importorskip("pyxem", reason="pyxem not installed (make py-hyperspy)")
    path, x = npy_file
    m = masks_for()
    with stemdot.open(path) as ds:
        want = stemdot.apply_masks(ds, m)
    s = hyperspy_signal(pyxem.signals.Diffraction2D, x)
    if lazy:
        s = s.as_lazy()
        assert type(s).__name__ == "LazyDiffraction2D"
    assert_same(stemdot.apply_masks(s, m), want)
    assert_scan_axes(stemdot.to_hyperspy(stemdot.apply_masks(s, m), like=s), want)


def test_hyperspy_non_uniform_nav_axis():
    """A signal whose scan axis is non-uniform (positions as an array): the result as a
    signal keeps that axis (a fresh user's try raised KeyError 'size')."""
    hs = signal_classes()
    x, m = frames(), masks_for()
    y = np.array([0.0, 1.0, 3.0])
    s = hs.signals.Signal2D(x, axes=[{"axis": y, "name": "y", "units": "nm"}, {"size": NAV[1], "name": "x", "scale": 2.0},
                                     {"size": SIG[0]}, {"size": SIG[1]}])
    r = stemdot.apply_masks(s, m, as_signal=True)
    np.testing.assert_array_equal(r.data, np.asarray(stemdot.apply_masks(x, m)))
    np.testing.assert_array_equal(r.axes_manager.navigation_axes[1].axis, y)
    assert r.axes_manager.navigation_axes[0].scale == 2.0


def test_hyperspy_refused():
    hs = signal_classes()
    m = masks_for()
    spectra = hs.signals.Signal1D(np.zeros((3, 5, 24)))
    with pytest.raises(stemdot.ShapeError, match="signal dimension 1"):
        stemdot.apply_masks(spectra, m)
    s = hyperspy_signal(hs.signals.Signal2D, frames())
    r = stemdot.apply_masks(s, m)
    with pytest.raises(stemdot.ShapeError, match=r"navigation shape \(2, 5\) \(numpy order\), the result \(3, 5\)"):
        stemdot.to_hyperspy(r, like=s.inav[:, :2])
    with pytest.raises(TypeError, match="like= wants a HyperSpy signal"):
        stemdot.to_hyperspy(r, like=np.zeros(NAV))
    with pytest.raises(stemdot.InvalidArgumentError, match="as_signal=True with roi_compact=True"):
        stemdot.apply_masks(frames(), m, roi="rect:0,0,2,2", roi_compact=True, as_signal=True)


def test_hyperspy_from_file_calibration(npy_file):
    """A file's result: the nav axes of its info's calibration (numpy order), reversed into
    HyperSpy's order; none: uncalibrated."""
    signal_classes()
    path, x = npy_file
    with stemdot.open(path) as ds:
        r = stemdot.apply_masks(ds, masks_for(), names=["a", "b", "c"])
    plain = stemdot.to_hyperspy(r)
    assert [(a.size, a.scale, a.offset) for a in plain.axes_manager.navigation_axes] == [(5, 1.0, 0.0), (3, 1.0, 0.0)]
    info = dict(r.info, calibration={"nav": [{"name": "scan y", "scale": 0.25, "offset": 7.0, "units": "µm"},
                                             {"name": "scan x", "scale": 1.5, "offset": -2.0, "units": "nm"}],
                                     "sig": [{"name": "ky"}, {"name": "kx"}], "camera_length_m": 0.12})
    assert_scan_axes(stemdot.to_hyperspy(stemdot.Result(r, r.names, info)), r)
    with pytest.raises(stemdot.ShapeError, match="want nav_shape"):
        stemdot.to_hyperspy(np.zeros(3))


# ------------------------------------------------------------- stemdot.dask on arrays


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster, timeout=180) as c:
        c.wait_for_workers(2, timeout=180)
        yield c


def test_dask_cluster_arrays(client, npy_file, monkeypatch):
    import stemdot.dask as sdask

    monkeypatch.setattr(sdask, "RANGE_BYTES", 2 * SIG[0] * SIG[1] * 2)  # blocks of 2 frames: tasks on both workers
    path, x = npy_file
    m = masks_for()
    with stemdot.open(path) as ds:
        want = stemdot.apply_masks(ds, m)
    lazy = da.from_array(x, chunks=(2, 3) + SIG)
    persisted = lazy.persist()  # chunks that live on the workers
    seen = []
    for data in (lazy, persisted, x, ArrayLike(x)):
        got = sdask.apply_masks(client, data, m, progress=lambda done, total: seen.append((done, total)))
        assert_same(got, want)
        assert got.info["plan"]["cpu_workers"] >= 2 and got.info["dataset"]["path"] == ""
    assert seen[-1] == (15, 15)
    shifts = np.random.default_rng(3).uniform(-2, 2, NAV + (2,))
    assert_same(sdask.apply_masks(client, lazy, m, shifts=shifts, out_dtype=np.float64),
                stemdot.apply_masks(x, m, shifts=shifts, dtype=np.float64))
    with pytest.raises(stemdot.InvalidArgumentError, match="range_frames, nav_shape apply to a file"):
        sdask.apply_masks(client, lazy, m, range_frames=4, nav_shape=(15,))
    with pytest.raises(stemdot.ShapeError, match="do not match the frames"):
        sdask.apply_masks(client, lazy, m[:, :4])
    with pytest.raises(TypeError, match="give its file's path"):
        with stemdot.open(path) as ds:
            sdask.apply_masks(client, ds, m)


def test_dask_cluster_lazy_signal(client, npy_file):
    hs = signal_classes()
    import stemdot.dask as sdask

    path, x = npy_file
    m = masks_for()
    with stemdot.open(path) as ds:
        want = stemdot.apply_masks(ds, m)
    s = hyperspy_signal(hs.signals.Signal2D, x).as_lazy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no stray warning
        got = sdask.apply_masks(client, s, m, as_signal=True)
    assert_scan_axes(got, want)


def test_dask_async_array(npy_file):
    """apply_masks_async takes arrays too, on an asynchronous client's event loop."""
    import asyncio

    distributed = pytest.importorskip("distributed")
    import stemdot.dask as sdask

    _, x = npy_file
    m = masks_for()

    async def main():
        async with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None,
                                            silence_logs=50, asynchronous=True) as cluster:
            async with distributed.Client(cluster, asynchronous=True) as client:
                return await asyncio.gather(sdask.apply_masks_async(client, da.from_array(x, chunks=(1, 5) + SIG), m),
                                            sdask.apply_masks_async(client, x, m))

    for got in asyncio.run(main()):
        assert_same(got, stemdot.apply_masks(x, m))
