"""Tonight's status of every device wall, at once (pure, on the frame of deviations.wall_deviations).

A wall is held against two lines drawn from its robust spread (robust.py): with its deviation
tonight `d`, the 95 % interval of it, its deviations on the two nights before, and its own history
(history.py `own_history`),

- drain: `d` beyond the drain line, and the whole interval beyond the warn line;
- slow: beyond the warn line tonight, and either the whole interval beyond it or beyond it on one of
  the two nights before (two of the last three nights, tonight one of them); or its own history a
  regression (beyond its own line tonight and the night before: it left its place among its
  siblings) and tonight below them by at least half the warn line;
- suspect: beyond the warn line tonight only;
- ok otherwise.

The own-history path sees a device that was faster than most and fell to the slow side of the
pack: against the fleet alone its stable offset would hide the step.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from rooflab.reports.fleet.deviations import DEVICE_WALL
from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.fleet.robust import Z95, drain_line_pct, pct_array, warn_line_pct
from rooflab.reports.fleet.status import FleetStatus
from rooflab.reports.regressions.verdicts import Verdict


def sibling_status(deviation: np.ndarray, high: np.ndarray, before1: np.ndarray, before2: np.ndarray,
                   line: float | np.ndarray, drain: float | np.ndarray,
                   also_slow: np.ndarray | None = None) -> np.ndarray:
    """The status rule of the module doc, element-wise on percents of speed (negative: slower):
    tonight's deviation, the high end of its 95 % interval, the deviations of the two nights before
    (NaN: not measured), the warn and drain lines (positive); `also_slow` marks what another path
    (a device's own history) calls slow. Also the rule of a link matrix's ends and links
    (reports/fleet/links.py)."""
    beyond0 = deviation <= -line
    beyond1, beyond2 = before1 <= -line, before2 <= -line
    status = np.full(len(deviation), FleetStatus.OK.value, dtype=object)
    status[beyond0] = FleetStatus.SUSPECT.value
    slow = beyond0 & ((high <= -line) | beyond1 | beyond2)
    status[slow | (also_slow if also_slow is not None else False)] = FleetStatus.SLOW.value
    status[beyond0 & (deviation <= -drain) & (high <= -line)] = FleetStatus.DRAIN.value
    return status


def wall_statuses(walls: pd.DataFrame, history: pd.DataFrame, options: FleetOptions) -> pd.DataFrame:
    """One row per device wall measured tonight: status, deviation_pct, low_pct, high_pct, z,
    spread_pct, warn_line_pct, drain_line_pct, cases, and its own history's columns (`history`:
    own_history's frame, indexed by device wall)."""
    tonight = walls[walls["night"] == 0].join(history, on=DEVICE_WALL)
    before = walls[walls["night"].isin((1, 2))].pivot_table(index=DEVICE_WALL, columns="night", values="d",
                                                            aggfunc="first")
    out = tonight.join(before.rename(columns={1: "d1", 2: "d2"}), on=DEVICE_WALL)
    for column in ("d1", "d2"):
        if column not in out:
            out[column] = np.nan
    spread = 100.0 * out["sigma_wall"].to_numpy()
    line = warn_line_pct(spread, options.warn_pct)
    drain = drain_line_pct(spread, options.drain_pct)
    d, se = out["d"].to_numpy(), out["se"].to_numpy()
    deviation, low, high = pct_array(d), pct_array(d - Z95 * se), pct_array(d + Z95 * se)
    left_its_place = (out["verdict"] == Verdict.REGRESSION).to_numpy() & (deviation <= -line / 2)
    status = sibling_status(deviation, high, pct_array(out["d1"]), pct_array(out["d2"]), line, drain,
                            also_slow=left_its_place)
    return pd.DataFrame({
        **{k: out[k].to_numpy() for k in DEVICE_WALL}, "status": status, "deviation_pct": deviation,
        "low_pct": low, "high_pct": high, "z": d / out["sigma_wall"].to_numpy(), "spread_pct": spread,
        "warn_line_pct": line, "drain_line_pct": drain, "cases": out["cases"].to_numpy(),
        **{k: out[k].to_numpy() for k in history.columns},
    })
