"""The format table (runners/peer_import/format_table.py) is the one list of the formats `rooflab import`
reads: each row's functions exist, and `rooflab import --help`, the reason given for a file no row reads
and docs/peer-import.md list exactly its rows, in its order."""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from rooflab.runners.cli.import_cmd import import_cmd
from rooflab.runners.peer_import.format_table import FORMATS, Format, Named
from rooflab.runners.peer_import.recognise import NOT_READ, recognise_text
from tests.runners.peer_import.planting import FIXTURES

DOCS = Path(__file__).resolve().parents[3] / "docs" / "peer-import.md"


@pytest.mark.parametrize("row", FORMATS, ids=lambda f: f.name)
def test_each_row_names_functions_that_exist(row: Format) -> None:
    for named in (row.looks_like, row.parser, row.converter):
        assert callable(named.resolve()), named
    assert [f.name for f in FORMATS].count(row.name) == 1


def test_a_row_naming_a_missing_function_fails_when_resolved() -> None:
    with pytest.raises(AttributeError):
        Named("nccl_tests", "parse_nccl_tests_xml").resolve()
    with pytest.raises(TypeError, match="not a function"):
        Named("format_table", "PACKAGE").resolve()


def _docs_table() -> list[tuple[str, str, str]]:
    """The rows of the first table under docs/peer-import.md's `## What is read`."""
    section = DOCS.read_text(encoding="utf-8").split("## What is read", 1)[1]
    rows: list[tuple[str, str, str]] = []
    for line in section.splitlines()[1:]:
        if rows and not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 3 and not set(cells[0]) <= {"-"} and cells[0] != "format":
            rows.append((cells[0], cells[1], cells[2]))
    return rows


def test_the_help_the_docs_and_the_unread_reason_list_the_table() -> None:
    names = [f.name for f in FORMATS]
    help_text = inspect.signature(import_cmd).parameters["paths"].default.help
    assert re.findall(r"\(([^()]*(?:\([^()]*\)[^()]*)*)\); each file", help_text) == [", ".join(names)]
    assert f"({', '.join(names)})" in NOT_READ
    assert _docs_table() == [(f.name, f.tool, f.recognised_by) for f in FORMATS]


def test_the_first_row_whose_test_holds_is_the_format() -> None:
    # an nccl-tests table inside a BabelStream log: the earlier row (nccl-tests' output) is the format
    both = "".join((FIXTURES / name).read_text() for name in ("babelstream_rtx2060_alpaka.txt",
                                                              "nccl_tests_h100_2nodes.txt"))
    found = recognise_text(both)
    assert found.format is not None and found.name == "nccl-tests or rccl-tests output"
    order = [f.name for f in FORMATS]
    assert order.index("nccl-tests or rccl-tests output") < order.index("BabelStream output")
