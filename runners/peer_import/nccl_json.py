"""nccl-tests' `-J FILE` JSON (written since 2.17.3; file `version` 1, then 3): text in, one `NcclTest` out.

The document holds one test run: `version`, `start_time` (local time, no zone), `args` (the command
line: its first word names the test binary), `env` (the process environment), `nccl_version` (the
library's version code), `config` (the settings and `devices`: rank, group, pid, hostname, device,
device_hex, device_info), `results` (one object per message size: size, count, type, redop, root
(a space-padded string), `out_of_place` and `in_place` each with `time` (or `cpu_time` under -C),
`alg_bw`, `bus_bw`, `nwrong` (null when not checked), and under -I the `*_per_iter` statistics with
every iteration's time), `out_of_bounds`, `average_bus_bandwidth` (spelled `average_bus_bandwidith`
before 2.17.9) and `errors`. Doubles are written with six decimals (`%lf`), so a figure's rounding
is half a unit of the sixth decimal.
"""
from __future__ import annotations

import math
from typing import Any

from rooflab.runners.peer_import.errors import PeerFormatError, json_document
from rooflab.runners.peer_import.nccl_records import (
    IterationStats,
    NcclHalf,
    NcclRow,
    NcclTest,
    RankDevice,
    RunSettings,
)
from rooflab.runners.peer_import.nccl_tests import check_average, library_version
from rooflab.runners.peer_import.printed import Printed
from rooflab.runners.peer_import.sniff import Sniff
from rooflab.vocab import Tool

SIX_DECIMALS = 5e-7  # half a unit of `%lf`'s last digit
_SETTINGS = {"nthreads": "nthreads", "ngpus": "ngpus", "min_bytes": "minimum_bytes", "max_bytes": "maximum_bytes",
             "warmup_iters": "warmup_iters", "iters": "iterations", "agg_iters": "aggregated_iterations",
             "validation": "validation", "graph": "graph"}
ENV_PREFIXES = ("NCCL_", "RCCL_", "TORCH_NCCL_")


def looks_like_nccl_json(document: Any) -> bool:
    """Whether a decoded JSON document is nccl-tests' `-J` output."""
    if not isinstance(document, dict) or not isinstance(document.get("results"), list):
        return False
    config = document.get("config")
    return isinstance(config, dict) and ("devices" in config or "nthreads" in config)


def recognises_nccl_json(sniff: Sniff) -> bool:
    """nccl-tests' `-J` file: a JSON object with `config` and `results` (or, cut short, those keys in its head)."""
    head = sniff.cut_json_head
    cut = '"config"' in head and ('"results"' in head or '"nthreads"' in head)
    return looks_like_nccl_json(sniff.document) or cut


def _figure(value: Any, what: str, where: str) -> Printed:
    if isinstance(value, str) and value.lower() == "nan":
        return Printed(math.nan, SIX_DECIMALS)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PeerFormatError(f"{where}: {what} is {value!r}, not a number")
    return Printed(float(value), SIX_DECIMALS)


def _per_iteration(value: Any) -> IterationStats | None:
    if not isinstance(value, dict):
        return None
    def figure(key: str) -> Printed | None:
        v = value.get(key)
        return Printed(float(v), SIX_DECIMALS) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    times = tuple(float(t) for t in value.get("times_us") or () if isinstance(t, (int, float)))
    per_process = tuple(tuple(float(t) for t in row if isinstance(t, (int, float)))
                        for row in value.get("per_process_max_times_us") or () if isinstance(row, list))
    return IterationStats(figure("min_us"), figure("max_us"), figure("p99_us"), figure("cv_pct"), times, per_process)


def _half(value: Any, per_iter: Any, where: str) -> NcclHalf | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise PeerFormatError(f"{where} is not an object")
    time = value.get("time", value.get("cpu_time"))
    wrong = value.get("nwrong")
    return NcclHalf(time_us=_figure(time, "time", where), algbw_gbps=_figure(value.get("alg_bw"), "alg_bw", where),
                    busbw_gbps=_figure(value.get("bus_bw"), "bus_bw", where),
                    wrong=None if wrong is None else _figure(wrong, "nwrong", where).value,
                    per_iteration=_per_iteration(per_iter))


def _row(index: int, result: Any) -> NcclRow:
    where = f"results[{index}]"
    if not isinstance(result, dict):
        raise PeerFormatError(f"{where} is not an object")
    missing = [k for k in ("size", "count", "type") if k not in result]
    if missing:
        raise PeerFormatError(f"{where} lacks {', '.join(missing)}")
    try:
        size, count = int(result["size"]), int(result["count"])
        root = int(str(result["root"]).strip()) if result.get("root") is not None else None
    except (TypeError, ValueError):
        raise PeerFormatError(f"{where}: size, count and root must be whole numbers") from None
    return NcclRow(line=index + 1, size_bytes=size, count=count, dtype=str(result["type"]),
                   redop=str(result["redop"]) if result.get("redop") is not None else None, root=root,
                   out_of_place=_half(result.get("out_of_place"), result.get("out_of_place_per_iter"),
                                      f"{where}.out_of_place"),
                   in_place=_half(result.get("in_place"), result.get("in_place_per_iter"), f"{where}.in_place"))


def _devices(config: dict[str, Any]) -> tuple[RankDevice, ...]:
    out: list[RankDevice] = []
    for d in config.get("devices") or ():
        if not isinstance(d, dict):
            raise PeerFormatError("config.devices holds an entry that is not an object")
        out.append(RankDevice(rank=int(d.get("rank", len(out))), host=str(d.get("hostname", "")),
                              device=int(d.get("device", 0)), bus_id=str(d.get("device_hex", "")),
                              gpu_name=str(d.get("device_info", "")).strip(),
                              pid=int(d["pid"]) if isinstance(d.get("pid"), int) else None,
                              group=int(d["group"]) if isinstance(d.get("group"), int) else None))
    return tuple(out)


def _settings(config: dict[str, Any]) -> RunSettings:
    return RunSettings(**{mine: int(config[theirs]) for mine, theirs in _SETTINGS.items()
                           if isinstance(config.get(theirs), int) and not isinstance(config.get(theirs), bool)})


def _footer(document: dict[str, Any]) -> tuple[int | None, bool, Printed | None]:
    bounds: dict[str, Any] = document["out_of_bounds"] if isinstance(document.get("out_of_bounds"), dict) else {}
    found = document.get("average_bus_bandwidth", document.get("average_bus_bandwidith"))
    average: dict[str, Any] = found if isinstance(found, dict) else {}
    bandwidth = average.get("bandwidth", average.get("bandwidith"))
    count = bounds.get("count")
    failed = bounds.get("okay") in (False, "false")
    avg = Printed(float(bandwidth), SIX_DECIMALS) if isinstance(bandwidth, (int, float)) else None
    return (int(count) if isinstance(count, int) else None), failed, avg


def _environment(document: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in document.get("env") or ():
        name, sep, value = str(item).partition("=")
        if sep and name.startswith(ENV_PREFIXES):
            env[name] = value
    return env


def parse_nccl_json(text: str) -> NcclTest:
    """The test of an nccl-tests `-J` file. PeerFormatError for invalid JSON (with its line) or a
    document of another shape."""
    document = json_document(text)
    if not looks_like_nccl_json(document):
        raise PeerFormatError("not nccl-tests' JSON: no `config` and `results`")
    config = document["config"]
    rows = [_row(i, r) for i, r in enumerate(document["results"])]
    count, failed, avg = _footer(document)
    if avg is not None and rows:
        check_average(rows, None, avg)
    args = document["args"] if isinstance(document.get("args"), list) else []
    program = str(args[0]).rsplit("/", 1)[-1] if args else None
    code = document.get("nccl_version")
    devices = _devices(config)
    tool = Tool.RCCL_TESTS if any(d.gpu_name.startswith("AMD") for d in devices) else Tool.NCCL_TESTS
    return NcclTest(
        tool=tool, first_line=1, last_line=text.count("\n") + 1, program=program, tool_version=None,
        library_version=library_version(code) if isinstance(code, int) and code > 0 else None,
        settings=_settings(config), devices=devices, rows=tuple(rows),
        time_is_cputime=any(isinstance(r, dict) and isinstance(r.get("out_of_place"), dict)
                            and "cpu_time" in r["out_of_place"] for r in document["results"]),
        out_of_bounds=count, out_of_bounds_failed=failed, avg_busbw_gbps=avg,
        start_time=str(document["start_time"]) if document.get("start_time") else None,
        env=_environment(document), command_line=" ".join(str(a) for a in args))
