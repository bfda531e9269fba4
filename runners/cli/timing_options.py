"""The `rooflab run` options of the timing settings, made from their declaration (suite/timing.py).

Each field of `TimingSettings` becomes `--name-with-dashes` with its help, its type (a whole number,
a number, or a name of a choice setting, checked by its rule as the spec's are) and, as its shown
default, the benchmark's own setting else the engine's default. A
command decorated with `with_timing_options` receives them as keyword arguments and hands
`timing_overrides(kwargs)` to the run; a setting added to TimingSettings is an option here at once.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import typer

from rooflab.suite.timing import BOUNDS, TimingSettings

F = TypeVar("F", bound=Callable[..., Any])
_ENGINE = TimingSettings()


def option_name(setting: str) -> str:
    """`--warmup-ms` for `warmup_ms`."""
    return "--" + setting.replace("_", "-")


def _parameter(name: str) -> inspect.Parameter:
    rule = BOUNDS[name]
    kind: type = str if rule.choices else int if rule.whole else float
    default = getattr(_ENGINE, name)
    shown = default if isinstance(default, str) else format(default, "g")
    option = typer.Option(None, option_name(name), help=rule.help, show_default=f"the spec's, else {shown}")
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind | None)


def with_timing_options(command: F) -> F:
    """`command` with one keyword option per timing setting added to its signature (it takes them
    as **timing)."""
    signature = inspect.signature(command)
    kept = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    command.__signature__ = signature.replace(  # type: ignore[attr-defined]  # read by typer through inspect.signature
        parameters=[*kept, *(_parameter(name) for name in TimingSettings.names())])
    return command


def timing_overrides(values: Mapping[str, Any]) -> dict[str, Any]:
    """The timing settings given on the command line (None: not given), by name."""
    return {name: values.get(name) for name in TimingSettings.names()}
