"""The report's layer breakdown section: per device, each profiled block as an inline SVG stacked
bar (by part and by wall), its parts' table, MFU and the fusion estimate (reports.walls.breakdown).

Like the rest of a device page, the section shows only the runs the page shows (reports.roofs.shown_runs):
the profiles of other runs are named, not drawn."""
from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from markupsafe import Markup

from rooflab.reports.data.side_reads import LayerProfiles
from rooflab.reports.roofs.models import DeviceCeilings
from rooflab.reports.walls.breakdown import breakdowns, label, split_profiles, stacked_bars_svg


def section(layer: LayerProfiles | None, rows: pd.DataFrame, dc: DeviceCeilings, runs: Sequence[str]) -> dict:
    """The template context of one device's section, from the profiles of `runs` (the runs the page
    shows): {"svg", "blocks", "other_runs"}; `other_runs` names this device's runs with profiles
    that are not shown, newest first."""
    empty: dict = {"svg": None, "blocks": [], "other_runs": []}
    if layer is None or layer[0].empty:
        return empty
    profiles, parts = layer
    mine = split_profiles(profiles, rows)
    shown = mine["run_id"].isin(list(runs))
    others = mine[~shown].sort_values(["run_order", "run_id"], ascending=False)["run_id"].drop_duplicates()
    empty["other_runs"] = [str(r) for r in others]
    items = breakdowns(mine[shown], parts, rows, dc)
    if not items:
        return empty
    return {
        "svg": Markup(stacked_bars_svg(items)),
        "blocks": [{**b.as_dict(), "label": label(b), "unaccounted_ms": b.unaccounted_ms} for b in items],
        "other_runs": empty["other_runs"],
    }
