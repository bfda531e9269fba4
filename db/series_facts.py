"""The whole-history facts of every series that the regression check needs besides its newest runs.

A series is a case on one physical device (its parts `DEVICE_SERIES_PARTS`) or, by model, on one
device fingerprint. Its facts, each one of the `FactKind`s:

- the summary: every series with a result, the number of runs in which it has an ok result with a
  positive median, and the start of the first of them;
- the spans of each way of measuring it (flush method and pace, both recorded), and by device of
  each environment (the fingerprint): the starts of the first and the last run with an ok result.

All of them are counts, minima and maxima over runs, so the facts of a set of runs are those of its
parts merged (`merged`). db.series_state.read_facts gives them for every run: on PostgreSQL from the
per-series state kept between nights and the newest runs read live; elsewhere by one grouped pass
over the results (`fact_rows`).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection, Select, Text, case, cast, func, literal, or_, select

from rooflab.db import models
from rooflab.db.usable import figure_mask
from rooflab.vocab import ResultStatus

# the columns that name a series within its case, as the reads group by them: by model the device
# fingerprint; by device the parts reports.data.devices makes its device key of (the UUID; the host and
# device name of a device without one) and the tool that measured it
MODEL_SERIES_PARTS = ("device_fingerprint",)
DEVICE_SERIES_PARTS = ("device_uuid", "host", "device_name", "tool")
METHOD_WAYS = ("flush_method", "pace")
ENVIRONMENT_WAYS = ("device_fingerprint",)


class FactKind(StrEnum):
    """The whole-history facts of a series the check reads (the module doc)."""

    SUMMARY_BY_DEVICE = "summary_device"
    SUMMARY_BY_MODEL = "summary_model"
    METHODS_BY_DEVICE = "methods_device"
    METHODS_BY_MODEL = "methods_model"
    ENVIRONMENTS = "environments"  # by device: each environment (fingerprint) of a device's series


@dataclass(frozen=True)
class FactShape:
    """What one kind groups by and counts."""

    per_device: bool
    ways: tuple[str, ...]  # the way columns of a span; () for the summary

    @property
    def spans(self) -> bool:
        """Spans count ok results with every way recorded only; the summary lists every series."""
        return bool(self.ways)

    @property
    def key_names(self) -> tuple[str, ...]:
        """The columns after case_key that name one row of the facts: the series' parts, then its ways."""
        return series_parts(self.per_device) + self.ways


SHAPES = {
    FactKind.SUMMARY_BY_DEVICE: FactShape(True, ()),
    FactKind.SUMMARY_BY_MODEL: FactShape(False, ()),
    FactKind.METHODS_BY_DEVICE: FactShape(True, METHOD_WAYS),
    FactKind.METHODS_BY_MODEL: FactShape(False, METHOD_WAYS),
    FactKind.ENVIRONMENTS: FactShape(True, ENVIRONMENT_WAYS),
}

# one row of the facts: (case id, key: the kind's key_names values) -> (n_ok_runs, first_ok_start, last_ok_start)
FactKey = tuple[int, tuple[str | None, ...]]
FactValue = tuple[int, datetime | None, datetime | None]


@dataclass(frozen=True)
class FactRow:
    """The facts of one series (and, for spans, one way) over every run."""

    case_key: str
    key: tuple[str | None, ...]  # the kind's key_names: the series' parts, then its ways
    n_ok_runs: int
    first_ok_start: datetime | None
    last_ok_start: datetime | None


def series_parts(per_device: bool) -> tuple[str, ...]:
    return DEVICE_SERIES_PARTS if per_device else MODEL_SERIES_PARTS


def _series_columns(per_device: bool) -> tuple[Any, ...]:
    """The SQL expressions of `series_parts(per_device)` (the host only of a device without a UUID:
    a GPU keeps its series whichever node started the run it was measured in)."""
    r, e, m = models.Run, models.Environment, models.Measurement
    if not per_device:
        return (e.device_fingerprint,)
    no_uuid = or_(m.device_uuid.is_(None), m.device_uuid == "")
    tool = m.__table__.c.tool  # a column of the record the model class does not name (db/models.py)
    return (m.device_uuid, case((no_uuid, r.host)).label("host"), e.device_name, tool)


def _joined_measurements(*columns: Any) -> Select:
    r, c, e, m = models.Run, models.Case, models.Environment, models.Measurement
    return (select(*columns).select_from(m).join(r, r.id == m.run_id).join(c, c.id == m.case_id)
            .join(e, e.id == m.environment_id))


def _key_columns(kind: FactKind) -> tuple[Any, ...]:
    """The SQL expressions of the kind's key (its key_names)."""
    shape, m, e = SHAPES[kind], models.Measurement, models.Environment
    ways = {"flush_method": m.flush_method, "pace": m.pace, "device_fingerprint": e.device_fingerprint}
    return (*_series_columns(shape.per_device), *(ways[w] for w in shape.ways))


def grouped(kind: FactKind, runs: Sequence[int] | None = None, *, key_text: bool = False) -> Select:
    """The facts of `kind` over the runs `runs` (runs.id; None: every run) as one grouped query:
    (case id, the key's columns, n_ok_runs, first_ok_start, last_ok_start); with `key_text`
    (PostgreSQL) (kind, case id, the key as the text of a JSON array, the facts), as the state keeps them."""
    shape, r, m = SHAPES[kind], models.Run, models.Measurement
    ok = figure_mask(m.status == ResultStatus.OK, m.median_ms)
    keys = _key_columns(kind)
    named = ((literal(str(kind)), m.case_id, cast(func.json_build_array(*keys), Text)) if key_text
             else (m.case_id, *keys))
    query = _joined_measurements(*named, func.count(func.distinct(case((ok, m.run_id)))),
                                func.min(case((ok, r.started_at))), func.max(case((ok, r.started_at))))
    if shape.spans:
        query = query.where(ok, *(k.is_not(None) for k in keys[-len(shape.ways):]))
    if runs is not None:
        query = query.where(m.run_id.in_(list(runs)))
    return query.group_by(m.case_id, *keys)


def fact_rows(conn: Connection, kind: FactKind, runs: Sequence[int] | None = None) -> dict[FactKey, FactValue]:
    """`grouped(kind, runs)` read: (case id, key) -> (n_ok_runs, first_ok_start, last_ok_start)."""
    out: dict[FactKey, FactValue] = {}
    for case_id, *rest in conn.execute(grouped(kind, runs)):
        *key, n, first, last = rest
        out[(int(case_id), tuple(key))] = (int(n), first, last)
    return out


def merged(parts: Iterable[dict[FactKey, FactValue]]) -> dict[FactKey, FactValue]:
    """The facts of the union of disjoint sets of runs, from the facts of each: the counts added,
    the earliest first and the latest last start."""
    out: dict[FactKey, FactValue] = {}
    for part in parts:
        for key, (n, first, last) in part.items():
            had = out.get(key)
            if had is None:
                out[key] = (n, first, last)
                continue
            firsts = [t for t in (had[1], first) if t is not None]
            lasts = [t for t in (had[2], last) if t is not None]
            out[key] = (had[0] + n, min(firsts) if firsts else None, max(lasts) if lasts else None)
    return out


def ok_runs_started_at(conn: Connection, per_device: bool, started: datetime) -> set[tuple[str | None, ...]]:
    """(case_key, the series' parts, run_id) of every series with an ok result in a run that started
    at `started` (where runs started at the same instant, which of them holds a series' first)."""
    r, c, m = models.Run, models.Case, models.Measurement
    ok = figure_mask(m.status == ResultStatus.OK, m.median_ms)
    query = (_joined_measurements(c.case_key, *_series_columns(per_device), r.run_id).distinct()
             .where(ok, r.started_at == started))
    return {tuple(row) for row in conn.execute(query)}
