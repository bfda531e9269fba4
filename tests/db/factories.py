"""Random but valid records for the database tests (fresh values every call, never zeros)."""
from __future__ import annotations

import hashlib
import random
import statistics
from datetime import UTC, datetime, timedelta

from rooflab.record import CaseRecord, EnvironmentRecord, MeasurementRecord, RunRecord, record_from_columns

T0 = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


def make_run(run_id: str, *, day: int = 0, rng: random.Random | None = None, spec_text: str | None = None) -> RunRecord:
    rng = rng or random.Random()
    text = spec_text if spec_text is not None else f"name: nightly\nbenchmarks: [{rng.random()}]\n"
    return RunRecord(
        run_id=run_id, suite="nightly", spec_text=text, spec_hash=hashlib.sha256(text.encode()).hexdigest(),
        started_at=T0 + timedelta(days=day, seconds=rng.randint(0, 3000), microseconds=rng.randint(0, 999_999)),
        host=f"node{rng.randint(1, 64):02d}", command_line="rooflab run suite/specs/nightly.yaml",
        git_commit=f"{rng.getrandbits(160):040x}", git_dirty=rng.random() < 0.5, rooflab_version="0.1.0",
    )


def make_env(index: int = 0, *, name: str = "NVIDIA H100 80GB HBM3", uuid: str | None = None) -> EnvironmentRecord:
    identity = {"name": name, "memory_bytes": 85_520_809_984, "driver_major": 575, "cuda_major": 13, "torch": "2.11.0"}
    fingerprint = hashlib.sha256(f"{identity}|{index}".encode()).hexdigest()[:16]
    return EnvironmentRecord(
        device_fingerprint=fingerprint, device_name=name, device_kind="cuda", identity=identity,
        info={"uuid": uuid or f"GPU-{index:04d}-{fingerprint[:8]}", "power_limit_w": 700.0, "sm_clock_max_mhz": 1980},
        memory_bytes=85_520_809_984, l2_bytes=52_428_800, sm_count=132, compute_capability="9.0",
        driver_version="575.51.03", cuda_version="13.0", torch_version="2.11.0",
    )


def make_case(i: int, *, cache: str = "cold", timing_mode: str = "launch") -> CaseRecord:
    n = 1024 * (i + 1)
    op = ("copy", "triad", "matmul")[i % 3]
    params = {"m": 64 + i, "n": n, "k": 128} if op == "matmul" else {"n": n}
    key = f"{op}.v1:eager:bfloat16:{cache}:{timing_mode}:" + ",".join(f"{k}={params[k]}" for k in sorted(params))
    family = "gemm" if op == "matmul" else "pointwise"
    return CaseRecord(case_key=key, op=op, op_version=1, family=family, backend="eager", dtype="bfloat16",
                      params=params)


def make_measurement(
    run: RunRecord, case: CaseRecord, env: EnvironmentRecord, *, rng: random.Random | None = None,
    status: str = "ok", n_samples: int = 12, cache: str | None = None, timing_mode: str | None = None,
    shard: str | None = None,
) -> MeasurementRecord:
    rng = rng or random.Random()
    cache = cache or case.case_key.split(":")[3]
    timing_mode = timing_mode or case.case_key.split(":")[4]
    uuid = str(env.info["uuid"])
    if status != "ok":
        return record_from_columns(
            run_id=run.run_id, case=case, device_fingerprint=env.device_fingerprint, cache=cache,
            timing_mode=timing_mode, status=status, measured_at=run.started_at + timedelta(seconds=rng.randint(1, 999)),
            device_uuid=uuid, shard=shard, error=f"planted {status} {rng.random():.6f}", flops=rng.randint(1, 10**9),
            bytes=rng.randint(1, 10**9),
        )
    samples = tuple(rng.uniform(0.05, 3.0) for _ in range(n_samples))
    nbytes = rng.randint(1, 10**10)
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=10)
    q4 = statistics.quantiles(ordered, n=4)
    return record_from_columns(
        run_id=run.run_id, case=case, device_fingerprint=env.device_fingerprint, cache=cache,
        timing_mode=timing_mode, status="ok", measured_at=run.started_at + timedelta(seconds=rng.randint(1, 999)),
        device_uuid=uuid, shard=shard, clock="cuda_events", median_ms=statistics.median(samples),
        mean_ms=statistics.fmean(samples), min_ms=ordered[0], max_ms=ordered[-1], p10_ms=q[0], p90_ms=q[-1],
        iqr_ms=q4[2] - q4[0], std_ms=statistics.stdev(samples), n_samples=n_samples,
        rel_ci_halfwidth=rng.uniform(0.001, 0.05), stop_reason="converged", first_call_ms=rng.uniform(1, 100),
        warmup_calls=rng.randint(1, 50), launches_per_sample=1, flush_bytes=104_857_600,
        flops=rng.randint(1, 10**12), bytes=nbytes, bytes_read=nbytes - nbytes // 3, bytes_written=nbytes // 3,
        sm_clock_start_mhz=rng.uniform(1500, 1980),
        sm_clock_end_mhz=rng.uniform(1500, 1980), sm_clock_max_mhz=1980.0,
        throttle_reasons=("sw_power_cap",) if rng.random() < 0.3 else (), throttled=rng.random() < 0.2,
        samples_ms=samples,
    )
