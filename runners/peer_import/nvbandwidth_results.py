"""nvbandwidth's matrices between GPUs as pairs of rooflab's link matrix (suite/ops/pairs.py).

The testcases between two GPUs (`device_to_device_[bidirectional_]memcpy_{read,write}_{ce,sm}`, and
their `multinode_` forms) measure one pair at a time; each cell (row i, column j, i != j) is one
pair's result: `sendrecv_pairs` with `ranks` the matrix's size, `pairs_at_once` 1 and both ends. Row
i is the GPU whose context runs the copy, column j its peer (nvbandwidth's testcase descriptions); a
`read` copy moves data from the peer to row i, a `write` copy from row i to the peer (the arrows of the
matrices' descriptions do not say this: `write` prints `GPU(row) <- GPU(column)`), so the cell is the
pair's `a_to_b` or `b_to_a` (a the lower index). A bidirectional testcase runs a copy each way at once,
a pair's `both`, whose rate is per direction: its `Total` matrix (v0.6 and later: the sum of its two
streams' rates, `Read1` + `Read2` or `Write1` + `Write2`, which the parser checks) is stored as twice
the bytes one end sends over the time (the printed rate's scale 2), and the streams' own matrices are
left out; before v0.6 a bidirectional matrix held the measured stream's rate for a copy-engine copy
(scale 1) and both streams' sum for a kernel copy (scale 2). The copy's engine and access are the
case's backend (`ce_write`, `sm_read`, ...): a copy-engine write and a kernel read are different
measurements and never share a series. Cell (j, i) of a bidirectional matrix measures the pair of cell
(i, j) again, the copies started from the other GPU: those cells go into the file's second run.

Ends: the host (v0.8 prints a single node's host name before its device lines; the multinode build's
process lines name each process's host; an output that names none, before v0.8, takes the one
`--host` gives, and without it is refused: the keys of two nodes' GPUs would be the same) and a device
key of the host and the GPU's PCI id (`gpu-node07/00000000.18.00`; the device index where the version
printed no PCI id).

The bytes of a copy are the buffer nvbandwidth copied, which its output does not print: `--buffer-mib`
says it (its -b: 512 by default in v0.7 and later, 64 before); a kernel copy truncates the buffer to
whole blocks of 512 threads per SM, a few KiB less, which nvbandwidth's own rate counts and the stored
bytes do not (under 0.1 % of 64 MiB on 132 SMs). A result's time is its bytes over its printed rate
(GB/s of 1e9 bytes), so that rooflab's rate, re-derived from what it stores, is the printed one
(agreement.py). Testcases between a host and GPUs, all-to-one, one-to-all, local copies and latencies
are not pairs and are left out, each with its reason.
"""
from __future__ import annotations

from dataclasses import dataclass

from rooflab.record import CaseRecord, CollectiveRecord, EnvironmentRecord, Identity, MeasurementRecord, TimingMethod
from rooflab.runners.peer_import.errors import PeerFormatError
from rooflab.runners.peer_import.nvbandwidth import BETWEEN_GPUS, NvbDevice, NvbMatrix, NvbOutput
from rooflab.runners.peer_import.printed import Printed, PrintedRate
from rooflab.runners.peer_import.results import (
    Conversion,
    Imported,
    Source,
    digest,
    environment,
    point_statistics,
    split_runs,
)
from rooflab.suite.case import Case
from rooflab.suite.ops.base import work_model
from rooflab.suite.ops.pairs import PAIRS_OP, PairEnds
from rooflab.suite.ops.registry import get_op
from rooflab.vocab import CacheMode, CollectiveMode, FlushMethod, Pace, PairDirection, ResultStatus, TimingMode, Tool

DTYPE = "float32"  # the pair op counts elements: a buffer of B bytes is n = B / 4 of them


@dataclass(frozen=True)
class MatrixReading:
    """How one matrix's cells are pairs: the direction its copies take (None: both at once), the
    backend, or why it is left out."""

    backend: str = ""
    row_sends: bool | None = None
    scale: float = 1.0  # the printed rate's bytes per byte one end sends (2: both directions' sum)
    left_out: str = ""


def reading(matrix: NvbMatrix) -> MatrixReading:
    """How `matrix`'s cells are read (see the module docstring)."""
    found = BETWEEN_GPUS.match(matrix.testcase)
    if found is None:
        return MatrixReading(left_out="not a copy between two GPUs")
    bidirectional, access, engine = found.groups()
    backend = f"{engine}_{access}"
    if not bidirectional:
        return MatrixReading(backend, row_sends=access == "write")
    if matrix.stream is not None and matrix.stream != "Total":
        return MatrixReading(left_out="one of the two streams, whose Total is stored")
    summed = matrix.stream == "Total" or engine == "sm"
    return MatrixReading(backend, scale=2.0 if summed else 1.0)


def hosts_of(output: NvbOutput, source: Source) -> dict[int, str]:
    """Each device index's host: the one the output names, else --host (PeerFormatError when neither
    names one, or when --host is not the one the output names)."""
    named = {d.host for d in output.devices if d.host is not None}
    if source.host is not None and named and named != {source.host}:
        raise PeerFormatError(f"the output names its host(s) {', '.join(sorted(named))}, --host says {source.host}")
    if not named and source.host is None:
        raise PeerFormatError("the output names no host (nvbandwidth before v0.8 prints none): give --host, the node "
                              "it ran on, so that its GPUs' keys are not those of another node's GPUs")
    return {d.index: d.host or str(source.host) for d in output.devices}


def _device_key(devices: dict[int, NvbDevice], hosts: dict[int, str], index: int) -> str:
    found = devices.get(index)
    host = hosts[index]
    if found is None or found.pci is None:
        return f"{host}/gpu{index}"
    return f"{host}/{found.pci.replace(':', '.')}"


def _ends(devices: dict[int, NvbDevice], hosts: dict[int, str], i: int, j: int) -> PairEnds:
    a, b = sorted((i, j))
    return PairEnds(a_rank=a, a_host=hosts[a], a_device=_device_key(devices, hosts, a), b_rank=b, b_host=hosts[b],
                    b_device=_device_key(devices, hosts, b))


def _direction(row_sends: bool | None, i: int, j: int) -> PairDirection:
    """The direction of cell (row i, column j); a is the lower index."""
    if row_sends is None:
        return PairDirection.BOTH
    sender = i if row_sends else j
    return PairDirection.A_TO_B if sender == min(i, j) else PairDirection.B_TO_A


def _cell(output: NvbOutput, hosts: dict[int, str], matrix: NvbMatrix, how: MatrixReading, cell: tuple[int, int],
          value: Printed, line: int, source: Source, fingerprint: str) -> Imported:
    """The pair result of the cell of row i, column j (device indices), the rate it printed with it."""
    i, j = cell
    op = get_op(PAIRS_OP)
    devices = {d.index: d for d in output.devices}
    ends = _ends(devices, hosts, i, j)
    params = op.resolved_params({"n": (source.buffer_bytes or 0) // 4, "ranks": len(matrix.columns),
                                 "pairs_at_once": 1, "direction": _direction(how.row_sends, i, j).value,
                                 **ends.params()})
    work = work_model(op, params, DTYPE)
    case = Case(op=op.name, op_version=op.version, family=op.family, backend=how.backend, dtype=DTYPE,
                cache=CacheMode.HOT, timing_mode=TimingMode.LAUNCH, params=params)
    texts = tuple(f"{hosts[k]} cuda:{k} {devices[k].pci or ''}".strip() for k in (ends.a_rank, ends.b_rank))
    record = MeasurementRecord(
        identity=Identity(run_id="", case=CaseRecord(case.case_key, case.op, case.op_version, case.family,
                                                     case.backend, case.dtype, case.params),
                          device_fingerprint=fingerprint, device_uuid=ends.a_device, measured_at=source.when.at),
        status=ResultStatus.OK, method=TimingMethod(
            cache=CacheMode.HOT, timing_mode=TimingMode.LAUNCH, flush_method=FlushMethod.NONE,
            pace=Pace.BACK_TO_BACK, collective_mode=CollectiveMode.STREAM, tool=Tool.NVBANDWIDTH,
            tool_version=output.version),
        stats=point_statistics(work.bytes * how.scale / (value.value * 1e9) * 1e3), work=work,
        collective=CollectiveRecord(ranks=len(matrix.columns), rank_devices=texts,
                                    comm_settings={"testcase": matrix.testcase, "matrix": matrix.description}))
    where = f"{matrix.testcase}{' ' + matrix.stream if matrix.stream else ''} row {i} column {j}"
    return Imported(record, (PrintedRate("bandwidth", value, where, line, scale=how.scale),))


def _gpu(output: NvbOutput, source: Source) -> str:
    names = {d.name for d in output.devices}
    gpu = next(iter(names)) if len(names) == 1 else source.device_name
    if not gpu:
        raise PeerFormatError("the output names no GPU, or several (give --device-name)")
    return gpu


def convert_nvbandwidth(output: NvbOutput, source: Source) -> Conversion:
    """Every matrix between GPUs of an nvbandwidth output as pairs (see the module docstring)."""
    if source.buffer_bytes is None or source.buffer_bytes % 4:
        raise PeerFormatError("nvbandwidth prints no buffer size: give --buffer-mib (the -b it ran with: 512 MiB "
                              "by default in v0.7 and later, 64 MiB before)")
    conversion = Conversion(tool=Tool.NVBANDWIDTH)
    hosts = hosts_of(output, source)
    named = sorted(set(hosts.values()))
    env = environment(Tool.NVBANDWIDTH, _gpu(output, source), {
        "hosts": named, "nodes": len(named) or None, "ranks": len(output.devices) or None,
        "tool_version": output.version,
        "driver_version": output.driver_version, "cuda_version": output.cuda_version,
        "devices": [f"{d.index} {d.name} ({d.pci or 'no PCI id'}) on {hosts[d.index]}" for d in output.devices]})
    results: list[tuple[Imported, EnvironmentRecord]] = []
    mirrors: list[tuple[Imported, EnvironmentRecord]] = []  # cell (j, i) of a bidirectional matrix: measured again
    for matrix in output.matrices:
        how = reading(matrix)
        if how.left_out:
            name = f"{matrix.testcase} {matrix.stream}" if matrix.stream else matrix.testcase
            conversion.left_out.append(f"line {matrix.line}: {name}: {how.left_out}: left out")
            continue
        unlisted = sorted({int(c) for c in matrix.columns} - set(hosts), key=int)
        if unlisted:
            raise PeerFormatError(f"{matrix.testcase}: its matrix names GPU {unlisted[0]}, which no device line lists: "
                                  "the device lines are cut", matrix.line)
        for row in matrix.rows:
            for column, value in zip(matrix.columns, row.cells, strict=True):
                cell = (int(row.label), int(column))
                if cell[0] != cell[1] and value is not None and value.value > 0:
                    item = _cell(output, hosts, matrix, how, cell, value, row.line, source, env.device_fingerprint)
                    (mirrors if how.row_sends is None and cell[0] > cell[1] else results).append((item, env))
    content = digest(Tool.NVBANDWIDTH, output.version, [(m.testcase, m.stream, [r.cells for r in m.rows])
                                                       for m in output.matrices], source.buffer_bytes, named)
    conversion.runs = split_runs(results + mirrors, Tool.NVBANDWIDTH, content,
                                 f"imported from {source.name} (nvbandwidth)", "", source.when)
    return conversion
