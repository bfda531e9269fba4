"""The report's layer breakdown section: per device, each profiled block as an inline SVG stacked
bar (by part and by wall), its parts' table, MFU and the fusion estimate (reports.breakdown)."""
from __future__ import annotations

from typing import Any

import pandas as pd
from markupsafe import Markup

from rooflab.reports.breakdown import breakdowns, label, split_profiles, stacked_bars_svg
from rooflab.reports.ceilings import DeviceCeilings

LayerProfiles = tuple[pd.DataFrame, pd.DataFrame]  # (profiles, parts) as db.layer_query gives them


def load_layer_profiles(url: Any) -> LayerProfiles:
    """(profiles, parts) of the database at `url` (or a db.handle.Database); empty frames when
    nothing is stored yet."""
    from rooflab.db.handle import schema_state
    from rooflab.db.layer_query import layer_profiles

    if schema_state(url).kind == "empty":
        return pd.DataFrame(), pd.DataFrame()
    return layer_profiles(url)


def section(layer: LayerProfiles | None, rows: pd.DataFrame, dc: DeviceCeilings) -> dict:
    """The template context of one device's section ({"svg": None, "blocks": []} without blocks)."""
    if layer is None or layer[0].empty:
        return {"svg": None, "blocks": []}
    profiles, parts = layer
    items = breakdowns(split_profiles(profiles, rows), parts, rows, dc)
    if not items:
        return {"svg": None, "blocks": []}
    return {
        "svg": Markup(stacked_bars_svg(items)),
        "blocks": [{**b.as_dict(), "label": label(b), "unaccounted_ms": b.unaccounted_ms} for b in items],
    }
