"""The timing settings are declared once (suite/timing.py) and become the spec's fields, the
`rooflab run` options and the `rooflab.measure` keywords from that declaration."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from rooflab.runners.cli.app import app
from rooflab.runners.cli.timing_options import option_name
from rooflab.suite.spec_schema import TimingOverrides
from rooflab.suite.timing import BOUNDS, TimingSettings


def test_every_setting_is_a_spec_field_and_a_run_option_with_its_help():
    names = TimingSettings.names()
    assert set(BOUNDS) == set(names) and "graph_launches" in names
    assert set(TimingOverrides.model_fields) == set(names)
    help_text = CliRunner().invoke(app, ["run", "--help"], terminal_width=400).output
    for name in names:
        assert option_name(name) in help_text, name
        assert BOUNDS[name].help in help_text, name


@pytest.mark.parametrize(("name", "bad"), [("graph_launches", "2.5"), ("min_samples", "0"), ("target_precision", "1")])
def test_a_bad_value_gets_the_declared_rule_as_its_reason(name, bad):
    result = CliRunner().invoke(app, ["run", "quick", "--device", "cpu", option_name(name), bad])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert BOUNDS[name].text in text or "valid integer" in text, text  # a fraction for a count: click says so
