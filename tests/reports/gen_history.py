"""A generated nightly history (results frame) with planted changes, for the history page's tests.

`nightly_history(nights, cases, devices)` gives `nights` runs of `cases` cases on each of `devices`
devices (series = cases x devices), each night's median at 1 % noise around its level, and plants,
on the first device: a step of +12 % in the newest STEP_NIGHTS nights of the first case (a
regression with a change point), a pace change (back_to_back -> idle) at night PACE_AT and a
flush-method change (read_sweep -> write_sweep) at night FLUSH_AT of the second case (two segment
starts), one throttled night in the third case, and a driver update from night DRIVER_AT in the
fourth case (a new device fingerprint on the same GPU: a segment of its series, not a new series).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tests.reports.synth import H100, row

DEVICES = (H100, "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA B200")
OPS = ("copy", "scale", "add", "triad", "gelu", "softmax", "sum", "matmul")
STEP_NIGHTS = 6
STEP = 0.12
FLUSH_AT = 60
PACE_AT = 50
THROTTLED_AT = 40
DRIVER_AT = 70
NEW_DRIVER = "560.35"


def case_params(i: int) -> tuple[str, str, dict, str]:
    op = OPS[i % len(OPS)]
    family = {"softmax": "reduction", "sum": "reduction", "matmul": "gemm"}.get(op, "pointwise")
    dtype = ("float32", "bfloat16")[(i // len(OPS)) % 2]
    params = {"m": 256 * (1 + i), "n": 256, "k": 256} if op == "matmul" else {"n": 4096 * (i + 1)}
    if family == "reduction":
        params = {"rows": 64 * (i + 1), "cols": 1024}
    return op, family, params, dtype


def nightly_history(nights: int = 90, cases: int = 100, devices: int = 2, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for d in range(devices):
        name = DEVICES[d]
        for i in range(cases):
            op, family, params, dtype = case_params(i)
            level = 0.05 * (1 + i % 17) * (1 + d)
            values = level * (1 + 0.01 * rng.standard_normal(nights))
            if d == 0 and i == 0:
                values[-STEP_NIGHTS:] *= 1 + STEP
            for night in range(nights):
                updated = d == 0 and i == 3 and night >= DRIVER_AT
                r = row(op=op, family=family, dtype=dtype, params=params, median_ms=float(values[night]),
                        flops=1e6 * (i + 1), nbytes=1e6 * (i + 2), device_name=name,
                        fingerprint=f"fp-{d}-{NEW_DRIVER}" if updated else f"fp-{d}",
                        driver_version=NEW_DRIVER if updated else "550.54",
                        run_id=f"nightly-{night:03d}", run_order=night + 1, cache="hot" if i % 5 == 0 else "cold",
                        throttled=d == 0 and i == 2 and night == THROTTLED_AT)
                r["flush_method"] = "none" if r["cache"] == "hot" else (
                    "write_sweep" if d == 0 and i == 1 and night >= FLUSH_AT else "read_sweep")
                r["pace"] = "idle" if d == 0 and i == 1 and night >= PACE_AT else "back_to_back"
                r["git_commit"] = f"{night:04d}c0ffee"
                r["device_uuid"] = f"GPU-{d}"
                r["suite"] = "nightly"
                rows.append(r)
    return pd.DataFrame(rows)


def planted_keys(frame: pd.DataFrame) -> dict[str, str]:
    """The case keys of the planted series (on the first device)."""
    first = frame[frame["device_name"] == DEVICES[0]].drop_duplicates("case_key")["case_key"].tolist()
    return {"step": first[0], "flush": first[1], "throttled": first[2], "driver": first[3]}
