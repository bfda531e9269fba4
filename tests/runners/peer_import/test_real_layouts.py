"""The layouts that published outputs showed and `rooflab import` mis-read (issue 45), each written here by
formats.py with the tool's own printf formats and arithmetic from fresh random figures (never a copy of
a published file): several BabelStream runs in one file, a count given with `-s`, 2020's alltoall and
all_gather, rccl-tests' version lines, a 72-rank log that kept one rank's device line, and tables cut
short. One folder holds them all and is imported once (in process); each test reads its own file's
report and the results stored from it."""
from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from rooflab.db.query import results
from rooflab.runners.cli.app import app
from tests.runners.peer_import import formats

runner = CliRunner()
RNG = random.Random(45)
SIZES = [1 << k for k in range(20, 31, 2)]  # 1 MiB .. 1 GiB


def _times(rng: random.Random, gbps: float) -> list[tuple[float, float]]:
    """Out-of-place and in-place times (us) of each size: 20 us of latency, then about `gbps`."""
    return [(20.0 + s / (gbps * 1e3) * rng.uniform(0.97, 1.03), 20.0 + s / (gbps * 1e3) * rng.uniform(0.97, 1.03))
            for s in SIZES]


def _stream_runs(rng: random.Random) -> tuple[str, dict[int, float]]:
    """Three BabelStream runs of three sizes, one after the other as a batch script writes them; each
    size's Triad bandwidth as printed (MB/s)."""
    lines, triads = [], {}
    for k in (25, 27, 28):
        n = 1 << k
        times = formats.stream_times(n, rng.uniform(900.0, 1600.0))
        lines += formats.babelstream_run(n, times)
        triads[n] = float(f"{1e-6 * 3 * 8 * n / times['Triad']:.3f}")
    return "\n".join(lines) + "\n", triads


def _rccl_versions(rng: random.Random) -> str:
    """An rccl-tests 2.17.9 all_reduce: its `rccl-tests version` line and an `RCCL version :` block."""
    text = formats.all_reduce_test(("mi-a", "mi-b"), slow=rng.uniform(0.5, 1.5)).replace(
        "NVIDIA H100 80GB HBM3", "AMD Instinct MI355X")
    text = text.replace("# nccl-tests version 2.18.3 nccl-headers=22807 nccl-library=22807",
                        "# rccl-tests version 2.17.9-develop:2596ca5f71 rccl-headers=22803 rccl-library=22707")
    return text.replace("#\n#  ", "RCCL version : 2.27.7-HEAD:96a25b5\nHIP version  : 7.2.53211-671d39a71e\n#\n#  ", 1)


def _one_device_line(rng: random.Random) -> str:
    """A 72-rank all_reduce (18 nodes of 4 GPUs) of which the log kept rank 0's device line only."""
    hosts = [f"gb200-{i // 4:02d}" for i in range(72)]
    text = formats.all_reduce_test(hosts, slow=rng.uniform(0.04, 0.06)).replace("NVIDIA H100 80GB HBM3",
                                                                                 "NVIDIA GB200")
    return "\n".join(line for line in text.splitlines() if not re.match(r"^#\s+Rank\s+[1-9]", line)) + "\n"


@dataclass(frozen=True)
class Imported:
    """The folder's import: its exit code, each file's report, the stored results."""

    code: int
    reports: dict[str, dict[str, Any]]
    stored: pd.DataFrame
    stdout: str
    triads: dict[int, float]

    def of(self, name: str) -> pd.DataFrame:
        return self.stored[self.stored["run_id"].isin([r["run_id"] for r in self.reports[name]["runs"]])]


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Imported]:
    folder = tmp_path_factory.mktemp("layouts")
    streams, triads = _stream_runs(RNG)
    texts = {
        "stream_runs.txt": streams,
        "stream_count.txt": "\n".join(formats.babelstream_run(100_000_000, formats.stream_times(
            100_000_000, RNG.uniform(900.0, 1600.0)))) + "\n",
        "alltoall_2020.log": formats.old_table("alltoall", 8, SIZES, _times(RNG, 250.0), redop=""),
        "allgather_2020.log": formats.old_table("all_gather", 8, SIZES, _times(RNG, 250.0), redop=None,
                                                noise_after=2),
        "rccl_versions.log": _rccl_versions(RNG),
        "gb200_72.log": _one_device_line(RNG),
    }
    lines = streams.splitlines()
    triad = max(i for i, line in enumerate(lines) if line.startswith("Triad"))
    texts["stream_cut_in_a_row.txt"] = "\n".join(lines[:triad] + [lines[triad][:24]]) + "\n"
    texts["stream_without_dot.txt"] = "\n".join(lines[:triad + 1]) + "\n"
    nccl = formats.all_reduce_test(("a", "b"), slow=RNG.uniform(0.8, 1.2))
    texts["nccl_cut_in_the_footer.log"] = nccl[:nccl.index("# Avg bus bandwidth")]
    for name, text in texts.items():
        (folder / name).write_text(text)
    db = f"sqlite:///{folder.parent / 'layouts.db'}"
    result = runner.invoke(app, ["import", str(folder), "--db", db, "--json", "--measured-at", "2026-05-01T06:00"])
    reports = {Path(r["file"]).name: r for r in json.loads(result.stdout)["files"]}
    stored = results(db)
    stored["params"] = stored["params"].map(json.loads)
    yield Imported(result.exit_code, reports, stored, result.stdout + result.stderr, triads)


def _gbps(frame: pd.DataFrame, op: str, n: int) -> float:
    (value,) = frame[(frame["op"] == op) & (frame["params"].map(lambda p: p["n"]) == n)]["gbps"]
    return float(value)


def test_several_babelstream_runs_in_one_file_are_each_their_own_size(imported: Imported) -> None:
    stored = imported.of("stream_runs.txt")
    assert imported.reports["stream_runs.txt"]["outcome"] == "stored" and len(stored) == 15
    assert sorted(stored["params"].map(lambda p: p["n"]).unique()) == sorted(imported.triads)
    for n, printed in imported.triads.items():  # each size's Triad: the rate it printed
        assert _gbps(stored, "stream_triad", n) == pytest.approx(printed / 1e3, rel=1e-12)
    assert stored["gbps"].max() <= max(imported.triads.values()) / 1e3 * (1 + 1e-12)  # nothing above what it printed


def test_a_babelstream_count_given_with_s_is_read_and_its_note_says_how_closely(imported: Imported) -> None:
    stored = imported.of("stream_count.txt")
    assert len(stored) == 5 and set(stored["params"].map(lambda p: p["n"])) == {100_000_000}
    (note,) = imported.reports["stream_count.txt"]["notes"]
    assert "`Array size: 800.0 MB`" in note and "99993750 to 100006250" in note and "up to 0.006%" in note


def test_the_2020_alltoall_with_a_blank_redop_column_is_read(imported: Imported) -> None:
    stored = imported.of("alltoall_2020.log")
    assert imported.reports["alltoall_2020.log"]["outcome"] == "stored" and len(stored) == 2 * len(SIZES)
    assert set(stored["op"]) == {"all_to_all"} and set(stored["params"].map(lambda p: p["ranks"])) == {8}
    assert "reduce_op" not in stored["params"].iloc[0]


def test_the_2020_all_gather_without_a_redop_column_is_read(imported: Imported) -> None:
    stored = imported.of("allgather_2020.log")
    assert imported.reports["allgather_2020.log"]["outcome"] == "stored" and len(stored) == 2 * len(SIZES)
    assert set(stored["op"]) == {"all_gather"} and set(stored["status"]) == {"ok"}


def test_rccl_tests_version_lines_give_the_tool_and_library_versions(imported: Imported) -> None:
    stored = imported.of("rccl_versions.log")
    assert set(stored["tool"]) == {"rccl-tests"} and set(stored["tool_version"]) == {"2.17.9-develop:2596ca5f71"}
    (run,) = imported.reports["rccl_versions.log"]["runs"]
    assert run["library_version"] == "2.27.7"  # the collectives rows' comm_version


def test_a_log_that_kept_one_of_72_device_lines_says_the_nodes_are_unknown(imported: Imported) -> None:
    (run,) = imported.reports["gb200_72.log"]["runs"]
    assert run["ranks"] == [72] and run["nodes"] is None and run["hosts"] == ["gb200-00"]


@pytest.mark.parametrize("name,what", [
    ("stream_cut_in_a_row.txt", "a table row of 2 fields where BabelStream prints 5"),
    ("stream_without_dot.txt", "the output is cut short after this row"),
    ("nccl_cut_in_the_footer.log", "the footer stops before its `# Avg bus bandwidth` line"),
])
def test_a_table_cut_short_is_refused_and_nothing_of_it_stored(imported: Imported, name: str, what: str) -> None:
    report = imported.reports[name]
    assert imported.code == 2 and report["outcome"] == "failed" and what in report["why"]
    assert report["runs"] == [] and re.search(rf"{re.escape(name)}: line \d+: ", imported.stdout)


def test_imported_babelstream_results_carry_the_split_its_kernels_imply(imported: Imported) -> None:
    """BabelStream's Copy reads one array and writes one, Mul and Add and Triad read what they name and
    write one, Dot reads two and writes nothing (issue 49); a collective's bytes are link bytes: unsplit."""
    stored = imported.of("stream_runs.txt")
    n = min(imported.triads)
    arrays = {"stream_copy": (1, 1), "stream_scale": (1, 1), "stream_add": (2, 1), "stream_triad": (2, 1),
              "stream_dot": (2, 0)}
    for op, (read, written) in arrays.items():
        (row,) = stored[(stored["op"] == op) & (stored["params"].map(lambda p: p["n"]) == n)].itertuples()
        assert (row.bytes_read, row.bytes_written) == (read * 8 * n, written * 8 * n), op
        assert row.bytes_read + row.bytes_written == row.bytes
    collective = imported.of("alltoall_2020.log")
    assert collective["bytes_read"].isna().all() and collective["bytes_written"].isna().all()
