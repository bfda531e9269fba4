"""The values of the fixed sets (docs/fixed-sets-and-rules.md) are not spelled out as bare strings in
the packages: a comparison, a default, a status given to a call or a tuple of them names the enum
member, so that renaming or adding a member is one change. The enum definitions are the one place
the strings stand."""
from __future__ import annotations

import ast
from pathlib import Path

from rooflab.reports.regressions.verdicts import FailOn, Verdict
from rooflab.vocab import CacheMode, Quality, ResultStatus, RunStatus, StopReason, TimingMode

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("suite", "runners", "db", "reports", "rooflab")
# values distinctive enough that a bare one in a comparison or a status argument is the set's value
GUARDED = {str(v) for enum in (ResultStatus, RunStatus, Verdict, FailOn, CacheMode, TimingMode, Quality, StopReason)
           for v in enum}
# keyword arguments that carry one of the sets
SET_KEYWORDS = {"status", "cache", "timing_mode", "quality", "stop_reason", "fail_on", "verdict"}
# where the same word is something else: (file, value) -> why
OTHER_MEANING = {
    ("reports/roofs/ceilings.py", "launch"): "the `launch` probe op's name and the launch-floor ceiling kind",
    ("reports/pages/plots.py", "launch"): "the `launch` probe op's name",
    ("reports/fleet/walls.py", "launch"): "the `launch` probe op's name",
    # the public signature, as the README and help(rooflab.measure) show it (the value is checked by
    # suite.case.modes_problem, so a renamed member would be refused there)
    ("rooflab/api.py", "cold"): "rooflab.measure's documented default",
    ("rooflab/api.py", "launch"): "rooflab.measure's documented default",
    # a migration is history: it holds the values of its own revision and must not follow a later rename
    ("db/migrations/versions/0009_pace_peer_mode.py", "ok"): "the status value at revision 0009",
}


def _strings(node: ast.AST) -> list[str]:
    """The string constants of a node that is a string or a tuple/list/set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def bare_values(source: str) -> list[tuple[int, str]]:
    """(line, value) of each guarded value written as a bare string where a set member is meant."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        candidates: list[ast.expr] = []
        if isinstance(node, ast.Compare):
            candidates = [node.left, *node.comparators]
        elif isinstance(node, ast.arguments):
            candidates = [*node.defaults, *(d for d in node.kw_defaults if d is not None)]
        elif isinstance(node, ast.Call):
            candidates = [k.value for k in node.keywords if k.arg in SET_KEYWORDS]
            if isinstance(node.func, ast.Attribute) and node.func.attr == "finish_run":
                candidates += node.args[1:2]
            if isinstance(node.func, ast.Attribute) and node.func.attr == "isin":  # a pandas column's values
                candidates += node.args
        elif isinstance(node, ast.comprehension):
            candidates = [node.iter]
        for c in candidates:
            found += [(c.lineno, s) for s in _strings(c) if s in GUARDED]
    return found


def test_no_fixed_set_value_is_spelled_out_in_the_packages():
    hits = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for line, value in bare_values(path.read_text()):
                if (rel, value) not in OTHER_MEANING:
                    hits.append(f"{rel}:{line}: {value!r}")
    assert hits == []


def test_the_guard_sees_each_form():
    source = (
        'a = x == "ok"\n'
        'b = y in ("failed", "crashed")\n'
        'def f(cache="cold", *, mode="graph"): pass\n'
        'g(status="skipped")\n'
        'store.finish_run(run_id, "interrupted", shard=None)\n'
        'c = {s: 1 for s in ("regression", "suspect")}\n'
        'd = df["status"].isin(["incorrect"])\n'
        'fine = x == "something else"\n'
    )
    assert sorted(bare_values(source)) == [(1, "ok"), (2, "crashed"), (2, "failed"), (3, "cold"), (3, "graph"),
                                           (4, "skipped"), (5, "interrupted"), (6, "regression"), (6, "suspect"),
                                           (7, "incorrect")]
