"""The README's Python examples, run as written.

Every ```python block of README.md is taken in order. A block whose first line is `# file: NAME`
is saved as NAME (as a reader would save it); the others are executed as a script (`__name__` is
"__main__") in a fresh folder holding those files, with that folder first on the import path and
the worker processes' path. The YAML blocks marked `# file: NAME` are saved likewise. The test then
checks what the example claims: the plugin op's results are stored with its FLOP/byte model, and
the command-line route (`ROOFLAB_PLUGINS=my_ops rooflab list`) sees the same op.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```(python|yaml)\n(.*?)^```", re.S | re.M)
FILE_MARK = re.compile(r"#\s*file:\s*(\S+)")


def readme_blocks() -> list[tuple[str, str]]:
    return [(lang, body) for lang, body in BLOCK.findall(README.read_text())]


def split_files(blocks: list[tuple[str, str]]) -> tuple[dict[str, str], list[str]]:
    files: dict[str, str] = {}
    scripts: list[str] = []
    for lang, body in blocks:
        first = body.split("\n", 1)[0]
        mark = FILE_MARK.fullmatch(first.strip())
        if mark:
            files[mark.group(1)] = body
        elif lang == "python":
            scripts.append(body)
    return files, scripts


def test_readme_has_the_api_examples():
    files, scripts = split_files(readme_blocks())
    assert {"my_ops.py", "axpy.yaml"} <= set(files)
    assert any("rooflab.measure(" in s for s in scripts)
    assert any("rooflab.run(" in s and "rooflab.results(" in s and "rooflab.history(" in s for s in scripts)


@pytest.fixture
def example_dir(tmp_path, monkeypatch):
    files, scripts = split_files(readme_blocks())
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    # worker processes find my_ops.py the way a user's shell would give it to them
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setenv("ROOFLAB_PLUGINS", "")  # recorded, so the example's own setting is undone after
    monkeypatch.delenv("ROOFLAB_PLUGINS")
    monkeypatch.setenv("ROOFLAB_LOCK_DIR", str(tmp_path / "locks"))
    yield tmp_path, scripts  # tests/conftest.py takes `axpy` and `my_ops` out of the registry again


def test_readme_python_blocks_run_as_written(example_dir, capsys):
    folder, scripts = example_dir
    for index, code in enumerate(scripts):
        exec(compile(code, f"README.md python block {index + 1}", "exec"), {"__name__": "__main__"})
    printed = capsys.readouterr().out
    assert "stopped:" in printed and "complete" in printed

    import rooflab

    frame = rooflab.results("sqlite:///axpy.db")
    assert len(frame) == 6 and set(frame["status"]) == {"ok"}  # 3 sizes x 2 dtypes, all correct
    sizes = {"float32": 4, "bfloat16": 2}
    for _, row in frame.iterrows():
        n = json.loads(row["params"])["n"] if isinstance(row["params"], str) else row["params"]["n"]
        assert row["bytes"] == 3 * n * sizes[row["dtype"]] and row["flops"] == 2 * n
        assert row["gbps"] == pytest.approx(row["bytes"] / (row["median_ms"] * 1e-3) / 1e9)


def test_readme_plugin_from_the_command_line(example_dir):
    folder, _ = example_dir
    env = {**os.environ, "ROOFLAB_PLUGINS": "my_ops"}
    out = subprocess.run([sys.executable, "-m", "rooflab", "list", "axpy.yaml", "--json"],
                         capture_output=True, text=True, env=env, cwd=folder, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("axpy.v1:eager:") == 6


def test_the_example_check_catches_a_wrong_output(example_dir):
    """The example's reference check is real: its own output passes, a perturbed one does not."""
    import my_ops
    import torch

    from rooflab.runners.machine.environment import capture
    from rooflab.suite.case import Case

    _, device = capture("cpu")
    op = my_ops.Axpy()
    case = Case(op.name, op.version, op.family, "eager", "float32", "cold", "launch", {"n": 4096})
    prepared = op.prepare(case, device, seed=3)
    good = prepared.fn().clone()
    assert prepared.check(good) is None
    assert prepared.check(good + 1e-2 * torch.randn_like(good)) is not None
