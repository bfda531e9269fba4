"""The flat result row: the export columns of docs/design.md (in that order) and the extra columns after them.

One definition serves `db.query.results`, `rooflab export` and `rooflab import`, so that what
is exported can be read back and exported again unchanged.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, Text, cast, select

from rooflab.db import models
from rooflab.db.measurement_columns import record_columns

# docs/design.md, "Export columns": these columns, in this order, come first.
EXPORT_COLUMNS: tuple[str, ...] = (
    "run_id", "started_at", "host", "device_name", "device_kind", "device_fingerprint", "suite",
    "case_key", "op", "family", "backend", "dtype", "params", "cache", "status", "median_ms",
    "p10_ms", "p90_ms", "n_samples", "flops", "bytes", "intensity", "tflops", "gbps",
    "torch_version", "cuda_version", "driver_version", "git_commit", "error",
)



@dataclass(frozen=True)
class ColumnKind:
    """How a column is typed in files: `kind` is one of str, datetime, int, float, bool, object, list."""

    kind: str
    nullable: bool = True
    default: object = None


# The columns of the results row that come from the runs, cases and environments tables, with how
# each reads from a file (`default`: its value when an imported file lacks it, for those that are
# not export columns). The measurement's own columns follow the measurement record.
_JOINED_KINDS: dict[str, ColumnKind] = {
    "run_id": ColumnKind("str", False), "started_at": ColumnKind("datetime", False),
    "host": ColumnKind("str", False), "device_name": ColumnKind("str", False),
    "device_kind": ColumnKind("str", False), "device_fingerprint": ColumnKind("str", False),
    "suite": ColumnKind("str", False), "case_key": ColumnKind("str", False), "op": ColumnKind("str", False),
    "family": ColumnKind("str", False), "backend": ColumnKind("str", False), "dtype": ColumnKind("str", False),
    "params": ColumnKind("object", False), "torch_version": ColumnKind("str"), "cuda_version": ColumnKind("str"),
    "driver_version": ColumnKind("str"), "git_commit": ColumnKind("str"),
    "op_version": ColumnKind("int", False, 1), "l2_bytes": ColumnKind("int", False, 0),
    "memory_bytes": ColumnKind("int", False, 0), "sm_count": ColumnKind("int", False, 0),
    "compute_capability": ColumnKind("str"), "finished_at": ColumnKind("datetime"),
    "run_status": ColumnKind("str", False, "complete"), "spec_hash": ColumnKind("str", False, ""),
    "git_dirty": ColumnKind("bool", False, False), "command_line": ColumnKind("str", False, ""),
    "rooflab_version": ColumnKind("str", False, ""),
}


def _measurement_kinds() -> dict[str, ColumnKind]:
    """The measurement's own columns, typed from the record's fields (db/measurement_columns.py)."""
    kinds = {
        c.name: ColumnKind(c.kind, c.nullable, None if c.default is dataclasses.MISSING else c.default)
        for c in record_columns()
    }
    kinds.update({name: ColumnKind("float") for name in ("intensity", "tflops", "gbps")})  # derived: rates_of
    return kinds


COLUMN_KINDS: dict[str, ColumnKind] = {
    **_JOINED_KINDS, **_measurement_kinds(),
    # a file may leave it empty: the run's start stands in for it (db.importer)
    "measured_at": ColumnKind("datetime"),
    # a file written before the pace was recorded: its results ran back to back, the only pace there was
    "pace": ColumnKind("str", True, "back_to_back"),
}
# Everything else the database knows about a result (raw samples excepted), after the export
# columns: the measurement's own columns in the record's order, then the joined ones.
EXTRA_COLUMNS: tuple[str, ...] = tuple(name for name in (*_measurement_kinds(), *_JOINED_KINDS)
                                       if name not in EXPORT_COLUMNS)
ALL_COLUMNS: tuple[str, ...] = EXPORT_COLUMNS + EXTRA_COLUMNS
JSON_COLUMNS: tuple[str, ...] = tuple(name for name in ALL_COLUMNS if COLUMN_KINDS[name].kind in ("object", "list"))


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: the one spelling of params/identity in files and frames."""
    return json.dumps(list(value) if isinstance(value, tuple) else value, sort_keys=True, separators=(",", ":"))



def column_sources() -> dict[str, Any]:
    """The columns of the results row that come from the runs, cases and environments tables
    (name -> mapped attribute); every other column is the measurement's own."""
    r, c, e = models.Run, models.Case, models.Environment
    return {
        "run_id": r.run_id, "started_at": r.started_at, "host": r.host, "device_name": e.device_name,
        "device_kind": e.device_kind, "device_fingerprint": e.device_fingerprint, "suite": r.suite,
        "case_key": c.case_key, "op": c.op, "family": c.family, "backend": c.backend, "dtype": c.dtype,
        "params": c.params, "torch_version": e.torch_version, "cuda_version": e.cuda_version,
        "driver_version": e.driver_version, "git_commit": r.git_commit, "op_version": c.op_version,
        "l2_bytes": e.l2_bytes, "memory_bytes": e.memory_bytes, "sm_count": e.sm_count,
        "compute_capability": e.compute_capability, "finished_at": r.finished_at, "run_status": r.status,
        "spec_hash": r.spec_hash, "git_dirty": r.git_dirty, "command_line": r.command_line,
        "rooflab_version": r.rooflab_version,
    }


def result_select(columns: Sequence[str] | None = None, *, json_as_text: bool = False) -> Select:
    """One row per measurement with ALL_COLUMNS, or only `columns` (names of ALL_COLUMNS, in that order).

    `json_as_text` selects the JSON columns (params, throttle_reasons) as their stored text instead
    of decoded objects, so that a reader can decode each distinct value once.
    """
    r, c, e, m = models.Run, models.Case, models.Environment, models.Measurement
    sources = column_sources()
    names = ALL_COLUMNS if columns is None else tuple(columns)
    unknown = [name for name in names if name not in COLUMN_KINDS]
    if unknown:
        raise ValueError(f"unknown result column(s): {', '.join(unknown)}")

    def column(name: str) -> Any:
        source = sources[name] if name in sources else getattr(m, name)
        if json_as_text and name in JSON_COLUMNS:
            source = cast(source, Text)
        return source.label(name)

    return (
        select(*[column(name) for name in names])
        .select_from(m)
        .join(r, r.id == m.run_id)
        .join(c, c.id == m.case_id)
        .join(e, e.id == m.environment_id)
        .order_by(r.started_at, r.run_id, c.case_key, m.cache, m.timing_mode, m.device_key)
    )
