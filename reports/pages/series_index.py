"""The index of every series of a fleet's history (series.html): where the history pages draw the
flagged series only (reports.pages.history_judge.judge_fleet_history), every series is listed here
with its verdict, newest median and change, searchable by case, device, host and verdict.

The page's data is coded: the case keys and the devices once each in a table, every series a row of
numbers into them (128,000 series: about 5 MB).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rooflab.reports.pages.history_page import VERDICT_ORDER, safe_json
from rooflab.reports.pages.templating import environment
from rooflab.reports.regressions.gate import SeriesVerdict

FILE = "series.html"


def index_data(verdicts: Sequence[SeriesVerdict]) -> dict[str, Any]:
    """The page's JSON document: `cases` (case keys), `devices` ([series id, host, device name]), and per
    series (`rows`, parallel lists): its case, its device, its verdict (an index into `verdicts`), whether
    it drifts, its points, its newest median and its relative change against the baseline."""
    cases: dict[str, int] = {}
    devices: dict[tuple[str, str, str], int] = {}
    rows: dict[str, list[Any]] = {"case": [], "dev": [], "v": [], "d": [], "n": [], "ms": [], "ch": []}
    for v in sorted(verdicts, key=lambda v: v.key):
        d = v.as_dict()
        device = (v.key[1], v.host or "", v.device_name)
        rows["case"].append(cases.setdefault(v.case_key, len(cases)))
        rows["dev"].append(devices.setdefault(device, len(devices)))
        rows["v"].append(VERDICT_ORDER.index(v.status))
        rows["d"].append(1 if v.drift is not None else 0)
        rows["n"].append(d["n_points"])
        rows["ms"].append(None if d["latest_ms"] is None else float(f"{d['latest_ms']:.6g}"))
        rows["ch"].append(None if d["rel_change"] is None else round(float(d["rel_change"]), 5))
    return {"verdicts": list(VERDICT_ORDER), "cases": list(cases), "devices": [list(k) for k in devices],
            "rows": rows}


def write_series_index(out_dir: Path, verdicts: Sequence[SeriesVerdict], *, has_compare: bool) -> Path:
    """series.html in `out_dir`: every series of `verdicts`, searchable."""
    flagged = sum(v.flagged for v in verdicts)
    html = environment().get_template(FILE).render(
        title="rooflab: every series", n_series=len(verdicts), n_flagged=flagged, has_compare=has_compare,
        data_json=safe_json(index_data(verdicts)))
    path = out_dir / FILE
    path.write_text(html, encoding="utf-8")
    return path
