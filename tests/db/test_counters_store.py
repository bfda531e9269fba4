"""Counter readings in the database (db/counters.py, revision 0007): stored beside the model,
linked to the measurement they check, read back with the comparison, carried by `db merge`, and
kept consistent when runs are deleted; the comparison rule on known answers."""
from __future__ import annotations

import json
import random
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import delete
from typer.testing import CliRunner

from rooflab.db import models
from rooflab.db.counters import (
    MODEL_TOLERANCE,
    READ_TOLERANCE,
    SIDE_SLACK_BYTES,
    TENSOR_FLOPS_TEXT,
    WRITE_BACK_TEXT,
    WRITE_TOLERANCE,
    WRITES_NOT_JUDGED_TEXT,
    CounterRecord,
    add_counters,
    check_model,
    check_reading,
    checked_run,
    counters_frame,
)
from rooflab.db.engine import make_engine
from rooflab.db.errors import DatabaseInputError
from rooflab.db.store import ResultStore
from rooflab.runners.cli.app import app
from rooflab.vocab import BytesReason
from tests.db.factories import make_case, make_env, make_measurement, make_run

runner = CliRunner()
METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum")


def _reading(run, case, env, rng: random.Random, *, checked: str | None = None, **kw) -> CounterRecord:
    base = dict(
        run_id=run.run_id, case=case, device_fingerprint=env.device_fingerprint, device_uuid=str(env.info["uuid"]),
        cache="cold", timing_mode="launch", status="ok",
        measured_at=run.started_at + timedelta(seconds=rng.randint(1, 99)),
        model_flops=rng.randint(1, 10**9), model_bytes=rng.randint(10**6, 10**9), checked_run_id=checked,
        ncu_version=f"2025.{rng.randint(1, 3)}.0.0", metrics=METRICS, missing_metrics=(),
        metric_values={m: float(rng.randint(1, 10**9)) for m in METRICS}, kernels=rng.randint(1, 4),
        kernel_ms=rng.uniform(0.01, 2.0), dram_read_bytes=rng.randint(1, 10**9), dram_write_bytes=rng.randint(1, 10**9),
        l2_traffic_bytes=rng.randint(1, 10**10), fp32_flops=rng.randint(1, 10**9), fp16_flops=0, fp64_flops=0,
        tensor_instructions=0, caught_write_back_bytes=rng.randint(0, 10**8), sweep_own_write_bytes=rng.randint(0, 999),
    )
    base["model_bytes_read"] = rng.randint(0, int(base["model_bytes"]))
    base["model_bytes_written"] = int(base["model_bytes"]) - int(base["model_bytes_read"])
    base.update(kw)
    return CounterRecord(**base)


def _store_run_and_readings(url: str, rng: random.Random, prefix: str = "night", env_index: int = 0):
    run, env = make_run(prefix, rng=rng), make_env(env_index)
    counters_run = make_run(f"counters-{prefix}", day=1, rng=rng)
    cases = [make_case(i) for i in range(4)]
    readings = []
    with ResultStore(url) as store:
        store.start_run(run)
        store.add_environment(run.run_id, env)
        for case in cases[:3]:
            store.add_measurement(make_measurement(run, case, env, rng=rng))
        store.finish_run(run.run_id, "complete")
        store.start_run(counters_run)
        store.add_environment(counters_run.run_id, env)
        for i, case in enumerate(cases):  # the last case has no measurement: no link
            r = _reading(counters_run, case, env, rng, checked=run.run_id if i < 3 else None)
            if i == 1:  # a metric that was not reported stays missing, never 0
                r = _reading(counters_run, case, env, rng, checked=run.run_id,
                             missing_metrics=("dram__bytes_write.sum",), dram_write_bytes=None,
                             metric_values={"dram__bytes_read.sum": 5.0})
            assert add_counters(store, r)
            assert not add_counters(store, r)  # the same reading twice adds nothing
            readings.append(r)
        store.finish_run(counters_run.run_id, "complete")
    return run, counters_run, env, readings


def test_readings_round_trip_with_their_link_and_the_comparison(any_url: str) -> None:
    rng = random.Random()
    run, counters_run, env, readings = _store_run_and_readings(any_url, rng)
    frame = counters_frame(any_url)
    assert len(frame) == 4 and set(frame["run_id"]) == {counters_run.run_id}
    assert list(frame["checked_run_id"]) == [run.run_id] * 3 + [None]
    for (_, got), want in zip(frame.iterrows(), readings, strict=True):
        assert got["case_key"] == want.case.case_key and got["model_bytes"] == want.model_bytes
        assert got["ncu_version"] == want.ncu_version and list(got["metrics"]) == list(METRICS)
        assert got["dram_read_bytes"] == want.dram_read_bytes and got["kernel_ms"] == pytest.approx(want.kernel_ms)
        assert got["device_key"] == env.info["uuid"]
        check = check_reading(want, l2_bytes=env.l2_bytes)  # the frame's comparison, on the device's L2
        assert got["l2_bytes"] == env.l2_bytes
        assert got["bytes_ratio"] == check.bytes_ratio and got["bytes_differ"] == check.bytes_differ
        assert got["write_back_bytes"] == check.write_back_bytes and got["flops_ratio"] == check.flops_ratio
        assert (got["model_bytes_read"], got["model_bytes_written"]) == (want.model_bytes_read,
                                                                          want.model_bytes_written)
        assert (got["caught_write_back_bytes"], got["sweep_own_write_bytes"]) == (want.caught_write_back_bytes,
                                                                                  want.sweep_own_write_bytes)
        assert (got["read_differ"], got["write_differ"]) == (check.reads.differ, check.writes.differ)
        assert got["write_reason"] == (check.writes.reason.value if check.writes.reason else None)
    missing = frame.iloc[1]
    assert missing["dram_write_bytes"] is None and list(missing["missing_metrics"]) == ["dram__bytes_write.sum"]
    assert missing["dram_bytes"] is None and missing["bytes_ratio"] is None
    # the missing writes decide nothing; the reads, counted, are judged on their own
    assert not missing["write_judged"] and missing["read_judged"]
    assert missing["bytes_differ"] == missing["read_differ"]


def test_the_measurement_checked_is_the_newest_ok_one_on_that_device(sqlite_url: str) -> None:
    rng = random.Random()
    env, other = make_env(0), make_env(1)
    case = make_case(0)
    with ResultStore(sqlite_url) as store:
        for day, (run_id, status, device) in enumerate([("a", "ok", env), ("b", "ok", env), ("c", "failed", env),
                                                        ("d", "ok", other)]):
            run = make_run(run_id, day=day, rng=rng)
            store.start_run(run)
            store.add_environment(run_id, device)
            store.add_measurement(make_measurement(run, case, device, rng=rng, status=status))
            store.finish_run(run_id, "complete")
    uuid = str(env.info["uuid"])
    assert checked_run(sqlite_url, case.case_key, "cold", "launch", uuid) == "b"
    assert checked_run(sqlite_url, case.case_key, "hot", "launch", uuid) is None
    assert checked_run(sqlite_url, make_case(1).case_key, "cold", "launch", uuid) is None


def test_a_bad_status_and_an_unknown_run_are_refused(sqlite_url: str) -> None:
    rng = random.Random()
    run, env = make_run("r", rng=rng), make_env(0)
    with ResultStore(sqlite_url) as store:
        store.start_run(run)
        store.add_environment(run.run_id, env)
        with pytest.raises(DatabaseInputError, match="invalid counters status 'crashed'"):
            add_counters(store, _reading(run, make_case(0), env, rng, status="crashed"))
        with pytest.raises(DatabaseInputError, match="run 'nope' is not in the database"):
            add_counters(store, _reading(make_run("nope", rng=rng), make_case(0), env, rng))


@pytest.mark.parametrize("model, read, write, differ, reason", [
    (1000, 1000, 1000, True, BytesReason.EXTRA_TRAFFIC),  # eager cos_cos: 2x its fused minimum
    (1000, 540, 540, False, None),  # within 10 %
    (1000, 300, 400, True, BytesReason.SERVED_FROM_L2),
    (1000, 500, 599, False, None),
    (1000, 500, 601, True, BytesReason.EXTRA_TRAFFIC),
])
def test_bytes_against_the_model_known_answers(model, read, write, differ, reason) -> None:
    c = check_model(model_bytes=model, model_flops=10, dram_read_bytes=read, dram_write_bytes=write)
    assert c.dram_bytes == read + write and c.excess_bytes == read + write - model
    assert c.bytes_ratio == pytest.approx(model / (read + write))
    assert c.bytes_differ is differ and c.reason == reason
    assert (c.reason_text is None) == (reason is None)
    assert MODEL_TOLERANCE == 0.10


def test_flops_against_the_model_and_the_tensor_pipe() -> None:
    c = check_model(model_bytes=8, model_flops=2 * 10**6, dram_read_bytes=4, dram_write_bytes=4,
                    fp32_flops=30 * 10**6, fp16_flops=0, fp64_flops=0, tensor_instructions=0)
    assert c.measured_flops == 30 * 10**6 and c.flops_ratio == pytest.approx(1 / 15) and c.flops_differ
    gemm = check_model(model_bytes=8, model_flops=2 * 10**9, dram_read_bytes=4, dram_write_bytes=4,
                       fp32_flops=10**3, fp16_flops=0, fp64_flops=0, tensor_instructions=10**6)
    assert gemm.flops_ratio is None and not gemm.flops_differ  # tensor-core FLOPs are not counted exactly
    unknown = check_model(model_bytes=8, model_flops=10, dram_read_bytes=None, dram_write_bytes=4, fp32_flops=None)
    assert unknown.dram_bytes is None and unknown.measured_flops is None and not unknown.bytes_differ


MIB = 1 << 20
L2 = 50 * MIB  # an H100's


@pytest.mark.parametrize("cache, model, read, write, kernels, differ, reason, write_back", [
    # a cold 2^20-element float32 copy, 4 MiB in and 4 MiB out: the output is still dirty in the
    # L2 when the kernel ends, so ncu counts almost no writes: not a difference, and not "not cold"
    ("cold", 8 * MIB, 4 * MIB, 64 * 1024, 1, False, None, 8 * MIB - 4 * MIB - 64 * 1024),
    # the same in a hot case: its inputs come from the L2 by design, which the flag says
    ("hot", 8 * MIB, 64 * 1024, 64 * 1024, 1, True, BytesReason.SERVED_FROM_L2, None),
    # a cold 256 MiB copy short by 40 MiB of writes (more than 10 %, less than one L2): allowed for
    ("cold", 256 * MIB, 128 * MIB, 88 * MIB, 1, False, None, 40 * MIB),
    # short by more than one L2 with one kernel: the write-back cannot explain it
    ("cold", 256 * MIB, 128 * MIB, 64 * MIB, 1, True, BytesReason.SERVED_FROM_L2, None),
    # ... but it can with two kernels (ncu flushes before each: one L2 of output each)
    ("cold", 256 * MIB, 128 * MIB, 64 * MIB, 2, False, None, 64 * MIB),
    # more bytes than the model: no allowance to give
    ("cold", 8 * MIB, 8 * MIB, 8 * MIB, 1, True, BytesReason.EXTRA_TRAFFIC, None),
])
def test_bytes_of_a_cold_case_allow_for_the_write_back_outside_the_kernel(
        cache, model, read, write, kernels, differ, reason, write_back) -> None:
    c = check_model(model_bytes=model, model_flops=10, dram_read_bytes=read, dram_write_bytes=write, cache=cache,
                    l2_bytes=L2, kernels=kernels)
    assert c.bytes_differ is differ and c.reason == reason and c.write_back_bytes == write_back
    assert c.bytes_ratio == pytest.approx(model / (read + write))  # the figures themselves stay as measured
    assert (c.note_text == WRITE_BACK_TEXT) == (write_back is not None)
    unknown_l2 = check_model(model_bytes=model, model_flops=10, dram_read_bytes=read, dram_write_bytes=write,
                             cache=cache, l2_bytes=None, kernels=kernels)  # without the L2 size: no allowance
    assert unknown_l2.write_back_bytes is None
    assert unknown_l2.bytes_differ is (abs((read + write) / model - 1) > MODEL_TOLERANCE)


# the sides, apart: (model read, model written, counted read, counted written, caught write-back) ->
# (read differs, its reason, write differs, its reason)
SIDES = [
    # right on both sides (within 5 % for reads, 10 % for writes)
    ((4 * MIB, 4 * MIB, 4 * MIB + 200_000, 4 * MIB - 400_000, 2 * MIB), (False, None, False, None)),
    # right in total, wrong on each side: reads half the model, writes twice: each side flagged on its own
    ((6 * MIB, 2 * MIB, 4 * MIB, 4 * MIB, 2 * MIB),
     (True, BytesReason.SERVED_FROM_L2, True, BytesReason.EXTRA_TRAFFIC)),
    # reads 6 % over (more than their 5 %), writes 6 % under (within their 10 %)
    ((8 * MIB, 8 * MIB, 8 * MIB * 106 // 100, 8 * MIB * 94 // 100, MIB),
     (True, BytesReason.EXTRA_TRAFFIC, False, None)),
    # writes 20 % under with the write-back caught: the model counts writes the call did not make
    ((8 * MIB, 8 * MIB, 8 * MIB, 8 * MIB * 80 // 100, MIB), (False, None, True, BytesReason.FEWER_WRITES)),
    # a scalar result: 40 bytes written against none is no contradiction (within SIDE_SLACK_BYTES)
    ((8 * MIB, 0, 8 * MIB, 40, 40), (False, None, False, None)),
]


@pytest.mark.parametrize(("model_read", "model_written", "read", "written", "caught", "expected"),
                         [(*figures, expected) for figures, expected in SIDES])
def test_reads_and_writes_are_held_against_their_own_counters_and_flagged_on_their_own(
        model_read, model_written, read, written, caught, expected) -> None:
    c = check_model(model_bytes=model_read + model_written, model_flops=10, dram_read_bytes=read,
                    dram_write_bytes=written, cache="cold", l2_bytes=L2, kernels=1, model_bytes_read=model_read,
                    model_bytes_written=model_written, caught_write_back_bytes=caught)
    assert c.reads.judged and c.writes.judged and c.write_back_bytes is None  # no allowance: the sides decide
    assert (c.reads.differ, c.reads.reason, c.writes.differ, c.writes.reason) == expected
    assert c.bytes_differ is (expected[0] or expected[2])
    assert c.reads.ratio == pytest.approx(model_read / read)
    assert (READ_TOLERANCE, WRITE_TOLERANCE, SIDE_SLACK_BYTES) == (0.05, 0.10, 64 * 1024)


def test_the_total_alone_passes_a_split_wrong_on_each_side_and_writes_without_their_write_back_are_not_judged() -> None:
    """Without the split (a reading stored before it), read + written against the total: a model that
    reads half and writes twice what the kernel does passes. A reading with the split but no write-back
    pass has its reads judged and its writes not, and says why."""
    total = check_model(model_bytes=8 * MIB, model_flops=10, dram_read_bytes=4 * MIB, dram_write_bytes=4 * MIB)
    assert not total.bytes_differ and not total.reads.judged and not total.writes.judged
    no_write_back = check_model(model_bytes=8 * MIB, model_flops=10, dram_read_bytes=4 * MIB,
                                dram_write_bytes=MIB, model_bytes_read=4 * MIB, model_bytes_written=4 * MIB)
    assert no_write_back.reads.judged and not no_write_back.reads.differ
    assert not no_write_back.writes.judged and not no_write_back.bytes_differ
    assert no_write_back.note_text == WRITES_NOT_JUDGED_TEXT


@pytest.mark.parametrize("family, dtype, countable", [
    ("gemm", "bfloat16", False), ("gemm", "float16", False), ("gemm", "tf32", False),
    ("gemm", "float8_e4m3fn", False), ("attention", "bfloat16", False), ("layer", "bfloat16", False),
    ("gemm", "float32", True),  # FFMA: counted
    ("attention", "float32", True), ("layer", "float32", True), ("gemm", "float64", True),
    ("pointwise", "bfloat16", True),  # computed in float32 on the FMA pipe
])
def test_flops_on_the_tensor_cores_are_not_countable_even_when_the_tensor_counter_reads_zero(
        family, dtype, countable) -> None:
    # an H100 GEMM on wgmma: the tensor-pipe counter may read 0, and the few FFMAs of its epilogue
    # are no measure of its 2·m·n·k FLOPs
    model_flops = 2 * 4096**3
    c = check_model(model_bytes=8, model_flops=model_flops, dram_read_bytes=4, dram_write_bytes=4,
                    fp32_flops=model_flops // 1000 if not countable else model_flops, fp16_flops=0, fp64_flops=0,
                    tensor_instructions=0, family=family, dtype=dtype)
    assert c.flops_countable is countable
    if countable:
        assert c.flops_ratio == pytest.approx(1.0) and not c.flops_differ and c.note_text is None
    else:
        assert c.flops_ratio is None and not c.flops_differ and c.note_text == TENSOR_FLOPS_TEXT


def test_merge_carries_readings_once_and_deleting_runs_keeps_them_consistent(any_url: str, tmp_path: Path) -> None:
    rng = random.Random()
    node = tmp_path / "node.db"
    _, _, _, readings = _store_run_and_readings(f"sqlite:///{node}", rng)
    with ResultStore(any_url) as store:  # the target holds other runs first, so its ids differ from the node's
        earlier, env = make_run("earlier", rng=rng), make_env(5)
        store.start_run(earlier)
        store.add_environment(earlier.run_id, env)
        store.add_measurement(make_measurement(earlier, make_case(9), env, rng=rng))
        store.finish_run(earlier.run_id, "complete")
    for expected in (4, 0):
        result = runner.invoke(app, ["db", "merge", str(node), "--db", any_url, "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)[0]["counters_added"] == expected
    merged = counters_frame(any_url).drop(columns=["measured_at"])
    source = counters_frame(f"sqlite:///{node}").drop(columns=["measured_at"])
    assert merged.astype(str).equals(source.astype(str))

    engine = make_engine(any_url, write=True)  # foreign keys on, as every rooflab connection
    with engine.begin() as conn:  # the checked run goes: the readings stay, unlinked
        conn.execute(delete(models.Run.__table__).where(models.Run.run_id == "night"))
    assert list(counters_frame(any_url)["checked_run_id"]) == [None] * 4
    with engine.begin() as conn:  # the counters run goes: its readings go with it
        conn.execute(delete(models.Run.__table__).where(models.Run.run_id == "counters-night"))
    engine.dispose()
    assert counters_frame(any_url).empty
