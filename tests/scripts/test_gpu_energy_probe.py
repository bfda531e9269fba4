"""scripts/gpu_energy_probe.py off a GPU: its period and power arithmetic on a planted counter, the
window table against a reference, and the skip it reports without CUDA."""
from __future__ import annotations

import random

import pytest

from tests.scripts.load import load_script


@pytest.fixture(scope="module")
def probe():
    return load_script("gpu_energy_probe")


def planted_counter(period_s: float, power_w: float, read_s: float, seconds: float, seed: int):
    """Tight-loop readings (time s, mJ) of a counter that adds power x period at every period (with
    a random phase), read every read_s with a little jitter."""
    rng = random.Random(seed)
    phase = rng.uniform(0, period_s)
    out, t = [], 100.0
    while t < 100.0 + seconds:
        updates = int((t - 100.0 + phase) / period_s)
        out.append((t, 5e6 + updates * power_w * period_s * 1e3))
        t += read_s * rng.uniform(0.5, 1.5)
    return out


@pytest.mark.parametrize("period_ms, power_w", [(100.0, 612.0), (20.0, 85.0), (1.0, 700.0)])
def test_period_and_power_of_a_planted_counter(probe, period_ms, power_w):
    readings = planted_counter(period_ms / 1e3, power_w, 20e-6, 3.0, seed=int(period_ms))
    p = probe.period("busy", readings)
    assert p.median_ms == pytest.approx(period_ms, rel=0.03)
    assert p.p10_ms == pytest.approx(period_ms, rel=0.05) and p.p90_ms == pytest.approx(period_ms, rel=0.05)
    assert p.increment_median_mj == pytest.approx(power_w * period_ms, rel=1e-9)
    assert p.mean_power_w == pytest.approx(power_w, rel=0.01)
    assert p.read_us == pytest.approx(20.0, rel=0.05)
    assert p.updates == pytest.approx(3000 / period_ms, abs=1)


def test_a_counter_that_never_moves_has_no_period_or_power(probe):
    p = probe.period("idle", [(t / 1e3, 7.0) for t in range(100)])
    assert (p.updates, p.median_ms, p.mean_power_w, p.increment_median_mj) == (0, None, None, None)


def test_window_errors_against_the_reference(probe):
    w = probe.window_errors(0.25, [690.0, None, 721.0, None, 700.0], 700.0)
    assert (w.windows, w.with_power, w.power_w) == (5, 3, (690.0, 721.0, 700.0))
    assert w.worst_error_pct == pytest.approx(3.0)
    assert probe.window_errors(0.1, [None, None], 700.0).worst_error_pct is None


def test_rooflab_power_from_the_same_planted_counter_read_every_50_ms(probe):
    """The worker's power_w (runners.machine.clocks.power_from_counter) on a 100 ms counter read at its
    50 ms poll: within 10 % over 2 s, and None over 0.1 s (fewer than two updates seen)."""
    from rooflab.runners.machine.clocks import EnergyReading, power_from_counter

    long = planted_counter(0.1, 650.0, 0.05, 2.0, seed=3)
    assert power_from_counter([EnergyReading(e, t) for t, e in long]) == pytest.approx(650.0, rel=0.10)
    short = planted_counter(0.1, 650.0, 0.05, 0.1, seed=4)
    assert power_from_counter([EnergyReading(e, t) for t, e in short]) is None


def test_markdown_names_every_state_and_window(probe):
    periods = [probe.period("idle", planted_counter(0.1, 70.0, 1e-4, 1.0, 1)),
               probe.period("busy", planted_counter(0.1, 690.0, 1e-4, 1.0, 2))]
    text = probe.markdown("GPU X", periods, [probe.window_errors(0.5, [680.0, None], 690.0)], 688.0, 700.0)
    assert "| idle |" in text and "| busy |" in text and "| 0.5 | 2 | 1 | 680 | 1.4 |" in text
    assert "688.0 W; enforced limit 700.0 W" in text


def test_without_cuda_it_says_skip_and_exits_3(probe, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert probe.main([]) == 3
    assert capsys.readouterr().out.startswith("SKIP: no CUDA device")
