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
    UUID (host of its run, device name of its environment, tool). A few bytes a result: a year's
    history is 2.19 M of them."""
    envs = h.environments.reset_index(drop=True)
    env_row = np.full(int(envs["environment_id"].max()) + 1 if len(envs) else 1, -1, dtype=np.int64)
    env_row[envs["environment_id"].to_numpy()] = np.arange(len(envs))
    if by == SeriesBy.MODEL:
        fps = tuple(str(f) for f in envs["device_fingerprint"])
        return HistorySeries(env_row[h.environment_id].astype(np.int32), fps, (None,) * len(fps))
    uuids, tools = list(h.values["device_uuid"]), list(h.values["tool"])
    uuid, tool = h.codes["device_uuid"], h.codes["tool"]
    missing = (uuid < 0) | (uuid == uuids.index("")) if "" in uuids else uuid < 0
    n_tool = len(tools) + 1
    one_tool = len(tool) == 0 or int(tool.min()) == int(tool.max())
    # a result with a UUID: its series is (UUID, tool), numbered through a table of every pair
    pair = uuid if one_tool else uuid.astype(np.int64) * n_tool + tool + 1
    size = (len(uuids) + 1) * (1 if one_tool else n_tool)
    used = np.zeros(size, dtype=bool)
    used[pair[~missing]] = True
    numbered = np.full(size, -1, dtype=np.int32)
    numbered[used] = np.arange(int(used.sum()), dtype=np.int32)
    codes = numbered[np.where(missing, 0, pair)]
    ids, keys = [], []
    for value in np.flatnonzero(used).tolist():
        u, t = (value, int(tool[0]) + 1 if len(tool) else 0) if one_tool else divmod(value, n_tool)
        keys.append(uuids[u])
        ids.append(series_id(uuids[u], tools[t - 1] if t else None))
    rest = np.flatnonzero(missing)  # results without a UUID (a whole CPU, an import): host, model, tool
    if len(rest):
        hosts = h.runs["host"].astype(object).fillna("").to_numpy()[h.run_index[rest]]
        names = envs["device_name"].astype(object).fillna("").to_numpy()[env_row[h.environment_id[rest]]]
        named = pd.DataFrame({"h": hosts, "n": names, "t": tool[rest]})
        local, distinct = pd.factorize(pd.MultiIndex.from_frame(named))
        codes[rest] = local + len(ids)
        for host, name, t in distinct:
            key = device_key(None, str(host), str(name))
            keys.append(key)
            ids.append(series_id(key, tools[t] if t >= 0 else None))
    return HistorySeries(codes.astype(np.int32, copy=False), tuple(ids), tuple(keys))
