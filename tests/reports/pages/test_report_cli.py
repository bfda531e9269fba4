from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rooflab.runners.cli.app import app
from tests.reports.synth import device_rows, history, noisy, write_db

runner = CliRunner()


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'results.db'}"
    a100: dict[str, Any] = dict(device_name="NVIDIA A100-SXM4-80GB", fingerprint="fp-a100", run_id="run-a100",
                                l2_bytes=40 << 20)
    rows = (device_rows(hbm_gbps=3000.0, bf16_tflops=700.0)
            + device_rows(hbm_gbps=1500.0, fp32_tflops=25.0, bf16_tflops=250.0, **a100))
    for i, r in enumerate(rows):
        r["run_order"] = 40 + i // 11
    rows += history(noisy(22, 1.0, 0.02, 5) + [1.25, 1.24])
    write_db(url, rows)
    return url


def _run(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_roofline_json_and_chart(db, tmp_path):
    newest = json.loads(_run("roofline", "--device", "H100", "--db", db, "--json").stdout)
    assert newest["shown_runs"] == ["run-0024"]  # by default the device's newest run (a nightly history run)
    res = _run("roofline", "--device", "H100", "--db", db, "--json", "--out", str(tmp_path), "--run", "run-1")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["shown_runs"] == ["run-1"]
    kinds = {c["kind"]: c for c in data["ceilings"]}
    assert kinds["hbm_rw"]["value"] == pytest.approx(3000.0) and kinds["hbm_rw"]["ratio"] == pytest.approx(3000 / 3350)
    assert data["datasheet"] == "H100 SXM"
    assert len(data["figures"]) == 2 and all(p.endswith(".svg") for p in data["figures"])
    table = _run("roofline", "--device", "A100", "--db", db)
    assert all(len(line) <= 80 for line in table.stdout.splitlines()), table.stdout
    assert table.exit_code == 0 and "hbm_rw" in table.stdout and "1500" in table.stdout


def test_roofline_unknown_device_exits_2(db):
    res = _run("roofline", "--device", "B200", "--db", db)
    assert res.exit_code == 2
    assert "NVIDIA A100-SXM4-80GB" in res.output


def test_predict_uses_measured_ceilings(db):
    res = _run("predict", "matmul", "--shape", "m=8192,n=8192,k=8192", "--dtype", "bfloat16", "--device", "H100",
               "--db", db, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["compute_origin"] == "measured" and data["compute_tflops"] == pytest.approx(700.0)
    assert data["wall"] == "compute"
    text = _run("predict", "copy", "--shape", "n=1048576", "--dtype", "float32", "--device", "L4", "--db", db)
    assert text.exit_code == 0 and "datasheet" in text.stdout
    bad = _run("predict", "matmul", "--shape", "m=1,zz=2", "--dtype", "bfloat16", "--device", "H100", "--db", db)
    assert bad.exit_code == 2 and "zz" in bad.output


def test_compare_devices(db):
    res = _run("compare", "--baseline", "A100", "--candidate", "fp-h100", "--db", db, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    overall = [r for r in data["summary"] if r["family"] == "all"][0]
    assert overall["cases"] >= 9
    triad = [c for c in data["cases"]
             if c["case_key"].startswith("stream_triad.v1:eager:float32:cold:launch:n=67108864")]
    assert triad[0]["predicted_speedup"] == pytest.approx(2.0)
    assert _run("compare", "--baseline", "nope", "--candidate", "H100", "--db", db).exit_code == 2


def test_regressions_fail_on(db):
    res = _run("regressions", "--db", db, "--json")
    assert res.exit_code == 1
    data = json.loads(res.stdout)
    assert data["counts"]["regression"] == 1 and data["failed"] is True
    assert data["series"][0]["case_key"].startswith("stream_triad")
    assert _run("regressions", "--db", db, "--fail-on", "never").exit_code == 0
    assert _run("regressions", "--db", db, "--min-change", "0.5").exit_code == 0
    bad = _run("regressions", "--db", db, "--fail-on", "sometimes")
    assert bad.exit_code == 2 and "regression, drift, suspect, never" in bad.output


def test_report_on_a_missing_and_on_an_empty_database(tmp_path: Path) -> None:
    """(The report on a database with results: tests/reports/pages/test_report_processes.py, as a
    user runs it.)"""
    missing = _run("report", "--out", str(tmp_path / "missing"), "--db", f"sqlite:///{tmp_path / 'none.db'}")
    assert missing.exit_code == 2 and "does not exist" in missing.output, missing.output
    assert not (tmp_path / "none.db").exists() and not (tmp_path / "missing").exists()
    from rooflab.db.store import ResultStore

    ResultStore(f"sqlite:///{tmp_path / 'empty.db'}").close()  # a database with nothing stored yet
    empty = _run("report", "--out", str(tmp_path / "empty"), "--db", f"sqlite:///{tmp_path / 'empty.db'}")
    assert empty.exit_code == 0, empty.output
    assert "nothing here yet" in (tmp_path / "empty" / "index.html").read_text()
    reg = _run("regressions", "--db", f"sqlite:///{tmp_path / 'empty.db'}")
    assert reg.exit_code == 0 and "no results yet" in reg.stdout
