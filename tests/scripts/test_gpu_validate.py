"""scripts/gpu-validate.sh: each step logged with its status, a failing or hanging step does not stop
the rest, the budget is kept, the archive is written. A fake interpreter (GV_PYTHON) stands in for
Python so that these run in about a second each; the real CPU path is run by hand
(`bash scripts/gpu-validate.sh /tmp/gv`, docs/gpu-validation.md)."""
from __future__ import annotations

import csv
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-validate.sh"


def fake_python(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "fakepython"
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)
    return path


def run(tmp_path: Path, python: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    out = tmp_path / "out"
    full_env = {**os.environ, "GV_PYTHON": str(python), "GV_DEVICE": "cpu", **env}
    proc = subprocess.run(["bash", str(SCRIPT), *args, str(out)], capture_output=True, text=True, env=full_env,
                          timeout=120, cwd=tmp_path)
    steps_file = out / "steps.tsv"
    rows = list(csv.DictReader(steps_file.open(), delimiter="\t")) if steps_file.exists() else []
    return proc, rows


def test_a_failing_step_is_logged_and_the_rest_goes_on(tmp_path):
    python = fake_python(tmp_path, 'echo "planted failure: $*" >&2; exit 7\n')
    proc, rows = run(tmp_path, python, "--steps", "devices,versions,test-gpu,ceilings")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    by_step = {r["step"]: r for r in rows}
    assert list(by_step) == ["devices", "versions", "test-gpu", "ceilings"]
    assert by_step["devices"]["status"] == "failed" and by_step["devices"]["rc"] == "7"
    assert "planted failure" in by_step["devices"]["note"]
    assert by_step["versions"]["status"] == "failed"
    assert by_step["test-gpu"]["status"] == "skipped" and "no CUDA device" in by_step["test-gpu"]["note"]
    assert by_step["ceilings"]["status"] == "skipped" and "no results database" in by_step["ceilings"]["note"]
    assert "planted failure" in (tmp_path / "out" / "logs" / "devices.log").read_text()


def test_a_hanging_step_is_stopped_at_its_timeout(tmp_path):
    python = fake_python(tmp_path, 'case "$*" in *devices*) sleep 60;; esac; echo "{}"; exit 0\n')
    proc, rows = run(tmp_path, python, "--steps", "devices,versions", GV_TIMEOUT_DEVICES="1")
    by_step = {r["step"]: r for r in rows}
    assert by_step["devices"]["status"] == "timeout" and by_step["devices"]["rc"] == "124"
    assert float(by_step["devices"]["seconds"]) < 15
    assert by_step["versions"]["status"] == "ok"
    assert proc.returncode == 1


def test_steps_past_the_budget_are_left_out_and_said_so(tmp_path):
    python = fake_python(tmp_path, 'exit 0\n')
    # `known` keeps a reserve of 75 s: with a 3 s budget nothing fits
    proc, rows = run(tmp_path, python, "--steps", "devices,known", "--budget-s", "3")
    assert [r["status"] for r in rows] == ["skipped", "skipped"]
    assert all("budget spent" in r["note"] for r in rows)
    assert proc.returncode == 1


def test_the_archive_holds_every_artifact(tmp_path):
    python = fake_python(tmp_path, 'echo "{\\"ok\\": true}"; exit 0\n')
    archive = tmp_path / "back" / "gv.tar.gz"
    proc, rows = run(tmp_path, python, "--steps", "env,devices", "--archive", str(archive))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = set(tarfile.open(archive).getnames())
    for name in ("out/steps.tsv", "out/artifacts.txt", "out/env/devices.json", "out/env/system.txt",
                 "out/logs/env.log"):
        assert name in names


@pytest.mark.parametrize("args, message", [
    (["--steps", "devices,bogus"], "unknown step 'bogus'"),
    (["--part", "3"], "--part 3: allowed all, 1, 2"),
    (["--budget-s", "ten"], "--budget-s ten"),
])
def test_bad_usage_is_one_message_and_exit_code_2(tmp_path, args, message):
    proc, rows = run(tmp_path, fake_python(tmp_path, "exit 0\n"), *args)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_counters_on_a_cpu_must_be_refused_and_is_then_skipped(tmp_path):
    refusing = fake_python(tmp_path,
                           'case "$*" in *"counters quick --device cpu"*) echo "error: --device cpu is a CPU: '
                           'no counters" >&2; exit 2;; esac; exit 0\n')
    proc, rows = run(tmp_path, refusing, "--steps", "counters")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rows[0]["status"] == "skipped" and "refused as it should" in rows[0]["note"]
    assert "--device cpu is a CPU" in (tmp_path / "out" / "counters-refusal.txt").read_text()
    accepting = fake_python(tmp_path, "exit 0\n")  # a rooflab that would count on a CPU is a failure
    proc, rows = run(tmp_path, accepting, "--steps", "counters")
    assert proc.returncode == 1 and rows[0]["status"] == "failed"


def test_counters_on_a_gpu_runs_each_set_of_cases_under_the_given_ncu(tmp_path):
    calls = tmp_path / "calls.txt"
    python = fake_python(tmp_path, f'echo "$*" >> {calls}\n'
                                   'case "$*" in *"counters quick --device cuda"*) echo \'{"readings": []}\';; esac\n'
                                   'exit 0\n')
    ncu = tmp_path / "ncu"
    ncu.write_text("#!/usr/bin/env bash\necho 'Version 2025.1.1.0'\n")
    ncu.chmod(0o755)
    proc, rows = run(tmp_path, python, "--steps", "counters", GV_DEVICE="cuda", GV_NCU=str(ncu))
    assert proc.returncode == 0 and rows[0]["status"] == "ok", proc.stdout + proc.stderr
    runs = [line for line in calls.read_text().splitlines() if line.startswith("-m rooflab counters quick")]
    assert len(runs) == 6
    assert all(f"--device cuda --ncu {ncu} -f op=" in r and "--keep-reports" in r and "--json" in r for r in runs)
    assert "-f op=cos_cos" in runs[1] and "-f kernel=sdpa_flash,naive" in runs[4]
    assert "Version 2025.1.1.0" in (tmp_path / "out" / "logs" / "counters.log").read_text()


@pytest.mark.parametrize("device, gpus, status, args", [
    ("cuda", 8, "ok", "--devices all -f family=collective"),
    ("cuda", 1, "skipped", "--devices all -f family=collective"),  # run all the same: every case says why
    ("cpu", 0, "ok", "--device cpu -f family=collective --max-time-ms 200"),
])
def test_collectives_runs_quicks_collective_cases_over_every_gpu(tmp_path, device, gpus, status, args):
    calls = tmp_path / "calls.txt"
    python = fake_python(tmp_path, f'echo "$*" >> {calls}\ncase "$*" in *device_count*) echo {gpus};; esac\nexit 0\n')
    proc, rows = run(tmp_path, python, "--steps", "collectives", GV_DEVICE=device)
    assert proc.returncode == 0 and [r["status"] for r in rows] == [status], proc.stdout + proc.stderr
    runs = [line for line in calls.read_text().splitlines() if line.startswith("-m rooflab run")]
    out = tmp_path / "out"
    assert runs == [f"-m rooflab run quick --db sqlite:///{out}/rooflab.db --json {args}"]
    assert (out / "run-collectives.json").is_file()
    if status == "skipped":
        assert "a collective needs at least 2 GPUs" in rows[0]["note"]
