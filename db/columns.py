"""The flat result row: the export columns of docs/design.md (in that order) and the extra columns after them.

One definition serves `db.query.results`, `rooflab export` and `rooflab import`, so that what
is exported can be read back and exported again unchanged.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import JSON, Select, Text, cast, select
from sqlalchemy.orm import QueryableAttribute

from rooflab.db import models
from rooflab.db.measurement_columns import record_columns
from rooflab.db.types import ColumnValue, UTCDateTime

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


@dataclass(frozen=True)
class Joined:
    """A column of the results row that is a column of the runs, environments or cases table."""

    table: type[models.Base]  # the model (db/models.py): Run, Environment or Case
    attribute: str  # its column there
    default: object = None  # its value when an imported file lacks it (export columns are required)


# The results row's columns that come from the runs, environments and cases tables, in the order
# they take among the extra columns: the one list of them. Their kinds and null rules are the
# tables' own (db/models.py); the results query (column_sources), the importer (which fields make a
# run, a device or a case) and the export files follow from here. The measurement's own columns
# follow the measurement record (db/measurement_columns.py).
_RUN, _ENV, _CASE = models.Run, models.Environment, models.Case
JOINED: dict[str, Joined] = {
    "run_id": Joined(_RUN, "run_id"), "started_at": Joined(_RUN, "started_at"), "host": Joined(_RUN, "host"),
    "device_name": Joined(_ENV, "device_name"), "device_kind": Joined(_ENV, "device_kind"),
    "device_fingerprint": Joined(_ENV, "device_fingerprint"), "suite": Joined(_RUN, "suite"),
    "case_key": Joined(_CASE, "case_key"), "op": Joined(_CASE, "op"), "family": Joined(_CASE, "family"),
    "backend": Joined(_CASE, "backend"), "dtype": Joined(_CASE, "dtype"), "params": Joined(_CASE, "params"),
    "torch_version": Joined(_ENV, "torch_version"), "cuda_version": Joined(_ENV, "cuda_version"),
    "driver_version": Joined(_ENV, "driver_version"), "git_commit": Joined(_RUN, "git_commit"),
    "op_version": Joined(_CASE, "op_version", 1), "l2_bytes": Joined(_ENV, "l2_bytes", 0),
    "memory_bytes": Joined(_ENV, "memory_bytes", 0), "sm_count": Joined(_ENV, "sm_count", 0),
    "compute_capability": Joined(_ENV, "compute_capability"), "finished_at": Joined(_RUN, "finished_at"),
    "run_status": Joined(_RUN, "status", "complete"), "spec_hash": Joined(_RUN, "spec_hash", ""),
    "git_dirty": Joined(_RUN, "git_dirty", False), "command_line": Joined(_RUN, "command_line", ""),
    "rooflab_version": Joined(_RUN, "rooflab_version", ""),
}
# the column that names a row of each table in the results row (the importer's key of a run, a device, a case)
TABLE_KEYS: dict[type[models.Base], str] = {_RUN: "run_id", _ENV: "device_fingerprint", _CASE: "case_key"}


def _kind_of(column: Any) -> str:
    """A table column's kind in files and frames (ColumnKind.kind)."""
    if isinstance(column.type, UTCDateTime):
        return "datetime"
    if isinstance(column.type, JSON):
        return "object"
    return {str: "str", int: "int", bool: "bool", float: "float"}[column.type.python_type]


def _joined_kind(joined: Joined) -> ColumnKind:
    column = joined.table.__table__.c[joined.attribute]
    return ColumnKind(_kind_of(column), bool(column.nullable), joined.default)


_JOINED_KINDS: dict[str, ColumnKind] = {name: _joined_kind(j) for name, j in JOINED.items()}


def joined_fields(table: type[models.Base]) -> tuple[str, ...]:
    """The results row's columns that come from `table` (a model), in the row's order."""
    return tuple(name for name, j in JOINED.items() if j.table is table)


def table_row(table: type[models.Base], record: Mapping[str, ColumnValue]) -> dict[str, ColumnValue]:
    """The columns of `table` (a model) that a results row `record` holds, named as the table names them."""
    return {JOINED[name].attribute: record[name] for name in joined_fields(table)}


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


def canonical_json(value: object) -> str:
    """JSON with sorted keys and no spaces: the one spelling of params/identity in files and frames."""
    return json.dumps(list(value) if isinstance(value, tuple) else value, sort_keys=True, separators=(",", ":"))



def column_sources() -> dict[str, QueryableAttribute[object]]:
    """The columns of the results row that come from the runs, cases and environments tables
    (name -> mapped attribute); every other column is the measurement's own."""
    return {name: getattr(j.table, j.attribute) for name, j in JOINED.items()}


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
