"""python -m stemdot.dask's result file (#17.13): written as stemdot's own outputs are
(.NAME.PID.NNN.tmp, locked, flushed, renamed, directory flushed), stale temporaries of
killed writers removed, and an unwritable directory refused before the run."""

import fcntl
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("distributed")

from stemdot.dask import __main__ as cli  # noqa: E402


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_save_writes_and_removes_only_stale_temporaries(tmp_path):
    out = str(tmp_path / "r.npy")
    dead = dead_pid()
    live = subprocess.Popen(["sleep", "60"])
    try:
        names = {
            "stale": f".r.npy.{dead}.111.tmp",
            "live": f".r.npy.{live.pid}.222.tmp",
            "locked": f".r.npy.{dead}.333.tmp",
            "other": f".other.npy.{dead}.444.tmp",
            "odd": f".r.npy.{dead}.tmp",
        }
        for name in names.values():
            (tmp_path / name).write_bytes(b"partial")
        fd = os.open(tmp_path / names["locked"], os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)  # as its writer on another machine would
        result = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
        cli._save_all({out: cli._npy(result)})
        os.close(fd)
    finally:
        live.kill()
        live.wait()
    np.testing.assert_array_equal(np.load(out), result)
    left = sorted(os.listdir(tmp_path))
    assert left == sorted(["r.npy"] + [names[k] for k in ("live", "locked", "other", "odd")])


def test_killed_writer_temporary_is_removed(tmp_path):
    """A writer SIGKILLed while writing leaves its temporary; the next write removes it."""
    out = str(tmp_path / "r.npy")
    code = "import sys, time; from stemdot.dask import __main__ as cli; fd, tmp = cli._create_temp(sys.argv[1]); print(tmp, flush=True); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code, out], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    tmp = proc.stdout.readline().strip()
    assert os.path.basename(tmp).startswith(f".r.npy.{proc.pid}.") and tmp.endswith(".tmp")
    cli._save_all({out: cli._npy(np.zeros(3, np.float32))})
    assert os.path.exists(tmp), "a live writer's temporary stays"
    proc.kill()
    proc.wait()
    assert os.path.exists(tmp)
    cli._save_all({out: cli._npy(np.ones(3, np.float32))})
    assert not os.path.exists(tmp)
    assert os.listdir(tmp_path) == ["r.npy"]
    np.testing.assert_array_equal(np.load(out), np.ones(3, np.float32))


def test_save_flushes_file_before_rename_and_directory_after(tmp_path, monkeypatch):
    out = str(tmp_path / "r.npy")
    calls = []
    fsync, replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))) or fsync(fd))
    monkeypatch.setattr(os, "replace", lambda a, b: calls.append(("replace", b)) or replace(a, b))
    cli._save_all({out: cli._npy(np.zeros(3, np.float32))})
    assert [c[0] for c in calls] == ["fsync", "replace", "fsync"]
    assert os.path.basename(calls[0][1]).startswith(".r.npy.")
    assert calls[2][1] == str(tmp_path)


def test_unwritable_directory_refused_before_the_run(tmp_path):
    if os.geteuid() == 0:
        bad = "/proc"  # permissions do not stop root
    else:
        bad = str(tmp_path / "ro")
        os.mkdir(bad, 0o555)
    out = os.path.join(bad, "r.npy")
    with pytest.raises(SystemExit, match=f"--out {out}: cannot write in directory {bad}: "):
        cli._check_out(out, __file__)
    assert cli._check_out(str(tmp_path / "ok.npy"), __file__) == str(tmp_path / "ok.npy")
    assert os.listdir(tmp_path) == ([] if os.geteuid() == 0 else ["ro"])


def test_out_checked_without_the_input_file(tmp_path):
    """#17 D6: FILE may exist only on the workers' shared storage: an existing --out is
    not compared with a FILE absent here (it was, with a traceback); an --out that is
    FILE is refused."""
    out = tmp_path / "existing.npy"
    out.write_bytes(b"old")
    assert cli._check_out(str(out), ["/nonexist/in.mib"]) == str(out)
    with pytest.raises(SystemExit, match="is an input of this run"):
        cli._check_out(str(out), [str(out)])
    with pytest.raises(SystemExit, match=r"--out .*/\.npy: the file name is only the extension \(a hidden file named \.npy\): give a name, e.g. .*/result\.npy"):
        cli._check_out(str(tmp_path / ".npy"), ["/nonexist/in.mib"])


def test_inputs_are_never_outputs(tmp_path):
    """The --shifts, --masks and --roi files are inputs, as FILE: no output replaces them
    (the check runs before connecting to the scheduler)."""
    scan, shifts, masks, roi = (tmp_path / n for n in ("scan.npy", "s.npy", "m.npy", "roi.npy"))
    for f in (scan, masks, roi):
        f.write_bytes(b"an input")
    np.save(shifts, np.zeros((2, 2, 2)))
    kept = {f: f.read_bytes() for f in (scan, shifts, masks, roi)}
    for flags, out in ((["--mask", "disk:4,4,2", "--shifts", shifts], shifts), (["--masks", masks], masks),
                       (["--mask", "disk:4,4,2", "--roi", roi], roi), (["--sum", "--roi", roi], roi)):
        run = run_cli(scan, "--scheduler", "tcp://127.0.0.1:1", "--timeout", "1", *flags, "--out", out)
        assert run.returncode == 1 and "is an input of this run: not replacing it" in run.stderr, (flags, run.stderr)
        assert out.read_bytes() == kept[out]


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "stemdot.dask", *map(str, args)], capture_output=True, text=True, timeout=120)


def test_bad_command_lines_exit_1_with_one_message(tmp_path):
    """#17 D6, D10: a bad flag value, a missing argument, a flag given an empty value: one
    line and status 1, as stemdot apply (argparse printed the usage and exited 2); the
    dataset options' values are the CLI's, checked by the library's parser before the
    cluster is contacted (--offset 1KiB passes: a scheduler that is not there fails)."""
    base = ["--scheduler", "tcp://127.0.0.1:9", "/nonexist/in.mib", "--mask", "com", "--out", tmp_path / "r.npy", "--timeout", "1"]
    for args, message in (
        (["--nav-shape", "64x64"], 'stemdot.dask: --nav-shape "64x64": want whole sizes separated by commas, rows first: Y,X (e.g. 64,64) or N (e.g. 4096)'),
        (["--offset", "1 furlong"], 'stemdot.dask: --offset "1 furlong": want a non-negative byte count such as 1024 or 1KiB'),
        (["--frames", "7"], 'stemdot.dask: --frames "7": want FIRST,COUNT (first frame >= 0, count >= 1)'),
        (["--timeout", "soon"], "stemdot.dask: --timeout: invalid float value: 'soon' (see python -m stemdot.dask --help)"),
        (["--sig-shape", " "], "stemdot.dask: --sig-shape is given an empty value: give a value (see python -m stemdot.dask --help)"),
        (["--png", "img"], "stemdot.dask: unrecognized arguments: --png img (see python -m stemdot.dask --help)"),
    ):
        run = run_cli(*base, *args)
        assert run.returncode == 1 and run.stderr == message + "\n", run.stderr
    run = run_cli("/nonexist/in.mib", "--mask", "com")
    assert run.returncode == 1 and run.stderr == "stemdot.dask: the following arguments are required: --scheduler (see python -m stemdot.dask --help)\n", run.stderr
    run = run_cli(*base[:-4], "--timeout", "1")  # masks without --out (--out is optional for reductions only)
    assert run.returncode == 1 and run.stderr == "stemdot.dask: --out RESULT.npy is required\n", run.stderr
    for flag in ("--offset", "--frame-header", "--frame-footer"):
        run = run_cli(*base, flag, "1KiB")
        assert run.returncode == 1 and "Timed out trying to connect to tcp://127.0.0.1:9" in run.stderr, run.stderr
    assert not list(tmp_path.iterdir())


def test_ctrl_c_while_starting_exits_1_with_the_message(tmp_path):
    """#17 D6: Ctrl-C while Python imports the command's packages (numpy, Dask,
    distributed: about a second) ends it as later ones do, status 1 and the message,
    no traceback (it gave a KeyboardInterrupt traceback and the status of SIGINT)."""
    proc = subprocess.Popen([sys.executable, "-m", "stemdot.dask", "--scheduler", "tcp://127.0.0.1:9", "/nonexist/in.mib",
                             "--mask", "com", "--out", str(tmp_path / "r.npy")], stderr=subprocess.PIPE, text=True)
    maps = f"/proc/{proc.pid}/maps"
    while proc.poll() is None:  # numpy's extension loaded: stemdot's package is being imported
        try:
            with open(maps) as f:
                if "_multiarray_umath" in f.read():
                    break
        except FileNotFoundError:
            break
    proc.send_signal(signal.SIGINT)
    stderr = proc.communicate(timeout=120)[1]
    assert proc.returncode == 1 and stderr.endswith("no result written\n") and "stemdot.dask: interrupted: " in stderr, stderr
    assert "Traceback" not in stderr and not list(tmp_path.iterdir())
