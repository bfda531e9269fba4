"""nccl-tests' stdout read into typed rows: a committed real output (fixtures/SOURCES.md), the layouts
of other versions and options written with the tool's own printf formats (formats.py), and planted
faults that must be caught with their line."""
from __future__ import annotations

import random

import pytest

from rooflab.runners.peer_import.errors import PeerFormatError
from rooflab.runners.peer_import.nccl_tests import library_version, parse_nccl_tests_text
from rooflab.vocab import Tool
from tests.runners.peer_import import formats
from tests.runners.peer_import.formats import Half, Rank
from tests.runners.peer_import.planting import fixture, float_str, replace_line, row_line


def test_the_real_two_node_output_reads_whole() -> None:
    (test,) = parse_nccl_tests_text(fixture("nccl_tests_h100_2nodes.txt"))
    assert test.tool == Tool.NCCL_TESTS
    assert test.program == "all_reduce_perf"  # named by the mpirun line above the table
    assert [d.rank for d in test.devices] == list(range(16))
    assert {d.host for d in test.devices} == {"ztan-mig-235z", "ztan-mig-gq73"}
    assert test.devices[9].bus_id == "0000:05:00" and test.devices[9].gpu_name == "NVIDIA H100 80GB HBM3"
    assert test.settings.iters == 20 and test.settings.warmup_iters == 5
    assert len(test.rows) == 31 and test.rows[0].size_bytes == 8 and test.rows[-1].size_bytes == 8589934592
    last = test.rows[-1]
    assert last.count == 2147483648 and last.dtype == "float" and last.redop == "sum" and last.root == -1
    assert last.out_of_place is not None and last.in_place is not None
    assert last.out_of_place.time_us.value == 47535 and last.out_of_place.busbw_gbps.value == 338.82
    assert last.in_place.algbw_gbps.value == 179.92 and last.in_place.wrong == 0
    assert test.avg_busbw_gbps is not None and test.avg_busbw_gbps.value == 70.742


def test_the_real_efa_output_two_hosts_tagged_with_an_old_header() -> None:
    (test,) = parse_nccl_tests_text(fixture("nccl_tests_t4_efa_2nodes_tagged.txt"))
    assert test.tool_version is None and test.library_version == "2.12.7+cuda11.4"  # an `NCCL version` line only
    assert [(d.rank, d.host, d.bus_id, d.gpu_name) for d in test.devices] == [
        (0, "test-nccl-efa-worker-0", "0x35", "Tesla T4"), (1, "test-nccl-efa-worker-1", "0xf5", "Tesla T4")]
    assert test.settings.iters == 100 and test.settings.min_bytes == 1
    assert [r.size_bytes for r in test.rows[:3]] == [0, 0, 4]  # 1 B and 2 B of float both print as 0 B
    assert len(test.rows) == 31 and test.rows[-1].count == 268435456
    assert test.rows[-1].in_place is not None and test.rows[-1].in_place.time_us.value == 344454
    assert test.avg_busbw_gbps is not None and test.avg_busbw_gbps.value == 1.15327


def test_a_settings_line_without_nthread() -> None:
    text = fixture("nccl_tests_h100_2nodes.txt").replace("# nThread 1 nGpus 1 ", "# nGpus(perProc) 1 ")
    (test,) = parse_nccl_tests_text(text)
    assert test.settings.nthreads is None and test.settings.ngpus == 1
    assert test.settings.iters == 20 and test.settings.max_bytes == 8589934592


def test_launcher_prefixes_behind_markdown_indentation() -> None:
    text = fixture("nccl_tests_h100_2nodes.txt")
    indented = "\n".join(f"    [1,0]<stdout>:{line}" if i % 2 else f"      0: {line}"
                         for i, line in enumerate(text.splitlines()))
    (plain,) = parse_nccl_tests_text(text)
    (test,) = parse_nccl_tests_text(indented)
    assert test.rows == plain.rows and test.devices == plain.devices and test.avg_busbw_gbps == plain.avg_busbw_gbps


def test_a_full_header_noise_prefixes_and_a_split_row() -> None:
    lines = formats.all_reduce_test(("a", "b")).splitlines()
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("1048576 "))
    head, tail = lines[at][:56], lines[at][56:]  # nccl-tests printed the row's start, NCCL logged, then the rest
    noisy = [*lines[:at], head, "a:1234:1240 [0] NCCL INFO Channel 00/1 : 0[0] -> 1[1] via P2P/CUMEM",
             "NCCL version 2.28.7+cuda12.9", tail, *lines[at + 1:]]
    tagged = [f"[1,0]<stdout>:{line}" if i % 3 else line for i, line in enumerate(noisy)]
    (test,) = parse_nccl_tests_text("$ mpirun -np 2 ./build/all_reduce_perf -b 1K\n" + "\n".join(tagged))
    assert test.tool_version == "2.18.3" and test.library_version == "2.28.7"
    assert len(test.rows) == 18
    split = next(r for r in test.rows if r.size_bytes == 1 << 20)
    assert split.in_place is not None and split.in_place.time_us.value > 0


def test_several_tests_in_one_file_are_several_tests() -> None:
    text = formats.all_reduce_test(("a", "b")) + "some shell output\n" + formats.all_reduce_test(
        ("c", "d"), program="all_reduce_perf", slow=2.0)
    first, second = parse_nccl_tests_text(text)
    assert {d.host for d in first.devices} == {"a", "b"} and {d.host for d in second.devices} == {"c", "d"}
    assert second.first_line > first.last_line
    assert second.rows[-1].out_of_place is not None and first.rows[-1].out_of_place is not None
    assert second.rows[-1].out_of_place.time_us.value == pytest.approx(2 * first.rows[-1].out_of_place.time_us.value,
                                                                       rel=1e-3)


def test_the_2021_layout_error_column_and_no_root() -> None:
    ranks = [Rank("v100-gpu-1", 0, gpu="Tesla V100-PCIE-16GB"), Rank("v100-gpu-5", 0, gpu="Tesla V100-PCIE-16GB")]
    sizes = [1 << k for k in range(20, 26)]
    table, busbws = [], []
    for size in sizes:  # the 2021 broadcast row: size count type root, then each half's largest error
        row = f"{size:12d}  {size // 4:12d}  {'float':>6s}  {0:6d}"
        for t in (100.0 + size / 1e4, 101.0 + size / 1e4):
            busbw = size / 1e9 / (t * 1e-6)
            busbws.append(float(float_str(busbw, 6)))
            row += f"  {float_str(t, 7)}  {float_str(busbw, 6)}  {float_str(busbw, 6)}  {0.0:5.0e}"
        table.append(row)
    header = ["#       size         count    type    root     time   algbw   busbw  error"
              "     time   algbw   busbw  error"]
    text = "\n".join([*formats.header("broadcast_perf", sizes[0], sizes[-1], version=None),
                      *formats.devices(ranks, old=True), *header, *table, *formats.footer("broadcast_perf", busbws)])
    (test,) = parse_nccl_tests_text(text)
    assert [d.host for d in test.devices] == ["v100-gpu-1", "v100-gpu-5"] and test.devices[1].bus_id == "0x01"
    assert test.rows[0].redop is None and test.rows[0].root == 0
    assert test.rows[0].out_of_place is not None and test.rows[0].out_of_place.wrong_is_delta


def test_cputime_timestamps_and_per_iteration_columns() -> None:
    sizes = [1 << 20, 1 << 22]
    stats = (90.0, 130.0, 129.0, 7.5)
    halves = [(Half(100.0, per_iteration=stats), Half(101.0, wrong="N/A", per_iteration=stats)) for _ in sizes]
    stamps = ["2026-04-19 11:13:22", "2026-04-19 11:13:23"]
    table, busbws = formats.rows("all_reduce", "float", 4, 2, sizes, halves, stamps=stamps)
    text = "\n".join([*formats.header("all_reduce_perf", sizes[0], sizes[-1], per_iteration=True),
                      *formats.devices([Rank("a", 0), Rank("b", 0)]),
                      *formats.columns(time="cputime", timestamp=True, per_iteration=True), *table,
                      *formats.footer("all_reduce_perf", busbws)])
    (test,) = parse_nccl_tests_text(text)
    assert test.time_is_cputime
    row = test.rows[1]
    assert row.timestamp == "2026-04-19 11:13:23"
    assert row.in_place is not None and row.in_place.wrong is None  # N/A: not checked
    assert row.in_place.per_iteration is not None and row.in_place.per_iteration.cv_pct is not None
    assert row.in_place.per_iteration.cv_pct.value == 7.5


@pytest.mark.parametrize("code,version", [(22602, "2.26.2"), (23004, "2.30.4"), (2804, "2.8.4")])
def test_library_version_codes(code: int, version: str) -> None:
    assert library_version(code) == version


def test_a_table_cut_short_in_a_row_names_its_line() -> None:
    text = fixture("nccl_tests_h100_2nodes.txt")
    line = row_line(text, 1048576)
    cut = "\n".join(text.splitlines()[:line - 1] + [text.splitlines()[line - 1][:70]])
    with pytest.raises(PeerFormatError) as caught:
        parse_nccl_tests_text(cut)
    assert caught.value.line == line and "cut short" in caught.value.what


def test_a_table_without_its_footer_is_cut_short() -> None:
    with pytest.raises(PeerFormatError) as caught:
        parse_nccl_tests_text(fixture("nccl_tests_sendrecv_a100_no_footer.txt"))  # a real paste without its footer
    assert caught.value.line == 9 and "footer" in caught.value.what


def test_a_row_lost_from_the_middle_breaks_the_footer_average() -> None:
    text = fixture("nccl_tests_h100_2nodes.txt")
    lines = text.splitlines()
    gone = row_line(text, random.Random(7).choice([1 << k for k in range(20, 31)]))
    with pytest.raises(PeerFormatError) as caught:
        parse_nccl_tests_text("\n".join(lines[:gone - 1] + lines[gone:]))
    assert "average" in caught.value.what and caught.value.line == len(lines) - 1


def test_an_edited_busbw_is_read_as_printed() -> None:
    text = fixture("nccl_tests_h100_2nodes.txt")
    line = row_line(text, 268435456)
    edited = replace_line(text, line, "213.19", "223.19")  # one busbw, the footer's average left alone
    edited = edited.replace("70.742", f"{70.742 + 10 / 62:g}")  # ... or the average catches it first
    (test,) = parse_nccl_tests_text(edited)
    row = next(r for r in test.rows if r.size_bytes == 268435456)
    assert row.out_of_place is not None and row.out_of_place.busbw_gbps.value == 223.19


def test_text_with_no_table_holds_no_test() -> None:
    assert parse_nccl_tests_text("# nccl-tests version 2.18.3\nbash: all_reduce_perf: command not found\n") == []
