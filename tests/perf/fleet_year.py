"""A fleet's year of nightlies, written straight into PostgreSQL with COPY (tests/perf/bench_fleet.py's data).

    year = FleetYear(devices=64, cases=2000, nights=365)
    write_year(url, year)            # 46.7 M results, one run a night sharded over the nodes
    night_table(kit, night)          # one night's `measurements` rows (a pyarrow table)
    shard_records(year, table, night, node)   # one node's results of a night as a shard hands them to the store

Every device has, per wall (memory, matrix, launch), a small stable offset of its own and moves from
night to night around it; each result adds a little noise of its own, and the whole fleet moves a
little together each night (spreads in `NOISE`, percent of speed). Two faults are planted so that the
judges have something to find: one GPU `HBM_SLOW_PCT` slower on its memory cases on the newest two
nights of the year (a regression), another `MATRIX_SLOW_PCT` slower on its matrix cases on the
newest night (a suspect). A driver update halfway through the year moves every GPU to a new
environment fingerprint (a segment within each series; only in a history of 30 nights or more). The
cases are the shipped specs' own (nightly, roofline, quick; the collectives left out: they are
stored once per group), their FLOPs and bytes the ops' models, their medians a roofline's
(`H100_TBPS`, `H100_TFLOPS`); nothing here is a measurement. The generator is this module alone:
another one (a simulated fleet with other spreads) need only give `night_table` and `shard_records`.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
from sqlalchemy import text

from rooflab.db import models
from rooflab.db.handle import open_for_writing
from rooflab.db.load import Batch, load
from rooflab.db.measurement_columns import rates_of
from rooflab.db.urls import normalize_url
from rooflab.record import (
    CaseRecord,
    EnvironmentRecord,
    Identity,
    MachineObservation,
    MeasurementRecord,
    RunRecord,
    Statistics,
    TimingMethod,
    WorkModel,
)
from rooflab.suite.case import COLLECTIVE, Case
from rooflab.suite.ops.base import work_model
from rooflab.suite.ops.registry import get_op
from rooflab.suite.spec import expand, load_spec

START = datetime(2026, 1, 1, 1, 0, tzinfo=UTC)
DEVICE_NAME = "NVIDIA H100 80GB HBM3"
MEMORY_BYTES, L2_BYTES, SM_COUNT = 85_520_809_984, 52_428_800, 132
DRIVERS = ("575.51.03", "580.65.06")  # before and after the update halfway through the year
H100_TBPS, H100_TFLOPS, LAUNCH_MS = 3.0, 700.0, 0.006  # the roofline the medians follow
WALLS = ("memory", "matrix", "launch")
# spreads of speed in percent (standard deviations): a device's stable offset, its night-to-night
# move, one result's own noise, the whole fleet's night-to-night move
NOISE = {"offset": 0.4, "night": 0.35, "case": 0.2, "fleet": 0.25}
HBM_SLOW_PCT, MATRIX_SLOW_PCT = 6.0, 7.0
SPECS = ("nightly", "roofline", "quick")
SUITE = "nightly"  # the suite every night of the year is a run of
SHIPPED_SPEC_TEXT = "name: nightly\n"


@dataclass(frozen=True)
class FleetYear:
    devices: int = 64
    cases: int = 2000
    nights: int = 365
    gpus_per_node: int = 8
    seed: int = 0

    @property
    def nodes(self) -> int:
        return -(-self.devices // self.gpus_per_node)

    @property
    def results(self) -> int:
        return self.devices * self.cases * self.nights

    @property
    def update_night(self) -> int:
        """The first night on the new driver: halfway through a history of 30 nights or more (a shorter
        one has none: its newest segment would be too short to judge)."""
        return self.nights // 2 if self.nights >= 30 else self.nights + 1

    @property
    def hbm_slow_device(self) -> int:
        return min(13, self.devices - 1)

    @property
    def matrix_slow_device(self) -> int:
        return (2 * self.devices) // 3


def run_id(night: int) -> str:
    return f"nightly-{START + timedelta(days=night):%Y%m%d}"


def night_start(night: int) -> datetime:
    return START + timedelta(days=night)


def device_uuid(device: int) -> str:
    digest = hashlib.sha256(f"fleet-gpu-{device}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def node_of(year: FleetYear, device: int) -> int:
    return device // year.gpus_per_node


def host(node: int) -> str:
    return f"gpu-node{node + 1:02d}"


def fleet_cases(count: int) -> list[Case]:
    """`count` cases of the shipped specs (collectives left out), the families taken in turn; past
    the specs' own cases, the pointwise and reduction ones again on the compiled backend."""
    seen: dict[str, Case] = {}
    for spec in SPECS:
        for case in expand(load_spec(spec), "cuda"):
            if case.family != COLLECTIVE:
                seen.setdefault(case.case_key, case)
    extra = [dataclasses.replace(c, backend="compiled") for c in seen.values()
             if c.family in ("pointwise", "reduction") and c.backend == "eager"]
    pool = list(seen.values()) + [c for c in extra if c.case_key not in seen]
    by_family: dict[str, list[Case]] = {}
    for case in pool:
        by_family.setdefault(case.family, []).append(case)
    ordered: list[Case] = []
    while any(by_family.values()):
        for family in sorted(by_family):
            if by_family[family]:
                ordered.append(by_family[family].pop(0))
    if count > len(ordered):
        raise ValueError(f"--cases {count}: the shipped specs give at most {len(ordered)} cases")
    return ordered[:count]


def _wall(case: Case) -> int:
    if case.family == "overhead" or case.timing_mode == "graph":
        return WALLS.index("launch")
    if case.family in ("gemm", "attention", "layer"):
        return WALLS.index("matrix")
    return WALLS.index("memory")


@dataclass(frozen=True)
class CaseTable:
    """The year's cases with their work and their roofline medians, as arrays in case order."""

    cases: tuple[Case, ...]
    work: tuple[WorkModel, ...]
    wall: np.ndarray
    base_ms: np.ndarray


def case_table(year: FleetYear) -> CaseTable:
    cases = fleet_cases(year.cases)
    work = []
    for case in cases:
        op = get_op(case.op)
        work.append(work_model(op, op.resolved_params(case.params), case.dtype))
    flops = np.array([w.flops for w in work], dtype=float)
    nbytes = np.array([w.bytes for w in work], dtype=float)
    base = np.maximum(flops / (H100_TFLOPS * 1e12), nbytes / (H100_TBPS * 1e12)) * 1e3 + LAUNCH_MS
    return CaseTable(tuple(cases), tuple(work), np.array([_wall(c) for c in cases]), base)


@dataclass
class Kit:
    """What every night's rows share: the cases and the ids the database gave the runs, cases and
    environments (filled by `write_dimensions`)."""

    year: FleetYear
    table: CaseTable
    case_ids: np.ndarray  # per case, its cases.id
    env_ids: tuple[int, int]  # the environment before and after the driver update
    run_ids: dict[int, int]  # night -> runs.id


@functools.cache
def device_offsets(year: FleetYear) -> np.ndarray:
    """(devices, walls) log-speed offsets, the same every night."""
    rng = np.random.default_rng([year.seed, 0xFEE7])
    return rng.normal(0.0, NOISE["offset"] / 100, (year.devices, len(WALLS)))


def environment(year: FleetYear, after_update: bool, device: int | None = None) -> EnvironmentRecord:
    """The fleet's GPU before or after the driver update; as one device sees it when `device` is given
    (its UUID and host in `info`)."""
    driver = DRIVERS[int(after_update)]
    identity = {"name": DEVICE_NAME, "memory_bytes": MEMORY_BYTES, "driver_major": int(driver.split(".")[0]),
                "cuda_major": 13, "torch": "2.13.0"}
    fingerprint = hashlib.sha256(repr(sorted(identity.items())).encode()).hexdigest()[:16]
    return EnvironmentRecord(
        device_fingerprint=fingerprint, device_name=DEVICE_NAME, device_kind="cuda", identity=identity,
        info={} if device is None else {"uuid": device_uuid(device), "host": host(node_of(year, device))},
        memory_bytes=MEMORY_BYTES, l2_bytes=L2_BYTES, sm_count=SM_COUNT, compute_capability="9.0",
        driver_version=driver, cuda_version="13.0", torch_version="2.13.0",
    )


def run_record(night: int) -> RunRecord:
    return RunRecord(run_id=run_id(night), suite=SUITE, spec_text=SHIPPED_SPEC_TEXT,
                     spec_hash=hashlib.sha256(SHIPPED_SPEC_TEXT.encode()).hexdigest(), started_at=night_start(night),
                     host=host(0), command_line="rooflab run nightly --devices all --shard I/N",
                     git_commit=hashlib.sha1(str(night // 7).encode()).hexdigest(), rooflab_version="0.1.0")


def log_speed(year: FleetYear, table: CaseTable, night: int) -> np.ndarray:
    """(devices, cases) log speed of one night: offsets, the device's and the fleet's night moves,
    each result's noise and the planted faults."""
    wall = table.wall
    rng = np.random.default_rng([year.seed, night])
    night_move = rng.normal(0.0, NOISE["night"] / 100, (year.devices, len(WALLS)))
    fleet_move = rng.normal(0.0, NOISE["fleet"] / 100, len(WALLS))
    noise = rng.normal(0.0, NOISE["case"] / 100, (year.devices, year.cases))
    speed = (device_offsets(year) + night_move + fleet_move)[:, wall] + noise
    last = year.nights - 1
    if night >= last - 1:
        speed[year.hbm_slow_device, wall == WALLS.index("memory")] += np.log1p(-HBM_SLOW_PCT / 100)
    if night >= last:
        speed[year.matrix_slow_device, wall == WALLS.index("matrix")] += np.log1p(-MATRIX_SLOW_PCT / 100)
    return speed


def _night_values(year: FleetYear, table: CaseTable, night: int) -> dict[str, np.ndarray]:
    """The night's figures, (devices x cases) flattened device by device."""
    rng = np.random.default_rng([year.seed, night, 1])
    shape = (year.devices, year.cases)
    median = (table.base_ms[None, :] * np.exp(-log_speed(year, table, night))).ravel()
    spread = rng.uniform(0.002, 0.012, shape).ravel()
    return {
        "median_ms": median, "mean_ms": median * (1 + spread / 4), "min_ms": median * (1 - spread),
        "max_ms": median * (1 + 3 * spread), "p10_ms": median * (1 - spread / 2),
        "p90_ms": median * (1 + spread), "iqr_ms": median * spread, "std_ms": median * spread * 0.8,
        "rel_ci_halfwidth": spread / 3, "n_samples": rng.integers(40, 600, shape).ravel(),
        "power_w": rng.uniform(280.0, 690.0, shape).ravel(),
    }


def night_columns(kit: Kit, night: int) -> dict[str, object]:
    """The `measurements` columns of one night (ids resolved), device by device, each a numpy array or
    one value for every row."""
    year, table = kit.year, kit.table
    n = year.devices * year.cases
    v = _night_values(year, table, night)
    case_of = np.tile(np.arange(year.cases), year.devices)
    device_of = np.repeat(np.arange(year.devices), year.cases)
    flops = np.array([w.flops for w in table.work], dtype=np.int64)[case_of]
    nbytes = np.array([w.bytes for w in table.work], dtype=np.int64)[case_of]
    split = [(w.bytes_read, w.bytes_written) for w in table.work]
    rate = [rates_of("ok", 1.0, w.flops, w.bytes) for w in table.work]  # at 1 ms; a rate scales as 1 / median
    uuids = np.array([device_uuid(d) for d in range(year.devices)], dtype=object)
    shards = np.array([f"{node_of(year, d)}/{year.nodes}" for d in range(year.devices)], dtype=object)
    cold = np.array([c.cache == "cold" for c in table.cases])[case_of]
    measured_at = np.datetime64(night_start(night).replace(tzinfo=None), "us") + (
        np.arange(n) % year.cases * 1_500_000).astype("timedelta64[us]")
    return {
        "run_id": kit.run_ids[night], "case_id": kit.case_ids[case_of],
        "environment_id": kit.env_ids[int(night >= year.update_night)],
        "device_uuid": uuids[device_of], "shard": shards[device_of], "measured_at": measured_at, "status": "ok",
        "error": None, "cache": np.array([c.cache for c in table.cases], dtype=object)[case_of],
        "timing_mode": np.array([c.timing_mode for c in table.cases], dtype=object)[case_of],
        "clock": "cuda_events", "stop_reason": "converged", "first_call_ms": v["median_ms"] * 40,
        "warmup_calls": 200, "launches_per_sample": np.where(
            np.array([c.timing_mode == "graph" for c in table.cases])[case_of], 20, 1),
        "flush_bytes": np.where(cold, 4 * L2_BYTES, 0), "sync_method": "sleep_kernel",
        "flush_method": np.where(cold, "write_sweep", "none").astype(object), "pace": "back_to_back",
        "collective_mode": None, "tool": "rooflab", "tool_version": None,
        **{k: v[k] for k in ("median_ms", "mean_ms", "min_ms", "max_ms", "p10_ms", "p90_ms", "iqr_ms", "std_ms",
                             "n_samples", "rel_ci_halfwidth")},
        "sm_clock_start_mhz": 1980.0, "sm_clock_end_mhz": 1965.0, "sm_clock_max_mhz": 1980.0,
        "throttle_reasons": "[]", "throttled": False, "power_w": v["power_w"],
        "energy_j": v["power_w"] * v["median_ms"] / 1e3, "quality": "good", "quality_reasons": "[]",
        "cpu_threads": None, "flops": flops, "bytes": nbytes,
        "bytes_read": np.array([s[0] for s in split], dtype=object)[case_of],
        "bytes_written": np.array([s[1] for s in split], dtype=object)[case_of],
        "ranks": None, "device_key": uuids[device_of],
        "intensity": np.array([r["intensity"] for r in rate], dtype=object)[case_of],
        "tflops": np.array([r["tflops"] for r in rate])[case_of] / v["median_ms"],
        "gbps": np.array([r["gbps"] for r in rate])[case_of] / v["median_ms"],
    }


def _arrow_type(column: object) -> pa.DataType:
    sql = str(column.type).upper()  # type: ignore[attr-defined]
    if sql in ("INTEGER", "BIGINT"):
        return pa.int64()
    if sql == "FLOAT":
        return pa.float64()
    if sql == "BOOLEAN":
        return pa.bool_()
    if "TIME" in sql or "UTCDATETIME" in sql:
        return pa.timestamp("us", tz="UTC")
    return pa.string()


MEASUREMENT_COLUMNS = tuple(c for c in models.Measurement.__table__.columns if c.name != "id")


def night_table(kit: Kit, night: int) -> pa.Table:
    """One night's rows of `measurements` (every column but `id`, in the table's order)."""
    values = night_columns(kit, night)
    n = kit.year.devices * kit.year.cases
    arrays = []
    for column in MEASUREMENT_COLUMNS:
        value, kind = values[column.name], _arrow_type(column)
        if isinstance(value, np.ndarray):
            arrays.append(pa.array(value, type=kind))
        else:
            arrays.append(pa.nulls(n, kind) if value is None else pa.repeat(pa.scalar(value, kind), n))
    return pa.table(arrays, names=[c.name for c in MEASUREMENT_COLUMNS])


def csv_bytes(table: pa.Table) -> bytes:
    """`table` as COPY ... FORMAT csv reads it: no header, NULL unquoted and empty, text quoted."""
    out = io.BytesIO()
    pa_csv.write_csv(table, out, pa_csv.WriteOptions(include_header=False, quoting_style="needed"))
    return out.getvalue()


def shard_records(year: FleetYear, table: CaseTable, night: int, node: int) -> Iterator[MeasurementRecord]:
    """The results of one node on one night as its shard's supervisor hands them to the store."""
    values = _night_values(year, table, night)
    env = environment(year, night >= year.update_night)
    cases = [CaseRecord(case_key=c.case_key, op=c.op, op_version=c.op_version, family=c.family, backend=c.backend,
                        dtype=c.dtype, params=c.key_params) for c in table.cases]
    shard = f"{node}/{year.nodes}"
    machine = MachineObservation(sm_clock_start_mhz=1980.0, sm_clock_end_mhz=1965.0, sm_clock_max_mhz=1980.0,
                                 quality="good")
    for device in range(node * year.gpus_per_node, min(year.devices, (node + 1) * year.gpus_per_node)):
        for i, case in enumerate(table.cases):
            row = device * year.cases + i
            median = float(values["median_ms"][row])
            stats = Statistics(**{k: float(values[k][row]) for k in (
                "median_ms", "mean_ms", "min_ms", "max_ms", "p10_ms", "p90_ms", "iqr_ms", "std_ms",
                "rel_ci_halfwidth")}, n_samples=int(values["n_samples"][row]))
            yield MeasurementRecord(
                identity=Identity(run_id=run_id(night), case=cases[i], device_fingerprint=env.device_fingerprint,
                                  device_uuid=device_uuid(device), shard=shard,
                                  measured_at=night_start(night) + timedelta(seconds=1.5 * i)),
                status="ok", method=TimingMethod(cache=case.cache, timing_mode=case.timing_mode,
                                                 clock="cuda_events", stop_reason="converged"),
                stats=stats, machine=machine, work=table.work[i],
                samples_ms=tuple(median * (1 + 0.002 * ((k * 7919) % 11 - 5)) for k in range(24)),
            )


def _psycopg_connect(url: str):  # noqa: ANN202 - psycopg's Connection
    import psycopg

    parsed = normalize_url(url)
    return psycopg.connect(host=parsed.host, port=parsed.port or 5432, user=parsed.username,
                           password=parsed.password, dbname=parsed.database)


def write_dimensions(url: str, year: FleetYear, table: CaseTable) -> Kit:
    """The schema (at rooflab's head, created as rooflab creates it), the environments, cases, runs,
    shards and devices of the year; returns the ids every night's rows need."""
    engine = open_for_writing(url)
    batch = Batch()
    envs = [environment(year, False), environment(year, True)]
    for env in envs[:1 + int(year.update_night < year.nights)]:
        batch.environments[env.device_fingerprint] = {
            **{k: v for k, v in dataclasses.asdict(env).items() if k != "info"}, "first_seen_at": START}
    for case in table.cases:
        batch.cases[case.case_key] = {"case_key": case.case_key, "op": case.op, "op_version": case.op_version,
                                      "family": case.family, "backend": case.backend, "dtype": case.dtype,
                                      "params": dict(case.key_params)}
    for night in range(year.nights):
        run = run_record(night)
        batch.runs[run.run_id] = {**dataclasses.asdict(run), "finished_at": run.started_at + timedelta(hours=3),
                                  "status": "complete"}
        for node in range(year.nodes):
            batch.shards.append((run.run_id, {
                "shard": f"{node}/{year.nodes}", "shard_count": year.nodes, "host": host(node),
                "status": "complete", "started_at": run.started_at,
                "finished_at": run.started_at + timedelta(hours=3)}))
        env = envs[int(night >= year.update_night)]
        for device in range(year.devices):
            batch.run_environments[(run.run_id, env.device_fingerprint, device_uuid(device))] = {
                "device_uuid": device_uuid(device), "info": {"uuid": device_uuid(device),
                                                              "host": host(node_of(year, device))}}
    with engine.begin() as conn:
        load(conn, batch)
        case_ids: dict[str, int] = {k: v for k, v in conn.execute(text("SELECT case_key, id FROM cases"))}
        env_ids: dict[str, int] = {
            k: v for k, v in conn.execute(text("SELECT device_fingerprint, id FROM environments"))}
        run_ids: dict[str, int] = {k: v for k, v in conn.execute(text("SELECT run_id, id FROM runs"))}
    engine.dispose()
    return Kit(year=year, table=table, case_ids=np.array([case_ids[c.case_key] for c in table.cases]),
               env_ids=(env_ids[envs[0].device_fingerprint], env_ids.get(envs[1].device_fingerprint, -1)),
               run_ids={night: run_ids[run_id(night)] for night in range(year.nights)})


def _drop_checks(cur) -> list[str]:  # noqa: ANN001 - a psycopg cursor
    """Drop the unique and foreign-key constraints and the secondary indexes of `measurements` (a bulk
    load checks nothing per row); returns the statements that put them back as they were."""
    cur.execute("SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE conrelid = 'measurements'::regclass AND contype IN ('u', 'f')")
    constraints = cur.fetchall()
    cur.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'measurements' "
                "AND indexname <> 'measurements_pkey' AND indexname NOT IN "
                "(SELECT conname FROM pg_constraint WHERE conrelid = 'measurements'::regclass)")
    indexes = cur.fetchall()
    for name, _ in constraints:
        cur.execute(f"ALTER TABLE measurements DROP CONSTRAINT {name}")
    for name, _ in indexes:
        cur.execute(f"DROP INDEX {name}")
    return [statement for _, statement in indexes] + [
        f"ALTER TABLE measurements ADD CONSTRAINT {name} {definition}" for name, definition in constraints]


def write_year(url: str, year: FleetYear, progress: Callable[[str], None] = print) -> Kit:
    """The whole year into the (empty) database at `url`: the schema and the small tables through
    rooflab's own loader, then each night's `measurements` with one COPY (one transaction a night),
    the table's checks and indexes dropped for the load and made again after it, as they were."""
    kit = write_dimensions(url, year, case_table(year))
    names = ", ".join(c.name for c in MEASUREMENT_COLUMNS)
    with _psycopg_connect(url) as conn, conn.cursor() as cur:
        restore = _drop_checks(cur)
        conn.commit()
        cur.execute("SET synchronous_commit = off")
        start = time.perf_counter()
        with ThreadPoolExecutor(1) as sender:  # the next night is made while this one is sent
            pending = None
            for night in range(year.nights):
                data = csv_bytes(night_table(kit, night))
                if pending is not None:
                    pending.result()
                    if night % max(1, year.nights // 10) == 0:
                        progress(f"night {night}/{year.nights} written, {time.perf_counter() - start:.0f} s")
                pending = sender.submit(_copy_night, conn, names, data)
            if pending is not None:
                pending.result()
        progress(f"{year.nights} nights written in {time.perf_counter() - start:.0f} s; building the indexes")
        for statement in restore:
            began = time.perf_counter()
            cur.execute(statement)
            conn.commit()
            progress(f"  {time.perf_counter() - began:6.0f} s  {statement}")
        cur.execute("ANALYZE")
    return kit


def _copy_night(conn, names: str, data: bytes) -> None:  # noqa: ANN001 - a psycopg connection
    with conn.cursor() as cur, cur.copy(f"COPY measurements ({names}) FROM STDIN WITH (FORMAT csv)") as copy:
        for start in range(0, len(data), 1 << 22):
            copy.write(data[start:start + (1 << 22)])
    conn.commit()
