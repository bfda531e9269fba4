"""Synthetic results frames with the columns of `db.query.results`, for the report tests."""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from rooflab.suite.case import ParamValue, make_case_key

H100 = "NVIDIA H100 80GB HBM3"
H100_L2 = 50 * 1024 * 1024
SIZES = {"float64": 8, "float32": 4, "tf32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1}


def row(*, op: str, family: str, dtype: str = "float32", params: dict | None = None, median_ms: float,
        flops: float, nbytes: float, cache: str = "cold", timing_mode: str = "launch", backend: str = "eager",
        device_name: str = H100, fingerprint: str = "fp-h100", run_id: str = "run-1", run_order: int = 1,
        status: str = "ok", throttled: bool = False, l2_bytes: int = H100_L2, host: str = "node1",
        driver_version: str = "550.54", cuda_version: str = "12.4", torch_version: str = "2.11.0",
        rel_ci_halfwidth: float = 0.005, stop_reason: str = "converged", iqr_ms: float | None = None,
        op_version: int = 1, flush_method: str | None = None, pace: str = "back_to_back",
        collective_mode: str | None = None, bytes_read: float | None = None,
        bytes_written: float | None = None) -> dict:
    params = dict(params or {})
    ok = status == "ok"
    t = median_ms * 1e-3
    started = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=run_order)
    return {
        "run_id": run_id, "started_at": started, "host": host, "device_name": device_name, "device_kind": "cuda",
        "device_fingerprint": fingerprint, "suite": "synthetic",
        "case_key": make_case_key(op, op_version, backend, dtype, cache, timing_mode, params),
        "op": op, "family": family, "backend": backend, "dtype": dtype, "params": json.dumps(params, sort_keys=True),
        "cache": cache, "status": status, "median_ms": median_ms if ok else None,
        "p10_ms": median_ms * 0.98 if ok else None, "p90_ms": median_ms * 1.02 if ok else None,
        "n_samples": 50 if ok else 0, "flops": flops, "bytes": nbytes, "bytes_read": bytes_read,
        "bytes_written": bytes_written,
        "intensity": flops / nbytes if nbytes else None,
        "tflops": flops / t / 1e12 if ok else None, "gbps": nbytes / t / 1e9 if ok else None,
        "torch_version": torch_version, "cuda_version": cuda_version, "driver_version": driver_version,
        "git_commit": "abc123", "error": None if ok else "boom", "timing_mode": timing_mode,
        "stop_reason": stop_reason if ok else None, "throttled": throttled, "device_uuid": f"GPU-{fingerprint}",
        "op_version": op_version, "mean_ms": median_ms, "min_ms": median_ms * 0.97, "max_ms": median_ms * 1.05,
        "iqr_ms": iqr_ms if iqr_ms is not None else median_ms * 0.02, "std_ms": median_ms * 0.015,
        "rel_ci_halfwidth": rel_ci_halfwidth, "first_call_ms": median_ms * 10, "measured_at": started,
        "l2_bytes": l2_bytes, "memory_bytes": 80 * 10**9, "sm_count": 132, "compute_capability": "9.0",
        "shard": None, "run_order": run_order,
        "flush_method": (flush_method or ("write_sweep" if cache == "cold" else "none")) if ok else None,
        "pace": pace if ok else None,
        "collective_mode": collective_mode,
    }


# per stream: arrays read, arrays written, FLOPs per element (suite/ops/probes.py)
STREAMS = {"stream_copy": (1, 1, 0), "stream_scale": (1, 1, 1), "stream_add": (2, 1, 1), "stream_triad": (2, 1, 2),
           "stream_dot": (2, 0, 2), "stream_fill": (0, 1, 0)}


def stream(op: str, n: int, gbps: float, *, dtype: str = "float32", cache: str = "cold", split: bool = False,
           **kw) -> dict:
    """A stream probe's result at `gbps`; `split`: with its bytes read and written (else unknown, as
    in a result stored before they were recorded)."""
    reads, writes, f = STREAMS[op]
    size = SIZES[dtype]
    nbytes = (reads + writes) * n * size
    if split:
        kw.update(bytes_read=reads * n * size, bytes_written=writes * n * size)
    return row(op=op, family="probe", dtype=dtype, params={"n": n}, median_ms=nbytes / (gbps * 1e9) * 1e3,
               flops=f * n, nbytes=nbytes, cache=cache, **kw)


def fma(n: int, k: int, tflops: float, *, dtype: str = "float32", **kw) -> dict:
    flops, nbytes = 2 * k * n, 2 * n * SIZES[dtype]
    return row(op="fma_intensity", family="probe", dtype=dtype, params={"n": n, "k": k},
               median_ms=flops / (tflops * 1e12) * 1e3, flops=flops, nbytes=nbytes, **kw)


def gemm(m: int, n: int, k: int, tflops: float, *, dtype: str = "bfloat16", op: str = "matmul", **kw) -> dict:
    flops, nbytes = 2 * m * n * k, (m * k + k * n + m * n) * SIZES[dtype]
    return row(op=op, family="gemm", dtype=dtype, params={"m": m, "n": n, "k": k},
               median_ms=flops / (tflops * 1e12) * 1e3, flops=flops, nbytes=nbytes, **kw)


def launch(median_ms: float, *, timing_mode: str = "launch", op_version: int = 2, **kw) -> dict:
    """A `launch` result: host time per launch (version 2 of the op)."""
    return row(op="launch", family="overhead", dtype="float32", params={}, median_ms=median_ms, flops=0, nbytes=0,
               cache="hot", timing_mode=timing_mode, op_version=op_version, **kw)


def device_rows(*, hbm_gbps: float = 3000.0, l2_gbps: float = 9000.0, fp32_tflops: float = 50.0,
                bf16_tflops: float = 700.0, launch_ms: float = 0.005, **kw) -> list[dict]:
    """A full set of probe results for one device whose ceilings are known exactly."""
    big, small = 64 * 1024 * 1024, 1024 * 1024  # elements: fp32 arrays of 256 MiB and 4 MiB
    rows = [
        stream("stream_copy", big, hbm_gbps * 0.97, **kw),
        stream("stream_triad", big, hbm_gbps, **kw),
        stream("stream_dot", big, hbm_gbps * 1.05, **kw),
        stream("stream_triad", small, l2_gbps, cache="hot", **kw),
        stream("stream_copy", small, l2_gbps * 0.9, cache="hot", **kw),
        fma(big, 64, fp32_tflops * 0.8, **kw),
        fma(big, 1024, fp32_tflops, **kw),
        gemm(8192, 8192, 8192, bf16_tflops, **kw),
        gemm(1024, 1024, 1024, bf16_tflops * 0.5, **kw),
        launch(launch_ms, **kw),
        launch(launch_ms / 5, timing_mode="graph", **kw),
    ]
    return rows


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def history(values: list[float], *, case_op: str = "stream_triad", start_order: int = 1,
            env_change_at: int | None = None, throttled_at: tuple[int, ...] = (), **kw) -> list[dict]:
    """One series: per-run medians `values` of the same case on one device."""
    rows = []
    for i, value in enumerate(values):
        extra = dict(kw)
        if env_change_at is not None and i >= env_change_at:
            extra.setdefault("driver_version", "560.10")
        rows.append(row(op=case_op, family="probe", params={"n": 1 << 26}, median_ms=value, flops=2 << 26,
                        nbytes=3 * 4 << 26, run_id=f"run-{start_order + i:04d}", run_order=start_order + i,
                        throttled=i in throttled_at, **extra))
    return rows


def noisy(n: int, level: float, rel_noise: float, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(level * (1 + rel_noise * rng.standard_normal(n)))


def write_db(url: str, rows: list[dict]) -> None:
    """Store synthetic rows as whole runs (one run per run_id, one environment per fingerprint),
    complete, through db.record_batch.load_runs: one transaction, the rows made as the store makes
    them."""
    from rooflab.db.record_batch import RecordRun, load_runs
    from rooflab.record import CaseRecord, EnvironmentRecord, MeasurementRecord, RunRecord, record_from_columns

    started: dict[str, RunRecord] = {}
    environments: dict[str, dict[str, EnvironmentRecord]] = {}  # run id -> fingerprint -> its device
    measurements: dict[str, list[MeasurementRecord]] = {}
    for r in rows:
        if r["run_id"] not in started:
            started[r["run_id"]] = RunRecord(
                run_id=r["run_id"], suite=r["suite"], spec_text="synthetic: {}", spec_hash="0" * 64,
                started_at=r["started_at"], host=r["host"], command_line="rooflab run synthetic",
                git_commit=r["git_commit"])
        devices = environments.setdefault(r["run_id"], {})
        if r["device_fingerprint"] not in devices:
            devices[r["device_fingerprint"]] = EnvironmentRecord(
                device_fingerprint=r["device_fingerprint"], device_name=r["device_name"], device_kind="cuda",
                identity={"name": r["device_name"], "driver": r["driver_version"]}, info={},
                memory_bytes=r["memory_bytes"], l2_bytes=r["l2_bytes"], sm_count=r["sm_count"],
                compute_capability=r["compute_capability"], driver_version=r["driver_version"],
                cuda_version=r["cuda_version"], torch_version=r["torch_version"])
        ok = r["status"] == "ok"
        params = json.loads(r["params"])
        measurements.setdefault(r["run_id"], []).append(record_from_columns(
            run_id=r["run_id"],
            case=CaseRecord(case_key=r["case_key"], op=r["op"], op_version=r.get("op_version", 1),
                            family=r["family"],
                            backend=r["backend"], dtype=r["dtype"], params=params),
            device_fingerprint=r["device_fingerprint"], cache=r["cache"], timing_mode=r["timing_mode"],
            status=r["status"], measured_at=r["measured_at"], device_uuid=r["device_uuid"],
            error=r["error"], median_ms=r["median_ms"], mean_ms=r["mean_ms"] if ok else None,
            min_ms=r["min_ms"] if ok else None, max_ms=r["max_ms"] if ok else None, p10_ms=r["p10_ms"],
            p90_ms=r["p90_ms"], iqr_ms=r["iqr_ms"] if ok else None, std_ms=r["std_ms"] if ok else None,
            n_samples=r["n_samples"], rel_ci_halfwidth=r["rel_ci_halfwidth"] if ok else None,
            stop_reason=r["stop_reason"], flops=int(r["flops"]), bytes=int(r["bytes"]),
            throttled=bool(r["throttled"]), flush_method=r.get("flush_method"), pace=r.get("pace"),
            collective_mode=r.get("collective_mode"), tool=r.get("tool") or "rooflab",
            quality=r.get("quality"), samples_ms=tuple(r.get("samples_ms") or [r["median_ms"]] * 5) if ok else ()))
    load_runs(url, [RecordRun(run=run, environments=list(environments[run_id].values()),
                              measurements=measurements[run_id]) for run_id, run in started.items()])


GPT2_BLOCK: dict[str, ParamValue] = {"batch": 8, "seq": 1024, "hidden": 768, "heads": 12, "norm": "layernorm",
                                     "activation": "gelu", "kernel": "sdpa_flash"}


def layer_block(*, matrix_tflops: float, hbm_gbps: float, gap_ms: float, compiled_speedup: float,
                measurement_id: int = 1, **kw) -> tuple[list[dict], pd.DataFrame, pd.DataFrame]:
    """A profiled GPT-2-small block whose parts run at known fractions of the roofs: matmuls and
    attention at 70 % of `matrix_tflops`, memory-bound parts at 40 % of `hbm_gbps`, plus `gap_ms`
    between kernels. Returns (results rows: eager and compiled, profiles frame, parts frame)."""
    from rooflab.suite.ops.layer_model import block_parts
    from rooflab.suite.ops.registry import get_op

    dtype = "bfloat16"
    params = get_op("transformer_block").resolved_params(GPT2_BLOCK)
    parts: list[dict[str, Any]] = []
    for i, p in enumerate(block_parts(params, dtype)):
        if p.kind in ("matmul", "attention"):
            ms = p.flops / (0.7 * matrix_tflops * 1e12) * 1e3
        else:
            ms = p.bytes / (0.4 * hbm_gbps * 1e9) * 1e3
        parts.append({"measurement_id": measurement_id, "position": i, "name": p.name, "kind": str(p.kind),
                      "time_ms": ms, "flops": p.flops, "bytes": p.bytes, "events": 1})
    whole = sum(p["time_ms"] for p in parts) + gap_ms
    flops, nbytes = sum(p["flops"] for p in parts), sum(p["bytes"] for p in parts)
    eager = row(op="transformer_block", family="layer", dtype=dtype, params=params, median_ms=whole, flops=flops,
                nbytes=nbytes, **kw)
    compiled = row(op="transformer_block", family="layer", dtype=dtype, params=params, backend="compiled",
                   median_ms=whole / compiled_speedup, flops=flops, nbytes=nbytes, **kw)
    profile = {
        "measurement_id": measurement_id, "run_id": eager["run_id"], "run_order": eager["run_order"],
        "measured_at": eager["measured_at"], "device_name": eager["device_name"],
        "device_fingerprint": eager["device_fingerprint"], "case_key": eager["case_key"], "op": "transformer_block",
        "backend": "eager", "dtype": dtype, "params": params, "cache": "cold", "timing_mode": "launch", "status": "ok",
        "median_ms": whole, "flops": flops, "bytes": nbytes, "clock": "cuda_kernels", "whole_ms": whole,
        "gap_ms": gap_ms, "unattributed_ms": 0.0, "overlap_ms": 0.0, "host_ms": whole * 1.3, "events": len(parts),
    }
    return [eager, compiled], pd.DataFrame([profile]), pd.DataFrame(parts)


def collective(op: str, n: int, ranks: int, *, busbw_gbps: float | None = None, median_ms: float | None = None,
               dtype: str = "bfloat16", backend: str = "nccl", ranks_param: object = None, **kw) -> dict:
    """A collective result (family collective) whose busbw (its stored gbps) or median is given; its
    bytes and FLOPs are the op's own model (nccl-tests' S x factor) at `ranks` ranks; `ranks_param`
    is the case's `ranks` (default: the number; "all" as a node-level case stores it)."""
    from rooflab.suite.ops.registry import get_op

    model = get_op(op)
    params = model.resolved_params({"n": n, "ranks": ranks})
    nbytes, flops = model.bytes(params, dtype), model.flops(params, dtype)
    if median_ms is None:
        assert busbw_gbps is not None, "a collective needs its busbw or its median"
        median_ms = nbytes / (busbw_gbps * 1e9) * 1e3
    key_params = dict(params, ranks=ranks_param if ranks_param is not None else ranks)
    out = row(op=op, family="collective", dtype=dtype, params=key_params, median_ms=median_ms, flops=flops,
              nbytes=nbytes, cache="hot", backend=backend, **kw)
    out["ranks"] = ranks
    return out


def collective_sweep(op: str, ranks: int, *, peak_gbps: float, latency_ms: float, exponents=range(3, 31, 3),
                     dtype: str = "bfloat16", **kw) -> list[dict]:
    """A message-size sweep (2^e bytes per rank) of one collective whose time is the latency plus
    its bus bytes at `peak_gbps`: busbw climbs from the latency floor to the peak."""
    from rooflab.suite.dtypes import element_size
    from rooflab.suite.ops.registry import get_op

    rows = []
    for e in exponents:
        n = max(1, (1 << e) // element_size(dtype))
        nbytes = get_op(op).bytes({"n": n, "ranks": ranks}, dtype)
        rows.append(collective(op, n, ranks, median_ms=latency_ms + nbytes / (peak_gbps * 1e9) * 1e3, dtype=dtype,
                               **kw))
    return rows
