"""python -m stemdot.dask's outputs (#17.13, #20.5): written by stemdot's own writer (Go's
internal/atomicfile, tested there: temporaries locked, flushed, renamed, stale ones of
killed writers removed), checked as stemdot sum and apply check them; bad command lines
refused with stemdot's messages, before the cluster is contacted."""

import os
import signal
import subprocess
import sys

import pytest

pytest.importorskip("distributed")

#: A scheduler that is not there, and a short wait for it.
NO_CLUSTER = ("--scheduler", "tcp://127.0.0.1:9", "--timeout", "1")


def test_unwritable_directory_refused_before_the_run(tmp_path):
    if os.geteuid() == 0:
        bad = "/proc"  # permissions do not stop root
    else:
        bad = str(tmp_path / "ro")
        os.mkdir(bad, 0o555)
    out = os.path.join(bad, "r.npy")
    run = run_cli("sum", *NO_CLUSTER, "/nonexist/in.mib", "--out", out)
    assert run.returncode == 1 and f"stemdot.dask: --out: {out}: cannot write in directory {bad}" in run.stderr, run.stderr
    assert "connecting" not in run.stderr
    assert os.listdir(tmp_path) == ([] if os.geteuid() == 0 else ["ro"])


def test_out_checked_without_the_input_file(tmp_path):
    """#17 D6: FILE may exist only on the workers' shared storage: an existing --out is
    not compared with a FILE absent here; an --out that is FILE is refused; a name that
    is only the extension is refused."""
    out = tmp_path / "existing.npy"
    out.write_bytes(b"old")
    run = run_cli("sum", *NO_CLUSTER, "/nonexist/in.mib", "--out", out)
    assert run.returncode == 1 and "Timed out trying to connect to tcp://127.0.0.1:9" in run.stderr, run.stderr
    run = run_cli("sum", *NO_CLUSTER, out, "--out", out)
    assert run.returncode == 1 and "is an input of this run: not replacing it" in run.stderr, run.stderr
    run = run_cli("sum", *NO_CLUSTER, "/nonexist/in.mib", "--out", tmp_path / ".npy")
    assert run.returncode == 1 and "the file name is only the extension (a hidden file named .npy)" in run.stderr, run.stderr
    assert out.read_bytes() == b"old" and os.listdir(tmp_path) == ["existing.npy"]


def test_inputs_are_never_outputs(tmp_path):
    """The --roi file is an input, as FILE: no output of sum replaces it (checked before
    the scheduler is contacted; apply's inputs: test_dask_cli)."""
    roi = tmp_path / "roi.npy"
    roi.write_bytes(b"an input")
    run = run_cli("sum", *NO_CLUSTER, tmp_path / "scan.mib", "--roi", roi, "--mean", roi)
    assert run.returncode == 1 and "is an input of this run: not replacing it" in run.stderr, run.stderr
    assert roi.read_bytes() == b"an input"


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "stemdot.dask", *map(str, args)], capture_output=True, text=True, timeout=120)


def test_bad_command_lines_exit_1_with_one_message(tmp_path):
    """#17 D6, D10, #20.5: a bad flag value, a missing argument, a flag given an empty
    value: one line and status 1, stemdot apply's message; the dataset options' values
    are checked before the cluster is contacted (--offset 1KiB passes: a scheduler that
    is not there fails)."""
    base = ["--scheduler", "tcp://127.0.0.1:9", "/nonexist/in.mib", "--mask", "com", "--out", tmp_path / "r.npy", "--timeout", "1"]
    for args, message in (
        (["--nav-shape", "64x64"], 'stemdot.dask: --nav-shape "64x64": want whole sizes separated by commas, rows first: Y,X (e.g. 64,64), N (e.g. 4096) or Z,Y,X (e.g. 8,64,64)'),
        (["--offset", "1 furlong"], 'stemdot.dask: --offset "1 furlong": want a non-negative byte count such as 1024 or 1KiB'),
        (["--frames", "7"], 'stemdot.dask: --frames "7": want FIRST,COUNT (first frame >= 0, count >= 1)'),
        (["--timeout", "soon"], "stemdot.dask: --timeout 'soon': want a positive number of seconds"),
        (["--sig-shape", " "], "stemdot.dask: --sig-shape is given an empty value: give a value (see python -m stemdot.dask apply --help)"),
        (["--pngg", "img"], "stemdot.dask: unknown flag: --pngg; did you mean --png?"),
    ):
        run = run_cli(*base, *args)
        assert run.returncode == 1 and run.stderr == message + "\n", run.stderr
    run = run_cli("/nonexist/in.mib", "--mask", "com", "--out", tmp_path / "r.npy")
    assert run.returncode == 1 and run.stderr == "stemdot.dask: --scheduler ADDRESS is required: the Dask scheduler, e.g. tcp://head:8786\n", run.stderr
    run = run_cli(*base[:-4], "--timeout", "1")  # masks without --out
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


def test_an_interrupt_swallowed_by_library_code_still_ends_the_call(monkeypatch):
    """#20 A: Ctrl-C while the callback runs library code that catches every exception
    (distributed's Client() calls uuid.getnode, whose bare except swallowed the
    KeyboardInterrupt, and the command then waited for --timeout): the call still replies
    "interrupted" at once, before that code ends."""
    import ctypes
    import json
    import threading

    import distributed

    import stemdot.dask
    from stemdot import _lib
    from stemdot.dask.__main__ import _Backend

    backend = _Backend()
    returned = threading.Event()

    def client(*args, **kwargs):  # swallows every interrupt, until the 30 s of the timer below are over
        while not returned.is_set():
            try:
                returned.wait(0.01)
            except BaseException:  # noqa: BLE001 (as uuid.getnode's bare except)
                pass
        return "no client"

    monkeypatch.setattr(distributed, "Client", client)
    monkeypatch.setattr(stemdot.dask, "bootstrap", lambda client, **kwargs: {})
    previous = signal.signal(signal.SIGINT, backend.on_interrupt)
    timer = threading.Timer(0.3, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    try:
        timer.start()
        done = threading.Timer(30, returned.set)
        done.start()
        reply = json.loads(ctypes.string_at(backend(None, b"open", b'{"path": "x", "options": {}}', None, 0, None, 0, None, 0)))
        assert not returned.is_set(), "the call waited for the code that swallowed the interrupt"
    finally:
        returned.set()
        done.cancel()
        signal.signal(signal.SIGINT, previous)
    assert reply == {"error": "interrupted", "status": _lib.ERR_CANCELLED}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_interrupt_while_connecting_exits_1_with_stemdots_message(tmp_path, sig):
    """SIGINT, SIGTERM (a batch system's time limit) and SIGHUP while the command waits
    for its scheduler end it as they end stemdot apply: status 1 and "interrupted" (not
    killed by the signal, nor "context canceled: interrupted"), nothing written."""
    proc = subprocess.Popen([sys.executable, "-m", "stemdot.dask", "--scheduler", "tcp://127.0.0.1:9", "/nonexist/in.mib",
                             "--mask", "com", "--out", str(tmp_path / "r.npy"), "--timeout", "60"], stderr=subprocess.PIPE,
                            text=True)
    first = proc.stderr.readline()
    assert first.startswith("stemdot.dask: connecting to tcp://127.0.0.1:9"), first
    proc.send_signal(sig)  # at once: in the start of distributed's Client (#20 A)
    stderr = proc.communicate(timeout=120)[1]
    assert proc.returncode == 1 and stderr == "stemdot.dask: interrupted\n", (proc.returncode, stderr)
    assert not list(tmp_path.iterdir())
