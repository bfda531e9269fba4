"""nccl-tests and rccl-tests files (stdout, nccl-tests' JSON, rccl-tests' JSON and CSV) as runs of
rooflab results: each test's device and world size, then its rows (collective_results), then the
runs they fall into (a case repeated in one file, `-N` cycles or the same test twice, starts the
next run)."""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence

from rooflab.record import EnvironmentRecord
from rooflab.runners.peer_import.collective_results import (
    DTYPES,
    TableContext,
    collective_op,
    device_text,
    first_device,
    infer_op,
    op_name,
    results_of_table,
    unmodelled,
    world_size,
)
from rooflab.runners.peer_import.nccl_records import NcclHalf, NcclRow, NcclTest, RankDevice, RunSettings
from rooflab.runners.peer_import.rccl_files import RcclResult
from rooflab.runners.peer_import.results import (
    Conversion,
    Imported,
    Source,
    When,
    digest,
    environment,
    naive_as_utc,
    split_runs,
    unique,
)
from rooflab.suite.dtypes import element_size
from rooflab.suite.ops.pairs import PAIRS_OP, PairEnds
from rooflab.vocab import Tool


def _label(test: NcclTest) -> str:
    return f"{test.program or 'the test'} at lines {test.first_line}-{test.last_line}"


def _environment(test: NcclTest, name: str, ranks: int) -> EnvironmentRecord:
    """The device of a test's results, with its hosts; the nodes only when the device lines name every
    rank (a log filtered down to a few ranks' lines says which hosts ran, not how many)."""
    hosts = unique([d.host for d in test.devices])
    named = len({d.rank for d in test.devices})
    info = {"hosts": hosts, "nodes": len(hosts) if hosts and named == ranks else None, "ranks": ranks,
            "ranks_named": named if 0 < named < ranks else None, "tool_version": test.tool_version,
            "library_version": test.library_version,
            "devices": [device_text(d) for d in sorted(test.devices, key=lambda d: d.rank)]}
    return environment(test.tool, name, {k: v for k, v in info.items() if v not in (None, [])})


def _op_for(test: NcclTest) -> tuple[str | None, str]:
    name = op_name(test.program)
    if name is not None:
        return name, ""
    if test.program and unmodelled(test.program):
        return None, f"{test.program} has no rooflab model"
    listed = len({d.rank for d in test.devices}) or test.declared_ranks
    counted = [r for r in test.rows if r.count > 0]
    return infer_op(counted[0], listed) if counted else (None, "no row with elements")


def _pair_ends(test: NcclTest) -> PairEnds | None:
    """The two ends of a sendrecv of ranks 0 and 1, both named by device lines (None otherwise)."""
    by_rank = {d.rank: d for d in test.devices}
    if set(by_rank) != {0, 1}:
        return None
    a, b = by_rank[0], by_rank[1]
    return PairEnds(a_rank=0, a_host=a.host, a_device=_device_key(a), b_rank=1, b_host=b.host,
                    b_device=_device_key(b))


def _device_key(d: RankDevice) -> str:
    """An end's device key in an nccl-tests file: its host and bus id (`node1/0000.06.00`)."""
    return f"{d.host}/{d.bus_id.replace(':', '.')}"


def _context(test: NcclTest, run: str, when: When, device_name: str | None,
             pairs: bool = False) -> tuple[TableContext | None, str, str]:
    """The test's shared context, its GPU name, or (None, "", why) when it cannot be imported.
    `pairs`: a sendrecv of two ranks, both named, is the pair of the link matrix."""
    name, why = _op_for(test)
    if name is None:
        return None, "", f"{_label(test)}: {why}: left out"
    op = collective_op(name)
    ranks, why = world_size(test, op)
    if ranks is None:
        return None, "", f"{_label(test)}: {why}: left out"
    if ranks < 2:
        return None, "", f"{_label(test)}: {ranks} rank moves nothing over a link (busbw 0): left out"
    rank0 = first_device(test.devices)
    gpu = (rank0.gpu_name if rank0 is not None else None) or device_name
    if not gpu:
        return None, "", f"{_label(test)}: names no GPU (give --device-name): left out"
    at = naive_as_utc(test.start_time) if test.start_time else None
    uuid = f"{rank0.host}:{rank0.bus_id}" if rank0 is not None and rank0.host else None
    ends = _pair_ends(test) if pairs and name == "send_recv" and ranks == 2 else None
    return TableContext(test=test, op=collective_op(PAIRS_OP) if ends is not None else op, ranks=ranks, run_id=run,
                        fingerprint="", device_uuid=uuid, measured_at=at or when.at, tool=test.tool,
                        tool_version=test.tool_version, ends=ends), gpu, ""


def _content(test: NcclTest) -> dict[str, object]:
    """What a test says, without where it stood in its file: the same results with other noise
    around them are the same content (and so the same run)."""
    found = dataclasses.asdict(test)
    for key in ("first_line", "last_line", "command_line"):
        found.pop(key)
    for row in found["rows"]:
        row.pop("line")
    return found


def convert_sendrecv_pairs(tests: Sequence[NcclTest], source: Source) -> Conversion:
    """An nccl-tests output whose sendrecv_perf ran on two ranks: that test as pairs of the link matrix
    (collective_results), every other test as convert_nccl_tests reads it."""
    return convert_nccl_tests(tests, source, pairs=True)


def convert_nccl_tests(tests: Sequence[NcclTest], source: Source, pairs: bool = False) -> Conversion:
    """Every test of an nccl-tests (rccl-tests) output as rooflab results (`pairs`: convert_sendrecv_pairs)."""
    tool = tests[0].tool if tests else Tool.NCCL_TESTS
    conversion = Conversion(tool=tool)
    content = digest(tool, [_content(t) for t in tests])
    results: list[tuple[Imported, EnvironmentRecord]] = []
    for test in tests:
        ctx, gpu, why = _context(test, "", source.when, source.device_name, pairs)
        if ctx is None:
            conversion.left_out.append(why)
            continue
        env = _environment(test, gpu, ctx.ranks)
        ctx = dataclasses.replace(ctx, fingerprint=env.device_fingerprint)
        items, left_out = results_of_table(ctx)
        conversion.left_out.extend(left_out)
        results.extend((item, env) for item in items)
    description = f"imported from {source.name} ({tool})"
    command_line = " ".join(unique([t.command_line for t in tests if t.command_line]))
    conversion.runs = split_runs(results, tool, content, description, command_line, source.when)
    return conversion


def convert_nccl_json(test: NcclTest, source: Source) -> Conversion:
    """nccl-tests' `-J` file: its one test."""
    return convert_nccl_tests([test], source)


def convert_rccl_results(results: Sequence[RcclResult], source: Source) -> Conversion:
    """rccl-tests' own JSON or CSV result lines, as the tables they were cut from."""
    tables = rccl_tests_as_tables(results, source.ranks)
    return convert_nccl_tests(tables, source) if tables else Conversion(tool=Tool.RCCL_TESTS)


def _rccl_count(name: str, size: int, dtype: str | None, ranks: int | None) -> int | None:
    op = op_name(name)
    if op is None or dtype is None or (ranks is None and collective_op(op).size_ranks):
        return None
    per = element_size(dtype) * (ranks if collective_op(op).size_ranks and ranks else 1)
    return size // per if size % per == 0 else None


def rccl_tests_as_tables(results: Sequence[RcclResult], ranks: int | None) -> list[NcclTest]:
    """rccl-tests' result lines as tables: one per test name, a row per size (and cycle), its two
    halves joined again."""
    by_name: dict[str, dict[tuple, dict[str, object]]] = defaultdict(dict)
    for r in results:
        key = (r.size_bytes, r.dtype, r.redop, r.cycle)
        slot = by_name[r.name].setdefault(key, {"line": r.line, "ranks": r.ranks or ranks})
        half = NcclHalf(time_us=r.time_us, algbw_gbps=r.algbw_gbps, busbw_gbps=r.busbw_gbps, wrong=r.wrong)
        slot["in" if r.in_place else "out"] = half
    tables = []
    for name, rows in by_name.items():
        built = []
        for (size, dtype, redop, _), slot in rows.items():
            n = slot["ranks"] if isinstance(slot["ranks"], int) else None
            count = _rccl_count(name, size, DTYPES.get(dtype.lower()), n)
            out, inp = slot.get("out"), slot.get("in")
            line = slot["line"]
            built.append(NcclRow(line=line if isinstance(line, int) else 0, size_bytes=size,
                                 count=count if count is not None else 0,
                                 dtype=dtype, redop=redop, root=None,
                                 out_of_place=out if isinstance(out, NcclHalf) else None,
                                 in_place=inp if isinstance(inp, NcclHalf) else None))
        lines = [r.line for r in built]
        tables.append(NcclTest(tool=Tool.RCCL_TESTS, first_line=min(lines), last_line=max(lines), program=name,
                               tool_version=None, library_version=None,
                               settings=RunSettings(), devices=(), rows=tuple(built),
                               declared_ranks=ranks or _declared(rows)))
    return tables


def _declared(rows: dict[tuple, dict[str, object]]) -> int | None:
    found = {slot["ranks"] for slot in rows.values() if isinstance(slot["ranks"], int)}
    return found.pop() if len(found) == 1 else None
