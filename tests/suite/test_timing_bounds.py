"""Each timing setting's bounds are stated once (suite.timing.BOUNDS): the spec, the CLI overrides and
the Python API refuse the same bad value with the same reason, each behind its own place."""
from __future__ import annotations

import pytest

from rooflab.runners.errors import UserInputError
from rooflab.runners.orchestration.run_options import check_merged_settings, validate_timing_overrides
from rooflab.suite.errors import SpecError
from rooflab.suite.spec import expand, parse_spec
from rooflab.suite.timing import BOUNDS, TimingSettingError, TimingSettings

BAD = [
    ("min_samples", 0, "must be a whole number >= 1; got 0"),
    ("max_samples", 2.5, "must be a whole number >= 1; got 2.5"),
    ("max_time_ms", -1.0, "must be > 0 (milliseconds); got -1.0"),
    ("max_time_ms", 0.0, "must be > 0 (milliseconds); got 0.0"),
    ("target_precision", 1.0, "must be a fraction in (0, 1), e.g. 0.005 for 0.5 %; got 1.0"),
    ("warmup_calls", -1, "must be a whole number >= 0; got -1"),
    ("warmup_ms", -0.5, "must be >= 0 (milliseconds); got -0.5"),
]


def _spec(timing: str) -> str:
    return f"name: t\nbenchmarks:\n  - name: a\n    op: copy\n    params: {{n: 4}}\n    timing: {timing}\n"


@pytest.mark.parametrize("name, value, reason", BAD)
def test_one_bad_value_one_reason_from_spec_cli_and_api(name: str, value: float, reason: str) -> None:
    with pytest.raises(TimingSettingError) as api:
        TimingSettings(**{name: value})  # type: ignore[arg-type]  # any field, a bad value on purpose
    assert api.value.reason == reason and str(api.value) == f"{name}: {reason}"

    with pytest.raises(UserInputError) as cli:
        validate_timing_overrides({name: value})
    assert str(cli.value) == f"--{name.replace('_', '-')}: {reason}"

    with pytest.raises(SpecError) as spec:
        expand(parse_spec(_spec(f"{{{name}: {value}}}"), "t.yaml"))
    assert str(spec.value).endswith(f"benchmarks[0].timing.{name}: {reason}"), str(spec.value)


def test_order_is_one_rule_for_spec_cli_api_and_merged_overrides() -> None:
    reason = "min_samples (50) exceeds max_samples (20); allowed: min_samples <= max_samples"
    with pytest.raises(TimingSettingError, match=r"min_samples \(50\) exceeds"):
        TimingSettings(min_samples=50, max_samples=20)
    with pytest.raises(UserInputError) as cli:
        validate_timing_overrides({"min_samples": 50, "max_samples": 20})
    assert str(cli.value) == f"--min-samples: {reason}"
    with pytest.raises(SpecError) as spec:
        expand(parse_spec(_spec("{min_samples: 50, max_samples: 20}"), "t.yaml"))
    assert str(spec.value).endswith(f"benchmarks[0].timing: {reason}")
    # a CLI override that is fine alone but contradicts a benchmark's own setting
    cases = expand(parse_spec(_spec("{max_samples: 20}"), "t.yaml"))
    with pytest.raises(UserInputError) as merged:
        check_merged_settings(cases, validate_timing_overrides({"min_samples": 50}))
    assert str(merged.value) == f"benchmark 'a', after the command-line overrides: {reason}"


def test_good_values_pass_everywhere_and_whole_numbers_are_ints() -> None:
    assert validate_timing_overrides({"min_samples": 20.0, "target_precision": 0.01}) == {
        "min_samples": 20, "target_precision": 0.01}
    settings = TimingSettings(min_samples=20.0)  # type: ignore[arg-type]  # a float from JSON or a CLI
    assert settings.min_samples == 20 and isinstance(settings.min_samples, int)
    assert set(BOUNDS) == set(TimingSettings.names())  # every setting has its bounds, none extra
