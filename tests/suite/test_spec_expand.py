"""Spec expansion into cases, with small fake ops (suite.spec.expand)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rooflab.suite.spec import expand, load_spec, parse_spec
from rooflab.suite.timing import TimingSettings
from tests.suite.spec_fakes import FAKE_OPS

ROOT = Path(__file__).resolve().parents[2]


def spec_of(text: str, tmp_path: Path, name: str = "spec.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return load_spec(path, ops=FAKE_OPS)


def keys(cases) -> list[str]:
    return [c.case_key for c in cases]


def test_product_of_params_dtypes_backends_cache_and_modes(tmp_path: Path) -> None:
    spec = spec_of(
        """
        name: product
        benchmarks:
          - name: mm
            op: matmul
            dtypes: [float16, bfloat16]
            backends: [eager, compiled]
            cache: [cold, hot]
            params:
              m: [64, 128]
              n: 32
              k: {start: 16, stop: 48, step: 16}
        """,
        tmp_path,
    )
    cases = expand(spec, ops=FAKE_OPS)
    assert len(cases) == 2 * 1 * 3 * 2 * 2 * 2
    assert len(set(keys(cases))) == len(cases)
    first = cases[0]
    # order: parameter point (first axis outermost), then dtype, backend, cache, timing mode
    assert first.params == {"batch": 1, "k": 16, "m": 64, "n": 32}
    assert (first.dtype, first.backend, first.cache, first.timing_mode) == ("float16", "eager", "cold", "launch")
    assert (cases[1].dtype, cases[1].backend, cases[1].cache) == ("float16", "eager", "hot")
    assert (cases[2].backend, cases[4].dtype) == ("compiled", "bfloat16")
    assert cases[8].params["k"] == 32 and cases[8].params["m"] == 64
    assert cases[-1].params == {"batch": 1, "k": 48, "m": 128, "n": 32}
    assert {c.family for c in cases} == {"gemm"} and {c.op_version for c in cases} == {1}


def test_tied_and_zipped_parameters(tmp_path: Path) -> None:
    spec = spec_of(
        """
        name: tied
        benchmarks:
          - name: square
            op: matmul
            params:
              m=n=k: {pow2: [6, 8]}
          - name: attn
            op: attention
            dtypes: float16
            params:
              causal: [false, true]
            zip:
              - seq_q: [128, 256]
                seq_k: [512, 1024]
        """,
        tmp_path,
    )
    cases = expand(spec, ops=FAKE_OPS)
    square = [c for c in cases if c.benchmark == "square"]
    assert ([(c.params["m"], c.params["n"], c.params["k"]) for c in square]
            == [(64, 64, 64), (128, 128, 128), (256, 256, 256)])
    attn = [c for c in cases if c.benchmark == "attn"]
    assert [(c.params["causal"], c.params["seq_q"], c.params["seq_k"]) for c in attn] == [
        (False, 128, 512),
        (False, 256, 1024),
        (True, 128, 512),
        (True, 256, 1024),
    ]
    # op defaults are filled in and become part of the case_key
    assert attn[0].params["head_dim"] == 64 and attn[0].params["kernel"] == "sdpa_math"
    assert "head_dim=64" in attn[0].case_key and "causal=false" in attn[0].case_key


def test_defaults_timing_tags_and_constraints(tmp_path: Path) -> None:
    spec = spec_of(
        """
        name: defaults
        defaults:
          dtypes: [bfloat16]
          tags: [nightly]
          timing: {max_time_ms: 400, min_samples: 7}
          constraints: {max_memory_fraction: 0.25}
        benchmarks:
          - name: a
            op: copy
            tags: [bandwidth, nightly]
            params: {n: 1024}
          - name: b
            op: copy
            dtypes: [float32]
            timing: {max_time_ms: 900, target_precision: 0.02}
            constraints: {max_memory_fraction: 0.8}
            params: {n: 2048}
        """,
        tmp_path,
    )
    a, b = expand(spec, ops=FAKE_OPS)
    assert a.dtype == "bfloat16" and b.dtype == "float32"
    assert a.tags == ("nightly", "bandwidth") and b.tags == ("nightly",)
    assert a.timing == TimingSettings(max_time_ms=400.0, min_samples=7)
    assert b.timing == TimingSettings(max_time_ms=900.0, min_samples=7, target_precision=0.02)
    assert a.max_memory_fraction == 0.25 and b.max_memory_fraction == 0.8
    assert a.backend == "eager" and a.cache == "cold" and a.timing_mode == "launch"
    assert a.op_version == 2 and a.case_key.startswith("copy.v2:eager:bfloat16:cold:launch:n=1024")


def test_no_constraint_means_none(tmp_path: Path) -> None:
    spec = spec_of("name: x\nbenchmarks:\n  - {name: a, op: copy, params: {n: 8}}\n", tmp_path)
    (case,) = expand(spec, ops=FAKE_OPS)
    assert case.max_memory_fraction is None and case.timing == TimingSettings()


def test_device_filter(tmp_path: Path) -> None:
    spec = spec_of(
        """
        name: devices
        defaults:
          devices: [cpu, cuda]
        benchmarks:
          - {name: small, op: copy, devices: [cpu], params: {n: 1024}}
          - {name: large, op: copy, devices: cuda, params: {n: 1048576}}
          - {name: both, op: copy, params: {n: 4096}}
        """,
        tmp_path,
    )
    assert [c.benchmark for c in expand(spec, ops=FAKE_OPS)] == ["small", "large", "both"]
    assert [c.benchmark for c in expand(spec, "cpu", ops=FAKE_OPS)] == ["small", "both"]
    assert [c.benchmark for c in expand(spec, "cuda:0", ops=FAKE_OPS)] == ["large", "both"]


def test_duplicates_are_dropped_keeping_the_first(tmp_path: Path) -> None:
    spec = spec_of(
        """
        name: dup
        benchmarks:
          - {name: first, op: copy, params: {n: [1024, 2048, 1024]}}
          - {name: second, op: copy, params: {n: {pow2: [10, 12]}}}
        """,
        tmp_path,
    )
    cases = expand(spec, ops=FAKE_OPS)
    assert [(c.benchmark, c.params["n"]) for c in cases] == [("first", 1024), ("first", 2048), ("second", 4096)]


def test_float_param_values_are_canonical(tmp_path: Path) -> None:
    spec = spec_of(
        "name: x\nbenchmarks:\n"
        "  - {name: a, op: attention, dtypes: float16, params: {seq_q=seq_k: 64, dropout: [0, 0.5]}}\n",
        tmp_path,
    )
    cases = expand(spec, ops=FAKE_OPS)
    assert [c.params["dropout"] for c in cases] == [0.0, 0.5]
    assert all(isinstance(c.params["dropout"], float) for c in cases)


def test_spec_carries_name_path_text_and_sha256(tmp_path: Path) -> None:
    import hashlib

    text = "name: hashed\ndescription: d\nmax_cases: 10\nbenchmarks:\n  - {name: a, op: copy, params: {n: 8}}\n"
    spec = spec_of(text, tmp_path)
    assert (spec.name, spec.description, spec.max_cases, spec.text) == ("hashed", "d", 10, text)
    assert spec.path == tmp_path / "spec.yaml"
    assert spec.sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert [b.name for b in spec.benchmarks] == ["a"]
    assert parse_spec(text, "other.yaml", ops=FAKE_OPS).sha256 == spec.sha256


def test_case_key_is_stable_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "stable.yaml"
    path.write_text(
        textwrap.dedent(
            """
            name: stable
            benchmarks:
              - name: mm
                op: matmul
                dtypes: [float16, bfloat16]
                params: {m=n=k: {pow2: [6, 9]}, batch: [1, 4]}
              - name: attn
                op: attention
                dtypes: [bfloat16]
                params: {causal: [true, false], kernel: [naive, sdpa_flash]}
                zip: [{seq_q: [64, 128], seq_k: [64, 256]}]
            """
        )
    )
    here = keys(expand(load_spec(path, ops=FAKE_OPS), ops=FAKE_OPS))
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-m", "tests.suite.spec_fakes", str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    there = json.loads(out.stdout)
    assert there == here and len(here) == 2 * 4 * 2 + 2 * 2 * 2
    assert here[0] == "matmul.v1:eager:float16:cold:launch:batch=1,k=64,m=64,n=64"


@pytest.mark.parametrize("kind", ["gpu", "rocm"])
def test_unknown_device_kind_for_expand(tmp_path: Path, kind: str) -> None:
    from rooflab.suite.errors import SpecError

    spec = spec_of("name: x\nbenchmarks:\n  - {name: a, op: copy, params: {n: 8}}\n", tmp_path)
    with pytest.raises(SpecError, match="allowed: cpu, cuda"):
        expand(spec, kind, ops=FAKE_OPS)


def test_each_op_of_a_benchmark_is_validated(tmp_path: Path) -> None:
    from rooflab.suite.errors import SpecError

    text = "name: multi\nbenchmarks:\n  - name: two\n    op: [copy, matmul]\n    params: {n: [64, 128]}\n"
    with pytest.raises(SpecError,
                       match=r"line 5, benchmarks\[0\]\.params: missing required parameters m, k of op 'matmul'"):
        spec_of(text, tmp_path)
    with pytest.raises(SpecError, match=r"line 4, benchmarks\[0\]\.op\[1\]: unknown op 'cpy'"):
        spec_of(text.replace("matmul", "cpy"), tmp_path)


def test_several_ops_expand_in_list_order(tmp_path: Path) -> None:
    ops = dict(FAKE_OPS)
    twin = type("FakeCopyTwin", (type(FAKE_OPS["copy"]),), {"name": "copy_twin"})()
    ops["copy_twin"] = twin
    path = tmp_path / "multi.yaml"
    path.write_text("name: multi\nbenchmarks:\n  - {name: both, op: [copy_twin, copy], params: {n: [8, 16]}}\n")
    cases = expand(load_spec(path, ops=ops), ops=ops)
    assert [(c.op, c.params["n"], c.benchmark) for c in cases] == [
        ("copy_twin", 8, "both"),
        ("copy_twin", 16, "both"),
        ("copy", 8, "both"),
        ("copy", 16, "both"),
    ]


def test_the_documented_example_is_a_valid_spec() -> None:
    import rooflab.suite.spec

    doc = rooflab.suite.spec.__doc__
    example = doc.split("A spec file::\n", 1)[1].split("\n\n", 1)[0]
    spec = parse_spec(textwrap.dedent(example), "docstring", ops=FAKE_OPS)
    cases = expand(spec, ops=FAKE_OPS)
    assert len(cases) == 7 * 2 * 2 * 2 + 2 * 3
    assert expand(spec, "cpu", ops=FAKE_OPS) == cases[-6:]
    assert cases[-1].params["seq_q"] == cases[-1].params["seq_k"] == 16384 and cases[-1].params["batch"] == 1
