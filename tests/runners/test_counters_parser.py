"""Nsight Compute's raw-page CSV read by runners/counters/ncu_csv.py (a pure function on text), the
metrics turned into a reading (runners/counters/metrics.py), and what the ncu module reads from ncu's
output and puts on its command line (runners/counters/ncu.py)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from rooflab.runners.counters import metrics as m
from rooflab.runners.counters.ncu import (
    RANGE,
    command,
    error_lines,
    ncu_version,
    permission_denied,
    run_pass,
    unknown_metrics,
)
from rooflab.runners.counters.ncu_csv import NcuFormatError, parse_number, parse_raw, unit_scale

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ncu"
N = 1 << 20


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_every_kernel_of_the_range_is_summed_with_its_thousands_separators() -> None:
    reading = parse_raw(fixture("cos_cos_eager_bfloat16.csv"), m.METRICS)
    assert reading.kernels == 2 and all("cos_kernel_cuda" in k for k in reading.kernel_names)
    assert reading.values[m.DRAM_READ] == 2 * 2_099_200 and reading.values[m.DRAM_WRITE] == 2 * 2_097_152
    assert reading.values[m.KERNEL_TIME] == 2 * 4_128
    assert reading.missing == ()
    q = m.quantities(reading.values)
    assert q["kernel_ms"] == pytest.approx(2 * 4_128 / 1e6)
    assert q["fp32_flops"] == 2 * (N + 2 * N + 2 * 11 * N)  # add + mul + 2 fma, over both kernels
    assert q["fp64_flops"] == 0 and q["fp16_flops"] == 0 and q["tensor_instructions"] == 0


def test_units_are_converted_to_base_units() -> None:
    header = ('"ID","Kernel Name","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum",'
              '"lts__t_bytes.sum"')
    text = "\n".join([
        "some output of the profiled program, before ncu's report",
        header,
        '"","","Kbyte","Mbyte","usecond","Gbyte"',
        '"0","k1","1,500.5","2.25","12.5","1.5"',
        '"1","k2","0.5","0.75","1,000","0.5"',
    ])
    reading = parse_raw(text, [m.DRAM_READ, m.DRAM_WRITE, m.KERNEL_TIME, m.L2_TRAFFIC])
    assert reading.values[m.DRAM_READ] == pytest.approx(1_501_000.0)
    assert reading.values[m.DRAM_WRITE] == pytest.approx(3_000_000.0)
    assert reading.values[m.KERNEL_TIME] == pytest.approx(1_012_500.0)  # nanoseconds
    assert reading.values[m.L2_TRAFFIC] == pytest.approx(2e9)
    assert reading.units[m.DRAM_WRITE] == "Mbyte"


@pytest.mark.parametrize("unit, scale", [("byte", 1), ("Kbyte", 1e3), ("Mbyte", 1e6), ("Gbyte", 1e9),
                                         ("Tbyte", 1e12), ("nsecond", 1), ("usecond", 1e3), ("msecond", 1e6),
                                         ("second", 1e9), ("inst", 1), ("Minst", 1e6), ("", 1), ("cycle", 1)])
def test_unit_scales(unit, scale) -> None:
    assert unit_scale(unit) == scale


def test_a_missing_metric_is_missing_never_zero() -> None:
    reading = parse_raw(fixture("gelu_float32_na.csv"), m.METRICS)
    # lts__t_bytes.sum reads n/a; the xu column is not there at all
    assert set(reading.missing) == {m.L2_TRAFFIC, m.XU_INSTRUCTIONS}
    assert m.L2_TRAFFIC not in reading.values and m.XU_INSTRUCTIONS not in reading.values
    q = m.quantities(reading.values)
    assert q["l2_traffic_bytes"] is None and q["dram_read_bytes"] == N * 4
    no_fma = {k: v for k, v in reading.values.items() if k != m.FLOP_METRICS["fp32"][2]}
    assert m.quantities(no_fma)["fp32_flops"] is None  # add and mul without fma is no FLOP count


def test_one_kernel_without_a_value_makes_the_metric_missing_for_the_call() -> None:
    text = "\n".join([
        '"ID","Kernel Name","dram__bytes_read.sum"', '"","","byte"', '"0","a","1,024"', '"1","b","n/a"',
    ])
    reading = parse_raw(text, [m.DRAM_READ])
    assert reading.kernels == 2 and reading.missing == (m.DRAM_READ,) and reading.values == {}


def test_no_kernel_in_the_range_gives_no_values() -> None:
    text = '==WARNING== No kernels were profiled.\n"ID","Kernel Name","dram__bytes_read.sum"\n"","","byte"\n'
    reading = parse_raw(text, [m.DRAM_READ])
    assert reading.kernels == 0 and reading.missing == (m.DRAM_READ,)


@pytest.mark.parametrize("text, message", [
    ("==PROF== Disconnected from process 12\n", "no header row"),
    ('"ID","Kernel Name","dram__bytes_read.sum"\n"","","furlong"\n"0","k","3"\n', "unknown unit 'furlong'"),
    ('"ID","Kernel Name","dram__bytes_read.sum"\n"","","byte"\n"0","k"\n', "kernel row 1 has 2 cells"),
    ('"ID","Kernel Name","dram__bytes_read.sum"\n"","","byte"\n"0","k","12,34"\n', "not a number"),
])
def test_malformed_text_is_refused_with_what_is_wrong(text, message) -> None:
    with pytest.raises(NcuFormatError, match=message):
        parse_raw(text, [m.DRAM_READ])


@pytest.mark.parametrize("text, value", [("1,234,567", 1234567.0), ("0", 0.0), ("12.5", 12.5),
                                         ("1,234.25", 1234.25), ("3e+06", 3e6), ("n/a", None), ("", None)])
def test_numbers(text, value) -> None:
    assert parse_number(text) == value


def test_the_command_line_profiles_one_range_with_the_cache_flushed_and_clocks_left_alone(tmp_path) -> None:
    argv = command("/opt/ncu", metrics=["a.sum", "b.sum"], cache="cold", log_file=tmp_path / "l.csv",
                   request=tmp_path / "r.pkl")
    text = " ".join(argv)
    for part in ("--nvtx --nvtx-include rooflab.counters/", "--cache-control all", "--clock-control none",
                 "--metrics a.sum,b.sum", "--csv --page raw --print-units base", "--target-processes all",
                 f"--log-file {tmp_path / 'l.csv'}", f"-m rooflab.runners.counters.child {tmp_path / 'r.pkl'}"):
        assert part in text
    assert RANGE == "rooflab.counters"
    hot = command("/opt/ncu", metrics=["a.sum"], cache="hot", log_file=tmp_path / "l", request=tmp_path / "r")
    assert hot[hot.index("--cache-control") + 1] == "none"  # a hot case's call follows a warming call


def test_what_ncu_says_when_it_cannot_count() -> None:
    denied = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"
    assert permission_denied(denied) and not permission_denied("==PROF== Connected to process 1")
    said = "==PROF== Connected\n==ERROR== Failed to find metric smsp__inst_executed_pipe_xu.sum\n"
    asked = [m.INSTRUCTIONS, m.XU_INSTRUCTIONS]
    assert unknown_metrics(said, asked) == [m.XU_INSTRUCTIONS]  # not its prefix smsp__inst_executed.sum
    assert unknown_metrics("smsp__inst_executed.sum ok\n", asked) == []  # only ==ERROR== lines count
    assert error_lines("a\nb\n==ERROR== x\n==ERROR== y\n") == "==ERROR== x | ==ERROR== y"
    assert error_lines("one\ntwo\nthree\nfour\n") == "two | three | four"


def test_the_version_is_read_and_a_broken_ncu_is_refused(tmp_path) -> None:
    good = tmp_path / "ncu"
    good.write_text("#!/bin/sh\necho 'NVIDIA (R) Nsight Compute Command Line Profiler'\necho 'Version 2024.3.2.0 "
                    "(build 34861637) (public-release)'\n")
    good.chmod(0o755)
    assert ncu_version(str(good)) == "2024.3.2.0"
    bad = tmp_path / "ncu-bad"
    bad.write_text("#!/bin/sh\necho 'libnvperf_host.so: cannot open shared object file' >&2\nexit 127\n")
    bad.chmod(0o755)
    with pytest.raises(Exception, match="gave no version: libnvperf_host.so"):
        ncu_version(str(bad))


def test_a_pass_past_its_time_is_ended_with_its_children(tmp_path) -> None:
    marker = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {marker}; wait"
    started = time.monotonic()
    out = run_pass(["bash", "-c", script], log_file=tmp_path / "none.csv", printed_file=tmp_path / "p.txt",
                   timeout_s=1.0)
    assert out.returncode is None and time.monotonic() - started < 15
    pid = int(marker.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
