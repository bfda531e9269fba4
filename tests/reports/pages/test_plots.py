"""Charts of many points draw the points as one bitmap layer; small charts stay all vector."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rooflab.reports.pages import plots
from rooflab.reports.roofs.ceilings import compute_ceilings
from tests.reports.synth import H100, device_rows, frame, row, stream


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


def test_log_axes_are_labelled_in_plain_text_with_superscripts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A log axis's labels are written without mathtext (parsed anew per label and figure, about
    half of a roofline's drawing time): 10³, 10⁻², 2×10⁰, and the roofline draws no mathtext at all."""
    from matplotlib.mathtext import MathTextParser

    labels = plots.PowerLabels(10)
    assert [labels(v) for v in (1000.0, 0.01, 1.0)] == ["10³", "10⁻²", "10⁰"]
    with plots._figure() as (fig, ax):
        plots.log_scale(ax, "y")
        ax.plot([1.0, 2.0], [2.0, 7.0])  # less than a decade: the minor ticks are labelled too
        fig.canvas.draw()
        minor = [t.get_text() for t in ax.get_yticklabels(minor=True) if t.get_text()]
    assert minor and minor[0] == "2×10⁰" and all("$" not in m and "×10⁰" in m for m in minor), minor
    parses: list[str] = []
    original = MathTextParser.parse

    def counted(self: MathTextParser, text: str, *args: Any, **kwargs: Any) -> Any:
        parses.append(text)
        return original(self, text, *args, **kwargs)

    monkeypatch.setattr(MathTextParser, "parse", counted)
    df = frame(device_rows())
    svg = plots.roofline_svg(df, compute_ceilings(df, H100))
    assert "</svg>" in svg and parses == []


def test_the_roofline_draws_the_three_memory_roofs_labelled() -> None:
    """hbm_rw (the triad), hbm_ro (the dot) and hbm_wo (a cold fill of 512 MiB), each labelled with
    its figure; without a fill, no write roof is drawn."""
    fill = stream("stream_fill", 128 << 20, 2800.0, split=True)
    with_fill = frame(device_rows(hbm_gbps=3000.0) + [fill])
    svg = plots.roofline_svg(with_fill, compute_ceilings(with_fill, H100))
    assert "HBM 3,000 GB/s" in svg and "HBM read 3,150 GB/s" in svg and "HBM write 2,800 GB/s" in svg
    without = frame(device_rows(hbm_gbps=3000.0))
    assert "HBM write" not in plots.roofline_svg(without, compute_ceilings(without, H100))
