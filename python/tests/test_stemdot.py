"""Tests of the stemdot Python package against float64 numpy references, real detector
files, the stemdot CLI, and misuse."""

import json
import os
from pathlib import Path
import pickle
import re
import warnings
import signal
import subprocess
import sys
import threading
import tracemalloc

import numpy as np
import pytest

import stemdot

ALL_DTYPES = [np.uint8, np.uint16, np.uint32, np.int8, np.int16, np.int32, np.float32, np.float64]


def reference(frames, masks):
    """float64 mask-dot product and Σ|terms| (bounds the rounding error of any order)."""
    f = frames.reshape(-1, frames.shape[-2] * frames.shape[-1]).astype(np.float64)
    m = masks.reshape(masks.shape[0], -1).astype(np.float64)
    nav = frames.shape[:-2]
    return (f @ m.T).reshape(nav + (m.shape[0],)), (np.abs(f) @ np.abs(m).T).reshape(nav + (m.shape[0],))


def assert_close(got, want, scale, dtype):
    tol = 1e-5 if np.dtype(dtype) == np.float32 else 1e-12
    assert got.dtype == np.dtype(dtype)
    assert got.shape == want.shape
    err = np.abs(got.astype(np.float64) - want)
    assert np.all(err <= tol * np.maximum(scale, 1e-300)), f"max error {err.max()} (tolerance {tol} × Σ|terms|)"


def random_frames(rng, dtype, shape):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return (rng.standard_normal(shape) * 100).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


def read_mib(path):
    """Decodes a Merlin MIB file (U08/U16/U32) with numpy from its frame headers:
    field 2 header bytes, 4 width, 5 height, 6 pixel type; pixels big-endian."""
    raw = np.fromfile(path, dtype=np.uint8)
    fields = bytes(raw[:768]).split(b",")
    header, width, height = int(fields[2]), int(fields[4]), int(fields[5])
    ptype = {b"U08": ">u1", b"U16": ">u2", b"U32": ">u4"}[fields[6].strip()]
    frame = np.dtype([("header", "S%d" % header), ("pixels", ptype, (height, width))])
    frames = raw.view(frame)
    assert all(h.startswith(b"MQ1,") for h in frames["header"])
    return frames["pixels"].astype(np.dtype(ptype).newbyteorder("="))


# ------------------------------------------------------------------ real files

MIB_FILES = [
    "001_4x2_6bit.mib",
    "002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.mib",
    "Single_9_Frame_CounterDepth_1_Rows_256.mib",
    "Single_9_Frame_CounterDepth_6_Rows_256.mib",
    "Single_9_Frame_CounterDepth_12_Rows_256.mib",
    "Single_9_Frame_CounterDepth_24_Rows_256.mib",
    "Quad_9_Frame_CounterDepth_6_Rows_256.mib",
    "Quad_9_Frame_CounterDepth_12_Rows_256.mib",
]


def mib_masks(sig):
    sy, sx = sig
    return np.concatenate(
        [
            stemdot.disk(sig, sx / 2, sy / 2, min(sig) / 4),
            stemdot.ring(sig, sx / 2, sy / 2, min(sig) / 4, min(sig) / 2),
            stemdot.point(sig, sx // 3, sy // 5),
            stemdot.com(sig),
        ]
    )


@pytest.mark.parametrize("name", MIB_FILES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_real_mib_against_numpy(data_dir, name, dtype):
    path = data_dir / "mib" / name
    frames = read_mib(path)
    with stemdot.open(path) as ds:
        assert ds.sig_shape == frames.shape[1:]
        assert ds.n_frames == frames.shape[0] == int(np.prod(ds.nav_shape))
        assert ds.dtype == frames.dtype
        masks = mib_masks(ds.sig_shape)
        got = stemdot.apply_masks(ds, masks, dtype=dtype)
    want, scale = reference(frames, masks)
    assert_close(got.reshape(want.shape), want, scale, dtype)


def test_real_mib_info_and_known_values(data_dir):
    path = data_dir / "mib" / "001_4x2_6bit.mib"
    with stemdot.open(path, nav_shape=(2, 4)) as ds:
        assert ds.nav_shape == (2, 4)
        assert ds.sig_shape == (256, 256)
        assert ds.dtype == np.uint8
        assert ds.n_frames == 8
        vbf = stemdot.apply_masks(ds, stemdot.disk(ds.sig_shape, 42, 126, 30), dtype=np.float64)[..., 0]
    # independent of stemdot: the file's bytes summed over the same disk
    frames = read_mib(path).astype(np.float64)
    yy, xx = np.mgrid[:256, :256]
    sel = (xx - 42.0) ** 2 + (yy - 126.0) ** 2 <= 30.0**2
    np.testing.assert_array_equal(vbf.ravel(), frames[:, sel].sum(axis=1))


def test_float64_weights_keep_their_precision(data_dir):
    # float64 masks (random weights, moments about a centre between pixels) with a float64
    # result: the float64 products, not those of the weights rounded to float32
    path = data_dir / "mib" / "001_4x2_6bit.mib"
    rng = np.random.default_rng(64)
    yy, xx = np.mgrid[:256, :256]
    masks = np.concatenate([rng.standard_normal((2, 256, 256)), [yy - 128.6, xx - 127.3]])
    frames = read_mib(path).astype(np.float64).reshape(8, -1)
    flat = masks.reshape(len(masks), -1)
    want, scale = frames @ flat.T, np.abs(frames) @ np.abs(flat).T
    off32 = np.max(np.abs(frames @ flat.astype(np.float32).astype(np.float64).T - want) / scale)
    assert off32 > 1e-9, "float32-rounded weights must be off, else this test cannot fail"
    with stemdot.open(path, nav_shape=(2, 4)) as ds:
        got = stemdot.apply_masks(ds, masks, dtype=np.float64).reshape(8, -1)
        got32 = stemdot.apply_masks(ds, masks).reshape(8, -1)
    assert np.max(np.abs(got - want) / scale) < 1e-11
    assert got32.dtype == np.float32
    assert np.max(np.abs(got32 - want) / scale) < 1e-6


def test_hot_pixel(data_dir):
    path = data_dir / "mib" / "002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.mib"
    with stemdot.open(path) as ds:
        hot = stemdot.apply_masks(ds, stemdot.point(ds.sig_shape, 52, 39), dtype=np.float64)
        rest = stemdot.apply_masks(ds, 1 - stemdot.point(ds.sig_shape, 52, 39), dtype=np.float64)
    assert np.all(hot > rest / (128 * 256 - 1) * 10), "the hot pixel outshines the mean dark pixel"


def test_raw_packed_mib_reads_like_the_unpacked_file(data_dir):
    # The raw-packed (R64) 1-bit file and the U08 1-bit file taken 1.6 s earlier with the
    # same settings: their mean frame sums agree within counting statistics.
    def mean_sum(name):
        with stemdot.open(data_dir / "mib" / name) as ds:
            img = stemdot.apply_masks(ds, np.ones((1,) + tuple(ds.sig_shape), np.float32))
            return float(img.mean())
    raw = mean_sum("Single_9_Frame_CounterDepth_1_Rows_256RAW.mib")
    u08 = mean_sum("Single_9_Frame_CounterDepth_1_Rows_256.mib")
    assert raw > 1000
    assert abs(raw - u08) < 4 * np.sqrt(u08 / 9), (raw, u08)


def test_equals_cli(data_dir, cli, tmp_path):
    path = data_dir / "mib" / "001_4x2_6bit.mib"
    out = tmp_path / "cli.npy"
    specs = ["disk:42,126,30", "ring:42,126,30,80", "com"]
    args = [str(cli), "apply", str(path), "--out", str(out)]
    for s in specs:
        args += ["--mask", s]
    subprocess.run(args, check=True, capture_output=True)
    want = np.load(out)
    with stemdot.open(path) as ds:
        masks = np.concatenate([stemdot.mask(s, ds.sig_shape) for s in specs])
        got = stemdot.apply_masks(ds, masks)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-6)


# ---------------------------------------------------------------- random data


@pytest.mark.parametrize("frame_dtype", ALL_DTYPES)
@pytest.mark.parametrize("out_dtype", [np.float32, np.float64])
def test_random_every_dtype(frame_dtype, out_dtype):
    rng = np.random.default_rng(7)
    frames = random_frames(rng, frame_dtype, (3, 5, 13, 11))
    masks = np.concatenate(
        [rng.standard_normal((3, 13, 11)).astype(np.float32), stemdot.ring((13, 11), 5, 6, 2, 4)]
    )
    got = stemdot.apply_masks(frames, masks, dtype=out_dtype)
    want, scale = reference(frames, masks)
    assert_close(got, want, scale, out_dtype)


@pytest.mark.parametrize("nav", [(7,), (2, 3), (2, 2, 3)])
def test_nav_shapes_and_dataset_from_array(nav):
    rng = np.random.default_rng(3)
    frames = random_frames(rng, np.uint16, nav + (8, 9))
    with stemdot.from_array(frames) as ds:
        assert ds.nav_shape == nav and ds.sig_shape == (8, 9) and ds.dtype == np.uint16
        got = stemdot.apply_masks(ds, stemdot.com((8, 9)), cpus=1, dtype=np.float64)
    want, scale = reference(frames, stemdot.com((8, 9)))
    assert_close(got, want, scale, np.float64)


def test_byteswapped_and_noncontiguous_inputs_are_copied_and_correct():
    rng = np.random.default_rng(4)
    frames = random_frames(rng, np.uint16, (4, 10, 12))
    masks = rng.standard_normal((2, 10, 6)).astype(np.float32)
    want, scale = reference(frames[:, :, ::2], masks)
    assert_close(stemdot.apply_masks(frames[:, :, ::2], masks, dtype=np.float64), want, scale, np.float64)
    swapped = frames.astype(frames.dtype.newbyteorder(">"))
    m = rng.standard_normal((1, 10, 12)).astype(np.float32)
    want, scale = reference(frames, m)
    assert_close(stemdot.apply_masks(swapped, m, dtype=np.float64), want, scale, np.float64)


def test_masks_2d_and_float64_are_accepted():
    frames = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    m = np.ones((3, 4))
    np.testing.assert_array_equal(stemdot.apply_masks(frames, m)[:, 0], frames.reshape(2, -1).sum(axis=1))


def test_mask_helpers():
    d = stemdot.disk((5, 5), 2, 2, 1)
    assert d.dtype == np.float32 and d.shape == (1, 5, 5)
    cross = np.zeros((5, 5), np.float32)
    cross[2, 1:4] = cross[1:4, 2] = 1
    np.testing.assert_array_equal(d[0], cross)
    np.testing.assert_array_equal(stemdot.point((4, 6), 5, 3)[0], np.eye(1, 24, 3 * 6 + 5).reshape(4, 6))
    r = stemdot.rect((4, 6), 1, 2, 3, 2)[0]
    assert r.sum() == 6 and r[2:4, 1:4].all()
    assert stemdot.com((4, 6)).shape == (3, 4, 6)
    np.testing.assert_array_equal(stemdot.com((4, 6)), stemdot.com((4, 6), cx=3, cy=2))
    np.testing.assert_array_equal(stemdot.ring((9, 9), 4, 4, 1, 3), stemdot.disk((9, 9), 4, 4, 3) - stemdot.disk((9, 9), 4, 4, 1))


def libertem_ring(sig, cx, cy, ri, ro):
    """libertem.masks.ring's formula (masks._make_circular_mask, not antialiased):
    outer & ~inner of x, y = np.ogrid[-cy:sig_y-cy, -cx:sig_x-cx], x*x + y*y <= r*r."""
    x, y = np.ogrid[-cy:sig[0] - cy, -cx:sig[1] - cx]
    return (x * x + y * y <= ro * ro) & ~(x * x + y * y <= ri * ri)


@pytest.mark.parametrize("cx, cy, ro", [(8, 14, 2), (31, 36, 14), (29.60552980371328, 1.7540725867249307, 3.4663),
                                        (47.128378152843744, 11.013023882987456, 18.71)])
def test_ring_inner_radius_zero_is_libertems(cx, cy, ro):
    """LiberTEM peer G02: ring of inner radius 0, pixel for pixel as libertem.masks.ring
    (the disk less its centre pixel when the centre is a pixel), by ring() and mask()."""
    want = libertem_ring((37, 53), cx, cy, 0.0, ro)
    np.testing.assert_array_equal(stemdot.ring((37, 53), cx, cy, 0, ro)[0], want)
    np.testing.assert_array_equal(stemdot.mask(f"ring:{cx},{cy},0,{ro}", (37, 53))[0], want)


def test_describe_plan():
    frames = np.zeros((10, 4, 4), np.uint8)
    with stemdot.from_array(frames) as ds:
        plan = stemdot.describe_plan(cpus=1, dataset=ds)
    assert len(plan["workers"]) == 1 and plan["workers"][0]["kind"] == "cpu"
    assert plan["partitions"][0][0] == 0 and plan["partitions"][-1][1] == 10


# ------------------------------------------------------------------- zero copy


def test_array_memory_is_used_in_place():
    """A dataset made from an array reads the array's memory: a change made after
    from_array shows in the result, which a copy would not."""
    frames = np.ones((4, 6, 5), np.float32)
    masks = np.ones((1, 6, 5), np.float32)
    with stemdot.from_array(frames) as ds:
        np.testing.assert_array_equal(stemdot.apply_masks(ds, masks)[:, 0], [30, 30, 30, 30])
        frames[2, 3, 1] = 101
        np.testing.assert_array_equal(stemdot.apply_masks(ds, masks)[:, 0], [30, 30, 130, 30])


def test_apply_masks_does_not_copy_a_contiguous_array():
    """numpy reports its allocations to tracemalloc: apply_masks on a 32 MiB array peaks
    far below its size, while a non-contiguous view of it is copied (the control)."""
    frames = np.ones((128, 256, 256), np.uint16)
    masks = np.ones((1, 256, 256), np.float32)
    tracemalloc.start()
    try:
        stemdot.apply_masks(frames, masks)
        _, contiguous_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        stemdot.apply_masks(frames[::2], masks)
        _, strided_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert contiguous_peak < frames.nbytes / 8
    assert strided_peak >= frames.nbytes / 2


# ---------------------------------------------------------------- progress, cancel


def test_progress_callback():
    frames = np.ones((64, 16, 16), np.uint8)
    calls = []
    stemdot.apply_masks(frames, np.ones((1, 16, 16)), progress=lambda d, t: calls.append((d, t)))
    assert calls and all(t == 64 for _, t in calls)
    done = [d for d, _ in calls]
    assert done == sorted(set(done)) and done[-1] == 64


def test_progress_exception_cancels_and_propagates():
    class Stop(Exception):
        pass

    def boom(done, total):
        raise Stop(done)

    with pytest.raises(Stop):
        stemdot.apply_masks(np.ones((16, 8, 8), np.uint8), np.ones((1, 8, 8)), progress=boom)


def test_ctrl_c_cancels(sigint_raises):
    """SIGINT sent to the main thread during a run raises KeyboardInterrupt there; the
    run is cancelled and the library stays usable."""
    main = threading.main_thread().ident
    sent = []

    def interrupt(done, total):
        if not sent:
            sent.append(done)
            signal.pthread_kill(main, signal.SIGINT)

    frames = np.ones((512, 64, 64), np.uint16)
    with pytest.raises(KeyboardInterrupt):
        stemdot.apply_masks(frames, np.ones((1, 64, 64)), cpus=1, progress=interrupt)
    assert sent
    assert not [t for t in threading.enumerate() if t.name == "stemdot-apply" and t.is_alive()]
    np.testing.assert_array_equal(stemdot.apply_masks(frames[:2], np.ones((1, 64, 64)))[:, 0], [4096, 4096])


def test_concurrent_applies_from_threads():
    rng = np.random.default_rng(9)
    frames = random_frames(rng, np.uint16, (20, 16, 16))
    masks = rng.standard_normal((3, 16, 16)).astype(np.float32)
    want, scale = reference(frames, masks)
    results, errors = [None] * 4, []
    with stemdot.from_array(frames) as ds:

        def work(i):
            try:
                results[i] = stemdot.apply_masks(ds, masks, dtype=np.float64)
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    for r in results:
        assert_close(r, want, scale, np.float64)


# ---------------------------------------------------------------------- misuse


def test_errors_carry_codes_and_messages(tmp_path):
    with pytest.raises(stemdot.StemdotIOError, match="file does not exist") as e:
        stemdot.open(tmp_path / "missing.mib")
    assert isinstance(e.value, OSError) and e.value.code == 2
    with pytest.raises(stemdot.InvalidArgumentError, match='unknown option "colour"'):
        stemdot.open(tmp_path / "x.raw", colour="blue")
    raw = tmp_path / "x.raw"
    raw.write_bytes(bytes(33))
    with pytest.raises(stemdot.FormatError, match="whole"):
        stemdot.open(raw, sig_shape=(4, 4), dtype=np.uint16)
    with pytest.raises(stemdot.DTypeError, match="uint12"):
        stemdot.open(raw, sig_shape=(4, 4), dtype="uint12")


# The terminal control characters that no message may carry raw: C0 but newline and
# tab, DEL, C1, and the lone surrogates of file name bytes that are not UTF-8.
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\udc80-\udcff]")


def test_messages_escape_terminal_control_characters(tmp_path):
    """#33.6: a file name with escape sequences (legal on Linux) reaches the library's
    errors and warnings, and Python's own, escaped: it cannot recolour, clear or retitle
    the terminal that shows them. A name whose bytes are not UTF-8 opens, its byte
    escaped in messages."""
    name = "scan\x1b[31mRED\x1b]0;title\x07\u009b2J.npy"
    shown = r"scan\x1b[31mRED\x1b]0;title\x07\u009b2J.npy"
    np.save(tmp_path / name, np.ones((4, 4, 8, 8), np.uint16))
    with pytest.warns(UserWarning) as caught, stemdot.open(tmp_path / name, sync_offset=2) as ds:
        assert ds.nav_shape == (3, 4)
    messages = [str(w.message) for w in caught]
    assert any(f"{tmp_path / shown}: sync offset 2: the first 2 frames" in m for m in messages), messages
    assert not any(CONTROLS.search(m) for m in messages + ds.warnings), messages
    with pytest.raises(stemdot.ShapeError) as e:
        stemdot.open(tmp_path / name, nav_shape=(15,))
    assert f"{tmp_path / shown}: nav shape (15,)" in str(e.value) and not CONTROLS.search(str(e.value))
    with pytest.raises(stemdot.StemdotIOError) as e:
        stemdot.load_result(tmp_path / "missing\x1b[2J.npy")  # raised by Python
    assert str(e.value) == e.value.message == f"result {tmp_path}/missing\\x1b[2J.npy: file does not exist"
    raw = os.fsdecode(os.fsencode(tmp_path) + b"/scan\x9b.npy")  # a lone surrogate for byte 0x9b
    np.save(raw, np.ones((4, 4, 8, 8), np.uint16))
    with stemdot.open(raw) as ds:
        assert ds.path == raw and ds.nav_shape == (4, 4)
    with pytest.raises(stemdot.ShapeError) as e:
        stemdot.open(raw, nav_shape=(15,))
    assert f"{tmp_path}/scan\\x9b.npy: nav shape (15,)" in str(e.value) and not CONTROLS.search(str(e.value))


def test_3d_file_has_the_nav_shape_of_a_3d_array(tmp_path):
    """A file of frames (n, sig_y, sig_x) has nav_shape (n,), as the same array in memory
    (and as in LiberTEM): apply_masks gives (n, n_masks) either way, the same values."""
    rng = np.random.default_rng(17)
    frames = random_frames(rng, np.uint16, (7, 6, 5))
    path = tmp_path / "frames.npy"
    np.save(path, frames)
    masks = np.concatenate([stemdot.point((6, 5), 1, 2), stemdot.com((6, 5))])
    with stemdot.open(path) as ds:
        assert ds.nav_shape == (7,)
        from_file = stemdot.apply_masks(ds, masks, cpus=1, dtype=np.float64)
    from_array = stemdot.apply_masks(frames, masks, cpus=1, dtype=np.float64)
    want, scale = reference(frames, masks)
    assert_close(from_file, want, scale, np.float64)
    np.testing.assert_array_equal(from_file, from_array)


def test_raw_file_with_options(tmp_path):
    frames = np.arange(2 * 3 * 4 * 5, dtype=">u2").reshape(2, 3, 4, 5)
    path = tmp_path / "scan.raw"
    path.write_bytes(b"HEAD" + frames.tobytes())
    with stemdot.open(path, sig_shape=(4, 5), dtype=np.uint16, nav_shape=(2, 3), byte_order="big", offset=4) as ds:
        assert ds.nav_shape == (2, 3)
        got = stemdot.apply_masks(ds, np.ones((1, 4, 5)), dtype=np.float64)
    np.testing.assert_array_equal(got[..., 0], frames.astype(np.float64).sum(axis=(2, 3)))


@pytest.mark.parametrize("dtype", [np.int64, np.float16, np.bool_, np.complex64])
def test_unsupported_frame_dtypes(dtype):
    with pytest.raises(stemdot.DTypeError, match="not supported"):
        stemdot.apply_masks(np.zeros((2, 4, 4), dtype), np.ones((1, 4, 4)))


def test_wrong_shapes_and_values():
    frames = np.zeros((2, 4, 4), np.uint8)
    with pytest.raises(stemdot.ShapeError, match=r"masks of sig_shape \(4, 5\) do not match the frames' sig_shape \(4, 4\)"):
        stemdot.apply_masks(frames, np.ones((1, 4, 5)))
    with pytest.raises(stemdot.ShapeError, match="at least one nav dimension"):
        stemdot.apply_masks(np.zeros((4, 4), np.uint8), np.ones((1, 4, 4)))
    with pytest.raises(stemdot.ShapeError, match="want an array \\(n_masks, sig_y, sig_x\\)"):
        stemdot.apply_masks(frames, np.ones(16))
    bad = np.ones((1, 4, 4))
    bad[0, 1, 2] = np.nan
    with pytest.raises(stemdot.InvalidArgumentError, match=r"NaN at pixel \(y=1, x=2\)"):
        stemdot.apply_masks(frames, bad)
    with pytest.raises(stemdot.DTypeError, match="int32 is not float32 or float64"):
        stemdot.apply_masks(frames, np.ones((1, 4, 4)), dtype=np.int32)
    with pytest.raises(stemdot.InvalidArgumentError, match="disk:1,2"):
        stemdot.mask("disk:1,2", (4, 4))
    with pytest.raises(stemdot.InvalidArgumentError):
        stemdot.disk((4, 4), 1, 1, float("nan"))
    with pytest.raises(TypeError):
        stemdot.apply_masks([[1, 2]], np.ones((1, 4, 4)))


class _Sparse:
    """A sparse mask as scipy.sparse and pydata sparse give them: dense via toarray()."""

    def __init__(self, dense):
        self.dense = dense

    def toarray(self):
        return self.dense


def test_libertem_mask_factories():
    """LiberTEM's ApplyMasksUDF(mask_factories=...): a callable returning the stack (or a
    list of masks), or a list of callables each returning one mask (sparse ones too)."""
    rng = np.random.default_rng(19)
    frames = rng.integers(0, 1000, (3, 2, 8, 6), dtype=np.uint16)
    stack = rng.random((3, 8, 6))
    want = np.einsum("abyx,myx->abm", frames.astype(np.float64), stack)
    for masks in (lambda: stack, lambda: list(stack), [lambda m=m: m for m in stack],
                  [lambda: stack[0], lambda: _Sparse(stack[1]), lambda: stack[2].tolist()]):
        got = stemdot.apply_masks(frames, masks, dtype=np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-12)
        np.testing.assert_array_equal(stemdot.apply_masks(frames, masks), stemdot.apply_masks(frames, stack))
    with stemdot.from_array(frames) as ds:
        np.testing.assert_allclose(stemdot.apply_masks(ds, lambda: stack[0], dtype=np.float64), want[..., :1], rtol=1e-12)

    def stack_of_two():
        return stack[:2]

    with pytest.raises(stemdot.ShapeError, match=r"mask factory 1 \(.*stack_of_two\) of the list returned shape \(2, 8, 6\): "
                       r"each factory of a list returns one mask \(sig_y, sig_x\)"):
        stemdot.apply_masks(frames, [lambda: stack[0], stack_of_two])
    with pytest.raises(stemdot.ShapeError, match=r"mask factory .*<lambda>.* returned masks of sig_shape \(6, 8\), "
                       r"but the frames' sig_shape is \(8, 6\)"):
        stemdot.apply_masks(frames, lambda: stack.transpose(0, 2, 1))
    with pytest.raises(TypeError, match=r"mask factory .*<lambda>.* returned NoneType: want an array"):
        stemdot.apply_masks(frames, lambda: None)
    with pytest.raises(TypeError, match="give factories only, or arrays only"):
        stemdot.apply_masks(frames, [stack[0], lambda: stack[1]])
    with pytest.raises(TypeError, match=r"masks: want an array .* or a list of mask factories .*got str.*stemdot.mask\(spec"):
        stemdot.apply_masks(frames, "disk:3,4,2")
    with pytest.raises(TypeError, match=r"masks: want an array .*a mask factory \(a callable returning one\).*got dict"):
        stemdot.apply_masks(frames, {"disk": stack[0]})


def test_plans():
    frames = np.ones((3, 4, 4), np.uint8)
    with pytest.raises(stemdot.InvalidArgumentError, match="two"):
        stemdot.apply_masks(frames, np.ones((1, 4, 4)), cpus="two")
    with pytest.raises(stemdot.PlanError, match="4095"):
        stemdot.apply_masks(frames, np.ones((1, 4, 4)), cpus=[4095])
    for bad in (1.5, [0.5], True):
        with pytest.raises(stemdot.InvalidArgumentError, match=r"cpus=.*: want None, a count, a list of ids"):
            stemdot.apply_masks(frames, np.ones((1, 4, 4)), cpus=bad)
    allowed = sorted(os.sched_getaffinity(0))
    np.testing.assert_array_equal(stemdot.apply_masks(frames, np.ones((1, 4, 4)), cpus=[allowed[0]])[:, 0], [16] * 3)
    try:
        stemdot.describe_plan(gpus=1)
    except stemdot.CUDAUnavailableError as e:
        assert "GPU" in str(e)


def test_oversubscribe_and_partition_size():
    """More CPU workers than usable cores are refused with the keyword that allows them,
    and run (with a warning) when it is given; partition_size sets the partitions."""
    usable = stemdot.describe_plan()["cores_usable"]
    frames = np.arange(5 * 4 * 4, dtype=np.uint16).reshape(5, 4, 4)
    with pytest.raises(stemdot.PlanError, match=r"^planner: .*pass option oversubscribe") as e:
        stemdot.apply_masks(frames, np.ones((1, 4, 4)), cpus=usable + 1)
    assert not str(e.value).startswith("stemdot_")
    with pytest.warns(UserWarning, match="oversubscribed"):
        out = stemdot.apply_masks(frames, np.ones((1, 4, 4)), cpus=usable + 1, oversubscribe=True)
    np.testing.assert_array_equal(out[:, 0], frames.reshape(5, -1).sum(axis=1))
    with stemdot.from_array(np.zeros((64, 16, 16), np.float32)) as ds:
        # 64 frames of 1 KiB (decoded float32): 4 KiB partitions hold 4 frames each.
        plan = stemdot.describe_plan(cpus=1, dataset=ds, partition_size="4KiB")
    assert plan["partitions"][0] == [0, 4] and len(plan["partitions"]) == 16
    with pytest.raises(stemdot.InvalidArgumentError, match="oversubscribe"):
        stemdot.describe_plan(oversubscribe="yes")
    with pytest.raises(stemdot.InvalidArgumentError, match="partition_size"):
        stemdot.describe_plan(partition_size="lots")


def test_closed_dataset_raises():
    ds = stemdot.from_array(np.zeros((2, 4, 4), np.uint8))
    ds.close()
    ds.close()  # idempotent
    assert ds.closed
    with pytest.raises(stemdot.BadHandleError, match="closed"):
        stemdot.apply_masks(ds, np.ones((1, 4, 4)))


def test_close_during_apply_is_refused_and_the_apply_completes():
    rng = np.random.default_rng(11)
    frames = rng.integers(0, 1000, size=(64, 32, 32), dtype=np.uint16)
    masks = rng.random((2, 32, 32), dtype=np.float32)
    ds = stemdot.from_array(frames)
    refused = []

    def on_progress(done, total):
        if not refused:
            with pytest.raises(stemdot.InvalidArgumentError, match="in use by a running apply"):
                ds.close()
            refused.append(True)

    got = stemdot.apply_masks(ds, masks, progress=on_progress)
    assert refused and not ds.closed
    want = np.einsum("fyx,myx->fm", frames.astype(np.float64), masks.astype(np.float64))
    np.testing.assert_allclose(got.reshape(-1, 2), want, rtol=1e-5)
    ds.close()
    assert ds.closed


def test_open_rejects_malformed_arguments(tmp_path):
    path = tmp_path / "x.raw"
    np.zeros((2, 4, 4), np.uint16).tofile(path)
    with pytest.raises(TypeError):
        stemdot.open(None)
    with pytest.raises(ValueError, match="NUL"):
        stemdot.open(str(path) + "\0.mib")
    with pytest.raises(TypeError):
        stemdot.open(path, format="raw", sig_shape=(4.5, 4), dtype="uint16")
    with pytest.raises(ValueError, match="contains"):
        stemdot.open(path, format="raw", sig_shape="4,4;offset=8", dtype="uint16")
    with pytest.raises(stemdot.ShapeError, match=r'option sig_shape "4": want 2 comma-separated sizes'):
        stemdot.open(path, format="raw", sig_shape=(4,), dtype="uint16")
    with stemdot.open(path, format="raw", sig_shape="(4, 4)", dtype=np.uint16) as ds:  # the CLI's forms too
        assert ds.sig_shape == (4, 4)
    with pytest.raises(ValueError, match="contains"):
        stemdot.open(path, format="raw;offset=8", sig_shape=(4, 4), dtype="uint16")
    with stemdot.open(path, format="raw", sig_shape=(4, 4), dtype="uint16", offset=0) as ds:
        assert ds.n_frames == 2


def test_com_shifts():
    """Shift maps in pixels about the default reference point (sig_x//2, sig_y//2), as
    the CLI's --com-shifts, against numpy."""
    rng = np.random.default_rng(9)
    frames = rng.poisson(3, (3, 2, 6, 8)).astype(np.uint16)
    frames[2, 1] = 0  # no counts: no centre of mass
    masks = np.concatenate([stemdot.disk((6, 8), 3, 3, 2), stemdot.com((6, 8))])
    img = stemdot.apply_masks(frames, masks, dtype=np.float64)
    shifts = stemdot.com_shifts(img, 1)
    assert shifts.shape == (3, 2, 2)
    y, x = np.mgrid[0:6, 0:8]
    f = frames.astype(np.float64)
    s = f.sum(axis=(-2, -1))
    with np.errstate(invalid="ignore"):
        want_y = (f * (y - 3)).sum(axis=(-2, -1)) / s
        want_x = (f * (x - 4)).sum(axis=(-2, -1)) / s
    np.testing.assert_allclose(shifts[..., 0], want_y, rtol=1e-12)
    np.testing.assert_allclose(shifts[..., 1], want_x, rtol=1e-12)
    assert np.isnan(shifts[2, 1]).all()
    np.testing.assert_array_equal(stemdot.com_shifts(img, -3), shifts)  # counted from the end, as numpy's indices
    np.testing.assert_array_equal(stemdot.com_shifts(img[..., 1:], 0), shifts)
    # #33.3: the index as given, not as counted from the end ("index 2" for -2)
    for index in (2, 3, -1, -2, -5, 2**40):
        with pytest.raises(stemdot.InvalidArgumentError, match=rf"^com_shifts: index {index}: the com masks are 3 columns "
                           r"from index \(sum, y moment, x moment\), but the result has 4 masks \(columns 0 to 3\): give "
                           r"an index from 0 to 1 \(or -4 to -3, counted from the end\)$"):
            stemdot.com_shifts(img, index)
    with pytest.raises(stemdot.InvalidArgumentError, match=r"index -1: .* has 2 masks .*: apply the com masks"):
        stemdot.com_shifts(img[..., :2], -1)


def test_sizes_and_indices_are_reported_as_given():
    """#33.3: a negative sig size reached the library as 2^64 − 1 and was reported so; a
    GPU index of 2^32 + 1 was passed as GPU 1 (ctypes' int wraps); scan positions and
    frame ranges name what was given."""
    for call in (lambda: stemdot.disk((-1, 8), 1, 1, 1), lambda: stemdot.mask("com", (-1, 8)),
                 lambda: stemdot.mask_stack((-1, 8), specs="com")):
        with pytest.raises(stemdot.ShapeError, match=r"^sig_shape \(-1, 8\): want two sizes \(sig_y, sig_x\), each from 1"):
            call()
    frames = np.ones((3, 4, 8, 8), np.uint16)
    with stemdot.from_array(frames) as ds:
        for device in (-1, 2**32 + 1):
            with pytest.raises(stemdot.InvalidArgumentError, match=rf"^device {device}: GPU devices are numbered from 0$"):
                ds.to_device(device)
    with pytest.raises(stemdot.ShapeError, match=r"scan position \(-1, 0\) is outside the nav shape \(3, 4\)"):
        stemdot.pick(frames, [(-1, 0)])


def test_mask_argument_order():
    np.testing.assert_array_equal(stemdot.mask("point:1,2", (4, 4))[0].nonzero(), ([2], [1]))
    with pytest.raises(TypeError, match=r"mask\(spec, sig_shape\)"):
        stemdot.mask((32, 32), "disk:16,16,5")


def test_mask_stack_single_arguments_and_errors(tmp_path):
    np.save(tmp_path / "m.npy", np.arange(15.0).reshape(3, 5))
    masks, names = stemdot.mask_stack((3, 5), files=tmp_path / "m.npy", specs="point:1,2", dtype=np.float64)
    assert masks.dtype == np.float64 and names == ["m", "point"]
    np.testing.assert_array_equal(masks[0], np.arange(15.0).reshape(3, 5))
    np.testing.assert_array_equal(masks[1].nonzero(), ([2], [1]))
    with pytest.raises(stemdot.InvalidArgumentError, match="no masks"):
        stemdot.mask_stack((3, 5))
    with pytest.raises(stemdot.StemdotIOError, match="missing.npy"):
        stemdot.mask_stack((3, 5), files=[tmp_path / "missing.npy"])
    with pytest.raises(stemdot.ShapeError, match=r"m.npy: masks of shape \(3, 5\) do not match"):
        stemdot.mask_stack((5, 3), files=[tmp_path / "m.npy"], specs=["com"])
    with pytest.raises(stemdot.InvalidArgumentError, match="disk:1"):
        stemdot.mask_stack((3, 5), specs=["disk:1"])


def test_mask_stack_names_are_the_files_as_named(tmp_path):
    """The masks' names are data, not a message: a file named like a Go option name
    (Plan.GPUs.npy) gives the mask "Plan.GPUs", not "option gpus" (the C ABI rewrites
    option names in its messages and warnings only)."""
    for name in ("Plan.GPUs", "Options.NavShape"):
        np.save(tmp_path / f"{name}.npy", np.ones((3, 5), np.float32))
    _, names = stemdot.mask_stack((3, 5), files=[tmp_path / "Plan.GPUs.npy", tmp_path / "Options.NavShape.npy"])
    assert names == ["Plan.GPUs", "Options.NavShape"]


def test_a_library_without_a_function_of_this_package_is_refused_by_name():
    """A library lacking a function the package calls (an older build at STEMDOT_LIB,
    e.g. without stemdot_mask_stack) gives an ImportError that says so."""
    import _ctypes

    code = "import stemdot; stemdot.library_path"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "STEMDOT_LIB": _ctypes.__file__})
    assert run.returncode != 0 and "ImportError" in run.stderr, run.stderr
    assert "lacks a function this package calls" in run.stderr and "rebuild it" in run.stderr, run.stderr


def test_open_warns_what_the_cli_warns(data_dir):
    """A scan shape the file cannot fill is read as far as it goes, with a warning."""
    path = data_dir / "mib" / "001_4x2_6bit.mib"
    with pytest.warns(UserWarning, match="8 frames"):
        ds = stemdot.open(path, nav_shape=(3, 3))
    with ds:
        assert ds.nav_shape == (2, 3)
    with pytest.warns(UserWarning, match="nav_shape"):
        stemdot.open(path).close()  # no scan shape in the file: one row, with a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stemdot.open(path, nav_shape=(2, 4)).close()


def test_open_allow_fill_keyword(data_dir):
    """allow_fill (HDF5: read missing storage as the fill value) reaches the library: a
    boolean, ignored with a warning for another format."""
    path = data_dir / "mib" / "001_4x2_6bit.mib"
    with pytest.warns(UserWarning, match="option allow_fill applies to HDF5 files only and was ignored"):
        stemdot.open(path, nav_shape=(2, 4), allow_fill=True).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stemdot.open(path, nav_shape=(2, 4), allow_fill=False).close()
    with pytest.raises(stemdot.InvalidArgumentError, match='option allow_fill "maybe": not a boolean'):
        stemdot.open(path, allow_fill="maybe")


def test_gpus_auto_without_gpu_warns():
    """gpus="auto" uses the GPUs that are there: without one, CPU workers and a warning."""
    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("this machine has an NVIDIA driver")
    frames = np.ones((3, 4, 4), np.uint8)
    with pytest.warns(UserWarning, match="gpus auto: .*CPU workers only"):
        img = stemdot.apply_masks(frames, np.ones((1, 4, 4)), gpus="auto")
    np.testing.assert_array_equal(img[:, 0], [16] * 3)
    assert "CPU workers only" in stemdot.describe_plan(gpus="auto")["warnings"][0]


def test_pickled_dataset_opens_its_file_again(data_dir, tmp_path):
    """A dataset opened from a file pickles as its path and options (the handle number
    means nothing in another process); one made from an array refuses to pickle."""
    path = data_dir / "mib" / "001_4x2_6bit.mib"
    masks = stemdot.disk((256, 256), 42, 126, 30)
    cwd = os.getcwd()
    os.chdir(path.parent)  # opened by a relative path: the pickle holds the absolute one
    try:
        with stemdot.open(path.name, nav_shape=(2, 4)) as ds:
            want = stemdot.apply_masks(ds, masks)
            blob = pickle.dumps(ds)
    finally:
        os.chdir(cwd)
    (tmp_path / "ds.pickle").write_bytes(blob)
    np.save(tmp_path / "masks.npy", masks)
    # Another process, which has opened another file first (its handle 1 is not ours).
    other = data_dir / "mib" / "Single_9_Frame_CounterDepth_6_Rows_256.mib"
    code = (
        "import pickle, sys, numpy as np, stemdot\n"
        f"keep = stemdot.open({str(other)!r})\n"
        f"ds = pickle.loads(open({str(tmp_path / 'ds.pickle')!r}, 'rb').read())\n"
        f"np.save({str(tmp_path / 'got.npy')!r}, stemdot.apply_masks(ds, np.load({str(tmp_path / 'masks.npy')!r})))\n"
        "print(ds.nav_shape)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "(2, 4)"
    np.testing.assert_array_equal(np.load(tmp_path / "got.npy"), want)
    with stemdot.from_array(np.zeros((2, 4, 4), np.uint8)) as ds:
        with pytest.raises(TypeError, match="pickle the array"):
            pickle.dumps(ds)


def test_cuda_library_loads():
    """The repository's build/libstemdot.so (make capi: built with CUDA where nvcc is found)
    loads, or, when glibc cannot place its static CUDA runtime's thread-local storage in a
    library loaded after start-up, refuses with an ImportError naming LD_PRELOAD, which
    then works."""
    lib = Path(__file__).resolve().parents[2] / "build" / "libstemdot.so"
    if not lib.is_file():
        pytest.skip(f"{lib} not built (make capi)")
    code = (
        "import numpy as np, stemdot\n"
        "with stemdot.from_array(np.ones((2, 3, 4), np.uint16)) as ds:\n"
        "    print(stemdot.apply_masks(ds, np.ones((1, 3, 4), np.float32)).ravel())\n"
    )
    env = {**os.environ, "STEMDOT_LIB": str(lib)}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if run.returncode != 0:
        assert "ImportError" in run.stderr and f"LD_PRELOAD={lib}" in run.stderr, run.stderr
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**env, "LD_PRELOAD": str(lib)})
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["[12.", "12.]"]


# ------------------------------------------------------------------ issue 17


def write_mib(path, frames, scan_x=None, scan_y=None):
    """Writes frames (n, sy, sx) as a U16 Merlin MIB file (384-byte frame headers in the
    layout of the real files, big-endian pixels) and, with scan_x and scan_y, a .hdr."""
    n, sy, sx = frames.shape
    with open(path, "wb") as f:
        for i in range(n):
            head = (f"MQ1,{i + 1:06d},00384,01,{sx:04d},{sy:04d},U16,   1x1,01,2024-07-02 13:46:44.000000,0.001000,"
                    "0,0,0,4.000000E+1,5.110000E+2,0,0,0,0,0,0,3RX,MQ1A,2024-07-02T13:46:44.000000000Z,1000000ns,12,").encode()
            f.write(head + bytes(384 - len(head)))
            f.write(frames[i].astype(">u2").tobytes())
    if scan_x is not None:
        Path(path).with_suffix(".hdr").write_text(f"HDR,\t\nScanX:\t{scan_x}\nScanY:\t{scan_y}\nEnd\t\n")


def test_nav_shape_contradicting_the_file_is_refused(tmp_path):
    # #17.5: a 4-D NPY gives its scan shape; a nav shape of other positions is refused.
    frames = np.arange(2 * 3 * 4 * 5, dtype=np.uint16).reshape(2, 3, 4, 5)
    path = tmp_path / "scan.npy"
    np.save(path, frames)
    with pytest.raises(stemdot.ShapeError, match=r"nav shape \(2, 2\) \(option nav_shape\) has 4 positions, but the file's scan shape \(2, 3\)"):
        stemdot.open(path, nav_shape=(2, 2))
    with stemdot.open(path, nav_shape=(3, 2)) as ds:
        assert ds.nav_shape == (3, 2)
        got = stemdot.apply_masks(ds, np.ones((1, 4, 5)), dtype=np.float64)
    np.testing.assert_array_equal(got[..., 0], frames.reshape(3, 2, 4, 5).astype(np.float64).sum(axis=(2, 3)))


def npy_by_hand(path, descr, shape, data, newline=True):
    """An NPY 1.0 file whose header dict says descr and shape, written as other writers
    than numpy's may write it: descr as given, the '\\n' at its end only with newline."""
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    d += " " * ((-(10 + len(d) + 1)) % 64) + ("\n" if newline else " ")
    Path(path).write_bytes(b"\x93NUMPY\x01\x00" + len(d).to_bytes(2, "little") + d.encode("latin-1") + data)


def test_npy_headers_numpy_reads(tmp_path):
    # #17r D8: headers numpy reads though its writer does not write them (a descr without
    # byte order, a type code or name; no '\n' at the end) are read as np.load reads them,
    # frames and mask files alike; bytes after the array's data, which np.load ignores,
    # are refused saying how many.
    rng = np.random.default_rng(8)
    frames = rng.integers(0, 4000, size=(2, 3, 6, 5)).astype("<u2")
    weights = rng.random((2, 6, 5)).astype("<f4")
    for descr, mask_descr, newline in [("u2", "f4", True), ("H", "f", True), ("uint16", "float32", True),
                                       ("=u2", "=f4", True), ("<u2", "<f4", False)]:
        path, mpath = tmp_path / ("f_%s.npy" % descr), tmp_path / ("m_%s.npy" % mask_descr)
        npy_by_hand(path, descr, "(2, 3, 6, 5)", frames.tobytes(), newline)
        npy_by_hand(mpath, mask_descr, "(2, 6, 5)", weights.tobytes(), newline)
        np.testing.assert_array_equal(np.load(path), frames)  # what numpy reads
        masks, _ = stemdot.mask_stack((6, 5), [str(mpath)])
        np.testing.assert_array_equal(masks, np.load(mpath))
        with stemdot.open(path) as ds:
            assert ds.nav_shape == (2, 3) and ds.dtype == np.uint16
            got = stemdot.apply_masks(ds, masks, dtype=np.float64)
        want, scale = reference(np.load(path), np.load(mpath))
        assert_close(got, want, scale, np.float64)
    npy_by_hand(tmp_path / "long.npy", "<u2", "(2, 3, 6, 5)", frames.tobytes() + b"xyz")
    npy_by_hand(tmp_path / "mlong.npy", "<f4", "(2, 6, 5)", weights.tobytes() + b"xyz")
    np.testing.assert_array_equal(np.load(tmp_path / "long.npy"), frames)
    tail = "3 bytes after the array's data: the header's shape %s and dtype '%s' make %d bytes of data from byte 128 to byte %d"
    with pytest.raises(stemdot.FormatError, match=re.escape(tail % ((2, 3, 6, 5), "<u2", frames.nbytes, 128 + frames.nbytes))):
        stemdot.open(tmp_path / "long.npy")
    with pytest.raises(stemdot.FormatError, match=re.escape(tail % ((2, 6, 5), "<f4", weights.nbytes, 128 + weights.nbytes))):
        stemdot.mask_stack((6, 5), [str(tmp_path / "mlong.npy")])


def test_flyback_frames(tmp_path):
    # #17.6: Merlin with line skip, (ScanX+1)·ScanY frames; the flyback frames are bright,
    # not blank, and their headers alike: nothing tells where they lie, refused (#33).
    w, h = 4, 8
    rng = np.random.default_rng(270)
    frames = rng.integers(0, 9, size=((w + 1) * h, 6, 7)).astype(np.uint16)
    frames[w :: w + 1] = 5000
    path = tmp_path / "scan.mib"
    write_mib(path, frames, scan_x=w, scan_y=h)
    masks = np.stack([np.ones((6, 7)), rng.random((6, 7))])
    rows = frames.reshape(h, w + 1, 6, 7)
    with pytest.raises(stemdot.ShapeError, match="give option flyback start or option flyback end"):
        stemdot.open(path)
    for option, want in [("end", rows[:, :w]), ("start", rows[:, 1:])]:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with stemdot.open(path, flyback=option) as ds:
                assert ds.nav_shape == (h, w)
                got = stemdot.apply_masks(ds, masks, dtype=np.float64)
        want_result, scale = reference(want, masks)
        assert_close(got, want_result, scale, np.float64)
        assert not any("flyback" in str(x.message) for x in seen), [str(x.message) for x in seen]
    with pytest.raises(stemdot.InvalidArgumentError, match="option flyback"):
        stemdot.open(path, flyback="sideways")


def test_sync_offset_extremes_are_refused(tmp_path):
    # #17.7: -2**63 passed the range check (its negation overflows).
    path = tmp_path / "x.raw"
    path.write_bytes(bytes(10 * 16))
    for offset in (-(2**63), 2**63 - 1, -10):
        with pytest.raises(stemdot.InvalidArgumentError, match=f"sync offset {offset} \\(option sync_offset\\) is outside -9 to 9"):
            stemdot.open(path, sig_shape=(4, 4), dtype=np.uint8, sync_offset=offset)
    with pytest.raises(stemdot.InvalidArgumentError, match="want a whole number of frames"):
        stemdot.open(path, sig_shape=(4, 4), dtype=np.uint8, sync_offset=2**64)


def test_file_truncated_before_apply_is_an_io_error(tmp_path):
    # #17.2: a memory-mapped NPY cut short after open: an I/O error naming it, no crash.
    path = tmp_path / "scan.npy"
    np.save(path, np.arange(64 * 64 * 64, dtype=np.float32).reshape(64, 64, 64))
    size = path.stat().st_size
    with stemdot.open(path) as ds:
        os.truncate(path, size // 10)
        with pytest.raises(stemdot.StemdotIOError) as e:
            stemdot.apply_masks(ds, np.ones((2, 64, 64)), cpus=1)
    assert isinstance(e.value, OSError) and e.value.code == 2
    assert f"dataset: {path}: the file changed while being read: it is now {size // 10} bytes, {size} when it was opened" in str(e.value)
    assert "goroutine" not in str(e.value)


TRUNCATE_DURING_APPLY = """
import os, sys, threading
import numpy as np
import stemdot
path, out = sys.argv[1], sys.argv[2]
masks = np.random.default_rng(53).random((512, 64, 64), dtype=np.float32)
ds = stemdot.open(path)
cut = threading.Event()
def progress(done, total):
    if not cut.is_set():
        cut.set()
        os.truncate(path, os.path.getsize(path) // 10)
try:
    result = stemdot.apply_masks(ds, masks, cpus=2, oversubscribe=True, progress=progress)
except stemdot.StemdotIOError as e:
    print("IOError:", e)
else:
    np.save(out, result)
    print("no error")
ds.close()
print("alive")
"""


def test_file_truncated_during_apply_is_an_io_error(tmp_path):
    # #17.2: the file cut while the workers read it in place (the fault, SIGBUS, is
    # recovered in the library, or the next size check finds it): an I/O error, and the
    # interpreter lives (it used to die with status 134). The cut comes at the first
    # progress report, which a loaded machine may deliver after the workers read the last
    # frame: then the run must give the whole file's result (checked against float64),
    # and the cut is tried again, up to 5 times, until it lands while frames are left.
    path = tmp_path / "scan_le.npy"
    frames = np.random.default_rng(1).poisson(5, (2048, 64, 64)).astype(np.float32)
    masks = np.random.default_rng(53).random((512, 64, 64), dtype=np.float32)
    want = frames.reshape(2048, -1).astype(np.float64) @ masks.reshape(512, -1).T.astype(np.float64)
    for attempt in range(5):
        np.save(path, frames)
        out = tmp_path / f"result{attempt}.npy"
        proc = subprocess.run([sys.executable, "-c", TRUNCATE_DURING_APPLY, str(path), str(out)], capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        lines = proc.stdout.splitlines()
        assert lines[-1] == "alive" and len(lines) == 2, proc.stdout
        assert "goroutine" not in proc.stdout + proc.stderr
        if lines[0] != "no error":
            break
        np.testing.assert_allclose(np.load(out), want, rtol=1e-5)
    assert lines[0].startswith("IOError: worker "), lines[0]
    assert f"dataset: {path}: the file changed while being read: it is now " in lines[0]


MEMORY_FAULT = """
import os, sys
import numpy as np
import stemdot
path = sys.argv[1]
frames = np.memmap(path, dtype=np.float32, mode="r", shape=(256, 64, 64))
ds = stemdot.from_array(frames)  # the frames are read in place, from the file's mapping
os.truncate(path, 100)
try:
    stemdot.apply_masks(ds, np.ones((1, 64, 64)), cpus=1)
except stemdot.StemdotError as e:
    print(type(e).__name__, str(e).splitlines()[0])
print("alive")
"""


def test_memory_fault_in_the_library_is_recovered(tmp_path):
    # #17.2: a worker's memory fault (SIGBUS: numpy's mapping of a file truncated under
    # from_array) is recovered in the C library too, as in a Go program: an error, and
    # the interpreter lives. #17r D3: an I/O error that says where the caller's memory
    # became unreadable, without a Go stack.
    path = tmp_path / "frames.f32"
    np.arange(256 * 64 * 64, dtype=np.float32).tofile(path)
    proc = subprocess.run([sys.executable, "-c", MEMORY_FAULT, str(path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[-1] == "alive" and len(lines) == 2, proc.stdout
    assert re.fullmatch(r"StemdotIOError worker 0 \(cpu \d+\): frames \[\d+, \d+\): dataset: in-memory data: the frames' memory "
                        r"became unreadable at byte \d+ of the buffer of 4194304 bytes \(e\.g\. a memory-mapped file truncated by "
                        r"another program\)", lines[0]), lines[0]
    assert "goroutine" not in proc.stdout + proc.stderr

FORK_SCRIPT = r"""
import ctypes, json, multiprocessing as mp, numpy as np, stemdot

def child(queue):
    try:
        stemdot.apply_masks(np.ones((2, 4, 4), np.uint16), np.ones((1, 4, 4)))
        queue.put("no error")
    except stemdot.ForkedProcessError as e:
        queue.put(str(e))
    # the library's own check, in C, before Go is entered (bypassing Python's)
    lib, handle = stemdot._LIB._cdll, ctypes.c_uint64(7)
    code = lib.stemdot_dataset_from_memory(np.ones(32, np.uint16).ctypes.data, 64, 2, 1,
                                           (ctypes.c_size_t * 1)(2), 4, 4, ctypes.byref(handle))
    queue.put([code, handle.value, lib.stemdot_last_error().decode()])

if __name__ == "__main__":
    frames = np.arange(2 * 16, dtype=np.uint16).reshape(2, 4, 4)
    out = {"before": stemdot.apply_masks(frames, np.ones((1, 4, 4))).ravel().tolist()}  # the parent uses it
    fork = mp.get_context("fork")
    queue = fork.SimpleQueue()
    p = fork.Process(target=child, args=(queue,))
    p.start()
    p.join(60)
    if p.is_alive():
        p.kill()
        out["child"] = "hangs"
    else:
        out["child"] = {"exitcode": p.exitcode, "python": queue.get(), "c": queue.get()}
    out["after"] = stemdot.apply_masks(frames, np.ones((1, 4, 4))).ravel().tolist()  # and still can
    print(json.dumps(out))
"""


def test_forked_child_is_refused_not_hung(tmp_path):
    """A multiprocessing child started with "fork" after the parent used stemdot gets
    ForkedProcessError at once (the Go runtime does not survive fork: it would hang),
    from Python's check and from the library's own; the parent goes on working."""
    script = tmp_path / "forked.py"
    script.write_text(FORK_SCRIPT)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["before"] == out["after"] == [120.0, 376.0]
    child = out["child"]
    assert child != "hangs", "the forked child hangs in the library"
    assert child["exitcode"] == 0
    assert "forked from one that had loaded it" in child["python"] and "'spawn'" in child["python"], child
    code, handle, message = child["c"]
    assert (code, handle) == (stemdot._lib.ERR_FORKED, 0), child
    assert message.startswith("stemdot_dataset_from_memory: stemdot cannot be used in a process forked"), message
    assert "'spawn'" in message


def test_shape_and_integer_options_take_numpy_values(data_dir):
    """#17 D9: shape options take any sequence of integers (numpy arrays and numpy
    integers included), integer options ints and numpy integers, as the CLI takes their
    text; floats are refused naming the option, an empty string as not given."""
    path = data_dir / "mib" / "001_4x2_6bit.mib"
    raw = read_mib(path).astype(np.float64)  # 8 frames
    disk = stemdot.disk((256, 256), 128, 128, 40)
    want = np.einsum("fyx,yx->f", raw, disk[0].astype(np.float64))
    for options, nav, frames in (
        (dict(nav_shape=np.array([2, 4])), (2, 4), slice(0, 8)),
        (dict(nav_shape=[np.int64(4), np.int32(2)]), (4, 2), slice(0, 8)),
        (dict(nav_shape=np.array([8]), frames=np.array([2, 5])), (5,), slice(2, 7)),
        (dict(nav_shape=(2, 4), frames=(np.uint8(1), np.int16(3))), (3,), slice(1, 4)),
        # The nav shape kept (LiberTEM's sync_offset): the last 2 positions have no frame, 0.
        (dict(nav_shape=np.array([2, 4]), sync_offset=np.int64(2)), (2, 4), [2, 3, 4, 5, 6, 7, 8, 8]),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the sync offset's note
            ds = stemdot.open(path, **options)
        with ds:
            assert ds.nav_shape == nav, options
            got = stemdot.apply_masks(ds, disk)[..., 0].ravel()
        np.testing.assert_array_equal(got, np.append(want, 0)[frames].astype(np.float32), err_msg=str(options))
    for options, message in (
        (dict(nav_shape=np.array([2.0, 4.0])), r"option nav_shape=array\(\[2., 4.\]\): want a sequence of integers such as \(64, 64\), not of float"),
        (dict(nav_shape=(2, 4), sync_offset=1.0), "option sync_offset=1.0: want an integer, a string or a sequence of integers, not float"),
        (dict(nav_shape=(2, 4), frames=np.array([[1, 2]])), "option frames=.*: want a sequence of integers"),
    ):
        with pytest.raises(TypeError, match=message):
            stemdot.open(path, **options)
    with pytest.raises(stemdot.InvalidArgumentError, match=r"option nav_shape='' is empty: give a value, or leave the option out"):
        stemdot.open(path, nav_shape="")


def test_masks_of_an_unsupported_dtype_are_refused_for_it(tmp_path):
    """#17 D9: masks of object (or complex, string) dtype are refused as such, naming the
    dtypes that are supported, whatever their shape: an object NPY file of shape (1, 1)
    was refused as masks of the wrong shape."""
    obj = np.empty((1, 1), dtype=object)
    obj[0, 0] = 1.0
    np.save(tmp_path / "obj.npy", obj, allow_pickle=True)
    with pytest.raises(stemdot.DTypeError, match=r"obj.npy: dtype '\|O' \(Python objects\) is not supported for masks \(want bool, int8..int64, uint8..uint64, float32 or float64"):
        stemdot.mask_stack((256, 256), files=[tmp_path / "obj.npy"])
    frames = np.zeros((2, 4, 4), np.uint8)
    for masks, what in ((np.ones((1, 4, 4), dtype=object), "object \\(Python objects\\)"), (np.ones((1, 1), np.complex64), "complex64 \\(complex\\)"),
                        (np.array([["a"]]), "<U1 \\(strings\\)")):
        with pytest.raises(stemdot.DTypeError, match=f"masks of dtype {what} are not supported: want bool, integer or float weights"):
            stemdot.apply_masks(frames, masks)
