"""The table of differences from LiberTEM (doc/libertem.md) and the suite stay in step: every row
of the table is asserted by a test marked difference(row), and every such mark names a
row (an unknown one also fails collection, see ltcommon.difference)."""
import ast
from pathlib import Path

from lttable import TABLE, section, table_rows


def marked_rows():
    """{row title: [test names]} of the difference(...) decorators in this directory."""
    found = {}
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                for d in node.decorator_list:
                    if isinstance(d, ast.Call) and getattr(d.func, "id", None) == "difference":
                        found.setdefault(d.args[0].value, []).append(f"{path.name}::{node.name}")
    return found


def test_table_is_well_formed():
    lines = [line for line in section().splitlines() if line.startswith("|")]
    assert lines[0].replace(" ", "") == "|behaviour|LiberTEM|stemdot|why|"
    for title, cells in table_rows().items():
        assert all(cells), f"row {title!r} has an empty cell"
    assert len(lines) == 2 + len(table_rows()), "every row of the table opens with a bold title"


def test_every_row_has_a_test():
    assert set(table_rows()) - set(marked_rows()) == set(), f"rows of {TABLE.name} that no test asserts"


def test_every_difference_test_has_a_row():
    unknown = {t: tests for t, tests in marked_rows().items() if t not in table_rows()}
    assert not unknown, f"tests marked with a difference that {TABLE.name} does not list"
