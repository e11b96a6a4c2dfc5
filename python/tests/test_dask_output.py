"""python -m stemdot.dask's result file (#17.13): written as stemdot's own outputs are
(.NAME.PID.NNN.tmp, locked, flushed, renamed, directory flushed), stale temporaries of
killed writers removed, and an unwritable directory refused before the run."""

import fcntl
import os
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
        cli._save(out, result)
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
    cli._save(out, np.zeros(3, np.float32))
    assert os.path.exists(tmp), "a live writer's temporary stays"
    proc.kill()
    proc.wait()
    assert os.path.exists(tmp)
    cli._save(out, np.ones(3, np.float32))
    assert not os.path.exists(tmp)
    assert os.listdir(tmp_path) == ["r.npy"]
    np.testing.assert_array_equal(np.load(out), np.ones(3, np.float32))


def test_save_flushes_file_before_rename_and_directory_after(tmp_path, monkeypatch):
    out = str(tmp_path / "r.npy")
    calls = []
    fsync, replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))) or fsync(fd))
    monkeypatch.setattr(os, "replace", lambda a, b: calls.append(("replace", b)) or replace(a, b))
    cli._save(out, np.zeros(3, np.float32))
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
