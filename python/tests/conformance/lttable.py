"""The table of deliberate differences from LiberTEM, the page doc/libertem.md "Differences
from LiberTEM", which the conformance tests mark their rows of (``difference``); needs no
libertem."""
import re
from pathlib import Path

import pytest

TABLE = Path(__file__).resolve().parents[3] / "doc" / "libertem.md"
SECTION = "# Differences from LiberTEM"


def section():
    """The text of the page's section of differences, up to the next section."""
    text = TABLE.read_text()
    assert SECTION in text, f"{TABLE.name} has no section {SECTION!r}"
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


def table_rows():
    """The rows of the table of differences: {title: (libertem, stemdot, why)},
    the title being the bold text that opens a row's behaviour cell."""
    rows = {}
    for line in section().splitlines():
        m = re.match(r"\|\s*\*\*(.+?)\*\*", line)
        if m:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            assert len(cells) == 4, f"{TABLE.name}: row {m.group(1)!r} has {len(cells)} cells, want 4"
            assert m.group(1) not in rows, f"{TABLE.name}: row {m.group(1)!r} twice"
            rows[m.group(1)] = tuple(cells[1:])
    return rows


def difference(title):
    """Marks a test that asserts the deliberate difference of the table's row ``title``
    (its bold behaviour text); a title not in the table fails at collection."""
    if title not in table_rows():
        raise LookupError(f"difference({title!r}): no such row in {TABLE}")
    return pytest.mark.difference(title)
