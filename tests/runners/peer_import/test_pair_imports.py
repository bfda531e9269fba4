"""nvbandwidth's matrices and nccl-tests' two-rank sendrecv_perf read into the link matrix's pairs
(`sendrecv_pairs`) through the format table: both ends in each pair's params, the copy's direction from
its testcase, each stored rate equal to the printed one; an imported 8-GPU matrix with one slow link is
judged by `rooflab fleet --links`, which names that link and nothing else; a cut or edited matrix, and
a file imported without its buffer size, exit 2 with nothing stored. The fixtures are written here from
the tools' printing code (formats.py; fixtures/SOURCES.md), not captured."""
from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rooflab.db.measurement_columns import gbps_of
from rooflab.runners.cli.app import app
from rooflab.runners.peer_import.agreement import disagreement
from rooflab.runners.peer_import.errors import PeerFormatError
from rooflab.runners.peer_import.files import ImportOptions, read, source_of
from rooflab.runners.peer_import.nvbandwidth import parse_nvbandwidth_text
from rooflab.runners.peer_import.printed import PrintedRate
from rooflab.runners.peer_import.recognise import recognise, recognise_text
from rooflab.runners.peer_import.results import Conversion, Imported
from rooflab.suite.ops.pairs import PAIRS_OP, ends_of
from tests.runners.peer_import import formats
from tests.runners.peer_import.planting import FIXTURES, fixture

runner = CliRunner()
NVB = "nvbandwidth_h100x8_written.txt"
SENDRECV = "nccl_tests_sendrecv_2hosts_written.txt"
WHEN = datetime(2026, 5, 1, tzinfo=UTC)
MIB512 = ImportOptions(measured_at=WHEN, buffer_bytes=512 << 20)
H100 = "NVIDIA H100 80GB HBM3"


def _read(path: Path, options: ImportOptions = MIB512, text: str | None = None) -> Conversion:
    found = recognise(path)
    assert found.format is not None, found.why
    return read(found.format, found.text if text is None else text, source_of(path, options))


def _results(conversion: Conversion) -> list[Imported]:
    return [i for r in conversion.runs for i in r.results]


def _by(items: list[Imported], backend: str) -> dict[tuple[int, int, str], Imported]:
    found = {}
    for item in items:
        case = item.record.identity.case
        if case.backend == backend:
            ends = ends_of(case.params)
            assert ends is not None
            found[(ends.a_rank, ends.b_rank, str(case.params["direction"]))] = item
    return found


def _rate(item: Imported) -> PrintedRate:
    rate = item.printed[0]
    assert isinstance(rate, PrintedRate)
    return rate


def _agrees(item: Imported) -> bool:
    """Every rate printed for `item`, re-derived by the import's rule (agreement.py), and the stored rate
    (S over t, per direction) the printed one over its scale."""
    printed = [p for p in item.printed if isinstance(p, PrintedRate)]
    stored = gbps_of(item.record) or 0.0
    return all(disagreement(item.record, p) is None and abs(stored * p.scale - p.printed_gbps.value) <= 0.0051
               for p in printed)


def test_nvbandwidth_cells_are_pairs_with_both_ends_their_direction_and_the_printed_rate() -> None:
    conversion = _read(FIXTURES / NVB)
    items = _results(conversion)
    assert {i.record.identity.case.op for i in items} == {PAIRS_OP} and len(items) == 56 + 56 + 56
    read_ce, write_ce = _by(items, "ce_read"), _by(items, "ce_write")
    bidir = _by(conversion.runs[0].results, "ce_write")
    # read: row 0 reads from column 1, so 1 sends to 0 (b_to_a); write: row 0 writes to column 1 (a_to_b)
    assert _rate(read_ce[(0, 1, "b_to_a")]).printed_gbps.value == 382.73
    assert _rate(write_ce[(0, 1, "a_to_b")]).printed_gbps.value == 390.03
    assert _rate(read_ce[(0, 1, "a_to_b")]).printed_gbps.value == 382.40  # row 1 column 0
    ends = ends_of(read_ce[(2, 5, "a_to_b")].record.identity.case.params)
    assert ends is not None and (ends.a_host, ends.a_device, ends.b_device) == (
        "gpu-node07", "gpu-node07/00000000.3a.00", "gpu-node07/00000000.ab.00")
    both = bidir[(0, 1, "both")]
    assert _rate(both).scale == 2.0 and _rate(both).printed_gbps.value == 741.20  # the Total: 2 streams
    params = both.record.identity.case.params
    assert (params["n"], params["pairs_at_once"], params["ranks"]) == ((512 << 20) // 4, 1, 8)
    assert all(_agrees(i) for i in items)
    assert [len(r.results) for r in conversion.runs] == [140, 28]  # cell (j, i) of the bidirectional matrix
    assert [line.split(": ", 2)[1] for line in conversion.left_out] == [
        "host_to_device_memcpy_ce", "device_to_device_bidirectional_memcpy_write_ce Write1",
        "device_to_device_bidirectional_memcpy_write_ce Write2", "all_to_one_write_ce"]


def test_a_two_rank_sendrecv_is_the_pair_of_its_two_hosts_and_an_eight_rank_one_is_not() -> None:
    conversion = _read(FIXTURES / SENDRECV, ImportOptions(measured_at=WHEN))
    items = _results(conversion)
    assert len(items) == 9 and all(i.record.identity.case.op == PAIRS_OP for i in items)
    ends = ends_of(items[-1].record.identity.case.params)
    assert ends is not None and (ends.a_host, ends.b_host, ends.a_device) == ("node1", "node2", "node1/0000.18.00")
    assert items[-1].record.identity.case.params["direction"] == "both" and all(_agrees(i) for i in items)
    assert conversion.left_out == ["lines 13-21: the in-place halves: a pair of the link matrix sends from one "
                                   "buffer into another (out of place): left out"]
    eight = recognise_text(fixture("nccl_tests_sendrecv_a100_no_footer.txt"))
    assert eight.name == "nccl-tests or rccl-tests output"  # 8 ranks: send_recv, as before


def test_an_old_layout_and_a_multinode_one_are_read() -> None:
    # v0.4: device lines without a PCI id, one bidirectional matrix (CE: the measured stream, scale 1;
    # SM: both streams' sum, scale 2); v0.1 printed 0.00 on the diagonal, read as no pair
    cells: list[list[float | None]] = [[None if i == j else 48.0 + i for j in range(3)] for i in range(3)]
    old = formats.nvb_output([(H100, None)] * 3, [
        (key, formats.nvb_matrix(key, f"memcpy {engine} GPU(row) <-> GPU(column) bandwidth (GB/s)", cells))
        for key, engine in (("device_to_device_bidirectional_memcpy_read_ce", "CE"),
                            ("device_to_device_bidirectional_memcpy_read_sm", "SM"))], version="v0.4")
    on_n3 = replace(MIB512, host="n3")  # it names no host: --host gives it
    items = _results(_read(FIXTURES / NVB, on_n3, text=old))
    assert {(i.record.identity.case.backend, _rate(i).scale) for i in items} == {("ce_read", 1.0),
                                                                                       ("sm_read", 2.0)}
    ends = ends_of(items[0].record.identity.case.params)
    assert ends is not None and (ends.a_host, ends.a_device) == ("n3", "n3/gpu0")
    zero: list[list[float | None]] = [[0.0 if i == j else 48.0 + i for j in range(3)] for i in range(3)]
    key = "device_to_device_memcpy_write_ce"
    v01 = formats.nvb_output([(H100, None)] * 3, [(key, formats.nvb_matrix(
        key, "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)", zero))], version="v0.1")
    assert len(_results(_read(FIXTURES / NVB, on_n3, text=v01))) == 6
    multinode = formats.nvb_output([(H100, "00000000:18:00"), (H100, "00000000:2a:00")] * 2, [
        ("multinode_device_to_device_memcpy_write_ce", formats.nvb_matrix(
            "multinode_device_to_device_memcpy_write_ce", "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)",
            formats.nvb_pairs(4, 45.0)))], hosts=("node-a", "node-a", "node-b", "node-b"))
    pairs = {(e.a_host, e.b_host) for i in _results(_read(FIXTURES / NVB, text=multinode))
             if (e := ends_of(i.record.identity.case.params)) is not None}
    assert pairs == {("node-a", "node-a"), ("node-a", "node-b"), ("node-b", "node-b")}


def test_each_node_s_gpus_are_its_own_and_an_output_naming_no_host_needs_host() -> None:
    """Two nodes' single-node outputs: v0.8 names each node on the line before its device lines, and the
    same PCI ids on two nodes are two GPUs (read as `local` before, the keys of node a's GPU 0 and node
    b's were one, and their series one). An output before v0.8 names no host: refused without --host, and
    --host that is not the host an output names is refused."""
    def node(host: str | None, version: str = "v0.8") -> str:
        key = "device_to_device_memcpy_write_ce"
        return formats.nvb_output([(H100, "00000000:18:00"), (H100, "00000000:2a:00")], [
            (key, formats.nvb_matrix(key, "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)",
                                     formats.nvb_pairs(2, 390.0)))], version=version, host=host)

    keys = {host: {ends_of(i.record.identity.case.params).a_device  # type: ignore[union-attr]
                   for i in _results(_read(FIXTURES / NVB, text=node(host)))} for host in ("node-a", "node-b")}
    assert keys == {"node-a": {"node-a/00000000.18.00"}, "node-b": {"node-b/00000000.18.00"}}
    with pytest.raises(PeerFormatError, match="names no host .* give --host"):
        _read(FIXTURES / NVB, text=node(None, "v0.7"))
    with pytest.raises(PeerFormatError, match="names its host.s. node-a, --host says node-b"):
        _read(FIXTURES / NVB, replace(MIB512, host="node-b"), text=node("node-a"))
    assert parse_nvbandwidth_text(node(None, "v0.7")).devices[0].host is None  # the blank line before: no host


def _cut(text: str, how: str) -> str:
    lines = text.splitlines()
    write = next(i for i, line in enumerate(lines) if line.startswith("Running device_to_device_memcpy_write_ce"))
    total = next(i for i, line in enumerate(lines) if "Total bandwidth" in line)
    if how == "mid-row":
        return "\n".join([*lines[:write + 5], lines[write + 5][:40]])
    if how == "rows-short":  # the write matrix's last four rows gone, its SUM kept
        return "\n".join([*lines[:write + 7], *lines[write + 11:]])
    if how == "no-sum":
        return "\n".join(lines[:write + 11])
    if how == "no-total":
        return "\n".join(lines[:total])
    if how == "edited-cell":
        return text.replace(" 390.03 ", " 399.03 ", 1)
    assert how == "edited-total"  # a Total cell and its SUM both 10 GB/s up: the SUM agrees, the streams do not
    at = next(i for i in range(total, len(lines)) if lines[i].startswith("SUM "))
    key, figure = lines[at].rsplit(" ", 1)
    return "\n".join([*lines[:total + 2], lines[total + 2].replace("741.20", "751.20", 1), *lines[total + 3:at],
                      f"{key} {float(figure) + 10:.2f}", *lines[at + 1:]])


CUTS = {"mid-row": "row 2 holds 4 cells for 8 columns", "rows-short": "4 rows of GPUs for 8 columns",
        "no-sum": "no SUM line after its matrix", "no-total": "no Total matrix",
        "edited-cell": "its SUM line says 21523.41", "edited-total": "its Total 751.20 is not its streams' sum"}


@pytest.mark.parametrize("how", CUTS)
def test_a_matrix_cut_short_or_edited_is_refused(how: str) -> None:
    with pytest.raises(PeerFormatError, match=CUTS[how]):
        parse_nvbandwidth_text(_cut(fixture(NVB), how))


def _count(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        tables = conn.execute("select name from sqlite_master where name = 'measurements'").fetchall()
        return int(conn.execute("select count(*) from measurements").fetchone()[0]) if tables else 0


def test_imported_matrices_are_judged_and_cut_ones_exit_2_storing_nothing(tmp_path: Path) -> None:
    db, url = tmp_path / "links.db", f"sqlite:///{tmp_path / 'links.db'}"
    result = runner.invoke(app, ["import", str(FIXTURES / NVB), "--db", url])  # no --buffer-mib
    assert result.exit_code == 2 and "--buffer-mib" in result.stderr and _count(db) == 0
    bad = runner.invoke(app, ["import", str(FIXTURES / NVB), "--buffer-mib", "512", "--host", "a/b", "--db", url])
    assert bad.exit_code == 2 and "--host 'a/b': a host name" in bad.stderr and _count(db) == 0
    cut = tmp_path / "cut"
    cut.mkdir()
    for how in CUTS:
        (cut / f"{how}.txt").write_text(_cut(fixture(NVB), how))
    result = runner.invoke(app, ["import", str(cut), "--buffer-mib", "512", "--db", url])
    assert result.exit_code == 2 and "0 imported (0 results added" in result.stdout and _count(db) == 0
    result = runner.invoke(app, ["import", str(FIXTURES / NVB), str(FIXTURES / SENDRECV), "--buffer-mib", "512",
                                 "--measured-at", "2026-05-01T08:00", "--db", url])
    assert result.exit_code == 0, result.stderr
    assert "8 ranks on 1 node(s) (gpu-node07)" in result.stdout
    assert "2 ranks on 2 node(s) (node1, node2)" in result.stdout
    assert _count(db) == 168 + 9
    result = runner.invoke(app, ["fleet", "--links", "--suite", "nvbandwidth", "--json", "--db", url])
    judged = json.loads(result.stdout)
    flagged = [(link["a"], link["b"]) for link in judged["links"] if link["status"] != "ok"]
    assert flagged == [("gpu-node07/00000000.3a.00", "gpu-node07/00000000.ab.00")]  # GPUs 2 and 5, nothing else
    assert all(end["status"] == "ok" for end in judged["ends"])
