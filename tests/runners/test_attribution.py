"""Attribution: the split of one profiled execution into parts (synthetic GPU events and a real
CPU profile), and a planted slow part found end to end (run -> database -> breakdown)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rooflab.reports.roofs.models import Ceiling, DeviceCeilings
from rooflab.reports.walls.breakdown import breakdowns, split_profiles
from rooflab.runners.engine.attribution import (
    CPU_CLOCK,
    CUDA_CLOCK,
    Interval,
    _cpu_intervals,
    _device_intervals,
    _intervals,
    profile_parts,
    split,
    union_us,
)
from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.base import BLOCK_RANGE, PART_RANGE_PREFIX
from rooflab.suite.ops.layer_model import PARTS_SUM_TOLERANCE, PartKind, PartModel
from rooflab.suite.ops.registry import get_op
from rooflab.vocab import CeilingKind
from tests.suite.devices import CPU

REPO = Path(__file__).resolve().parents[2]
MODELS = (PartModel("a", PartKind.MEMORY, 10, 100), PartModel("b", PartKind.MATMUL, 1000, 100))


def _range(name: str, start: float, end: float) -> Interval:
    return Interval(name, "range", start, end)


def test_union_of_intervals() -> None:
    assert union_us([(0, 2), (1, 3), (5, 6)]) == 4
    assert union_us([(0, 10), (2, 3)]) == 10
    assert union_us([]) == 0


def test_gpu_split_assigns_kernels_through_their_launching_op_and_adds_up() -> None:
    events = [
        _range(BLOCK_RANGE, 0, 100), _range(PART_RANGE_PREFIX + "a", 1, 40), _range(PART_RANGE_PREFIX + "b", 41, 90),
        # a runtime call whose correlation id happens to equal gelu's operator id: not a launcher
        Interval("cudaLaunchKernel", "op", 96, 97, id=7, link=123),
        Interval("aten::gelu", "op", 2, 5, id=7), Interval("aten::mm", "op", 42, 45, id=8),
        Interval("aten::view", "op", 95, 96, id=9),  # inside the block, outside both parts
        Interval("aten::add", "op", 150, 151, id=10),  # after the block: not this call's
        Interval("gelu_kernel", "kernel", 10, 30, link=7),
        Interval("gemm_kernel", "kernel", 45, 95, link=8),
        Interval("copy_kernel", "kernel", 100, 104, link=9),
        Interval("other_kernel", "kernel", 200, 210, link=10),
    ]
    p = split(events, MODELS, clock=CUDA_CLOCK, host_ms=1.0)
    assert [(x.name, x.time_ms, x.events) for x in p.parts] == [("a", 0.020, 1), ("b", 0.050, 1)]
    assert p.whole_ms == pytest.approx(0.094)  # 10 .. 104
    assert p.unattributed_ms == pytest.approx(0.004)
    assert p.gap_ms == pytest.approx(0.020)  # 30 .. 45 and 95 .. 100 idle
    assert p.overlap_ms == pytest.approx(0.0)
    total = sum(x.time_ms for x in p.parts) + p.unattributed_ms + p.gap_ms - p.overlap_ms
    assert total == pytest.approx(p.whole_ms)
    # concurrent kernels are counted twice by the parts: the overlap says by how much
    events.append(Interval("gemm2", "kernel", 50, 70, link=8))
    q = split(events, MODELS, clock=CUDA_CLOCK, host_ms=1.0)
    assert q.overlap_ms == pytest.approx(0.020)


def test_split_refuses_a_profile_without_the_parts_ranges() -> None:
    with pytest.raises(ValueError, match="part"):
        split([_range(BLOCK_RANGE, 0, 10), _range(PART_RANGE_PREFIX + "a", 0, 5)], MODELS, clock=CPU_CLOCK,
              host_ms=0.0)
    with pytest.raises(ValueError, match=BLOCK_RANGE):
        split([], MODELS, clock=CPU_CLOCK, host_ms=0.0)


@pytest.mark.parametrize("extra", [{}, {"pass": "forward_backward", "activation": "swiglu"}])
def test_a_real_cpu_profile_of_the_block_adds_up(extra: dict) -> None:
    op = get_op("transformer_block")
    case = Case("transformer_block", 1, "layer", "eager", "float32", "cold", "launch",
                {"batch": 1, "seq": 64, "hidden": 128, "heads": 4, **extra})
    prepared = op.prepare(case, CPU, seed=3)
    prepared.fn()
    assert prepared.profiled is not None  # a block made of parts has its profiled call
    p = profile_parts(prepared.profiled, prepared.part_models, CPU)
    assert [x.name for x in p.parts] == [m.name for m in prepared.part_models]
    assert all(x.events >= 1 and x.time_ms > 0 for x in p.parts)
    assert p.clock == CPU_CLOCK and p.overlap_ms == pytest.approx(0.0, abs=1e-9)
    summed = sum(x.time_ms for x in p.parts) + p.unattributed_ms + p.gap_ms
    assert abs(summed - p.whole_ms) / p.whole_ms <= PARTS_SUM_TOLERANCE
    assert 0 < p.whole_ms <= p.host_ms
    # the parts are the top-level operators: one matmul in each projection's range
    by_name = {x.name: x for x in p.parts}
    assert by_name["qkv"].events == 1 and by_name["mlp_down"].events == 1


class _RawEvent:
    """The profiler's raw event (torch._C._autograd._KinetoEvent) as torch 2.11 and 2.13 both have it."""

    def __init__(self, name: str, device: str, start_us: float, end_us: float, corr: int, link: int = 0,
                 annotation: bool = False) -> None:
        from torch.autograd import DeviceType

        self._v = (name, DeviceType.CUDA if device == "cuda" else DeviceType.CPU, int(start_us * 1e3),
                   int(end_us * 1e3), corr, link, annotation)

    def name(self) -> str: return self._v[0]  # noqa: E704 - a fake's one-line accessors
    def device_type(self): return self._v[1]  # noqa: E704, ANN201
    def start_ns(self) -> int: return self._v[2]  # noqa: E704
    def end_ns(self) -> int: return self._v[3]  # noqa: E704
    def correlation_id(self) -> int: return self._v[4]  # noqa: E704
    def linked_correlation_id(self) -> int: return self._v[5]  # noqa: E704
    def is_user_annotation(self) -> bool: return self._v[6]  # noqa: E704
    def is_async(self) -> bool: return False  # noqa: E704
    def start_thread_id(self) -> int: return 1  # noqa: E704
    def end_thread_id(self) -> int: return 1  # noqa: E704


class _Torch211Profile:
    """A CUDA profile shaped as torch 2.11 gives it: FunctionEvents without linked_correlation_id
    (reading them on a GPU is the fault), the links only on the raw events."""

    def __init__(self, raw: list[_RawEvent]) -> None:
        self.profiler = type("P", (), {"kineto_results": type("K", (), {"events": lambda _self: raw})()})()

    def events(self) -> list:
        raise AssertionError("a GPU profile must be read from its raw events")


def test_a_gpu_profile_is_read_from_the_raw_events_where_every_torch_keeps_the_links() -> None:
    raw = [
        _RawEvent(BLOCK_RANGE, "cpu", 0, 100, 1, annotation=True),
        _RawEvent(PART_RANGE_PREFIX + "a", "cpu", 1, 40, 2, annotation=True),
        _RawEvent(PART_RANGE_PREFIX + "b", "cpu", 41, 90, 3, annotation=True),
        _RawEvent(BLOCK_RANGE, "cuda", 5, 99, 1, annotation=True),  # the range's device-side copy
        _RawEvent("aten::gelu", "cpu", 2, 5, 7), _RawEvent("cudaLaunchKernel", "cpu", 3, 4, 70, link=7),
        _RawEvent("aten::mm", "cpu", 42, 45, 8), _RawEvent("cudaLaunchKernel", "cpu", 43, 44, 80, link=8),
        _RawEvent("gelu_kernel", "cuda", 10, 30, 700, link=7),
        _RawEvent("gemm_kernel", "cuda", 45, 95, 800, link=8),
    ]
    cuda = DeviceInfo(kind="cuda", name="fake gpu", torch_device="cuda:0", memory_bytes=8 << 30, l2_bytes=50 << 20)
    events = _intervals(_Torch211Profile(raw), cuda)
    kernels = [(e.name, e.link) for e in events if e.kind == "kernel"]
    assert kernels == [("gelu_kernel", 7), ("gemm_kernel", 8)]
    ranges = {e.name for e in events if e.kind == "range"}
    assert ranges == {BLOCK_RANGE, PART_RANGE_PREFIX + "a", PART_RANGE_PREFIX + "b"}
    p = split(events, MODELS, clock=CUDA_CLOCK, host_ms=1.0)
    assert [(x.name, x.time_ms, x.events) for x in p.parts] == [("a", 0.020, 1), ("b", 0.050, 1)]
    assert p.whole_ms == pytest.approx(0.085) and p.gap_ms == pytest.approx(0.015)


def test_raw_and_function_events_of_a_real_profile_agree() -> None:
    """On a real (CPU) profile of the block the raw-event reading finds the same ranges and operators
    as the FunctionEvent one, with the links torch 2.13's FunctionEvents also carry."""
    from torch.profiler import ProfilerActivity, profile

    op = get_op("transformer_block")
    case = Case("transformer_block", 1, "layer", "eager", "float32", "cold", "launch",
                {"batch": 1, "seq": 32, "hidden": 64, "heads": 2})
    prepared = op.prepare(case, CPU, seed=5)
    prepared.fn()
    assert prepared.profiled is not None
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        prepared.profiled()
    from_raw = _device_intervals(prof.profiler.kineto_results.events())
    from_functions = _cpu_intervals(prof.events())

    raw = {(e.kind, e.name, e.id): e for e in from_raw}
    for e in from_functions:  # every range and operator is found, with its duration (to 1 us: the two round apart)
        twin = raw.get((e.kind, e.name, e.id))
        assert twin is not None, e
        assert twin.duration_us == pytest.approx(e.duration_us, abs=1.0)
    assert {k for k in raw if k[0] == "range"} == {(e.kind, e.name, e.id) for e in from_functions if e.kind == "range"}
    links = {(e.name, e.id): e.link for e in from_raw}
    for e in prof.events():
        if (e.name, e.id) in links and hasattr(e, "linked_correlation_id"):
            assert links[(e.name, e.id)] == e.linked_correlation_id
    assert sum(e.kind == "range" for e in from_raw) == 1 + len(prepared.part_models)


def _hand_ceilings(name: str) -> DeviceCeilings:
    """Roofs set by hand so that the wall of each part is known: ridge at 10 FLOP/byte (the
    block's matmuls lie above it, the activation far below)."""
    return DeviceCeilings(name, None, 0, (
        Ceiling(CeilingKind.MATRIX, 0.2, "hand", "hand", dtype="float32"),
        Ceiling(CeilingKind.VECTOR, 0.2, "hand", "hand", dtype="float32"),
        Ceiling(CeilingKind.HBM_RW, 20.0, "hand", "hand"),
    ))


@pytest.fixture(scope="module")
def planted_db(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("planted_layer")
    spec = folder / "planted.yaml"
    spec.write_text(
        "name: planted_layer\n"
        "defaults: {timing: {warmup_ms: 5, min_samples: 3, min_time_ms: 20, max_time_ms: 200}}\n"
        "benchmarks:\n"
        "  - name: slow\n"
        "    op: transformer_block_slow_part\n"
        "    devices: [cpu]\n"
        "    params: {batch: 1, seq: 64, hidden: 128, heads: 4}\n"
        "    zip: [{slow_part: [activation, qkv], slow_repeats: [800, 800]}]\n"  # dominant even on a loaded host
    )
    url = f"sqlite:///{folder / 'r.db'}"
    env = {**os.environ, "ROOFLAB_PLUGINS": "tests.runners.planted_layer", "PYTHONPATH": str(REPO)}
    # one intra-op thread: ops this small gain nothing from two, and a second thread spinning for a
    # core that a loaded host (the other pytest worker) has taken made each call ~20x slower
    proc = subprocess.run([sys.executable, "-m", "rooflab", "run", str(spec), "--db", url, "--threads", "1",
                           "--device", "cpu"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return url


@pytest.mark.parametrize(("part", "wall"), [("activation", "bandwidth"), ("qkv", "compute")])
def test_a_planted_slow_part_is_the_largest_share_with_the_right_wall(planted_db: str, part: str, wall: str) -> None:
    from rooflab.db.layer_query import layer_profiles
    from rooflab.reports.data.reads import load_device_results

    name, rows = load_device_results(planted_db, "cpu")
    profiles, parts = layer_profiles(planted_db)
    profiles = split_profiles(profiles, rows)
    mine = profiles[profiles["params"].map(lambda p: p["slow_part"] == part)]
    (b,) = breakdowns(mine, parts, rows, _hand_ceilings(name))
    largest = max(b.parts, key=lambda p: p.time_ms)
    assert largest.name == part, [(p.name, p.time_ms) for p in b.parts]
    assert largest.share > 0.4 and largest.wall == wall
    assert largest.events == 1 + b.params["slow_repeats"]  # the part's own op and the planted repetitions
    assert b.sums_ok


def test_rooflab_breakdown_prints_json_and_refuses_an_unknown_device(planted_db: str) -> None:
    """The command in this process (CliRunner): what it prints and its exit codes are the CLI's own."""
    from typer.testing import CliRunner

    from rooflab.runners.cli.app import app

    runner = CliRunner()
    ok = runner.invoke(app, ["breakdown", "--db", planted_db, "--device", "cpu", "--json"])
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.stdout, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))  # no NaN
    assert len(data["blocks"]) == 2
    for block in data["blocks"]:
        assert [p["name"] for p in block["parts"]][:3] == ["norm1", "qkv", "attention"]
        assert block["sums_ok"] and block["sum_tolerance"] == PARTS_SUM_TOLERANCE
    bad = runner.invoke(app, ["breakdown", "--db", planted_db, "--device", "no-such-device"])
    assert bad.exit_code == 2 and "no-such-device" in bad.output  # refused (an escaping exception: 1)
