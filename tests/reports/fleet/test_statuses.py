"""Tonight's status of a device wall, from hand-made deviations with known answers."""
from __future__ import annotations

import math

import pandas as pd

from rooflab.reports.fleet.deviations import DEVICE_WALL
from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.fleet.statuses import wall_statuses

H100, MEMORY = "NVIDIA H100 80GB HBM3", 80


def _rows(device: str, d_pct: list[float | None], se: float, sigma: float = 0.005) -> list[dict]:
    """Nights 0, 1, 2 of one device's wall; None: no result that night."""
    return [{"device_name": H100, "memory_bytes": MEMORY, "device_key": device, "wall": "hbm_rw", "night": k,
             "d": math.log1p(p / 100), "se": se, "cases": 2, "sigma_wall": sigma, "sigma_night": 0.004}
            for k, p in enumerate(d_pct) if p is not None]


def _history(walls: pd.DataFrame, regressed: tuple[str, ...] = ()) -> pd.DataFrame:
    """Own-history rows (history.own_history's columns): `regressed` devices left their place."""
    tonight = walls[walls["night"] == 0]
    return pd.DataFrame({
        **{k: tonight[k].to_numpy() for k in DEVICE_WALL},
        "verdict": ["regression" if k in regressed else "ok" for k in tonight["device_key"]],
        "change": -0.03, "z_own": -6.0, "nights": 14,
    }).set_index(DEVICE_WALL)


def test_each_status_from_its_rule() -> None:
    # a spread of 0.5 %: the warn line is 1.75 % (half the 3.5 % threshold), the drain line 7 %
    walls = pd.DataFrame([
        *_rows("ok", [-1.0, -3.0, -3.0], 0.004),  # inside the line tonight: the nights before do not matter
        *_rows("suspect", [-2.2, -1.0, -1.0], 0.004),  # beyond tonight only; the interval reaches -1.4 %
        *_rows("two-nights", [-2.2, -2.0, -1.0], 0.004),
        *_rows("two-of-three", [-2.2, None, -2.0], 0.004),
        *_rows("interval", [-3.0, 0.0, 0.0], 0.002),  # the whole interval (-3.4 .. -2.6 %) beyond the line
        *_rows("drain", [-8.0], 0.002),
        *_rows("wide", [-8.0], 0.04),  # beyond the drain line, but the interval reaches +0.3 %: not sure
        *_rows("noisy-wall", [-5.0, -5.0], 0.002, sigma=0.03),  # a 3 % spread: the warn line is 6 %
        # its own history regressed: slow once below its siblings by half the warn line (0.875 %)
        *_rows("left-its-place", [-1.0, -0.5], 0.004), *_rows("left-but-fast", [-0.5, 0.0], 0.004),
    ])
    got = wall_statuses(walls, _history(walls, ("left-its-place", "left-but-fast")), FleetOptions())
    got = got.set_index("device_key")
    assert got["status"].to_dict() == {
        "ok": "ok", "suspect": "suspect", "two-nights": "slow", "two-of-three": "slow", "interval": "slow",
        "drain": "drain", "wide": "suspect", "noisy-wall": "ok", "left-its-place": "slow", "left-but-fast": "ok"}
    assert got.loc["left-its-place", "verdict"] == "regression"
    assert got.loc["interval", "warn_line_pct"] == 1.75 and got.loc["noisy-wall", "warn_line_pct"] == 6.0
    assert got.loc["drain", "drain_line_pct"] == 7.0 and got.loc["noisy-wall", "drain_line_pct"] == 9.0
    assert math.isclose(got.loc["interval", "deviation_pct"], -3.0)
    half = 1.959964 * 0.002
    assert math.isclose(got.loc["interval", "high_pct"], 100 * math.expm1(math.log(0.97) + half))
    assert math.isclose(got.loc["interval", "z"], math.log(0.97) / 0.005)


def test_the_thresholds_move_the_lines() -> None:
    walls = pd.DataFrame(_rows("d", [-3.0, -3.0], 0.002, sigma=0.012))  # 3 spreads = 3.6 %: the line is 3.5 %
    assert wall_statuses(walls, _history(walls), FleetOptions()).loc[0, "status"] == "ok"
    assert wall_statuses(walls, _history(walls), FleetOptions(warn_pct=2.5)).loc[0, "status"] == "slow"
