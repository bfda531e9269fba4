"""`rooflab list SPEC`: expanded cases without running; bad specs exit 2 with one message."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rooflab.runners.cli.app import app
from tests.suite.spec_fakes import FAKE_OPS

ROOT = Path(__file__).resolve().parents[2]

GOOD = """
name: listing
benchmarks:
  - name: mm
    op: matmul
    dtypes: [float32, bfloat16]
    params: {m=n=k: [64, 128]}
  - name: stream
    op: copy
    devices: [cuda]
    dtypes: float16
    params: {n: {pow2: [20, 21]}}
"""


@pytest.fixture
def fake_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    import rooflab.suite.ops.registry as registry

    monkeypatch.setattr(registry, "all_ops", lambda: dict(FAKE_OPS))


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_list_json_has_cases_with_flops_and_bytes(tmp_path: Path, fake_registry: None) -> None:
    path = write(tmp_path, GOOD)
    result = CliRunner().invoke(app, ["list", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["spec"] == "listing" and out["count"] == 6 == len(out["cases"])
    first = out["cases"][0]
    assert first["case_key"] == "matmul.v1:eager:float32:cold:launch:batch=1,k=64,m=64,n=64"
    assert (first["op"], first["family"], first["backend"], first["dtype"]) == ("matmul", "gemm", "eager", "float32")
    assert ((first["cache"], first["timing_mode"], first["collective_mode"], first["params"])
            == ("cold", "launch", None, {"batch": 1, "k": 64, "m": 64, "n": 64}))
    assert first["flops"] == 2 * 64**3
    stream = out["cases"][-1]
    assert stream["bytes"] == 2 * 2**21 * 2 and stream["flops"] == 0 and stream["intensity"] == 0.0


def test_list_filters_and_device_kind(tmp_path: Path, fake_registry: None) -> None:
    path = write(tmp_path, GOOD)
    runner = CliRunner()
    out = json.loads(runner.invoke(app, ["list", str(path), "--json", "--device-kind", "cpu"]).stdout)
    assert {c["benchmark"] for c in out["cases"]} == {"mm"}
    out = json.loads(
        runner.invoke(app, ["list", str(path), "--json", "--filter", "dtype=bfloat16", "--filter", "m=128"]).stdout
    )
    assert [c["case_key"] for c in out["cases"]] == ["matmul.v1:eager:bfloat16:cold:launch:batch=1,k=128,m=128,n=128"]
    out = json.loads(runner.invoke(app, ["list", str(path), "--json", "--filter", "op=attention"]).stdout)
    assert out["count"] == 0 and out["cases"] == []


def test_list_table_ends_with_a_count(tmp_path: Path, fake_registry: None) -> None:
    path = write(tmp_path, GOOD)
    result = CliRunner().invoke(app, ["list", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "matmul.v1:eager:bfloat16:cold:launch:batch=1,k=128,m=128,n=128" in result.stdout
    assert "4.19 M" in result.stdout  # 2 * 128**3 FLOPs
    assert result.stdout.strip().splitlines()[-1].startswith("6 cases from spec 'listing'")


BAD = {
    "yaml": ("name: bad\nbenchmarks:\n  - name: [a\n", "line 4"),
    "field": ("name: bad\nbenchmarks:\n  - name: a\n    op: matmul\n    dtypes: [float33]\n    params: {m=n=k: 8}\n",
              "benchmarks[0].dtypes[0]"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_spec_exits_2_with_one_message(tmp_path: Path, fake_registry: None, kind: str, monkeypatch) -> None:
    text, fragment = BAD[kind]
    path = write(tmp_path, text, "bad.yaml")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["list", str(path)], env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert fragment in result.stderr and str(path) in result.stderr.replace("\n", "")
    assert result.stdout == ""
    assert not (tmp_path / "results.db").exists()


def test_bad_filter_exits_2(tmp_path: Path, fake_registry: None) -> None:
    path = write(tmp_path, GOOD)
    result = CliRunner().invoke(app, ["list", str(path), "--filter", "colour=red"])
    assert result.exit_code == 2 and "unknown key 'colour'" in result.stderr


def test_console_script_exits_2_without_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, "name: bad\nbenchmarks:\n  - name: a\n    op: copy\n    params: {n: [1, 2\n", "bad.yaml")
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="300")
    env.pop("ROOFLAB_DB", None)
    script = Path(sys.executable).parent / "rooflab"  # the installed console script, where there is one
    command = [str(script)] if script.exists() else [sys.executable, "-m", "rooflab"]
    proc = subprocess.run(
        [*command, "list", str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "invalid YAML" in proc.stderr and "line 6" in proc.stderr
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == [path]


def test_bad_device_kind_exits_2(tmp_path: Path, fake_registry: None) -> None:
    path = write(tmp_path, GOOD)
    result = CliRunner().invoke(app, ["list", str(path), "--device-kind", "tpu"])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_list_shipped_spec_with_the_real_ops() -> None:
    from rooflab.suite.ops.registry import all_ops
    from rooflab.suite.spec import expand, load_spec

    result = CliRunner().invoke(app, ["list", "quick", "--json", "--device-kind", "cpu", "--filter", "family=probe"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    ops = all_ops()
    expected = [c for c in expand(load_spec("quick", ops=ops), "cpu", ops=ops) if c.family == "probe"]
    assert [c["case_key"] for c in out["cases"]] == [c.case_key for c in expected]
    for row, case in zip(out["cases"], expected, strict=True):
        assert row["flops"] == ops[case.op].flops(case.params, case.dtype)
        assert row["bytes"] == ops[case.op].bytes(case.params, case.dtype)
    triad = next(r for r in out["cases"] if r["op"] == "stream_triad")
    assert triad["bytes"] == 3 * triad["params"]["n"] * 4 and triad["flops"] == 2 * triad["params"]["n"]
    # of them, two arrays read and one written; dot reads two and writes none
    assert (triad["bytes_read"], triad["bytes_written"]) == (2 * triad["params"]["n"] * 4, triad["params"]["n"] * 4)
    dot = next(r for r in out["cases"] if r["op"] == "stream_dot")
    assert (dot["bytes_read"], dot["bytes_written"]) == (dot["bytes"], 0)


def test_list_prints_the_bytes_read_and_written_and_a_dash_for_link_bytes() -> None:
    """The table's read and written columns: a copy's 2^20 float32 elements are 4.19 MB each way; a
    collective's bytes are link bytes, with no split (a dash)."""
    result = CliRunner().invoke(app, ["list", "quick", "--device-kind", "cpu", "-f", "op=copy", "-f", "op=all_reduce",
                                      "-f", "n=1048576"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[-3:] == ["bytes", "read", "written"]
    copy = next(line for line in lines if line.startswith("copy.v1:eager:float32"))
    assert copy.split()[-6:] == ["8.39", "MB", "4.19", "MB", "4.19", "MB"]
    reduce = next(line for line in lines if line.startswith("all_reduce.v1"))
    assert reduce.split()[-2:] == ["-", "-"]
