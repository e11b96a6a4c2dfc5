import os
import re
import signal
import subprocess
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def data_dir():
    """The real detector files: $STEMDOT_TESTDATA or ../shared/data beside the repo."""
    d = Path(os.environ.get("STEMDOT_TESTDATA") or REPO.parent / "shared" / "data")
    if not d.is_dir():
        pytest.skip(f"real detector files not found at {d} (set STEMDOT_TESTDATA): skipping")
    return d


@pytest.fixture(scope="session")
def cli():
    """The stemdot command: $STEMDOT_CLI (make test-wheel: the installed wheel's), else the
    checkout's binary (make build), or skip."""
    b = Path(os.environ.get("STEMDOT_CLI") or REPO / "bin" / "stemdot")
    if not b.is_file():
        pytest.skip(f"{b} not found (run make build): skipping the CLI comparison")
    return b


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt during the test, whatever handler the test run was
    started with: one started in the background (make test &, nohup) inherits SIGINT
    ignored, and Python then installs no handler of its own, so that a SIGINT the test
    sends itself would be lost."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


class Replay:
    """`stemdot replay FILE --as AS ARGS` on a free loopback port (and, with api, its
    SIMPLON API on another), until stopped: address (also stream) and api."""

    ADDRESSES = re.compile(r"(?:data port|stream) (127\.0\.0\.1:\d+)(?:, SIMPLON API (127\.0\.0\.1:\d+))?")

    def __init__(self, cli, path, as_, *args, api=False):
        more = ["--api", "127.0.0.1:0"] if api else []
        self.proc = subprocess.Popen([str(cli), "replay", str(path), "--as", as_, "--listen", "127.0.0.1:0", *more, *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        lines = []
        while (m := self.ADDRESSES.search(line := self.proc.stderr.readline())) is None:  # after its warnings
            lines.append(line)
            if not line:
                self.stop()
                raise AssertionError(f"stemdot replay printed no address: {''.join(lines)!r}")
        self.address = self.stream = m.group(1)
        self.api = m.group(2)
        # the rest of its messages, read so that it never blocks on a full pipe
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()

    def kill(self):
        """Cuts the acquisition off: the process ends, its connections close."""
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def replay(cli):
    """start(path, as_, *args, api=False): a Replay, stopped at the test's end."""
    started = []

    def start(path, as_, *args, api=False):
        r = Replay(cli, path, as_, *args, api=api)
        started.append(r)
        return r

    yield start
    for r in started:
        r.stop()

