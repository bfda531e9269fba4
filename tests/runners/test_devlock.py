"""One run per device: the lock is held by a real second process, released when it dies, waited
for up to a bound, refused with the holder named, overridden with --no-lock."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rooflab.db.query import results
from rooflab.runners.machine.devlock import DeviceBusyError, device_locks, lock_dir, lock_name
from rooflab.vocab import ExitCode
from tests.runners.gate import GATE_ENV, wait_for_file
from tests.runners.run_process import REPO, Rooflab, child_env
from tests.runners.test_run_cli import PLANTED_SPEC, write

HOLD = """\
import sys, time
from rooflab.runners.machine.devlock import device_locks
with device_locks(["cpu"], run_id="holder-run", command="rooflab run holder"):
    print("held", flush=True)
    time.sleep(float(sys.argv[1]))
"""

# Two cases of planted_gate: the first run stays inside its first case, holding the device, until the
# test opens the gate (tests/runners/planted_ops.py), however slowly the other processes start
GATE_SPEC = """\
name: gated
defaults:
  cache: [hot]
  timing: {warmup_ms: 0, warmup_calls: 1, min_samples: 3, max_samples: 3, min_time_ms: 0, max_time_ms: 10}
benchmarks:
  - name: gated
    op: planted_gate
    params:
      n: [256, 512]
"""


def holder(seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(seconds)], cwd=REPO, env=dict(os.environ),
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    proc.stdout.close()  # it says nothing more
    return proc


def test_a_held_lock_refuses_names_the_holder_and_is_freed_when_the_holder_is_killed() -> None:
    proc = holder(60)
    try:
        started = time.monotonic()
        with pytest.raises(DeviceBusyError) as info:
            with device_locks(["cpu"], run_id="second", command="rooflab run second"):
                pytest.fail("the lock of a busy device was taken")
        assert time.monotonic() - started < 2  # no waiting by default
        message = str(info.value)
        assert f"pid {proc.pid}" in message and "holder-run" in message and "rooflab run holder" in message
        assert "--no-lock" in message and "--lock-wait-s" in message
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    notes: list[str] = []
    with device_locks(["cpu"], run_id="third", command="c", note=notes.append) as paths:
        held = json.loads(paths[0].read_text())
        assert held["pid"] == os.getpid() and held["run_id"] == "third"
    assert any(f"stale lock of cpu left by pid {proc.pid}" in n for n in notes), notes
    assert paths[0].read_text() == ""  # released: nothing claims the device any more


def test_a_second_run_waits_up_to_its_bound() -> None:
    proc = holder(1.5)
    notes: list[str] = []
    started = time.monotonic()
    with device_locks(["cpu"], run_id="waiter", command="c", wait_s=60, note=notes.append):
        waited = time.monotonic() - started
    assert 0.5 < waited < 30, waited  # the holder keeps it about 1.5 s after saying "held"
    assert proc.wait(10) == 0
    assert any("waiting up to 60 s for cpu" in n and "holder-run" in n for n in notes), notes
    short = holder(60)
    try:
        started = time.monotonic()
        with pytest.raises(DeviceBusyError, match="after waiting 0.6 s"):
            with device_locks(["cpu"], run_id="impatient", command="c", wait_s=0.6):
                pass
        assert 0.5 < time.monotonic() - started < 5
    finally:
        short.kill()
        short.wait(10)


def test_lock_names_follow_the_physical_device(monkeypatch: pytest.MonkeyPatch) -> None:
    assert lock_name("cpu") == "cpu"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-5f7e0a1b-aaaa,3")
    assert lock_name("cuda:0") == "gpu-5f7e0a1b-aaaa"
    from rooflab.runners.machine import devlock

    monkeypatch.setattr(devlock, "_nvml_uuid", lambda ordinal: None)
    assert lock_name("cuda:1") == "cuda-3"  # the host's GPU 3, whatever torch calls it
    monkeypatch.setattr(devlock, "_nvml_uuid", lambda ordinal: f"uuid-of-{ordinal}")
    assert lock_name("cuda:1") == "gpu-uuid-of-3"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert lock_name("cuda:2") == "gpu-uuid-of-2"


def test_two_runs_on_one_device_refuse_wait_and_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    monkeypatch.setenv(GATE_ENV, str(gate))  # the runs' environment (child_env) carries it
    gated = write(tmp_path, "gated.yaml", GATE_SPEC)
    quick = write(tmp_path, "planted.yaml", PLANTED_SPEC)
    first_url = f"sqlite:///{tmp_path / 'first.db'}"
    first = Rooflab(str(gated), "--db", first_url, "--run-id", "first", "--device", "cpu", "--case-timeout-s", "600")
    wait_for_file(gate / "waiting-256", first.proc, timeout_s=240)  # inside its first case: the lock is held

    def run(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "rooflab", "run", str(quick), "--device", "cpu", *args],
                                cwd=REPO, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    busy = run("--db", str(tmp_path / "busy.db"), "-q")
    forced = run("--db", str(tmp_path / "forced.db"), "-q", "--no-lock")
    busy_out, busy_err = busy.communicate(timeout=300)
    assert busy.returncode == ExitCode.DEVICE_BUSY, busy_out + busy_err
    assert "cpu is busy" in busy_err and f"pid {first.proc.pid}" in busy_err and "run first" in busy_err
    assert "Traceback" not in busy_err
    assert not (tmp_path / "busy.db").exists()  # refused before the database was opened
    forced_out, forced_err = forced.communicate(timeout=300)
    assert forced.returncode == 0, forced_out + forced_err  # measured while the first run held the device
    assert first.proc.poll() is None  # the first run held the lock all along

    waiter_url = f"sqlite:///{tmp_path / 'waiter.db'}"
    waiter = Rooflab(str(quick), "--db", waiter_url, "--device", "cpu", "--lock-wait-s", "300")
    waiter.wait_for("waiting up to 300 s for cpu", timeout_s=300)
    assert first.proc.poll() is None  # still inside its first case
    first.proc.send_signal(signal.SIGINT)  # it finishes its case in flight, then releases the device
    first.wait_for("finishing the case in flight", timeout_s=60)
    (gate / "open").touch()
    code, out = first.finish()
    assert code == 130, out
    assert len(results(first_url)) == 1  # the case in flight, stored; the second never started
    code, out = waiter.finish(timeout_s=300)
    assert code == 0, out
    first_done = results(first_url)["measured_at"].max()
    assert results(waiter_url)["measured_at"].min() >= first_done  # it measured only after the first run
    assert [p.name for p in lock_dir().glob("*.lock")] == ["cpu.lock"]


def test_a_refused_run_starts_no_fork_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fork server imports torch (seconds of CPU): it starts once the input is checked and the
    device held, never for a run that is refused (a busy device, a filter that matches nothing, a
    resumed run that is not there)."""
    from rooflab.db.handle import open_for_writing
    from rooflab.runners.errors import UserInputError
    from rooflab.runners.orchestration import session
    from rooflab.runners.orchestration.run_options import RunOptions

    started: list[str] = []
    monkeypatch.setattr(session, "prestart_worker_server", lambda: started.append("fork server"))
    spec = write(tmp_path, "copy.yaml",
                 "name: copy\nbenchmarks:\n  - {name: c, op: copy, devices: [cpu], params: {n: 4096}}\n")
    db = f"sqlite:///{tmp_path / 'r.db'}"
    proc = holder(60)
    try:
        with pytest.raises(DeviceBusyError):
            session.run_suite(spec, db=db, options=RunOptions(device="cpu", quiet=True), handle_signals=False)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    with pytest.raises(UserInputError, match="matches the filters"):
        session.run_suite(spec, db=db, options=RunOptions(device="cpu", quiet=True, filters=("op=scale",)),
                          handle_signals=False)
    open_for_writing(db).dispose()  # a database without that run
    with pytest.raises(UserInputError, match="no such run"):
        session.run_suite(spec, db=db, options=RunOptions(device="cpu", quiet=True, resume="absent"),
                          handle_signals=False)
    assert started == []
