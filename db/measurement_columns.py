"""The columns of `measurements`, derived from the measurement record (rooflab/record.py).

Every stored leaf field of `MeasurementRecord` (walking its parts: identity, method, statistics,
machine observation, work model) is one column, named as the field, in the record's order; its
kind comes from its annotation, its width and null rule from the field's `col()` metadata and
from whether its part may be absent. Four columns are derived rather than measured: `device_key`
(which device: its UUID, else its fingerprint), `intensity`, `tflops` and `gbps` (db/rates.py, the
one derivation of a rate: `rates_of`). db/models.py builds the table from `record_columns()`,
db/store.py writes `measurement_row(record)`, and db/columns.py puts the columns in the results
row, the export files and the import parser.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from rooflab.db import rates
from rooflab.db.types import ColumnValue
from rooflab.db.usable import figure_mask
from rooflab.record import Column, MeasurementRecord, column_of
from rooflab.vocab import ResultStatus

# a column's kind in files and frames: one of these (db/columns.py ColumnKind)
_KINDS: dict[Any, str] = {str: "str", int: "int", float: "float", bool: "bool", datetime: "datetime"}


@dataclass(frozen=True)
class RecordColumn:
    """One column of `measurements` that a record field fills."""

    name: str
    path: tuple[str, ...]  # attributes from the MeasurementRecord down to the field
    kind: str  # str, int, float, bool, datetime or list
    nullable: bool
    column: Column  # the field's storage metadata (width, 64-bit, server default, empty value)
    default: Any  # the field's default (dataclasses.MISSING when it has none)


def _strip_optional(hint: Any) -> tuple[Any, bool]:
    """(T, True) for `T | None`, (hint, False) otherwise."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0], True
    return hint, False


def _kind(hint: Any, where: str) -> str:
    if hint in _KINDS:
        return _KINDS[hint]
    if typing.get_origin(hint) is tuple and typing.get_args(hint)[1:] == (Ellipsis,):
        return "list"
    raise TypeError(f"{where}: a stored record field must be str, int, float, bool, datetime or "
                    f"tuple[..., ...], optionally `| None`; got {hint!r}")


def _walk(cls: type, path: tuple[str, ...], part_optional: bool) -> list[RecordColumn]:
    hints = typing.get_type_hints(cls)
    out: list[RecordColumn] = []
    for f in dataclasses.fields(cls):
        meta = column_of(f)
        if not meta.stored:
            continue
        hint, optional = _strip_optional(hints[f.name])
        if dataclasses.is_dataclass(hint):
            out.extend(_walk(typing.cast(type, hint), (*path, f.name), part_optional or optional))
            continue
        nullable = optional or (part_optional and meta.empty is None)
        out.append(RecordColumn(f.name, (*path, f.name), _kind(hint, f"{cls.__name__}.{f.name}"), nullable, meta,
                                f.default))
    return out


@cache
def record_columns() -> tuple[RecordColumn, ...]:
    """The stored leaf fields of MeasurementRecord, in the record's order (names are unique)."""
    columns = tuple(_walk(MeasurementRecord, (), False))
    names = [c.name for c in columns]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise TypeError(f"MeasurementRecord: field names must be unique across its parts: {', '.join(twice)}")
    return columns


def _value(record: Any, column: RecordColumn) -> Any:
    value = record
    for name in column.path:
        value = getattr(value, name)
        if value is None:
            return column.column.empty if name != column.path[-1] else None
    if column.kind == "list":
        return list(value)
    if column.kind == "bool":
        return bool(value)
    return value


def device_key(device_uuid: str | None, device_fingerprint: str) -> str:
    """Which device a result belongs to: its UUID, or its fingerprint when it has none (a CPU)."""
    return device_uuid or device_fingerprint


def rates_of(status: str, median_ms: float | None, flops: int, nbytes: int) -> dict[str, float | None]:
    """The derived columns of a result: intensity (FLOP/byte, None without bytes), and TFLOP/s and
    GB/s of a result with a figure (db/usable.py: ok, a positive median; None otherwise). The store
    and the importer both derive them here, so a stored rate is always this function of the stored figures."""
    if median_ms is None or not figure_mask(status == ResultStatus.OK, median_ms):
        return {"intensity": flops / nbytes if nbytes else None, "tflops": None, "gbps": None}
    return {
        "intensity": flops / nbytes if nbytes else None,
        "tflops": float(rates.tflops(flops, median_ms)),
        "gbps": float(rates.gbps(nbytes, median_ms)),
    }


def tflops_of(m: MeasurementRecord) -> float | None:
    return rates_of(m.status, m.median_ms, m.work.flops, m.work.bytes)["tflops"]


def gbps_of(m: MeasurementRecord) -> float | None:
    return rates_of(m.status, m.median_ms, m.work.flops, m.work.bytes)["gbps"]


DERIVED_COLUMNS = ("device_key", "intensity", "tflops", "gbps")


def measurement_row(m: MeasurementRecord) -> dict[str, ColumnValue]:
    """The `measurements` columns of a record (foreign keys excluded)."""
    row = {column.name: _value(m, column) for column in record_columns()}
    row["device_key"] = device_key(m.identity.device_uuid, m.identity.device_fingerprint)
    row.update(rates_of(m.status, m.median_ms, m.work.flops, m.work.bytes))
    return row


def measurement_column_names() -> tuple[str, ...]:
    """Every column of `measurements` a record fills or derives (foreign keys excluded), in order."""
    return tuple(c.name for c in record_columns()) + DERIVED_COLUMNS
