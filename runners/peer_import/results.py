"""What every imported file becomes, whichever tool wrote it: runs of rooflab results.

- **The run.** One file is one run, or several when it holds the same test twice (a run holds one
  result per case and device). Its id is the tool and a digest of what was parsed (`run_id`), so the
  same results imported again, from the same file or from a copy with other noise around them, are
  the same run and store nothing twice. Its `suite` is the tool's name.
- **The device.** The GPU the file names; its fingerprint is a hash of the kind, the GPU name and the
  tool (`device_identity`): results of two tools on one GPU are two device fingerprints, so no series
  (a case on a fingerprint) ever joins two tools, and none joins rooflab's own results, whose identity
  holds the driver, CUDA and torch versions instead. The device page (by GPU name) shows them together.
- **The time.** `TimeSource` says where each result's time came from: the file, `--measured-at`, or
  the file's modification time when neither gives one (the summary says so).
- **The tool's figures.** Each result travels with the rates the file printed for it (`Imported`), so
  that one rule (agreement.py) holds them against what rooflab stores before anything is stored.
- **What a converter is given**: `Source`, the file's name and time and the options of the command line.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from rooflab.record import EnvironmentRecord, MeasurementRecord, RunRecord, Statistics
from rooflab.runners.machine.environment import fingerprint
from rooflab.runners.peer_import.printed import PrintedRate, PrintedTime
from rooflab.vocab import DeviceKind

Z95 = 1.959963984540054


class TimeSource(StrEnum):
    """Where an imported result's time came from."""

    FILE = "file"  # the file's own time (a JSON start time, a -S timestamp)
    OPTION = "option"  # --measured-at
    MODIFIED = "modified"  # neither: the file's modification time


@dataclass(frozen=True)
class When:
    """The time of a file's results, and where it came from."""

    at: datetime
    source: TimeSource


@dataclass(frozen=True)
class Source:
    """What a converter is given beside the parsed records: the file's name, its time, the folder it lies
    in (nvbench's sample files) and what the command line adds to what the file says."""

    name: str
    when: When
    folder: Path | None = None
    device_name: str | None = None  # for files that name no GPU (BabelStream CSV, rccl-tests' files)
    ranks: int | None = None  # for rccl-tests' files written without their `gpus` field
    buffer_bytes: int | None = None  # nvbandwidth's buffer (its -b), which its output does not print
    host: str | None = None  # the node, for outputs that name none (nvbandwidth before v0.8)


@dataclass(frozen=True)
class Imported:
    """One result made from a file, with the rates the file printed for it."""

    record: MeasurementRecord
    printed: tuple[PrintedRate | PrintedTime, ...] = ()


@dataclass
class ImportedRun:
    """One run made from a file: its record, its devices and its results."""

    run: RunRecord
    environments: list[EnvironmentRecord] = field(default_factory=list)
    results: list[Imported] = field(default_factory=list)

    @property
    def measurements(self) -> list[MeasurementRecord]:
        return [r.record for r in self.results]


@dataclass
class Conversion:
    """What one file became: its runs, the rows left out (and why), notes on how it was read."""

    tool: str
    runs: list[ImportedRun] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def results(self) -> int:
        return sum(len(r.results) for r in self.runs)


def digest(*parts: Any) -> str:
    """A short hash of the canonical JSON of `parts`: what was parsed, not the file's bytes."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def run_id(tool: str, content_digest: str, index: int = 0) -> str:
    """`nccl-tests-<16 hex>`, and `-02`, `-03` ... for further runs of one file (file order)."""
    return f"{tool}-{content_digest[:16]}" + (f"-{index + 1:02d}" if index else "")


def run_record(tool: str, rid: str, content_digest: str, when: When, host: str, command_line: str,
               description: str) -> RunRecord:
    return RunRecord(run_id=rid, suite=tool, spec_text=description, spec_hash=content_digest,
                     started_at=when.at, host=host, command_line=command_line)


def device_identity(kind: str, model: str, tool: str) -> dict[str, Any]:
    """What an imported device's fingerprint hashes: its kind, the GPU name and the tool."""
    return {"kind": kind, "model": model, "tool": tool}


def environment(tool: str, name: str, info: dict[str, Any], *, kind: str = DeviceKind.CUDA, memory_bytes: int = 0,
                l2_bytes: int = 0, sm_count: int = 0, compute_capability: str | None = None) -> EnvironmentRecord:
    identity = device_identity(kind, name, tool)
    return EnvironmentRecord(device_fingerprint=fingerprint(identity), device_name=name, device_kind=kind,
                             identity=identity, info={"tool": tool, **info}, memory_bytes=memory_bytes,
                             l2_bytes=l2_bytes, sm_count=sm_count, compute_capability=compute_capability)


def naive_as_utc(text: str) -> datetime | None:
    """A time the tool wrote (`2026-04-19 11:13:22`, ISO forms), read as UTC when it names no zone."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def point_statistics(median_ms: float, *, min_ms: float | None = None, max_ms: float | None = None,
                     std_ms: float | None = None, n_samples: int = 1, rel_ci: float | None = None,
                     iqr_ms: float = 0.0) -> Statistics:
    """The statistics of a result the tool summarised without its samples: its central figure, the
    extremes and spread it printed, the median where it printed none."""
    return Statistics(median_ms=median_ms, mean_ms=median_ms, min_ms=min_ms if min_ms is not None else median_ms,
                      max_ms=max_ms if max_ms is not None else median_ms, p10_ms=median_ms, p90_ms=median_ms,
                      iqr_ms=iqr_ms, std_ms=std_ms, n_samples=max(1, n_samples), rel_ci_halfwidth=rel_ci)


def mean_ci(rel_std: float | None, n: int | None) -> float | None:
    """The 95 % CI half-width of a mean over `n` samples of relative spread `rel_std`, over the mean
    (normal approximation): what a summary of mean, spread and count allows."""
    if rel_std is None or not n or n < 2 or rel_std < 0:
        return None
    return Z95 * rel_std / n ** 0.5


def note(parts: Iterable[str | None]) -> str | None:
    text = "; ".join(p for p in parts if p)
    return text or None


def unique(values: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(values))


def split_runs(results: Sequence[tuple[Imported, EnvironmentRecord]], tool: str, content: str, description: str,
               command_line: str, when: When) -> list[ImportedRun]:
    """Results in file order into runs: a case already in the current run (on that device) starts the next
    one (the same test twice in one file, `-N` cycles, two BabelStream runs of one size)."""
    groups: list[list[tuple[Imported, EnvironmentRecord]]] = [[]]
    seen: set[tuple[str, str | None]] = set()
    for item, env in results:
        identity = item.record.identity
        key = (identity.case.case_key, identity.device_uuid or env.device_fingerprint)
        if key in seen:
            groups.append([])
            seen = set()
        seen.add(key)
        groups[-1].append((item, env))
    runs = []
    for index, group in enumerate(g for g in groups if g):
        rid = run_id(tool, content, index)
        started = min(i.record.identity.measured_at for i, _ in group)
        hosts = unique([str(h) for _, e in group for h in e.info.get("hosts", [])])
        run = run_record(tool, rid, content, dataclasses.replace(when, at=started), ", ".join(hosts), command_line,
                         description)
        envs = list({e.device_fingerprint: e for _, e in group}.values())
        items = [dataclasses.replace(i, record=dataclasses.replace(
            i.record, identity=dataclasses.replace(i.record.identity, run_id=rid))) for i, _ in group]
        runs.append(ImportedRun(run=run, environments=envs, results=items))
    return runs


def largest_sizes(run: ImportedRun) -> list[Imported]:
    """The result of the largest `n` of each series of a run (the case without its `n`: one test's half,
    one BabelStream kernel), in the run's order: where a sweep's figures are furthest from its latency."""
    best: dict[tuple[object, ...], Imported] = {}
    for item in run.results:
        case = item.record.identity.case
        rest = tuple(sorted((k, str(v)) for k, v in case.params.items() if k != "n"))
        key = (case.op, case.backend, case.dtype, rest, item.record.identity.device_fingerprint)
        n = case.params.get("n")
        kept = best.get(key)
        if kept is None or (isinstance(n, int) and n > int(kept.record.identity.case.params.get("n") or 0)):
            best[key] = item
    return list(best.values())
