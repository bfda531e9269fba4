"""`rooflab report` as a user runs it: verdicts judged in a process of their own, and no torch.

The report asks ops for facts (read-only, fusion chains, unfused bytes) but never runs one, so the
command must not import torch (200 MB, over a second); the verdicts come from a spawned process and
must make the same regressions page as verdicts judged in this one. The report's pages on a
database are checked here, on the report that process writes (tests/reports/pages/test_report_cli.py
holds the command on a missing and on an empty database)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.reports.synth import device_rows, history, noisy, write_db

REPO = Path(__file__).resolve().parents[3]


def _python(code: str) -> str:
    """stdout of `code` run by a fresh interpreter in the checkout (it must exit 0)."""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _db(tmp_path: Path, *, two_devices: bool = False) -> str:
    """An H100's probes and a history with a planted step; `two_devices`: an A100's probes too (the
    comparison page)."""
    import numpy as np

    url = f"sqlite:///{tmp_path / 'results.db'}"
    rng = np.random.default_rng()
    rows = device_rows(hbm_gbps=float(rng.uniform(2500, 3300)), bf16_tflops=float(rng.uniform(600, 800)))
    if two_devices:
        rows += device_rows(hbm_gbps=float(rng.uniform(1300, 1900)), bf16_tflops=float(rng.uniform(200, 300)),
                            device_name="NVIDIA A100-SXM4-80GB", fingerprint="fp-a100", run_id="run-a100",
                            l2_bytes=40 << 20)
    for i, r in enumerate(rows):
        r["run_order"] = 40 + i // 11
    rows += history(noisy(22, 1.0, 0.02, int(rng.integers(1 << 30))) + [1.25, 1.24])  # a planted step
    write_db(url, rows)
    return url


def test_the_report_command_never_imports_torch_and_finds_the_planted_step(tmp_path: Path) -> None:
    url = _db(tmp_path, two_devices=True)
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['rooflab', 'report', '--db', {url!r}, '--out', {str(tmp_path / 'site')!r}]\n"
        "try:\n"
        "    runpy.run_module('rooflab', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print('TORCH', 'torch' in sys.modules)\n"
    )
    stdout = _python(code)
    assert "TORCH False" in stdout, stdout
    site = tmp_path / "site"
    page = (site / "regressions.html").read_text()
    assert "regression" in page and "stream_triad" in page
    assert (site / "index.html").is_file() and (site / "compare.html").is_file()
    history = (site / "history.html").read_text()  # written by the side process
    assert 'id="history-data"' in history and "stream_triad.v1" in history and '"regression"' in history


def test_spawned_verdicts_make_the_same_regressions_page(tmp_path: Path) -> None:
    from rooflab.reports.pages.history_judge import PendingVerdicts
    from rooflab.reports.pages.report import _env, _regressions_page
    from rooflab.reports.regressions.database_check import load_verdicts

    url = _db(tmp_path)
    here = load_verdicts(url)
    there = PendingVerdicts(url).result()
    assert [v.as_dict() for v in there] == [v.as_dict() for v in here]
    assert [v.points for v in there if v.flagged] == [v.points for v in here if v.flagged]
    assert any(v.status == "regression" for v in there)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert _regressions_page(_env(), tmp_path / "a", there) == _regressions_page(_env(), tmp_path / "b", here)


def test_an_op_module_holds_the_real_torch_once_an_op_has_used_it() -> None:
    code = (
        "import sys\n"
        "from rooflab.suite.ops.registry import all_ops, get_op\n"
        "from rooflab.reports.data.op_facts import unfused_bytes\n"
        "all_ops(); get_op('copy').reads_only; unfused_bytes('cos_cos', {'n': 1024}, 'float32')\n"
        "print('BEFORE', 'torch' in sys.modules)\n"
        "from rooflab.runners.machine.environment import capture\n"
        "from rooflab.suite.case import Case\n"
        "import rooflab.suite.ops.pointwise as pw\n"
        "op = get_op('copy'); _, dev = capture('cpu')\n"
        "p = op.prepare(Case('copy', op.version, op.family, 'eager', 'float32', 'hot', 'launch', {'n': 1000}), "
        "dev, 1)\n"
        "assert p.check(p.fn()) is None\n"
        "import torch\n"
        "print('AFTER', type(pw.torch) is type(sys), pw.torch is torch)\n"
    )
    stdout = _python(code)
    assert "BEFORE False" in stdout and "AFTER True True" in stdout, stdout
