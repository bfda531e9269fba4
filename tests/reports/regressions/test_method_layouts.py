"""method_layouts worked out on arrays against the rule written out series by series (what it was):
random spans with single-way series, overlaps, ties of first starts and runs that are not named."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from rooflab.reports.regressions.database_check import MethodLayout, method_layouts


def _by_series(spans: pd.DataFrame) -> dict[tuple[str, str], MethodLayout | None]:
    """The rule, one series at a time: contiguous when, by first start, each span ends before the next."""
    out: dict[tuple[str, str], MethodLayout | None] = {}
    for key, rows in spans.groupby(["case_key", "series"], sort=False):
        if len(rows) < 2:
            continue
        ordered = rows.sort_values("first_ok_start")
        firsts, lasts = list(ordered["first_ok_start"]), list(ordered["last_ok_start"])
        contiguous = all(lasts[i] < firsts[i + 1] for i in range(len(rows) - 1))
        run = ordered["first_ok_run"].iloc[-1]
        out[(str(key[0]), str(key[1]))] = MethodLayout(len(rows), str(run)) if contiguous and isinstance(run, str) \
            else None
    return out


def _spans(seed: int, n_series: int = 300) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = []
    for s in range(n_series):
        ways, day = int(rng.integers(1, 5)), 0
        for w in range(ways):
            start = day + int(rng.integers(-3, 4)) if rng.random() < 0.2 else day  # some overlap or tie
            end = start + int(rng.integers(0, 30))
            day = end + int(rng.integers(1, 5))
            run = None if rng.random() < 0.05 else f"run-{start:04d}"
            rows.append({"case_key": f"case-{s % 37}", "series": f"GPU-{s}", "flush_method": f"m{w}",
                         "first_ok_start": t0 + timedelta(days=start), "last_ok_start": t0 + timedelta(days=end),
                         "first_ok_run": run})
    return pd.DataFrame(rows).sample(frac=1.0, random_state=seed)


@pytest.mark.parametrize("seed", range(6))
def test_the_layouts_on_arrays_are_those_of_the_rule(seed):
    spans = _spans(seed)
    expected = _by_series(spans)
    assert method_layouts(spans) == expected
    assert any(v is None for v in expected.values()) and any(v is not None for v in expected.values())


def test_an_environment_change_with_a_method_change_is_read_whole():
    spans = _spans(1, 40)
    environments = spans.rename(columns={"flush_method": "device_fingerprint"})
    both = method_layouts(spans, environments)
    assert all(both[k] is None for k in _by_series(spans))
