"""stemdot.dask.reduce and the command line's reductions on a LocalCluster of 2 worker
processes: the merged partial reductions equal numpy's and stemdot.reduce's."""

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("distributed")

from distributed import Client  # noqa: E402

import stemdot  # noqa: E402
import stemdot.dask as sdask  # noqa: E402
from test_dask import TIMEOUT, make_cluster  # noqa: E402
from test_stemdot import read_mib  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    with make_cluster() as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster):
    with Client(cluster, timeout=TIMEOUT) as c:
        c.wait_for_workers(2, timeout=TIMEOUT)
        yield c


def test_random_frames_with_nan_inf_equal_numpy(client, tmp_path):
    rng = np.random.default_rng(18)
    frames = (1e6 + rng.standard_normal((5, 8, 6, 10)) * 3).astype(np.float64)
    frames[0, 0, 0, 0] = np.nan
    frames[4, 7, 1, 1] = np.inf
    frames[2, 3, 2, 2], frames[3, 3, 2, 2] = np.inf, -np.inf
    frames[1, 2, 3, 3] = -np.inf
    path = tmp_path / "scan.npy"
    np.save(path, frames)
    report = {}
    got = sdask.reduce(client, path, stemdot.REDUCTIONS, range_frames=3, report=report)
    assert list(got) == list(stemdot.REDUCTIONS)
    assert len(report["ranges"]) > 2, "the scan is cut into several ranges"
    flat = frames.reshape(-1, 6, 10)
    with np.errstate(invalid="ignore"):
        want = {"sum": flat.sum(0), "mean": flat.mean(0), "max": flat.max(0), "std": flat.std(0)}
    for name, w in want.items():  # the std within 1e-15 of the mean (1e6): the means' own rounding
        np.testing.assert_allclose(got[name], w, rtol=1e-12, atol=1e-9 if name == "std" else 0, equal_nan=True, err_msg=name)
    single = stemdot.reduce(path, stemdot.REDUCTIONS)
    for name in want:
        np.testing.assert_allclose(got[name], single[name], rtol=1e-12, atol=1e-9 if name == "std" else 0, equal_nan=True,
                                   err_msg=name)


def test_sync_offset_counts_the_files_frames(client, tmp_path):
    # Ranges of the 10 positions without a frame (sync offset -10) reduce no frame: the
    # merge counts the file's 54 frames only, as stemdot.reduce and LiberTEM's StdDevUDF.
    rng = np.random.default_rng(33)
    frames = (100 + 30 * rng.standard_normal((8, 8, 6, 5))).astype(np.float32)
    path = tmp_path / "scan.npy"
    np.save(path, frames)
    report = {}
    got = sdask.reduce(client, path, stemdot.REDUCTIONS, range_frames=1, report=report, sync_offset=-10)
    assert any(f + n <= 10 for f, n, *_ in report["ranges"]), "a range of positions without a frame only"
    real = frames.reshape(64, 6, 5)[:54].astype(np.float64)
    np.testing.assert_allclose(got["sum"], real.sum(0), rtol=1e-12)
    np.testing.assert_allclose(got["mean"], real.mean(0), rtol=1e-12)
    np.testing.assert_array_equal(got["max"], real.max(0))
    np.testing.assert_allclose(got["std"], real.std(0), rtol=1e-10)
    result = sdask.apply_masks(client, path, np.ones((1, 6, 5)), range_frames=4, sync_offset=-10)
    assert result.info["positions_without_frame"] == [[0, 10]]
    np.testing.assert_array_equal(result.ravel()[:10], 0)


def test_real_mib_integer_sums_exact(client, data_dir):
    path = data_dir / "mib" / "Single_9_Frame_CounterDepth_12_Rows_256.mib"
    frames = read_mib(path).astype(np.float64)
    got = sdask.reduce(client, path, ["max", "sum", "std"], range_frames=2)
    assert list(got) == ["sum", "max", "std"]
    np.testing.assert_array_equal(got["sum"], frames.sum(0))
    np.testing.assert_array_equal(got["max"], frames.max(0))
    np.testing.assert_allclose(got["std"], frames.std(0), rtol=1e-12, atol=1e-12)
    with pytest.raises(stemdot.InvalidArgumentError, match="want one or more of sum, mean, max, std"):
        sdask.reduce(client, path, ["median"])


def test_command_line(cluster, data_dir, tmp_path):
    path = data_dir / "mib" / "Single_9_Frame_CounterDepth_12_Rows_256.mib"
    frames = read_mib(path).astype(np.float64)
    out = {n: tmp_path / f"{n}.npy" for n in stemdot.REDUCTIONS}
    proc = subprocess.run(
        [sys.executable, "-m", "stemdot.dask", "sum", "--scheduler", cluster.scheduler_address, str(path),
         "--out", str(out["sum"]), "--mean", str(out["mean"]), "--max", str(out["max"]), "--std", str(out["std"]),
         "--quiet", "--range-frames", "2"],
        capture_output=True, text=True, timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(np.load(out["sum"]), frames.sum(0))
    np.testing.assert_allclose(np.load(out["mean"]), frames.mean(0), rtol=1e-14)
    np.testing.assert_array_equal(np.load(out["max"]), frames.max(0))
    np.testing.assert_allclose(np.load(out["std"]), frames.std(0), rtol=1e-12, atol=1e-12)

    for args, message in [  # stemdot sum's refusals (#20.5: the same command)
        (["--mask", "com", "--out", str(tmp_path / "x.npy")], "unknown flag: --mask; did you mean --max?"),
        ([], "no output: give --out (the sum frame), --mean, --max, --std or --png"),
        (["--max", str(tmp_path / "x.txt")], "--max " + str(tmp_path / "x.txt") + ": results are written as NPY"),
        (["--max", str(tmp_path / "x.npy"), "--std", str(tmp_path / "x.npy")], "are the same file"),
    ]:
        bad = subprocess.run([sys.executable, "-m", "stemdot.dask", "sum", "--scheduler", cluster.scheduler_address, str(path)] + args,
                             capture_output=True, text=True, timeout=TIMEOUT)
        assert bad.returncode == 1 and message in bad.stderr, (args, bad.stderr)
        assert not (tmp_path / "x.npy").exists() and not (tmp_path / "m.npy").exists()


def test_merge_std_of_huge_finite_values():
    """The merge of the ranges' partial reductions keeps the std finite and right for
    finite frames whose count·std² and mean differences overflow (1e150 to 1e300, both
    signs up to ±1.7e308): against numpy on values scaled per pixel by a power of two."""
    from test_reduce import scaled_std

    rng = np.random.default_rng(6)
    frames = rng.standard_normal((30, 5)) * np.array([1e150, 1e200, 1e250, 1e300, 1.0])
    frames[:, 3] += np.where(np.arange(30) < 10, -1.5e308, 1.5e308)  # ranges of opposite means
    total = {}
    for a, b in [(0, 7), (7, 10), (10, 30)]:
        part = frames[a:b]
        sdask._merge(total, b - a, {"sum": part.sum(0), "mean": part.mean(0) if np.isfinite(part.mean(0)).all() else
                                    np.ldexp(np.ldexp(part, -1024).mean(0), 1024), "std": scaled_std(part)})
    assert total["n"] == 30
    assert np.isfinite(total["std"]).all()
    np.testing.assert_allclose(total["std"], scaled_std(frames), rtol=1e-12)
