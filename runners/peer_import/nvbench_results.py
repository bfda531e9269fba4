"""nvbench states as rooflab results.

An nvbench benchmark is the user's own kernel: rooflab has no op and no work model for it, so each
becomes a case of its own: op = the benchmark's name, family `nvbench`, backend `cuda`, dtype read
from a type axis (`T=F32` -> float32; `none` without one), params = the state's axis values (int64
axes as integers, float64 as numbers, the rest as written). A state gives up to two results:

- cold (`nv/cold/...`: nvbench flushes the L2 before each sample, as rooflab's cold cases): its
  samples from the `--jsonbin` sidecar when it is there (median, spread and CI from them), else the
  summaries: the GPU median if the version writes one, else the GPU mean; the relative stdev and the
  sample count give a CI of the mean;
- hot (`nv/batch/...`: launches back to back on a warm cache): the batch mean, no spread.

Bytes are the global-memory traffic the benchmark declared (`nv/cold/bw/global/bytes_per_second` x
the GPU mean time, which is how nvbench computes that rate), FLOPs 0: nvbench counts none, so an
nvbench point has no intensity and stays off the roofline's compute side; the printed bandwidth travels
with the cold result for the rule of every import (agreement.py: re-derived from the stored bytes and
nvbench's mean, kept as the result's mean). A skipped state is a `skipped` result with nvbench's reason.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from rooflab.db.rates import GB
from rooflab.record import (
    CaseRecord,
    EnvironmentRecord,
    Identity,
    MeasurementRecord,
    Statistics,
    TimingMethod,
    WorkModel,
)
from rooflab.runners.engine.stats import summarize
from rooflab.runners.peer_import.errors import PeerFormatError
from rooflab.runners.peer_import.nvbench import SAMPLES_TAG_PREFIX, NvbenchFile, NvbenchState, read_sidecar
from rooflab.runners.peer_import.printed import Printed, PrintedRate, StoredTime, parse_printed
from rooflab.runners.peer_import.results import (
    Conversion,
    Imported,
    ImportedRun,
    Source,
    When,
    digest,
    environment,
    mean_ci,
    point_statistics,
    run_id,
    run_record,
)
from rooflab.suite.case import make_case_key
from rooflab.vocab import CacheMode, FlushMethod, Pace, ResultStatus, TimingMode, Tool

FAMILY = "nvbench"
BACKEND = "cuda"
NO_DTYPE = "none"
BANDWIDTH_TAG = "nv/cold/bw/global/bytes_per_second"  # nvbench's global memory bandwidth: declared bytes / mean time
COLD_SAMPLES_TAG = f"{SAMPLES_TAG_PREFIX}nv/cold/"  # the sidecar of the cold GPU times (nv/cold/sample_times)
TYPE_NAMES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64", "I8": "int8", "I32": "int32",
              "float": "float32", "double": "float64", "__half": "float16", "half": "float16",
              "__nv_bfloat16": "bfloat16", "int8_t": "int8", "int32_t": "int32"}


def _param(axis_type: str, value: str) -> Any:
    try:
        if axis_type == "int64":
            return int(value)
        if axis_type == "float64":
            return float(value)
    except ValueError:
        pass
    return value


def case_of(state: NvbenchState, cache: str) -> CaseRecord:
    params = {a.name: _param(a.type, a.value) for a in state.axis_values}
    dtypes = [TYPE_NAMES[str(v)] for v in params.values() if str(v) in TYPE_NAMES]
    dtype = dtypes[0] if len(set(dtypes)) == 1 else NO_DTYPE
    key = make_case_key(state.benchmark, 1, BACKEND, dtype, cache, TimingMode.LAUNCH, params)
    return CaseRecord(key, state.benchmark, 1, FAMILY, BACKEND, dtype, params)


def sidecar(state: NvbenchState, folder: Path | None) -> Path | None:
    """The `--jsonbin` file of the state's cold GPU samples, as the JSON names it (None: it names none)."""
    for tag, summary in state.summaries.items():
        if tag.startswith(COLD_SAMPLES_TAG) and summary.filename and folder is not None:
            return folder / summary.filename
    return None


def _samples(state: NvbenchState, folder: Path | None) -> tuple[float, ...]:
    """The cold GPU samples (ms) of the state's sidecar, or () when there is none next to the JSON
    (the statistics then come from the summaries; convert_nvbench says so)."""
    path = sidecar(state, folder)
    if path is None or not path.exists():
        return ()
    return tuple(s * 1000.0 for s in read_sidecar(path))


def cold_statistics(state: NvbenchState, samples: tuple[float, ...]) -> Statistics | None:
    if samples:
        if not all(s > 0 for s in samples):
            raise PeerFormatError(f"state {state.name!r}: its sample file holds a time <= 0")
        return summarize(samples)
    mean = state.number("nv/cold/time/gpu/mean")
    if mean is None:
        return None
    median = state.number("nv/cold/time/gpu/median") or mean
    rel = state.number("nv/cold/time/gpu/stdev/relative")
    n = state.number("nv/cold/sample_size")
    low, high = state.number("nv/cold/time/gpu/min"), state.number("nv/cold/time/gpu/max")
    iqr = state.number("nv/cold/time/gpu/iqr/absolute")
    stats = point_statistics(median * 1000, min_ms=low * 1000 if low else None, max_ms=high * 1000 if high else None,
                             std_ms=rel * mean * 1000 if rel is not None else None, n_samples=int(n or 1),
                             rel_ci=mean_ci(rel, int(n) if n else None), iqr_ms=(iqr or 0.0) * 1000)
    return dataclasses.replace(stats, mean_ms=mean * 1000)


def _method(cache: str, version: str | None) -> TimingMethod:
    """nvbench's cold samples follow a memset of an L2-sized buffer (a write sweep); its batch runs
    launches back to back with nothing flushed."""
    hot = cache == CacheMode.HOT
    return TimingMethod(cache=cache, timing_mode=TimingMode.LAUNCH,
                        flush_method=FlushMethod.NONE if hot else FlushMethod.WRITE_SWEEP,
                        pace=Pace.BACK_TO_BACK if hot else None, tool=Tool.NVBENCH, tool_version=version)


def _bandwidth(state: NvbenchState, nbytes: int) -> tuple[PrintedRate, ...]:
    """The global memory bandwidth nvbench printed for the state: its declared bytes over its mean time."""
    found = state.summaries.get(BANDWIDTH_TAG)
    try:
        printed = parse_printed(str(found.value).strip()) if found is not None and nbytes else None
    except ValueError:
        printed = None
    if printed is None:
        return ()
    return (PrintedRate("the global memory bandwidth", Printed(printed.value / GB, printed.half_ulp / GB),
                        f"state {state.name!r} of {state.benchmark!r}", time=StoredTime.MEAN),)


def state_results(state: NvbenchState, env: EnvironmentRecord, run: str, when: When, version: str | None,
                  folder: Path | None) -> list[Imported]:
    """The cold and hot results of one state (one `skipped` result for a skipped state)."""
    identity = Identity(run_id=run, case=case_of(state, CacheMode.COLD), device_fingerprint=env.device_fingerprint,
                        device_uuid=f"cuda:{state.device}", measured_at=when.at)
    if state.skipped:
        return [Imported(MeasurementRecord(identity=identity, status=ResultStatus.SKIPPED,
                                           error=state.skip_reason or "skipped by nvbench",
                                           method=_method(CacheMode.COLD, version)))]
    out = []
    mean = state.number("nv/cold/time/gpu/mean")
    rate = state.number(BANDWIDTH_TAG)
    nbytes = round(rate * mean) if rate is not None and mean is not None else 0
    cold = cold_statistics(state, samples := _samples(state, folder))
    if cold is not None:
        if mean is not None:
            cold = dataclasses.replace(cold, mean_ms=mean * 1000)  # nvbench's own mean, which its bandwidth is from
        out.append(Imported(MeasurementRecord(identity=identity, status=ResultStatus.OK,
                                              method=_method(CacheMode.COLD, version), stats=cold,
                                              work=WorkModel(flops=0, bytes=nbytes), samples_ms=samples),
                            _bandwidth(state, nbytes)))
    batch = state.number("nv/batch/time/gpu/mean")
    if batch is not None and batch > 0:
        n = state.number("nv/batch/sample_size")
        out.append(Imported(MeasurementRecord(
            identity=dataclasses.replace(identity, case=case_of(state, CacheMode.HOT)), status=ResultStatus.OK,
            method=_method(CacheMode.HOT, version), stats=point_statistics(batch * 1000, n_samples=int(n or 1)),
            work=WorkModel(flops=0, bytes=nbytes))))
    return out


def _environments(parsed: NvbenchFile) -> dict[int, EnvironmentRecord]:
    out = {}
    for device in parsed.devices.values():
        cc = f"{device.sm_version // 100}.{device.sm_version % 100 // 10}" if device.sm_version else None
        out[device.id] = environment(Tool.NVBENCH, device.name, {"device_id": device.id},
                                     memory_bytes=device.global_memory_bytes or 0,
                                     l2_bytes=device.l2_cache_bytes or 0, sm_count=device.number_of_sms or 0,
                                     compute_capability=cc)
    return out


def convert_nvbench(parsed: NvbenchFile, source: Source) -> Conversion:
    """Every state of an nvbench file as rooflab results: one run."""
    conversion = Conversion(tool=Tool.NVBENCH)
    content = digest(Tool.NVBENCH, [dataclasses.asdict(s) for s in parsed.states],
                     [dataclasses.asdict(d) for d in parsed.devices.values()])
    rid = run_id(Tool.NVBENCH, content)
    envs = _environments(parsed)
    when, folder = source.when, source.folder
    run = ImportedRun(run=run_record(Tool.NVBENCH, rid, content, when, "", " ".join(parsed.argv),
                                     f"imported from {source.name} (nvbench {parsed.nvbench_version or ''})".strip()))
    for state in parsed.states:
        env = envs.get(state.device)
        if env is None:
            conversion.left_out.append(f"state {state.name!r}: device {state.device} is not in the file's devices")
            continue
        items = state_results(state, env, rid, when, parsed.nvbench_version, folder)
        if not items:
            conversion.left_out.append(f"state {state.name!r} of {state.benchmark!r}: no GPU time in its summaries")
        run.results.extend(items)
        if env not in run.environments:
            run.environments.append(env)
    missing = [s for s in parsed.states if (path := sidecar(s, folder)) is not None and not path.exists()]
    if missing:
        conversion.notes.append(f"{len(missing)} states name --jsonbin sample files that are not next to the JSON "
                                f"(first: {sidecar(missing[0], folder)}): their statistics come from the summaries")
    skipped = sum(m.status == ResultStatus.SKIPPED for m in run.measurements)
    if skipped:
        conversion.notes.append(f"{skipped} skipped states stored as skipped, with nvbench's reasons")
    conversion.runs = [run] if run.results else []
    return conversion
