"""Dependencies point one way: the vocabulary and the record at the bottom, then suite and db, then
runners and reports; only the command line (and the nightly job, which puts a night's steps in order
as the command line does) wires reports into runners. Inside reports/ its rooms stand on floors
(REPORT_FLOORS) and import only their own room and the floors below. An AST scan of every import,
inside functions and TYPE_CHECKING blocks too; and no modules import one another around a circle."""
from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# package -> the rooflab packages (or bottom modules) it may import
ALLOWED = {
    "suite": {"suite", "vocab", "record", "errors"},
    "db": {"db", "vocab", "record", "errors"},
    "runners": {"runners", "suite", "db", "vocab", "record", "errors"},
    "reports": {"reports", "db", "suite", "vocab", "record", "errors"},
}
# modules that wire the packages together on purpose (docs/development.md, "Layout")
WIRING = {
    "runners/cli": "the command line: the one place that wires suite, runners, db and reports together",
    "runners/cluster/nightly.py":
        "a night's steps in order (run, history check, report), as the CLI calls them",
    "runners/cluster/slurm_job.py":
        "names the --fail-on choices of the nightly step it writes (reports.regressions.verdicts)",
}

# reports/ inside: each room stands on a floor and imports only its own room and the floors below
# (docs/design.md, "Packages"). errors.py and allocator.py at the top of reports/ are the ground: they
# import no room. walls stands below comparisons: a comparison predicts each case's speedup from the
# wall the diagnosis finds it at (comparisons/speedup_table.py). comparisons and regressions share a
# floor and do not import each other; fleet stands above regressions (a device's own history speaks
# its verdicts' words); pages draws what all of them give.
REPORT_FLOORS = {
    "errors": 0, "allocator": 0,
    "data": 1,  # the reads and the helpers over results frames
    "roofs": 2,  # a device's roofs, and which runs they come from
    "walls": 3,  # which wall a case hits
    "comparisons": 4, "regressions": 4,
    "fleet": 5,  # each device against its siblings and its own past
    "pages": 6,  # the HTML report, and what it assembles to draw
}

@functools.cache
def _parsed(path: Path) -> ast.Module:
    """The syntax tree of a file, parsed once for all the scans of this module."""
    return ast.parse(path.read_text())


def _rooflab_imports(path: Path) -> list[str]:
    tree = _parsed(path)
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
    return [n for n in names if n == "rooflab" or n.startswith("rooflab.")]


def _wiring(rel: str) -> bool:
    return any(rel == w or rel.startswith(w + "/") for w in WIRING)


def upward_imports(root: Path) -> list[str]:
    """`file imports module` for every import of a package above the importing one under `root`."""
    wrong = []
    for package, allowed in ALLOWED.items():
        for path in sorted((root / package).rglob("*.py")):
            rel = str(path.relative_to(root))
            if _wiring(rel):
                continue
            for name in _rooflab_imports(path):
                part = name.split(".")[1] if "." in name else "api"
                if part not in allowed:
                    wrong.append(f"{rel} imports {name}")
    return wrong


def test_each_package_imports_only_what_lies_below_it():
    assert upward_imports(ROOT) == []


def test_the_bottom_modules_import_nothing_above_them():
    assert _rooflab_imports(ROOT / "rooflab" / "vocab.py") == []
    assert _rooflab_imports(ROOT / "rooflab" / "errors.py") == []
    assert set(_rooflab_imports(ROOT / "rooflab" / "record.py")) <= {"rooflab.vocab"}


def test_a_planted_upward_import_is_caught(tmp_path):
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "bad.py").write_text("def f():\n    from rooflab.runners.engine.timing import measure\n")
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "fine.py").write_text("from rooflab.vocab import CacheMode\nimport rooflab\n")
    assert sorted(upward_imports(tmp_path)) == ["db/bad.py imports rooflab.runners.engine.timing",
                                                "suite/fine.py imports rooflab"]


def _report_rooms_imported(path: Path) -> list[str]:
    """The rooms of reports/ that `path` imports (`from rooflab.reports import pages` names the room)."""
    rooms: list[str] = []
    for node in ast.walk(_parsed(path)):
        if isinstance(node, ast.ImportFrom) and node.module == "rooflab.reports" and node.level == 0:
            rooms.extend(a.name for a in node.names)
        else:
            modules = ([node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                       else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            rooms.extend(m.split(".")[2] for m in modules if m.startswith("rooflab.reports."))
    return rooms


def floor_breaches(root: Path) -> list[str]:
    """`file (room) imports room` for every import inside reports/ of another room on the same floor
    or a floor above, and `file: room R has no floor` for a room REPORT_FLOORS does not place."""
    wrong = []
    for path in sorted((root / "reports").rglob("*.py")):
        rel = path.relative_to(root)
        room = rel.parts[1] if len(rel.parts) > 2 else rel.stem
        if room == "__init__":
            room = "errors"  # the package's own docstring: the ground
        if room not in REPORT_FLOORS:
            wrong.append(f"{rel}: room {room} has no floor")
            continue
        for other in _report_rooms_imported(path):
            if other not in REPORT_FLOORS:
                wrong.append(f"{rel}: room {other} has no floor")
            elif other != room and REPORT_FLOORS[other] >= REPORT_FLOORS[room]:
                wrong.append(f"{rel} ({room}) imports {other}")
    return wrong


def test_each_room_of_reports_imports_only_its_own_and_the_floors_below():
    assert floor_breaches(ROOT) == []


def test_a_planted_back_import_inside_reports_is_caught(tmp_path):
    files = {
        "reports/errors.py": "from rooflab.errors import UserError\n",
        "reports/allocator.py": "from rooflab.reports.data import frames\n",  # the ground imports a room
        "reports/data/reads.py": "def f():\n    from rooflab.reports.pages.report import render_report\n",
        "reports/data/frames.py": "from rooflab.reports.errors import ReportInputError\n",
        "reports/roofs/ceilings.py": ("from rooflab.reports.walls import diagnosis\n"
                                      "from rooflab.reports.data import reads\n"),
        "reports/walls/predict.py": "import rooflab.reports.roofs.ceilings\n",
        "reports/comparisons/pairing.py": "from rooflab.reports.walls.diagnosis import diagnose\n",
        "reports/regressions/series.py": "from rooflab.reports.comparisons.pairing import CASE_RUN_COLUMNS\n",
        "reports/pages/report.py": ("from rooflab.reports import comparisons, regressions, roofs, walls\n"
                                    "from rooflab.reports.data.reads import load_results\n"),
        "reports/attic/old.py": "import json\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert floor_breaches(tmp_path) == [
        "reports/allocator.py (allocator) imports data",
        "reports/attic/old.py: room attic has no floor",
        "reports/data/reads.py (data) imports pages",
        "reports/regressions/series.py (regressions) imports comparisons",
        "reports/roofs/ceilings.py (roofs) imports walls",
    ]


def _module_name(rel: Path) -> str:
    parts = list(rel.with_suffix("").parts)
    parts = parts[1:] if parts[0] == "rooflab" else parts
    return ".".join(["rooflab", *parts[:-1]] if parts[-1] == "__init__" else ["rooflab", *parts])


def _import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the project modules it imports (anywhere in it); `from package import module` is an
    import of that module, and a module's own packages (imported before it) are left out."""
    paths = {_module_name(p.relative_to(root)): p for d in (*ALLOWED, "rooflab") for p in (root / d).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets: set[str] = set()
        for node in ast.walk(_parsed(path)):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = {f"{node.module}.{a.name}" for a in node.names} & paths.keys()
                targets |= subs or {node.module}
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
        graph[name] = {t for t in targets & paths.keys() if t != name and not name.startswith(t + ".")}
    return graph


def import_circles(root: Path) -> list[list[str]]:
    """Every set of modules that import one another around a circle (a strongly connected component
    of the import graph with more than one module), each sorted."""
    graph = _import_graph(root)
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        order[v] = low[v] = len(order)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            component: list[str] = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                circles.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph)))
    try:
        for v in sorted(graph):
            if v not in order:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(circles)


def test_no_modules_import_one_another_around_a_circle():
    assert import_circles(ROOT) == []


def test_a_planted_circle_is_caught_even_behind_a_function(tmp_path):
    files = {
        "db/handle.py": "from rooflab.db.schema import read_state\n",
        "db/schema.py": "def f():\n    from rooflab.db.handle import Database\n",
        "reports/roofs/ceilings.py": "from rooflab.reports.roofs.models import Ceiling\n",
        "reports/roofs/models.py": "from rooflab.vocab import CeilingKind\n",
        "reports/roofs/__init__.py": "",
        "reports/__init__.py": "",
        "runners/cli/__init__.py": "from rooflab.runners.cli.app import main\n",
        "runners/cli/app.py": "from rooflab.runners.cli import run_cmd\n",  # a package and its modules: no circle
        "runners/cli/run_cmd.py": "import typer\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "suite").mkdir()
    (tmp_path / "rooflab").mkdir()
    (tmp_path / "rooflab" / "vocab.py").write_text("import enum\n")
    assert import_circles(tmp_path) == [["rooflab.db.handle", "rooflab.db.schema"]]
