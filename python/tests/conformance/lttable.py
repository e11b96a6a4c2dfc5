"""The table of deliberate differences from LiberTEM, doc/libertem-differences.md, which
the conformance tests mark their rows of (``difference``); needs no libertem."""
import re
from pathlib import Path

import pytest

TABLE = Path(__file__).resolve().parents[3] / "doc" / "libertem-differences.md"


def table_rows():
    """The rows of doc/libertem-differences.md: {title: (libertem, stemdot, why)}, the title
    being the bold text that opens a row's behaviour cell."""
    rows = {}
    for line in TABLE.read_text().splitlines():
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
