"""Every kind of bad spec is rejected with one message naming file, field path, line and what is allowed."""
from __future__ import annotations

from pathlib import Path

import pytest

from rooflab.suite.errors import SpecError
from rooflab.suite.spec import load_spec
from rooflab.suite.timing import TimingSettings
from tests.suite.spec_fakes import FAKE_OPS

HEAD = "name: bad\nbenchmarks:\n  - name: a\n"

# (file text, fragments the message must contain: field path, line, what is wrong, what is allowed)
CASES = {
    "invalid_yaml": (HEAD + "    op: matmul\n    params: {m: 1, n: [1, 2\n", ["line 6", "invalid YAML"]),
    "tab_indent": ("name: bad\nbenchmarks:\n\t- name: a\n", ["line 3", "invalid YAML"]),
    "duplicate_key": (HEAD + "    op: copy\n    params: {n: 4}\n    params: {n: 5}\n",
                      ["line 6", "benchmarks[0].params", "duplicate key 'params'", "first defined on line 5"]),
    "unknown_op": (HEAD + "    op: matmull\n    params: {m: 1}\n",
                   ["line 4", "benchmarks[0].op", "unknown op 'matmull'", "allowed: attention, copy, matmul"]),
    "unknown_dtype": (HEAD + "    op: copy\n    dtypes: [float32, float33]\n    params: {n: 4}\n",
                      ["line 5", "benchmarks[0].dtypes[1]", "unknown dtype 'float33'",
                       "allowed: float32, float16, bfloat16"]),
    "unsupported_dtype": (HEAD + "    op: copy\n    dtypes: tf32\n    params: {n: 4}\n",
                          ["line 5", "benchmarks[0].dtypes[0]", "op 'copy' does not support dtype 'tf32'",
                           "allowed: float32, float16, bfloat16"]),
    "unknown_backend": (HEAD + "    op: copy\n    backends: [eager, triton]\n    params: {n: 4}\n",
                        ["line 5", "benchmarks[0].backends[1]", "unknown backend 'triton'",
                         "allowed: eager, compiled"]),
    "unsupported_backend": (HEAD + "    op: copy\n    backends: [cupy]\n    params: {n: 4}\n",
                            ["benchmarks[0].backends[0]", "does not support backend 'cupy'",
                             "allowed: eager, compiled"]),
    "unknown_cache": (HEAD + "    op: copy\n    cache: [cold, warm]\n    params: {n: 4}\n",
                      ["line 5", "benchmarks[0].cache[1]", "unknown cache mode 'warm'", "allowed: cold, hot"]),
    "unknown_timing_mode": (HEAD + "    op: copy\n    timing_modes: [launch, replay]\n    params: {n: 4}\n",
                            ["line 5", "benchmarks[0].timing_modes[1]", "unknown timing mode 'replay'",
                             "allowed: launch, graph"]),
    "unsupported_timing_mode": (HEAD + "    op: matmul\n    timing_modes: [graph]\n    params: {m=n=k: 4}\n",
                                ["benchmarks[0].timing_modes[0]", "does not support timing mode 'graph'",
                                 "allowed: launch"]),
    "cold_graph": (HEAD + "    op: copy\n    cache: [cold, hot]\n    timing_modes: [launch, graph]\n"
                          "    params: {n: 4}\n",
                   ["line 5", "benchmarks[0].cache", "cache mode cold cannot be timed in graph mode",
                    "use cache hot with graph"]),
    "cold_graph_by_default": (HEAD + "    op: copy\n    timing_modes: [graph]\n    params: {n: 4}\n",
                              ["line 5", "benchmarks[0].timing_modes",
                               "cache mode cold cannot be timed in graph mode"]),
    "bad_default_dtype": ("name: bad\ndefaults:\n  dtypes: [float128]\n"
                          "benchmarks:\n  - {name: a, op: copy, params: {n: 4}}\n",
                          ["line 3", "defaults.dtypes[0]", "unknown dtype 'float128'", "allowed:"]),
    "unknown_device": (HEAD + "    op: copy\n    devices: [gpu]\n    params: {n: 4}\n",
                       ["line 5", "benchmarks[0].devices[0]", "unknown device kind 'gpu'", "allowed: cpu, cuda"]),
    "unknown_param": (HEAD + "    op: copy\n    params:\n      n: 4\n      size: 3\n",
                      ["line 7", "benchmarks[0].params.size", "unknown parameter 'size'", "allowed: n (required)"]),
    "unknown_param_in_zip": (HEAD + "    op: attention\n    zip:\n      - {seq_q: [1, 2], seqk: [1, 2]}\n",
                             ["line 6", "benchmarks[0].zip[0]", "unknown parameter 'seqk'",
                              "allowed: batch, heads, seq_q (required)"]),
    "wrong_type": (HEAD + "    op: copy\n    params:\n      n: big\n",
                   ["line 6", "benchmarks[0].params.n", "wrong type", "'big'", "allowed: integers > 0"]),
    "wrong_type_bool": (HEAD + "    op: attention\n    params: {seq_q=seq_k: 8, causal: 1}\n",
                        ["line 5", "benchmarks[0].params.causal", "wrong type", "allowed: true, false"]),
    "wrong_type_float_for_int": (HEAD + "    op: copy\n    params: {n: [8, 2.5]}\n",
                                 ["benchmarks[0].params.n", "is an integer, got 2.5", "allowed: integers > 0"]),
    "missing_param": (HEAD + "    op: matmul\n    params:\n      m: 4\n      n: 4\n",
                      ["line 5", "benchmarks[0].params", "missing required parameter k",
                       "m (required), n (required), k (required), batch"]),
    "zero_size": (HEAD + "    op: copy\n    params:\n      n: [16, 0]\n",
                  ["line 6", "benchmarks[0].params.n[1]", "must be positive", "got 0", "allowed: integers > 0"]),
    "negative_size": (HEAD + "    op: matmul\n    params: {m=n=k: {start: -64, stop: 64, step: 64}}\n",
                      ["benchmarks[0].params.m=n=k", "must be positive", "-64"]),
    "bad_choice": (HEAD + "    op: attention\n    params:\n      seq_q=seq_k: 128\n      head_dim: [64, 96]\n",
                   ["line 7", "benchmarks[0].params.head_dim[1]", "96 is not a valid head_dim", "allowed: 64, 128"]),
    "empty_list": (HEAD + "    op: copy\n    params:\n      n: []\n",
                   ["line 6", "benchmarks[0].params.n", "empty sweep", "allowed: at least one value"]),
    "empty_range": (HEAD + "    op: copy\n    params:\n      n: {start: 10, stop: 1, step: 1}\n",
                    ["line 6", "benchmarks[0].params.n.step", "empty range"]),
    "empty_dtypes": (HEAD + "    op: copy\n    dtypes: []\n    params: {n: 4}\n",
                     ["line 5", "benchmarks[0].dtypes", "empty sweep", "allowed: float32, float16, bfloat16"]),
    "no_benchmarks": ("name: bad\nbenchmarks: []\n", ["line 2", "benchmarks", "empty sweep", "at least one benchmark"]),
    "empty_file": ("", ["line 1", "a spec is a mapping", "got an empty file"]),
    "bad_range_form": (HEAD + "    op: copy\n    params: {n: {start: 1, stop: 8, ratio: 2}}\n",
                       ["line 5", "benchmarks[0].params.n", "unknown range form", "allowed: {start, stop, step}"]),
    "too_many_cases": ("name: bad\nmax_cases: 10\nbenchmarks:\n"
                       "  - {name: a, op: copy, dtypes: [float32, float16], params: {n: {pow2: [1, 8]}}}\n",
                       ["line 2", "max_cases", "16 cases, more than max_cases (10)", "a: 16"]),
    "huge_range": ("name: bad\nbenchmarks:\n"
                   "  - {name: a, op: copy, params: {n: {start: 1, stop: 100000000, step: 1}}}\n",
                   ["line 3", "benchmarks[0].params.n", "more than the spec's max_cases (5000)"]),
    "bad_value_in_zip": (HEAD + "    op: attention\n    zip:\n      - seq_q=seq_k: [16, 32]\n"
                                "        head_dim:\n          - 64\n          - 96\n",
                         ["line 9", "benchmarks[0].zip[0].head_dim[1]", "96 is not a valid head_dim",
                          "allowed: 64, 128"]),
    "bad_zip_lengths": (HEAD + "    op: attention\n    zip:\n      - seq_q: [1, 2, 3]\n        seq_k: [1, 2]\n",
                        ["line 6", "benchmarks[0].zip[0]", "seq_q has 3, seq_k has 2"]),
    "param_set_twice": (HEAD + "    op: matmul\n    params: {m=n: 4, k: 2}\n    zip: [{n: [1, 2], k: [3, 4]}]\n",
                        ["benchmarks[0].zip[0]", "parameter 'n' is set twice", "benchmarks[0].params.m=n"]),
    "unknown_field": (HEAD + "    op: copy\n    timming: {max_time_ms: 1}\n    params: {n: 4}\n",
                      ["line 5", "benchmarks[0].timming", "unknown field 'timming'",
                       "allowed: backends, dtypes, cache, timing_modes"]),
    "unknown_timing_field": (HEAD + "    op: copy\n    timing: {max_time: 1}\n    params: {n: 4}\n",
                             ["line 5", "benchmarks[0].timing.max_time", "unknown field", "max_time_ms"]),
    "bad_timing_value": (HEAD + "    op: copy\n    timing:\n      max_time_ms: -1\n    params: {n: 4}\n",
                         ["line 6", "benchmarks[0].timing.max_time_ms", "must be > 0 (milliseconds)", "-1"]),
    "bad_timing_type": (HEAD + "    op: copy\n    timing:\n      warmup_calls: 2.5\n    params: {n: 4}\n",
                        ["line 6", "benchmarks[0].timing.warmup_calls", "must be a whole number >= 0", "2.5"]),
    "inconsistent_timing": ("name: bad\ndefaults: {timing: {min_samples: 50, max_samples: 20}}\n"
                            "benchmarks:\n  - {name: a, op: copy, params: {n: 4}}\n",
                            ["line 2", "defaults.timing", "min_samples (50) exceeds max_samples (20)",
                             "allowed: min_samples <= max_samples"]),
    "bad_memory_fraction": (HEAD + "    op: copy\n    constraints:\n      max_memory_fraction: 1.5\n"
                                   "    params: {n: 4}\n",
                            ["line 6", "benchmarks[0].constraints.max_memory_fraction", "less than or equal to 1",
                             "1.5"]),
    "missing_name": ("name: bad\nbenchmarks:\n  - op: copy\n    params: {n: 4}\n",
                     ["line 3", "benchmarks[0].name", "required field missing"]),
    "duplicate_benchmark_name": (HEAD + "    op: copy\n    params: {n: 4}\n"
                                        "  - name: a\n    op: copy\n    params: {n: 8}\n",
                                 ["line 6", "benchmarks[1].name", "used twice", "unique names"]),
    "benchmark_not_mapping": ("name: bad\nbenchmarks:\n  - copy\n", ["line 3", "benchmarks[0]", "expected a mapping"]),
    "op_not_a_name": (HEAD + "    op: 5\n",
                      ["line 4", "benchmarks[0].op", "expected a name or a list of names, got 5"]),
    "unknown_op_in_list": (HEAD + "    op: [copy, cpy]\n    params: {n: 4}\n",
                           ["line 4", "benchmarks[0].op[1]", "unknown op 'cpy'", "allowed: attention, copy, matmul"]),
    "key_not_a_string": (HEAD + "    op: copy\n    params: {1: 5}\n",
                         ["line 5", "benchmarks[0].params[1]", "a key must be a string"]),
    "exponent_as_text": (HEAD + "    op: copy\n    params: {n: 1e6}\n",
                         ["line 5", "benchmarks[0].params.n", "got '1e6'", "write 1000000 or 1.0e+6",
                          "allowed: integers > 0"]),
    "top_level_unknown": ("name: bad\nbenchmark: []\n",
                          ["benchmark", "unknown field 'benchmark'",
                           "allowed: name, description, max_cases, defaults, benchmarks"]),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_bad_spec_is_rejected_with_a_clear_message(tmp_path: Path, kind: str) -> None:
    text, fragments = CASES[kind]
    path = tmp_path / f"{kind}.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(path, ops=FAKE_OPS)
    message = str(info.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert "Traceback" not in message and "pydantic" not in message.lower()
    assert "For further information" not in message


def test_several_pydantic_errors_are_one_short_message(tmp_path: Path) -> None:
    path = tmp_path / "many.yaml"
    path.write_text(
        "name: bad\nmax_cases: '100'\nbenchmarks:\n  - op: copy\n    dtypes: 5\n    zip: {n: [1]}\n    foo: 1\n"
    )
    with pytest.raises(SpecError) as info:
        load_spec(path, ops=FAKE_OPS)
    lines = str(info.value).splitlines()
    assert lines[0] == "invalid spec:"
    assert len(lines) == 5 and lines[-1].strip() == "(and 2 more errors)"
    assert "line 2, max_cases: wrong type: expected an integer, got '100'" in lines[1]


def test_missing_file_names_the_shipped_specs(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="spec file not found; allowed: a path to a YAML file or a shipped spec"):
        load_spec(tmp_path / "nope.yaml", ops=FAKE_OPS)


def test_timing_override_fields_match_timing_settings() -> None:
    from rooflab.suite.spec_schema import TimingOverrides

    assert tuple(TimingOverrides.model_fields) == TimingSettings.names()


def test_a_built_in_default_the_op_cannot_use_is_explained(tmp_path: Path) -> None:
    from tests.suite.spec_fakes import FakeCopy

    class NoEager(FakeCopy):
        name = "no_eager"
        backends = ("compiled",)

    path = tmp_path / "default.yaml"
    path.write_text("name: d\nbenchmarks:\n  - name: a\n    op: no_eager\n    params: {n: 8}\n")
    with pytest.raises(SpecError) as info:
        load_spec(path, ops={"no_eager": NoEager()})
    message = str(info.value)
    assert "line 3, benchmarks[0]: op 'no_eager' does not support backend 'eager'" in message
    assert "(the built-in default: give backends for this benchmark or in defaults); allowed: compiled" in message
