import os
import signal
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
