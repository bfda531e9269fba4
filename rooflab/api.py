"""The public Python API: time a callable, run a spec, read results back, add an op.

    import rooflab
    result = rooflab.measure(lambda: x @ y)            # like triton.testing.do_bench(fn)
    print(result.median_ms, result.p10_ms, result.p90_ms, result.stop_reason)

Everything here is a thin, typed front for the engine, store and query functions that the
`rooflab` command uses, so a number from the API means what the same number from a run means
(docs/path-of-a-number.md follows one from the timer to the chart).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rooflab.runners.errors import UserInputError
from rooflab.suite.case import modes_problem
from rooflab.suite.ops.registry import register
from rooflab.suite.timing import TimingSettings

if TYPE_CHECKING:  # pandas, torch and the runners load only when a function is called
    import pandas as pd

    from rooflab.record import EnvironmentRecord, MachineObservation, Statistics, TimingMethod
    from rooflab.runners.counters.session import CountersReport
    from rooflab.runners.machine.clocks import ClockReport
    from rooflab.runners.orchestration.session import RunSummary

__all__ = ["MachineState", "MeasureResult", "measure", "run", "results", "runs", "history", "register", "counters"]

DEFAULT_DB = "sqlite:///results.db"


@dataclass(frozen=True)
class MachineState:
    """The device and software a measurement ran on, and its clocks while it ran.

    `environment` is what a run stores for its device (`device_fingerprint` decides which results
    are comparable; `info` holds the rest: UUID, clocks, power limit, host, versions, ...);
    `clocks` is the NVML report around the timing (None fields and `throttled` False on a CPU or
    without NVML). `to_dict()` is plain JSON-serialisable data.
    """

    environment: EnvironmentRecord
    clocks: ClockReport

    @property
    def throttled(self) -> bool:
        return self.clocks.throttled

    def to_dict(self) -> dict[str, Any]:
        env = self.environment
        return {
            "environment": {
                **{f.name: getattr(env, f.name) for f in fields(env) if f.name not in ("identity", "info")},
                "identity": _plain(env.identity),
                "info": _plain(env.info),
            },
            "clocks": _plain(asdict(self.clocks)),
        }


@dataclass(frozen=True)
class MeasureResult:
    """One callable timed by rooflab's engine: the same parts a run's measurement record holds.

    `stats` (rooflab.record.Statistics: median, p10/p90, mean, extremes, IQR, std, the median's
    95 % CI), `method` (TimingMethod: cache and timing mode, clock, hold, flush, why sampling
    stopped, first call, warmup), `observation` (MachineObservation: clocks, throttling, power,
    quality) and the raw `samples_ms`. Every field of those parts also reads directly
    (`result.median_ms`, `result.stop_reason`, `result.quality`). Times are milliseconds per call
    (per launch in graph mode: a replay's time over its launches).
    """

    samples_ms: tuple[float, ...] = field(repr=False)  # every kept sample, in the order taken
    stats: Statistics
    method: TimingMethod
    observation: MachineObservation
    device: str  # torch device string, e.g. "cuda:0" or "cpu"
    machine: MachineState = field(repr=False)

    def __getattr__(self, name: str) -> Any:
        """A field of `stats`, `method` or `observation` by its own name (`result.median_ms`)."""
        if not name.startswith("_"):
            for part in (self.stats, self.method, self.observation):
                if name in type(part).__dataclass_fields__:
                    return getattr(part, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def device_name(self) -> str:
        return self.machine.environment.device_name

    @property
    def device_fingerprint(self) -> str:
        return self.machine.environment.device_fingerprint

    def __repr__(self) -> str:
        """A short summary, as torch.utils.benchmark's `Measurement` prints itself, for `print(result)`
        and the REPL alike (every field: `to_dict()`). Eleven samples of 10, 11, ..., 20 us taken in
        graph mode print (tests/test_api.py):

            <rooflab.MeasureResult on cuda:0 (NVIDIA H100 80GB HBM3)>
              median 15 us, 95 % CI 11 us to 19 us (±26.7 %)
              p10 11 us, p90 19 us, IQR 5 us
              11 samples, stopped: converged; cold cache, graph timing, 20 launches a sample, clock cuda_event
              quality: good
        """
        from rooflab.runners.orchestration.progress import format_ms  # Rich: loaded when a result prints

        s, m, o = self.stats, self.method, self.observation
        ci = "no 95 % CI (too few samples)"
        if s.ci_low_ms is not None and s.ci_high_ms is not None:
            ci = f"95 % CI {format_ms(s.ci_low_ms)} to {format_ms(s.ci_high_ms)}"
            if s.rel_ci_halfwidth is not None:
                ci += f" (±{s.rel_ci_halfwidth * 100:.1f} %)"
        launches = f", {m.launches_per_sample} launches a sample" if m.launches_per_sample > 1 else ""
        quality = o.quality or "not judged"
        if o.quality_reasons:
            quality += f" ({'; '.join(o.quality_reasons)})"
        if o.throttled:
            quality += f"; throttled ({', '.join(o.throttle_reasons) or 'clock below its floor'})"
        return "\n".join([
            f"<rooflab.MeasureResult on {self.device} ({self.device_name})>",
            f"  median {format_ms(s.median_ms)}, {ci}",
            f"  p10 {format_ms(s.p10_ms)}, p90 {format_ms(s.p90_ms)}, IQR {format_ms(s.iqr_ms)}",
            f"  {s.n_samples} samples, stopped: {m.stop_reason}; {m.cache} cache, {m.timing_mode} timing{launches}, "
            f"clock {m.clock}",
            f"  quality: {quality}",
        ])

    def to_dict(self) -> dict[str, Any]:
        """Every field of the parts, flat, as plain JSON-serialisable data (samples included)."""
        out: dict[str, Any] = {"samples_ms": list(self.samples_ms)}
        for part in (self.stats, self.method, self.observation):
            out.update(_plain(asdict(part)))
        out["device"] = self.device
        out["machine"] = self.machine.to_dict()
        return out


def measure(
    fn: Callable[[], Any],
    *,
    device: str | None = None,
    cache: str = "cold",
    timing_mode: str = "launch",
    **timing: Any,
) -> MeasureResult:
    """Time `fn()` with rooflab's engine on `device` (a torch device string; default the first CUDA
    GPU, else the CPU) and return the samples, their statistics and the machine state.

    `fn` takes no arguments and launches the work once; its inputs should already be on `device`.
    `cache` is "cold" (the cache is flushed before every sample, outside the timed region) or "hot";
    `timing_mode` is "launch" or "graph" (CUDA graph replay; GPU only, hot only). `**timing`
    overrides the timing settings by name: every field of suite.timing.TimingSettings, where each
    is declared once with its default and its rule (`warmup_ms`, `min_samples`, `max_time_ms`,
    `target_precision`, ...; `rooflab run` has the same as options), among them `flush_method`
    ("write_sweep", the default: a cold sample starts behind another buffer's dirty lines; or
    "read_sweep": clean lines) and `pace` ("back_to_back", the default, or "idle": the device rests
    as long as each sample took before the next; docs/timing.md). An unknown name, a value out of range or a
    mode that does not exist raises ValueError naming it. On a CPU the samples run with torch's
    current number of threads (a run sets one per physical core).
    """
    # the engine, the machine capture and NVML load on the first call: `import rooflab` stays cheap
    # (no torch, pandas or SQLAlchemy; tests/test_api.py)
    from rooflab.runners.engine.timing import measure as engine_measure
    from rooflab.runners.machine.environment import best_device, capture
    from rooflab.runners.machine.observe import watching
    from rooflab.runners.orchestration.run_options import validate_timing_overrides

    problem = modes_problem(cache, timing_mode)
    if problem:
        raise ValueError(problem)
    unknown = sorted(set(timing) - set(TimingSettings.names()))
    if unknown:
        allowed = ", ".join(TimingSettings.names())
        raise ValueError(f"unknown timing setting(s) {', '.join(unknown)}; allowed: {allowed}")
    try:
        overrides = validate_timing_overrides(timing)
    except UserInputError as exc:  # the same bounds as the command line, named with its flag
        raise ValueError(str(exc)) from None
    settings = TimingSettings().override(overrides)
    environment, info = capture(device or best_device())
    with watching(info) as watch:
        timed = engine_measure(fn, device=info, settings=settings, cache=cache, timing_mode=timing_mode)
    return MeasureResult(
        samples_ms=tuple(float(x) for x in timed.samples_ms), stats=timed.stats, method=timed.method,
        observation=watch.observation(timed.stats, timed.method.stop_reason), device=info.torch_device,
        machine=MachineState(environment, watch.clocks),
    )


def run(
    spec: str | Path,
    *,
    db: str = DEFAULT_DB,
    filters: Sequence[str] = (),
    device: str = "auto",
    seed: int = 0,
    quiet: bool = True,
    **timing: Any,
) -> RunSummary:
    """Run a spec (a YAML path, or a shipped name such as "quick") into `db`, as `rooflab run` does.

    `filters` are `rooflab run --filter` expressions ("op=matmul", "dtype=float32"); `**timing`
    overrides the spec's timing settings (the names `measure` takes). Returns the run summary
    (`run_id`, `status`, `counts` by status, ...); results are read back with `results(db, run_id=...)`.
    A bad spec, filter or setting raises the same error the command reports with exit code 2.
    """
    # the runners (SQLAlchemy, torch in the workers) load on the first call: `import rooflab` stays cheap
    from rooflab.runners.orchestration.run_options import RunOptions
    from rooflab.runners.orchestration.session import run_suite

    options = RunOptions(filters=tuple(filters), device=device, seed=seed, timing_overrides=timing or None, quiet=quiet)
    return run_suite(spec, db=db, options=options, handle_signals=False)


def counters(
    spec: str | Path,
    *,
    db: str = DEFAULT_DB,
    filters: Sequence[str] = (),
    device: str = "auto",
    ncu: str | None = None,
    seed: int = 0,
) -> CountersReport:
    """Hold each case's byte and FLOP model against Nsight Compute's counters, as `rooflab counters` does.

    One call of each case of `spec` (a YAML path or a shipped name), prepared as a run prepares it,
    is profiled under `ncu` (on PATH, or the path `ncu`) on a CUDA `device`; the readings are stored
    in `db` and returned (`readings`, each with its model; `to_dict()` adds the comparison).
    A CPU device, a MIG slice, no ncu or no permission to read the counters raises
    runners.counters.ncu.CountersRefusal (a UserInputError) before anything is written; a bad spec,
    filter or database raises what `rooflab counters` reports with exit code 2. docs/counters.md.
    """
    from rooflab.runners.counters.session import run_counters  # pandas, SQLAlchemy: on the first call

    return run_counters(str(spec), db_url=db, filters=tuple(filters), device=device, ncu=ncu, seed=seed,
                        command_line="rooflab.counters(...)")


def results(db: str = DEFAULT_DB, **where: Any) -> pd.DataFrame:
    """One row per measurement, export columns first (docs/design.md lists them).

    Filters, by keyword: `run_id`, `since` (a date), `device` (fingerprint, name or GPU UUID),
    `status`, `case_key` (each of these one value or several), and `columns` to read only some.
    """
    from rooflab.db import query  # pandas and SQLAlchemy on the first call: `import rooflab` stays cheap

    return query.results(db, **where)


def runs(db: str = DEFAULT_DB) -> pd.DataFrame:
    """One row per run, in run order."""
    from rooflab.db import query  # pandas and SQLAlchemy on the first call: `import rooflab` stays cheap

    return query.runs(db)


def history(case_key: str, db: str = DEFAULT_DB, device_fingerprint: str | None = None) -> pd.DataFrame:
    """Every result of one case (on one device fingerprint when given), in run order."""
    from rooflab.db import query  # pandas and SQLAlchemy on the first call: `import rooflab` stays cheap

    return query.case_history(db, case_key, device_fingerprint)


def _plain(value: Any) -> Any:
    """`value` as JSON-serialisable data: mappings to dicts, sequences to lists, numbers kept
    (non-finite floats to None), anything else to its string."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    return str(value)
