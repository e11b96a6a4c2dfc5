"""Formats of issue #19 through Python: a format's own options by keyword, the real files'
virtual images against numpy decoders written here (not stemdot's readers)."""
import warnings

import numpy as np
import pytest

import stemdot


def _tvips_frames(paths):
    """Frames of a TVIPS stream (parts in order; only the first has the header): a 256-byte
    series header of int32 words (version at byte 4, dimX 8, dimY 12, bits per pixel 16,
    image header bytes 48 in version 2, 12 in version 1), then records of an image header
    and dimY×dimX little-endian pixels."""
    raw = b"".join(p.read_bytes() for p in paths)
    head = np.frombuffer(raw[:256], "<i4")
    version, dimx, dimy, bpp = head[1], head[2], head[3], head[4]
    imghead = head[12] if version == 2 else 12
    dt = np.dtype("<u1" if bpp == 8 else "<u2")
    rec = imghead + dimx * dimy * dt.itemsize
    body = raw[256:]
    n = len(body) // rec
    recs = np.frombuffer(body[: n * rec], np.uint8).reshape(n, rec)[:, imghead:]
    return recs.copy().view(dt).reshape(n, dimy, dimx)


def test_format_option_by_keyword(data_dir):
    parts = sorted((data_dir / "tvips").glob("test_tvips_2345_split_*.tvips"))
    frames = _tvips_frames(parts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = stemdot.open(str(parts[1]), rotator_index=False, nav_shape=(2, 3))
    assert ds.nav_shape == (2, 3)
    assert ds.sig_shape == frames.shape[1:]
    mask = np.ones((1,) + frames.shape[1:], np.float32)
    got = stemdot.apply_masks(ds, mask)
    want = frames.astype(np.float64).sum(axis=(1, 2)).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(got)[..., 0], want)


def test_format_option_errors(data_dir):
    path = str(data_dir / "tvips" / "test_tvips_2233_000.tvips")
    with pytest.raises(stemdot.InvalidArgumentError, match="rotator_index"):
        stemdot.open(path, rotator_index="sideways")
    with pytest.raises(stemdot.InvalidArgumentError, match="colour"):
        stemdot.open(path, colour="blue")
    # Another format's option is ignored with a warning naming it.
    with pytest.warns(UserWarning, match="pixel_mask applies to dectris files only"):
        stemdot.open(path, pixel_mask=False)


def test_ser_series_against_numpy(data_dir):
    """The TIA SER file of 5 diffraction frames: the data offset array at the header's
    offset-array offset, each 2-D element's 50-byte header (version 0x0210: calibrations,
    data type, array size) before its int32 pixels, rows stored bottom-up (the frame's
    row 0 is the last stored row, as ncempy, LiberTEM and RosettaSciIO read them)."""
    path = data_dir / "ser" / "128x128x5-diffraction_preview_1.ser"
    raw = path.read_bytes()
    assert raw[:2] == b"II" and int.from_bytes(raw[4:6], "little") in (0x210, 0x220)
    wide = int.from_bytes(raw[4:6], "little") == 0x220
    total = int.from_bytes(raw[14:18], "little")
    table = int.from_bytes(raw[22:30] if wide else raw[22:26], "little")
    offs = np.frombuffer(raw, "<u8" if wide else "<u4", count=total, offset=table)
    frames = []
    for off in offs:
        off = int(off)
        nx, ny = np.frombuffer(raw, "<u4", count=2, offset=off + 42)
        frames.append(np.frombuffer(raw, "<i4", count=nx * ny, offset=off + 50).reshape(ny, nx)[::-1])
    frames = np.array(frames, np.float64)
    ds = stemdot.open(str(path))
    assert ds.format == "ser" and ds.nav_shape == (5,) and ds.sig_shape == frames.shape[1:]
    disk = np.zeros((1,) + frames.shape[1:], np.float32)
    disk[0, 40:90, 30:70] = 1
    got = np.asarray(stemdot.apply_masks(ds, disk))[..., 0]
    np.testing.assert_allclose(got, frames[:, 40:90, 30:70].sum(axis=(1, 2)), rtol=1e-6)


def test_dectris_master_against_h5py(data_dir):
    h5py = pytest.importorskip("h5py")
    pytest.importorskip("hdf5plugin")
    master = data_dir / "arina" / "test_00_master.h5"
    with h5py.File(master) as f:
        frames = f["/entry/data/data_000001"][()].astype(np.float64)
        mask = f["/entry/instrument/detector/detectorSpecific/pixel_mask"][()]
    frames[frames == 2**32 - 1] = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = stemdot.open(str(master), nav_shape=(4, 4))
    assert ds.format == "dectris" and ds.sig_shape == frames.shape[1:]
    frames[:, mask != 0] = 0
    np.testing.assert_array_equal(stemdot.reduce(ds, "sum")["sum"], frames.sum(axis=0))


def test_seq_defect_pixels_on_every_path(tmp_path):
    """Case 61 (LiberTEM PR #1077): a DE SEQ file whose column 40 is hot and pixel
    (20, 10) dead-hot, both listed in NAME.seq.Config.Metadata.xml (placed by
    NAME.seq.metadata). Pick, sum and apply see them patched as LiberTEM patches them, each
    by the float64 mean of its good 3×3 neighbours rounded to float32 (the numpy patch
    below); seq_defect_pixels=False reads the recorded counts."""
    import struct
    ny, nx, s = 4, 4, 64
    rng = np.random.default_rng(1077)
    frames = (rng.poisson(50, (ny * nx, s, s)) + 10).astype(np.uint16)
    frames[:, :, 40] = 60000
    frames[:, 20, 10] = 50000
    seq = tmp_path / "acq.seq"
    head = bytearray(8192)
    struct.pack_into("<L", head, 0, 0xFEED)
    struct.pack_into("<ll", head, 28, 5, 8192)
    struct.pack_into("<9L", head, 548, s, s, 16, 16, 2 * s * s, 100, ny * nx, 0, 2 * s * s + 16)
    seq.write_bytes(bytes(head) + b"".join(f.astype("<u2").tobytes() + bytes(16) for f in frames))
    meta = bytearray(512)
    struct.pack_into("<7i", meta, 282, 512, 1, s, s, 0, 0, 1)
    (tmp_path / "acq.seq.metadata").write_bytes(bytes(meta))
    (tmp_path / "acq.seq.Config.Metadata.xml").write_text(
        f'<?xml version="1.0"?><BadPixels><BadPixelMap Rows="{s}" Columns="{s}">'
        '<Defect Column="40"/><Defect Column="10" Row="20"/></BadPixelMap></BadPixels>')

    bad = np.zeros((s, s), bool)
    bad[:, 40] = bad[20, 10] = True
    want = frames.astype(np.float32)
    for y, x in zip(*np.nonzero(bad)):
        win = (slice(max(y - 1, 0), y + 2), slice(max(x - 1, 0), x + 2))
        good = frames[:, win[0], win[1]][:, ~bad[win]].astype(np.float64)
        want[:, y, x] = good.mean(axis=1).astype(np.float32)

    with pytest.warns(UserWarning, match="65 defect pixels that acq.seq.Config.Metadata.xml lists are patched"):
        ds = stemdot.open(str(seq), nav_shape=(ny, nx))
    at = [(y, x) for y in range(ny) for x in range(nx)]
    picked = np.asarray(stemdot.pick(ds, at))
    assert picked.dtype == np.float32
    np.testing.assert_array_equal(picked, want)
    np.testing.assert_allclose(stemdot.reduce(ds, ("sum",))["sum"], want.astype(np.float64).sum(axis=0), rtol=1e-12)
    band = np.zeros((1, s, s), np.float32)
    band[0, :, 30:50] = 1
    np.testing.assert_allclose(np.asarray(stemdot.apply_masks(ds, band))[..., 0],
                               want[:, :, 30:50].astype(np.float64).sum(axis=(1, 2)).reshape(ny, nx), rtol=1e-6)

    with pytest.warns(UserWarning, match="keep their recorded values"):
        raw = stemdot.open(str(seq), nav_shape=(ny, nx), seq_defect_pixels=False)
    np.testing.assert_array_equal(np.asarray(stemdot.pick(raw, at)), frames)


@pytest.mark.parametrize("name", ["001_4x2_6bit", "002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y",
                                  "Quad_9_Frame_CounterDepth_6_Rows_256", "Quad_9_Frame_CounterDepth_12_Rows_256",
                                  "Single_9_Frame_CounterDepth_1_Rows_256", "Single_9_Frame_CounterDepth_6_Rows_256",
                                  "Single_9_Frame_CounterDepth_12_Rows_256", "Single_9_Frame_CounterDepth_24_Rows_256"])
def test_mib_nav_shape_against_rosettasciio(data_dir, name):
    """The nav shape of each real MIB file as RosettaSciIO's quantumdetector reader finds it
    (the .hdr's frames per trigger, else the rows of the frame timestamps: 001's .hdr gives
    none, its timestamps 2 rows of 4); stemdot's is the same, and the frames alike."""
    path = str(data_dir / "mib" / (name + ".mib"))
    want = {"001_4x2_6bit": (2, 4), "002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y": (2, 4)}.get(name, (1, 9))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = stemdot.open(path)
    assert tuple(ds.nav_shape) == want
    quantumdetector = pytest.importorskip("rsciio.quantumdetector", reason="RosettaSciIO not installed (pip install rosettasciio)")
    data = quantumdetector.file_reader(path)[0]["data"]  # (nav..., sig_y, sig_x), rows flipped
    rs_nav = data.shape[:-2]
    assert (1,) * (2 - len(rs_nav)) + tuple(rs_nav) == want
    mask = np.ones((1,) + tuple(ds.sig_shape), np.float32)
    got = np.asarray(stemdot.apply_masks(ds, mask))[..., 0]
    np.testing.assert_array_equal(got, data.astype(np.float64).sum(axis=(-2, -1)).reshape(want))
