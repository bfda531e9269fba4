"""The public Python API (rooflab/api.py): measure, its typed result, and a cheap `import rooflab`."""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from typing import Any

import pytest

import rooflab

FAST: dict[str, Any] = {"warmup_ms": 1, "warmup_calls": 1, "min_samples": 8, "min_time_ms": 1, "max_time_ms": 150}


def test_measure_times_a_known_sleep_and_derives_its_statistics_from_the_raw_samples():
    result = rooflab.measure(lambda: time.sleep(0.003), device="cpu", cache="hot", **FAST)
    assert isinstance(result, rooflab.MeasureResult)
    assert result.n_samples == len(result.samples_ms) >= 8
    assert result.median_ms == pytest.approx(statistics.median(result.samples_ms))
    assert result.min_ms == min(result.samples_ms) and result.max_ms == max(result.samples_ms)
    assert 3.0 <= result.median_ms < 100.0  # a 3 ms sleep, timed with perf_counter
    assert result.clock == "perf_counter" and result.cache == "hot" and result.flush_bytes == 0
    assert result.first_call_ms >= 3.0
    assert result.stop_reason in ("converged", "max_time", "max_samples")
    assert result.device == "cpu" and result.device_name == result.machine.environment.device_name
    assert result.machine.clocks.throttled is False  # no NVML on a CPU


def test_cold_measure_flushes_and_the_result_is_plain_json():
    result = rooflab.measure(lambda: sum(range(1000)), device="cpu", **FAST)
    assert result.cache == "cold" and result.flush_bytes > 0 and result.flush_method != "none"
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert data["samples_ms"] == list(result.samples_ms)
    env = data["machine"]["environment"]
    assert env["device_fingerprint"] == result.device_fingerprint and env["device_kind"] == "cpu"
    assert data["machine"]["clocks"]["throttled"] is False


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"max_samples": 0}, "max-samples"),
        ({"target_precision": 2.0}, "target-precision"),
        ({"max_time_ms": "fast"}, "max-time-ms"),
        ({"warmup": 25}, "unknown timing setting(s) warmup"),
        ({"cache": "lukewarm"}, "cache 'lukewarm'"),
        ({"timing_mode": "batch"}, "timing_mode 'batch'"),
        ({"cache": "cold", "timing_mode": "graph"}, "graph mode"),
        ({"flush_method": "memset"}, "--flush-method: must be one of write_sweep, read_sweep; got 'memset'"),
        ({"pace": "slow"}, "--pace: must be one of back_to_back, idle; got 'slow'"),
    ],
)
def test_bad_settings_raise_one_clear_value_error(kwargs, needle):
    calls = []
    with pytest.raises(ValueError, match=None) as info:
        rooflab.measure(lambda: calls.append(1), device="cpu", **kwargs)
    assert needle in str(info.value)
    assert calls == []  # nothing ran


def test_measure_takes_the_flush_method_and_the_pace_and_records_them():
    default = rooflab.measure(lambda: sum(range(1000)), device="cpu", **FAST)
    assert (default.flush_method, default.pace) == ("write_sweep", "back_to_back")  # cold means after a write
    chosen = rooflab.measure(lambda: time.sleep(0.001), device="cpu", flush_method="read_sweep", pace="idle", **FAST)
    assert (chosen.flush_method, chosen.pace) == ("read_sweep", "idle")
    assert chosen.sampling_ms >= 2 * sum(chosen.samples_ms)  # a rest as long as each sample after it
    assert chosen.to_dict()["pace"] == "idle"


def test_import_rooflab_loads_neither_torch_nor_pandas():
    code = ("import sys, rooflab; rooflab.register; "
            "print(sorted(m for m in ('torch', 'pandas', 'sqlalchemy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'mesure'"):
        rooflab.mesure  # noqa: B018 - the attribute access is what raises


def _known_result(samples_ms: tuple[float, ...], **observed: Any) -> rooflab.MeasureResult:
    """A MeasureResult built by hand from samples whose statistics the engine derives."""
    from rooflab.record import EnvironmentRecord, MachineObservation, TimingMethod
    from rooflab.runners.engine.stats import summarize
    from rooflab.runners.machine.clocks import NO_REPORT

    env = EnvironmentRecord(device_fingerprint="fp-test", device_name="NVIDIA H100 80GB HBM3", device_kind="cuda",
                            identity={}, info={})
    method = TimingMethod(cache="cold", timing_mode="graph", clock="cuda_event", stop_reason="converged",
                          launches_per_sample=20)
    return rooflab.MeasureResult(samples_ms=samples_ms, stats=summarize(samples_ms), method=method,
                                 observation=MachineObservation(**observed), device="cuda:0",
                                 machine=rooflab.MachineState(env, NO_REPORT))


def test_a_result_prints_as_a_short_summary_of_its_median_interval_samples_stop_and_device():
    # 11 samples 10, 11, ..., 20 us: median 15 us; the 95 % CI of the median of 11 is the 2nd to the 10th
    # order statistic (coverage 98.8 %; the 3rd to the 9th covers 93.5 %): 11 us to 19 us, half-width 4/15
    result = _known_result(tuple((10 + i) / 1000 for i in range(11)), quality="good")
    expected = "\n".join([
        "<rooflab.MeasureResult on cuda:0 (NVIDIA H100 80GB HBM3)>",
        "  median 15 us, 95 % CI 11 us to 19 us (±26.7 %)",
        "  p10 11 us, p90 19 us, IQR 5 us",
        "  11 samples, stopped: converged; cold cache, graph timing, 20 launches a sample, clock cuda_event",
        "  quality: good",
    ])
    assert repr(result) == expected and str(result) == expected
    assert f"{[result]}" == f"[{expected}]"  # inside a container too: no nested dataclass dump


def test_a_summary_says_when_there_is_no_interval_and_why_a_result_is_not_trusted():
    result = _known_result((2.0, 3.0, 2.5), quality="noisy", quality_reasons=("too few samples",),
                           throttled=True, throttle_reasons=("hw_slowdown",))
    lines = repr(result).splitlines()
    assert lines[1] == "  median 2.5 ms, no 95 % CI (too few samples)"
    assert lines[3].startswith("  3 samples, stopped: converged;")
    assert lines[4] == "  quality: noisy (too few samples); throttled (hw_slowdown)"
    assert "Statistics(" not in repr(result) and "samples_ms" not in repr(result)


def test_a_measured_result_prints_its_own_median_and_stop_reason():
    result = rooflab.measure(lambda: time.sleep(0.001), device="cpu", cache="hot", **FAST)
    from rooflab.runners.orchestration.progress import format_ms

    text = str(result)
    assert text.startswith(f"<rooflab.MeasureResult on cpu ({result.device_name})>\n")
    assert f"  median {format_ms(result.median_ms)}, " in text
    assert f"  {result.n_samples} samples, stopped: {result.stop_reason}; hot cache, launch timing" in text
