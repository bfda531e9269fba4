"""What one `rooflab run` is asked to do, checked before anything is opened or started.

`RunOptions` holds the command line's flags; the checks here (timing overrides, the devices, the
run id) refuse bad input with one UserInputError each, so that `run_suite` (session.py) writes
nothing for a run it cannot do.
"""
from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from rooflab.runners.errors import UserInputError
from rooflab.runners.machine import environment
from rooflab.runners.machine.cpuinfo import core_cpus
from rooflab.suite.case import Case
from rooflab.suite.ops.base import ParamValueError
from rooflab.suite.ops.pairs import with_pairs_at_once
from rooflab.suite.timing import (
    TimingSettingError,
    TimingSettings,
    TimingValue,
    check_timing_order,
    check_timing_value,
)
from rooflab.vocab import DeviceKind, device_index_of, device_kind_of


@dataclass(frozen=True)
class RunOptions:
    """What one `rooflab run` is asked to do besides its spec and database (the CLI's flags);
    `run_suite` validates it."""

    filters: Sequence[str] = ()
    device: str | None = "auto"
    devices: str | None = None  # all, or a list such as 0,1
    shard: str | None = None  # I/N
    run_id: str | None = None
    resume: str | None = None  # run id to measure the rest of
    timing_overrides: Mapping[str, object] | None = None  # TimingSettings names -> value (None: not given), unchecked
    quiet: bool = False
    seed: int = 0
    case_timeout_s: float | None = None
    json_output: bool = False
    command_line: str | None = None  # stored with the run; None: this process's argv
    cpu_threads: int | None = None
    lock: bool = True
    lock_wait_s: float = 0.0
    pairs_at_once: str | None = None  # the link matrix's pairs measured at once (all, or a number); None: the spec's


# ---------------------------------------------------------------- validation of the inputs


def validate_timing_overrides(values: Mapping[str, object] | None) -> dict[str, TimingValue]:
    """The non-None overrides, checked one by one; UserInputError names the flag and the rule."""
    if not values:
        return {}
    known = set(TimingSettings.names())
    out: dict[str, TimingValue] = {}
    for name, value in values.items():
        if value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if name not in known:
            raise UserInputError(f"{flag}: unknown timing setting; allowed: {', '.join(sorted(known))}")
        try:
            out[name] = check_timing_value(name, value)
        except TimingSettingError as exc:
            raise UserInputError(f"{flag}: {exc.reason}") from None
    try:
        check_timing_order(out)
    except TimingSettingError as exc:
        raise UserInputError(f"--{exc.name.replace('_', '-')}: {exc.reason}") from None
    return out


def pairs_at_once_cases(cases: Sequence[Case], pairs_at_once: str | None) -> list[Case]:
    """`cases` with the link matrix's pairs measured `--pairs-at-once` at a time (None: as the spec
    says); UserInputError for a value that is neither all nor a whole number >= 1."""
    if pairs_at_once is None:
        return list(cases)
    try:
        return with_pairs_at_once(cases, pairs_at_once)
    except ParamValueError as exc:
        raise UserInputError(str(exc)) from None


def check_merged_settings(cases: Iterable[Case], overrides: Mapping[str, TimingValue]) -> None:
    """The CLI overrides must not contradict a benchmark's own settings (e.g. min above max)."""
    for case in cases:
        try:
            case.timing.override(overrides)
        except TimingSettingError as exc:
            raise UserInputError(
                f"benchmark {case.benchmark!r}, after the command-line overrides: {exc.reason}"
            ) from None


def _normalize_device(text: str, available: Sequence[str]) -> str:
    value = text.strip().lower()
    if value.isdigit():
        value = f"cuda:{value}"
    if value == "cuda":
        value = "cuda:0"
    if device_kind_of_text(value) is DeviceKind.CPU and device_index_of(value) is not None:
        return _core(value)
    if value not in available:
        raise UserInputError(
            f"unknown device {text!r}; devices here: {', '.join(available)} "
            "(allowed: auto, cpu, cpu:N (one core), cuda:N, or for --devices: all or a list such as 0,1)"
        )
    return value


def device_kind_of_text(text: str) -> DeviceKind | None:
    """The kind a device's text names, None for text that names none (`auto`, a typo)."""
    try:
        return device_kind_of(text)
    except ValueError:
        return None


def _core(value: str) -> str:
    """`cpu:N` checked against the CPUs this process may run on."""
    core = device_index_of(value)
    allowed = sorted(os.sched_getaffinity(0))
    if core not in allowed:
        raise UserInputError(f"unknown device {value!r}: this process may run on CPUs {_ranges(allowed)} "
                             f"(one per physical core: {_ranges(core_cpus())})")
    return value


def _ranges(cpus: Sequence[int]) -> str:
    return ", ".join(str(c) for c in cpus)


def _names_the_cpu(device: str | None) -> bool:
    """`cpu` (any case, spaces around), not `cpu:N`, `auto` or a GPU."""
    text = (device or "").strip().lower()
    return device_kind_of_text(text) is DeviceKind.CPU and ":" not in text


def resolve_devices(device: str | None, devices: str | None) -> list[str]:
    """The torch devices to run on, one worker each; UserInputError for a device not present.

    On a machine with no CUDA GPU, `--devices all` is one device per physical core (`cpu:N`, N the
    core's first logical CPU) and `--devices 0,1` names cores; `cpu:N` names a core anywhere. (The
    environment's module imports torch only inside the functions that need it.)"""
    if devices is None and _names_the_cpu(device):
        return ["cpu"]  # always present: no need to import torch here (seconds) to list the GPUs
    available = list(dict.fromkeys(["cpu", *environment.list_devices()]))
    if devices is not None and device not in (None, "auto"):
        raise UserInputError("give either --device or --devices, not both")
    if devices is not None:
        return _resolve_list(devices, available)
    if device in (None, "", "auto"):
        return [environment.best_device()]
    return [_normalize_device(device, available)]


def _resolve_list(devices: str, available: Sequence[str]) -> list[str]:
    """`--devices`: all, or a comma-separated list (cores where torch sees no GPU)."""
    gpus = [d for d in available if device_kind_of(d) is DeviceKind.CUDA]
    text = devices.strip().lower()
    if text == "all":
        return gpus or [f"cpu:{core}" for core in core_cpus()]
    parts = [p for p in (x.strip() for x in text.split(",")) if p]
    if not parts:
        raise UserInputError(f"--devices {devices!r}: expected all or a comma-separated list such as 0,1")
    if not gpus:  # a CPU machine: numbers name cores
        parts = [f"cpu:{p}" if p.isdigit() else p for p in parts]
    chosen = list(dict.fromkeys(_normalize_device(p, available) for p in parts))
    kinds = {device_kind_of(d) for d in chosen}
    if len(kinds) > 1:
        raise UserInputError(f"--devices {devices!r}: mixes CPU and CUDA devices; run them separately")
    if "cpu" in chosen and len(chosen) > 1:
        raise UserInputError(f"--devices {devices!r}: the whole CPU and its cores at once; name cores only (cpu:N)")
    return chosen


def cpu_cores(torch_devices: Sequence[str]) -> bool:
    """Whether `torch_devices` are cores of a CPU fleet (`cpu:N`)."""
    return any(device_kind_of(d) is DeviceKind.CPU and device_index_of(d) is not None for d in torch_devices)


def derive_run_id(suite: str, *, sharded: bool, now: datetime | None = None) -> str:
    """`quick-20261121` for a sharded run (all shards of a night share it), else `quick-20261121T173000Z-1a2b`."""
    now = now or datetime.now(UTC)
    if sharded:
        return f"{suite}-{now:%Y%m%d}"
    return f"{suite}-{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(2)}"
