"""nvbench's `--json FILE` (and `--jsonbin FILE`'s sample sidecars): text in, `NvbenchState` records out.

Two layouts exist. Since nvbench's JSON file version 1.0.0 (January 2022): `meta` (argv; the JSON
file's and nvbench's versions), `devices` (id, name, sm_version, number_of_sms, global_memory_size,
l2_cache_size, ...), `benchmarks`, each with `name`, `axes` and `states`: a list of objects with
`name`, `device`, `axis_values` (a list of {name, type, value}), `summaries` (a list of {tag, name,
hint, hide, data: [{name, type, value}]}, where every value is a string: durations in seconds),
`is_skipped` and `skip_reason`. Before it (2021): no `meta`, `states` an object keyed by the state's
name, `axis_values` and `summaries` objects keyed by name (`Average GPU Time (Cold)`, ...), each value a
{type, value} object; its summary names are mapped here to the tags of 1.0.0 (OLD_NAMES). The first
2021 layout (spring 2021) had 1.0.0's lists already, but a state's `description` for its name and
summaries as {name, values: [{name, type, value}]} with values as JSON numbers.

Under `--jsonbin`, a state's summaries `nv/json/bin:<tag>` name a sidecar file (little-endian float32
seconds, one per sample) relative to the JSON file; `read_sidecar` reads one.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rooflab.runners.peer_import.errors import PeerFormatError, json_document
from rooflab.runners.peer_import.sniff import Sniff

OLD_NAMES = {  # summaries of the 2021 layout -> the tags of file version 1.0.0
    "Number of Samples (Cold)": "nv/cold/sample_size",
    "Average CPU Time (Cold)": "nv/cold/time/cpu/mean",
    "Average GPU Time (Cold)": "nv/cold/time/gpu/mean",
    "GPU Relative Standard Deviation (Cold)": "nv/cold/time/gpu/stdev/relative",
    "Average Global Memory Throughput": "nv/cold/bw/global/bytes_per_second",
    "Element Throughput": "nv/cold/bw/item_rate",
    "Average GPU Time (Batch)": "nv/batch/time/gpu/mean",
    "Number of Samples (Batch)": "nv/batch/sample_size",
}
SAMPLES_TAG_PREFIX = "nv/json/bin:"


@dataclass(frozen=True)
class NvbenchDevice:
    id: int
    name: str
    sm_version: int | None = None
    number_of_sms: int | None = None
    global_memory_bytes: int | None = None
    l2_cache_bytes: int | None = None


@dataclass(frozen=True)
class AxisValue:
    name: str
    type: str  # int64, float64, string (type axes are written as strings)
    value: str


@dataclass(frozen=True)
class Summary:
    """One summary: its value as written (a string) and, for a sidecar, its file name."""

    value: str | None
    type: str | None = None
    filename: str | None = None


@dataclass(frozen=True)
class NvbenchState:
    """One state: one benchmark at one point of its axes on one device."""

    benchmark: str
    name: str
    device: int
    axis_values: tuple[AxisValue, ...]
    skipped: bool
    skip_reason: str | None
    summaries: dict[str, Summary] = field(default_factory=dict)

    def number(self, tag: str) -> float | None:
        """A summary's value as a number (None when absent or not a finite number)."""
        found = self.summaries.get(tag)
        if found is None or found.value is None:
            return None
        try:
            value = float(found.value)
        except ValueError:
            return None
        return value if math.isfinite(value) else None


@dataclass(frozen=True)
class NvbenchFile:
    json_version: str | None
    nvbench_version: str | None
    argv: tuple[str, ...]
    devices: dict[int, NvbenchDevice]
    states: tuple[NvbenchState, ...]


def looks_like_nvbench(document: Any) -> bool:
    return (isinstance(document, dict) and isinstance(document.get("benchmarks"), list)
            and isinstance(document.get("devices"), list))


def recognises_nvbench(sniff: Sniff) -> bool:
    """nvbench's `--json` file: a JSON object with `devices` and `benchmarks` (cut short: those keys in its head)."""
    head = sniff.cut_json_head
    return looks_like_nvbench(sniff.document) or ('"benchmarks"' in head and '"devices"' in head)


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _devices(document: dict[str, Any]) -> dict[int, NvbenchDevice]:
    out = {}
    for d in document.get("devices") or ():
        if isinstance(d, dict) and _int(d.get("id")) is not None:
            out[int(d["id"])] = NvbenchDevice(
                id=int(d["id"]), name=str(d.get("name", "")).strip(), sm_version=_int(d.get("sm_version")),
                number_of_sms=_int(d.get("number_of_sms")), global_memory_bytes=_int(d.get("global_memory_size")),
                l2_cache_bytes=_int(d.get("l2_cache_size")))
    return out


def _named_value(data: Any) -> Summary:
    """A 1.0.0 summary's `data` list: its `value` (and `filename`, for a sidecar)."""
    found = {str(d.get("name")): d for d in data or () if isinstance(d, dict)}
    value = found.get("value", {}).get("value")
    filename = found.get("filename", {}).get("value")
    return Summary(value=None if value is None else str(value), type=found.get("value", {}).get("type"),
                   filename=None if filename is None else str(filename))


def _summaries_v1(state: dict[str, Any]) -> dict[str, Summary]:
    """A state's summaries by tag: 1.0.0's {tag, data}, or the first 2021 layout's {name, values}
    (its names mapped by OLD_NAMES)."""
    out = {}
    for s in state.get("summaries") or ():
        if isinstance(s, dict) and "tag" in s:
            out[str(s["tag"])] = _named_value(s.get("data"))
        elif isinstance(s, dict) and s.get("name") in OLD_NAMES:
            out[OLD_NAMES[s["name"]]] = _named_value(s.get("values"))
    return out


def _state_v1(benchmark: str, state: Any, where: str) -> NvbenchState:
    name = state.get("name", state.get("description")) if isinstance(state, dict) else None  # 2021: description
    if not isinstance(state, dict) or name is None:
        raise PeerFormatError(f"{where}: a state without a name")
    axes = tuple(AxisValue(str(a.get("name")), str(a.get("type")), str(a.get("value")))
                 for a in state.get("axis_values") or () if isinstance(a, dict))
    return NvbenchState(benchmark=benchmark, name=str(name), device=_int(state.get("device")) or 0,
                        axis_values=axes, skipped=bool(state.get("is_skipped")),
                        skip_reason=str(state["skip_reason"]) if state.get("skip_reason") else None,
                        summaries=_summaries_v1(state))


def _state_2021(benchmark: str, name: str, state: Any, where: str) -> NvbenchState:
    if not isinstance(state, dict):
        raise PeerFormatError(f"{where}: state {name!r} is not an object")
    axes = tuple(AxisValue(str(k), str(v.get("type")), str(v.get("value")))
                 for k, v in (state.get("axis_values") or {}).items() if isinstance(v, dict))
    summaries = {}
    for title, s in (state.get("summaries") or {}).items():
        if isinstance(s, dict) and title in OLD_NAMES and isinstance(s.get("value"), dict):
            summaries[OLD_NAMES[title]] = Summary(str(s["value"].get("value")), str(s["value"].get("type")))
    return NvbenchState(benchmark=benchmark, name=name, device=_int(state.get("device")) or 0, axis_values=axes,
                        skipped=bool(state.get("is_skipped")),
                        skip_reason=str(state["skip_reason"]) if state.get("skip_reason") else None,
                        summaries=summaries)


def _states(document: dict[str, Any]) -> list[NvbenchState]:
    out: list[NvbenchState] = []
    for b, bench in enumerate(document["benchmarks"]):
        where = f"benchmarks[{b}]"
        if not isinstance(bench, dict) or "name" not in bench:
            raise PeerFormatError(f"{where}: a benchmark without a name")
        states = bench.get("states") or []
        if isinstance(states, dict):  # the 2021 layout
            out.extend(_state_2021(str(bench["name"]), str(k), v, where) for k, v in states.items())
        else:
            out.extend(_state_v1(str(bench["name"]), s, f"{where}.states[{i}]") for i, s in enumerate(states))
    return out


def parse_nvbench_json(text: str) -> NvbenchFile:
    """Every state of an nvbench JSON file. PeerFormatError for invalid JSON (with its line) or a
    document of another shape."""
    document = json_document(text)
    if not looks_like_nvbench(document):
        raise PeerFormatError("not nvbench's JSON: no `devices` and `benchmarks`")
    meta: dict[str, Any] = document["meta"] if isinstance(document.get("meta"), dict) else {}
    version: dict[str, Any] = meta["version"] if isinstance(meta.get("version"), dict) else {}
    json_version = (version.get("json") or {}).get("string")
    nvbench_version = (version.get("nvbench") or {}).get("string")
    return NvbenchFile(json_version=str(json_version) if json_version else None,
                       nvbench_version=str(nvbench_version) if nvbench_version else None,
                       argv=tuple(str(a) for a in meta.get("argv") or ()),
                       devices=_devices(document), states=tuple(_states(document)))


def read_sidecar(path: Path) -> tuple[float, ...]:
    """The samples of one `--jsonbin` sidecar (little-endian float32 seconds), in seconds.
    PeerFormatError when the file is missing or its length is not a whole number of samples."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PeerFormatError(f"the sample file {path} cannot be read ({exc.strerror or exc})") from None
    if len(data) % 4:
        raise PeerFormatError(f"the sample file {path} holds {len(data)} bytes, not a whole number of float32 "
                              "samples: cut short")
    return tuple(v for (v,) in struct.iter_unpack("<f", data))
