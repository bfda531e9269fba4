"""The other peer formats read into typed rows: nccl-tests' -J JSON (written as util.cu writes it),
rccl-tests' JSON lines (a real file) and CSV, nvbench's JSON in both layouts (real files of the nvbench
repository) with a --jsonbin sidecar, BabelStream's CSV; recognition by content, never by name."""
from __future__ import annotations

import json
import random
import struct
from pathlib import Path
from typing import Any

import pytest

from rooflab.runners.peer_import.babelstream import parse_babelstream_csv
from rooflab.runners.peer_import.babelstream_text import element_count, parse_babelstream_text
from rooflab.runners.peer_import.errors import PeerFormatError
from rooflab.runners.peer_import.nccl_json import parse_nccl_json
from rooflab.runners.peer_import.nvbench import parse_nvbench_json, read_sidecar
from rooflab.runners.peer_import.printed import Printed
from rooflab.runners.peer_import.rccl_files import parse_rccl_csv, parse_rccl_json
from rooflab.runners.peer_import.recognise import recognise
from tests.runners.peer_import.planting import FIXTURES, fixture


def nccl_json_document(times_us: list[float], *, ranks: int = 2, per_iteration: bool = True) -> dict[str, Any]:
    """A -J document as src/util.cu writes one (version 3): all_reduce float sum, busbw from the times."""
    results = []
    for i, t in enumerate(times_us):
        size = 1 << (20 + i)
        algbw = size / 1e9 / (t * 1e-6)
        half = {"time": t, "alg_bw": algbw, "bus_bw": algbw * 2 * (ranks - 1) / ranks, "nwrong": 0.0}
        row: dict[str, Any] = {"size": size, "count": size // 4, "type": "float", "redop": "sum",
                               "root": "    -1", "out_of_place": half, "in_place": dict(half, nwrong=None),
                               "actual_iterations": 20, "experiment_name": ""}
        if per_iteration:
            times = [t * (1 + 0.01 * k) for k in range(20)]
            row["out_of_place_per_iter"] = {"skipped_iterations": 0, "min_us": min(times), "max_us": max(times),
                                            "times_us": times, "per_process_max_times_us": [times] * ranks,
                                            "cv_pct": 5.0}
        results.append(row)
    bw = [r["out_of_place"]["bus_bw"] for r in results] + [r["in_place"]["bus_bw"] for r in results]
    return {"version": 3, "start_time": "2026-04-19 11:13:22", "args": ["/opt/nccl-tests/build/all_reduce_perf"],
            "env": ["NCCL_ALGO=Ring", "HOME=/root"], "nccl_version": 22807,
            "config": {"nthreads": 1, "ngpus": 1, "minimum_bytes": 1 << 20, "maximum_bytes": 1 << 24,
                       "step_factor": 2, "warmup_iters": 1, "iterations": 20, "aggregated_iterations": 1,
                       "validation": 1, "graph": 0,
                       "devices": [{"rank": r, "group": 0, "pid": 100 + r, "hostname": f"node-{r}", "device": 0,
                                    "device_hex": "0000:06:00", "device_info": "NVIDIA H100 80GB HBM3"}
                                   for r in range(ranks)]},
            "results": results, "out_of_bounds": {"count": 0, "okay": "true"},
            "average_bus_bandwidth": {"bandwidth": sum(bw) / len(bw), "okay": "unchecked"}, "errors": [],
            "end_time": "2026-04-19 11:13:40"}


def test_nccl_tests_json_reads_devices_halves_and_iterations() -> None:
    rng = random.Random(3)
    times = [rng.uniform(50, 5000) for _ in range(5)]
    test = parse_nccl_json(json.dumps(nccl_json_document(times)))
    assert test.program == "all_reduce_perf" and test.library_version == "2.28.7"
    assert [d.host for d in test.devices] == ["node-0", "node-1"] and test.env == {"NCCL_ALGO": "Ring"}
    assert test.start_time == "2026-04-19 11:13:22"
    row = test.rows[2]
    assert row.root == -1 and row.out_of_place is not None and row.in_place is not None
    assert row.out_of_place.time_us.value == times[2] and row.in_place.wrong is None
    assert row.out_of_place.per_iteration is not None and len(row.out_of_place.per_iteration.times_us) == 20


def test_nccl_tests_json_cut_short_names_its_line() -> None:
    text = json.dumps(nccl_json_document([100.0, 200.0, 300.0]), indent=1)
    cut = text[: len(text) * 2 // 3]
    with pytest.raises(PeerFormatError) as caught:
        parse_nccl_json(cut)
    assert caught.value.line == cut.count("\n") + 1 and "invalid JSON" in caught.value.what


def test_rccl_tests_json_lines_real_file() -> None:
    rows = parse_rccl_json(fixture("rccl_tests_allreduce.jsonl"))
    assert len(rows) == 5 and {r.name for r in rows} == {"AllReduce"} and {r.ranks for r in rows} == {4}
    assert rows[1].in_place and not rows[0].in_place and rows[0].wrong == 0
    assert rows[0].busbw_gbps.value == pytest.approx(0.08006609623048194)


def test_rccl_tests_csv_with_spaces_and_an_added_field() -> None:
    text = ("name, size, type, redop, inPlace, time, algBw, busBw, #wrong, gpus, numCycle\n"
            "AllGather, 1048576, float, none, 0, 25.5, 41.12, 30.84, 0, 4, 1\n"
            "AllGather, 1048576, float, none, 1, 24.5, 42.80, 32.10, 3, 4, 1\n")
    rows = parse_rccl_csv(text)
    assert [r.in_place for r in rows] == [False, True] and rows[1].wrong == 3 and rows[0].cycle == 1
    with pytest.raises(PeerFormatError) as caught:
        parse_rccl_csv(text + "AllGather, 2097152, float\n")
    assert caught.value.line == 4


def test_nvbench_json_v1_real_file() -> None:
    parsed = parse_nvbench_json(fixture("nvbench_v1_gv100.json"))
    assert parsed.json_version == "1.0.0" and parsed.nvbench_version == "0.1.0"
    assert parsed.devices[0].name == "Quadro GV100" and parsed.devices[0].l2_cache_bytes == 6291456
    by_name = {(s.benchmark, s.name): s for s in parsed.states}
    u8 = by_name[("copy_type_sweep", "Device=0 T=U8")]
    assert [(a.name, a.value) for a in u8.axis_values] == [("T", "U8")]
    assert u8.number("nv/cold/bw/global/bytes_per_second") == pytest.approx(234038918676.01785)
    skipped = [s for s in parsed.states if s.skipped]
    assert len(skipped) == 1 and skipped[0].skip_reason == "Not a conversion: InputType == OutputType."


def test_nvbench_json_2021_layout_real_file() -> None:
    parsed = parse_nvbench_json(fixture("nvbench_2021_gv100.json"))
    assert parsed.json_version is None
    timed = [s for s in parsed.states if not s.skipped]
    assert len(timed) == 2 and timed[0].number("nv/cold/time/gpu/mean") == pytest.approx(4.411147755695762e-06)
    assert [s.skip_reason for s in parsed.states if s.skipped] == ["Long 'Foo' benchmarks are skipped."]


def test_nvbench_json_first_2021_layout_real_file() -> None:
    parsed = parse_nvbench_json(fixture("nvbench_2021_list_mx150.json"))
    assert parsed.json_version is None and parsed.devices[0].name == "GeForce MX150"
    skipped, first, second = parsed.states
    assert skipped.skipped and skipped.skip_reason == "Types are not mixed."
    assert first.name == "Device=0 In=I32 Out=F32 Elements=2^20" and not first.skipped
    assert [(a.name, a.value) for a in first.axis_values] == [("In", "I32"), ("Out", "F32"), ("Elements", "1048576")]
    assert first.number("nv/cold/time/gpu/mean") == pytest.approx(0.0002039839102511483)
    assert first.number("nv/cold/sample_size") == 3992 and first.number("nv/batch/sample_size") == 3993
    assert first.number("nv/cold/bw/global/bytes_per_second") == pytest.approx(41123870944.87898)
    assert second.number("nv/cold/time/gpu/mean") is not None


def test_an_nvbench_sidecar_reads_float32_seconds(tmp_path: Path) -> None:
    samples = [random.Random(5).uniform(1e-6, 1e-3) for _ in range(37)]
    (tmp_path / "0.bin").write_bytes(struct.pack("<37f", *samples))
    assert read_sidecar(tmp_path / "0.bin") == pytest.approx(samples, rel=1e-6)
    (tmp_path / "1.bin").write_bytes(struct.pack("<3f", *samples[:3])[:-1])
    with pytest.raises(PeerFormatError, match="not a whole number"):
        read_sidecar(tmp_path / "1.bin")


def test_babelstream_csv_layouts() -> None:
    (out,) = parse_babelstream_csv(fixture("babelstream_rtx2060_transcribed.csv"))
    assert out.device_name == "NVIDIA GeForce RTX 2060" and out.model == "alpaka"
    assert [r.function for r in out.rows] == ["Copy", "Mul", "Add", "Triad", "Dot"]
    assert out.rows[0].bandwidth_bytes_per_s.value == pytest.approx(297715.310e6)
    v5 = ('CUDA Device 0: "NVIDIA H100 80GB HBM3" 132 SMs(9,0) Memory: 2619 MHz x 5120-bit\n'
          "Init,33554432,8,1234.5,0.5\n"
          "phase,n_elements,sizeof,max_GB_per_sec,runtime\nInit,33554432,8,1234.5,0.5\n"
          "function,num_times,n_elements,sizeof,max_GB_per_sec,min_runtime,max_runtime,avg_runtime\n"
          + "".join(f"{k},100,33554432,8,{bw},{t},0.000281,0.000270102\n"
                    for k, bw, t in (("Copy", "2008.17", "0.000267375"), ("Mul", "2008.17", "0.000267375"),
                                     ("Add", "3012.25", "0.000267375"), ("Triad", "3012.25", "0.000267375"),
                                     ("Dot", "2008.17", "0.000267375")))
          + "FAILED validation of a[7]: 0.3 (is) != 0.2 (should), diff=0.1 > 2.2e-14 (largest=0.3, max_rel=2.2e-14)\n")
    (parsed,) = parse_babelstream_csv(v5)
    assert parsed.device_name == "NVIDIA H100 80GB HBM3" and parsed.failed == ("a",)
    assert [(r.function, r.is_phase) for r in parsed.rows][:2] == [("Init", True), ("Copy", False)]
    assert parsed.rows[4].bandwidth_bytes_per_s.value == pytest.approx(3012.25e9)


def test_babelstream_table_real_output() -> None:
    (out,) = parse_babelstream_text(fixture("babelstream_rtx2060_alpaka.txt"))
    assert out.device_name == "NVIDIA GeForce RTX 2060" and out.model == "alpaka/LLAMA" and out.version == "4.0"
    assert [r.function for r in out.rows] == ["Copy", "Mul", "Add", "Triad", "Dot"]
    assert {(r.n_elements, r.sizeof, r.num_times) for r in out.rows} == {(1 << 25, 8, 100)}
    triad = out.rows[3]
    assert triad.line == 13 and triad.bandwidth_bytes_per_s.value == pytest.approx(304093.569e6)
    assert (triad.min_s.value, triad.avg_s, triad.max_s) == (0.00265, Printed(0.00285, 5e-6), Printed(0.00349, 5e-6))
    assert out.failed == () and "2^25" in out.notes[0] and "line 6" in out.notes[0] and "up to 0.032%" in out.notes[0]


def test_babelstream_table_element_count() -> None:
    rng = random.Random(3)
    k = rng.randrange(12, 31)
    for sizeof, unit in ((8, 1e6), (4, 2.0**20)):
        shown = round((1 << k) * sizeof / unit, 1)
        found = element_count(Printed(shown, 0.05), unit, sizeof)
        assert found is not None and found.n == 1 << k and found.power_of_two
    text = fixture("babelstream_rtx2060_alpaka.txt").replace("268.4 MB (=0.3 GB)", "4.0 MB (=0.0 GB)")
    with pytest.raises(PeerFormatError) as caught:  # 500,000 doubles to +-1.25 %: no power of two, too loose
        parse_babelstream_text(text)
    assert caught.value.line == 6 and "element count is unknown" in caught.value.what
    (counted,) = parse_babelstream_text(text.replace("Precision:", "Number of elements: 500000\nPrecision:"))
    assert {r.n_elements for r in counted.rows} == {500000} and counted.notes == ()
    with pytest.raises(PeerFormatError, match="Precision"):
        parse_babelstream_text(text.replace("Precision: double\n", ""))


def test_babelstream_checks_of_every_version() -> None:
    text = fixture("babelstream_rtx2060_alpaka.txt")
    v4 = text.replace("Function ", "Validation failed on sum. Error 3.54711e-06\nSum was 39.79 but should be 39.8\n"
                      "Validation failed on b[]. Average error 0.25\nFunction ", 1)
    assert parse_babelstream_text(v4)[0].failed == ("sum", "b")
    fortran = text.replace("Function ", "Validation failed on C. Average error   0.1E+01\nFunction ", 1)
    assert parse_babelstream_text(fortran)[0].failed == ("c",)


@pytest.mark.parametrize("name,expected", [
    ("nccl_tests_h100_2nodes.txt", "nccl-tests or rccl-tests output"),
    ("rccl_tests_allreduce.jsonl", "rccl-tests JSON"),
    ("nvbench_v1_gv100.json", "nvbench JSON"),
    ("nvbench_2021_gv100.json", "nvbench JSON"),
    ("nvbench_2021_list_mx150.json", "nvbench JSON"),
    ("babelstream_rtx2060_transcribed.csv", "BabelStream CSV"),
    ("babelstream_rtx2060_alpaka.txt", "BabelStream output"),
])
def test_recognised_by_content_under_any_name(tmp_path: Path, name: str, expected: str) -> None:
    renamed = tmp_path / "results.dat"
    renamed.write_bytes((FIXTURES / name).read_bytes())
    assert recognise(renamed).name == expected


def test_unrecognised_files_say_why(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("bus bandwidth looked fine yesterday\n")
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)))
    (tmp_path / "empty.log").write_text("")
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps(nccl_json_document([100.0]))[:300])
    assert "none of the formats rooflab reads (nccl-tests JSON," in recognise(tmp_path / "notes.txt").why
    assert "not UTF-8" in recognise(tmp_path / "blob.bin").why
    assert recognise(tmp_path / "empty.log").why == "empty"
    assert recognise(cut).name == "nccl-tests JSON"  # recognised, so that its import says where it breaks


def test_nvbench_outputs_it_does_not_read_name_the_one_it_does(tmp_path: Path) -> None:
    # the first lines of nvbench's --csv and markdown outputs (R100001/Programming-Massively-Parallel-Processors,
    # Performance-Tests-NvBench/histogram/BenchResults/BenchResults2060.csv and .md)
    csv_path, md_path = tmp_path / "bench.csv", tmp_path / "bench.md"
    csv_path.write_text("Benchmark,Device,Device Name,Array Size (pow2),Array Size,Num Bins (pow2),Num Bins,"
                        "Num Threads (pow2),Num Threads,Skipped,Num Elements,Memory Reads (bytes),"
                        "Memory Writes (bytes),Samples,CPU Time (sec),Noise,GPU Time (sec),Noise,Elem/s (elem/sec),"
                        "GlobalMem BW (bytes/sec),BWUtil,Samples,Batch GPU (sec)\n")
    md_path.write_text("# Devices\n\n## [0] `NVIDIA GeForce RTX 2060`\n* SM Version: 750 (PTX Version: 520)\n\n# Log\n"
                       "\n```\nRun:  [1/350] Simple Histogram [Device=0 Array Size=2^2]\nPass: Cold: 0.007360ms GPU, "
                       "0.026891ms CPU, 0.50s total GPU, 7.81s total wall, 67932x \n```\n\n# Benchmark Results\n\n"
                       "| Array Size | Samples |  CPU Time  |  Noise  |  GPU Time  | Noise  |\n")
    for path, kind in ((csv_path, "CSV output (--csv)"), (md_path, "markdown output")):
        found = recognise(path)
        assert found.format is None and f"nvbench's {kind}" in found.why and "--json FILE" in found.why


def test_a_babelstream_csv_without_its_dot_row_or_with_an_average_below_its_fastest_is_refused() -> None:
    lines = fixture("babelstream_rtx2060_transcribed.csv").splitlines()
    with pytest.raises(PeerFormatError) as caught:
        parse_babelstream_csv("\n".join(lines[:-1]) + "\n")
    assert caught.value.line == len(lines) - 1 and "the output is cut short after this row" in caught.value.what
    with pytest.raises(PeerFormatError) as caught:  # an average below its fastest run: altered
        parse_babelstream_csv("\n".join([*lines[:-1], lines[-1].replace(",0.00177", ",0.00150")]))
    assert caught.value.line == len(lines) and "average time 0.0015 s is below its fastest" in caught.value.what
