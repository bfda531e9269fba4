"""The write-back pass read: the call's kernels, then two sweeps; what cannot be read so is refused."""
from __future__ import annotations

from pathlib import Path

import pytest

from rooflab.runners.counters import writeback
from rooflab.runners.counters.metrics import DRAM_READ, DRAM_WRITE
from rooflab.runners.counters.ncu_csv import parse_raw

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ncu"


def _rows(*pairs: tuple[float | None, float | None]) -> list[dict[str, float | None]]:
    return [{DRAM_READ: r, DRAM_WRITE: w} for r, w in pairs]


def test_the_call_then_two_sweeps_give_its_reads_and_its_writes_with_the_write_back() -> None:
    text = (FIXTURES / "cos_cos_eager_bfloat16_writeback.csv").read_text()
    reading = parse_raw(text, writeback.METRICS)
    got = writeback.split_pass(reading.per_kernel, 2, writeback.replay_passes(text))
    assert got == writeback.WriteBack(dram_read_bytes=2_099_200 + 1_024,
                                      dram_write_bytes=2 * 1_048_576 + 2_097_664 - 512,
                                      caught_write_back_bytes=2_097_664 - 512, sweep_own_write_bytes=512)


def test_a_sweep_that_writes_more_alone_catches_nothing_rather_than_a_negative_write_back() -> None:
    got = writeback.split_pass(_rows((100.0, 50.0), (9e6, 400.0), (9e6, 700.0)), 1)
    assert got.caught_write_back_bytes == 0 and got.dram_write_bytes == 50


@pytest.mark.parametrize(("rows", "kernels", "passes", "message"), [
    (_rows((1.0, 2.0), (3.0, 4.0)), 1, 1, "2 kernels profiled: expected the call's 1 then two sweeps"),
    (_rows((1.0, 2.0), (3.0, 4.0), (3.0, 4.0), (3.0, 4.0)), 1, 1, "4 kernels profiled"),
    (_rows((1.0, 2.0), (3.0, 4.0), (3.0, 4.0)), 0, 1, "expected the call's 0"),
    (_rows((1.0, 2.0), (3.0, None), (3.0, 4.0)), 1, 1, "dram__bytes_write.sum not reported for the first sweep"),
    (_rows((None, 2.0), (3.0, 4.0), (3.0, 4.0)), 1, 1, "dram__bytes_read.sum not reported for the call"),
    (_rows((1.0, 2.0), (3.0, 4.0), (3.0, 4.0)), 1, 2, "ncu replayed a kernel 2 times"),
])
def test_a_pass_that_is_not_the_call_then_two_sweeps_is_refused(rows: list[dict[str, float | None]], kernels: int,
                                                                 passes: int, message: str) -> None:
    with pytest.raises(writeback.WriteBackError, match=message):
        writeback.split_pass(rows, kernels, passes)


def test_ncu_saying_it_replayed_a_kernel_is_read_from_its_output() -> None:
    replayed = (FIXTURES / "copy_float32_writeback_replayed.csv").read_text()
    assert writeback.replay_passes(replayed) == 2
    assert writeback.replay_passes((FIXTURES / "copy_float32_writeback.csv").read_text()) == 1
    assert writeback.replay_passes("==PROF== Connected to process 7\n") == 1  # says nothing: one


def test_the_sweep_is_four_l2s_and_a_device_without_an_l2_size_is_refused() -> None:
    assert writeback.sweep_bytes(50 << 20) == 200 << 20
    with pytest.raises(writeback.WriteBackError, match="no L2 size"):
        writeback.sweep_bytes(0)
