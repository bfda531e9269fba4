"""BabelStream kernels as rooflab's stream probes (suite/ops/probes.py).

Copy, Mul, Add, Triad and Dot are rooflab's `stream_copy`, `stream_scale`, `stream_add`,
`stream_triad` and `stream_dot` (the same arrays and the same bytes: 2, 2, 3, 3 and 2 arrays of n
elements), with `n` = n_elements and the dtype from sizeof (4: float32, 8: float64). The backend is
BabelStream's programming model when the output names it (`cuda`, `hip`, ...), else `native`. The
cache is `hot`: BabelStream flushes nothing between its runs (its arrays are meant to exceed the
caches, which the ceilings check against the device's L2).

Times: BabelStream prints the fastest, slowest and average of its runs (the first run left out).
The result's central figure is the average (rooflab stores no minimum as a median); the fastest
and slowest are its min and max. BabelStream's own bandwidth (from the fastest run) is recomputed
from rooflab's bytes and the printed fastest time and held against the printed figure. Nstream (no
rooflab op) and the Init/Read phases are left out, with the reason. A kernel BabelStream's own check
failed is `incorrect` (babelstream.kernel_failed says which its check's lines make wrong).
"""
from __future__ import annotations

import dataclasses

from rooflab.record import CaseRecord, Identity, MeasurementRecord, TimingMethod, WorkModel
from rooflab.runners.peer_import.babelstream import StreamOutput, StreamRow, kernel_failed
from rooflab.runners.peer_import.results import (
    Check,
    Conversion,
    ImportedRun,
    When,
    digest,
    environment,
    note,
    point_statistics,
    run_id,
    run_record,
)
from rooflab.suite.case import Case
from rooflab.suite.ops.registry import get_op
from rooflab.vocab import CacheMode, DeviceKind, FlushMethod, Pace, ResultStatus, TimingMode, Tool

KERNELS = {"copy": "stream_copy", "mul": "stream_scale", "scale": "stream_scale", "add": "stream_add",
           "triad": "stream_triad", "dot": "stream_dot"}
DTYPES = {4: "float32", 8: "float64", 2: "float16"}
CPU_MODELS = ("openmp", "omp", "tbb", "std", "serial", "kokkos-openmp")


def _backend(model: str | None) -> str:
    return model.strip().lower().replace(" ", "-") if model else "native"


def row_result(row: StreamRow, output: StreamOutput, fingerprint: str, run: str,
               when: When) -> tuple[MeasurementRecord | None, str | None, str | None]:
    """(the result, a left-out reason, a disagreement) of one kernel line."""
    name = KERNELS.get(row.function.lower())
    dtype = DTYPES.get(row.sizeof)
    if row.is_phase or name is None:
        return None, f"line {row.line}: {row.function} has no rooflab op: left out", None
    if dtype is None:
        return None, f"line {row.line}: elements of {row.sizeof} bytes have no rooflab dtype: left out", None
    op = get_op(name)
    params = op.resolved_params({"n": row.n_elements})
    nbytes, flops = op.bytes(params, dtype), op.flops(params, dtype)
    fastest = row.min_s
    check = Check("bandwidth", row.bandwidth_bytes_per_s, nbytes / fastest.value, fastest.half_ulp / fastest.value)
    disagreement = None if check.agrees else f"line {row.line}: {row.function} {check.describe()}"
    failed = kernel_failed(row.function, output.failed)
    centre = row.avg_s.value if row.avg_s is not None else fastest.value
    stats = point_statistics(centre * 1000, min_ms=fastest.value * 1000,
                             max_ms=row.max_s.value * 1000 if row.max_s is not None else None,
                             n_samples=max(1, (row.num_times or 2) - 1))
    case = Case(op=op.name, op_version=op.version, family=op.family, backend=_backend(output.model), dtype=dtype,
                cache=CacheMode.HOT, timing_mode=TimingMode.LAUNCH, params=params)
    record = MeasurementRecord(
        identity=Identity(run_id=run, case=CaseRecord(case.case_key, case.op, case.op_version, case.family,
                                                      case.backend, case.dtype, case.params),
                          device_fingerprint=fingerprint, measured_at=when.at),
        status=ResultStatus.INCORRECT if failed else ResultStatus.OK,
        error=note([failed,
                    f"the median is BabelStream's average of {max(1, (row.num_times or 2) - 1)} runs; its "
                    f"bandwidth is from the fastest ({fastest.value:g} s)",
                    check.describe() if disagreement else None]),
        method=TimingMethod(cache=CacheMode.HOT, timing_mode=TimingMode.LAUNCH, flush_method=FlushMethod.NONE,
                            pace=Pace.BACK_TO_BACK, tool=Tool.BABELSTREAM, tool_version=output.version),
        stats=stats, work=WorkModel(flops=flops, bytes=nbytes))
    return record, None, disagreement


def convert_babelstream(output: StreamOutput, *, source: str, when: When, device_name: str | None) -> Conversion:
    """Every kernel of a BabelStream CSV as rooflab results: one run (a file naming no device needs
    `device_name`; without either the file is left out)."""
    conversion = Conversion(tool=Tool.BABELSTREAM, notes=list(output.notes))
    name = output.device_name or device_name
    if not name:
        conversion.left_out.append("the output names no device (BabelStream prints none with --csv in some "
                                   "versions): give --device-name")
        return conversion
    kind = DeviceKind.CPU if (output.model or "").lower() in CPU_MODELS else DeviceKind.CUDA
    env = environment(Tool.BABELSTREAM, name, {"model": output.model, "tool_version": output.version}, kind=kind)
    content = digest(Tool.BABELSTREAM, name, [dataclasses.asdict(r) for r in output.rows])
    rid = run_id(Tool.BABELSTREAM, content)
    description = f"imported from {source} (BabelStream)"
    run = ImportedRun(run=run_record(Tool.BABELSTREAM, rid, content, when, "", "", description), environments=[env])
    for row in output.rows:
        record, left_out, disagreement = row_result(row, output, env.device_fingerprint, rid, when)
        if record is not None:
            run.measurements.append(record)
        if left_out:
            conversion.left_out.append(left_out)
        if disagreement:
            conversion.disagreements.append(disagreement)
    conversion.runs = [run] if run.measurements else []
    return conversion
