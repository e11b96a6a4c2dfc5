"""LiberTEM's raw_csr files (a TOML naming indptr, indices and data files) read by both;
fixtures as LiberTEM's tests/io/datasets/test_raw_csr.py builds them (native, big-endian,
uint64), and its test_reshape_sync_offset against a numpy reference of LiberTEM's memory
dataset semantics."""
import itertools

import numpy as np
import pytest

from ltcommon import PickUDF, StdDevUDF, SumUDF, assert_agree, difference, lt_masks, lt_run, mk_random, quiet, scipy, stemdot

NAV, SIG = (13, 17), (24, 19)
DATA = mk_random(NAV + SIG, "float32", seed=11).astype(np.int32)
FLAT = DATA.reshape(NAV[0] * NAV[1], SIG[0] * SIG[1])
MASKS = np.random.default_rng(11).random((3,) + SIG).astype(np.float32)


def write_csr(directory, dtype=None):
    """The files of FLAT as CSR (indptr, indices and data in their own dtype, or all in
    ``dtype``) and their sparse.toml; returns the TOML's path."""
    csr = scipy.sparse.csr_matrix(FLAT)
    dtypes = [np.dtype(dtype or a.dtype) for a in (csr.indptr, csr.indices, csr.data)]
    directory.mkdir(parents=True, exist_ok=True)
    for name, a, dt in zip(("indptr.raw", "coords.raw", "values.raw"), (csr.indptr, csr.indices, csr.data), dtypes):
        a.astype(dt).tofile(directory / name)
    toml = directory / "sparse.toml"
    toml.write_text(f"""[params]
filetype = "raw_csr"
nav_shape = [{NAV[0]}, {NAV[1]}]
sig_shape = [{SIG[0]}, {SIG[1]}]
sync_offset = 0

[raw_csr]
indptr_file = "indptr.raw"
indptr_dtype = "{dtypes[0].str}"
indices_file = "coords.raw"
indices_dtype = "{dtypes[1].str}"
data_file = "values.raw"
data_dtype = "{dtypes[2].str}"
""")
    return toml


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    return write_csr(tmp_path_factory.mktemp("csr") / "native")


@pytest.mark.parametrize("dtype", [None, ">i4", "<u4", ">u2"], ids=["native", "big-endian >i4", "<u4", "big-endian >u2"])
def test_raw_csr(ctx, tmp_path, dtype):
    """Sum frame, std frame and three random masks of the fixtures, as LiberTEM reads them."""
    path = write_csr(tmp_path, dtype)
    ds = ctx.load("raw_csr", path=str(path))
    lt_sum = lt_run(ctx, ds, SumUDF())["intensity"].data
    lt_std = lt_run(ctx, ds, StdDevUDF())["std"].data
    want = lt_masks(ctx, ds, lambda: MASKS)
    with quiet(stemdot.open, path) as sds:
        assert (sds.nav_shape, sds.sig_shape) == (NAV, SIG)
        got = stemdot.reduce(sds, ("sum", "std"))
        assert_agree(got["sum"], lt_sum, rtol=1e-6, what="sum")
        assert_agree(got["std"], lt_std, rtol=1e-9, what="std")
        assert_agree(stemdot.apply_masks(sds, MASKS), want, rtol=1e-6)
    assert_agree(got["sum"], DATA.sum(axis=(0, 1)), rtol=0, what="sum vs numpy")


def reference(nav_shape, sig_shape, sync_offset, roi):
    """The images of MASKS (reshaped to sig_shape) as LiberTEM's memory dataset gives
    them: scan position p reads frame p + sync_offset, 0 where there is none; NaN outside
    the ROI."""
    n = int(np.prod(nav_shape))
    frames = np.zeros((n, FLAT.shape[1]))
    p = np.arange(n)
    ok = (p + sync_offset >= 0) & (p + sync_offset < len(FLAT))
    frames[ok] = FLAT[p[ok] + sync_offset]
    out = frames @ MASKS.reshape(3, -1).T.astype(np.float64)
    if roi is not None:
        out[~roi.reshape(-1)] = np.nan
    return out.reshape(tuple(nav_shape) + (3,))


def roi_of(nav_shape):
    return np.random.default_rng(12).random(nav_shape) < 0.5


COMBOS = [pytest.param(*c, id=f"nav={c[0]},sig={c[1]},sync={c[2]},roi={c[3]}")
          for c in itertools.product([None, (17, 13), (221,)], [None, (19, 24)], [0, 5, -5, 17, -17, 200, -200],
                                     [False, True])]


@pytest.mark.parametrize("nav_shape,sig_shape,sync_offset,with_roi", COMBOS)
def test_reshape_sync_offset(ctx, native, nav_shape, sig_shape, sync_offset, with_roi):
    """nav_shape, sig_shape (a reshape of the 456 pixels), sync_offset and an ROI: stemdot
    equals the reference; LiberTEM too, but where a negative sync_offset meets an ROI (see
    test_lt_negative_sync_offset_with_roi)."""
    nav = nav_shape or NAV
    sig = sig_shape or SIG
    roi = roi_of(nav) if with_roi else None
    masks = MASKS.reshape((3,) + sig)
    want = reference(nav, sig, sync_offset, roi)
    opts = {k: v for k, v in dict(nav_shape=nav_shape, sig_shape=sig_shape, sync_offset=sync_offset or None).items()
            if v is not None}
    with quiet(stemdot.open, native, roi=roi, **opts) as ds:
        assert_agree(stemdot.apply_masks(ds, masks), want, rtol=1e-6, what="stemdot vs the reference")
    if not (with_roi and sync_offset < 0):
        lt = lt_masks(ctx, ctx.load("raw_csr", path=str(native), **opts), lambda: masks, roi=roi)
        assert_agree(lt, want, rtol=1e-6, what="LiberTEM vs the reference")


@difference("raw_csr with a negative sync_offset and an ROI")
@pytest.mark.parametrize("sync_offset", [-1, -5, -17, -200])
def test_lt_negative_sync_offset_with_roi(ctx, native, tmp_path, sync_offset):
    roi = roi_of(NAV)
    want = reference(NAV, SIG, sync_offset, roi)
    lt = lt_masks(ctx, ctx.load("raw_csr", path=str(native), sync_offset=sync_offset), lambda: MASKS, roi=roi)
    assert np.abs(np.nan_to_num(lt) - np.nan_to_num(want)).max() > 0.1 * np.nanmax(np.abs(want))
    # LiberTEM's NPY reader of the same frames agrees with the reference
    np.save(tmp_path / "same.npy", DATA)
    npy = ctx.load("npy", path=str(tmp_path / "same.npy"), sync_offset=sync_offset)
    assert_agree(lt_masks(ctx, npy, lambda: MASKS, roi=roi), want, rtol=1e-6, what="LiberTEM npy vs the reference")
    with quiet(stemdot.open, native, roi=roi, sync_offset=sync_offset) as ds:
        assert_agree(stemdot.apply_masks(ds, MASKS), want, rtol=1e-6)


@difference("64-bit integer and complex data")
def test_raw_csr_uint64(ctx, tmp_path):
    """LiberTEM's uint64 fixture (indptr, indices and data all <u8): LiberTEM reads it;
    stemdot refuses the uint64 data, and reads the same file with int32 data."""
    path = write_csr(tmp_path / "u8", "<u8")
    want = lt_masks(ctx, ctx.load("raw_csr", path=str(path)), lambda: MASKS)
    assert_agree(want, reference(NAV, SIG, 0, None), rtol=1e-12)
    with pytest.raises(stemdot.DTypeError, match="<u8"):
        stemdot.open(path)
    path.write_text(path.read_text().replace('data_dtype = "<u8"', 'data_dtype = "<i4"'))
    (tmp_path / "u8" / "values.raw").write_bytes(np.fromfile(tmp_path / "u8" / "values.raw", "<u8").astype("<i4"))
    with quiet(stemdot.open, path) as ds:
        assert_agree(stemdot.apply_masks(ds, MASKS, dtype=np.float64), want, rtol=1e-12)


@difference("1-D signals")
def test_raw_csr_flat_sig(ctx, native):
    """LiberTEM's test_sig_nav_shape: nav_shape (221,), sig_shape (456,); stemdot reads the
    frames as (1, 456)."""
    ones = np.ones(456, np.float32)
    want = lt_masks(ctx, ctx.load("raw_csr", path=str(native), nav_shape=[221], sig_shape=[456]), [lambda: ones])
    with pytest.raises(stemdot.ShapeError, match="sig_shape"):
        stemdot.open(native, nav_shape=(221,), sig_shape=(456,))
    with quiet(stemdot.open, native, nav_shape=(221,), sig_shape=(1, 456)) as ds:
        assert_agree(stemdot.apply_masks(ds, ones.reshape(1, 456)), want, rtol=1e-6)


@difference("Pick of sparse frames with duplicate events")
def test_duplicate_events(ctx, tmp_path):
    """Two uint8 events of 200 at one pixel: the sum frame and a mask of ones give 400 in
    both; LiberTEM's PickUDF densifies in uint8 and wraps to 144, stemdot's frames are
    uint32 and hold 400 (case 64)."""
    np.array([0, 2], "<i8").tofile(tmp_path / "ptr.dat")
    np.array([5, 5], "<i4").tofile(tmp_path / "idx.dat")
    np.array([200, 200], "u1").tofile(tmp_path / "val.dat")
    toml = tmp_path / "s.toml"
    toml.write_text('[params]\nfiletype = "raw_csr"\nnav_shape = [1, 1]\nsig_shape = [4, 4]\n[raw_csr]\n'
                    'indptr_file = "ptr.dat"\nindptr_dtype = "<i8"\nindices_file = "idx.dat"\nindices_dtype = "<i4"\n'
                    'data_file = "val.dat"\ndata_dtype = "u1"\n')
    ds = ctx.load("raw_csr", path=str(toml))
    ones = np.ones((4, 4), np.float32)
    assert lt_run(ctx, ds, SumUDF())["intensity"].data.ravel()[5] == 400
    assert lt_masks(ctx, ds, [lambda: ones]).ravel()[0] == 400
    lt_pick = lt_run(ctx, ds, PickUDF(), roi=np.ones((1, 1), bool))["intensity"].data
    assert lt_pick.dtype == np.uint8 and lt_pick.ravel()[5] == 144
    with quiet(stemdot.open, toml) as sds:
        assert stemdot.reduce(sds, ("sum",))["sum"].ravel()[5] == 400
        assert stemdot.apply_masks(sds, ones).ravel()[0] == 400
        picked = stemdot.pick(sds, [(0, 0)])
        assert picked.dtype == np.uint32 and picked.ravel()[5] == 400


def test_toml_sync_offset_not_applied(ctx, tmp_path):
    """A sync_offset in the TOML's [params] is not applied, by LiberTEM (its raw_csr reader
    never reads it) nor by stemdot (a warning names it); option sync_offset applies one."""
    path = write_csr(tmp_path)
    path.write_text(path.read_text().replace("sync_offset = 0", "sync_offset = 2"))
    want = lt_masks(ctx, ctx.load("raw_csr", path=str(path)), lambda: MASKS)
    with pytest.warns(UserWarning, match=r"\[params\] sync_offset 2 of sparse.toml is not applied"):
        sds = stemdot.open(path)
    with sds:
        assert_agree(stemdot.apply_masks(sds, MASKS), want, rtol=1e-6)
    assert_agree(want.reshape(-1, 3), FLAT @ MASKS.reshape(3, -1).T.astype(np.float64), rtol=1e-6, what="LiberTEM vs numpy")
