"""A progress line says when a result is not to be trusted, and why."""
from __future__ import annotations

from datetime import UTC, datetime

from rooflab.record import CaseRecord, MeasurementRecord, record_from_columns
from rooflab.runners.orchestration.progress import describe_result


def _record(quality: str, reasons: tuple[str, ...]) -> MeasurementRecord:
    case = CaseRecord("copy.v1:eager:float32:cold:launch:n=1024", "copy", 1, "pointwise", "eager", "float32",
                      {"n": 1024})
    return record_from_columns(
        run_id="r", case=case, device_fingerprint="fp", cache="cold", timing_mode="launch", status="ok",
        measured_at=datetime.now(UTC), median_ms=1.5, p10_ms=1.4, p90_ms=1.9, n_samples=12, mean_ms=1.6,
        min_ms=1.3, max_ms=2.2, iqr_ms=0.3, std_ms=0.25,
        rel_ci_halfwidth=0.2, bytes=8192, quality=quality, quality_reasons=reasons,
    )


def test_a_contended_result_is_marked_with_its_reasons() -> None:
    line = describe_result(_record("contended", ("load average 5.83 above 2 logical CPUs",)))
    assert "CONTENDED: load average 5.83 above 2 logical CPUs" in line


def test_a_noisy_result_is_marked() -> None:
    assert "NOISY: stopped at max_time" in describe_result(
        _record("noisy", ("stopped at max_time with CI95 half-width 20 %",)))


def test_a_good_result_carries_no_mark() -> None:
    line = describe_result(_record("good", ()))
    assert "NOISY" not in line and "CONTENDED" not in line and "GOOD" not in line
