"""The report of a fixed database, byte for byte.

The committed GPU exports (examples/h100 part1 and part2, examples/h200) are imported into a fresh
SQLite file and `rooflab report` is written from it; every file of the report must hash as recorded
in report_snapshot.json. A refactoring that claims to change nothing for a user must leave this
test green. A change that means to change the report (a new section, a fixed figure) updates the
snapshot in the same commit, and the commit message says what changed on the page:

    PYTHONPATH=$PWD .venv/bin/python -m tests.reports.pages.test_report_snapshot --update

The figures drawn by matplotlib (figures/*.svg) are compared only under the matplotlib version the
snapshot was taken with (its SVG text changes between versions); the HTML pages, which hold the
project's own roofline and every table, are compared always.

A file is hashed with the coordinates in its drawings (numbers written with five or more decimals:
matplotlib writes six) rounded to three. Matplotlib places points through numpy's log and exp,
whose last bit depends on the CPU's vector instructions (AVX-512 against AVX2): one H200 point at
338.3184375 px wrote 338.318438 on one machine and 338.318437 on another. A thousandth of a pixel
is far below anything a reader sees, and far enough from the last bit that the rounding holds.

The same report's comparison page and `rooflab compare` on the same database must give one answer
(the database and the report are written once for both tests: the `fixed` fixture).
"""
from __future__ import annotations

import hashlib
import html
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SNAPSHOT = Path(__file__).with_name("report_snapshot.json")
_COORDINATE = re.compile(rb"-?\d+\.\d{5,}")
EXPORTS = ("examples/h100/part1/results.jsonl.gz", "examples/h100/part2/results.jsonl.gz",
           "examples/h200/results.jsonl.gz")


def _write_report(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of the report written from the committed exports into `folder`
    (the current directory: the page names the database by its URL, here the same in every run),
    the database beside it (fixed.db)."""
    from rooflab.db.importer import import_file
    from rooflab.reports.pages.report import write_report

    assert Path.cwd() == folder.resolve()
    url = "sqlite:///fixed.db"
    for export in EXPORTS:
        import_file(url, ROOT / export)
    out = folder / "report"
    write_report(url, out)
    return {str(p.relative_to(out)): _digest(p.read_bytes()) for p in sorted(out.rglob("*")) if p.is_file()}


@dataclass(frozen=True)
class Fixed:
    """The committed exports' database (its URL), the report written of it, and its files' digests."""

    url: str
    report: Path
    digests: dict[str, str]


@pytest.fixture(scope="module")
def fixed(tmp_path_factory: pytest.TempPathFactory) -> Fixed:
    folder = tmp_path_factory.mktemp("fixed").resolve()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        digests = _write_report(folder)
    return Fixed(f"sqlite:///{folder / 'fixed.db'}", folder / "report", digests)


def _digest(content: bytes) -> str:
    """sha256 of `content` with its drawings' coordinates rounded to three decimals (module docstring)."""
    rounded = _COORDINATE.sub(lambda m: b"%.3f" % float(m.group()), content)
    return hashlib.sha256(rounded).hexdigest()


def test_a_coordinate_one_bit_apart_hashes_the_same_and_a_moved_one_does_not():
    page = b'<path d="M 74.528054 338.318438 L 416.363595 48.074993"/><td>3,139</td><td>0.25</td>'
    assert _digest(page) == _digest(page.replace(b"338.318438", b"338.318437"))
    assert _digest(page) != _digest(page.replace(b"338.318438", b"338.418438"))
    assert _digest(page) != _digest(page.replace(b"3,139", b"3,138"))
    assert _digest(page) != _digest(page.replace(b"0.25", b"0.26"))


def _matplotlib_version() -> str:
    import matplotlib

    return str(matplotlib.__version__)


def test_the_report_of_a_fixed_database_is_unchanged(fixed: Fixed) -> None:
    expected = json.loads(SNAPSHOT.read_text())
    got = fixed.digests
    same_figures = expected["matplotlib"] == _matplotlib_version()
    want = {k: v for k, v in expected["files"].items() if same_figures or not k.startswith("figures/")}
    have = {k: v for k, v in got.items() if same_figures or not k.startswith("figures/")}
    assert sorted(have) == sorted(want), "the report's files differ"
    changed = [name for name in want if have[name] != want[name]]
    assert not changed, (f"these report files changed: {changed}; if the change is meant, update the snapshot "
                         "(see this module's docstring) and say in the commit what changed on the page")


def _page_rows(page: str) -> dict[str, list[str]]:
    """The 'Every case' table of a comparison page: case key -> its cells' text."""
    table = page[page.index('<table class="cases">'):]
    table = table[:table.index("</table>")]
    rows = {}
    for tr in re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)[1:]:
        cells = [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
        rows[cells[0]] = cells
    return rows


def test_the_committed_exports_give_one_answer_on_the_page_and_the_terminal(fixed: Fixed) -> None:
    """Before: the page paired each device's newest run (45 cases, launch-bound predicted 0.68x) and
    the CLI each case's newest result on every run (117 cases, 0.77x); now both call one rule."""
    from rooflab.reports.pages.report import _num
    from tests.reports.comparisons.test_compare_cli import H100, H200, _cases

    data = _cases(fixed.url)["_data"]
    pairing = data["pairing"]
    assert pairing["baseline"]["runs"] == ["quick-20261122T160330Z-61ba"]
    assert pairing["candidate"]["runs"] == ["quick-20261122T164337Z-f729"] and "(quick)" in pairing["reason"]
    cases = {c["case_key"]: c for c in data["cases"]}
    assert len(cases) == 117
    # the streams are significant: every cold stream probe of at least 4x L2 is faster on the H200
    big = [c for k, c in cases.items()
           if k.startswith("stream_") and ":cold:" in k and int(k.rsplit("n=", 1)[1]) >= 1 << 25]
    assert len(big) >= 4 and all(c["standing"] == "faster" and c["speedup_low"] > 1.2 for c in big)
    launch = cases["launch.v2:eager:float32:hot:launch:n=1"]
    assert launch["predicted_low"] == pytest.approx(0.007109 / 0.008119, rel=1e-3)
    assert launch["predicted_high"] == pytest.approx(0.009137 / 0.008119, rel=1e-3) and launch["deviation"] == 1.0
    page = (fixed.report / "compare.html").read_text()
    assert f"{H200} against {H100} (117 cases)" in page
    assert "quick-20261122T160330Z-61ba (quick, 121 cases)" in page and "quick-20261122T164337Z-f729 (quick" in page
    rows = _page_rows(page)
    assert set(rows) == set(cases)
    for key, c in cases.items():
        cells = rows[key]
        shown = _num(c["speedup"], 3) + ("" if c["speedup_low"] is None else
                                         f" [{_num(c['speedup_low'], 3)}, {_num(c['speedup_high'], 3)}]")
        assert cells[4] == shown, (key, cells[4], c)
        assert cells[5] == c["standing"].replace("_", " ")
        ranged = c["predicted_low"] != c["predicted_high"]
        predicted = _num(c["predicted_speedup"], 3) + (
            f" [{_num(c['predicted_low'], 3)}, {_num(c['predicted_high'], 3)}]" if ranged else "")
        predicted += f" ({c['predicted_from']})" if c["predicted_from"] else ""
        assert cells[7] == predicted, (key, cells[7], c)  # the same prediction, and range, on both


def _update() -> None:  # pragma: no cover - run by hand
    import tempfile

    with tempfile.TemporaryDirectory() as name:
        folder = Path(name).resolve()
        os.chdir(folder)
        files = _write_report(folder)
    SNAPSHOT.write_text(json.dumps({"matplotlib": _matplotlib_version(), "files": files}, indent=1) + "\n")
    print(f"{SNAPSHOT}: {len(files)} files")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        pytest.main([__file__])
    else:
        _update()
