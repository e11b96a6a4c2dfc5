"""Calibrations (issue #35): what a file's metadata states of its axes, through Python —
Dataset.calibration and the "calibration" section of Result.info, against the raw header
bytes (read here with struct), the CLI's sidecar, and RosettaSciIO when installed."""
import struct
import subprocess
import warnings

import numpy as np
import pytest

import stemdot


def _blo_header(path):
    """SX, SY (nm), SDP (100 × pixels per cm) and Camera_length (10⁴ × m) of a NanoMEGAS
    block file's header (bytes 30, 38, 50, 52; RosettaSciIO's blockfile header dtype)."""
    b = open(path, "rb").read(56)
    sx, sy = struct.unpack_from("<dd", b, 30)
    sdp, cl = struct.unpack_from("<HI", b, 50)
    return sx, sy, sdp, cl


def test_blo_calibration(data_dir, tmp_path, cli):
    path = str(data_dir / "blo" / "test1.blo")
    sx, sy, sdp, cl = _blo_header(path)
    want = {"nav": [{"name": "y", "scale": sy, "offset": 0, "units": "nm"}, {"name": "x", "scale": sx, "offset": 0, "units": "nm"}],
            "sig": [{"name": "ky", "scale": 100 / sdp, "offset": 0, "units": "cm"},
                    {"name": "kx", "scale": 100 / sdp, "offset": 0, "units": "cm"}],
            "camera_length_m": cl * 1e-4}
    assert (sx, sy, sdp, cl) == (12.8, 12.8, 6226, 2000)
    ds = stemdot.open(path)
    assert ds.calibration == want
    res = stemdot.apply_masks(ds, np.ones((1, 144, 144), np.float32))
    assert res.info["calibration"] == want
    # The CLI's sidecar says the same.
    out = tmp_path / "r.npy"
    subprocess.run([str(cli), "apply", path, "--mask", "disk:72,72,10", "--out", str(out), "-q"], check=True)
    assert stemdot.load_result(str(out)).info["calibration"] == want
    # A compact ROI's result is no scan: its nav axes are left out.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res, _ = stemdot.apply_masks(stemdot.open(path, roi="rect:0,0,1,2"), np.ones((1, 144, 144), np.float32), roi_compact=True)
    assert res.info["calibration"] == {k: v for k, v in want.items() if k != "nav"}


def test_uncalibrated(data_dir):
    ds = stemdot.open(str(data_dir / "mib" / "001_4x2_6bit.mib"), nav_shape=(2, 4))
    assert ds.calibration == {}
    res = stemdot.apply_masks(ds, np.ones((1, 256, 256), np.float32))
    assert "calibration" not in res.info


def test_rosettasciio(data_dir):
    """py4DSTEM's EMD and TIA's SER as RosettaSciIO reads them (its SER offset stays in
    1/m while its scale is in 1/nm: compared ×10⁻⁹)."""
    pytest.importorskip("rsciio")
    from rsciio import emd, tia
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = emd.file_reader(str(data_dir / "emd" / "py4DSTEM_size2x3x4x5.h5"))[0]["axes"]
        ser = tia.file_reader(str(data_dir / "ser" / "128x128x5-diffraction_preview.emi"))[0]["axes"]
    cal = stemdot.open(str(data_dir / "emd" / "py4DSTEM_size2x3x4x5.h5")).calibration
    for a, r in zip(cal["nav"] + cal["sig"], ref):
        assert a["scale"] == pytest.approx(r["scale"], rel=1e-12)
        assert a["units"] == r["units"].replace(" / ", "/")
    cal = stemdot.open(str(data_dir / "ser" / "128x128x5-diffraction_preview.emi")).calibration
    for a, r in zip(cal["sig"], ser[1:]):
        assert a["scale"] == pytest.approx(r["scale"], rel=1e-12)
        assert a["offset"] == pytest.approx(r["offset"] * 1e-9, rel=1e-12)
        assert a["units"] == "1/nm" and r["units"] == "1 / nm"
