"""#20.5: python -m stemdot.dask is stemdot apply and stemdot sum on a Dask cluster, one
definition (Go's cmd/internal/cli through stemdot_cli_main): on the same inputs both write the
same files, byte for byte, and refuse the same command lines with the same message (after
the prefix) and exit status. A LocalCluster of 2 worker processes × 1 thread."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import stemdot

distributed = pytest.importorskip("distributed")

from distributed import LocalCluster  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 180

#: The sidecar's fields that must differ: "plan" counts the workers that ran the job, the
#: pinned CPU workers of this machine for stemdot apply, the stemdot workers of the
#: cluster's nodes that computed frames for the Dask command.
DIFFERING = {"plan"}


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40) as c:
        yield c


@pytest.fixture(scope="module")
def stemdot_bin(tmp_path_factory):
    """The stemdot binary of this source tree: built with go build (without HDF5 where
    pkg-config finds no libhdf5), else bin/stemdot (make build)."""
    go = shutil.which("go")
    if go is None:
        b = REPO / "bin" / "stemdot"
        if not b.is_file():
            pytest.skip("neither go nor bin/stemdot (make build): skipping the comparison with stemdot")
        return b
    out = tmp_path_factory.mktemp("bin") / "stemdot"
    hdf5 = shutil.which("pkg-config") and subprocess.run(["pkg-config", "--exists", "hdf5"]).returncode == 0
    tags = [] if hdf5 else ["-tags", "nohdf5"]
    subprocess.run([go, "build", *tags, "-o", str(out), "./cmd/stemdot"], cwd=REPO, check=True, timeout=600)
    return out


@pytest.fixture(scope="module")
def scan(stemdot_bin, tmp_path_factory):
    """A synthetic MIB scan of 12×10 positions of 64×64 uint16 frames whose disc moves by
    up to 3 pixels, mask stack files (float64, float32), shifts files and an ROI file."""
    d = tmp_path_factory.mktemp("in")
    path = d / "scan.mib"
    subprocess.run([str(stemdot_bin), "synth", "--out", str(path), "--nav-shape", "12,10", "--sig-shape", "64,64",
                    "--shift", "3"], check=True, capture_output=True, timeout=TIMEOUT)
    rng = np.random.default_rng(20)
    np.save(d / "stack.npy", rng.random((2, 64, 64)))  # float64 weights, not exact in float32
    np.save(d / "shifts.npy", rng.random((12, 10, 2)) * 4 - 2)
    np.save(d / "roi.npy", rng.random((12, 10)) < 0.3)
    np.save(d / "stack32.npy", rng.random((3, 64, 64), dtype=np.float32))
    np.save(d / "normal_shifts.npy", rng.normal(0, 1.5, (12, 10, 2)))
    return path


def run_both(stemdot_bin, cluster, tmp_path, command, args, out_flags):
    """Runs stemdot COMMAND and python -m stemdot.dask COMMAND with args, each writing the
    outputs out_flags names (flag → file name) in a directory of its own; returns both
    runs and the two directories."""
    runs = []
    for name in ("cli", "dask"):
        d = tmp_path / name
        d.mkdir()
        outs = [x for flag, file in out_flags.items() for x in (flag, str(d / file))]
        if name == "cli":
            argv = [str(stemdot_bin), command, *args, *outs, "--cpus", "2"]
        else:
            argv = [sys.executable, "-m", "stemdot.dask", command, "--scheduler", cluster.scheduler_address, *args, *outs,
                    "--range-frames", "7"]
        runs.append(subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT))
    return runs, tmp_path / "cli", tmp_path / "dask"


def assert_same_files(cli_dir, dask_dir):
    """Every file of cli_dir is in dask_dir with the same bytes; sidecars (.json) equal
    but for DIFFERING."""
    names = sorted(p.name for p in cli_dir.iterdir())
    assert names == sorted(p.name for p in dask_dir.iterdir())
    assert names
    for name in names:
        a, b = (cli_dir / name).read_bytes(), (dask_dir / name).read_bytes()
        if name.endswith(".json"):
            a, b = json.loads(a), json.loads(b)
            assert a.keys() == b.keys(), name
            for key in a.keys() - DIFFERING:
                assert a[key] == b[key], (name, key)
            assert b["plan"]["cpu_workers"] >= 1 and b["plan"]["gpu_workers"] == 0
        else:
            assert a == b, f"{name} differs"


def warnings_of(stderr, prefix):
    return [line.removeprefix(prefix) for line in stderr.splitlines() if line.startswith(prefix + "warning: ")
            or line.startswith(prefix + "centre ")]


APPLY = {
    "specs": ["--mask", "disk:32,32,8", "--mask", "ring:32,32,12,28", "--mask", "com", "--mask", "point:3,4"],
    "auto specs, files, PNGs, COM shift maps": [
        "--mask", "disk:auto", "--masks", "{d}/stack.npy", "--mask", "com:auto,12", "--mask", "ring:auto,12,30",
        "--png", "{out}/img", "--com-shifts", "{out}/com.npy"],
    "float64, shifts file, frames": [
        "--mask", "com", "--masks", "{d}/stack.npy", "--float64", "--shifts", "{d}/shifts.npy", "--frames", "17,60"],
    "constant shift, rect ROI, compact": [
        "--mask", "disk:auto", "--mask", "com", "--shift", "1,-2", "--roi", "rect:2,3,5,6", "--roi-compact"],
    # #20 B: 4 masks with sub-pixel shifts: a frame's sums did not depend on the ranges' cuts
    "float32 stack file, specs, sub-pixel shifts": [
        "--masks", "{d}/stack32.npy", "--mask", "disk:30,33,9", "--shifts", "{d}/normal_shifts.npy"],
    "ROI file, COM shift maps, PNGs": [
        "--mask", "com:32,32,20", "--roi", "{d}/roi.npy", "--com-shifts", "{out}/com.npy", "--png", "{out}/roi"],
}


@pytest.mark.parametrize("case", APPLY)
def test_apply_writes_the_same_files(stemdot_bin, cluster, scan, tmp_path, case):
    args = [str(scan)] + [a.format(d=scan.parent, out="{out}") for a in APPLY[case]]
    runs = []
    for name in ("cli", "dask"):
        d = tmp_path / name
        d.mkdir()
        argv = [a.replace("{out}", str(d)) for a in args] + ["--out", str(d / "r.npy")]
        if name == "cli":
            argv = [str(stemdot_bin), "apply", *argv, "--cpus", "2"]
        else:
            argv = [sys.executable, "-m", "stemdot.dask", "--scheduler", cluster.scheduler_address, *argv,
                    "--range-frames", "7"]
        runs.append(subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT))
    cli, dask = runs
    assert cli.returncode == 0, cli.stderr
    assert dask.returncode == 0, dask.stderr
    assert warnings_of(dask.stderr, "stemdot.dask: ") == warnings_of(cli.stderr, "stemdot: ")
    assert_same_files(tmp_path / "cli", tmp_path / "dask")


def test_apply_real_file(stemdot_bin, cluster, data_dir, tmp_path):
    """A real MIB file without its scan shape: the same warning (naming --nav-shape) and
    the same files."""
    path = data_dir / "mib" / "001_4x2_6bit.mib"
    (cli, dask), cli_dir, dask_dir = run_both(
        stemdot_bin, cluster, tmp_path, "apply", [str(path), "--mask", "disk:auto", "--mask", "com", "--mask", "ring:128,128,40,100"],
        {"--out": "r.npy", "--png": "img", "--com-shifts": "com.npy"})
    assert cli.returncode == 0 and dask.returncode == 0, cli.stderr + dask.stderr
    warned = warnings_of(cli.stderr, "stemdot: ")
    assert any("--nav-shape" in w for w in warned)
    assert warnings_of(dask.stderr, "stemdot.dask: ") == warned
    assert_same_files(cli_dir, dask_dir)


def test_apply_ser_via_emi(stemdot_bin, cluster, data_dir, tmp_path):
    """#20 E: a SER file opened through its EMI file: both sidecars record the SER file
    that was read (dataset.path), as stemdot opened it on the workers."""
    path = data_dir / "ser" / "128x128x5-diffraction_preview.emi"
    if not path.exists():
        pytest.skip(f"{path} not found")
    (cli, dask), cli_dir, dask_dir = run_both(stemdot_bin, cluster, tmp_path, "apply", [str(path), "--mask", "com"],
                                              {"--out": "r.npy"})
    assert cli.returncode == 0 and dask.returncode == 0, cli.stderr + dask.stderr
    assert_same_files(cli_dir, dask_dir)
    recorded = json.loads((dask_dir / "r.json").read_text())["dataset"]["path"]
    assert recorded == os.path.abspath(path.with_name("128x128x5-diffraction_preview_1.ser"))  # as given: links kept


@pytest.mark.parametrize("args", [
    ["--roi", "rect:1,1,4,4"],
    ["--frames", "5,50"],
    [],
], ids=["roi", "frames", "all"])
def test_sum_writes_the_same_files(stemdot_bin, cluster, scan, tmp_path, args):
    (cli, dask), cli_dir, dask_dir = run_both(
        stemdot_bin, cluster, tmp_path, "sum", [str(scan), *args],
        {"--out": "sum.npy", "--mean": "mean.npy", "--max": "max.npy", "--png": "s"})
    assert cli.returncode == 0, cli.stderr
    assert dask.returncode == 0, dask.stderr
    assert_same_files(cli_dir, dask_dir)


def test_sum_std_matches(stemdot_bin, cluster, scan, tmp_path):
    """The std frame: the engine merges its workers' (count, mean, M2), the Dask client
    its ranges', by the same update (Chan et al.), in another grouping: equal to within
    float64 rounding."""
    (cli, dask), cli_dir, dask_dir = run_both(stemdot_bin, cluster, tmp_path, "sum", [str(scan)], {"--std": "std.npy"})
    assert cli.returncode == 0 and dask.returncode == 0, cli.stderr + dask.stderr
    want = np.load(cli_dir / "std.npy")
    np.testing.assert_allclose(np.load(dask_dir / "std.npy"), want, rtol=1e-12, atol=0)


REFUSED = {
    "out not npy": ["apply", "{scan}", "--mask", "com", "--out", "{tmp}/r.png"],
    "out is an input": ["apply", "{scan}", "--masks", "{d}/stack.npy", "--out", "{d}/stack.npy"],
    "roi-compact without roi": ["apply", "{scan}", "--mask", "com", "--out", "{tmp}/r.npy", "--roi-compact"],
    "bad mask spec": ["apply", "{scan}", "--mask", "disk:1,2", "--out", "{tmp}/r.npy"],
    "bad nav shape": ["apply", "{scan}", "--mask", "com", "--out", "{tmp}/r.npy", "--nav-shape", "7,7"],
    "bad shift": ["apply", "{scan}", "--mask", "com", "--out", "{tmp}/r.npy", "--shift", "1"],
    "bad centre": ["apply", "{scan}", "--mask", "disk:auto", "--out", "{tmp}/r.npy", "--centre", "1,2,-3"],
    "empty png": ["apply", "{scan}", "--mask", "com", "--out", "{tmp}/r.npy", "--png", ""],
    "unknown flag": ["apply", "{scan}", "--mask", "com", "--out", "{tmp}/r.npy", "--nav-shap", "2,2"],
    "com-shifts without com": ["apply", "{scan}", "--mask", "disk:3,3,2", "--out", "{tmp}/r.npy", "--com-shifts", "{tmp}/c.npy"],
    "sum out equal to mean": ["sum", "{scan}", "--out", "{tmp}/s.npy", "--mean", "{tmp}/s.npy"],
    "sum out not npy": ["sum", "{scan}", "--out", "{tmp}/s.txt"],
}


@pytest.mark.parametrize("case", REFUSED)
def test_refusals_are_the_same(stemdot_bin, cluster, scan, tmp_path, case):
    argv = [a.format(scan=scan, d=scan.parent, tmp=tmp_path) for a in REFUSED[case]]
    cli = subprocess.run([str(stemdot_bin), *argv], capture_output=True, text=True, timeout=TIMEOUT)
    dask = subprocess.run([sys.executable, "-m", "stemdot.dask", *argv[:1], "--scheduler", cluster.scheduler_address,
                           *argv[1:]], capture_output=True, text=True, timeout=TIMEOUT)
    assert cli.returncode == dask.returncode == 1, (cli.stderr, dask.stderr)
    want = cli.stderr.strip().splitlines()[-1]
    assert want.startswith("stemdot: ")
    # The same message after the prefix; a pointer to the help names the command run.
    got = dask.stderr.strip().splitlines()[-1].replace("see python -m stemdot.dask ", "see stemdot ")
    assert got == "stemdot.dask: " + want.removeprefix("stemdot: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_missing_file(stemdot_bin, cluster, tmp_path):
    """A file the workers cannot find: exit status 1, the message naming it (and, from
    the Dask workers, the worker and that every worker needs the file at this path)."""
    path = tmp_path / "none.mib"
    args = [str(path), "--mask", "com", "--out", str(tmp_path / "r.npy")]
    cli = subprocess.run([str(stemdot_bin), "apply", *args], capture_output=True, text=True, timeout=TIMEOUT)
    dask = subprocess.run([sys.executable, "-m", "stemdot.dask", "--scheduler", cluster.scheduler_address, *args],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert cli.returncode == dask.returncode == 1
    assert f"stemdot: dataset: {path}: file does not exist" in cli.stderr
    assert f"stemdot.dask: no live Dask worker can read {path}: {path}: No such file or directory (the file must be at this path on every Dask worker) (on workers " in dask.stderr, dask.stderr
    assert "Traceback" not in dask.stderr
    assert not list(tmp_path.iterdir())
    # #35: the message is the only report: no worker logged a failed task with its
    # traceback ("Compute Failed", every worker asked, before the message).
    with distributed.Client(cluster) as client:
        logs = client.get_worker_logs()
    assert [m for records in logs.values() for _, m in records if str(path) in m] == []


def test_summary_counts_the_workers_announced(cluster, scan, tmp_path):
    """#35: the summary and RESULT.json's plan count the stemdot workers the job was given
    to, as stemdot apply counts its plan's (idle ones too): those announced, though one
    range of this small scan holds every frame and one Dask worker computes them all."""
    out = tmp_path / "r.npy"
    run = subprocess.run([sys.executable, "-m", "stemdot.dask", "--scheduler", cluster.scheduler_address, str(scan), "--mask",
                          "com", "--out", str(out), "--workers"], capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 0, run.stderr
    announced = re.search(r"stemdot\.dask: 2 Dask workers, (\d+) stemdot workers\n", run.stderr)
    assert announced, run.stderr
    n = int(announced[1])
    summary, *lines = run.stdout.splitlines()
    assert f", {n} workers ({n} cpu, 0 gpu) → {out}" in summary
    assert len(lines) == 1  # the Dask worker that computed the frames
    assert json.loads(out.with_suffix(".json").read_text())["plan"] == {"cpu_workers": n, "gpu_workers": 0}


def test_workers_lines(cluster, scan, tmp_path):
    """#20 C: apply --workers prints, after the summary, one line per Dask worker that
    computed frames, as stemdot's per worker: its frames (all the scan's together), ranges
    and throughput while busy."""
    run = subprocess.run([sys.executable, "-m", "stemdot.dask", "--scheduler", cluster.scheduler_address, str(scan), "--mask",
                          "com", "--out", str(tmp_path / "r.npy"), "--workers", "--range-frames", "7"],
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 0, run.stderr
    summary, *lines = run.stdout.splitlines()
    assert summary.endswith(f"→ {tmp_path / 'r.npy'}")
    addresses = set(cluster.scheduler_info["workers"])
    frames = 0
    for line in lines:
        m = re.fullmatch(r"  worker (\S+): (\d+) frames in (\d+) ranges, (\d+\.\d{3}) GB at (\d+\.\d) GB/s", line)
        assert m and m[1] in addresses, line
        frames += int(m[2])
        assert int(m[3]) >= 1 and float(m[4]) == round(int(m[2]) * 64 * 64 * 2 / 1e9, 3)
    assert 1 <= len(lines) <= 2 and frames == 120, run.stdout


def test_workers_counted_once(tmp_path):
    """#20 D, #35: the workers of a run are the stemdot workers it was given to, each
    once: a Dask worker restarted by its Nanny (a new address on the same host, the same
    pinned CPUs) is not counted again; one offered ranges that computed nothing is
    counted (as stemdot apply counts its idle workers), one whose node cannot read the
    file, or never offered a range (without the resources), is not."""
    from stemdot.dask.__main__ import _ran

    def node(host, cpus, gpus=()):
        return {"host": host, "plan": {"workers": [{"cpu": c} for c in cpus] + [{"cpu": 0, "gpu": g} for g in gpus]}}

    report = {
        "nodes": {"tcp://a:1": node("a", [1, 2]), "tcp://a:2": node("a", [1, 2]), "tcp://b:1": node("b", [1, 2], [0]),
                  "tcp://c:1": node("c", [1]), "tcp://d:1": node("d", [1, 2]), "tcp://e:1": node("e", [1])},
        "frames": {"tcp://a:1": 10, "tcp://a:2": 20, "tcp://b:1": 30, "tcp://c:1": 0},
        "rates": {"tcp://a:1": 5.0, "tcp://a:2": 10.0, "tcp://b:1": 60.0, "tcp://c:1": None},
        "offered": ["tcp://a:1", "tcp://a:2", "tcp://b:1", "tcp://c:1", "tcp://d:1"],
        "excluded": {"tcp://d:1": "StemdotIOError: ..."},
        "ranges": [(0, 10, "tcp://a:1", 0, 2.0), (10, 20, "tcp://a:2", 0, 2.0), (30, 15, "tcp://b:1", 0, 0.25),
                   (45, 15, "tcp://b:1", 0, 0.25)],
    }
    assert _ran(report) == {"cpu_workers": 5, "gpu_workers": 1, "workers": [
        {"name": "tcp://a:1", "frames": 10, "ranges": 1, "seconds": 2.0},
        {"name": "tcp://a:2", "frames": 20, "ranges": 1, "seconds": 2.0},
        {"name": "tcp://b:1", "frames": 30, "ranges": 2, "seconds": 0.5}]}


def test_waits_for_the_first_worker(scan, tmp_path):
    """#20 D: a scheduler without workers (just restarted): the command says that it waits
    for the first, up to --timeout, and runs when one joins; with none, it ends at
    --timeout naming the flag."""
    with LocalCluster(n_workers=0, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40) as c:
        argv = [sys.executable, "-m", "stemdot.dask", "--scheduler", c.scheduler_address, str(scan), "--mask", "com",
                "--out", str(tmp_path / "r.npy")]
        run = subprocess.run([*argv, "--timeout", "1"], capture_output=True, text=True, timeout=TIMEOUT)
        assert run.returncode == 1, run.stderr
        assert run.stderr.endswith(f"no Dask worker joined the scheduler within --timeout 1 s: start Dask workers "
                                   f"(dask worker {c.scheduler_address}) and run again\n"), run.stderr
        proc = subprocess.Popen([*argv, "--timeout", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            proc.stderr.readline()  # connecting
            line = proc.stderr.readline()
            assert line == "stemdot.dask: the scheduler has no worker yet: waiting up to --timeout 120 s for the first\n", line
            c.scale(1)
            stdout, stderr = proc.communicate(timeout=TIMEOUT)
        finally:
            proc.kill()
        assert proc.returncode == 0, stderr
        assert stderr.startswith("stemdot.dask: 1 Dask workers"), stderr
        plan = json.loads((tmp_path / "r.json").read_text())["plan"]
        assert plan["cpu_workers"] >= 1 and plan["gpu_workers"] == 0


@pytest.mark.parametrize("when", ["before the ranges", "while the ranges run"])
def test_file_truncated_during_the_run(cluster, scan, tmp_path, monkeypatch, when):
    """#20 G: a file that shrank after the command opened it, before its ranges were
    planned or while they run (a range task then opens a frames range beyond the file's
    new end), is reported as such, naming the path and both frame counts, not as a
    frames range (--frames) that the user never gave."""
    import stemdot.dask as sdask
    from stemdot.dask.__main__ import _Backend

    path = tmp_path / "scan.mib"
    shutil.copy(scan, path)

    def truncate():
        os.truncate(path, path.stat().st_size // 120 * 100)

    if when == "while the ranges run":
        planned = sdask._dataset_info

        async def dataset_info(*args, **kwargs):  # the run's ranges are planned for 120 frames
            info = await planned(*args, **kwargs)
            if kwargs.get("job") is not None:
                truncate()
            return info

        monkeypatch.setattr(sdask._ranges, "_dataset_info", dataset_info)  # where the run reads it
    backend = _Backend()
    try:
        backend.check({"flags": {"scheduler": cluster.scheduler_address, "range-frames": "7", "resources": [],
                                 "timeout": "60"}}, None, None)
        info = backend.open({"path": str(path), "options": {}}, None, None)
        assert info["n_frames"] == 120 and info["path"] == str(path)
        if when == "before the ranges":
            truncate()
        request = {"path": str(path), "options": {}, "n_masks": 1, "sig_shape": [64, 64], "float64": False,
                   "progress": False}
        with pytest.raises(stemdot.StemdotIOError) as e:
            backend.apply(request, np.ones((1, 64, 64), np.float32).tobytes(), bytearray(120 * 4))
    finally:
        backend.close()
    assert str(e.value) == (f"{path}: the file has 100 frames now, fewer than the 120 it had when the run started: it was "
                            "truncated or replaced during the run; run again once it is complete")


def test_resources_no_worker_declares_names_the_flag(cluster, scan, tmp_path):
    """#20 F: --resources that no worker declares: the message names --resources, the
    command's flag, not stemdot.dask's keyword resources=."""
    run = subprocess.run([sys.executable, "-m", "stemdot.dask", "--scheduler", cluster.scheduler_address, str(scan), "--mask",
                          "com", "--out", str(tmp_path / "r.npy"), "--resources", "GPU=1", "--timeout", "20"],
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 1, run.stderr
    assert run.stderr.endswith("no running worker of the cluster has the resources {'GPU': 1.0}: start workers that declare "
                               "them (dask worker SCHEDULER --resources NAME=N), or drop --resources\n"), run.stderr
    assert not list(tmp_path.iterdir())


def test_dask_flags_are_checked_and_shown(scan, tmp_path):
    """The Dask command's own flags: in --help, and checked (naming the flag) before the
    cluster is contacted."""
    help_ = subprocess.run([sys.executable, "-m", "stemdot.dask", "apply", "--help"], capture_output=True, text=True,
                           timeout=TIMEOUT)
    assert help_.returncode == 0
    for flag in ("--scheduler ADDRESS", "--range-frames N", "--resources NAME=N", "--timeout SECONDS", "--png", "--com-shifts",
                 "--frames", "--centre"):
        assert flag in help_.stdout, flag
    assert "--cpus" not in help_.stdout
    for args, message in (([], "--scheduler ADDRESS is required"),
                          (["--scheduler", "tcp://127.0.0.1:1", "--range-frames", "0"], "--range-frames '0'"),
                          (["--scheduler", "tcp://127.0.0.1:1", "--resources", "GPU"], "--resources 'GPU': want NAME=N"),
                          (["--scheduler", "tcp://127.0.0.1:1", "--timeout", "-1"], "--timeout '-1'")):
        run = subprocess.run([sys.executable, "-m", "stemdot.dask", str(scan), "--mask", "com", "--out",
                              str(tmp_path / "r.npy"), *args], capture_output=True, text=True, timeout=TIMEOUT)
        assert run.returncode == 1 and f"stemdot.dask: {message}" in run.stderr, run.stderr
        assert "connecting" not in run.stderr
    assert not list(tmp_path.iterdir())


def test_scheduler_not_reached_names_the_flag(scan, tmp_path):
    """A --scheduler that is malformed or where no scheduler listens: the message names
    --scheduler (and --timeout for the wait), and no output is written."""
    for address, message in (("foo", "--scheduler 'foo': missing port number in address 'foo'"),
                             ("tcp://127.0.0.1:1", "--scheduler 'tcp://127.0.0.1:1': no Dask scheduler answered within "
                                                   "--timeout 2 s (Timed out trying to connect to tcp://127.0.0.1:1 "
                                                   "after 2 s)")):
        run = subprocess.run([sys.executable, "-m", "stemdot.dask", str(scan), "--mask", "com", "--out",
                              str(tmp_path / "r.npy"), "--scheduler", address, "--timeout", "2"], capture_output=True,
                             text=True, timeout=TIMEOUT)
        assert run.returncode == 1 and f"stemdot.dask: {message}\n" in run.stderr, run.stderr
    assert not list(tmp_path.iterdir())


def test_closing_after_the_scheduler_died_prints_no_traceback(tmp_path, caplog):
    """The command's client closed after its scheduler was killed (kill -9 mid-run): the
    command's own message says so; Dask's cancelled reconnection is not logged as an
    ERROR with a traceback after it."""
    import signal
    import time

    from distributed import Client

    from stemdot.dask.__main__ import _Backend

    file = tmp_path / "scheduler.json"
    proc = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--scheduler-file", str(file),
                             "--port", "0", "--dashboard-address", ":0", "--host", "127.0.0.1"], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not file.exists():
            assert time.monotonic() < deadline, "no scheduler"
            time.sleep(0.1)
        backend = _Backend()
        backend.client = Client(scheduler_file=str(file), timeout=60)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(60)
        while backend.client.status == "running":
            assert time.monotonic() < deadline, "the client did not see its scheduler go"
            time.sleep(0.1)
        backend.close()
    finally:
        proc.kill()
        proc.wait(60)
    assert not [r for r in caplog.records if r.name.startswith("distributed") and r.levelname == "ERROR"], caplog.text
