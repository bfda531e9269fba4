"""A CPU fleet on one machine: one device per core, each worker pinned to its core with one thread,
each result under its own device key; a core made busy by a planted busy loop comes out slower."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rooflab.db.query import results
from rooflab.runners.machine.environment import cpu_core_uuid, known_without_torch, node_name
from rooflab.runners.orchestration.held import held_on
from rooflab.runners.orchestration.run_options import RunOptions
from rooflab.runners.orchestration.session import run_suite
from rooflab.suite.spec import expand, load_spec

# a hot 768^3 float32 GEMM: about 10 ms a call on one core, longer than the slices a core shared with a
# busy loop gives it, so that the busy loop shows in the median (calls shorter than the worker's turn
# would slip between the loop's turns)
SPEC = """\
name: cores
benchmarks:
  - name: gemm
    op: matmul
    devices: [cpu]
    dtypes: [float32]
    cache: [hot]
    timing: {warmup_ms: 50, warmup_calls: 1, min_samples: 3, min_time_ms: 200, max_time_ms: 1000}
    params: {m=n=k: 768}
"""
# A busy loop pinned to the slowed core, at nice -20 where this process may raise a priority (about 87
# times the worker's weight: the worker, which pins itself to the core once it has started, then gets
# about 1 % of it). The kernel balances the cores by the weight of what runs on them: at an equal
# priority it would move the machine's other processes off the busy core onto the quiet one until
# both carry the same, and on a machine shared with other work the two devices could come out even
# (or the quiet one slower: with 8 runnable processes elsewhere and the loop at nice -15, 1.6x
# only); against this weight the quiet core's worker would need 57 other processes beside it to fall
# as low. Where the priority may not be raised, four loops at the same one stand in (weaker on a
# busy machine). The loop holds the core for the seconds the slowed worker takes (about 10).
# (A loop ends by itself when the test's process is gone, however that ends.)
BUSY = """\
import os, sys
parent = os.getppid()
os.sched_setaffinity(0, {int(sys.argv[1])})
try:
    os.nice(-20)
except PermissionError:
    pass
while os.getppid() == parent:
    for _ in range(200000):
        pass
"""


def _busy_loops(core: int) -> list[subprocess.Popen]:
    count = 1 if os.geteuid() == 0 else 4
    return [subprocess.Popen([sys.executable, "-c", BUSY, str(core)], stdin=subprocess.DEVNULL) for _ in range(count)]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs this process may run on")
def test_a_busy_core_is_the_slower_device(tmp_path: Path) -> None:
    quiet, busy = sorted(os.sched_getaffinity(0))[:2]
    spec = tmp_path / "cores.yaml"
    spec.write_text(SPEC)
    url = f"sqlite:///{tmp_path / 'r.db'}"
    host = node_name()
    loops = _busy_loops(busy)
    try:
        summary = run_suite(spec, db=url, options=RunOptions(devices=f"cpu:{quiet},cpu:{busy}", quiet=True),
                            handle_signals=False)
    finally:
        for loop in loops:
            loop.send_signal(signal.SIGKILL)
            loop.wait()
    assert summary.status == "complete", summary
    rows = results(url, columns=["device_uuid", "device_fingerprint", "median_ms", "cpu_threads", "status"])
    assert set(rows["device_uuid"]) == {cpu_core_uuid(host, quiet), cpu_core_uuid(host, busy)}  # a device per core
    assert set(rows["cpu_threads"]) == {1} and set(rows["status"]) == {"ok"}
    assert rows["device_fingerprint"].nunique() == 1  # siblings of one model
    median = rows.set_index("device_uuid")["median_ms"]
    ratio = median[cpu_core_uuid(host, busy)] / median[cpu_core_uuid(host, quiet)]
    print(f"busy core / quiet core = {ratio:.2f}")
    assert ratio > 1.5, f"busy core / quiet core = {ratio:.2f}"
    # resumed: each core's cases are found under its own key, nothing is measured again
    again = run_suite(spec, db=url, options=RunOptions(devices=f"cpu:{quiet},cpu:{busy}", quiet=True,
                                                       resume=summary.run_id), handle_signals=False)
    assert again.already_measured == 2 and sum(again.counts.values()) == 0 and again.status == "complete"


def test_a_core_is_known_without_torch_by_its_own_key() -> None:
    """A resumed run finds a core's results under its key (host and core) before any worker starts."""
    core = sorted(os.sched_getaffinity(0))[-1]
    known = known_without_torch(f"cpu:{core}")
    whole = known_without_torch("cpu")
    assert known is not None and whole is not None
    assert known.uuid == cpu_core_uuid(node_name(), core) and whole.uuid is None
    assert known.fingerprint != whole.fingerprint and known.name == whole.name  # one model, never one series

    key = known.uuid

    class Store:
        def measured_case_keys(self, run_id: str, device_key: str | None = None) -> set[str]:
            return {c.case_key for c in cases} if device_key == key else set()

    cases = expand(load_spec("health"), "cpu")
    assert held_on(Store(), "run", f"cpu:{core}", cases) == known
    assert held_on(Store(), "run", "cpu", cases) is None
