"""Published outputs of the peers' tools, read as `rooflab import` reads them (in process), when the corpus
folder `../shared/peer-outputs/` lies beside the checkout (skipped where it does not, as on a user's clone).

Its README gives each file's source and the figures it printed: the footer's average bus bandwidth and the
busbw of both halves at the largest size (nccl-tests, rccl-tests), the Triad bandwidth of each run
(BabelStream). Each file is either read whole, its stored rate at the largest size equal to the printed one
within the printed rounding and no stored `ok` rate above the rates it printed, or refused with exit 2
where its README says the author trimmed it so that the footer cannot match. A copy of each file read
whole, cut in the middle of its last row, before its footer (BabelStream: without its last row) or
between the footer's first two lines, is refused, and a folder of those copies stores nothing.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rooflab.db.measurement_columns import gbps_of
from rooflab.runners.cli.app import app
from rooflab.runners.peer_import.errors import PeerFormatError
from rooflab.runners.peer_import.files import ImportOptions, read, source_of
from rooflab.runners.peer_import.nccl_tests import parse_nccl_tests_text
from rooflab.runners.peer_import.printed import PrintedRate
from rooflab.runners.peer_import.recognise import recognise
from rooflab.runners.peer_import.results import Conversion, Imported
from rooflab.vocab import ResultStatus

CORPUS = Path(__file__).resolve().parents[3].parent / "shared" / "peer-outputs"
OPTIONS = ImportOptions(measured_at=datetime(2026, 5, 1, tzinfo=UTC), device_name="the file's own CPU")
UNITS = {"MiB": 1 << 20, "GiB": 1 << 30}
pytestmark = pytest.mark.skipif(not (CORPUS / "README.md").is_file(), reason=f"no corpus at {CORPUS}")


@dataclass(frozen=True)
class Printed:
    """A README row: the file, what it printed, and whether its author trimmed it beyond reading."""

    name: str
    average: float | None  # the footer's Avg bus bandwidth
    largest_bytes: int | None
    largest_busbw: tuple[float, ...]  # out-of-place, in-place
    triads_mbps: tuple[float, ...]  # BabelStream: each run's Triad, in the file's order
    trimmed: bool


def _readme() -> list[Printed]:
    rows = []
    for line in (CORPUS / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or not (m := re.fullmatch(r"`([^`]+)`", cells[0])):
            continue
        printed, kept = cells[-1], cells[-2]
        average = re.search(r"Avg(?: bus bandwidth)? ([\d.]+)", printed)
        largest = re.search(r"(\d+) (MiB|GiB) (?:oop )?([\d.]+) / (?:ip )?([\d.]+)", printed)
        triads = () if average else tuple(float(x) for x in re.findall(r"[\d.]+", printed))
        rows.append(Printed(m.group(1), float(average.group(1)) if average else None,
                            int(largest.group(1)) * UNITS[largest.group(2)] if largest else None,
                            (float(largest.group(3)), float(largest.group(4))) if largest else (), triads,
                            trimmed="cannot match" in kept))
    return rows


ROWS = _readme() if (CORPUS / "README.md").is_file() else []


def _read(path: Path, text: str | None = None) -> Conversion:
    found = recognise(path)
    assert found.format is not None, found.why
    return read(found.format, found.text if text is None else text, source_of(path, OPTIONS))


def _ok(conversion: Conversion) -> list[Imported]:
    return [i for r in conversion.runs for i in r.results if i.record.status == ResultStatus.OK]


def _within(stored: float, printed: float, item: Imported) -> bool:
    """`stored` (GB/s) is `printed` within its two decimals and the rounding of the time it came from."""
    slack = max(r.time_slack for r in item.printed if isinstance(r, PrintedRate))
    return abs(stored - printed) <= 0.005 + printed * slack + 1e-9


def test_the_readme_lists_every_file_of_the_corpus() -> None:
    assert sorted(r.name for r in ROWS) == sorted(p.name for p in CORPUS.iterdir() if p.name != "README.md")


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_each_file_reads_to_its_printed_figures_or_is_refused(row: Printed) -> None:
    path = CORPUS / row.name
    if row.trimmed:
        with pytest.raises(PeerFormatError, match="cannot be read whole"):
            _read(path)
        return
    ok = _ok(_read(path))
    assert ok
    most = max(r.printed_gbps.value * (1 + r.time_slack) for i in ok for r in i.printed if isinstance(r, PrintedRate))
    assert all((gbps_of(i.record) or 0.0) <= most + 0.005 for i in ok)  # no stored rate above what it printed
    if row.triads_mbps:
        triads = sorted((i for i in ok if i.record.identity.case.op == "stream_triad"),
                        key=lambda i: int(i.record.identity.case.params["n"]))
        assert len(triads) == len(row.triads_mbps)
        for item, printed in zip(triads, row.triads_mbps, strict=True):
            assert _within(gbps_of(item.record) or 0.0, printed / 1e3, item)
        return
    (test,) = parse_nccl_tests_text(path.read_text(encoding="utf-8"))
    assert test.avg_busbw_gbps is not None and test.avg_busbw_gbps.value == row.average
    assert max(r.size_bytes for r in test.rows) == row.largest_bytes
    largest = [i for i in ok if i.record.identity.case.op in ("all_reduce", "all_gather", "reduce_scatter",
                                                                "all_to_all", "broadcast")]
    top = max(int(i.record.identity.case.params["n"]) for i in largest)
    halves = sorted((i for i in largest if int(i.record.identity.case.params["n"]) == top),
                    key=lambda i: i.record.identity.case.params.get("inplace", True) is not False)
    assert [p.printed_gbps.value for i in halves for p in i.printed
            if isinstance(p, PrintedRate) and p.what == "busbw"] == list(row.largest_busbw)
    for item, printed in zip(halves, row.largest_busbw, strict=True):
        assert _within(gbps_of(item.record) or 0.0, printed, item)


def _cuts(path: Path) -> dict[str, str]:
    """Copies of a file cut in the middle of its last table row, before its footer (BabelStream, which
    prints no footer: without its last row) and, where it has one, inside its footer."""
    found = recognise(path)
    assert found.format is not None
    parsed: Any = found.format.parser.resolve()(found.text)  # nccl-tests' tests or BabelStream's runs
    rows = [r for block in parsed for r in block.rows]
    last = max(r.line for r in rows)
    previous = max(r.line for r in rows if r.line < last)
    lines = found.text.splitlines()
    footer_at = last if found.format.tool != "babelstream" else previous
    half_row = lines[last - 1][:len(lines[last - 1]) // 2]
    cuts = {f"{path.stem}-mid-row{path.suffix}": "\n".join([*lines[:last - 1], half_row]),
            f"{path.stem}-no-footer{path.suffix}": "\n".join(lines[:footer_at]) + "\n"}
    bounds = next((i for i in range(last, len(lines)) if "Out of bounds values" in lines[i]), None)
    if bounds is not None:  # nccl-tests: cut between `# Out of bounds values` and `# Avg bus bandwidth`
        cuts[f"{path.stem}-in-footer{path.suffix}"] = "\n".join(lines[:bounds + 1]) + "\n"
    return cuts


def test_copies_cut_mid_row_or_before_the_footer_exit_2_and_store_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "cut"
    folder.mkdir()
    for row in ROWS:
        if row.trimmed:
            continue
        for name, text in _cuts(CORPUS / row.name).items():
            (folder / name).write_text(text)
            with pytest.raises(PeerFormatError):
                _read(folder / name)
    db = tmp_path / "cut.db"
    result = CliRunner().invoke(app, ["import", str(folder), "--db", f"sqlite:///{db}"])
    assert result.exit_code == 2
    assert "0 imported (0 results added" in result.stdout and result.stderr.count("nothing of this file") == len(
        list(folder.iterdir()))
