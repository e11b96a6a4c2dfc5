"""Named results (#18.5): apply_masks' Result carries the masks' names and the sidecar
schema; stemdot.load_result reads stemdot apply's NPY and sidecar. CoM products
(#18.6): stemdot.com_products against numpy (numpy.gradient, numpy.fft) and a synthetic
phase object through apply_masks and the com masks."""

import json
import os
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest

import stemdot


def test_apply_masks_names_its_columns():
    frames = np.arange(2 * 3 * 8 * 8, dtype=np.float32).reshape(2, 3, 8, 8) % 7
    masks, names = stemdot.mask_stack((8, 8), specs=["disk:4,4,2", "com"])
    r = stemdot.apply_masks(frames, masks, names=names, cpus=1)
    assert isinstance(r, np.ndarray) and isinstance(r, stemdot.Result)
    np.testing.assert_array_equal(r, np.einsum("abyx,myx->abm", frames, masks))  # as before
    assert r.names == ("disk", "com_sum", "com_y", "com_x")
    np.testing.assert_array_equal(r.column("com_y"), np.asarray(r)[..., 2])
    assert r.info == {
        "format": "stemdot-result", "format_version": 1, "stemdot_version": stemdot.__version__,
        "shape": [2, 3, 4], "dtype": "float32", "nav_shape": [2, 3], "sig_shape": [8, 8],
        "masks": [{"column": i, "name": n, "index": i} for i, n in enumerate(names)],
        "dataset": {"path": "", "format": "memory", "options": {}},
        "plan": {"cpu_workers": 1, "gpu_workers": 0},
    }
    assert r[..., :2].names is None and (r * 2).names is None, "derived arrays are unnamed"
    back = pickle.loads(pickle.dumps(r))
    assert back.names == r.names and back.info == r.info
    assert stemdot.apply_masks(frames, masks).names == ("mask0", "mask1", "mask2", "mask3")
    with pytest.raises(stemdot.ShapeError, match="3 names for 4 masks"):
        stemdot.apply_masks(frames, masks, names=["a", "b", "c"])
    with pytest.raises(KeyError, match="no mask of that name"):
        r.column("ring")


def test_apply_masks_info_names_the_file_and_options(data_dir):
    mib = data_dir / "mib" / "001_4x2_6bit.mib"
    with stemdot.open(mib, nav_shape=(2, 4)) as ds:
        r = stemdot.apply_masks(ds, stemdot.disk(ds.sig_shape, 128, 128, 20), names=["bf"])
    assert r.info["dataset"] == {"path": os.path.abspath(mib), "format": "mib", "options": {"nav_shape": "2,4"}}
    assert r.names == ("bf",)


def test_load_result_reads_the_cli_result(cli, data_dir, tmp_path):
    mib = data_dir / "mib" / "001_4x2_6bit.mib"
    out = tmp_path / "r.npy"
    run = subprocess.run([str(cli), "apply", str(mib), "--nav-shape", "2,4", "--mask", "disk:128,128,20", "--mask", "com",
                          "--out", str(out), "--com-shifts", str(tmp_path / "s.npy"), "--cpus", "1", "-q"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    r = stemdot.load_result(out)
    assert r.names == ("disk", "com_sum", "com_y", "com_x")
    np.testing.assert_array_equal(r, np.load(out))
    assert r.info["masks"][3] == {"column": 3, "name": "com_x", "spec": "com", "index": 2}
    assert r.info["dataset"]["options"] == {"nav_shape": "2,4"}
    assert r.info["com_shifts"]["file"] == "s.npy"
    with stemdot.open(mib, nav_shape=(2, 4)) as ds:
        masks, names = stemdot.mask_stack(ds.sig_shape, specs=["disk:128,128,20", "com"])
        mine = stemdot.apply_masks(ds, masks, names=names, cpus=1)
    skip = ("masks", "com_shifts")  # Python's apply_masks gets names only, and writes no shift maps
    assert {k: v for k, v in mine.info.items() if k not in skip} == {k: v for k, v in r.info.items() if k not in skip}
    assert mine.names == r.names

    # Sidecars that do not describe their NPY.
    info = json.loads((tmp_path / "r.json").read_text())
    for change, error, message in [
        ({"shape": [2, 4, 5]}, stemdot.ShapeError, r"describes shape \(2, 4, 5\), but .* holds \(2, 4, 4\)"),
        ({"dtype": "float64"}, stemdot.DTypeError, "describes dtype float64"),
        ({"masks": info["masks"][:3]}, stemdot.ShapeError, "names 3 columns"),
        ({"format": "other"}, stemdot.FormatError, "not the sidecar of a stemdot result"),
        ({"format_version": 2}, stemdot.FormatError, "format_version 2: .* upgrade stemdot"),
    ]:
        (tmp_path / "r.json").write_text(json.dumps(info | change))
        with pytest.raises(error, match=message):
            stemdot.load_result(out)
    (tmp_path / "r.json").write_text("{")
    with pytest.raises(stemdot.FormatError, match="not JSON"):
        stemdot.load_result(out)
    os.unlink(tmp_path / "r.json")
    with pytest.warns(UserWarning, match="has no sidecar .*r.json: its columns are unnamed"):
        bare = stemdot.load_result(out)
    assert bare.names is None and bare.info is None


def test_load_result_opens_regular_files_only(tmp_path):
    """#33.2: a FIFO sidecar made load_result wait for a writer forever, a directory raised
    a bare IsADirectoryError: both, and a FIFO or directory NPY, are StemdotIOError naming
    the path, at once (a FIFO checked in a process of its own, which a hang would time out)."""
    out = tmp_path / "r.npy"
    np.save(out, np.arange(6, dtype=np.float32).reshape(2, 3))
    code = "import stemdot, sys\ntry:\n stemdot.load_result(sys.argv[1])\nexcept stemdot.StemdotIOError as e:\n print(e)"
    os.mkfifo(tmp_path / "r.json")
    run = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=60)
    assert run.stdout == f"sidecar {tmp_path / 'r.json'} is a FIFO (named pipe), not a regular file\n", run.stderr
    os.unlink(tmp_path / "r.json")
    os.mkdir(tmp_path / "r.json")
    with pytest.raises(stemdot.StemdotIOError, match=f"^sidecar {tmp_path / 'r.json'} is a directory, not a regular file$"):
        stemdot.load_result(out)
    os.mkfifo(tmp_path / "fifo.npy")
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path / "fifo.npy")], capture_output=True, text=True, timeout=60)
    assert run.stdout == f"result {tmp_path / 'fifo.npy'} is a FIFO (named pipe), not a regular file\n", run.stderr
    with pytest.raises(stemdot.StemdotIOError, match=f"^result {tmp_path} is a directory, not a regular file$"):
        stemdot.load_result(tmp_path)
    with pytest.raises(stemdot.StemdotIOError, match="missing.npy: file does not exist"):
        stemdot.load_result(tmp_path / "missing.npy")
    os.rmdir(tmp_path / "r.json")
    with pytest.warns(UserWarning, match="has no sidecar"):
        np.testing.assert_array_equal(stemdot.load_result(out), np.arange(6, dtype=np.float32).reshape(2, 3))


# ------------------------------------------------------------------------ CoM products


def numpy_products(shifts, rotation, flip_y):
    """The CoM products with numpy alone: LiberTEM's apply_correction matrices,
    numpy.gradient, and LiberTEM-iCoM's Fourier integration with fftfreq frequencies."""
    t = np.deg2rad(rotation)
    m = np.array([(np.cos(t), np.sin(t)), (-np.sin(t), np.cos(t))]) @ np.array([(-1 if flip_y else 1, 0), (0, 1)])
    y, x = np.einsum("ij,abj->iab", m, shifts)
    ky, kx = np.fft.fftfreq(y.shape[0])[:, None], np.fft.fftfreq(y.shape[1])[None, :]
    k2 = kx**2 + ky**2
    k2[0, 0] = 1
    spectrum = (kx * np.fft.fft2(x) + ky * np.fft.fft2(y)) / (2j * np.pi * k2)
    spectrum[0, 0] = 0
    return {
        "field": np.stack([y, x], axis=-1),
        "magnitude": np.hypot(y, x),
        "divergence": np.gradient(y, axis=0) + np.gradient(x, axis=1),
        "curl": np.gradient(y, axis=1) - np.gradient(x, axis=0),
        "icom": np.real(np.fft.ifft2(spectrum)),
    }


@pytest.mark.parametrize("shape, rotation, flip_y", [((7, 10), 0, False), ((8, 5), 33.5, True), ((2, 2), -90, False)])
def test_com_products_equal_numpy(shape, rotation, flip_y):
    shifts = np.random.default_rng(sum(shape)).normal(size=shape + (2,))
    got = stemdot.com_products(shifts.astype(np.float32) if flip_y else shifts, rotation=rotation, flip_y=flip_y)
    want = numpy_products(shifts.astype(np.float32).astype(np.float64) if flip_y else shifts, rotation, flip_y)
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=1e-12, err_msg=k)


def test_com_products_curl_and_divergence_free_fields():
    phi = np.random.default_rng(3).normal(size=(9, 11))
    gy, gx = np.gradient(phi)
    p = stemdot.com_products(np.stack([gy, gx], -1))
    np.testing.assert_allclose(p["curl"], 0, atol=1e-12)
    p = stemdot.com_products(np.stack([gx, -gy], -1))
    np.testing.assert_allclose(p["divergence"], 0, atol=1e-12)


def test_com_products_of_a_phase_object():
    """Frames of a Gaussian spot displaced by α·∇φ from the com reference point; the iCoM
    of apply_masks' com shifts is α·φ less its mean."""
    ny, nx, sig, alpha = 16, 20, 32, 3.0
    i, j = np.mgrid[:ny, :nx].astype(np.float64)
    a, b = 2 * np.pi * 2 / ny, 2 * np.pi / nx
    phi = np.sin(a * i) * np.cos(b * j)
    cy = 16 + alpha * a * np.cos(a * i) * np.cos(b * j)
    cx = 16 - alpha * b * np.sin(a * i) * np.sin(b * j)
    yy, xx = np.mgrid[:sig, :sig]
    frames = np.exp(-((yy - cy[..., None, None]) ** 2 + (xx - cx[..., None, None]) ** 2) / (2 * 2.5**2)).astype(np.float32)
    r = stemdot.apply_masks(frames, stemdot.com((sig, sig)), dtype=np.float64, cpus=1)
    p = stemdot.com_products(stemdot.com_shifts(r, 0))
    np.testing.assert_allclose(p["icom"], alpha * (phi - phi.mean()), atol=1e-6)


def test_com_products_errors_and_warning():
    with pytest.raises(stemdot.ShapeError, match=r"want the shift maps of com_shifts"):
        stemdot.com_products(np.zeros((4, 2)))
    with pytest.raises(stemdot.ShapeError, match="at least 2×2 positions"):
        stemdot.com_products(np.zeros((1, 5, 2)))
    with pytest.raises(stemdot.InvalidArgumentError, match="option rotation NaN is not a finite angle"):
        stemdot.com_products(np.zeros((3, 3, 2)), rotation=float("nan"))
    shifts = np.zeros((3, 4, 2))
    shifts[2, 1] = np.nan
    with pytest.warns(UserWarning, match=r"1 of 12 scan positions have no finite CoM shift .* at \(y, x\) \(2, 1\)"):
        p = stemdot.com_products(shifts)
    np.testing.assert_array_equal(p["icom"], 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stemdot.com_products(np.zeros((3, 4, 2)))
