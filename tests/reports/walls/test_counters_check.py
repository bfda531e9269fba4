"""The model against the counters in the report (reports/walls/counters_check.py): which reading a device page
shows, the diagnosis naming the efficiencies that rest on a contradicted model, and the section of
the device page written from a real database."""
from __future__ import annotations

import random
import re
from datetime import timedelta

import pandas as pd
import pytest

from rooflab.db.counters import FRAME_COLUMNS, CounterRecord, add_counters, with_model_check
from rooflab.db.store import ResultStore
from rooflab.record import CaseRecord, with_columns
from rooflab.reports.pages.report import write_report
from rooflab.reports.roofs.ceilings import compute_ceilings
from rooflab.reports.walls.counters_check import annotate, latest_readings, section
from rooflab.reports.walls.diagnosis import diagnose
from tests.db.factories import make_env, make_measurement, make_run
from tests.reports.synth import H100, device_rows, row

N = 1 << 26


def reading(case_key: str, *, dram: int, model_bytes: int, run_id: str = "counters-1", checked: str | None = "run-1",
            fingerprint: str = "fp-h100", fp32: int = 0, model_flops: int = 0, tensor: int = 0,
            family: str | None = None, dtype: str | None = None) -> dict:
    values = dict.fromkeys(FRAME_COLUMNS)
    values.update(run_id=run_id, checked_run_id=checked, device_fingerprint=fingerprint, case_key=case_key,
                  status="ok", dram_read_bytes=dram // 2, dram_write_bytes=dram - dram // 2, model_bytes=model_bytes,
                  model_flops=model_flops, fp32_flops=fp32, fp64_flops=0, fp16_flops=0, tensor_instructions=tensor,
                  kernels=2, missing_metrics=[], family=family, dtype=dtype, cache="cold")
    return values


def frame(*readings: dict) -> pd.DataFrame:
    return with_model_check(pd.DataFrame(list(readings), columns=list(FRAME_COLUMNS), dtype=object))


def eager_cos_cos(median_ms: float) -> dict:
    return row(op="cos_cos", family="pointwise", dtype="bfloat16", params={"n": N}, median_ms=median_ms,
               flops=2 * N, nbytes=2 * N * 2)


def test_a_bandwidth_wall_on_a_contradicted_byte_model_is_named_and_recounted() -> None:
    # eager cos_cos at 182 us: 268 MB of model bytes at 3,000 GB/s is 49 % efficiency; the counters
    # saw the intermediate (twice the bytes): at the counted bytes it runs at 98 % of the wall
    results = pd.DataFrame(device_rows(hbm_gbps=3000.0) + [eager_cos_cos(0.182)])
    dc = compute_ceilings(results, H100)
    diag = diagnose(results, dc)
    key = diag.set_index("op").loc["cos_cos", "case_key"]
    readings = latest_readings(frame(reading(key, dram=4 * N * 2, model_bytes=2 * N * 2, fp32=52 * N,
                                             model_flops=2 * N)), results)
    got = annotate(diag, readings).set_index("op").loc["cos_cos"]
    assert got["wall"] == "bandwidth" and got["contradicted"] == "bytes"
    assert got["counters_bytes_ratio"] == pytest.approx(0.5) and got["counters_reason"] == "extra_traffic"
    model_ms, counted_ms = 2 * N * 2 / 3000e9 * 1e3, 4 * N * 2 / 3000e9 * 1e3
    assert got["efficiency"] == pytest.approx(model_ms / 0.182)
    assert got["efficiency_counted"] == pytest.approx(counted_ms / 0.182)
    others = annotate(diag, readings).set_index("op").drop(index="cos_cos")
    assert others["contradicted"].isna().all()  # no reading, no verdict


def test_a_model_the_counters_confirm_or_that_the_wall_does_not_rest_on_is_not_named() -> None:
    results = pd.DataFrame(device_rows(hbm_gbps=3000.0) + [eager_cos_cos(0.182)])
    dc = compute_ceilings(results, H100)
    diag = diagnose(results, dc)
    key = diag.set_index("op").loc["cos_cos", "case_key"]
    # bytes within 10 %, FLOPs far off: the bandwidth wall rests on the bytes only
    close = latest_readings(frame(reading(key, dram=int(2 * N * 2 * 1.05), model_bytes=2 * N * 2, fp32=52 * N,
                                          model_flops=2 * N)), results)
    got = annotate(diag, close).set_index("op").loc["cos_cos"]
    assert got["contradicted"] == "" and got["counters_reason"] is None
    gemm_key = diag.set_index("op").loc["matmul"].iloc[0]["case_key"]
    tensor = latest_readings(frame(reading(gemm_key, dram=10**9, model_bytes=10**9, fp32=5, model_flops=10**12,
                                           tensor=10**7)), results)
    g = annotate(diag, tensor).set_index("case_key").loc[gemm_key]
    assert g["counters_flops_ratio"] is None and g["contradicted"] == ""  # tensor-core FLOPs are not counted


def test_a_byte_model_right_in_total_and_wrong_on_each_side_is_contradicted_and_each_side_named() -> None:
    """A copy whose model reads 1.5x and writes 0.5x what the counters saw (written back inside the
    range): the total ratio is 1, and still the bandwidth wall's bytes are contradicted, each side said."""
    results = pd.DataFrame(device_rows(hbm_gbps=3000.0) + [eager_cos_cos(0.182)])
    dc = compute_ceilings(results, H100)
    diag = diagnose(results, dc)
    key = diag.set_index("op").loc["cos_cos", "case_key"]
    wrong = reading(key, dram=4 * N * 2, model_bytes=4 * N * 2)
    wrong.update(model_bytes_read=3 * N * 2, model_bytes_written=N * 2, caught_write_back_bytes=N)
    readings = latest_readings(frame(wrong), results)
    got = annotate(diag, readings).set_index("op").loc["cos_cos"]
    assert got["counters_bytes_ratio"] == pytest.approx(1.0) and got["contradicted"] == "bytes"
    (shown,) = section(readings)
    assert shown["read_differ"] and shown["write_differ"]
    assert shown["why"].startswith("read served_from_l2; write extra_traffic")


def test_the_reading_of_the_shown_run_is_preferred_and_other_devices_are_left_out() -> None:
    results = pd.DataFrame([eager_cos_cos(0.182)])
    key = results["case_key"].iloc[0]
    readings = frame(
        reading(key, dram=1, model_bytes=2, run_id="counters-a", checked="run-1"),
        reading(key, dram=3, model_bytes=2, run_id="counters-b", checked="run-0"),  # newer, checks another run
        reading(key, dram=5, model_bytes=2, run_id="counters-c", checked="run-1", fingerprint="fp-other"),
    )
    chosen = latest_readings(readings, results)
    assert list(chosen["run_id"]) == ["counters-a"]
    only_other_run = latest_readings(readings.iloc[[1]], results)
    assert list(only_other_run["run_id"]) == ["counters-b"]  # without one for the shown run: the newest
    assert latest_readings(None, results).empty and section(chosen.iloc[0:0]) == []


def test_the_device_page_shows_the_counters_and_the_contradicted_efficiency(tmp_path) -> None:
    rng = random.Random()
    url = f"sqlite:///{tmp_path / 'r.db'}"
    env = make_env(0)
    run, counters_run = make_run("night", rng=rng), make_run("counters-night", day=1, rng=rng)
    case = CaseRecord("cos_cos.v1:eager:bfloat16:cold:launch:n=67108864", "cos_cos", 1, "pointwise", "eager",
                      "bfloat16", {"n": N})
    with ResultStore(url) as store:
        store.start_run(run)
        store.add_environment(run.run_id, env)
        m = make_measurement(run, case, env, rng=rng)
        store.add_measurement(with_columns(m, flops=2 * N, bytes=4 * N, median_ms=0.182, throttled=False))
        store.finish_run(run.run_id, "complete")
        store.start_run(counters_run)
        store.add_environment(counters_run.run_id, env)
        add_counters(store, CounterRecord(
            run_id=counters_run.run_id, case=case, device_fingerprint=env.device_fingerprint,
            device_uuid=str(env.info["uuid"]), cache="cold", timing_mode="launch", status="ok",
            measured_at=counters_run.started_at + timedelta(seconds=5), model_flops=2 * N, model_bytes=4 * N,
            checked_run_id=run.run_id, ncu_version="2025.1.1.0", kernels=2, kernel_ms=0.18,
            dram_read_bytes=4 * N, dram_write_bytes=4 * N, l2_traffic_bytes=9 * N, fp32_flops=52 * N, fp16_flops=0,
            fp64_flops=0, tensor_instructions=0))
        store.finish_run(counters_run.run_id, "complete")
    index = write_report(url, tmp_path / "site")
    page = next(index.parent.glob("device-*.html")).read_text()
    assert "Model against the hardware counters" in page
    counters_part = page.split('id="counters"')[1]
    assert "more DRAM traffic than the minimum" in counters_part and ">night<" in counters_part  # the run it checks
    assert "rests on a bytes model the counters contradict" in page and "model / counted bytes 0.5" in page


def test_a_tensor_core_gemm_whose_tensor_counter_reads_zero_is_not_held_to_its_few_ffmas() -> None:
    # Hopper's wgmma may leave sm__inst_executed_pipe_tensor.sum at 0: the bf16 GEMM's FLOPs are
    # still tensor-core FLOPs, and its epilogue's FFMAs say nothing about them
    results = pd.DataFrame(device_rows(hbm_gbps=3000.0))
    diag = diagnose(results, compute_ceilings(results, H100))
    gemm = diag[(diag["op"] == "matmul") & (diag["wall"] == "compute")].iloc[0]
    assert gemm["dtype"] == "bfloat16"
    model_flops = 2 * 8192**3
    readings = latest_readings(frame(reading(gemm["case_key"], dram=10**9, model_bytes=10**9, fp32=10**6,
                                             model_flops=model_flops, tensor=0, family="gemm",
                                             dtype="bfloat16")), results)
    g = annotate(diag, readings).set_index("case_key").loc[gemm["case_key"]]
    assert g["counters_flops_ratio"] is None and g["contradicted"] == "" and g["counters_flops_countable"] is False
    assert g["efficiency_counted"] == pytest.approx(g["efficiency"])  # nothing recounted from the FFMAs


@pytest.fixture(scope="module")
def gemm_page(tmp_path_factory) -> str:
    """A device page of an H100 with two GEMMs, each with a counter reading: a float32 one whose
    counted FLOPs are half its model's (on FFMA: countable, contradicted, DRAM bytes as modelled),
    and a bf16 one on the tensor cores whose tensor counter read 0 (not countable)."""
    rng = random.Random()
    tmp_path = tmp_path_factory.mktemp("gemm-page")
    url = f"sqlite:///{tmp_path / 'r.db'}"
    env = make_env(0)
    run, counters_run = make_run("night", rng=rng), make_run("counters-night", day=1, rng=rng)
    m = k = n = 4096
    flops, cases = 2 * m * n * k, []
    for dtype, size, median_ms in (("float32", 4, 2.5), ("bfloat16", 2, 0.2)):
        key = f"matmul.v1:eager:{dtype}:cold:launch:k={k},m={m},n={n}"
        cases.append((CaseRecord(key, "matmul", 1, "gemm", "eager", dtype, {"k": k, "m": m, "n": n}),
                      (m * k + k * n + m * n) * size, median_ms))
    with ResultStore(url) as store:
        store.start_run(run)
        store.add_environment(run.run_id, env)
        for case, nbytes, median_ms in cases:
            store.add_measurement(with_columns(make_measurement(run, case, env, rng=rng), flops=flops, bytes=nbytes,
                                               median_ms=median_ms, throttled=False))
        store.finish_run(run.run_id, "complete")
        store.start_run(counters_run)
        store.add_environment(counters_run.run_id, env)
        for case, nbytes, _ in cases:
            fp32 = flops // 2 if case.dtype == "float32" else 3 * 10**6  # bf16: the epilogue's few FFMAs
            add_counters(store, CounterRecord(
                run_id=counters_run.run_id, case=case, device_fingerprint=env.device_fingerprint,
                device_uuid=str(env.info["uuid"]), cache="cold", timing_mode="launch", status="ok",
                measured_at=counters_run.started_at + timedelta(seconds=5), model_flops=flops, model_bytes=nbytes,
                checked_run_id=run.run_id, ncu_version="2025.1.1.0", kernels=1, kernel_ms=0.2,
                dram_read_bytes=nbytes - m * n * 2, dram_write_bytes=m * n * 2, l2_traffic_bytes=9 * nbytes,
                fp32_flops=fp32, fp16_flops=0, fp64_flops=0, tensor_instructions=0))
        store.finish_run(counters_run.run_id, "complete")
    index = write_report(url, tmp_path / "site")
    return next(index.parent.glob("device-*.html")).read_text()


def _diagnosis_cell(page: str, dtype: str) -> str:
    """The counters cell of the diagnosis row of the 4096^3 matmul in `dtype`."""
    diagnosis = page.split("<h3>All cases</h3>")[1].split("</table>")[0]
    row = next(r for r in diagnosis.split("<tr>") if f"matmul.v1:eager:{dtype}:" in r)
    return re.findall(r"<td>(.*?)</td>", row)[-2]


def test_the_device_page_names_the_flops_ratio_when_the_flops_model_is_contradicted(gemm_page: str) -> None:
    fp32 = _diagnosis_cell(gemm_page, "float32")
    assert "rests on a FLOPs model the counters contradict" in fp32
    assert "model / counted FLOPs 2" in fp32 and "bytes" not in fp32, fp32  # not the bytes ratio


def test_the_device_page_says_tensor_core_flops_are_not_countable(gemm_page: str) -> None:
    bf16 = _diagnosis_cell(gemm_page, "bfloat16")
    assert "contradict" not in bf16 and "FLOPs on the tensor cores: not countable by these counters" in bf16, bf16
    section = gemm_page.split('id="counters"')[1]
    row = next(r for r in section.split("<tr>") if "matmul.v1:eager:bfloat16:" in r)
    assert "not countable (tensor cores)" in row and "not countable by these counters" in row
