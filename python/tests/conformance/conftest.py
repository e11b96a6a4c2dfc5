"""The LiberTEM conformance suite (`make test-libertem`): the same inputs through LiberTEM
0.16.0 (the inline executor) and stemdot, asserted equal where the semantics agree; each
deliberate difference is asserted as a difference by a test marked with its row of the
table of differences from LiberTEM, doc/libertem.md (test_lt_table.py checks that rows and tests
match).
LiberTEM's numba kernels are cached in the venv (NUMBA_CACHE_DIR), so that runs after the
first skip their compilation."""
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("NUMBA_CACHE_DIR", str(Path(sys.prefix) / "numba-cache"))


def pytest_configure(config):
    config.addinivalue_line("markers", "difference(title): asserts the deliberate difference of that row of "
                            "the table of differences from LiberTEM, doc/libertem.md")


@pytest.fixture(scope="session")
def ctx():
    """One LiberTEM Context on the inline executor (runs in this process, no cluster)."""
    import ltcommon

    return ltcommon.libertem.api.Context.make_with("inline")
