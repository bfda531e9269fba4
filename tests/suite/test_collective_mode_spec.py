"""A collective's mode: a typed field of the case (`Case.collective_mode`), named in a spec among the
params (`mode`, stream by default). Its key is the one it had as a parameter: left out at stream, so
that existing keys keep their history, and `mode=isolated` in the key and in the stored params of an
isolated case. A bad mode or a `pace` a collective does not take is refused with the field named and
exit code 2; the filter `mode=stream` matches the cases that leave it at its default; a case that
names its mode among its params, or a mode on a case of another family, is refused."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rooflab.runners.cli.app import app
from rooflab.runners.orchestration.records import case_record
from rooflab.suite.case import Case, split_mode
from rooflab.suite.errors import SpecError
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
    assert [c.collective_mode for c in cases] == [CollectiveMode.STREAM, CollectiveMode.ISOLATED]
    assert all(type(c.collective_mode) is CollectiveMode and "mode" not in c.params for c in cases)
    # what the database keeps of each (the `cases` row): the params as stored before the mode was a field
    assert [dict(case_record(c).params) for c in cases] == [
        {"n": 1024, "ranks": 2, "reduce_op": "sum"}, {"mode": "isolated", "n": 1024, "ranks": 2, "reduce_op": "sum"}]
    assert [c.describe().split()[-1] for c in cases] == ["n=1024,ranks=2,reduce_op=sum",
                                                         "mode=isolated,n=1024,ranks=2,reduce_op=sum"]
    assert [c.case_key for c in apply_filters(cases, ["mode=stream"])] == [cases[0].case_key]
    assert [c.case_key for c in apply_filters(cases, ["mode=isolated"])] == [cases[1].case_key]


def test_list_shows_the_mode_and_the_params_as_stored(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["list", str(_write(tmp_path, SPEC)), "--json", "--device-kind", "cpu"])
    assert result.exit_code == 0, result.output
    cases = json.loads(result.stdout)["cases"]
    assert [(c["collective_mode"], c["params"].get("mode")) for c in cases] == [("stream", None),
                                                                                ("isolated", "isolated")]


def test_every_collective_keeps_its_key_in_either_mode(tmp_path: Path) -> None:
    """The keys of each collective op, both modes, as they were when the mode was a parameter."""
    text = SPEC.replace("op: all_reduce", "op: [all_gather, reduce_scatter, broadcast, all_to_all, send_recv]")
    keys = [c.case_key for c in expand(load_spec(_write(tmp_path, text)), "cpu")]
    assert keys == [
        "all_gather.v1:gloo:float32:hot:launch:inplace=false,n=1024,ranks=2",
        "all_gather.v1:gloo:float32:hot:launch:inplace=false,mode=isolated,n=1024,ranks=2",
        "reduce_scatter.v1:gloo:float32:hot:launch:inplace=false,n=1024,ranks=2,reduce_op=sum",
        "reduce_scatter.v1:gloo:float32:hot:launch:inplace=false,mode=isolated,n=1024,ranks=2,reduce_op=sum",
        "broadcast.v1:gloo:float32:hot:launch:n=1024,ranks=2",
        "broadcast.v1:gloo:float32:hot:launch:mode=isolated,n=1024,ranks=2",
        "all_to_all.v1:gloo:float32:hot:launch:n=1024,ranks=2",
        "all_to_all.v1:gloo:float32:hot:launch:mode=isolated,n=1024,ranks=2",
        "send_recv.v1:gloo:float32:hot:launch:n=1024,ranks=2",
        "send_recv.v1:gloo:float32:hot:launch:mode=isolated,n=1024,ranks=2",
    ]


def test_the_mode_is_set_in_one_place_and_refused_where_it_does_not_belong() -> None:
    def collective(**fields) -> Case:
        return Case("all_reduce", 1, "collective", "gloo", "float32", "hot", "launch", {"n": 8, "ranks": 2}, **fields)

    assert collective().collective_mode is CollectiveMode.STREAM  # a collective that leaves it out: the default
    isolated = collective(collective_mode="isolated")  # text (a pickled or JSON value) is read as the enum
    assert isolated.collective_mode is CollectiveMode.ISOLATED
    assert isolated.case_key.endswith(":mode=isolated,n=8,ranks=2")
    assert dataclasses.replace(isolated, collective_mode=CollectiveMode.STREAM).case_key.endswith(":n=8,ranks=2")
    copy = Case("copy", 1, "pointwise", "eager", "float32", "cold", "launch", {"n": 8})
    assert copy.collective_mode is None and copy.key_params == {"n": 8}
    with pytest.raises(ValueError, match="only a collective has one"):
        dataclasses.replace(copy, collective_mode=CollectiveMode.ISOLATED)
    with pytest.raises(ValueError, match="not the param 'mode'"):  # it would be measured as stream, keyed isolated
        Case("all_reduce", 1, "collective", "gloo", "float32", "hot", "launch",
             {"n": 8, "ranks": 2, "mode": "isolated"})
    with pytest.raises(ValueError, match="'burst': allowed: stream, isolated"):
        collective(collective_mode="burst")
    # split_mode: a spec's params in, the case's params and mode out; another family's `mode` stays its own
    assert split_mode("collective", {"n": 8, "mode": "isolated"}) == ({"n": 8}, CollectiveMode.ISOLATED)
    assert split_mode("collective", {"n": 8}) == ({"n": 8}, CollectiveMode.STREAM)
    assert split_mode("gemm", {"n": 8, "mode": "x"}) == ({"n": 8, "mode": "x"}, None)


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
