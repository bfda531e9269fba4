"""Each rule of the project is written in one place; an AST scan of the packages finds a second
definition where one can be recognised mechanically (docs/fixed-sets-and-rules.md lists the rules
and their places). Each scan is shown, on planted source, to see every form it looks for.

- the roofline rule (reports/walls/roofline_rule.py): no other module decides a wall (a Wall
  member returned, assigned or passed on), compares an intensity with a ridge point, or holds a
  time against OVERHEAD_FACTOR times a floor;
- the device kind (rooflab/vocab.py `device_kind_of`): no `startswith("cuda")`, no comparison of a
  device string with "cuda" or "cpu", no `split(":")` or `partition(":")` of a device string;
- the result with a figure (db/usable.py): no other `median > 0` test (the places where a median's
  sign means something else are named, with why);
- a rate (db/rates.py): no arithmetic that sets bytes or FLOPs against a time or a rate and scales
  them by a power of ten;
- a dtype's storage (suite/dtypes.py `storage_dtype`): tf32 is mapped to float32 nowhere else;
- the results row's run, device and case columns (db/columns.py `JOINED`, from db/models.py's
  tables): no literal list of four or more of one table's columns elsewhere in db/ and rooflab/.
"""
from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rooflab.db import models
from rooflab.db.columns import JOINED

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("suite", "runners", "db", "reports", "rooflab", "scripts")


@dataclass(frozen=True)
class Source:
    """One parsed module: every node of it (ast.walk's order), each node's parent, and its scopes."""

    nodes: tuple[ast.AST, ...]
    parents: dict[ast.AST, ast.AST]
    scopes: list[tuple[int, int, str]]

    @classmethod
    def parse(cls, text: str) -> Source:
        tree = ast.parse(text)
        nodes = tuple(ast.walk(tree))
        parents = {child: parent for parent in nodes for child in ast.iter_child_nodes(parent)}
        return cls(nodes, parents, _scopes(tree, nodes))


Finder = Callable[[Source], Iterator[int]]


def _names(node: ast.AST) -> set[str]:
    """Every identifier, attribute name and string constant inside `node`, lower case."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id.lower())
        elif isinstance(n, ast.Attribute):
            out.add(n.attr.lower())
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            out.add(n.value.lower())
    return out


def _mentions(node: ast.AST, *words: str) -> bool:
    return any(word in name for name in _names(node) for word in words)


def _scopes(tree: ast.Module, nodes: tuple[ast.AST, ...]) -> list[tuple[int, int, str]]:
    """(first line, last line, name) of every function (among `nodes`, every node of `tree`), and
    of every assignment at module level."""
    out = [(n.lineno, n.end_lineno or n.lineno, n.name) for n in nodes
           if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for n in tree.body:
        if isinstance(n, (ast.Assign, ast.AnnAssign)):
            target = n.targets[0] if isinstance(n, ast.Assign) else n.target
            if isinstance(target, ast.Name):
                out.append((n.lineno, n.end_lineno or n.lineno, target.id))
    return out


def _scope_of(line: int, scopes: list[tuple[int, int, str]]) -> str:
    inside = [s for s in scopes if s[0] <= line <= s[1]]
    return min(inside, key=lambda s: s[1] - s[0])[2] if inside else "<module>"


Sources = dict[str, Source]


@pytest.fixture(scope="module")
def sources() -> Sources:
    """Every module of PACKAGES, parsed and walked once for all the scans of this module (one
    module fixture: the scans run on one worker, which parses each file once)."""
    return {path.relative_to(ROOT).as_posix(): Source.parse(path.read_text())
            for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def scan(finder: Finder, allowed: dict[str, str], sources: Sources, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """`file:line (scope)` of every hit of `finder` in `packages`, outside the files (`path`) and
    the functions or module-level names (`path:name`) that `allowed` names."""
    hits = []
    for rel, source in sources.items():
        if rel.split("/", 1)[0] not in packages or rel in allowed:
            continue
        for line in sorted(set(finder(source))):
            scope = _scope_of(line, source.scopes)
            if f"{rel}:{scope}" not in allowed:
                hits.append(f"{rel}:{line} ({scope})")
    return hits


def hits_in(finder: Finder, source: str) -> list[int]:
    return sorted(set(finder(Source.parse(source))))


# -- the roofline rule ----------------------------------------------------------------------------

def _is_wall_member(node: ast.Attribute) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id == "Wall"


def roofline_rule(source: Source) -> Iterator[int]:
    """A wall decided (a Wall member as what is returned, assigned, chosen or passed on), a ridge
    comparison, or a time held against OVERHEAD_FACTOR."""
    parents = source.parents
    for node in source.nodes:
        if isinstance(node, ast.Attribute) and _is_wall_member(node):
            parent = parents.get(node)
            decided = (isinstance(parent, (ast.Return, ast.IfExp, ast.keyword))
                       or (isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node)
                       or (isinstance(parent, ast.Dict) and node in parent.values))
            if decided:
                yield node.lineno
        elif isinstance(node, ast.Compare) and any(_mentions(side, "ridge") for side in (node.left, *node.comparators)):
            yield node.lineno
        elif isinstance(node, ast.BinOp) and _mentions(node, "overhead_factor"):
            yield node.lineno


ROOFLINE_RULE_HOME = {"reports/walls/roofline_rule.py": "the rule itself"}


def test_the_roofline_rule_is_written_once(sources: Sources) -> None:
    assert scan(roofline_rule, ROOFLINE_RULE_HOME, sources) == []


def test_the_roofline_scan_sees_each_form() -> None:
    source = (
        "def a(c, m):\n    return Wall.COMPUTE if c >= m else Wall.BANDWIDTH\n"  # 2
        "wall = Wall.OVERHEAD\n"  # 3
        "p = Prediction(wall=Wall.COMMS)\n"  # 4
        "row = {'wall': Wall.COMPUTE}\n"  # 5
        "hit = intensity >= ridge_flop_per_byte\n"  # 6
        "near = median_ms <= OVERHEAD_FACTOR * floor\n"  # 7
        "fine = {Wall.COMPUTE: 'green'}\nalso_fine = wall == Wall.OVERHEAD\nfor w in (Wall.COMPUTE,): pass\n"
    )
    assert hits_in(roofline_rule, source) == [2, 3, 4, 5, 6, 7]


# -- the device kind ------------------------------------------------------------------------------

DEVICE_KIND_WORDS = {"cuda", "cuda:", "cpu", "cpu:"}


def _kind_constant(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value in DEVICE_KIND_WORDS
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_kind_constant(e) for e in node.elts)


def device_kind_tests(source: Source) -> Iterator[int]:
    """`x.startswith("cuda")`, a device compared with "cuda" or "cpu", a device split at ":"."""
    for node in source.nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method = node.func.attr
            if method in ("startswith", "endswith") and any(_kind_constant(a) for a in node.args):
                yield node.lineno
            colon = any(isinstance(a, ast.Constant) and a.value == ":" for a in node.args)
            if method in ("split", "rsplit", "partition") and colon and _mentions(node.func.value, "device"):
                yield node.lineno
        elif isinstance(node, ast.Compare):
            sides = (node.left, *node.comparators)
            if any(_kind_constant(s) for s in sides) and any(_mentions(s, "device") for s in sides):
                yield node.lineno


DEVICE_KIND_HOME = {"rooflab/vocab.py": "device_kind_of and device_index_of"}


def test_device_kind_of_is_the_only_device_kind_test(sources: Sources) -> None:
    assert scan(device_kind_tests, DEVICE_KIND_HOME, sources) == []


def test_the_device_kind_scan_sees_each_form() -> None:
    source = (
        "a = torch_device.startswith('cuda')\n"  # 1
        "b = [d for d in devices if d.startswith(('cuda:', 'mps'))]\n"  # 2
        "c = torch_device == 'cpu'\n"  # 3
        "kind = device_kind.split(':', 1)[0]\n"  # 4
        "k, _, i = torch_device.partition(':')\n"  # 5
        "fine = line.startswith('cpu ')\nalso = value == 'cuda'\nkey = case_key.split(':')\n"
    )
    assert hits_in(device_kind_tests, source) == [1, 2, 3, 4, 5]


# -- the result with a figure ---------------------------------------------------------------------

def positive_median_tests(source: Source) -> Iterator[int]:
    """`median > 0` (or `0 < median`) on anything named for a median."""
    for node in source.nodes:
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, op, right = node.left, node.ops[0], node.comparators[0]
            zero = (isinstance(right, ast.Constant) and right.value == 0 and isinstance(op, (ast.Gt, ast.GtE))) or (
                isinstance(left, ast.Constant) and left.value == 0 and isinstance(op, (ast.Lt, ast.LtE)))
            if zero and _mentions(left if isinstance(right, ast.Constant) else right, "median"):
                yield node.lineno


FIGURE_HOME = {
    "db/usable.py": "the rule itself (figure_mask, usable_mask)",
    # where a median is a number to divide by, not a row to keep or drop
    "reports/walls/roofline_rule.py:roofline_bound": "a measured time per call to hold the roofline time against",
    "runners/orchestration/shards.py:estimate_cost_s": "a previous run's median to estimate a case's cost from",
    "runners/machine/clocks.py:energy_per_call_j": "energy per call needs a positive time",
    "runners/engine/stats.py:summarize": "a relative CI needs a positive median",
    "reports/comparisons/run_spread.py:_differences": "the log of medians of rows already trustworthy",
    "db/series_query.py:history_columns": "a keys-only read keeps whether a median is positive; its readers "
                                          "apply figure_mask to it with the status",
}


def test_the_figure_rule_is_written_once(sources: Sources) -> None:
    assert scan(positive_median_tests, FIGURE_HOME, sources) == []


def test_the_figure_scan_sees_each_form() -> None:
    source = (
        "ok = (df['status'] == 'ok') & (pd.to_numeric(df['median_ms'], errors='coerce') > 0)\n"  # 1
        "ok = h.median_ms > 0\n"  # 2
        "ok = 0 < median\n"  # 3
        "fine = left > 0\nalso = median_ms > 1\n"
    )
    assert hits_in(positive_median_tests, source) == [1, 2, 3]


# -- rates ----------------------------------------------------------------------------------------

POWERS_OF_TEN = {1e3 ** k for k in (-4, -3, -2, 2, 3, 4)}  # 1e-12 ... 1e-6, 1e6 ... 1e12
WORK_WORDS = ("bytes", "flops")
TIME_OR_RATE_WORDS = ("median", "_ms", "gbps", "tflops")


def hand_rates(source: Source) -> Iterator[int]:
    """Bytes or FLOPs set against a time or a rate and scaled by a power of ten (1e6 or more,
    1e-6 or less): a rate, or a time at a rate, worked out by hand."""
    for node in source.nodes:
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
            scaled = any(isinstance(side, ast.Constant) and side.value in POWERS_OF_TEN
                         for side in (node.left, node.right))
            if scaled and _mentions(node, *WORK_WORDS) and _mentions(node, *TIME_OR_RATE_WORDS):
                yield node.lineno


RATES_HOME = {"db/rates.py": "the one derivation of a rate"}


def test_every_rate_goes_through_db_rates(sources: Sources) -> None:
    assert scan(hand_rates, RATES_HOME, sources) == []


def test_the_rate_scan_sees_each_form() -> None:
    source = (
        "gbps = float(r['bytes']) / float(r['median_ms']) / 1e6\n"  # 1
        "s = max(nbytes / (NOMINAL_GBPS * 1e9), flops / (1e12 * NOMINAL_TFLOPS))\n"  # 2
        "tflops = flops / median_ms / 1e9\n"  # 3
        "fine = (t1 - t0) / 1e6\nalso = bus_width_bits / 8 * clock_mhz * 1e6\nmb = result.bytes / 1e6\n"
    )
    assert hits_in(hand_rates, source) == [1, 2, 3]


# -- a dtype's storage ----------------------------------------------------------------------------

def _str(node: ast.AST | None, value: str) -> bool:
    return isinstance(node, ast.Constant) and node.value == value


def tf32_as_float32(source: Source) -> Iterator[int]:
    """tf32 mapped to float32: `"float32" if ... "tf32" ...`, `{"tf32": "float32"}`, a test of
    tf32 whose body names float32, or the two in one membership test."""
    for node in source.nodes:
        if isinstance(node, ast.IfExp) and _mentions(node.test, "tf32") and (
                _str(node.body, "float32") or _str(node.orelse, "float32")):
            yield node.lineno
        elif isinstance(node, ast.Dict) and any(_str(k, "tf32") and _str(v, "float32")
                                                for k, v in zip(node.keys, node.values, strict=True)):
            yield node.lineno
        elif isinstance(node, ast.If) and _mentions(node.test, "tf32") and any(
                _str(n, "float32") for stmt in node.body for n in ast.walk(stmt)):
            yield node.lineno
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            for side in node.comparators:
                if isinstance(side, (ast.Tuple, ast.List, ast.Set)) and {"tf32", "float32"} <= {
                        e.value for e in side.elts if isinstance(e, ast.Constant)}:
                    yield node.lineno


DTYPE_HOME = {"suite/dtypes.py": "storage_dtype, the one mapping"}


def test_tf32_is_mapped_to_float32_once(sources: Sources) -> None:
    assert scan(tf32_as_float32, DTYPE_HOME, sources) == []


def test_the_dtype_scan_sees_each_form() -> None:
    source = (
        "name = 'float32' if dtype == 'tf32' else dtype\n"  # 1
        "STORED = {'tf32': 'float32'}\n"  # 2
        "if dtype in HALF or dtype == 'tf32':\n    order.append('float32')\n"  # 3
        "if dtype not in ('float32', 'tf32'):\n    pass\n"  # 5
        "fine = dtype == 'tf32'\nalso = ('float64', 'float32', 'tf32')\n"
    )
    assert hits_in(tf32_as_float32, source) == [1, 2, 3, 5]


# -- the results row's run, device and case columns ------------------------------------------------

TABLES = (models.Run, models.Environment, models.Case)
TABLE_COLUMNS = [{c.name for c in t.__table__.columns} | {n for n, j in JOINED.items() if j.table is t}
                 for t in TABLES]
TYPED_OUT = 4  # this many of one table's columns in one literal is that table's list typed out again


def _literal_strings(node: ast.AST) -> set[str]:
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    if isinstance(node, ast.Dict):
        return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return set()


def typed_out_columns(source: Source) -> Iterator[int]:
    """A literal tuple, list, set or dict naming TYPED_OUT or more columns of one of the runs,
    environments and cases tables."""
    for node in source.nodes:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
            names = _literal_strings(node)
            if any(len(names & columns) >= TYPED_OUT for columns in TABLE_COLUMNS):
                yield node.lineno


# frames that select a few columns of each table for one purpose are views, not the tables' lists
COLUMNS_HOME = {
    "db/columns.py": "JOINED, the one list",
    "db/models.py": "the tables themselves",
    "db/collectives.py": "the stragglers' frame: the columns the interconnect section shows",
    "db/counters.py": "the counters frame: the columns the counters report shows",
    "db/crosscheck.py": "the cross-check frame: the columns the cross-check page shows",
    "db/layer_query.py": "the layer profiles frame: the columns the breakdown shows",
    "db/series_query.py": "the history's small tables: the columns the history pages draw",
    "db/fleet_query.py": "the fleet's frame: the columns `rooflab fleet` judges",
    "db/migrations/versions/0001_initial.py": "a revision is frozen history: the tables as they were created",
    "db/query.py:RUN_FRAME_COLUMNS": "rooflab.runs(): the runs table's columns in the order that public frame has",
    "db/query.py:ENVIRONMENT_FRAME_COLUMNS": "environments(): the devices in the order that frame has",
    "db/query.py:result_counts": "the run counts' frame: the columns a report chooses runs by",
}


def test_the_run_device_and_case_columns_are_listed_once(sources: Sources) -> None:
    assert scan(typed_out_columns, COLUMNS_HOME, sources, packages=("db", "rooflab")) == []


def test_the_column_scan_sees_each_form() -> None:
    source = (
        "RUN = ('run_id', 'suite', 'spec_hash', 'started_at')\n"  # 1
        "env = {'device_name': 1, 'device_kind': 2, 'l2_bytes': 3, 'sm_count': 4}\n"  # 2
        "fine = ('run_id', 'device_name', 'case_key', 'median_ms')\n"
    )
    assert hits_in(typed_out_columns, source) == [1, 2]
