"""Fixtures of the cluster fault tests (make test-cluster) and the table they print at the
end: fault | result identical | time to finish | warnings, one row per fault."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import rig  # noqa: E402

_ROWS = {}  # test node id → [fault, identical, seconds, warnings]
_ORDER = []
_DESCRIBE = []


def pytest_configure(config):
    config.addinivalue_line("markers", "fault(name): the fault a test injects, its row in the table")


def _fault(item):
    m = item.get_closest_marker("fault")
    return m.args[0] if m else item.name


@pytest.fixture
def record(request):
    """record(identical, seconds, warnings=()): the test's row in the table (identical: a
    bool, or a text such as "error in 3.2 s: ...")."""

    def add(identical, seconds, warnings=()):
        if isinstance(identical, bool):
            identical = "yes" if identical else "NO"
        _ROWS[request.node.nodeid] = [_fault(request.node), identical, f"{seconds:.1f} s", "; ".join(warnings) or "-"]

    return add


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)
    if item.nodeid not in _ORDER:
        _ORDER.append(item.nodeid)
    row = _ROWS.get(item.nodeid)
    if rep.skipped:
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        _ROWS[item.nodeid] = [_fault(item), f"skipped: {reason.removeprefix('Skipped: ')}", "-", "-"]
    elif rep.failed:
        msg = str(getattr(rep.longrepr, "reprcrash", None) and rep.longrepr.reprcrash.message or rep.longrepr)
        first = msg.strip().splitlines()[0][:150] if msg.strip() else "failed"
        if row is None:
            _ROWS[item.nodeid] = [_fault(item), f"FAILED ({rep.when}): {first}", "-", "-"]
        else:
            row[1] = f"FAILED ({row[1]}): {first}"


def pytest_terminal_summary(terminalreporter):
    rows = [_ROWS[i] for i in _ORDER if i in _ROWS]
    if not rows:
        return
    head = ["fault", "result identical", "time to finish", "warnings"]
    widths = [min(100, max(len(str(r[k])) for r in rows + [head])) for k in range(3)]
    tr = terminalreporter
    tr.write_sep("=", "stemdot.dask on the cluster rig")
    for line in _DESCRIBE:
        tr.write_line(line)
    fmt = " | ".join(f"{{:{w}}}" for w in widths) + " | {}"
    tr.write_line(fmt.format(*head))
    tr.write_line("-+-".join("-" * w for w in widths) + "-+-" + "-" * 20)
    for r in rows:
        tr.write_line(fmt.format(*[str(c)[:100] for c in r[:3]], str(r[3])[:240]))


@pytest.fixture(scope="session")
def describe_rig():
    """Adds a line about a rig to the summary."""
    return _DESCRIBE.append


@pytest.fixture
def own_cluster(request):
    """make(**kwargs): a Cluster of the test's own (closed at the test's end; its logs
    printed and kept when the test failed)."""
    made = []

    def make(**kwargs):
        c = rig.Cluster(**kwargs)
        made.append(c)
        return c

    yield make
    rep = getattr(request.node, "rep_call", None)
    for c in made:
        c.close(failed=rep is None or rep.failed)
