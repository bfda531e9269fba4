"""A comparison's sides as physical devices or as models (the rule `rooflab compare` sides follow).

A side named by a device key (a GPU's UUID, or a prefix of it of six characters or more:
reports.data.devices) is that one device: its own results, its own roofs. A side named by a model
(a device name, as before) is the aggregate over the model's devices: in each run, each case's
result is the median device's (`median_devices`: the result whose median is the median of the
devices' medians, the lower of the two middle ones for an even count), a real result with its own
samples and interval, never a blend of several.

A physical device stands in the pairing as a device of its own: its results are also counted under
its label (`DeviceSide.label`, its model and key), in the history's columns before the runs are
paired (`with_device_sides`) and in every results frame read after (`relabelled`), so the pairing
rule (reports.comparisons.pairing) and the comparison (reports.comparisons.compare_devices) need no
second path. A device compared with its own model is the device against its siblings' median.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from rooflab.db.series_query import HistoryColumns
from rooflab.reports.data.devices import MIN_PREFIX, device_keys, history_series
from rooflab.reports.data.frames import usable
from rooflab.reports.errors import ReportInputError
from rooflab.vocab import SeriesBy


@dataclass(frozen=True)
class DeviceSide:
    """A side naming one physical device."""

    key: str  # its device key
    model: str  # its device name
    host: str

    @property
    def label(self) -> str:
        """What the pairing and the comparison call it (a device name no model has)."""
        return f"{self.model} {self.key}"


def physical_sides(h: HistoryColumns, texts: Sequence[str], hosts: Mapping[str, str]) -> dict[str, DeviceSide]:
    """The texts of `texts` that name one physical device of the history (keys_only with devices):
    its device key exactly, or a prefix (MIN_PREFIX characters or more, case-insensitive) of exactly
    one; ReportInputError for a prefix of several. `hosts`: each UUID's host (db.query.device_hosts),
    else the host of its newest run."""
    found = history_series(h, SeriesBy.DEVICE)
    keys = sorted({k for k in found.keys if k is not None})
    out: dict[str, DeviceSide] = {}
    for text in texts:
        wanted = text.strip()
        hits = [k for k in keys if k == wanted]
        if not hits and len(wanted) >= MIN_PREFIX:
            hits = [k for k in keys if k.lower().startswith(wanted.lower())]
        if len(hits) > 1:
            raise ReportInputError(f"device {text!r} is ambiguous: it begins {len(hits)} device keys "
                                   f"({', '.join(hits[:5])}{', ...' if len(hits) > 5 else ''})")
        if hits:
            out[text] = _side_of(h, found.codes, [found.keys.index(hits[0])], hits[0], hosts)
    return out


def _side_of(h: HistoryColumns, codes: np.ndarray, mine: list[int], key: str, hosts: Mapping[str, str]) -> DeviceSide:
    rows = np.flatnonzero(np.isin(codes, mine))
    newest = rows[np.argmax(h.run_index[rows])]
    names = h.environments.set_index("environment_id")["device_name"]
    host = hosts.get(key) or str(h.runs["host"].iloc[int(h.run_index[newest])] or "")
    return DeviceSide(key, str(names[h.environment_id[newest]]), host)


def with_device_sides(h: HistoryColumns, sides: Sequence[DeviceSide]) -> HistoryColumns:
    """The history with each side's device's results also standing under its label (an environment
    row of its own per environment it ran in), so the run counts and case runs hold it as a device."""
    if not sides:
        return h
    found = history_series(h, SeriesBy.DEVICE)
    parts, envs = [np.arange(len(h))], [h.environments]
    env_of = np.arange(int(h.environment_id.max()) + 1 if len(h) else 1, dtype=np.int64)
    new_env = [h.environment_id]
    next_id = int(h.environments["environment_id"].max()) + 1 if len(h.environments) else 1
    for side in sides:
        rows = np.flatnonzero(found.codes == found.keys.index(side.key))
        own = np.unique(h.environment_id[rows])
        added = h.environments[h.environments["environment_id"].isin(own)].assign(device_name=side.label)
        ids = np.arange(next_id, next_id + len(added))
        env_of[added["environment_id"].to_numpy()] = ids
        envs.append(added.assign(environment_id=ids))
        next_id += len(added)
        parts.append(rows)
        new_env.append(env_of[h.environment_id[rows]].astype(h.environment_id.dtype))
    take = np.concatenate(parts)

    def grown(column: np.ndarray) -> np.ndarray:
        return column[take] if len(column) == len(h) else column  # columns left empty stay empty

    return replace(h, case_id=grown(h.case_id), environment_id=np.concatenate(new_env), run_index=grown(h.run_index),
                   median_ms=grown(h.median_ms), p10_ms=grown(h.p10_ms), p90_ms=grown(h.p90_ms),
                   rel_ci_halfwidth=grown(h.rel_ci_halfwidth), throttled=grown(h.throttled),
                   codes={k: grown(v) for k, v in h.codes.items()},
                   environments=pd.concat(envs, ignore_index=True))


def relabelled(df: pd.DataFrame, sides: Sequence[DeviceSide]) -> pd.DataFrame:
    """A results frame with each side's device's rows also standing under its label."""
    if not sides or df.empty:
        return df
    keys = device_keys(df)
    extra = [df[keys == side.key].assign(device_name=side.label) for side in sides]
    return pd.concat([df, *extra], ignore_index=True)


def median_devices(rows: pd.DataFrame) -> pd.DataFrame:
    """One result per run and case of a side's rows: where a run holds several devices' results of
    a case, the median device's (among the usable ones; `n_devices` counts them all)."""
    if rows.empty or not rows.duplicated(["run_id", "case_key"]).any():
        return rows.assign(n_devices=1) if not rows.empty else rows
    good = pd.Series(False, index=rows.index)
    good[usable(rows).index] = True
    ranked = rows.assign(_bad=~good, _ms=pd.to_numeric(rows["median_ms"], errors="coerce"))
    ranked = ranked.sort_values(["run_id", "case_key", "_bad", "_ms"], kind="stable")
    groups = ranked.groupby(["run_id", "case_key"], sort=False)
    position = groups.cumcount()
    n_good = (~ranked["_bad"]).groupby([ranked["run_id"], ranked["case_key"]], sort=False).transform("sum")
    chosen = position == (n_good - 1).clip(lower=0) // 2
    return ranked[chosen].assign(n_devices=groups["_bad"].transform("size")[chosen]).drop(columns=["_bad", "_ms"])
