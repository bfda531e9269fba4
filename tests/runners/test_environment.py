"""Environment capture: fingerprint stability, CPU description from a fake sysfs, git state."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rooflab.runners.machine import cpuinfo
from rooflab.runners.machine.environment import (
    best_device,
    capture,
    describe_cpu,
    fingerprint,
    identity_fields,
    list_devices,
)
from rooflab.runners.machine.gitinfo import git_state
from rooflab.runners.machine.gpuinfo import theoretical_memory_gbps

ROOT = Path(__file__).resolve().parents[2]


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def fake_sysfs(root: Path, caches: list[tuple[int, str, str]], cores: list[tuple[int, int]]) -> Path:
    """A sysfs cpu tree: caches of cpu0 as (level, type, size); (package, core) per logical cpu."""
    for i, (level, kind, size) in enumerate(caches):
        d = root / "cpu0" / "cache" / f"index{i}"
        write(d / "level", f"{level}\n")
        write(d / "type", f"{kind}\n")
        write(d / "size", f"{size}\n")
    for n, (pkg, core) in enumerate(cores):
        write(root / f"cpu{n}" / "topology" / "physical_package_id", f"{pkg}\n")
        write(root / f"cpu{n}" / "topology" / "core_id", f"{core}\n")
    return root


def test_fingerprint_is_stable_across_captures() -> None:
    a, _ = capture("cpu")
    b, _ = capture("cpu")
    assert a.device_fingerprint == b.device_fingerprint == fingerprint(a.identity)
    assert len(a.device_fingerprint) == 16


def test_a_captured_environment_unpickles_without_importing_torch() -> None:
    """The supervisor receives the worker's capture over a pipe; torch's version string is a
    TorchVersion, which, unpickled, would import torch (seconds) into a process that needs none."""
    import pickle

    record, device = capture("cpu")
    assert type(record.torch_version) is str and type(record.identity["torch_version"]) is str
    code = ("import pickle, sys; pickle.loads(sys.stdin.buffer.read()); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, input=pickle.dumps((record, device)),
                         capture_output=True, check=True)
    assert out.stdout.decode().strip() == "False", out.stderr.decode()


def test_fingerprint_is_stable_across_processes_and_a_cpus_is_known_before_torch_is_imported() -> None:
    """A resumed run decides that nothing is left without importing torch (runners/orchestration/
    held.py): in a fresh Python a CPU's fingerprint and name are known before torch is imported, the
    same that `capture` gives once it is; a GPU's are not known that way."""
    here, _ = capture("cpu")
    code = ("import sys; from rooflab.runners.machine.environment import capture, known_without_torch; "
            "known = known_without_torch('cpu'); print(known.fingerprint, 'torch' in sys.modules, "
            "known_without_torch('cuda:0')); print(known.name); print(capture('cpu')[0].device_fingerprint)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    first, name, captured = out.stdout.strip().split("\n")
    assert first.split() == [here.device_fingerprint, "False", "None"]
    assert name == here.device_name and captured == here.device_fingerprint


def test_fingerprint_depends_on_identity_only_and_on_each_identity_field() -> None:
    base = identity_fields(kind="cuda", model="NVIDIA H100 80GB HBM3", memory_bytes=85_520_809_984,
                           driver_version="580.65.06", cuda_version="13.0", torch_version="2.11.0+cu130")
    fp = fingerprint(base)
    assert fingerprint(dict(reversed(list(base.items())))) == fp  # key order does not matter
    same_major = identity_fields(kind="cuda", model="NVIDIA H100 80GB HBM3", memory_bytes=85_520_809_984,
                                 driver_version="580.95.05", cuda_version="13.1", torch_version="2.11.0+cu130")
    assert fingerprint(same_major) == fp  # driver/CUDA minor versions are informational
    for key, value in [("torch_version", "2.12.0+cu130"), ("model", "NVIDIA H200"), ("memory_bytes", 1),
                       ("driver_major", "575"), ("cuda_major", "12")]:
        assert fingerprint({**base, key: value}) != fp, key


def test_identity_and_info_are_kept_apart() -> None:
    rec, dev = capture("cpu")
    assert set(rec.identity) == {"kind", "model", "memory_bytes", "driver_major", "cuda_major", "torch_version",
                                 "logical_cores"}
    for key in ("host", "os", "python", "torch_version", "cupy_version", "triton_version", "git_commit", "git_dirty",
                "cache_l1d_bytes", "llc_bytes", "physical_cores"):
        assert key in rec.info, key
    assert rec.device_kind == dev.kind == "cpu" and dev.torch_device == "cpu"
    assert rec.l2_bytes == dev.l2_bytes == rec.info["llc_bytes"] > 0
    assert rec.memory_bytes == dev.memory_bytes > 0


def test_cpu_caches_from_a_fake_sysfs(tmp_path: Path) -> None:
    root = fake_sysfs(
        tmp_path,
        [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"), (3, "Unified", "105M")],
        [(0, 0), (0, 1), (0, 0), (0, 1), (1, 0), (1, 1)],  # 2 sockets, hyperthreads on socket 0
    )
    caches = cpuinfo.read_caches(root)
    assert caches == cpuinfo.CpuCaches(l1d_bytes=48 * 1024, l2_bytes=2 * 1024**2, l3_bytes=105 * 1024**2,
                                       llc_bytes=105 * 1024**2)
    assert cpuinfo.physical_cores(root) == 4


def test_llc_is_the_largest_data_level(tmp_path: Path) -> None:
    root = fake_sysfs(tmp_path, [(1, "Data", "32K"), (1, "Instruction", "64K"), (2, "Unified", "4096K")], [(0, 0)])
    assert cpuinfo.read_caches(root).llc_bytes == 4 * 1024**2
    assert cpuinfo.read_caches(root).l3_bytes is None


def test_describe_cpu_reads_model_memory_and_caches_from_given_roots(tmp_path: Path) -> None:
    sysfs = fake_sysfs(tmp_path / "sys", [(1, "Data", "32K"), (2, "Unified", "1024K"), (3, "Unified", "32768K")],
                       [(0, 0), (0, 1)])
    write(tmp_path / "proc" / "cpuinfo", "processor\t: 0\nvendor_id\t: Fake\nmodel name\t: Fake CPU 9000 @ 3.0GHz\n")
    write(tmp_path / "proc" / "meminfo", "MemTotal:       16384000 kB\nMemFree:        1 kB\n")
    cpu = describe_cpu(str(sysfs), str(tmp_path / "proc"))
    assert cpu["name"] == "Fake CPU 9000 @ 3.0GHz"
    assert cpu["memory_bytes"] == 16384000 * 1024
    assert (cpu["cache_l1d_bytes"], cpu["cache_l2_bytes"], cpu["llc_bytes"]) == (32768, 1024**2, 32 * 1024**2)
    assert cpu["physical_cores"] == 2


@pytest.mark.parametrize("text, value",
                         [("32K", 32768), ("1024K", 1048576), ("16M", 16 * 1024**2), ("512", 512), ("2G", 2 * 1024**3)])
def test_parse_size(text: str, value: int) -> None:
    assert cpuinfo.parse_size(text) == value


def test_arm_cpuinfo_falls_back_to_other_model_keys(tmp_path: Path) -> None:
    write(tmp_path / "cpuinfo", "processor\t: 0\nBogoMIPS\t: 50.00\n\nHardware\t: Fake SoC\n")
    assert cpuinfo.cpu_model(tmp_path / "cpuinfo") == "Fake SoC"


def test_theoretical_bandwidth_from_bus_width_and_clock() -> None:
    assert theoretical_memory_gbps(5120, 2619.0) == pytest.approx(3352.32)  # H100 SXM HBM3
    assert theoretical_memory_gbps(None, 2619.0) is None and theoretical_memory_gbps(5120, None) is None


def test_git_state_of_this_checkout_and_of_a_plain_directory(tmp_path: Path) -> None:
    from rooflab.runners.machine.gitinfo import PROJECT_ROOT

    assert PROJECT_ROOT == ROOT.resolve()  # a run records the commit of the checkout it runs from
    commit, dirty = git_state()  # the default root, as a run calls it
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        assert commit == head.stdout.strip() and isinstance(dirty, bool)
    assert git_state(tmp_path) == (None, False)


def test_git_dirty_flag_follows_tracked_changes(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    git("add", "a.txt")
    git("-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q", "-m", "init")
    commit, dirty = git_state(tmp_path)
    assert commit is not None and len(commit) == 40 and not dirty
    (tmp_path / "untracked.txt").write_text("x\n")
    assert git_state(tmp_path) == (commit, False)
    (tmp_path / "a.txt").write_text("two\n")
    assert git_state(tmp_path) == (commit, True)
    (tmp_path / "sub").mkdir()
    assert git_state(tmp_path / "sub") == (None, False)  # only the checkout's own top level counts


def test_best_device_and_list_devices_without_a_gpu() -> None:
    import torch

    devices = list_devices()
    assert devices[-1] == "cpu"
    if not torch.cuda.is_available():
        assert best_device() == "cpu" and devices == ["cpu"]
    else:
        assert best_device() == "cuda:0" == devices[0]


@pytest.mark.parametrize("bad", ["tpu:0", "nonsense"])
def test_unknown_devices_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        capture(bad)


def test_missing_cuda_device_is_refused_clearly() -> None:
    import torch

    with pytest.raises(ValueError, match="CUDA"):
        capture(f"cuda:{torch.cuda.device_count() if torch.cuda.is_available() else 0}")


# --- the CUDA capture against a fake torch.cuda device and a fake NVML (no GPU needed) ---


class FakeNvml:
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    def __init__(self, uuids: list[str]) -> None:
        self.uuids = uuids

    def nvmlDeviceGetCount(self) -> int:
        return len(self.uuids)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"handle{i}"

    def nvmlDeviceGetUUID(self, h: str) -> bytes:
        return self.uuids[int(h[-1])].encode()

    def nvmlDeviceGetMemoryBusWidth(self, h: str) -> int:
        return 5120

    def nvmlDeviceGetMaxClockInfo(self, h: str, clock: int) -> int:
        return {1: 1980, 2: 2619}[clock]

    def nvmlDeviceGetEnforcedPowerLimit(self, h: str) -> int:
        return 700_000  # mW

    def nvmlDeviceGetEccMode(self, h: str) -> list[int]:
        return [1, 0]  # (current, pending)

    def nvmlDeviceGetMigMode(self, h: str) -> list[int]:
        return [0, 1]

    def nvmlDeviceGetPersistenceMode(self, h: str) -> int:
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    def nvmlDeviceGetPciInfo(self, h: str):
        import types

        return types.SimpleNamespace(busId=b"00000000:19:00.0")

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.65.06"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 13000


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch):
    import types

    import torch

    from rooflab.runners.machine import nvml

    props = types.SimpleNamespace(
        name="NVIDIA H100 80GB HBM3", major=9, minor=0, multi_processor_count=132,
        L2_cache_size=52_428_800, total_memory=85_520_809_984, uuid="bbbbbbbb-0000-0000-0000-000000000001",
    )
    lib = FakeNvml(["GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-BBBBBBBB-0000-0000-0000-000000000001"])
    monkeypatch.setattr(nvml, "nvml", lambda: lib)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    return props, lib


def test_cuda_capture_maps_torch_and_nvml_fields(fake_gpu) -> None:
    import torch

    record, device = capture("cuda:0")
    assert device == type(device)(
        kind="cuda", name="NVIDIA H100 80GB HBM3", torch_device="cuda:0", memory_bytes=85_520_809_984,
        l2_bytes=52_428_800, compute_capability=(9, 0), sm_count=132,
    )
    assert record.identity == {
        "kind": "cuda", "model": "NVIDIA H100 80GB HBM3", "memory_bytes": 85_520_809_984,
        "driver_major": "580", "cuda_major": "13", "torch_version": torch.__version__,
    }
    info = record.info
    assert info["uuid"] == "GPU-bbbbbbbb-0000-0000-0000-000000000001"  # the NVML device matched by UUID
    assert info["pci_bus_id"] == "00000000:19:00.0"
    assert info["theoretical_memory_gbps"] == pytest.approx(3352.32)
    assert ((info["max_sm_clock_mhz"], info["max_memory_clock_mhz"], info["memory_bus_width_bits"])
            == (1980.0, 2619.0, 5120))
    assert info["power_limit_w"] == 700.0
    assert info["ecc_enabled"] is True and info["mig_enabled"] is False  # current modes, not pending
    assert info["persistence_mode"] is None  # unsupported queries are None, not errors
    assert info["cuda_driver_version"] == "13.0" and info["cuda_runtime_version"] == "13.0"
    assert record.compute_capability == "9.0" and record.driver_version == "580.65.06"
    assert record.device_fingerprint == fingerprint(record.identity)


def test_nvml_handle_found_by_uuid_whatever_the_order(fake_gpu, monkeypatch: pytest.MonkeyPatch) -> None:
    from rooflab.runners.machine import nvml

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert nvml.handle_for("cuda:0") == "handle1"  # torch's cuda:0 is NVML's device 1


def test_nvml_handle_falls_back_to_the_visible_ordinal(fake_gpu, monkeypatch: pytest.MonkeyPatch) -> None:
    from rooflab.runners.machine import nvml

    props, _ = fake_gpu
    props.uuid = "cccccccc-0000-0000-0000-000000000002"  # matches no NVML device (e.g. a MIG instance)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert nvml.handle_for("cuda:0") == "handle1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-cccccccc-0000-0000-0000-000000000002")
    assert nvml.handle_for("cuda:0") is None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert nvml.handle_for("cuda:0") == "handle0"


def test_cpu_threads_default_to_omp_num_threads_when_set_else_physical_cores(tmp_path: Path, monkeypatch) -> None:
    import os

    allowed = len(os.sched_getaffinity(0))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert cpuinfo.default_cpu_threads(tmp_path) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "not-a-number")
    assert cpuinfo.default_cpu_threads(tmp_path) == min(cpuinfo.physical_cores(tmp_path) or allowed, allowed)
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert 1 <= cpuinfo.default_cpu_threads() <= allowed
