"""A session of the stemdot command (the `cli` fixture: the checkout's bin/stemdot, or with
STEMDOT_CLI the installed wheel's console script, make test-wheel): synth, apply and info
on NPY and HDF5 files, the results checked against numpy (float64) on the frames as numpy
and h5py read them. Run with the environment's LD_LIBRARY_PATH removed, so that an
installed wheel's command finds libhdf5 through its own RPATH (the copy in stemdot.libs/)."""

import json
import os
import subprocess

import numpy as np
import pytest

ENV = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}


def stemdot(cli, *args, cwd):
    run = subprocess.run([str(cli), *map(str, args)], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"stemdot {' '.join(map(str, args))}: {run.stdout}{run.stderr}"
    return run.stdout


def disk(sig_shape, cy, cx, r):
    y, x = np.indices(sig_shape)
    return ((y - cy) ** 2 + (x - cx) ** 2 <= r * r).astype(np.float32)


def check_apply(cli, path, frames, tmp_path, *options):
    """stemdot apply PATH with an NPY stack of a disk and a random mask equals the float64
    dot products with frames (nav_shape + sig_shape)."""
    sig = frames.shape[-2:]
    rng = np.random.default_rng(35)
    masks = np.stack([disk(sig, sig[0] / 2, sig[1] / 2, min(sig) / 4), rng.random(sig, np.float32)])
    np.save(tmp_path / "masks.npy", masks)
    stemdot(cli, "apply", path, "--masks", "masks.npy", "--out", "r.npy", *options, cwd=tmp_path)
    got = np.load(tmp_path / "r.npy")
    want = np.einsum("...yx,myx->...m", frames.astype(np.float64), masks.astype(np.float64))
    assert got.dtype == np.float32 and got.shape == frames.shape[:-2] + (2,)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    sidecar = json.loads((tmp_path / "r.json").read_text())
    assert sidecar["shape"] == list(got.shape)


def test_version_says_hdf5(cli, tmp_path):
    out = stemdot(cli, "--version", cwd=tmp_path)
    assert out.startswith("stemdot ") and "with HDF5 (libhdf5 " in out, out


def test_synth_apply_npy(cli, tmp_path):
    stemdot(cli, "synth", "--out", "s.npy", "--nav-shape", "6,5", "--sig-shape", "24,32", "--dtype", "uint16", cwd=tmp_path)
    frames = np.load(tmp_path / "s.npy")
    assert frames.shape == (6, 5, 24, 32) and frames.dtype == np.uint16 and frames.any()
    check_apply(cli, "s.npy", frames, tmp_path)
    out = stemdot(cli, "info", "s.npy", cwd=tmp_path)
    assert "nav_shape:  (6, 5)" in out and "sig_shape:  (24, 32)" in out and "dtype:      uint16" in out, out


def test_hdf5_written_by_h5py(cli, tmp_path):
    """A deflate+shuffle chunked dataset written by h5py's own libhdf5."""
    h5py = pytest.importorskip("h5py", reason="h5py is not installed: the HDF5 session is left out")
    frames = np.random.default_rng(1).poisson(3, (4, 3, 16, 20)).astype(np.uint16)
    with h5py.File(tmp_path / "s.h5", "w") as f:
        f.create_dataset("scan/frames", data=frames, chunks=(1, 1, 16, 20), compression="gzip", shuffle=True)
    out = stemdot(cli, "info", "s.h5", cwd=tmp_path)
    assert "format:     hdf5" in out and "nav_shape:  (4, 3)" in out and "sig_shape:  (16, 20)" in out, out
    check_apply(cli, "s.h5", frames, tmp_path, "--dataset-path", "/scan/frames")


def test_hdf5_real_file(cli, data_dir, tmp_path):
    """The fpd file (deflate, shuffle, fletcher32, big-endian uint16; nav (2, 2, 1))."""
    h5py = pytest.importorskip("h5py", reason="h5py is not installed: the HDF5 session is left out")
    path = data_dir / "hdf5" / "fpd_file_test.hdf5"
    out = stemdot(cli, "info", path, cwd=tmp_path)
    assert "format:     hdf5" in out and "nav_shape:  (2, 2, 1)" in out and "frames:     4" in out, out
    with h5py.File(path, "r") as f:
        frames = f["/fpd_expt/fpd_data/data"][()]
    check_apply(cli, path, frames, tmp_path)


def test_error_exit_status_and_message(cli, tmp_path):
    """The command's own exit status and message, also through the console script (exec)."""
    run = subprocess.run([str(cli), "info", "missing.npy"], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and run.stderr.startswith("stemdot: ") and "missing.npy" in run.stderr, run
