"""nccl-tests' (and rccl-tests') stdout, as people keep it: text in, `NcclTest` records out.

`parse_nccl_tests_text(text)` is the one entry point (the import and the nccl-tests cross-check both
call it). It is driven by each table's own column header rather than by fixed positions (the layouts
a test reads, from 2020 to 2.19 and rccl-tests 2.17.9, are listed in docs/peer-import.md):

- the header lines: `# nccl-tests version V nccl-headers=N nccl-library=N` (rccl-tests: `# rccl-tests
  version V rccl-headers=N rccl-library=N`) and `# Collective test starting: PROG` (2.17 and later),
  `# nThread ... iters: N ...`, `# Using devices` and one `#  Rank R [Group G] [Pid P] on HOST device D
  [BUS] GPU NAME` line per rank;
- the column header names the columns: `size count type [redop] [root]`, then per half (out-of-place,
  in-place) `time|cputime algbw busbw [copybw] [#wrong|error] [i_min i_max i_p99 i_cv%]`, then an
  optional `timestamp` (-S). Rows are split on whitespace and read by those names, so widths,
  missing columns and added ones follow the header;
- the footer: `# Out of bounds values : N OK|FAILED`, `# Avg bus bandwidth : X`, `# Collective test
  concluded: PROG`.

Everything else is noise and is skipped wherever it appears: NCCL's `host:pid:tid [d] NCCL INFO`
lines, MPI and shell output, a row split in two by a line of noise (joined again). Prefixes that
launchers put on every line (`[1,0]<stdout>:` of mpirun --tag-output, `0: ` of srun -l, an ISO time
of `kubectl logs --timestamps`) are removed first, with any indentation before them; a leading `#`
may be missing (pasted into Markdown). Several tests in one file are several `NcclTest`s.

A header that names `redop` over rows that leave it blank (2020's alltoall) reads the blank as an empty
op. A table that is cut short (a row without its last columns, rows without the footer, a footer without
its `Avg bus bandwidth` line) or whose footer average disagrees with its rows (a row lost or edited)
raises PeerFormatError with the line.
"""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

from rooflab.runners.peer_import.errors import PeerFormatError
from rooflab.runners.peer_import.nccl_records import (
    IterationStats,
    NcclHalf,
    NcclRow,
    NcclTest,
    RankDevice,
    RunSettings,
)
from rooflab.runners.peer_import.printed import Printed, is_number, parse_printed
from rooflab.runners.peer_import.sniff import Sniff
from rooflab.vocab import Tool

_PREFIXES = (
    re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:\s?"),  # mpirun --tag-output
    re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\s"),  # kubectl logs --timestamps
    re.compile(r"^\d{1,5}: "),  # srun -l (its padding is stripped before)
)
_VERSION = re.compile(r"\b([nr])ccl-tests version\s+(\S+)(?:\s+[nr]ccl-headers=(\d+))?(?:\s+[nr]ccl-library=(\d+))?")
_STARTING = re.compile(r"Collective test starting:\s*(\S+)")
_CONCLUDED = re.compile(r"Collective test concluded:\s*(\S+)")
_SETTINGS = re.compile(r"(?:\bnThread\s+(\d+)\s+)?\bnGpus(?:\(perProc\))?\s+(\d+)"  # nThread absent in some builds
                       r"\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)")
_SETTING_FIELDS = {
    "warmup_iters": re.compile(r"warmup iters:\s*(\d+)"),
    "iters": re.compile(r"(?<!warmup )(?<!agg )\biters:\s*(\d+)"),
    "agg_iters": re.compile(r"agg iters:\s*(\d+)"),
    "validation": re.compile(r"validation:\s*(\d+)"),
    "graph": re.compile(r"graph:\s*(\d+)"),
}
_RANK = re.compile(r"^Rank\s+(\d+)(?:\s+Group\s+(\d+))?(?:\s+Pid\s+(\d+))?\s+on\s+(\S+)\s+device\s+(\d+)"
                   r"\s+\[([^\]]*)\]\s*(.*?)\s*$")
_OOB = re.compile(r"Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
_AVG = re.compile(r"Avg bus bandwidth\s*:\s*(\S+)")
# `NCCL version 2.28.7+cuda13.0`, `RCCL version : 2.27.7-HEAD:96a25b5`
_LIBRARY = re.compile(r"\b(NCCL|RCCL) version\s*:?\s*v?(\d+\.\d+\.\d+\S*)")
_RCCL_TESTS = re.compile(r"rccl-tests:\s*Version\s+(\S+)")
_PROGRAM = re.compile(r"\b([a-z]+(?:_[a-z]+)*_perf)\b")  # a test binary named anywhere (a command line)
_DATE, _CLOCK = re.compile(r"^\d{4}-\d\d-\d\d$"), re.compile(r"^\d\d:\d\d:\d\d$")
_INT = re.compile(r"^-?\d+$")
_WORD = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

_LEADING = ("size", "count", "type", "redop", "root")
_TIME = ("time", "cputime")
_WRONG = ("#wrong", "error")
_PER_ITERATION = ("i_min", "i_max", "i_p99", "i_cv%")


def library_version(code: int) -> str:
    """NCCL's version from its version code (NCCL_VERSION_CODE): 22602 -> 2.26.2, 2804 -> 2.8.4."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


@dataclass(frozen=True)
class Columns:
    """A table's column header: the leading columns, the columns of one half, how many halves."""

    leading: tuple[str, ...]
    half: tuple[str, ...]
    halves: int
    timestamp: bool
    single_half_in_place: bool = False  # one half only, and the title says it is the in-place one

    def width(self, halves: int) -> int:
        return len(self.leading) + halves * len(self.half) + (2 if self.timestamp else 0)


def parse_columns(tokens: list[str], line: int) -> Columns:
    """The column header `tokens` (lower case, without the `#`)."""
    times = [i for i, t in enumerate(tokens) if t in _TIME]
    if not times:
        raise PeerFormatError("the column header names no time column", line)
    leading = tuple(tokens[:times[0]])
    unknown = [t for t in leading if t not in _LEADING]
    if leading[:3] != ("size", "count", "type") or unknown:
        raise PeerFormatError(f"unexpected leading columns {' '.join(leading)!r} (expected size count type "
                              "[redop] [root])", line)
    timestamp = tokens[-1] == "timestamp"
    body = tokens[times[0]:len(tokens) - (1 if timestamp else 0)]
    halves = len(times)
    if halves > 2 or (halves == 2 and body[:times[1] - times[0]] != body[times[1] - times[0]:]):
        raise PeerFormatError("the two halves of the column header differ", line)
    half = tuple(body[:len(body) // halves])
    missing = [c for c in ("algbw", "busbw") if c not in half]
    if missing:
        raise PeerFormatError(f"the column header lacks {', '.join(missing)}", line)
    return Columns(leading, half, halves, timestamp)


def _number(token: str, what: str, line: int) -> Printed:
    try:
        return parse_printed(token)
    except ValueError:
        raise PeerFormatError(f"{what} {token!r} is not a number", line) from None


def _half(columns: Columns, tokens: list[str], line: int) -> NcclHalf:
    values = dict(zip(columns.half, tokens, strict=True))
    time_name = next(c for c in columns.half if c in _TIME)
    wrong: float | None = None
    wrong_name = next((c for c in columns.half if c in _WRONG), None)
    if wrong_name is not None and values[wrong_name].upper() != "N/A":
        wrong = _number(values[wrong_name], wrong_name, line).value
    stats = None
    if any(c in values for c in _PER_ITERATION):
        def get(name: str) -> Printed | None:
            return _number(values[name], name, line) if name in values else None
        stats = IterationStats(get("i_min"), get("i_max"), get("i_p99"), get("i_cv%"))
    return NcclHalf(time_us=_number(values[time_name], time_name, line),
                    algbw_gbps=_number(values["algbw"], "algbw", line),
                    busbw_gbps=_number(values["busbw"], "busbw", line),
                    wrong=wrong, wrong_is_delta=wrong_name == "error", per_iteration=stats)


def with_blank_redop(columns: Columns, tokens: list[str]) -> list[str]:
    """A row's tokens with an empty one where its header names `redop` and the row leaves it blank (nccl-tests
    119a0ec..d313d20 passed "" as alltoall's op name, so those rows print nothing in that column)."""
    if "redop" not in columns.leading:
        return tokens
    at = columns.leading.index("redop")
    if len(tokens) > at and tokens[at] and not _WORD.match(tokens[at]):
        return [*tokens[:at], "", *tokens[at:]]
    return tokens


def row_start(tokens: list[str]) -> bool:
    """Whether `tokens` begin as a table row does: two whole numbers, then a type name."""
    return len(tokens) >= 3 and bool(_INT.match(tokens[0]) and _INT.match(tokens[1]) and _WORD.match(tokens[2]))


def _continuation(tokens: list[str]) -> bool:
    """Whether a line can be the rest of a row: numbers, N/A and a timestamp only."""
    return bool(tokens) and all(is_number(t) or t.upper() == "N/A" or _DATE.match(t) or _CLOCK.match(t)
                                for t in tokens)


def parse_row(columns: Columns, tokens: list[str], line: int) -> NcclRow:
    """One complete row (its tokens, a timestamp and trailing noise included)."""
    lead = dict(zip(columns.leading, tokens, strict=False))
    rest = tokens[len(columns.leading):]
    timestamp = None
    if columns.timestamp and len(rest) >= 2 and _DATE.match(rest[-2]) and _CLOCK.match(rest[-1]):
        timestamp, rest = f"{rest[-2]} {rest[-1]}", rest[:-2]
    width = len(columns.half)
    while len(rest) > width * columns.halves and not is_number(rest[-1]) and rest[-1].upper() != "N/A":
        rest = rest[:-1]  # noise glued to the end of the row
    halves: list[NcclHalf | None]
    if len(rest) == width * columns.halves:
        halves = [_half(columns, rest[i * width:(i + 1) * width], line) for i in range(columns.halves)]
    elif columns.halves == 2 and len(rest) == width:
        halves = [None, _half(columns, rest, line)]  # the out-of-place half left blank (in-place only)
    else:
        raise PeerFormatError(f"a row of {len(tokens)} fields where the column header has "
                              f"{columns.width(columns.halves)}", line)
    if columns.halves == 1:
        halves = [None, halves[0]] if columns.single_half_in_place else [halves[0], None]
    return NcclRow(line=line, size_bytes=int(lead["size"]), count=int(lead["count"]), dtype=lead["type"],
                   redop=lead.get("redop"), root=int(lead["root"]) if "root" in lead else None,
                   out_of_place=halves[0], in_place=halves[1], timestamp=timestamp)


@dataclass
class _Block:
    """One test being read."""

    first_line: int
    last_line: int = 0
    tool: str = Tool.NCCL_TESTS
    program: str | None = None
    tool_version: str | None = None
    library_version: str | None = None
    settings: RunSettings | None = None
    devices: list[RankDevice] = field(default_factory=list)
    columns: Columns | None = None
    title_in_place_only: bool = False
    rows: list[NcclRow] = field(default_factory=list)
    pending: tuple[int, list[str]] | None = None  # a row cut short: its line and tokens so far
    out_of_bounds: int | None = None
    out_of_bounds_failed: bool = False
    avg: tuple[int, Printed] | None = None
    concluded: bool = False
    footer_line: int | None = None  # the footer's first line

    @property
    def in_table(self) -> bool:
        return self.columns is not None or self.avg is not None or self.out_of_bounds is not None

    @property
    def has_footer(self) -> bool:
        """Whether the footer has begun (no row comes after it)."""
        return self.avg is not None or self.out_of_bounds is not None or self.concluded

    def check_whole(self) -> None:
        """PeerFormatError unless the table ends with its footer's `Avg bus bandwidth`, the line that
        proves its rows whole (every version prints it; a table without it is cut short)."""
        if not self.rows or self.avg is not None:
            return
        if self.has_footer:
            raise PeerFormatError("the footer stops before its `# Avg bus bandwidth` line: the output is cut short",
                                  self.footer_line)
        raise PeerFormatError("the table ends without nccl-tests' footer (# Out of bounds values, # Avg bus "
                              "bandwidth): the output is cut short after this row", self.rows[-1].line)


def _clean(raw: str) -> str:
    """A line without its launcher prefix; the indentation a log pasted into Markdown (a list item, an
    indented code block) put before the prefix goes too."""
    text = raw.strip()
    for prefix in _PREFIXES:
        text = prefix.sub("", text, count=1)
    return text.strip()


class _Reader:
    """Reads a text line by line into blocks (tests)."""

    def __init__(self) -> None:
        self.tests: list[NcclTest] = []
        self.block = _Block(first_line=1)
        self.rccl_marker: str | None = None
        self.program_named: str | None = None  # the last test binary a line named (a command line, say)

    # -- blocks -------------------------------------------------------------------------------

    def fresh(self, line: int, when: bool) -> _Block:
        """The block a starting line belongs to: a new one when the current one has begun its
        table (or `when` says its slot is taken)."""
        if self.block.in_table or when:
            self.close(line - 1)
            self.block = _Block(first_line=line)
        return self.block

    def close(self, last: int) -> None:
        block = self.block
        if block.pending is not None:
            self.settle_pending()
        block.check_whole()
        if block.avg is not None and block.rows:
            check_average(block.rows, *block.avg, min_bytes=block.settings.min_bytes if block.settings else None)
        if block.rows:
            block.last_line = max(last, block.rows[-1].line)
            self.tests.append(_finished(block, self.rccl_marker))

    # -- lines --------------------------------------------------------------------------------

    def feed(self, number: int, raw: str) -> None:
        text = _clean(raw)
        body = text.lstrip("#").strip()
        if not body:
            return
        if self.block.pending is not None and self.continue_row(number, body):
            return
        if (named := _PROGRAM.search(body)) and not _STARTING.search(body) and not _CONCLUDED.search(body):
            self.program_named = named.group(1)
        if self.header_line(number, body) or self.footer_line(number, body):
            return
        self.table_line(number, text, body)

    def header_line(self, number: int, body: str) -> bool:
        if m := _VERSION.search(body):
            block = self.fresh(number, self.block.tool_version is not None)
            block.tool_version = m.group(2)
            if m.group(1) == "r":
                block.tool = Tool.RCCL_TESTS
            if m.group(4):
                block.library_version = library_version(int(m.group(4)))
        elif m := _STARTING.search(body):
            self.fresh(number, self.block.program is not None).program = m.group(1)
        elif m := _SETTINGS.search(body):
            self.fresh(number, self.block.settings is not None).settings = _settings(m, body)
        elif m := _RANK.match(body):
            self.fresh(number, False).devices.append(_device(m))
        elif m := _RCCL_TESTS.search(body):
            self.rccl_marker = m.group(1)
            self.block.tool = Tool.RCCL_TESTS
            self.block.tool_version = self.block.tool_version or m.group(1)
        elif m := _LIBRARY.search(body):
            if m.group(1) == "RCCL":
                self.block.tool = Tool.RCCL_TESTS
            self.block.library_version = self.block.library_version or m.group(2)
        else:
            return False
        return True

    def footer_line(self, number: int, body: str) -> bool:
        block = self.block
        if block.columns is None:
            return False
        if block.footer_line is None and (_OOB.search(body) or _AVG.search(body) or _CONCLUDED.search(body)):
            block.footer_line = number
        if m := _OOB.search(body):
            block.out_of_bounds, block.out_of_bounds_failed = int(m.group(1)), m.group(2) == "FAILED"
        elif m := _AVG.search(body):
            block.avg = (number, _number(m.group(1), "the average bus bandwidth", number))
        elif m := _CONCLUDED.search(body):
            block.concluded = True
            block.program = block.program or m.group(1)
        else:
            return False
        return True

    def table_line(self, number: int, text: str, body: str) -> None:
        tokens = body.split()
        lowered = [t.lower() for t in tokens]
        if {"size", "count", "type", "busbw"} <= set(lowered):
            self.column_header(number, lowered)
        elif "out-of-place" in lowered or "in-place" in lowered:
            self.block.title_in_place_only = "in-place" in lowered and "out-of-place" not in lowered
        elif self.block.columns is not None and not self.block.has_footer and row_start(tokens):
            self.start_row(number, tokens)

    def column_header(self, number: int, lowered: list[str]) -> None:
        block = self.block
        if block.columns is not None and not block.rows and not block.has_footer:
            return  # the same header printed again before any row (several processes printing)
        if block.columns is not None:
            block = self.fresh(number, True)
        columns = parse_columns(lowered, number)
        if columns.halves == 1 and block.title_in_place_only:
            columns = Columns(columns.leading, columns.half, 1, columns.timestamp, single_half_in_place=True)
        block.columns = columns

    def start_row(self, number: int, tokens: list[str]) -> None:
        columns = self.block.columns
        assert columns is not None
        tokens = with_blank_redop(columns, tokens)
        if self.block.program is None and self.program_named is not None:
            self.block.program = self.program_named  # the binary a command line before the table named
        if len(tokens) >= columns.width(columns.halves):
            self.block.rows.append(parse_row(columns, tokens, number))
        else:
            self.block.pending = (number, tokens)

    def settle_pending(self) -> None:
        """A row left pending when the table moves on: a whole row with its out-of-place half left
        blank (in-place only), or one cut short."""
        block = self.block
        assert block.pending is not None and block.columns is not None
        line, tokens = block.pending
        if block.columns.halves == 2 and len(tokens) == block.columns.width(1):
            block.pending = None
            block.rows.append(parse_row(block.columns, tokens, line))
            return
        raise PeerFormatError("a table row is cut short (its last columns never come)", line)

    def continue_row(self, number: int, body: str) -> bool:
        """Join the rest of a row that noise split from its start; False when `body` is no part of it."""
        block = self.block
        assert block.pending is not None and block.columns is not None
        tokens = body.split()
        if not _continuation(tokens):
            if row_start(tokens) or _OOB.search(body) or _AVG.search(body) or _CONCLUDED.search(body):
                self.settle_pending()
                return False
            return True  # noise between the two parts of the row
        line, start = block.pending
        joined = with_blank_redop(block.columns, start + tokens)
        if len(joined) >= block.columns.width(block.columns.halves):
            block.pending = None
            block.rows.append(parse_row(block.columns, joined, line))
        else:
            block.pending = (line, joined)
        return True


def _settings(m: re.Match[str], body: str) -> RunSettings:
    found = {name: int(f.group(1)) for name, pattern in _SETTING_FIELDS.items() if (f := pattern.search(body))}
    return RunSettings(nthreads=int(m.group(1)) if m.group(1) else None, ngpus=int(m.group(2)),
                       min_bytes=int(m.group(3)), max_bytes=int(m.group(4)), **found)


def _device(m: re.Match[str]) -> RankDevice:
    return RankDevice(rank=int(m.group(1)), group=int(m.group(2)) if m.group(2) else None,
                      pid=int(m.group(3)) if m.group(3) else None, host=m.group(4), device=int(m.group(5)),
                      bus_id=m.group(6).strip(), gpu_name=m.group(7))


def check_average(rows: list[NcclRow], line: int | None, printed: Printed, min_bytes: int | None = None) -> None:
    """The footer's average busbw against the rows' own: every half nccl-tests timed counts once."""
    halves = [h for r in rows for h in (r.out_of_place, r.in_place) if h is not None]
    if not halves:
        return
    mean = statistics.fmean(h.busbw_gbps.value for h in halves)
    slack = statistics.fmean(h.busbw_gbps.half_ulp for h in halves) + printed.half_ulp
    if abs(mean - printed.value) > slack * 1.000001 + 1e-9:
        first = rows[0].size_bytes
        trimmed = (f" (the table starts at {first} B, but the run's minBytes is {min_bytes} B: its smaller sizes "
                   "were cut from the output)") if min_bytes is not None and first > min_bytes else ""
        raise PeerFormatError(
            f"the footer's average bus bandwidth {printed.value:g} GB/s is not the average of the table's "
            f"{len(halves)} busbw figures ({mean:.4f} GB/s): rows are missing or altered{trimmed}, so the file "
            "cannot be read whole", line)


def _finished(block: _Block, rccl_marker: str | None) -> NcclTest:
    tool = block.tool
    if rccl_marker is not None or any(d.gpu_name.startswith("AMD") for d in block.devices):
        tool = Tool.RCCL_TESTS
    assert block.columns is not None
    return NcclTest(
        tool=tool, first_line=block.first_line, last_line=block.last_line, program=block.program,
        tool_version=block.tool_version, library_version=block.library_version,
        settings=block.settings or RunSettings(), devices=tuple(block.devices), rows=tuple(block.rows),
        time_is_cputime="cputime" in block.columns.half, out_of_bounds=block.out_of_bounds,
        out_of_bounds_failed=block.out_of_bounds_failed, avg_busbw_gbps=block.avg[1] if block.avg else None)


def parse_nccl_tests_text(text: str) -> list[NcclTest]:
    """Every test of an nccl-tests (rccl-tests) stdout, in file order; [] when it holds no table row.
    Raises PeerFormatError (with the line) for a table cut short or whose footer contradicts it."""
    reader = _Reader()
    lines = text.splitlines()
    for number, raw in enumerate(lines, start=1):
        reader.feed(number, raw)
    reader.close(len(lines))
    return reader.tests


_RANK_LINE = re.compile(r"#\s*Rank\s+(\d+)\s+Group")


def looks_like_sendrecv_pair(sniff: Sniff) -> bool:
    """Whether the text is an nccl-tests output of `sendrecv_perf` whose device lines name ranks 0 and 1
    and no other (the pair of the link matrix; format_table.py)."""
    if "sendrecv" not in sniff.text or not looks_like_nccl_tests(sniff):
        return False
    return {int(m) for m in _RANK_LINE.findall(sniff.text)} == {0, 1}


def looks_like_nccl_tests(sniff: Sniff) -> bool:
    """Whether the text holds an nccl-tests table: a column header naming size, count, type, algbw and busbw."""
    for raw in sniff.text.splitlines():
        tokens = {t.lower() for t in _clean(raw).lstrip("#").split()}
        if {"size", "count", "type", "busbw", "algbw"} <= tokens:
            return True
    return False
