"""Parsed rows as rooflab results: named as rooflab names its own cases, bytes and FLOPs from suite's
models, the tool's printed busbw and bandwidths re-derived from what is stored and held to their rounding
(agreement.settle), statuses from #wrong and the footer, the tool and its version recorded, one run per
file (and per repetition)."""
from __future__ import annotations

import json
import random
import re
import struct
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rooflab.db.measurement_columns import gbps_of
from rooflab.record import MeasurementRecord
from rooflab.runners.peer_import.agreement import settle
from rooflab.runners.peer_import.babelstream import parse_babelstream_csv
from rooflab.runners.peer_import.babelstream_text import parse_babelstream_text
from rooflab.runners.peer_import.collective_import import convert_nccl_tests
from rooflab.runners.peer_import.errors import PeerFormatError
from rooflab.runners.peer_import.nccl_json import parse_nccl_json
from rooflab.runners.peer_import.nccl_tests import parse_nccl_tests_text
from rooflab.runners.peer_import.nvbench import parse_nvbench_json
from rooflab.runners.peer_import.nvbench_results import convert_nvbench
from rooflab.runners.peer_import.results import Conversion, Source, TimeSource, When
from rooflab.runners.peer_import.stream_results import convert_babelstream
from rooflab.suite.ops.registry import get_op
from rooflab.vocab import CacheMode, CollectiveMode, ResultStatus, Tool
from tests.runners.peer_import import formats
from tests.runners.peer_import.planting import fixture, replace_line, row_line
from tests.runners.peer_import.test_peer_files import nccl_json_document

WHEN = When(datetime(2026, 5, 1, 12, 0, tzinfo=UTC), TimeSource.OPTION)
SOURCE = Source(name="x.log", when=WHEN)


def nccl(text: str) -> Conversion:
    return settle(convert_nccl_tests(parse_nccl_tests_text(text), SOURCE))


def stream(text: str, *, table: bool = False, device_name: str | None = None) -> Conversion:
    parsed = parse_babelstream_text(text) if table else parse_babelstream_csv(text)
    return settle(convert_babelstream(parsed, Source(name="b.txt", when=WHEN, device_name=device_name)))


def results(conversion: Conversion) -> list[MeasurementRecord]:
    return [m for r in conversion.runs for m in r.measurements]


def test_every_real_row_recomputes_to_its_printed_busbw() -> None:
    text = fixture("nccl_tests_h100_2nodes.txt")
    (test,) = parse_nccl_tests_text(text)
    conversion = nccl(text)
    assert conversion.left_out == []
    found = results(conversion)
    assert len(found) == 62
    printed = {(r.size_bytes, inplace): half for r in test.rows
               for inplace, half in ((False, r.out_of_place), (True, r.in_place)) if half is not None}
    for m in found:
        params = m.identity.case.params
        half = printed[(int(params["n"]) * 4, params.get("inplace", True) is not False)]
        assert m.median_ms == pytest.approx(half.time_us.value / 1000)
        busbw = gbps_of(m)
        assert busbw is not None
        # within the printed rounding of busbw and of the time it comes from
        assert abs(busbw - half.busbw_gbps.value) <= 0.005 + busbw * half.time_us.half_ulp / half.time_us.value


def test_names_params_and_models_are_rooflabs() -> None:
    found = results(nccl(fixture("nccl_tests_h100_2nodes.txt")))
    big = [m for m in found if m.identity.case.params["n"] == 268435456]
    keys = sorted(m.identity.case.case_key for m in big)
    assert keys == ["all_reduce.v1:nccl:float32:hot:launch:inplace=false,n=268435456,ranks=16,reduce_op=sum",
                    "all_reduce.v1:nccl:float32:hot:launch:n=268435456,ranks=16,reduce_op=sum"]
    op = get_op("all_reduce")
    for m in big:
        params = {k: v for k, v in m.identity.case.params.items() if k != "inplace"}
        assert m.work.bytes == op.bytes(params, "float32") and m.work.flops == op.flops(params, "float32")
        assert m.ranks == 16 and m.method.tool == Tool.NCCL_TESTS
        assert m.method.collective_mode == CollectiveMode.STREAM and m.method.cache == CacheMode.HOT
        assert m.method.launches_per_sample == 20
        assert m.collective is not None and len(m.collective.rank_devices) == 16
        assert m.identity.device_uuid == "ztan-mig-235z:0000:04:00"
        assert m.identity.measured_at == WHEN.at


def test_the_device_identity_holds_the_tool() -> None:
    conversion = nccl(fixture("nccl_tests_h100_2nodes.txt"))
    (env,) = conversion.runs[0].environments
    assert env.device_name == "NVIDIA H100 80GB HBM3" and env.identity["tool"] == Tool.NCCL_TESTS
    assert env.info["hosts"] == ["ztan-mig-235z", "ztan-mig-gq73"] and env.info["nodes"] == 2
    rccl = nccl(fixture("nccl_tests_h100_2nodes.txt").replace(
        "# nThread", "rccl-tests: Version develop:83d38d9\n# nThread"))
    assert rccl.runs[0].environments[0].device_fingerprint != env.device_fingerprint


def test_a_busbw_beyond_its_rounding_refuses_the_file_unless_the_row_failed() -> None:
    text = fixture("nccl_tests_h100_2nodes.txt")
    line = row_line(text, 268435456)
    edited = replace_line(text, line, "213.19", "223.19").replace("70.742", f"{70.742 + 10 / 62:g}")
    with pytest.raises(PeerFormatError) as caught:
        nccl(edited)
    assert caught.value.line == line and "busbw printed 223.19 GB/s" in caught.value.what
    assert "give 213.18" in caught.value.what and "the file is refused" in caught.value.what
    # the same figure on a row nccl-tests itself found wrong: stored with that status, the disagreement noted
    failed = replace_line(edited, line, "223.19      0", "223.19      5")
    (m,) = [m for m in results(nccl(failed)) if m.identity.case.params["n"] == 67108864
            and m.identity.case.params.get("inplace") is False]
    assert m.status == ResultStatus.INCORRECT and m.error is not None and "busbw printed 223.19" in m.error
    assert m.median_ms == pytest.approx(2.3609)  # the printed time is kept, not replaced


def test_wrong_elements_and_a_failed_footer_make_results_incorrect() -> None:
    text = fixture("nccl_tests_h100_2nodes.txt")
    line = row_line(text, 4194304)
    wrong = replace_line(text, line, "22.05      0", "22.05     12").replace(
        "Out of bounds values : 0 OK", "Out of bounds values : 12 FAILED")
    found = results(nccl(wrong))
    bad = [m for m in found if m.status == ResultStatus.INCORRECT]
    assert len(bad) == 1 and bad[0].identity.case.params["n"] == 1048576 and "12 wrong" in (bad[0].error or "")
    footer_only = results(nccl(text.replace("Out of bounds values : 0 OK", "Out of bounds values : 3 FAILED")))
    assert {m.status for m in footer_only} == {ResultStatus.INCORRECT}


def test_the_same_test_twice_in_one_file_is_two_runs_in_file_order() -> None:
    text = formats.all_reduce_test(("a", "b")) + formats.all_reduce_test(("a", "b"), slow=1.3)
    conversion = nccl(text)
    first, second = conversion.runs
    assert second.run.run_id == first.run.run_id + "-02"
    assert len(first.measurements) == len(second.measurements) == 36


def test_a_size_printed_twice_in_a_sweep_is_one_run_and_its_rows_match_the_print() -> None:
    text = fixture("nccl_tests_t4_efa_2nodes_tagged.txt")  # rows of 0 B twice: 1 B and 2 B rounded down
    (test,) = parse_nccl_tests_text(text)
    conversion = nccl(text)
    (run,) = conversion.runs
    assert len(run.measurements) == 60
    (why,) = conversion.left_out
    assert why == (f"line {test.rows[1].line}: size 0 B again right after line {test.rows[0].line} "
                   "(nccl-tests printed two requested sizes rounded down to one): the first row is kept")
    printed = {(r.count, inplace): half for r in test.rows[::-1]
               for inplace, half in ((False, r.out_of_place), (True, r.in_place)) if half is not None}
    for m in run.measurements:
        params = m.identity.case.params
        half = printed[(params["n"], params.get("inplace", True))]
        assert m.median_ms == pytest.approx(half.time_us.value / 1000) and m.ranks == 2
        assert abs((gbps_of(m) or 0.0) - half.busbw_gbps.value) <= 0.005 + half.busbw_gbps.value * 1e-3
    assert run.run.host == "test-nccl-efa-worker-0, test-nccl-efa-worker-1"


def test_repeated_sizes_of_n_cycles_are_runs() -> None:
    one_size = nccl(formats.all_reduce_test(("a", "b"), sizes=[1 << 20] * 3))  # -N 3 on one size
    assert [len(r.measurements) for r in one_size.runs] == [2, 2, 2] and one_size.left_out == []
    sweep = [1 << k for k in range(10, 14)]
    cycles = nccl(formats.all_reduce_test(("a", "b"), sizes=sweep + sweep))  # -N 2 over a sweep
    assert [len(r.measurements) for r in cycles.runs] == [8, 8] and cycles.left_out == []


def _some_device_lines(text: str, kept: set[int]) -> str:
    """`text` with only the `#  Rank R` lines of the ranks in `kept` (a log filtered down)."""
    rank = re.compile(r"^#\s+Rank\s+(\d+)\b")
    return "\n".join(line for line in text.splitlines()
                     if not (m := rank.match(line)) or int(m.group(1)) in kept) + "\n"


def test_device_lines_of_some_ranks_only_leave_the_world_size_to_the_figures() -> None:
    text = fixture("nccl_tests_h100_2nodes.txt")  # 16 ranks
    kept = random.Random(5).sample(range(1, 15), 2) + [15]
    found = results(nccl(_some_device_lines(text, set(kept))))
    assert len(found) == 62 and {m.ranks for m in found} == {16}
    assert found[0].identity.device_uuid is not None and found[0].identity.device_uuid.startswith("ztan-mig-")
    beyond = _some_device_lines(text, {3, 15}).replace("Rank 15 ", "Rank 20 ")
    (why,) = nccl(beyond).left_out
    assert "device lines name rank 20, but the busbw / algbw say 16 ranks" in why


def test_the_run_id_follows_the_results_not_the_noise() -> None:
    text = formats.all_reduce_test(("a", "b"))
    noisy = "\n".join(f"{line}\nhost:1:2 [0] NCCL INFO noise {random.random()}" for line in text.splitlines())
    assert nccl(text).runs[0].run.run_id == nccl(noisy).runs[0].run.run_id
    assert nccl(text).runs[0].run.run_id != nccl(formats.all_reduce_test(("a", "b"), slow=1.1)).runs[0].run.run_id


def test_an_unmodelled_test_and_a_single_rank_are_left_out_with_the_reason() -> None:
    text = formats.all_reduce_test(("a", "b")).replace("all_reduce_perf", "reduce_perf")
    assert "reduce_perf has no rooflab model" in nccl(text).left_out[0]
    single = formats.all_reduce_test(("a",))
    assert "moves nothing" in nccl(single).left_out[0] and nccl(single).runs == []


def test_json_times_and_per_iteration_samples() -> None:
    rng = random.Random(11)
    times = [rng.uniform(200, 9000) for _ in range(4)]
    test = parse_nccl_json(json.dumps(nccl_json_document(times)))
    found = results(settle(convert_nccl_tests([test], SOURCE)))
    oop = [m for m in found if m.identity.case.params.get("inplace") is False]
    assert [m.median_ms for m in oop] == pytest.approx([t / 1000 for t in times])
    assert all(len(m.samples_ms) == 20 for m in oop) and oop[0].stats is not None
    assert oop[0].stats.rel_ci_halfwidth is not None  # an interval for compare
    assert oop[0].identity.measured_at == datetime(2026, 4, 19, 11, 13, 22, tzinfo=UTC)  # the file's time
    assert oop[0].collective is not None and oop[0].collective.comm_settings == {"NCCL_ALGO": "Ring"}
    assert len(oop[0].collective.rank_medians_ms) == 2


def test_nvbench_states_cold_hot_skipped_and_sidecar_samples(tmp_path: Path) -> None:
    document = json.loads(fixture("nvbench_v1_gv100.json"))
    state = next(s for b in document["benchmarks"] for s in b["states"] if s["name"] == "Device=0 T=F32")
    samples = [random.Random(2).uniform(4e-4, 6e-4) for _ in range(51)]
    (tmp_path / "out.json-bin").mkdir()
    (tmp_path / "out.json-bin" / "0.bin").write_bytes(struct.pack("<51f", *samples))
    state["summaries"].append({"tag": "nv/json/bin:nv/cold/sample_times", "name": "Samples Times File",
                               "data": [{"name": "filename", "type": "string", "value": "out.json-bin/0.bin"},
                                        {"name": "size", "type": "int64", "value": "51"}]})
    conversion = settle(convert_nvbench(parse_nvbench_json(json.dumps(document)),
                                        Source(name="out.json", when=WHEN, folder=tmp_path)))
    found = results(conversion)
    skipped = [m for m in found if m.status == ResultStatus.SKIPPED]
    assert [m.error for m in skipped] == ["Not a conversion: InputType == OutputType."]
    f32 = {m.method.cache: m for m in found if m.identity.case.params.get("T") == "F32"}
    cold, hot = f32[CacheMode.COLD], f32[CacheMode.HOT]
    assert cold.identity.case.dtype == "float32" and cold.identity.case.op == "copy_type_sweep"
    assert len(cold.samples_ms) == 51 and cold.median_ms == pytest.approx(sorted(samples)[25] * 1000, rel=1e-6)
    assert cold.work.bytes > 0 and cold.work.flops == 0 and cold.method.tool == Tool.NVBENCH
    assert hot.median_ms is not None and hot.method.tool_version == "0.1.0"


def test_babelstream_kernels_are_rooflabs_stream_probes() -> None:
    conversion = stream(fixture("babelstream_rtx2060_transcribed.csv"))
    found = {m.identity.case.op: m for m in results(conversion)}
    assert sorted(found) == ["stream_add", "stream_copy", "stream_dot", "stream_scale", "stream_triad"]
    triad = found["stream_triad"]
    assert triad.work.bytes == 3 * 33554432 * 8 and triad.work.flops == 2 * 33554432
    # the figure is the fastest run, which BabelStream's bandwidth is from: its bytes at the printed
    # bandwidth, within the printed 0.00265 s; the average is the mean
    assert triad.stats is not None and triad.stats.min_ms == pytest.approx(2.65, abs=0.005)
    assert triad.median_ms == triad.stats.min_ms == pytest.approx(3 * 8 * 33554432 / 304093.569e6 * 1e3, rel=1e-12)
    assert triad.stats.mean_ms == pytest.approx(2.85) and triad.stats.max_ms == pytest.approx(3.49)
    assert gbps_of(triad) == pytest.approx(304.093569, rel=1e-12) and triad.method.tool == Tool.BABELSTREAM


def test_babelstream_wrong_bandwidth_failed_check_and_missing_device() -> None:
    text = fixture("babelstream_rtx2060_transcribed.csv")
    text += "FAILED validation of sum: 8.5 (is) != 8.6 (should), diff=0.1 > 1e-07 (largest=8.6, max_rel=1e-07)\n"
    statuses = {m.identity.case.op: m.status for m in results(stream(text))}
    assert statuses["stream_dot"] == ResultStatus.INCORRECT and statuses["stream_add"] == ResultStatus.OK
    with pytest.raises(PeerFormatError) as caught:  # a bandwidth its time does not give, on a kernel not failed
        stream(text.replace("304093.569", "404093.569"))
    assert caught.value.line == 6 and "Triad's fastest time printed 2.65 ms" in caught.value.what
    assert "would store for stream_triad.v1:alpaka:float64:hot:launch:n=33554432 is 1.99287 ms" in caught.value.what
    array = text.replace("304093.569", "404093.569").replace("of sum:", "of c[2]:")  # ... every kernel failed
    wrong = results(stream(array))
    assert {m.status for m in wrong} == {ResultStatus.INCORRECT} and "c[]" in (wrong[0].error or "")
    triad = next(m for m in wrong if m.identity.case.op == "stream_triad")
    assert "line 6: Triad of 33554432 elements: Triad's fastest time printed 2.65 ms" in (triad.error or "")
    nameless = "\n".join(fixture("babelstream_rtx2060_transcribed.csv").splitlines()[1:])
    none = stream(nameless)
    assert none.runs == [] and "--device-name" in none.left_out[0]


def test_babelstream_table_and_csv_of_one_run_are_the_same_figures() -> None:
    table = stream(fixture("babelstream_rtx2060_alpaka.txt"), table=True)
    csv = stream(fixture("babelstream_rtx2060_transcribed.csv"))
    assert len(table.notes) == 1 and "2^25" in table.notes[0]

    def figures(conversion: Conversion) -> set[tuple[object, ...]]:
        return {(m.identity.case.op, m.identity.case.dtype, m.identity.case.params["n"], m.median_ms,
                 m.stats.min_ms if m.stats else None, m.work.bytes, m.status) for m in results(conversion)}

    assert len(figures(table)) == 5 and figures(table) == figures(csv)
    assert {m.identity.case.backend for m in results(table)} == {"alpaka/llama"}


def test_nvbench_without_its_sample_files_reads_the_summaries(tmp_path: Path) -> None:
    document = json.loads(fixture("nvbench_v1_gv100.json"))
    state = next(s for b in document["benchmarks"] for s in b["states"] if s["name"] == "Device=0 T=U8")
    state["summaries"].append({"tag": "nv/json/bin:nv/cold/sample_times",
                               "data": [{"name": "filename", "type": "string", "value": "gone-bin/0.bin"}]})
    conversion = settle(convert_nvbench(parse_nvbench_json(json.dumps(document)),
                                        Source(name="out.json", when=WHEN, folder=tmp_path)))
    assert any("not next to the JSON" in n for n in conversion.notes)
    u8 = next(m for m in results(conversion)
              if m.identity.case.params.get("T") == "U8" and m.method.cache == CacheMode.COLD)
    assert u8.samples_ms == () and u8.stats is not None and u8.stats.n_samples > 1
    assert u8.identity.device_uuid == "cuda:0"
