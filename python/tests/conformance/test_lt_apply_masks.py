"""ApplyMasksUDF against stemdot.apply_masks: mask dtypes and byte orders, dense and sparse
stacks, mask factories and mask_count, shifts, ROI, sync offsets, non-square signals, 3-D
scans, tiles of single frames; after LiberTEM's tests/analysis/test_analysis_masks.py."""
import numpy as np
import pytest

from ltcommon import (ApplyMasksUDF, assert_agree, difference, lt_masks, lt_memory, mk_random, quiet, random_frames,
                      scipy, sparse, stemdot)


def masks_of(sig_shape, n=2, dtype=np.float32, seed=1):
    """n random masks (n, sig_y, sig_x) of dtype: 0/1 for bool, integers spanning the
    dtype's range (up to ±2**31 for 64-bit ones), uniform floats otherwise."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    shape = (n,) + tuple(sig_shape)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -2**31), min(info.max, 2**31), shape, endpoint=True).astype(dt)
    return (rng.random(shape) * 2 - 0.5).astype(dt)


def ring(sig_shape, cy, cx, ro, ri=None):
    """1 where ri² < (y − cy)² + (x − cx)² ≤ ro² (a disk without ri), float32."""
    y, x = np.ogrid[:sig_shape[0], :sig_shape[1]]
    d2 = (y - cy) ** 2 + (x - cx) ** 2
    return ((d2 <= ro * ro) & (d2 > (ri * ri if ri is not None else -1))).astype(np.float32)


MASK_DTYPES = ["bool", "u1", "i1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8", ">f4", ">i2", ">u4", ">f8"]


@pytest.mark.parametrize("mask_dtype", MASK_DTYPES)
def test_mask_dtypes(ctx, mask_dtype):
    """Every real mask dtype, both byte orders: LiberTEM's result dtype (float32, or float64
    for 32- and 64-bit integer and float64 masks) asked of stemdot, the same values."""
    data = random_frames((4, 5, 16, 12), "uint16")
    masks = masks_of((16, 12), 3, mask_dtype)
    want = lt_masks(ctx, data, lambda: masks)
    got = stemdot.apply_masks(data, masks, dtype=want.dtype)
    assert got.dtype == want.dtype
    assert_agree(got, want, rtol=1e-12 if want.dtype == np.float64 else 1e-6, what=f"{mask_dtype} masks")


@pytest.mark.parametrize("data_dtype", ["u1", "u2", "u4", "i1", "i2", "i4", "f4", "f8", ">u2", ">i4", ">f4"])
def test_data_dtypes(ctx, data_dtype):
    """Every frame dtype stemdot reads, either byte order, with float32 masks; LiberTEM's
    result dtype (float64 for 32-bit integer and float64 frames) asked of stemdot."""
    data = mk_random((5, 4, 16, 16), "float64", seed=2)
    data = (data * (-1 if np.dtype(data_dtype).kind == "i" else 1)).astype(data_dtype)
    masks = masks_of((16, 16), 2, np.float32)
    want = lt_masks(ctx, data, lambda: masks)
    got = stemdot.apply_masks(data, masks, dtype=want.dtype)
    assert_agree(got, want, rtol=1e-6, what=f"{data_dtype} frames")


def _factories(kind, sig_shape):
    """The same three masks (a ring, a random dense mask, a disk) as LiberTEM's
    mask_factories of one kind, and mask_count where LiberTEM needs it."""
    stack = np.stack([ring(sig_shape, 7, 5, 6, 3), masks_of(sig_shape, 1, np.float32, seed=3)[0],
                      ring(sig_shape, 8, 6, 4)])
    if kind == "dense list":
        return [lambda m=m: m for m in stack], None
    if kind == "scipy.sparse.csr list":
        return [lambda m=m: scipy.sparse.csr_matrix(m) for m in stack], None
    if kind == "scipy.sparse.csc list":
        return [lambda m=m: scipy.sparse.csc_matrix(m) for m in stack], None
    if kind == "sparse.COO stack":
        return (lambda: sparse.COO.from_numpy(stack)), 3
    if kind == "dense stack":
        return (lambda: stack), 3
    if kind == "mixed list":
        return [lambda: sparse.COO.from_numpy(stack[0]), lambda: stack[1], lambda: scipy.sparse.csr_matrix(stack[2])], None
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["dense list", "scipy.sparse.csr list", "scipy.sparse.csc list", "sparse.COO stack",
                                  "dense stack", "mixed list"])
def test_mask_factories(ctx, kind):
    """The mask_factories LiberTEM takes (a list of factories of one mask each, dense or
    sparse; one factory of a stack with mask_count), given to stemdot as they are."""
    data = mk_random((6, 5, 18, 12), "float32", seed=4)
    factories, count = _factories(kind, (18, 12))
    want = lt_masks(ctx, data, factories, mask_count=count)
    assert_agree(stemdot.apply_masks(data, factories), want, what=kind)


@pytest.mark.parametrize("use_sparse", [True, False, "scipy.sparse", "scipy.sparse.csc", "sparse.pydata",
                                        "sparse.pydata.GCXS"])
def test_use_sparse(ctx, use_sparse):
    """LiberTEM's use_sparse backends all give stemdot's result (stemdot picks sparse or
    dense by the masks' density)."""
    data = mk_random((5, 6, 18, 12), "float32", seed=5)
    factories, _ = _factories("dense list", (18, 12))
    want = lt_masks(ctx, data, factories, use_sparse=use_sparse)
    assert_agree(stemdot.apply_masks(data, factories), want, what=f"use_sparse={use_sparse}")


def test_mask_count_and_dtype(ctx):
    """mask_count and mask_dtype=float32 on float64 masks: float32 results in both."""
    data = random_frames((4, 4, 16, 16), "uint16", seed=6)
    masks = masks_of((16, 16), 4, np.float64)
    want = lt_masks(ctx, data, lambda: masks, mask_count=4, mask_dtype=np.float32)
    assert want.dtype == np.float32
    assert_agree(stemdot.apply_masks(data, masks), want, rtol=1e-6)


@pytest.mark.parametrize("sig_shape", [(18, 12), (32, 64), (1, 37), (37, 1)])
def test_non_square_signals(ctx, sig_shape):
    data = mk_random((3, 4) + sig_shape, "float32", seed=7)
    masks = masks_of(sig_shape, 2, np.float32)
    assert_agree(stemdot.apply_masks(data, masks), lt_masks(ctx, data, lambda: masks))


@pytest.mark.parametrize("nav_shape", [(24,), (2, 3, 4), (256,)])
def test_nav_ranks(ctx, nav_shape):
    """1-D and 3-D scans (a time series, a 5-D array) keep their nav shape in both."""
    data = mk_random(nav_shape + (16, 16), "float32", seed=8)
    masks = masks_of((16, 16), 2, np.float32)
    want = lt_masks(ctx, data, lambda: masks)
    assert want.shape == nav_shape + (2,)
    assert_agree(stemdot.apply_masks(data, masks), want)


def test_single_frame_tiles(ctx):
    """LiberTEM's tiles of one frame and stemdot's partitions of about one frame."""
    data = random_frames((4, 6, 16, 16), "uint16", seed=9)
    masks = masks_of((16, 16), 3, np.float32)
    ds = lt_memory(ctx, data, tileshape=(1, 16, 16), num_partitions=6)
    want = lt_masks(ctx, ds, lambda: masks)
    assert_agree(stemdot.apply_masks(data, masks, partition_size=16 * 16 * 4), want, rtol=1e-6)


def test_float32_dynamic_range(ctx):
    """Frames spanning 6 decades (LiberTEM's test_numerics): stemdot's float32 result is
    within 1e-6 of the float64 product and within LiberTEM's float32 rounding of LiberTEM's."""
    rng = np.random.default_rng(10)
    data = (10.0 ** rng.uniform(0, 6, (2, 2, 256, 256))).astype(np.float32)
    masks = np.stack([np.ones((256, 256), np.float32), (10.0 ** rng.uniform(-3, 3, (256, 256))).astype(np.float32)])
    exact = np.einsum("abyx,myx->abm", data.astype(np.float64), masks.astype(np.float64))
    got = stemdot.apply_masks(data, masks)
    assert_agree(got, exact, rtol=1e-6, what="stemdot vs float64")
    assert_agree(got, lt_masks(ctx, data, lambda: masks), rtol=1e-4, what="stemdot vs LiberTEM")


# ---------------------------------------------------------------- ROI


def test_roi(ctx):
    """A random ROI: values at the selected positions, NaN elsewhere, in both; the compact
    form equals LiberTEM's values at the selected positions in C order."""
    data = mk_random((16, 16, 12, 12), "float32", seed=11)
    masks = masks_of((12, 12), 2, np.float32)
    roi = np.random.default_rng(11).random((16, 16)) < 0.3
    want = lt_masks(ctx, data, lambda: masks, roi=roi)
    assert_agree(stemdot.apply_masks(data, masks, roi=roi), want)
    compact, positions = stemdot.apply_masks(data, masks, roi=roi, roi_compact=True)
    np.testing.assert_array_equal(positions, np.flatnonzero(roi))
    assert_agree(compact, want.reshape(-1, 2)[positions])


def test_roi_of_integers(ctx):
    """An ROI of 0 and 1 (uint8) selects as booleans in both."""
    data = mk_random((8, 8, 12, 12), "float32", seed=12)
    masks = masks_of((12, 12), 1, np.float32)
    roi = (np.random.default_rng(12).random((8, 8)) < 0.5).astype(np.uint8)
    assert_agree(stemdot.apply_masks(data, masks, roi=roi), lt_masks(ctx, data, lambda: masks, roi=roi.astype(bool)))


@difference("ROI that selects nothing")
def test_empty_roi(ctx):
    data = mk_random((4, 4, 8, 8), "float32")
    masks = masks_of((8, 8), 2, np.float32)
    roi = np.zeros((4, 4), bool)
    want = lt_masks(ctx, data, lambda: masks, roi=roi)
    assert want.shape == (4, 4, 2) and np.isnan(want).all()
    with pytest.raises(stemdot.InvalidArgumentError, match="selects no scan position"):
        stemdot.apply_masks(data, masks, roi=roi)


@difference("ROI as a flat array")
def test_flat_roi(ctx):
    data = mk_random((4, 4, 8, 8), "float32")
    masks = masks_of((8, 8), 1, np.float32)
    roi = np.zeros((4, 4), bool)
    roi[1, 2] = roi[3, 0] = True
    want = lt_masks(ctx, data, lambda: masks, roi=roi.reshape(-1))
    assert_agree(stemdot.apply_masks(data, masks, roi=roi), want)  # the nav-shaped ROI: the same
    with pytest.raises(stemdot.ShapeError, match=r"shape \(16,\) is not the scan's nav shape \(4, 4\)"):
        stemdot.apply_masks(data, masks, roi=roi.reshape(-1))


# ---------------------------------------------------------------- shifts


def naive_shifted(data, masks, shifts):
    """LiberTEM's tests' naive_shifted_mask_apply, float64: out[f, m] = Σ masks[m](y − dy,
    x − dx) · frame_f(y, x) for whole-pixel (dy, dx) per frame, pixels moved out dropped."""
    frames = data.reshape((-1,) + data.shape[-2:]).astype(np.float64)
    h, w = frames.shape[1:]
    shifts = np.broadcast_to(np.asarray(shifts, int).reshape(-1, 2), (len(frames), 2))
    out = np.zeros((len(frames), len(masks)))
    for f, (dy, dx) in enumerate(shifts):
        fy = slice(min(max(dy, 0), h), max(min(h, h + dy), 0))
        fx = slice(min(max(dx, 0), w), max(min(w, w + dx), 0))
        my = slice(min(max(-dy, 0), h), max(min(h, h - dy), 0))
        mx = slice(min(max(-dx, 0), w), max(min(w, w - dx), 0))
        for m, mask in enumerate(masks):
            out[f, m] = (mask[my, mx] * frames[f][fy, fx]).sum()
    return out.reshape(data.shape[:-2] + (len(masks),))


def bilinear_shifted(data, masks, shifts):
    """The float64 reference of stemdot's sub-pixel rule: out[f, m] = Σ mask_m(y − dy,
    x − dx) · frame_f(y, x), the mask bilinearly interpolated between its pixels, 0
    outside the frame."""
    frames = data.reshape((-1,) + data.shape[-2:]).astype(np.float64)
    h, w = frames.shape[1:]
    shifts = np.broadcast_to(np.asarray(shifts, np.float64).reshape(-1, 2), (len(frames), 2))
    padded = np.zeros((len(masks), h + 2, w + 2))  # a border of 0 that indices outside the frame clip to
    padded[:, 1:-1, 1:-1] = masks
    yy, xx = np.mgrid[:h, :w].astype(np.float64)
    out = np.zeros((len(frames), len(masks)))
    for f, (dy, dx) in enumerate(shifts):
        sy, sx = yy - dy, xx - dx
        y0, x0 = np.floor(sy), np.floor(sx)
        ty, tx = sy - y0, sx - x0
        moved = 0
        for oy, wy in ((0, 1 - ty), (1, ty)):
            for ox, wx in ((0, 1 - tx), (1, tx)):
                yi = np.clip((y0 + oy).astype(int) + 1, 0, h + 1)
                xi = np.clip((x0 + ox).astype(int) + 1, 0, w + 1)
                moved = moved + wy * wx * padded[:, yi, xi]
        out[f] = (moved * frames[f]).sum(axis=(1, 2))
    return out.reshape(data.shape[:-2] + (len(masks),))


@pytest.mark.parametrize("shift", [(1, -2), (-3, 0), (0, 5), (-20, 15), (100, 0)])
@pytest.mark.parametrize("use_sparse", [False, "sparse.pydata"])
def test_constant_shift(ctx, shift, use_sparse):
    """One whole-pixel shift for every frame, one moving the masks out of the frame
    included (results 0), dense and sparse masks."""
    data = mk_random((4, 4, 18, 12), "float32", seed=13)
    masks = np.stack([ring((18, 12), 9, 6, 5, 2), masks_of((18, 12), 1, np.float32)[0]])
    want = lt_masks(ctx, data, lambda: masks, shifts=shift, use_sparse=use_sparse)
    got = stemdot.apply_masks(data, masks, shifts=shift)
    assert_agree(got, want)
    assert_agree(got, naive_shifted(data, masks, shift), what="stemdot vs the naive reference")


def test_per_frame_integer_shifts(ctx):
    """A whole-pixel shift per scan position (LiberTEM's aux data of kind nav)."""
    data = mk_random((5, 6, 18, 12), "float32", seed=14)
    masks = masks_of((18, 12), 3, np.float32)
    shifts = np.random.default_rng(14).integers(-5, 6, (5, 6, 2))
    aux = ApplyMasksUDF.aux_data(shifts.astype(np.float64), kind="nav", extra_shape=(2,), dtype=np.float64)
    want = lt_masks(ctx, data, lambda: masks, shifts=aux)
    got = stemdot.apply_masks(data, masks, shifts=shifts)
    assert_agree(got, want)
    assert_agree(got, naive_shifted(data, masks, shifts), what="stemdot vs the naive reference")


def test_descan_integer_shifts(ctx):
    """LiberTEM's test_shifted_masks_descan: a spot that walks with the scan position,
    followed by whole-pixel shifts, gives every frame's full sum in both."""
    data = np.zeros((3, 3, 5, 5), np.float32)
    shifts = np.zeros((3, 3, 2), int)
    for y in range(3):
        for x in range(3):
            data[y, x, y + 1, x + 1] = 5
            shifts[y, x] = (y - 1, x - 1)
    mask = np.zeros((1, 5, 5), np.float32)
    mask[0, 2, 2] = 1
    aux = ApplyMasksUDF.aux_data(shifts.astype(np.float64), kind="nav", extra_shape=(2,), dtype=np.float64)
    want = lt_masks(ctx, data, lambda: mask, shifts=aux)
    assert (want == 5).all()
    assert_agree(stemdot.apply_masks(data, mask, shifts=shifts), want)


def test_shifts_with_roi(ctx):
    data = mk_random((8, 8, 12, 12), "float32", seed=15)
    masks = masks_of((12, 12), 2, np.float32)
    shifts = np.random.default_rng(15).integers(-3, 4, (8, 8, 2))
    roi = np.random.default_rng(16).random((8, 8)) < 0.4
    aux = ApplyMasksUDF.aux_data(shifts.astype(np.float64), kind="nav", extra_shape=(2,), dtype=np.float64)
    assert_agree(stemdot.apply_masks(data, masks, shifts=shifts, roi=roi),
                 lt_masks(ctx, data, lambda: masks, shifts=aux, roi=roi))


@difference("Sub-pixel shifts")
@pytest.mark.parametrize("sparse_masks", [False, True])
def test_subpixel_shifts(ctx, sparse_masks):
    """stemdot with LiberTEM's truncated shifts equals LiberTEM; with the sub-pixel shifts
    it equals the bilinear float64 reference, and differs from LiberTEM."""
    data = mk_random((3, 4, 18, 12), "float32", seed=17)
    masks = np.stack([ring((18, 12), 9, 6, 5, 2), masks_of((18, 12), 1, np.float32)[0]])
    shifts = np.random.default_rng(17).uniform(-5, 5, (3, 4, 2))
    shifts[0, 0] = (-1.5, 2.75)  # negative: truncation rounds toward zero, not down
    aux = ApplyMasksUDF.aux_data(shifts, kind="nav", extra_shape=(2,), dtype=np.float64)
    factories = (lambda: sparse.COO.from_numpy(masks)) if sparse_masks else (lambda: masks)
    want = lt_masks(ctx, data, factories, mask_count=2, shifts=aux)
    assert_agree(stemdot.apply_masks(data, masks, shifts=np.trunc(shifts)), want, what="truncated shifts")
    got = stemdot.apply_masks(data, masks, shifts=shifts)
    assert_agree(got, bilinear_shifted(data, masks, shifts), rtol=1e-6, what="stemdot vs the bilinear reference")
    assert np.abs(np.asarray(got) - want).max() > 0.1 * np.abs(want).max()


# ---------------------------------------------------------------- sync offsets (NPY files)


@pytest.mark.parametrize("sync_offset", [2, 7, -2, -7, 63, -63])
def test_sync_offset(ctx, tmp_path, sync_offset):
    """Scan position p reads frame p + sync_offset: the nav shape stays (8, 8) both ways
    and positions without a frame give 0, as in LiberTEM."""
    data = random_frames((8, 8, 8, 8), "uint16", seed=18)
    path = tmp_path / "scan.npy"
    np.save(path, data)
    masks = masks_of((8, 8), 2, np.float32)
    want = lt_masks(ctx, ctx.load("npy", path=str(path), sync_offset=sync_offset), lambda: masks)
    with quiet(stemdot.open, path, sync_offset=sync_offset) as ds:
        assert ds.nav_shape == (8, 8)
        assert_agree(stemdot.apply_masks(ds, masks), want, rtol=1e-6)


@pytest.mark.parametrize("sync_offset", [64, -64])
def test_sync_offset_out_of_range(ctx, tmp_path, sync_offset):
    """An offset that leaves no frame to read is refused by both."""
    path = tmp_path / "scan.npy"
    np.save(path, random_frames((8, 8, 8, 8), "uint16"))
    with pytest.raises(Exception, match="sync_offset should be in"):
        ctx.load("npy", path=str(path), sync_offset=sync_offset)
    with pytest.raises(stemdot.InvalidArgumentError, match="sync offset"):
        stemdot.open(path, sync_offset=sync_offset)


def test_sync_offset_with_shifts(ctx, tmp_path):
    """Shifts per scan position on a dataset with a sync offset: one per position of the
    (kept) nav shape."""
    data = mk_random((6, 6, 12, 12), "float32", seed=19)
    path = tmp_path / "scan.npy"
    np.save(path, data)
    masks = masks_of((12, 12), 2, np.float32)
    shifts = np.random.default_rng(19).integers(-3, 4, (6, 6, 2))
    aux = ApplyMasksUDF.aux_data(shifts.astype(np.float64), kind="nav", extra_shape=(2,), dtype=np.float64)
    want = lt_masks(ctx, ctx.load("npy", path=str(path), sync_offset=3), lambda: masks, shifts=aux)
    with quiet(stemdot.open, path, sync_offset=3) as ds:
        assert_agree(stemdot.apply_masks(ds, masks, shifts=shifts), want)


# ---------------------------------------------------------------- deliberate differences


@difference("NaN at zero-weight pixels")
def test_nan_at_zero_weight_pixels(ctx):
    """A NaN pixel of every frame outside a disk: LiberTEM's dense product gives NaN, its
    sparse one and stemdot's the disk's sum."""
    data = mk_random((4, 4, 16, 16), "float32", seed=20)
    data[:, :, 0, 0] = np.nan
    disk = ring((16, 16), 8, 8, 4)
    finite = np.where(np.isnan(data), 0, data)
    want = np.einsum("abyx,yx->ab", finite.astype(np.float64), disk)[..., np.newaxis]
    dense = lt_masks(ctx, data, [lambda: disk], use_sparse=False)
    assert np.isnan(dense).all()
    assert_agree(lt_masks(ctx, data, [lambda: disk], use_sparse=True), want, what="LiberTEM sparse")
    assert_agree(stemdot.apply_masks(data, disk), want)
    # a dense mask beside it (which sees the NaN) does not change the disk's image
    both = stemdot.apply_masks(data, np.stack([disk, np.ones((16, 16), np.float32)]))
    assert_agree(both[..., :1], want)
    assert np.isnan(both[..., 1]).all()


@difference("NaN, infinite, huge or tiny weights")
@pytest.mark.parametrize("weight,tiny", [(np.nan, False), (np.inf, False), (-np.inf, False), (1e300, False),
                                         (1e-35, True)])
def test_weights_out_of_range(ctx, weight, tiny):
    """LiberTEM computes with any weight (NaN results, or float64 ones); stemdot refuses a
    weight that is not finite or beyond float32's range, and a mask whose largest weight
    is under 2⁻¹⁰²."""
    data = mk_random((4, 4, 8, 8), "float32")
    mask = np.full((8, 8), weight) if tiny else np.ones((8, 8))
    mask[3, 3] = weight
    want = lt_masks(ctx, data, [lambda: mask])
    if np.isfinite(weight):
        assert_agree(want, np.einsum("abyx,yx->ab", data.astype(np.float64), mask)[..., np.newaxis], rtol=1e-12)
    else:
        assert not np.isfinite(want).any()
    match = r"largest weight, 1e-35, is under 2⁻¹⁰²" if tiny else r"has weight .* at pixel \(y=3, x=3\)"
    with pytest.raises(stemdot.InvalidArgumentError, match=match):
        stemdot.apply_masks(data, mask, dtype=np.float64)


@difference("3-D mask arrays")
def test_3d_masks(ctx):
    """5-D data with one 3-D mask: LiberTEM (sig_dims=3) gives one image of the 2-D scan;
    stemdot reads a 3-D scan of 2-D frames and the mask as a stack of 2-D masks."""
    data = mk_random((4, 4, 6, 8, 8), "float32", seed=21)
    mask = masks_of((6, 8, 8), 1, np.float32)[0]
    want = lt_masks(ctx, lt_memory(ctx, data, sig_dims=3), [lambda: mask])
    assert want.shape == (4, 4, 1)
    got = stemdot.apply_masks(data, mask)
    assert got.shape == (4, 4, 6, 6)
    # the same numbers: LiberTEM's image is the sum over the stack's diagonal
    assert_agree(np.einsum("abcc->ab", np.asarray(got, np.float64))[..., np.newaxis], want)


@difference("64-bit integer and complex data")
@pytest.mark.parametrize("which", ["int64 frames", "uint64 frames", "complex64 frames", "complex128 masks"])
def test_wide_and_complex_dtypes(ctx, which):
    data = mk_random((4, 4, 8, 8), "float32", seed=22)
    masks = masks_of((8, 8), 2, np.float32)
    if which.endswith("frames"):
        data = data.astype(which.split()[0])
    else:
        masks = masks.astype(np.complex128) * (1 + 1j)
    want = lt_masks(ctx, data, lambda: masks)
    exact = np.einsum("abyx,myx->abm", data.astype(np.complex128), masks.astype(np.complex128))
    np.testing.assert_allclose(want, exact if np.iscomplexobj(want) else exact.real, rtol=1e-5)
    with pytest.raises(stemdot.DTypeError, match="not supported"):
        stemdot.apply_masks(data, masks)
    # converted to float64 first, stemdot gives LiberTEM's real values
    if not np.iscomplexobj(want):
        assert_agree(stemdot.apply_masks(data.astype(np.float64), masks, dtype=np.float64), want, rtol=1e-12)


def test_both_refuse_no_masks(ctx):
    data = mk_random((2, 2, 8, 8), "float32")
    with pytest.raises(Exception):
        lt_masks(ctx, data, lambda: np.zeros((0, 8, 8), np.float32))
    with pytest.raises(stemdot.InvalidArgumentError, match="empty"):
        stemdot.apply_masks(data, np.zeros((0, 8, 8), np.float32))
