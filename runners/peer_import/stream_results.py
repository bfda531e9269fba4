"""BabelStream kernels as rooflab's stream probes (suite/ops/probes.py).

Copy, Mul, Add, Triad and Dot are rooflab's `stream_copy`, `stream_scale`, `stream_add`,
`stream_triad` and `stream_dot` (the same arrays and the same bytes: 2, 2, 3, 3 and 2 arrays of n
elements), with `n` = n_elements and the dtype from sizeof (4: float32, 8: float64). The backend is
BabelStream's programming model when the output names it (`cuda`, `hip`, ...), else `native`. The
cache is `hot`: BabelStream flushes nothing between its runs (its arrays are meant to exceed the
caches, which the ceilings check against the device's L2).

Times: BabelStream prints the fastest, slowest and average of its runs (the first run left out), and
its bandwidth from the fastest. The result's figure is that fastest run, so that the rate rooflab
stores is the one BabelStream printed: its time is the kernel's bytes at the printed bandwidth, which
carries more digits than the printed time (three decimals of MB/s against five of seconds), and
agreement.py holds it to the printed time within that time's rounding. The average is kept as the
mean and the slowest as the max. Nstream (no rooflab op) and the Init/Read phases are left out, with
the reason. A kernel BabelStream's own check failed is `incorrect` (babelstream.kernel_failed says
which its check's lines make wrong). Each run of a file (a batch script's loop over sizes) gives its
own results; two runs of one size are two rooflab runs (results.split_runs).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from rooflab.db.rates import GB, ms_at_gbps
from rooflab.record import CaseRecord, EnvironmentRecord, Identity, MeasurementRecord, TimingMethod
from rooflab.runners.peer_import.babelstream import StreamOutput, StreamRow, kernel_failed
from rooflab.runners.peer_import.printed import Printed, PrintedRate, PrintedTime
from rooflab.runners.peer_import.results import (
    Conversion,
    Imported,
    Source,
    When,
    digest,
    environment,
    note,
    point_statistics,
    split_runs,
)
from rooflab.suite.case import Case
from rooflab.suite.ops.base import work_model
from rooflab.suite.ops.registry import get_op
from rooflab.vocab import CacheMode, DeviceKind, FlushMethod, Pace, ResultStatus, TimingMode, Tool

KERNELS = {"copy": "stream_copy", "mul": "stream_scale", "scale": "stream_scale", "add": "stream_add",
           "triad": "stream_triad", "dot": "stream_dot"}
DTYPES = {4: "float32", 8: "float64", 2: "float16"}
CPU_MODELS = ("openmp", "omp", "tbb", "std", "serial", "kokkos-openmp")


def _backend(model: str | None) -> str:
    return model.strip().lower().replace(" ", "-") if model else "native"


def row_result(row: StreamRow, output: StreamOutput, fingerprint: str,
               when: When) -> tuple[Imported | None, str | None]:
    """The result of one kernel line with the bandwidth it printed (None with the reason when it is left out)."""
    name = KERNELS.get(row.function.lower())
    dtype = DTYPES.get(row.sizeof)
    if row.is_phase or name is None:
        return None, f"line {row.line}: {row.function} has no rooflab op: left out"
    if dtype is None:
        return None, f"line {row.line}: elements of {row.sizeof} bytes have no rooflab dtype: left out"
    op = get_op(name)
    params = op.resolved_params({"n": row.n_elements})
    work = work_model(op, params, dtype)
    failed = kernel_failed(row.function, output.failed)
    runs = max(1, (row.num_times or 2) - 1)
    bandwidth = Printed(row.bandwidth_bytes_per_s.value / GB, row.bandwidth_bytes_per_s.half_ulp / GB)
    fastest_ms = _fastest_ms(row, work.bytes, bandwidth)
    stats = dataclasses.replace(
        point_statistics(fastest_ms, min_ms=fastest_ms,
                         max_ms=row.max_s.value * 1000 if row.max_s is not None else None, n_samples=runs),
        mean_ms=row.avg_s.value * 1000 if row.avg_s is not None else fastest_ms)
    case = Case(op=op.name, op_version=op.version, family=op.family, backend=_backend(output.model), dtype=dtype,
                cache=CacheMode.HOT, timing_mode=TimingMode.LAUNCH, params=params)
    record = MeasurementRecord(
        identity=Identity(run_id="", case=CaseRecord(case.case_key, case.op, case.op_version, case.family,
                                                     case.backend, case.dtype, case.params),
                          device_fingerprint=fingerprint, measured_at=when.at),
        status=ResultStatus.INCORRECT if failed else ResultStatus.OK,
        error=note([failed, f"the figure is BabelStream's fastest of {runs} runs (its bandwidth is from it); the "
                            "average is the mean, the slowest the max"]),
        method=TimingMethod(cache=CacheMode.HOT, timing_mode=TimingMode.LAUNCH, flush_method=FlushMethod.NONE,
                            pace=Pace.BACK_TO_BACK, tool=Tool.BABELSTREAM, tool_version=output.version),
        stats=stats, work=work)
    where = f"{row.function} of {row.n_elements} elements"
    fastest = row.min_s
    return Imported(record, (
        PrintedRate(f"{row.function}'s bandwidth", bandwidth, where, row.line),
        PrintedTime(f"{row.function}'s fastest time", Printed(fastest.value * 1000, fastest.half_ulp * 1000), where,
                    row.line, slack=bandwidth.half_ulp / bandwidth.value if bandwidth.value > 0 else 0.0))), None


def _fastest_ms(row: StreamRow, nbytes: int, bandwidth: Printed) -> float:
    """The fastest run's time: the kernel's bytes at its printed bandwidth, which BabelStream computed from
    that time and prints more finely than the time itself (agreement.py holds it to the printed time)."""
    if bandwidth.value > 0 and nbytes > 0:
        return float(ms_at_gbps(nbytes, bandwidth.value))
    return row.min_s.value * 1000


def convert_babelstream(outputs: Sequence[StreamOutput], source: Source) -> Conversion:
    """Every kernel of every run of a BabelStream output as rooflab results (a run naming no device
    needs --device-name; without either its results are left out)."""
    conversion = Conversion(tool=Tool.BABELSTREAM, notes=[n for o in outputs for n in o.notes])
    results: list[tuple[Imported, EnvironmentRecord]] = []
    for output in outputs:
        name = output.device_name or source.device_name
        if not name:
            conversion.left_out.append(f"the run at line {output.rows[0].line if output.rows else '?'} names no "
                                       "device (BabelStream prints none with --csv in some versions, and none for "
                                       "some CPU models): give --device-name")
            continue
        kind = DeviceKind.CPU if (output.model or "").lower() in CPU_MODELS else DeviceKind.CUDA
        env = environment(Tool.BABELSTREAM, name, {"model": output.model, "tool_version": output.version}, kind=kind)
        for row in output.rows:
            item, left_out = row_result(row, output, env.device_fingerprint, source.when)
            if item is not None:
                results.append((item, env))
            if left_out:
                conversion.left_out.append(left_out)
    content = digest(Tool.BABELSTREAM, *[part for o in outputs
                                         for part in (o.device_name or source.device_name,
                                                      [dataclasses.asdict(r) for r in o.rows])])
    conversion.runs = split_runs(results, Tool.BABELSTREAM, content, f"imported from {source.name} (BabelStream)", "",
                                 source.when)
    return conversion
