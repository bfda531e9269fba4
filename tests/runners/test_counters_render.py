"""`rooflab counters`' table: each side counted against its model, and a wrong side named on its own."""
from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from rich.console import Console

from rooflab.db.counters import CounterRecord
from rooflab.runners.counters.render import render
from rooflab.runners.counters.session import reading_dict
from rooflab.runners.orchestration.records import case_record
from rooflab.suite.spec import expand, load_spec

MIB = 1 << 20


def test_the_table_shows_each_side_against_its_model_and_names_a_wrong_side() -> None:
    case = next(c for c in expand(load_spec("quick"), "cuda") if c.op == "copy")
    right = CounterRecord(run_id="r", case=case_record(case), device_fingerprint="fp", device_uuid=None, cache="cold",
                          timing_mode="launch", status="ok", measured_at=datetime.now(UTC), model_flops=0,
                          model_bytes=8 * MIB, model_bytes_read=4 * MIB, model_bytes_written=4 * MIB, kernels=1,
                          kernel_ms=0.01, dram_read_bytes=4 * MIB, dram_write_bytes=4 * MIB,
                          caught_write_back_bytes=2 * MIB, sweep_own_write_bytes=512, fp32_flops=0, fp16_flops=0,
                          fp64_flops=0, tensor_instructions=0)
    wrong = replace(right, model_bytes_read=6 * MIB, model_bytes_written=2 * MIB)  # right in total
    console = Console(record=True, width=400)
    render({"run_id": "r", "suite": "quick", "device_name": "H200", "device": "cuda:0", "ncu_version": "2025.1",
            "ncu": "ncu", "readings": [reading_dict(right), reading_dict(wrong)]}, console)
    text = console.export_text()
    lines = [line for line in text.splitlines() if case.case_key in line]
    assert len(lines) == 2
    assert "4.2 / 4.2" in lines[0] and "reads" not in lines[0] and "2.1" in lines[0]  # the caught write-back
    assert "4.2 / 6.3" in lines[1] and "4.2 / 2.1" in lines[1]
    assert "reads -2.1 MB: served_from_l2" in lines[1] and "writes +2.1 MB: extra_traffic" in lines[1]
    assert "1 read or write DRAM bytes away from their model (reads by more than 5%" in text
