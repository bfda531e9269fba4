"""How every command ends (runners/cli/epilogue.py): a bad input is exit code 2 and one `error:` line,
no traceback and nothing written, for each command; the epilogue's own rules on a planted command.

Each command below is refused for an input it checks itself (the option parser's own refusals,
a missing option, are Typer's); the refusals of reading commands given no database are in
tests/runners/test_cli_errors.py.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from rooflab.errors import UserError
from rooflab.runners.cli.app import app, command_names
from rooflab.runners.cli.epilogue import conclude, guarded, respond
from rooflab.runners.machine.devlock import DeviceBusyError
from rooflab.vocab import ExitCode

runner = CliRunner()
SPEC = "name: ok\nbenchmarks:\n  - name: c\n    op: copy\n    params: {n: 1024}\n"

# command -> (its arguments with {tmp} for the test's folder and {spec} for a valid spec, a fragment
# of the one error line)
BAD_INPUT = {
    "run": (["run", "{tmp}/none.yaml", "--db", "{tmp}/r.db", "--device", "cpu"], "none.yaml"),
    "list": (["list", "{spec}", "--filter", "op"], "KEY=VALUE"),
    "export": (["export", "--format", "xml", "--db", "{tmp}/r.db"], "xml"),
    "import": (["import", "{tmp}/none.csv", "--db", "{tmp}/r.db"], "none.csv"),
    "db upgrade": (["db", "upgrade", "--db", "mysql://u@h/d"], "mysql"),
    "db current": (["db", "current", "--db", "mysql://u@h/d"], "mysql"),
    "db merge": (["db", "merge", "{tmp}/none.db", "--db", "{tmp}/r.db"], "none.db"),
    "db prune": (["db", "prune", "--samples-older-than", "5m", "--db", "{tmp}/r.db"], "ambiguous"),
    "roofline": (["roofline", "--device", "cpu", "--db", "mysql://u@h/d"], "mysql"),
    "predict": (["predict", "copy", "--dtype", "float32", "--device", "H100 SXM", "--cache", "warm",
                 "--db", "{tmp}/r.db"], "--cache"),
    "compare": (["compare", "--baseline", "a", "--candidate", "b", "--db", "mysql://u@h/d"], "mysql"),
    "regressions": (["regressions", "--fail-on", "sometimes", "--db", "{tmp}/r.db"], "sometimes"),
    "history": (["history", "--db", "{tmp}/r.db"], "CASE_KEY"),
    "fleet": (["fleet", "--fail-on", "sometimes", "--db", "{tmp}/r.db"], "sometimes"),
    "report": (["report", "--out", "{tmp}/site", "--run", "a", "--since", "2026-01-01", "--db", "{tmp}/r.db"],
               "--run or --since"),
    "nightly": (["nightly", "{spec}", "--fail-on", "sometimes", "--out", "{tmp}/site", "--db", "{tmp}/r.db"],
                "sometimes"),
    "slurm": (["slurm", "{spec}", "--nodes", "0", "--gpus-per-node", "0", "--db", "sqlite:///{tmp}/r.db",
               "--out", "{tmp}/night"], "--nodes"),
    "crosscheck": (["crosscheck", "{spec}", "--seed", "-1", "--db", "{tmp}/r.db"], "--seed"),
    "counters": (["counters", "{spec}", "--seed", "-1", "--db", "{tmp}/r.db"], "--seed"),
    "breakdown": (["breakdown", "--device", "cpu", "--db", "mysql://u@h/d"], "mysql"),
    "bisect": (["bisect", "{spec}", "--run-id", "r", "--min-gap", "1.5", "--db", "{tmp}/r.db"], "--min-gap"),
    "collectives": (["collectives", "{spec}", "--run-id", "r", "--case-timeout-s", "0", "--db", "{tmp}/r.db"],
                    "--case-timeout-s"),
}


def test_the_table_names_every_command() -> None:
    """A command added to the app is added here too (`devices` has no input to refuse)."""
    assert set(command_names()) - {"devices"} == set(BAD_INPUT)


@pytest.mark.parametrize("command", sorted(BAD_INPUT))
def test_a_bad_input_is_exit_2_and_one_line(command: str, tmp_path: Path) -> None:
    spec = tmp_path / "ok.yaml"
    spec.write_text(SPEC)
    argv, fragment = BAD_INPUT[command]
    before = sorted(tmp_path.rglob("*"))
    result = runner.invoke(app, [a.replace("{tmp}", str(tmp_path)).replace("{spec}", str(spec)) for a in argv])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and fragment in errors[0], result.output
    assert sorted(tmp_path.rglob("*")) == before  # nothing written


# -- the epilogue on a planted command ---------------------------------------------------------------


def _planted(work_fails: BaseException | None, value: int, *, code: int = 0, note: bool = False,
             interrupted: str | None = None) -> typer.Typer:
    """A one-command app whose work returns {"value": value} or raises `work_fails`, ending with `respond`."""
    planted = typer.Typer()

    def work() -> dict[str, int]:
        if work_fails is not None:
            raise work_fails
        return {"value": value}

    @planted.command()
    def cmd(as_json: bool = typer.Option(False, "--json")) -> None:
        respond(work, as_json=as_json, show=lambda r: print(f"value is {r['value']}"),
                exit_code=lambda r: code, failing_note=(lambda r: f"failing at {r['value']}") if note else None,
                interrupted=interrupted)

    return planted


def test_the_result_is_json_or_text_and_the_exit_code_is_the_works() -> None:
    value = random.randint(1, 10**6)
    as_json = runner.invoke(_planted(None, value), ["--json"])
    assert as_json.exit_code == 0 and as_json.stdout == f'{{\n  "value": {value}\n}}\n'
    assert runner.invoke(_planted(None, value), []).stdout == f"value is {value}\n"
    failing = runner.invoke(_planted(None, value, code=ExitCode.FAILED, note=True), [])
    assert failing.exit_code == 1 and failing.stdout == f"value is {value}\n"
    assert failing.stderr == f"failing at {value}\n"
    assert runner.invoke(_planted(None, value, code=ExitCode.FAILED), ["--json"]).stderr == ""


@pytest.mark.parametrize("raised, code, line", [
    (UserError("--x 3: must be even"), ExitCode.BAD_INPUT, "error: --x 3: must be even"),
    (DeviceBusyError("cpu is held by run r-1"), ExitCode.DEVICE_BUSY, "error: cpu is held by run r-1"),
    (KeyboardInterrupt(), ExitCode.INTERRUPTED, "interrupted; what finished is stored"),
])
def test_the_works_refusals_are_one_line_and_their_exit_code(raised: BaseException, code: int, line: str) -> None:
    result = runner.invoke(_planted(raised, 0, interrupted="interrupted; what finished is stored"), ["--json"])
    assert result.exit_code == code and result.stdout == ""
    assert result.stderr == line + "\n" and result.exception is None or isinstance(result.exception, SystemExit)


def test_ctrl_c_goes_on_where_the_command_says_nothing_of_it() -> None:
    """Only a command that says what Ctrl-C leaves behind ends with 130 and that line."""
    with pytest.raises(KeyboardInterrupt):
        guarded(_raise_interrupt)
    assert guarded(lambda: 7) == 7


def _raise_interrupt() -> int:
    raise KeyboardInterrupt


def test_conclude_ends_a_result_computed_in_steps(capsys: pytest.CaptureFixture[str]) -> None:
    value = random.random()
    conclude(value, show=lambda v: print(f"{v:.6f}"))
    assert capsys.readouterr().out == f"{value:.6f}\n"
    with pytest.raises(typer.Exit) as ended:
        conclude(value, as_json=True, to_json=lambda v: [v], show=print, exit_code=lambda v: ExitCode.FAILED)
    assert ended.value.exit_code == 1 and capsys.readouterr().out == f"[\n  {value}\n]\n"
