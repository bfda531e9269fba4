"""The shipped specs load, validate and expand with the real op registry, and keep their promises."""
from __future__ import annotations

from collections import Counter

import pytest

from rooflab.suite.ops.registry import all_ops, builtin_ops
from rooflab.suite.quality import NOISY_REL_CI
from rooflab.suite.spec import SPECS_DIR, expand, load_spec

SHIPPED = ("quick", "nightly", "roofline", "health", "links")
MIB = 1 << 20
H100_L2_BYTES = 50 * MIB
CPU_LLC_BYTES = 32 * MIB
B200_L2_BYTES = 126 * MIB


@pytest.fixture(scope="module")
def ops():
    return all_ops()


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_spec_loads_and_expands(name: str, ops) -> None:
    spec = load_spec(SPECS_DIR / f"{name}.yaml", ops=ops)
    assert spec.name == name and spec.description
    cases = expand(spec, ops=ops)
    assert cases and len({c.case_key for c in cases}) == len(cases)
    for case in cases:
        op = ops[case.op]
        assert case.op_version == op.version and case.family == op.family
        assert op.flops(case.params, case.dtype) >= 0 and op.bytes(case.params, case.dtype) > 0
        assert case.backend in op.backends and case.dtype in op.dtypes
        allowed = getattr(op, "backend_dtypes", {}).get(case.backend)
        assert allowed is None or case.dtype in allowed, f"{case.case_key}: backend cannot run this dtype"
    # a shipped spec can be named instead of given as a path
    assert load_spec(name, ops=ops).sha256 == spec.sha256


def test_quick_covers_every_family_on_both_device_kinds_at_moderate_size(ops) -> None:
    spec = load_spec("quick", ops=ops)
    for kind, most in (("cpu", 90), ("cuda", 210)):  # 63 kernel cases and 22 small collectives on a CPU
        cases = expand(spec, kind, ops=ops)
        assert len(cases) <= most
        families = {c.family for c in cases}
        assert families == {"pointwise", "reduction", "gemm", "attention", "layer", "overhead", "probe", "collective"}
        probes = {c.op for c in cases if c.family == "probe"}
        # the three memory roofs (read-write, read-only, write-only); the GPU's quick spends scale's
        # cases on the fill (the loan's roofs step runs it within its time)
        streams = {"stream_copy", "stream_add", "stream_triad", "stream_dot", "stream_fill"}
        assert probes == streams | {"fma_intensity", "elementary"} | ({"stream_scale"} if kind == "cpu" else set())
        assert any(c.cache == "hot" for c in cases)
        assert {c.backend for c in cases if c.op in ("cos_cos", "bias_gelu_dropout_residual")} == {"eager", "compiled"}
        # a quick spec: each case gives up converging within a second, but the CPU's stream collectives
        # from 1 MiB per rank, which need seconds of streams for a median to a few per cent there
        long = {c.case_key for c in cases if kind == "cpu" and _cpu_stream_collective_from_1mib(c, ops)}
        assert all(c.timing.max_time_ms <= 1000 for c in cases if c.case_key not in long)
        assert all(c.timing.max_time_ms <= 12_000 for c in cases)
    gpu_hot = [c for c in expand(spec, "cuda", ops=ops) if c.cache == "hot"]
    assert {c.timing_mode for c in gpu_hot} == {"launch", "graph"}
    assert max(ops[c.op].bytes(c.params, c.dtype) for c in gpu_hot) >= 4 * H100_L2_BYTES
    cpu = expand(spec, "cpu", ops=ops)
    # collectives on the CPU: gloo, two ranks, 4 KiB .. 16 MiB per rank (all_reduce and all_gather) in
    # the default mode (stream), and isolated beside it at 4 KiB and 1 MiB, where the two differ most
    for op in ("all_reduce", "all_gather"):
        for mode, expected in (("stream", [4096 * 4**i for i in range(7)]), ("isolated", [4096, MIB])):
            sizes = sorted(ops[op].size_bytes(c.params, c.dtype) // 2 ** (op == "all_gather")
                           for c in cpu if c.op == op and c.collective_mode == mode)
            assert sizes == expected, (op, mode)
    for kind in ("cpu", "cuda"):
        isolated = [c for c in expand(spec, kind, ops=ops) if c.collective_mode == "isolated"]
        assert {c.op for c in isolated} == {"all_reduce", "all_gather"}, kind
    assert {(c.backend, c.params["ranks"]) for c in cpu if c.family == "collective"} == {("gloo", 2)}
    assert {c.backend for c in expand(spec, "cuda", ops=ops) if c.family == "collective"} == {"nccl"}
    # each compile costs seconds on a small CPU: only a few compiled cases
    assert Counter(c.backend for c in cpu)["compiled"] <= 10
    # cold CPU streams move at least 4x a 32 MiB last-level cache
    for c in cpu:
        if c.op.startswith("stream_") and c.cache == "cold":
            assert ops[c.op].bytes(c.params, c.dtype) >= 4 * CPU_LLC_BYTES, c.case_key


def _cpu_stream_collective_from_1mib(case, ops) -> bool:
    return (case.family == "collective" and case.collective_mode == "stream"
            and ops[case.op].size_bytes(case.params, case.dtype) >= MIB)


def test_quick_cpu_stream_collectives_from_1mib_sample_long_enough_to_repeat(ops) -> None:
    """On two CPUs a 1 MiB gloo call spreads from 0.9 to 5 ms and a 20-call stream's mean by about
    26 % (docs/collectives.md): five streams (200 ms) left quick's runs 1.2-1.4x apart, each noisy.
    From 1 MiB the stream cases sample for seconds, until the median's CI is tighter than the bound
    that would mark them noisy."""
    cases = [c for c in expand(load_spec("quick", ops=ops), "cpu", ops=ops) if _cpu_stream_collective_from_1mib(c, ops)]
    assert {c.op for c in cases} == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
                                     "send_recv"}
    for c in cases:
        assert c.timing.min_time_ms >= 3000 and c.timing.max_time_ms >= 4 * c.timing.min_time_ms, c.case_key
        assert c.timing.target_precision < NOISY_REL_CI, c.case_key


def _stream_bytes(cases, ops, cache: str) -> list[int]:
    return [ops[c.op].bytes(c.params, c.dtype) for c in cases if c.op.startswith("stream_") and c.cache == cache]


def test_roofline_probes(ops) -> None:
    spec = load_spec("roofline", ops=ops)
    cuda = expand(spec, "cuda", ops=ops)
    assert {c.family for c in cuda} <= {"probe", "gemm", "overhead"}
    assert {c.op for c in cuda if c.family == "gemm"} == {"matmul"}
    cold = _stream_bytes(cuda, ops, "cold")
    assert cold and min(cold) >= 4 * H100_L2_BYTES
    assert max(c.params["n"] for c in cuda if c.op.startswith("stream_")) * 4 == 1 << 30  # 1 GiB per array
    hot = [ops[c.op].bytes(c.params, c.dtype) for c in cuda if c.op == "stream_copy" and c.cache == "hot"]
    assert min(hot) == 256 * 1024 and max(hot) == 256 * MIB
    # small hot kernels are launch-bound: the L2 plateau needs graph replay too
    assert {c.timing_mode for c in cuda if c.cache == "hot"} == {"launch", "graph"}
    fma = {(c.dtype, c.params["k"]) for c in cuda if c.op == "fma_intensity"}
    assert fma == {(d, 2**e) for d in ("float32", "float16", "bfloat16", "float64") for e in range(11)}
    peak_dtypes = {c.dtype for c in cuda if c.benchmark == "gemm_peak"}
    assert peak_dtypes == {"float64", "float32", "tf32", "float16", "bfloat16", "float8_e4m3fn"}
    # the matrix roof is what the part sustains: the peak finder runs hot, back to back
    peak = [c for c in cuda if c.benchmark == "gemm_peak"]
    assert {(c.cache, c.timing.pace) for c in peak} == {("hot", "back_to_back")}
    assert {(c.backend, c.timing_mode) for c in cuda if c.op == "launch"} == {
        ("eager", "launch"),
        ("eager", "graph"),
        ("cupy", "launch"),
        ("cupy", "graph"),
    }
    cpu = expand(spec, "cpu", ops=ops)
    assert cpu and all(c.timing_mode == "launch" for c in cpu)
    assert {c.cache for c in cpu if c.benchmark == "cpu_gemm_peak"} == {"hot"}
    assert min(_stream_bytes(cpu, ops, "cold")) >= 4 * CPU_LLC_BYTES


def test_nightly_is_gpu_only_and_complete(ops) -> None:
    spec = load_spec("nightly", ops=ops)
    assert expand(spec, "cpu", ops=ops) == []
    cuda = expand(spec, "cuda", ops=ops)
    assert {c.op for c in cuda} == set(builtin_ops())
    assert {c.cache for c in cuda} == {"cold", "hot"} and {c.timing_mode for c in cuda} == {"launch", "graph"}
    assert "float8_e4m3fn" in {c.dtype for c in cuda if c.op == "matmul"}
    kernels = {c.params["kernel"] for c in cuda if c.op == "attention"}
    assert kernels == {"sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "sdpa_math", "naive"}
    naive_seq = {c.params["seq_q"] for c in cuda if c.op == "attention" and c.params["kernel"] == "naive"}
    assert min(naive_seq) == 1024 and max(naive_seq) == 16384
    for op in ("cos_cos", "bias_gelu_dropout_residual", "matmul_bias_gelu"):
        assert {"eager", "compiled"} <= {c.backend for c in cuda if c.op == op}
    assert all(c.max_memory_fraction == 0.8 for c in cuda)
    # collectives: nccl-tests' range, 8 B .. 1 GiB per rank in x2 steps, on every GPU of the run
    collectives = [c for c in cuda if c.family == "collective"]
    assert {c.backend for c in collectives} == {"nccl"} and {c.cache for c in collectives} == {"hot"}
    five = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
    for op in five:
        for dtype in ("float32", "bfloat16"):
            sizes = sorted(c.params["n"] * (4 if dtype == "float32" else 2)
                           for c in collectives if c.op == op and c.dtype == dtype and c.collective_mode == "stream")
            assert sizes == [2**e for e in range(3, 31)], (op, dtype)
            assert {c.params["ranks"] for c in collectives if c.op == op} == {"all"}
    # the isolated mode beside it where the two differ most: 4 B .. 1 MiB per rank, float32
    isolated = sorted((c.op, c.params["n"] * 4) for c in collectives if c.collective_mode == "isolated")
    assert isolated == sorted((op, 4 * 8**e) for op in ("all_reduce", "all_gather") for e in range(7))


def test_health_tells_each_wall_apart_on_every_device(ops) -> None:
    """The fleet's night (docs/fleet.md): few cases, every wall, HBM at >= 4x the largest L2, the GEMMs
    sustained (hot, back to back, 10 s of warmup and 5 s of samples), the node's all_reduce over every
    GPU; on a CPU the same walls sized for one core."""
    spec = load_spec("health", ops=ops)
    cuda = expand(spec, "cuda", ops=ops)
    assert len(cuda) <= 10
    assert {c.op for c in cuda} == {"stream_copy", "stream_triad", "matmul", "elementary", "launch", "all_reduce"}
    assert min(_stream_bytes(cuda, ops, "cold")) >= 4 * B200_L2_BYTES
    gemms = [c for c in cuda if c.op == "matmul"]
    assert {c.dtype for c in gemms} == {"bfloat16", "float8_e4m3fn"} and {c.cache for c in gemms} == {"hot"}
    for c in gemms:
        t = c.timing
        assert t.warmup_ms >= 10_000 and t.min_time_ms == t.max_time_ms == 5_000 and t.pace == "back_to_back"
    (reduce,) = [c for c in cuda if c.family == "collective"]
    assert reduce.params["ranks"] == "all" and reduce.collective_mode == "stream" and reduce.backend == "nccl"
    cpu = expand(spec, "cpu", ops=ops)
    assert {c.op for c in cpu} == {"stream_copy", "stream_triad", "matmul", "launch"}
    assert min(_stream_bytes(cpu, ops, "cold")) >= 4 * CPU_LLC_BYTES
    assert all(c.timing.max_time_ms <= 1000 for c in cpu)


def test_links_measures_every_direction_at_a_latency_and_a_bandwidth_size(ops) -> None:
    """`rooflab run links`: on a CPU 4 ranks (`ranks: all` of the link matrix), on GPUs every GPU of
    the run, each a matrix of pairs at 8 B and a bandwidth size, in each direction and both at once;
    beside them, the all_reduce a bisection runs on halves of the nodes."""
    from rooflab.suite.ops.collective import world_size
    from rooflab.suite.ops.pairs import CPU_PAIR_RANKS

    spec = load_spec("links", ops=ops)
    for kind, big in (("cpu", 1 * MIB), ("cuda", 256 * MIB)):
        every = expand(spec, kind, ops=ops)
        cases = [c for c in every if c.op == "sendrecv_pairs"]
        assert {c.op for c in every} == {"sendrecv_pairs", "all_reduce"} and len(every) == len(cases) + 1
        assert {c.params["ranks"] for c in every} == {"all"}
        sizes = Counter((c.params["direction"], ops[c.op].bytes(c.params, c.dtype)) for c in cases)
        assert sizes == Counter({(d, b): 1 for d in ("a_to_b", "b_to_a", "both") for b in (8, big)})
        assert all(c.collective_mode == "stream" and c.params["pairs_at_once"] == "all" for c in cases)
    cpu = next(c for c in expand(spec, "cpu", ops=ops) if c.op == "sendrecv_pairs")
    assert world_size(cpu.params["ranks"], all_ranks=ops[cpu.op].cpu_all_ranks) == CPU_PAIR_RANKS == 4
