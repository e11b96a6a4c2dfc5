"""Issue #33: run notes. What a reader counts in the frames it reads (a DECTRIS detector's
saturated pixels: values 2^N-1 that its pixel_mask does not flag) reaches the user after
each run as a warning, counted over the frames that run read, against numpy's count of the
frames written here: in Python (stemdot.RunNoteWarning, Result.info["run_notes"]), summed
over the ranges of a Dask run (stemdot.dask on a LocalCluster of 2 worker processes), and
printed by stemdot apply and python -m stemdot.dask apply alike."""

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

import stemdot

h5py = pytest.importorskip("h5py")

NY, NX, SY, SX = 8, 8, 24, 20
TEXT = ("saturated pixels, kept at 65535: pixel values at 65535 (2^16−1) that pixel_mask does not flag, where the "
        "detector's count overflowed: {count}, in {frames} of the frames read")
TIMEOUT = 180


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    """A DECTRIS acquisition (master with pixel_mask, nimages, ntrigger; one data file of
    gzip chunks of one frame) of 8×8 positions of 24×20 uint16 frames: counts of 1 to 40,
    a beam centre overflowing to 65535 on 0 to 12 pixels a frame, 2 flagged pixels at
    65535 in every frame. Returns the master and numpy's count per frame of the unflagged
    pixels at 65535."""
    d = tmp_path_factory.mktemp("dectris")
    rng = np.random.default_rng(33)
    frames = rng.integers(1, 41, (NY * NX, SY, SX)).astype(np.uint16)
    for f in frames:
        f[10 + rng.integers(0, 4, rng.integers(0, 13)), 8 + rng.integers(0, 4, 1)] = 65535
    mask = np.zeros((SY, SX), np.uint32)
    mask[3, 17] = mask[20, 2] = 1
    frames[:, mask != 0] = 65535
    with h5py.File(d / "scan_data_000001.h5", "w") as f:
        f.create_dataset("entry/data/data", data=frames, chunks=(1, SY, SX), compression="gzip")
    master = d / "scan_master.h5"
    with h5py.File(master, "w") as f:
        f["entry/data/data_000001"] = h5py.ExternalLink("scan_data_000001.h5", "/entry/data/data")
        g = f.create_group("entry/instrument/detector/detectorSpecific")
        g["nimages"], g["ntrigger"], g["pixel_mask"] = np.uint64(NY * NX), np.uint64(1), mask
    counts = ((frames == 65535) & (mask == 0)).sum(axis=(1, 2))
    assert 30 < np.count_nonzero(counts) < NY * NX
    return master, counts


def note(master, counts):
    """numpy's run note of frames with counts: its warning and sidecar record."""
    count, frames = int(counts.sum()), int(np.count_nonzero(counts))
    warning = f"{master}: " + TEXT.replace("{count}", str(count)).replace("{frames}", str(frames))
    return {"key": "dectris_saturated", "count": count, "frames": frames, "warning": warning}


def run_notes_warned(record):
    return [str(w.message) for w in record if issubclass(w.category, stemdot.RunNoteWarning)]


def test_python_warns_run_notes(scan):
    master, counts = scan
    masks = stemdot.disk((SY, SX), 10, 12, 5)
    whole = note(master, counts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = stemdot.open(master, nav_shape=(NY, NX))
    with ds:
        assert ds.run_notes() == [], "nothing read yet"
        for _ in range(2):  # each run's count, not a running total
            with warnings.catch_warnings(record=True) as record:
                warnings.simplefilter("always")
                result = stemdot.apply_masks(ds, masks, cpus=2)
            assert run_notes_warned(record) == [f"stemdot: {whole['warning']}"]
            assert result.info["run_notes"] == [whole]
        assert [{k: n[k] for k in whole} for n in ds.run_notes(10, 5)] == [note(master, counts[10:15])]
        with pytest.raises(stemdot.ShapeError):
            ds.run_notes(60, 5)
        with pytest.warns(stemdot.RunNoteWarning) as record:
            stemdot.reduce(ds, "sum", cpus=2)
        assert run_notes_warned(record) == [f"stemdot: {whole['warning']}"]
        picked = [int(f) for f in np.flatnonzero(counts)[:2]]
        with pytest.warns(stemdot.RunNoteWarning) as record:
            stemdot.pick(ds, [divmod(f, NX) for f in picked + picked[:1]])
        assert run_notes_warned(record) == [f"stemdot: {note(master, counts[picked])['warning']}"]
    # A frames range and an ROI count their own frames only.
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        stemdot.apply_masks(stemdot.open(master, nav_shape=(NY, NX), frames=(10, 30)), masks)
    assert run_notes_warned(record) == [f"stemdot: {note(master, counts[10:40])['warning']}"]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        result = stemdot.apply_masks(stemdot.open(master, nav_shape=(NY, NX), roi="rect:2,1,3,6"), masks)
    selected = counts.reshape(NY, NX)[1:7, 2:5].reshape(-1)
    assert run_notes_warned(record) == [f"stemdot: {note(master, selected)['warning']}"]
    assert result.info["run_notes"] == [note(master, selected)]


def test_dask_sums_run_notes(scan):
    distributed = pytest.importorskip("distributed")
    import stemdot.dask as sdask

    master, counts = scan
    masks = stemdot.disk((SY, SX), 10, 12, 5)
    whole = note(master, counts)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster, timeout=TIMEOUT) as client:
        client.wait_for_workers(2, timeout=TIMEOUT)
        report = {}
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            result = sdask.apply_masks(client, master, masks, nav_shape=(NY, NX), range_frames=3, report=report)
        assert len(report["ranges"]) > 4 and len({r[2] for r in report["ranges"]}) == 2, "ranges on both workers"
        assert run_notes_warned(record) == [f"stemdot: {whole['warning']}"], "summed over the ranges"
        assert result.info["run_notes"] == [whole]
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            sdask.apply_masks(client, master, masks, nav_shape=(NY, NX), frames=(10, 30), range_frames=2)
            sdask.reduce(client, master, ["sum"], nav_shape=(NY, NX), roi="rect:2,1,3,6", range_frames=2)
        selected = counts.reshape(NY, NX)[1:7, 2:5].reshape(-1)
        assert run_notes_warned(record) == [f"stemdot: {note(master, counts[10:40])['warning']}",
                                            f"stemdot: {note(master, selected)['warning']}"]


def test_cli_prints_run_notes(scan, cli, tmp_path):
    """stemdot apply and python -m stemdot.dask apply print the run note after the run,
    once (the centre search of disk:auto reads the same frames before), and record it in
    the sidecar."""
    distributed = pytest.importorskip("distributed")
    master, counts = scan
    whole = note(master, counts)
    args = ["apply", str(master), "--nav-shape", f"{NY},{NX}", "--mask", "disk:10,12,5", "--mask", "disk:auto"]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster:
        for name, argv in [("stemdot", [str(cli), *args, "--cpus", "2"]),
                           ("stemdot.dask", [sys.executable, "-m", "stemdot.dask", *args, "--scheduler",
                                             cluster.scheduler_address, "--range-frames", "3"])]:
            out = tmp_path / f"{name}.npy"
            run = subprocess.run([*argv, "--out", str(out)], capture_output=True, text=True, timeout=TIMEOUT)
            assert run.returncode == 0, run.stderr
            lines = [line for line in run.stderr.splitlines() if "saturated pixels, kept" in line]
            assert lines == [f"{name}: warning: {whole['warning']}"], run.stderr
            assert json.loads(out.with_suffix(".json").read_text())["run_notes"] == [whole]
