"""`rooflab compare` on databases: intervals from raw samples, and after they are pruned; the
committed H100 and H200 exports, where the comparison page and the CLI must give one answer."""
from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from rooflab.runners.cli.app import app
from tests.reports.synth import device_rows, row, write_db

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
N = 1 << 24


def _run(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def _timed(op: str, level_ms: float, seed: int, **kw) -> dict:
    """A case with 50 raw samples at 1 % noise around `level_ms`."""
    samples = level_ms * (1 + 0.01 * np.random.default_rng(seed).standard_normal(50))
    r = row(op=op, family="pointwise", params={"n": N}, flops=N, nbytes=12 * N, median_ms=float(np.median(samples)),
            **kw)
    r["samples_ms"] = [float(x) for x in samples]
    return r


@pytest.fixture(scope="module")
def sampled(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('cmp') / 'results.db'}"
    h100: dict[str, Any] = dict(device_name=H100, fingerprint="fp-h100", run_id="h100-run", run_order=1)
    h200: dict[str, Any] = dict(device_name=H200, fingerprint="fp-h200", run_id="h200-run", run_order=2)
    rows = device_rows(**h100) + device_rows(hbm_gbps=4300.0, **h200)
    rows += [_timed("add", 1.0, 1, **h100), _timed("add", 1.0 / 1.05, 2, **h200),  # a planted 5 % speedup
             _timed("triad", 1.0, 3, **h100), _timed("triad", 1.0, 4, **h200)]  # and 0 %

    write_db(url, rows)
    return url


def _cases(url: str) -> dict:
    res = _run("compare", "--baseline", "H100", "--candidate", "H200", "--db", url, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    return {c["case_key"].split(".")[0]: c for c in data["cases"]} | {"_data": data}


def test_intervals_from_raw_samples_then_from_stored_cis_once_pruned(sampled, tmp_path):
    cases = _cases(sampled)
    add, triad = cases["add"], cases["triad"]
    assert (add["interval"] == "bootstrap" and add["standing"] == "faster"
            and 1.03 < add["speedup_low"] < 1.05 < add["speedup_high"])
    assert triad["interval"] == "bootstrap" and triad["standing"] == "not_significant"
    assert triad["speedup_low"] < 1.0 < triad["speedup_high"]
    assert cases["_data"]["pairing"]["baseline"]["runs"] == ["h100-run"]
    text = _run("compare", "--baseline", "H100", "--candidate", "H200", "--db", sampled).stdout
    assert "paired runs: baseline NVIDIA H100 80GB HBM3: h100-run" in text and "Why:" in text
    assert re.search(r"intervals from: \d+ from the raw samples of both sides \(bootstrap\)$", " ".join(text.split())
                     .split(" cases that deviate")[0].split("n.s.:")[1]), text
    from rooflab.db.prune import prune_samples

    prune_samples(sampled, timedelta(days=1), now=datetime.now(UTC) + timedelta(days=3650))
    add = _cases(sampled)["add"]
    assert add["interval"] == "stored_ci" and "without raw samples" in add["note"]
    text = " ".join(_run("compare", "--baseline", "H100", "--candidate", "H200", "--db", sampled).stdout.split())
    assert re.search(r"intervals from: \d+ from the stored CIs of the medians \(a side without raw samples", text)


def test_two_runs_of_one_device(tmp_path):
    """Named by their runs: every case of the older run is compared, though a newer run measured it
    again; nothing changed between them, so no interval excludes 1."""
    url = f"sqlite:///{tmp_path / 'two.db'}"
    first = dict(device_name=H100, fingerprint="fp-h100", run_id="h100-run", run_order=1)
    again = dict(first, run_id="h100-run-2", run_order=2)
    write_db(url, [_timed("add", 1.0, 1, **first), _timed("triad", 1.0, 3, **first),
                   _timed("add", 1.0, 5, **again), _timed("triad", 1.0, 6, **again)])
    res = _run("compare", "--baseline", "h100-run", "--candidate", "h100-run-2", "--db", url, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["pairing"]["reason"] == "the runs named"
    cases = {c["case_key"].split(".")[0]: c for c in data["cases"]}
    assert set(cases) == {"add", "triad"}
    assert all(c["standing"] == "not_significant" for c in cases.values()), cases


@pytest.fixture(scope="module")
def examples(tmp_path_factory) -> str:
    from rooflab.db.importer import import_file

    url = f"sqlite:///{tmp_path_factory.mktemp('examples') / 'examples.db'}"
    for path in ("h100/part1/results.jsonl.gz", "h100/part2/results.jsonl.gz", "h200/results.jsonl.gz"):
        import_file(url, EXAMPLES / path)
    return url


def _page_rows(page: str) -> dict[str, list[str]]:
    """The 'Every case' table of a comparison page: case key -> its cells' text."""
    table = page[page.index('<table class="cases">'):]
    table = table[:table.index("</table>")]
    rows = {}
    for tr in re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)[1:]:
        cells = [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
        rows[cells[0]] = cells
    return rows


def test_the_committed_exports_give_one_answer_on_the_page_and_the_terminal(examples, tmp_path):
    """Before: the page paired each device's newest run (45 cases, launch-bound predicted 0.68x) and
    the CLI each case's newest result on every run (117 cases, 0.77x); now both call one rule."""
    from rooflab.reports.pages.report import _num, write_report

    data = _cases(examples)["_data"]
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
    page = (write_report(examples, tmp_path / "site").parent / "compare.html").read_text()
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
