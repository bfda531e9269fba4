"""The structure of a spec document (Pydantic models, structure only) and the loaded spec.

suite/spec.py reads a YAML file into these and words its errors; suite/spec_expand.py turns a
loaded spec into cases. Every timing field comes from the one declaration of the timing settings
(suite/timing.py).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, create_model, field_validator

from rooflab.suite.timing import CHOICE_SETTINGS, TimingSettingError, TimingSettings, check_timing_value
from rooflab.suite.yaml_lines import LoadedYaml, NodePath, format_path

DEFAULT_MAX_CASES = 5000


def _as_list(value: Any) -> Any:
    """A single string stands for a one-item list."""
    return [value] if isinstance(value, str) else value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _TimingOverridesBase(_Model):
    """Overrides of suite.timing.TimingSettings; a field left out keeps the value below it."""

    @field_validator("*", mode="before")
    @classmethod
    def _in_bounds(cls, value: Any, info: ValidationInfo) -> Any:
        # the bounds are suite.timing's (one statement for the spec, the CLI and the API); what is not
        # a number is left to the type check ("expected a number"), except where a name is expected
        named = str(info.field_name) in CHOICE_SETTINGS
        if not named and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return value
        if named and not isinstance(value, str):
            return value
        try:
            return check_timing_value(str(info.field_name), value)
        except TimingSettingError as exc:
            raise ValueError(exc.reason) from None

    def values(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


if TYPE_CHECKING:
    TimingOverrides = _TimingOverridesBase
else:
    # one field per timing setting, made from its declaration in suite.timing. Any number is taken
    # here (an int is one too): whether one must be whole is the bounds' rule, so that a spec, a CLI
    # flag and the API refuse 2.5 samples with the same message
    TimingOverrides = create_model(
        "TimingOverrides", __base__=_TimingOverridesBase,
        **{name: (str | None if name in CHOICE_SETTINGS else float | None, None) for name in TimingSettings.names()},
    )


class Constraints(_Model):
    # a case whose op.memory_bytes exceeds this fraction of device memory is recorded as skipped
    max_memory_fraction: float | None = Field(None, gt=0, le=1)


class _Common(_Model):
    backends: list[str] | None = None
    dtypes: list[str] | None = None
    cache: list[str] | None = None
    timing_modes: list[str] | None = None
    devices: list[str] | None = None
    tags: list[str] | None = None
    timing: TimingOverrides | None = None
    constraints: Constraints | None = None

    _listify = field_validator("backends", "dtypes", "cache", "timing_modes", "devices", "tags", mode="before")(
        _as_list
    )


class Defaults(_Common):
    """Settings applied to every benchmark of the spec that does not set them itself."""


class Benchmark(_Common):
    """One entry of `benchmarks`: an op and the sweep to run it over."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    op: list[str]  # one op (a string), or several sharing the sweep (e.g. the five streams)
    description: str = ""
    params: dict[str, Any] = Field(default_factory=dict)
    zip: list[dict[str, Any]] = Field(default_factory=list)

    _op_list = field_validator("op", mode="before")(_as_list)


class SpecDocument(_Model):
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str = ""
    max_cases: int = Field(DEFAULT_MAX_CASES, ge=1)
    defaults: Defaults = Field(default_factory=Defaults)
    benchmarks: list[Benchmark] = Field(min_length=1)


@dataclass(frozen=True, eq=False)
class Spec:
    """A validated spec file: its document, where it came from and its exact text."""

    name: str
    description: str
    path: Path
    text: str
    sha256: str
    max_cases: int
    defaults: Defaults
    benchmarks: tuple[Benchmark, ...]
    lines: Mapping[NodePath, int] = field(default_factory=dict, repr=False)

    def where(self, path: NodePath) -> str:
        """`file, line N, field.path` for an error message."""
        return where(self.path, LoadedYaml(None, dict(self.lines)).line_of(path), path)


def where(path: Path | str, line: int | None, node_path: NodePath) -> str:
    parts = [str(path)]
    if line is not None:
        parts.append(f"line {line}")
    if node_path:
        parts.append(format_path(node_path))
    return ", ".join(parts)
