"""The Python and YAML examples of README.md and of every page of docs/, run as written.

The examples follow the text wherever it moves: every ```python block of README.md and of
docs/*.md is run, page by page, unless it says otherwise on its first line:

- `# file: NAME` (a python or yaml block): saved as NAME, as a reader would save it, in a fresh
  folder of that page's own;
- `# not run: REASON` (a python block): shown only; the reason must be given (e.g. a GPU, a
  cluster, a package the project does not install);
- any other python block is executed as a script (`__name__` is "__main__"), in the page's order,
  in that folder, with the folder first on the import path and on the worker processes' path.

Every saved YAML spec (a `# file: *.yaml` block with `benchmarks:`) is expanded by `rooflab list`
in that folder, with the page's saved Python modules as plugins. The tests then check what the
examples claim: the plugin op's results are stored with its FLOP/byte model, and the command-line
route (`ROOFLAB_PLUGINS=my_ops rooflab list`) sees the same op, wherever those blocks now live.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCK = re.compile(r"^```(python|yaml)\n(.*?)^```", re.S | re.M)
FILE_MARK = re.compile(r"#\s*file:\s*(\S+)")
NOT_RUN_MARK = re.compile(r"#\s*not run:\s*(.*)")
README_MEASURE_MAX_LINES = 12  # the front page promises a ten-line example


def pages() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


@dataclass
class PageExamples:
    page: Path
    files: dict[str, str] = field(default_factory=dict)
    scripts: list[str] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)  # the reasons given

    @property
    def name(self) -> str:
        return str(self.page.relative_to(ROOT)) if self.page.is_relative_to(ROOT) else self.page.name

    def specs(self) -> list[str]:
        return [n for n, body in self.files.items() if n.endswith(".yaml") and "benchmarks:" in body]

    def plugin_modules(self) -> list[str]:
        return [n[: -len(".py")] for n, body in self.files.items() if n.endswith(".py") and "register(" in body]


def examples_of(page: Path) -> PageExamples:
    found = PageExamples(page)
    for lang, body in BLOCK.findall(page.read_text()):
        first = body.split("\n", 1)[0].strip()
        if mark := FILE_MARK.fullmatch(first):
            assert mark.group(1) not in found.files, f"{found.name}: two blocks are saved as {mark.group(1)}"
            found.files[mark.group(1)] = body
        elif lang == "python" and (mark := NOT_RUN_MARK.fullmatch(first)):
            assert mark.group(1).strip(), f"{found.name}: a `# not run:` block must say why"
            found.not_run.append(mark.group(1).strip())
        elif lang == "python":
            found.scripts.append(body)
    return found


def all_examples() -> list[PageExamples]:
    return [ex for ex in map(examples_of, pages()) if ex.files or ex.scripts]


def the_page_with(file_name: str) -> PageExamples:
    holding = [ex for ex in all_examples() if file_name in ex.files]
    assert len(holding) == 1, f"`# file: {file_name}` should be on exactly one page; found {[e.name for e in holding]}"
    return holding[0]


def test_the_api_examples_are_somewhere_and_the_readme_has_a_short_measure():
    everything = all_examples()
    scripts = [s for ex in everything for s in ex.scripts]
    files = {n for ex in everything for n in ex.files}
    assert {"my_ops.py", "axpy.yaml"} <= files
    assert any("rooflab.run(" in s and "rooflab.results(" in s and "rooflab.history(" in s for s in scripts)
    readme_measure = [s for s in examples_of(README).scripts if "rooflab.measure(" in s]
    assert readme_measure, "README.md has no runnable rooflab.measure example"
    assert len(readme_measure[0].strip().splitlines()) <= README_MEASURE_MAX_LINES


def test_the_block_marks_are_read_as_documented(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\n# file: a.py\nx = 1\n```\n```python\n# not run: needs a GPU\nboom\n```\n"
                    "```python\nprint(1)\n```\n```yaml\nname: not saved\n```\n")
    found = examples_of(page)
    assert found.files == {"a.py": "# file: a.py\nx = 1\n"}
    assert found.not_run == ["needs a GPU"] and found.scripts == ["print(1)\n"]
    page.write_text("```python\n# not run:\nboom\n```\n")
    with pytest.raises(AssertionError, match="must say why"):
        examples_of(page)


@pytest.fixture
def in_example_folder(tmp_path, monkeypatch):
    """Saves a page's files into a fresh folder and makes it the working directory and import path."""

    def enter(examples: PageExamples) -> Path:
        for name, body in examples.files.items():
            (tmp_path / name).write_text(body)
        monkeypatch.chdir(tmp_path)
        monkeypatch.syspath_prepend(str(tmp_path))
        # worker processes find the saved modules the way a user's shell would give them
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p))
        monkeypatch.setenv("ROOFLAB_PLUGINS", "")  # recorded, so an example's own setting is undone after
        monkeypatch.delenv("ROOFLAB_PLUGINS")
        return tmp_path  # tests/conftest.py takes the examples' ops out of the registry again

    return enter


def run_scripts(examples: PageExamples) -> None:
    for index, code in enumerate(examples.scripts):
        exec(compile(code, f"{examples.name} python block {index + 1}", "exec"), {"__name__": "__main__"})


@pytest.mark.parametrize("examples", all_examples(), ids=lambda ex: ex.name)
def test_page_examples_run_as_written(examples, in_example_folder, capsys):
    folder = in_example_folder(examples)
    run_scripts(examples)
    printed = capsys.readouterr().out
    if any("rooflab.measure(" in s for s in examples.scripts):
        assert "stopped:" in printed
    if any("rooflab.run(" in s for s in examples.scripts):
        assert "complete" in printed
    for spec in examples.specs():
        env = {**os.environ, "ROOFLAB_PLUGINS": ",".join(examples.plugin_modules())}
        out = subprocess.run([sys.executable, "-m", "rooflab", "list", spec, "--json"],
                             capture_output=True, text=True, env=env, cwd=folder, timeout=120)
        assert out.returncode == 0, f"{examples.name}: `rooflab list {spec}`: {out.stderr}"
        listed = json.loads(out.stdout)
        assert listed["count"] > 0
        if spec == "axpy.yaml":  # the command-line route (ROOFLAB_PLUGINS=my_ops) sees the plugin op
            assert examples.plugin_modules() == ["my_ops"]
            assert sum(c["case_key"].startswith("axpy.v1:eager:") for c in listed["cases"]) == 6
    if "my_ops.py" in examples.files:  # the page's scripts ran the plugin op (run once, checked here)
        assert "axpy.yaml" in examples.specs()
        assert_the_plugin_results_are_stored_with_their_model()


def assert_the_plugin_results_are_stored_with_their_model() -> None:
    """The op example's claims: 3 sizes x 2 dtypes, all correct, stored with its FLOPs and bytes."""
    import rooflab

    frame = rooflab.results("sqlite:///axpy.db")
    assert len(frame) == 6 and set(frame["status"]) == {"ok"}
    sizes = {"float32": 4, "bfloat16": 2}
    for _, row in frame.iterrows():
        n = json.loads(row["params"])["n"] if isinstance(row["params"], str) else row["params"]["n"]
        assert row["bytes"] == 3 * n * sizes[row["dtype"]] and row["flops"] == 2 * n
        assert row["gbps"] == pytest.approx(row["bytes"] / (row["median_ms"] * 1e-3) / 1e9)


def test_the_example_check_catches_a_wrong_output(in_example_folder):
    """The example's reference check is real: its own output passes, a perturbed one does not."""
    in_example_folder(the_page_with("my_ops.py"))
    import my_ops  # type: ignore[import-not-found]  # written into the example folder by the fixture
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
