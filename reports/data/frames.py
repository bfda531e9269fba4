"""Small helpers over the results DataFrame (the columns of `db.query.results`)."""
from __future__ import annotations

import json
from typing import Any

import pandas as pd

from rooflab.db.usable import figure_mask, usable_mask
from rooflab.reports.errors import ReportInputError
from rooflab.suite.quality import noisy
from rooflab.vocab import DeviceKind, Quality, ResultStatus


def usable(df: pd.DataFrame) -> pd.DataFrame:
    """Rows with a performance figure, not throttled (db/usable.py: status ok, a positive median)."""
    if df.empty:
        return df
    throttled = (df["throttled"].fillna(False).astype(bool) if "throttled" in df.columns
                 else pd.Series(False, index=df.index))
    return df[usable_mask(df["status"] == ResultStatus.OK, pd.to_numeric(df["median_ms"], errors="coerce"), throttled)]


def with_figure(df: pd.DataFrame) -> pd.DataFrame:
    """Rows with a performance figure (db/usable.py: status ok, a positive median), throttled or not."""
    if df.empty:
        return df
    return df[figure_mask(df["status"] == ResultStatus.OK, pd.to_numeric(df["median_ms"], errors="coerce"))]


def quality_of(df: pd.DataFrame) -> pd.Series:
    """Each row's quality: the stored one ('good', 'noisy', 'contended'); for a result stored before
    quality was recorded, judged here by suite.quality's noise rule from its CI and stop reason
    (contention cannot be judged after the fact). The worker, the ceilings and the regression gate
    all judge through this one rule."""
    stored = df["quality"] if "quality" in df.columns else pd.Series(None, index=df.index, dtype=object)
    derived = pd.Series(str(Quality.GOOD), index=df.index, dtype=object)
    if "stop_reason" in df.columns:
        rel = (pd.to_numeric(df["rel_ci_halfwidth"], errors="coerce") if "rel_ci_halfwidth" in df.columns
               else pd.Series(float("nan"), index=df.index))
        derived = derived.where(~noisy(rel.to_numpy(), df["stop_reason"].to_numpy()), str(Quality.NOISY))
    return stored.astype(object).where(stored.notna(), derived)


def trustworthy(df: pd.DataFrame) -> pd.DataFrame:
    """Usable rows (see `usable`) whose quality is good: the only ones that may set a ceiling or
    enter a baseline."""
    rows = usable(df)
    if rows.empty:
        return rows
    return rows[quality_of(rows) == str(Quality.GOOD)]


def params_of(value: Any) -> dict[str, Any]:
    """The params column as a dict (it is a JSON object, or already a dict)."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value:
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def is_cpu(rows: pd.DataFrame) -> bool:
    """Whether the rows (of one device) were measured on a CPU: their `device_kind` column."""
    kinds = rows["device_kind"].dropna() if "device_kind" in rows.columns else pd.Series(dtype=object)
    return not kinds.empty and str(kinds.iloc[0]) == DeviceKind.CPU


def device_names(df: pd.DataFrame) -> list[str]:
    if df.empty:
        return []
    return sorted(str(v) for v in df["device_name"].dropna().unique())


def select_device(df: pd.DataFrame, device: str) -> tuple[str, pd.DataFrame]:
    """Rows of one device, chosen by exact name, fingerprint prefix, device kind ("cpu", "cuda": when
    only one device of that kind is present) or case-insensitive name substring.

    Returns (device name, rows). Raises ReportInputError naming the devices the frame holds.
    """
    names = device_names(df)
    if not df.empty and device:
        text = device.strip().lower()
        exact = [n for n in names if n.lower() == text]
        if exact:
            return exact[0], df[df["device_name"] == exact[0]]
        fps = df["device_fingerprint"].astype(str)
        by_fp = df[fps.str.lower().str.startswith(text)] if len(text) >= 6 else df.iloc[0:0]
        fp_names = sorted(by_fp["device_name"].dropna().unique())
        if len(fp_names) == 1:
            return str(fp_names[0]), by_fp
        if "device_kind" in df.columns:
            of_kind = df["device_kind"].astype(str).str.lower() == text
            kind_names = sorted(df.loc[of_kind, "device_name"].dropna().unique())
            if len(kind_names) == 1:  # "cpu" or "cuda" when the database holds one such device
                return str(kind_names[0]), df[df["device_name"] == kind_names[0]]
        partial = [n for n in names if text in n.lower()]
        if len(partial) == 1:
            return partial[0], df[df["device_name"] == partial[0]]
        if len(partial) > 1:
            raise ReportInputError(f"device {device!r} is ambiguous: it matches {', '.join(partial)}")
    allowed = ", ".join(names) if names else "none (the database holds no results yet)"
    raise ReportInputError(f"unknown device {device!r}; devices in the database: {allowed}")


def first_value(df: pd.DataFrame, column: str, default: Any = None) -> Any:
    """The first non-null value of a column, or `default`."""
    if column not in df.columns or df.empty:
        return default
    values = df[column].dropna()
    return values.iloc[0] if len(values) else default
