"""Which physical device a result belongs to: the one rule of a series' device (docs/design.md, "Series").

A series is one case on one physical device, never a model. A device is named by its `device_key`:
its UUID when it has one (a GPU's; a CPU core's host and core, as the runner records it), else its
host and model (`host/device name`: a whole CPU, or a result imported from a file that names no
UUID). Results another tool measured (an imported nccl-tests or nvbench file) on that device are a
series of their own: `series_id` adds the tool to the key, so no series joins two tools.

By model (SeriesBy.MODEL, the explicit aggregate over a model's devices) a series is one case on one
device fingerprint (model, memory, driver, CUDA and torch majors; an imported device's tool), as
before series were kept per device.

The rule is written three ways over the same format: one result (`device_key`), a results frame
(`device_keys`, `series_ids`) and the history's numpy columns (reports.regressions.history_points).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from rooflab.db.series_query import HistoryColumns
from rooflab.reports.errors import ReportInputError
from rooflab.vocab import SeriesBy, Tool

HOST_SEPARATOR = "/"  # a device without a UUID: host/device name
TOOL_SEPARATOR = "@"  # another tool's series on a device: tool@device key


def device_key(device_uuid: str | None, host: str | None, device_name: str | None) -> str:
    """The physical device of one result: its UUID, else `host/device name`."""
    if isinstance(device_uuid, str) and device_uuid:
        return device_uuid
    return f"{host or ''}{HOST_SEPARATOR}{device_name or ''}"


def series_id(key: str, tool: str | None) -> str:
    """The series' device within its case: the device key, behind the tool when another tool measured it."""
    return key if not tool or tool == Tool.ROOFLAB else f"{tool}{TOOL_SEPARATOR}{key}"


def _column(df: pd.DataFrame, name: str) -> pd.Series:
    return df[name].astype(object) if name in df.columns else pd.Series(None, index=df.index, dtype=object)


def device_keys(df: pd.DataFrame) -> pd.Series:
    """`device_key` of every row of a results frame (device_uuid, host, device_name; a missing
    column reads as empty): each distinct (uuid, host, name) worked out once."""
    parts = pd.DataFrame({"u": _column(df, "device_uuid"), "h": _column(df, "host"), "n": _column(df, "device_name")})
    if parts.empty:
        return pd.Series([], index=df.index, dtype=object)
    has_uuid = parts["u"].notna() & (parts["u"] != "")
    out = parts["u"].where(has_uuid)
    rest = parts.loc[~has_uuid, ["h", "n"]]
    if len(rest):
        distinct = rest.drop_duplicates()
        keys = {(h, n): device_key(None, h, n) for h, n in zip(distinct["h"], distinct["n"], strict=True)}
        out.loc[~has_uuid] = [keys[(h, n)] for h, n in zip(rest["h"], rest["n"], strict=True)]
    return out.astype(object)


MIN_PREFIX = 6  # a device key may be named by a prefix of at least this many characters


def device_matches(df: pd.DataFrame, text: str) -> pd.Series | None:
    """The rows of a results frame on the physical device `text` names: its device key, a prefix
    (MIN_PREFIX characters or more, case-insensitive) of exactly one device key, or its host; None
    when it names none of them (it may name a model). ReportInputError for a prefix of several keys."""
    wanted = text.strip()
    if not wanted or df.empty:
        return None
    keys = device_keys(df).astype(str)
    exact = keys == wanted
    if bool(exact.any()):
        return exact
    if len(wanted) >= MIN_PREFIX:
        prefix = keys.str.lower().str.startswith(wanted.lower())
        found = sorted(keys[prefix].unique())
        if len(found) > 1:
            raise ReportInputError(f"device {text!r} is ambiguous: it begins {len(found)} device keys "
                                   f"({', '.join(found[:5])}{', ...' if len(found) > 5 else ''})")
        if found:
            return prefix
    on_host = _column(df, "host") == wanted
    return on_host if bool(on_host.any()) else None


def series_ids(df: pd.DataFrame, by: SeriesBy) -> pd.Series:
    """Each row's series within its case: by device its device key (`series_id`), by model its fingerprint."""
    if by == SeriesBy.MODEL:
        fp = df["device_fingerprint"] if "device_fingerprint" in df.columns else _column(df, "device_name")
        return fp.astype(str).astype(object)
    keys = device_keys(df)
    tools = _column(df, "tool")
    other = tools.notna() & (tools != str(Tool.ROOFLAB))
    if not bool(other.any()):
        return keys
    out = keys.copy()
    out.loc[other] = [series_id(k, t) for k, t in zip(keys[other], tools[other], strict=True)]
    return out


@dataclass(frozen=True)
class HistorySeries:
    """Each result's series within its case, over the history's columns: `codes[i]` indexes `ids`
    (the series, `series_ids`' value) and `keys` (its device key; None by model)."""

    codes: np.ndarray  # int32 per result
    ids: tuple[str, ...]
    keys: tuple[str | None, ...]


def history_series(h: HistoryColumns, by: SeriesBy) -> HistorySeries:
    """`series_ids` of every result of the history's columns, by numpy (no string per result):
    by model each environment row; by device each distinct (UUID, tool), and for a result without a
    UUID (host of its run, device name of its environment, tool)."""
    envs = h.environments.reset_index(drop=True)
    env_row = np.full(int(envs["environment_id"].max()) + 1 if len(envs) else 1, -1, dtype=np.int64)
    env_row[envs["environment_id"].to_numpy()] = np.arange(len(envs))
    rows = env_row[h.environment_id]
    if by == SeriesBy.MODEL:
        fps = tuple(str(f) for f in envs["device_fingerprint"])
        return HistorySeries(rows.astype(np.int32), fps, (None,) * len(fps))
    uuids = list(h.values["device_uuid"])
    uuid = h.codes["device_uuid"].astype(np.int64)
    if "" in uuids:  # an empty UUID is none
        uuid = np.where(uuid == uuids.index(""), -1, uuid)
    has = uuid >= 0
    host_codes, hosts = pd.factorize(h.runs["host"].astype(object).fillna(""))
    name_codes, names = pd.factorize(envs["device_name"].astype(object).fillna(""))
    host = np.where(has, -1, np.asarray(host_codes, dtype=np.int64)[h.run_index])
    name = np.where(has, -1, np.asarray(name_codes, dtype=np.int64)[rows])
    tool = h.codes["tool"].astype(np.int64)
    n_host, n_name, n_tool = len(hosts) + 1, len(names) + 1, len(h.values["tool"]) + 1
    combined = (((uuid + 1) * n_host + host + 1) * n_name + name + 1) * n_tool + tool + 1
    unique, codes = np.unique(combined, return_inverse=True)
    ids, keys = [], []
    for value in unique.tolist():
        value, t = divmod(value, n_tool)
        value, n = divmod(value, n_name)
        u, ho = divmod(value, n_host)
        key = device_key(uuids[u - 1] if u else None, str(hosts[ho - 1]) if ho else None,
                         str(names[n - 1]) if n else None)
        keys.append(key)
        ids.append(series_id(key, h.values["tool"][t - 1] if t else None))
    return HistorySeries(codes.astype(np.int32), tuple(ids), tuple(keys))
