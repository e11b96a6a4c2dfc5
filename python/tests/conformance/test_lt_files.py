"""Readers: every file of $STEMDOT_TESTDATA that both LiberTEM and stemdot open gives the
same nav and sig shape, dtype, sum frame and image of a random mask (equal up to float32
rounding); the files only stemdot opens and the deliberate differences are asserted as
such; and written files (5-D NPY and HDF5, raw, SEQ with its references, MIB with a sync
offset) run through both."""
import struct

import numpy as np
import pytest

from ltcommon import (DataSetException, StdDevUDF, SumUDF, assert_agree, difference, lt_masks, lt_run, quiet,
                      random_frames, stemdot)


def lt_load(ctx, filetype, **kwargs):
    return quiet(ctx.load, filetype, **kwargs)


def compare(ctx, lt_ds, sd_ds):
    """Both datasets: the same nav and sig shape, dtype, sum frame and image of a random
    mask."""
    assert tuple(int(n) for n in lt_ds.shape.nav) == tuple(sd_ds.nav_shape), "nav shape"
    assert tuple(int(n) for n in lt_ds.shape.sig) == tuple(sd_ds.sig_shape), "sig shape"
    assert np.dtype(lt_ds.dtype).name == np.dtype(sd_ds.dtype).name, "dtype (either byte order)"
    mask = np.random.default_rng(7).random(tuple(sd_ds.sig_shape)).astype(np.float32)
    assert_agree(stemdot.reduce(sd_ds, ("sum",))["sum"], lt_run(ctx, lt_ds, SumUDF())["intensity"].data, rtol=1e-6,
                 what="sum frame")
    assert_agree(stemdot.apply_masks(sd_ds, mask)[..., 0], lt_masks(ctx, lt_ds, [lambda: mask])[..., 0], rtol=1e-5,
                 what="random-mask image")


# file (relative to $STEMDOT_TESTDATA) → LiberTEM's load arguments and stemdot's open
# options; "path" is the file unless given.
MIB_33 = dict(filetype="mib", nav_shape=(3, 3)), dict(nav_shape=(3, 3))
MIB_HDR = dict(filetype="mib"), {}  # the .hdr's scan shape: Frames in Acquisition 9, Frames per Trigger 9
BOTH = {
    "mib/001_4x2_6bit.mib": (dict(filetype="mib", nav_shape=(2, 4)), dict(nav_shape=(2, 4))),
    "mib/002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.mib": (
        dict(filetype="mib", path="mib/002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.hdr"), {}),
    "mib/002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.hdr": (dict(filetype="mib"), {}),
    "mib/Quad_9_Frame_CounterDepth_12_Rows_256.mib": MIB_33,
    "mib/Quad_9_Frame_CounterDepth_6_Rows_256.mib": MIB_33,
    "mib/Single_9_Frame_CounterDepth_12_Rows_256.mib": MIB_33,
    "mib/Single_9_Frame_CounterDepth_12_Rows_256.hdr": MIB_HDR,
    "mib/Single_9_Frame_CounterDepth_24_Rows_256.mib": MIB_33,
    "mib/Single_9_Frame_CounterDepth_6_Rows_256.mib": MIB_33,
    "mib/Single_9_Frame_CounterDepth_6_Rows_256.hdr": MIB_HDR,
    "blo/test1.blo": (dict(filetype="blo"), {}),
    # a 5-D dataset (2, 2, 1, 256, 256): a 3-D scan
    "hdf5/fpd_file_test.hdf5": (dict(filetype="hdf5", ds_path="/fpd_expt/fpd_data/data"), {}),
    "emd/py4DSTEM_size2x3x4x5.h5": (dict(filetype="hdf5"), {}),
    "arina/test_00_data_000001.h5": (dict(filetype="hdf5", ds_path="/entry/data/data"),
                                     dict(dataset_path="/entry/data/data")),
    "ser/128x128x5-diffraction_preview_1.ser": (dict(filetype="ser"), {}),
    "ser/128x128x5-diffraction_preview.emi": (dict(filetype="ser", path="ser/128x128x5-diffraction_preview_1.ser"), {}),
    "dm/test-1.dm3": (dict(filetype="dm"), {}),
    "dm/test-1.dm4": (dict(filetype="dm"), {}),
}
# files LiberTEM 0.16.0 fails on (see the table's row): LiberTEM's load arguments and
# error, stemdot's options
STEMDOT_ONLY = {
    "mrc/Custom_movie.mrc": (dict(filetype="mrc"), ValueError, {}),
    "tvips/test_tvips_2233_000.tvips": (dict(filetype="tvips"), IndexError, {}),
    "tvips/test_tvips_2345_000.tvips": (dict(filetype="tvips"), IndexError, {}),
    "tvips/test_tvips_2345_split_000.tvips": (dict(filetype="tvips"), IndexError, {}),
    "arina/test_00_master.h5": (dict(filetype="hdf5"), DataSetException, {}),
    # 1-bit counters, as U08 and raw-packed (R64)
    "mib/Single_9_Frame_CounterDepth_1_Rows_256.mib": (MIB_33[0], AssertionError, MIB_33[1]),
    "mib/Single_9_Frame_CounterDepth_1_Rows_256RAW.mib": (MIB_33[0], AssertionError, MIB_33[1]),
}
# files covered by other tests here, and companions of the files above
OTHERS = {
    "mib/001_4x2_6bit.hdr": "test_mib_without_scan_shape",
    "mib/Quad_9_Frame_CounterDepth_12_Rows_256.hdr": "test_mib_without_scan_shape",
    "mib/Quad_9_Frame_CounterDepth_6_Rows_256.hdr": "test_mib_without_scan_shape",
    "mib/Single_9_Frame_CounterDepth_24_Rows_256.hdr": "test_mib_without_scan_shape",
    "mib/Single_9_Frame_CounterDepth_1_Rows_256.hdr": "companion of Single_9_Frame_CounterDepth_1_Rows_256.mib",
    "mib/Single_9_Frame_CounterDepth_1_Rows_256RAW.hdr": "companion of Single_9_Frame_CounterDepth_1_Rows_256RAW.mib",
    "ser/16x16-diffraction_imagel_5x5x256x256_EDS_1.ser": "test_ser_spectra",
    "ser/16x16-diffraction_imagel_5x5x256x256_EDS.emi": "test_ser_spectra",
    "arina/test_00.h5": "test_no_frames",
    "mrc/Custom_info.txt": "companion of Custom_movie.mrc",
    "mrc/Custom_scan_coordinates.csv": "companion of Custom_movie.mrc",
    "tvips/test_tvips_2345_split_001.tvips": "part of test_tvips_2345_split_000.tvips",
    "tvips/test_tvips_2345_split_002.tvips": "part of test_tvips_2345_split_000.tvips",
    "README.md": "", "COPYING-GPL-3.0.txt": "",
}


def test_every_file_is_covered(data_dir):
    files = {str(p.relative_to(data_dir)) for p in data_dir.rglob("*") if p.is_file()}
    covered = set(BOTH) | set(STEMDOT_ONLY) | set(OTHERS)
    assert files - covered == set(), "files of $STEMDOT_TESTDATA that no conformance test reads"
    assert covered - files == set(), "files the conformance tests name that $STEMDOT_TESTDATA lacks"


def lt_file(ctx, data_dir, name, kwargs):
    kwargs = dict(kwargs)
    kwargs["path"] = str(data_dir / kwargs.get("path", name))
    return lt_load(ctx, **kwargs)


@pytest.mark.parametrize("name", sorted(BOTH))
def test_file(ctx, data_dir, name):
    lt_kwargs, sd_kwargs = BOTH[name]
    with quiet(stemdot.open, data_dir / name, **sd_kwargs) as ds:
        compare(ctx, lt_file(ctx, data_dir, name, lt_kwargs), ds)


@pytest.mark.parametrize("name", ["dm/test-1.dm3", "dm/test-1.dm4"])
def test_dm_file_stack(ctx, data_dir, name):
    """LiberTEM's 'dm' of a list of files (its stack reader) reads a 3-D file as stemdot."""
    with quiet(stemdot.open, data_dir / name) as ds:
        compare(ctx, lt_load(ctx, "dm", files=[str(data_dir / name)]), ds)


@pytest.mark.parametrize("sync_offset", [2, -2, 5, -5])
def test_mib_sync_offset(ctx, data_dir, sync_offset):
    path = data_dir / "mib" / "001_4x2_6bit.mib"
    with quiet(stemdot.open, path, nav_shape=(2, 4), sync_offset=sync_offset) as ds:
        compare(ctx, lt_load(ctx, "mib", path=str(path), nav_shape=(2, 4), sync_offset=sync_offset), ds)


@difference("Files LiberTEM 0.16.0 cannot open")
@pytest.mark.parametrize("name", sorted(STEMDOT_ONLY))
def test_stemdot_only(ctx, data_dir, name):
    lt_kwargs, error, sd_kwargs = STEMDOT_ONLY[name]
    with pytest.raises(error):
        lt_run(ctx, lt_file(ctx, data_dir, name, lt_kwargs), SumUDF())
    with quiet(stemdot.open, data_dir / name, **sd_kwargs) as ds:
        assert ds.n_frames > 1 and np.isfinite(stemdot.reduce(ds, ("sum",))["sum"]).all()


def test_no_frames(ctx, data_dir):
    """The ARINA acquisition's test_00.h5 holds metadata only: both refuse it."""
    path = data_dir / "arina" / "test_00.h5"
    with pytest.raises(DataSetException):
        lt_load(ctx, "hdf5", path=str(path))
    with pytest.raises(stemdot.FormatError, match="master file"):
        stemdot.open(path)


@difference("1-D signals")
@pytest.mark.parametrize("name", ["ser/16x16-diffraction_imagel_5x5x256x256_EDS_1.ser",
                                  "ser/16x16-diffraction_imagel_5x5x256x256_EDS.emi"])
def test_ser_spectra(ctx, data_dir, name):
    """A TIA file of EDS spectra: LiberTEM reads a (5, 5) scan of (4000,) signals,
    stemdot refuses it as a file of spectra."""
    ds = lt_load(ctx, "ser", path=str(data_dir / "ser" / "16x16-diffraction_imagel_5x5x256x256_EDS_1.ser"))
    assert (tuple(ds.shape.nav), tuple(ds.shape.sig)) == ((5, 5), (4000,))
    with pytest.raises(stemdot.FormatError, match="spectra"):
        stemdot.open(data_dir / name)


@difference("MIB scan shape not in the header")
def test_mib_without_scan_shape(ctx, data_dir):
    """001_4x2_6bit: its .hdr has Frames per Trigger 1 and no ScanX/ScanY. LiberTEM refuses
    the .mib path without nav_shape and reads the .hdr as (8, 1); stemdot reads either as
    (2, 4), the rows of its frame timestamps (as RosettaSciIO), and warns, naming option
    nav_shape. The frames are the same."""
    mib = data_dir / "mib" / "001_4x2_6bit.mib"
    with pytest.raises(ValueError, match="nav_shape needs to be passed"):
        lt_load(ctx, "mib", path=str(mib))
    lt_ds = lt_load(ctx, "mib", path=str(mib.with_suffix(".hdr")))
    assert tuple(lt_ds.shape.nav) == (8, 1)
    for path in (mib, mib.with_suffix(".hdr")):
        with pytest.warns(UserWarning, match="nav_shape"):
            ds = stemdot.open(path)
        with ds:
            assert ds.nav_shape == (2, 4)
            mask = np.random.default_rng(7).random(ds.sig_shape).astype(np.float32)
            got = stemdot.apply_masks(ds, mask)
            assert_agree(got.reshape(8, 1, 1), lt_masks(ctx, lt_ds, [lambda: mask]), rtol=1e-5)
    # so are the 9-frame test-pattern files whose .hdr has Frames per Trigger 1: LiberTEM
    # (9, 1), stemdot (1, 9)
    for name in ("Quad_9_Frame_CounterDepth_12_Rows_256", "Quad_9_Frame_CounterDepth_6_Rows_256",
                 "Single_9_Frame_CounterDepth_24_Rows_256"):
        assert tuple(lt_load(ctx, "mib", path=str(data_dir / "mib" / (name + ".hdr"))).shape.nav) == (9, 1)
        with pytest.warns(UserWarning, match="nav_shape"):
            ds = stemdot.open(data_dir / "mib" / (name + ".hdr"))
        with ds:
            assert ds.nav_shape == (1, 9)


# ---------------------------------------------------------------- written files


@pytest.mark.parametrize("kind", ["npy", "hdf5"])
def test_5d_file(ctx, tmp_path, kind):
    """A 5-D file (2, 3, 4, 16, 16) is a 3-D scan in both, and nav_shape (2, 3, 4) is taken."""
    data = random_frames((2, 3, 4, 16, 16), "uint16", seed=1)
    if kind == "npy":
        path = tmp_path / "scan.npy"
        np.save(path, data)
        lt_ds = lt_load(ctx, "npy", path=str(path))
    else:
        h5py = pytest.importorskip("h5py")
        path = tmp_path / "scan.h5"
        with h5py.File(path, "w") as f:
            f["data"] = data
        lt_ds = lt_load(ctx, "hdf5", path=str(path), ds_path="/data")
    for options in ({}, {"nav_shape": (2, 3, 4)}):
        with quiet(stemdot.open, path, **options) as ds:
            compare(ctx, lt_ds, ds)


@difference("More than 3 nav axes")
def test_6d_file(ctx, tmp_path):
    """A 6-D NPY file (1, 2, 3, 4, 16, 16): LiberTEM reads a 4-D scan; stemdot refuses it
    naming option nav_shape, and reads it with a nav_shape of at most 3 axes."""
    data = random_frames((1, 2, 3, 4, 16, 16), "uint16", seed=3)
    path = tmp_path / "scan.npy"
    np.save(path, data)
    ones = np.ones((16, 16), np.float32)
    want = lt_masks(ctx, lt_load(ctx, "npy", path=str(path)), [lambda: ones])
    assert want.shape == (1, 2, 3, 4, 1)
    with pytest.raises(stemdot.ShapeError, match="nav_shape"):
        stemdot.open(path)
    with quiet(stemdot.open, path, nav_shape=(2, 3, 4)) as ds:
        assert_agree(stemdot.apply_masks(ds, ones), want.reshape(2, 3, 4, 1), rtol=1e-6)


@difference("File shorter than the scan")
def test_file_shorter_than_the_scan(ctx, tmp_path):
    """60 frames read as an 8×8 scan: LiberTEM keeps the nav shape, 0 at the 4 positions
    without a frame; stemdot keeps the 7 complete rows (NPY, with a warning) or refuses
    (raw)."""
    data = random_frames((60, 8, 8), "float32", seed=4)
    ones = np.ones((8, 8), np.float32)
    npy, raw = tmp_path / "scan.npy", tmp_path / "scan.raw"
    np.save(npy, data)
    data.tofile(raw)
    want = lt_masks(ctx, lt_load(ctx, "npy", path=str(npy), nav_shape=(8, 8)), [lambda: ones])
    assert want.shape == (8, 8, 1) and (want.reshape(-1)[60:] == 0).all()
    lt_raw = lt_masks(ctx, lt_load(ctx, "raw", path=str(raw), nav_shape=(8, 8), sig_shape=(8, 8), dtype="float32"),
                      [lambda: ones])
    assert_agree(lt_raw, want, rtol=0)
    with pytest.warns(UserWarning, match="incomplete acquisition"):
        ds = stemdot.open(npy, nav_shape=(8, 8))
    with ds:
        assert ds.nav_shape == (7, 8)
        assert_agree(stemdot.apply_masks(ds, ones), want[:7], rtol=1e-6)
    with pytest.raises(stemdot.ShapeError, match="holds 60 frames"):
        stemdot.open(raw, format="raw", nav_shape=(8, 8), sig_shape=(8, 8), dtype="float32")


@pytest.mark.parametrize("sync_offset", [0, 3, -3, 10, -10])
def test_raw_sync_offset(ctx, tmp_path, sync_offset):
    """A raw file of 64 frames read as an 8×8 scan with a sync offset (LiberTEM's 'raw')."""
    data = random_frames((8, 8, 8, 8), "float32", seed=2)
    path = tmp_path / "scan.raw"
    data.tofile(path)
    lt_ds = lt_load(ctx, "raw", path=str(path), nav_shape=(8, 8), sig_shape=(8, 8), dtype="float32",
                    sync_offset=sync_offset)
    with quiet(stemdot.open, path, format="raw", nav_shape=(8, 8), sig_shape=(8, 8), dtype="float32",
               sync_offset=sync_offset) as ds:
        compare(ctx, lt_ds, ds)


@difference("nav_shape smaller than the file")
def test_nav_shape_smaller_than_file(ctx, tmp_path):
    """nav_shape (4, 8) of a file of 64 frames: LiberTEM reads the first 32, stemdot
    refuses and names option frames, which reads them."""
    data = random_frames((8, 8, 8, 8), "uint16", seed=3)
    path = tmp_path / "scan.npy"
    np.save(path, data)
    mask = np.ones((8, 8), np.float32)
    want = lt_masks(ctx, lt_load(ctx, "npy", path=str(path), nav_shape=(4, 8)), [lambda: mask])
    assert want.shape == (4, 8, 1)
    with pytest.raises(stemdot.ShapeError, match="option frames"):
        stemdot.open(path, nav_shape=(4, 8))
    with quiet(stemdot.open, path, frames=(0, 32)) as ds:
        assert_agree(stemdot.apply_masks(ds, mask).reshape(4, 8, 1), want)


@difference("sig_shape of a file that states its frames")
def test_sig_shape_of_npy(ctx, tmp_path):
    """sig_shape (4, 16) of an NPY file of 8×8 frames: LiberTEM reads frames of 4×16 of
    the same bytes; stemdot keeps the file's 8×8 frames and warns."""
    data = random_frames((4, 4, 8, 8), "uint16", seed=4)
    path = tmp_path / "scan.npy"
    np.save(path, data)
    lt_ds = lt_load(ctx, "npy", path=str(path), sig_shape=(4, 16))
    assert tuple(lt_ds.shape) == (4, 4, 4, 16)
    np.testing.assert_array_equal(lt_run(ctx, lt_ds, SumUDF())["intensity"].data,
                                  data.reshape(16, 4, 16).sum(axis=0, dtype=np.float64))
    with pytest.warns(UserWarning, match="sig_shape .* ignored"):
        ds = stemdot.open(path, sig_shape=(4, 16))
    with ds:
        assert ds.sig_shape == (8, 8)


# ---------------------------------------------------------------- SEQ


SEQ_SIG = (16, 16)


def write_seq(path, frames):
    """A StreamPix SEQ file of version 4 (frames from byte 1024) as LiberTEM's reader
    reads it: the header fields of libertem.io.dataset.seq.HEADER_FIELDS, every frame's
    uint16 pixels followed by 8 bytes (its timestamp)."""
    n, h, w = frames.shape
    stride = h * w * 2 + 8
    head = bytearray(1024)
    struct.pack_into("<I", head, 0, 0xFEED)
    head[4:10] = "seq".encode("utf-16-le")  # name and description: UTF-16 text, as LiberTEM decodes them
    head[36:44] = "test".encode("utf-16-le")
    struct.pack_into("<ii", head, 28, 4, 1024)  # version, header size
    struct.pack_into("<IIIIIIII", head, 548, w, h, 16, 16, h * w * 2, 100, n, 0)  # ..., image_format 100, allocated
    struct.pack_into("<I", head, 580, stride)  # true_image_size
    struct.pack_into("<I", head, 620, 0)  # compression_format: none
    body = bytearray(n * stride)
    for i, f in enumerate(frames):
        body[i * stride:i * stride + h * w * 2] = f.astype("<u2").tobytes()
    path.write_bytes(bytes(head) + bytes(body))


def write_mrc(path, image):
    """A 2-D MRC2014 image of float32 (mode 2), as ncempy and stemdot read it."""
    ny, nx = image.shape
    head = bytearray(1024)
    struct.pack_into("<4i", head, 0, nx, ny, 1, 2)
    struct.pack_into("<3i", head, 28, nx, ny, 1)
    struct.pack_into("<3f", head, 40, nx, ny, 1)
    struct.pack_into("<3f", head, 52, 90, 90, 90)
    struct.pack_into("<3i", head, 64, 1, 2, 3)
    head[208:212] = b"MAP "
    head[212:216] = b"\x44\x44\x00\x00"
    path.write_bytes(bytes(head) + image.astype("<f4").tobytes())


def write_defects(base, rows=(), cols=(), pixels=()):
    """The DE defect map LiberTEM reads: <base>.seq.Config.Metadata.xml (a BadPixelMap of
    Defect elements: Row, Rows "a-b", Column, or Column and Row) and <base>.seq.metadata
    (its frame geometry at byte 282: unbinned size X, Y, offsets X, Y, binning)."""
    h, w = SEQ_SIG
    defects = [f'<Defect Row="{r}"/>' for r in rows] + [f'<Defect Column="{c}"/>' for c in cols]
    defects += [f'<Defect Column="{x}" Row="{y}"/>' for y, x in pixels]
    (base.parent / (base.name + ".seq.Config.Metadata.xml")).write_text(
        f'<Config><BadPixels><BadPixelMap Columns="{w}" Rows="{h}">{"".join(defects)}</BadPixelMap></BadPixels></Config>')
    meta = bytearray(282) + struct.pack("<iiiiiiiiiii?", 0, 0, w, h, 0, 0, 1, 16, 0, 0, 0, False) + bytearray(64)
    (base.parent / (base.name + ".seq.metadata")).write_bytes(bytes(meta))


@pytest.fixture
def seq(tmp_path):
    frames = random_frames((12,) + SEQ_SIG, "uint16", seed=5)
    path = tmp_path / "scan.seq"
    write_seq(path, frames)
    return path, frames


def test_seq(ctx, seq):
    path, _ = seq
    with quiet(stemdot.open, path, nav_shape=(3, 4)) as ds:
        compare(ctx, lt_load(ctx, "seq", path=str(path), nav_shape=(3, 4)), ds)


def test_seq_defect_pixels(ctx, seq):
    """The defect pixels of the DE defect map (a row, a column, single pixels; at the edge
    too) are patched with the mean of their neighbours, by default, in both."""
    path, _ = seq
    write_defects(path.with_suffix(""), rows=[3], cols=[10], pixels=[(0, 0), (7, 5), (15, 8)])
    lt_ds = lt_load(ctx, "seq", path=str(path), nav_shape=(3, 4))
    mask = np.random.default_rng(7).random(SEQ_SIG).astype(np.float32)
    with quiet(stemdot.open, path, nav_shape=(3, 4)) as ds:
        assert_agree(stemdot.reduce(ds, ("sum",))["sum"], lt_run(ctx, lt_ds, SumUDF())["intensity"].data, rtol=1e-6)
        assert_agree(stemdot.apply_masks(ds, mask)[..., 0], lt_masks(ctx, lt_ds, [lambda: mask])[..., 0], rtol=1e-5)


def patched(frames, bad):
    """numpy's patch of the defect pixels bad (a boolean frame): each the mean of its good
    3×3 neighbours inside the frame, as LiberTEM's corrections compute it (float64, then
    float32)."""
    out = frames.astype(np.float32)
    h, w = bad.shape
    for y, x in np.argwhere(bad):
        ys, xs = slice(max(y - 1, 0), min(y + 2, h)), slice(max(x - 1, 0), min(x + 2, w))
        good = ~bad[ys, xs]
        out[:, y, x] = (frames[:, ys, xs].astype(np.float64)[:, good].mean(axis=1)).astype(np.float32)
    return out


@difference("SEQ defect map of non-square frames")
def test_seq_defect_pixels_non_square(ctx, tmp_path):
    """A 16×24 SEQ whose defect map (Columns 24, Rows 16) lists row 3: LiberTEM builds the
    map transposed, (Columns, Rows), and patches the row over its first 16 columns only;
    a defect at column 20 is an IndexError there. stemdot patches the whole row, and the
    column, as the map says."""
    sig = (16, 24)
    frames = random_frames((4,) + sig, "uint16", seed=9)
    path = tmp_path / "scan.seq"
    write_seq(path, frames)
    base = path.with_suffix("")

    def defects(xml):
        (base.parent / (base.name + ".seq.Config.Metadata.xml")).write_text(
            f'<Config><BadPixels><BadPixelMap Columns="24" Rows="16">{xml}</BadPixelMap></BadPixels></Config>')
        meta = bytearray(282) + struct.pack("<iiiiiiiiiii?", 0, 0, 24, 16, 0, 0, 1, 16, 0, 0, 0, False) + bytearray(64)
        (base.parent / (base.name + ".seq.metadata")).write_bytes(bytes(meta))

    bad = np.zeros(sig, bool)
    bad[3] = True
    defects('<Defect Row="3"/>')
    lt = lt_run(ctx, lt_load(ctx, "seq", path=str(path), nav_shape=(2, 2)), SumUDF())["intensity"].data
    want = patched(frames, bad).astype(np.float64).sum(axis=0)
    with quiet(stemdot.open, path, nav_shape=(2, 2)) as ds:
        assert_agree(stemdot.reduce(ds, ("sum",))["sum"], want, rtol=1e-6, what="stemdot vs numpy")
    first16 = np.zeros(sig, bool)
    first16[3, :16] = True
    assert_agree(lt, patched(frames, first16).astype(np.float64).sum(axis=0), rtol=1e-6, what="LiberTEM: the row's first 16 columns patched")
    assert not np.allclose(lt, want), "LiberTEM's patch of a non-square frame is stemdot's"
    bad[:] = False
    bad[:, 20] = True
    defects('<Defect Column="20"/>')
    with pytest.raises(IndexError):
        lt_run(ctx, lt_load(ctx, "seq", path=str(path), nav_shape=(2, 2)), SumUDF())
    with quiet(stemdot.open, path, nav_shape=(2, 2)) as ds:
        assert_agree(stemdot.reduce(ds, ("sum",))["sum"], patched(frames, bad).astype(np.float64).sum(axis=0), rtol=1e-6)


def test_seq_dark_gain(ctx, seq):
    """NAME.seq.dark.mrc and NAME.seq.gain.mrc applied by default, as LiberTEM applies
    them; option seq_corrections=False keeps the recorded counts."""
    path, frames = seq
    rng = np.random.default_rng(6)
    dark = rng.random(SEQ_SIG).astype(np.float32) * 10
    gain = (0.5 + rng.random(SEQ_SIG)).astype(np.float32)
    base = path.with_suffix("")
    write_mrc(base.parent / (base.name + ".seq.dark.mrc"), dark)
    write_mrc(base.parent / (base.name + ".seq.gain.mrc"), gain)
    lt_ds = lt_load(ctx, "seq", path=str(path), nav_shape=(3, 4))
    want = lt_run(ctx, lt_ds, StdDevUDF())
    corrected = (frames.astype(np.float64) - dark) * gain
    assert_agree(want["sum"].data, corrected.sum(axis=0), rtol=1e-6, what="LiberTEM vs numpy")
    with quiet(stemdot.open, path, nav_shape=(3, 4)) as ds:
        got = stemdot.reduce(ds, ("sum", "std"))
        assert_agree(got["sum"], want["sum"].data, rtol=1e-6, what="sum")
        assert_agree(got["std"], want["std"].data, rtol=1e-5, what="std")
    with quiet(stemdot.open, path, nav_shape=(3, 4), seq_corrections=False) as ds:
        assert_agree(stemdot.reduce(ds, ("sum",))["sum"], frames.sum(axis=0, dtype=np.float64), rtol=0,
                     what="stemdot's counts")
