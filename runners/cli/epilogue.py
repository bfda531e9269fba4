"""How every command ends: its work's refusals as one line and an exit code, its result as JSON or
as text, and its own exit code (the codes: rooflab.vocab.ExitCode).

A command checks its options (`fail` refuses one), then hands its work to `respond`, or, when it
computes its result in steps (each under `guarded`), the result to `conclude`:

    respond(lambda: run_suite(...), as_json=json_output, to_json=RunSummary.to_dict,
            show=lambda s: render_summary(s.to_dict(), console), exit_code=lambda s: s.exit_code,
            interrupted="interrupted before the run started; nothing was measured")

The work's invalid input (any rooflab.errors.UserError) becomes `error: MESSAGE` on stderr and exit
code 2, a device that another run holds exit code 75, Ctrl-C (when the command says what it
leaves) that line and exit code 130; never a traceback.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from rooflab.errors import UserError
from rooflab.runners.machine.devlock import DeviceBusyError
from rooflab.vocab import ExitCode

console = Console()
err_console = Console(stderr=True)

T = TypeVar("T")


def print_error(message: str) -> None:
    """The one way an error reaches the user: `error: MESSAGE` on stderr (MESSAGE is Rich markup:
    escape what came from outside, `rich.markup.escape`)."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, markup=True, soft_wrap=True)


def fail(message: str, code: int = ExitCode.BAD_INPUT) -> NoReturn:
    """Print one clear message (print_error) and exit with `code` (2: bad input)."""
    print_error(message)
    raise typer.Exit(code)


def fail_with(exc: BaseException, code: int = ExitCode.BAD_INPUT) -> NoReturn:
    """fail() with an exception's own message."""
    fail(escape(str(exc)), code)


def json_text(obj: object) -> str:
    """The JSON that `--json` prints: indented, keys sorted, what JSON cannot hold as text; one line end."""
    return json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n"


def print_json(obj: object) -> None:
    """`--json`: json_text(obj) on stdout."""
    sys.stdout.write(json_text(obj))


def guarded(action: Callable[[], T], *, interrupted: str | None = None) -> T:
    """Run `action`: invalid input (a UserError: a spec, an option, a database URL or file) is one
    line and exit code 2, a device held by another run one line and exit code 75; Ctrl-C, where
    `interrupted` says what it leaves behind, that line and exit code 130."""
    try:
        return action()
    except UserError as exc:
        fail_with(exc)
    except DeviceBusyError as exc:
        fail_with(exc, ExitCode.DEVICE_BUSY)
    except KeyboardInterrupt:
        if interrupted is None:
            raise
        err_console.print(interrupted, highlight=False)
        raise typer.Exit(ExitCode.INTERRUPTED) from None


def _no_failure(_: object) -> int:
    return ExitCode.OK


def _as_it_is(result: object) -> object:
    return result


def conclude(
    result: T,
    *,
    show: Callable[[T], None],
    as_json: bool = False,
    to_json: Callable[[T], object] = _as_it_is,
    exit_code: Callable[[T], int] = _no_failure,
    failing_note: Callable[[T], str] | None = None,
) -> None:
    """The end of a command with its `result`: printed as JSON (`as_json`: `to_json` of it) or
    shown as text or tables (`show`); then, when `exit_code(result)` is not 0, `failing_note`'s line
    on stderr (when given) and that exit code."""
    if as_json:
        print_json(to_json(result))
    else:
        show(result)
    code = exit_code(result)
    if code != ExitCode.OK:
        if failing_note is not None:
            err_console.print(failing_note(result), highlight=False, soft_wrap=True)
        raise typer.Exit(code)


def respond(
    work: Callable[[], T],
    *,
    show: Callable[[T], None],
    as_json: bool = False,
    to_json: Callable[[T], object] = _as_it_is,
    exit_code: Callable[[T], int] = _no_failure,
    failing_note: Callable[[T], str] | None = None,
    interrupted: str | None = None,
) -> None:
    """A command's work and its end: `conclude(guarded(work, interrupted=...), ...)`."""
    conclude(guarded(work, interrupted=interrupted), show=show, as_json=as_json, to_json=to_json,
             exit_code=exit_code, failing_note=failing_note)
