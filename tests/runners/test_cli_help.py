"""What a user reads first: --version, --help, and refusals of devices that are ambiguous or absent."""
from __future__ import annotations

import random
import re
import subprocess
import sys
from importlib.metadata import version

import pytest
import typer.main
from typer.testing import CliRunner

from rooflab.runners.cli.app import COMMANDS, LazyCommands, _clipped, app
from rooflab.suite.timing import TimingSettings

runner = CliRunner()


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"rooflab {version('rooflab')}"


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["nightly", "--help"], ["db", "prune", "--help"],
                                  ["list", "--help"], ["export", "--help"], ["report", "--help"]])
def test_help_shows_flags_without_type_noise(argv: list[str]) -> None:
    result = runner.invoke(app, argv, env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output and "Traceback" not in result.output
    assert re.search(r"^\s+--help\s+Show this message", result.output, re.MULTILINE)


def test_run_help_shows_the_defaults_and_what_a_repeated_filter_means() -> None:
    text = " ".join(runner.invoke(app, ["run", "--help"], env={"COLUMNS": "100"}).output.split())
    engine = TimingSettings()
    for flag, name in (("--warmup-ms", "warmup_ms"), ("--warmup-calls", "warmup_calls"),
                       ("--min-samples", "min_samples"), ("--max-samples", "max_samples"),
                       ("--min-time-ms", "min_time_ms"), ("--max-time-ms", "max_time_ms"),
                       ("--target-precision", "target_precision")):
        shown = re.search(re.escape(flag) + r" <\w+> .*?\[default: \(the spec's, else ([0-9.]+)\)\]", text)
        assert shown is not None, flag
        assert float(shown.group(1)) == getattr(engine, name), flag
    assert "a repeated key means OR" in text
    assert "--no-lock" in text and "--lock-wait-s" in text
    assert "a repeated key means OR" in " ".join(runner.invoke(app, ["list", "--help"]).output.split())


@pytest.mark.parametrize("typed, candidates", [
    ("A100", ["A100 SXM 80GB", "A100 SXM 40GB", "A100 PCIe 80GB", "A100 PCIe 40GB"]),
    ("h100", ["H100 SXM", "H100 PCIe"]),
    ("A100 80GB", ["A100 SXM 80GB", "A100 PCIe 80GB"]),
])
def test_predict_refuses_an_ambiguous_device_and_lists_the_candidates(typed: str, candidates: list[str],
                                                                      tmp_path) -> None:
    result = runner.invoke(app, ["predict", "copy", "--dtype", "float32", "--shape", "n=4096", "--device", typed,
                                 "--db", str(tmp_path / "none.db")])
    assert result.exit_code == 2, result.output
    assert "is ambiguous" in result.output and all(c in result.output for c in candidates), result.output
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize("typed, chosen",
                         [("H100 PCIe", "H100 PCIe"), ("L4", "L4"), ("a100 pcie 40gb", "A100 PCIe 40GB")])
def test_predict_takes_a_device_that_names_one_entry(typed: str, chosen: str, tmp_path) -> None:
    import json

    result = runner.invoke(app, ["predict", "copy", "--dtype", "float32", "--shape", "n=4096", "--device", typed,
                                 "--db", str(tmp_path / "none.db"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["device"] == chosen


def test_devices_naming_a_core_this_machine_lacks_says_so(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a GPU, --devices names cores (docs/running.md); a core the process may not run on is
    refused with the CPUs it may run on, before the database is touched."""
    from rooflab.runners.machine import environment

    monkeypatch.setattr(environment, "list_devices", lambda: ["cpu"])
    spec = tmp_path / "ok.yaml"
    spec.write_text("name: ok\nbenchmarks:\n  - name: c\n    op: copy\n    params: {n: 1024}\n")
    db = tmp_path / "r.db"
    result = runner.invoke(app, ["run", str(spec), "--devices", "0,4096", "--db", str(db), "-q"])
    assert result.exit_code == 2, result.output
    assert "unknown device 'cpu:4096': this process may run on CPUs" in result.output
    assert not db.exists()


def test_each_commands_summary_is_how_its_own_help_begins() -> None:
    """`rooflab --help` lists the commands from runners/cli/app.py's table without loading them; each
    summary there is the first sentence of the command's own help, so the two cannot drift apart."""
    group = typer.main.get_command(app)
    assert isinstance(group, LazyCommands)
    for name, entry in COMMANDS.items():
        command = group.command(name)
        assert command is not None, name
        helped = " ".join((command.help or "").split())
        assert helped.startswith(entry.summary) and entry.summary.endswith((".", ")")), (name, entry.summary)


def test_help_and_version_load_no_command_module() -> None:
    """A fresh `rooflab --help` and `--version` import none of the command modules (each loads
    only when its command runs)."""
    probe = ("import sys; from typer.testing import CliRunner; from rooflab.runners.cli.app import app; "
             "r = CliRunner().invoke(app, sys.argv[1:]); assert r.exit_code == 0, r.output; "
             "print(sorted(m for m in sys.modules if m.startswith('rooflab.runners.cli.') and m.endswith('_cmd')))")
    for argv in (["--help"], ["--version"]):
        out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "[]", (argv, out.stdout, out.stderr)
    loaded = subprocess.run([sys.executable, "-c", probe, "list", "--help"], capture_output=True, text=True,
                            check=True)
    assert loaded.stdout.strip() == "['rooflab.runners.cli.list_cmd']", loaded.stdout


def test_the_listing_cuts_a_long_summary_at_a_word() -> None:
    words = [f"w{random.randint(10, 99)}" for _ in range(30)]
    text = " ".join(words) + "."
    width = random.randint(20, 60)
    cut = _clipped(text, width)
    assert len(cut) <= width and cut.endswith("...") and text.startswith(cut[:-3])
    assert cut[:-3].split(" ")[-1] in words  # whole words only
    assert _clipped("Short.", width) == "Short."
