"""A collective's mode in a spec: the `mode` parameter (stream by default, left out of the case key
at its default so existing keys keep their history; isolated in the key), a bad mode or a `pace`
a collective does not take refused with the field named and exit code 2, the filter `mode=stream`
matching the cases that leave it at its default."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rooflab.runners.cli.app import app
from rooflab.suite.errors import SpecError
from rooflab.suite.ops.collective import mode_of
from rooflab.suite.spec import apply_filters, expand, load_spec
from rooflab.vocab import CollectiveMode

SPEC = """name: comms
benchmarks:
  - name: reduce
    op: all_reduce
    backends: [gloo]
    cache: [hot]
    params: {n: 1024, ranks: 2, mode: [stream, isolated]}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "comms.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_both_modes_are_cases_of_their_own_and_the_default_keeps_its_key(tmp_path: Path) -> None:
    cases = expand(load_spec(_write(tmp_path, SPEC)), "cpu")
    assert [c.case_key for c in cases] == [
        "all_reduce.v1:gloo:float32:hot:launch:n=1024,ranks=2,reduce_op=sum",  # as before the mode existed
        "all_reduce.v1:gloo:float32:hot:launch:mode=isolated,n=1024,ranks=2,reduce_op=sum",
    ]
    assert [mode_of(c.params) for c in cases] == [CollectiveMode.STREAM, CollectiveMode.ISOLATED]
    assert [c.case_key for c in apply_filters(cases, ["mode=stream"])] == [cases[0].case_key]
    assert [c.case_key for c in apply_filters(cases, ["mode=isolated"])] == [cases[1].case_key]


@pytest.mark.parametrize("text, fragments", [
    (SPEC.replace("mode: [stream, isolated]", "mode: [stream, burst]"),
     ["line 7", "benchmarks[0].params.mode", "'burst'", "allowed: stream, isolated"]),
    (SPEC + "    timing: {pace: idle}\n",
     ["line 8", "benchmarks[0].timing.pace", "does not take pace 'idle'", "allowed: back_to_back"]),
    ("name: comms\ndefaults:\n  timing: {pace: idle}\n" + SPEC.split("\n", 1)[1],
     ["line 3", "defaults.timing.pace", "does not take pace 'idle'", "timing: {pace: back_to_back}"]),
])
def test_a_bad_mode_or_pace_is_refused_with_the_field_named(tmp_path: Path, text: str, fragments: list[str]) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)
    result = CliRunner().invoke(app, ["list", str(path)])
    assert result.exit_code == 2 and fragments[1] in result.output and "Traceback" not in result.output


def test_a_kernel_benchmark_beside_them_may_still_pace_idle(tmp_path: Path) -> None:
    text = SPEC + "  - name: copy\n    op: copy\n    timing: {pace: idle}\n    params: {n: 4096}\n"
    cases = expand(load_spec(_write(tmp_path, text)), "cpu")
    assert {c.op: c.timing.pace for c in cases} == {"all_reduce": "back_to_back", "copy": "idle"}
