"""Charts of many points draw the points as one bitmap layer; small charts stay all vector."""
from __future__ import annotations

import numpy as np

from rooflab.reports.pages import plots
from rooflab.reports.roofs.ceilings import compute_ceilings
from tests.reports.synth import H100, device_rows, frame, row


def _many(n: int) -> list[dict]:
    rng = np.random.default_rng(0)
    return [row(op="copy", family="pointwise", params={"n": int(k)}, median_ms=float(ms), flops=0 if i % 2 else int(k),
                nbytes=8 * int(k), run_id=f"run-{i % 50}", run_order=i % 50)
            for i, (k, ms) in enumerate(zip(rng.integers(1 << 10, 1 << 28, n), rng.uniform(0.01, 5.0, n), strict=True))]


def test_a_few_points_are_vector_markers_and_many_are_one_bitmap() -> None:
    small = frame(device_rows())
    big = frame(device_rows() + _many(2 * plots.RASTERIZE_ABOVE + 10))
    for df in (small, big):
        dc = compute_ceilings(df, H100)
        roof, bw = plots.roofline_svg(df, dc), plots.bandwidth_svg(df, dc.l2_bytes, H100)
        for svg in (roof, bw):
            assert svg.lstrip().startswith("<?xml") and "</svg>" in svg
            assert ("<image" in svg) == (df is big)
        if df is big:
            assert len(roof) < 2_000_000
