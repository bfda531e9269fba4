"""The environment of a run: which device, which software, which checkout.

`capture(torch_device)` returns the `EnvironmentRecord` stored with a run and the `DeviceInfo` the
ops and the timing engine use. Identity fields (what decides whether two results may be compared)
are kept apart from informational ones; `device_fingerprint` is a short hash of the identity only:

- CUDA: kind, model (device name), memory_bytes, driver_major, cuda_major, torch_version;
- CPU:  kind, model (CPU model), memory_bytes, logical_cores, driver_major/cuda_major None,
  torch_version (a CPU's timings also depend on how many threads torch may use); a CPU core of a
  CPU fleet (`cpu:N`: one worker pinned to logical CPU N with one thread) adds pinned_cores = 1, so
  its results never join those of the whole CPU.

A GPU's device key is its UUID; a CPU core's is its host and CPU (`cpu_core_uuid`), so that every
core is a device of its own; the whole CPU (`cpu`) has none and is keyed by its fingerprint.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rooflab.record import EnvironmentRecord
from rooflab.runners.machine import cpuinfo, gpuinfo
from rooflab.runners.machine.gitinfo import git_state
from rooflab.suite.device import DeviceInfo
from rooflab.vocab import DeviceKind, device_index_of, device_kind_of

__all__ = ["capture", "best_device", "list_devices", "git_state", "fingerprint", "identity_fields",
           "KnownDevice", "known_without_torch", "cpu_core_uuid", "node_name"]

FINGERPRINT_CHARS = 16


def fingerprint(identity: Mapping[str, Any]) -> str:
    """First 16 hex digits of sha256 over the canonical JSON (sorted keys, no spaces) of `identity`."""
    text = json.dumps(dict(identity), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:FINGERPRINT_CHARS]


def identity_fields(
    *,
    kind: str,
    model: str,
    memory_bytes: int,
    driver_version: str | None,
    cuda_version: str | None,
    torch_version: str | None,
    logical_cores: int | None = None,
) -> dict[str, Any]:
    identity: dict[str, Any] = {
        "kind": kind,
        "model": model,
        "memory_bytes": int(memory_bytes),
        "driver_major": _major(driver_version),
        "cuda_major": _major(cuda_version),
        "torch_version": torch_version,
    }
    if kind == DeviceKind.CPU:
        identity["logical_cores"] = logical_cores
    return identity


def _major(version: str | None) -> str | None:
    return version.split(".")[0] if version else None


def best_device() -> str:
    """'cuda:0' when torch sees a CUDA GPU, else 'cpu' (what `make bench` uses)."""
    import torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"


def _torch_version() -> str:
    """torch's version as a plain str: its TorchVersion, pickled to the supervisor with the capture,
    would import torch there (seconds) on unpickling."""
    import torch

    return str(torch.__version__)


def list_devices() -> list[str]:
    """Every device present: CUDA GPUs in torch's order, then the CPU."""
    import torch

    cuda = [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    return [*cuda, "cpu"]


def capture(torch_device: str) -> tuple[EnvironmentRecord, DeviceInfo]:
    """Describe `torch_device` ('cpu', 'cuda', 'cuda:N') and the software around it."""
    import torch

    try:
        device = torch.device(torch_device)
    except RuntimeError as exc:
        raise ValueError(f"not a device: {torch_device!r} ({exc}); use 'cpu' or 'cuda:N'") from exc
    if device.type == DeviceKind.CUDA:
        return _capture_cuda(device)
    if device.type == DeviceKind.CPU:
        return _capture_cpu(device.index)
    raise ValueError(f"unsupported device {torch_device!r}: rooflab measures on 'cpu' and 'cuda:N'")


def software_info() -> dict[str, Any]:
    commit, dirty = git_state()
    return {
        "host": socket.gethostname(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "torch_version": _version("torch"),
        "cupy_version": _cupy_version(),
        "triton_version": _version("triton") or _version("pytorch-triton"),
        "numpy_version": _version("numpy"),
        "rooflab_version": _version("rooflab"),
        "git_commit": commit,
        "git_dirty": dirty,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "executable": sys.executable,
    }


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cupy_version() -> str | None:
    """Version of whichever CuPy wheel is installed (cupy, cupy-cuda12x, cupy-cuda13x, ...)."""
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name == "cupy" or name.startswith("cupy-cuda") or name.startswith("cupy-rocm"):
            return dist.version
    return None


def _capture_cuda(device: Any) -> tuple[EnvironmentRecord, DeviceInfo]:
    import torch

    if not torch.cuda.is_available():
        raise ValueError(f"{device} asked for, but torch sees no CUDA GPU (torch {torch.__version__})")
    index = 0 if device.index is None else device.index
    if index >= torch.cuda.device_count():
        raise ValueError(f"cuda:{index} asked for, but torch sees {torch.cuda.device_count()} CUDA GPU(s)")
    torch_device = f"cuda:{index}"
    gpu = gpuinfo.describe(torch_device)
    info = {**gpu, **software_info()}
    identity = identity_fields(
        kind="cuda",
        model=gpu["name"],
        memory_bytes=gpu["memory_bytes"],
        driver_version=gpu["driver_version"],
        cuda_version=gpu["cuda_runtime_version"],
        torch_version=_torch_version(),
    )
    major, minor = (int(p) for p in gpu["compute_capability"].split("."))
    device_info = DeviceInfo(
        kind="cuda",
        name=gpu["name"],
        torch_device=torch_device,
        memory_bytes=gpu["memory_bytes"],
        l2_bytes=gpu["l2_bytes"],
        compute_capability=(major, minor),
        sm_count=gpu["sm_count"],
    )
    record = EnvironmentRecord(
        device_fingerprint=fingerprint(identity),
        device_name=gpu["name"],
        device_kind="cuda",
        identity=identity,
        info=info,
        memory_bytes=gpu["memory_bytes"],
        l2_bytes=gpu["l2_bytes"],
        sm_count=gpu["sm_count"],
        compute_capability=gpu["compute_capability"],
        driver_version=gpu["driver_version"],
        cuda_version=gpu["cuda_runtime_version"],
        torch_version=_torch_version(),
    )
    return record, device_info


def describe_cpu(sysfs_root: str = cpuinfo.SYSFS_CPU, proc_root: str = "/proc") -> dict[str, Any]:
    """Model, cores, caches and memory of the host CPU (paths are parameters for tests)."""
    caches = cpuinfo.read_caches(sysfs_root)
    logical = os.cpu_count()
    physical = cpuinfo.physical_cores(sysfs_root)
    usable: int | None
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = logical
    return {
        "torch_device": "cpu",
        "name": cpuinfo.cpu_model(f"{proc_root}/cpuinfo"),
        "machine": platform.machine(),
        "logical_cores": logical,
        "physical_cores": physical,
        "usable_cores": usable,
        "cache_l1d_bytes": caches.l1d_bytes,
        "cache_l2_bytes": caches.l2_bytes,
        "cache_l3_bytes": caches.l3_bytes,
        "llc_bytes": caches.llc_bytes,  # the record's and DeviceInfo's l2_bytes
        "memory_bytes": cpuinfo.memory_total_bytes(f"{proc_root}/meminfo"),
    }


def _cpu_identity(cpu: Mapping[str, Any], torch_version: str, core: int | None = None) -> dict[str, Any]:
    """A CPU's identity fields from its description (`describe_cpu`) and torch's version; one core of
    a CPU fleet (`core` given) adds pinned_cores = 1."""
    identity = identity_fields(
        kind="cpu",
        model=cpu["name"],
        memory_bytes=cpu["memory_bytes"],
        driver_version=None,
        cuda_version=None,
        torch_version=torch_version,
        logical_cores=cpu["logical_cores"],
    )
    if core is not None:
        identity["pinned_cores"] = 1
    return identity


def cpu_core_uuid(host: str, core: int) -> str:
    """The device key of one CPU core of a CPU fleet: its host and logical CPU, e.g. `node1/cpu3`."""
    return f"{host}/cpu{core}"


def node_name() -> str:
    """This machine as its scheduler names it (SLURMD_NODENAME in a Slurm job), else its host name: the
    host of a CPU core's device key (two Slurm nodes may share a host name, as a test cluster's do)."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


@dataclass(frozen=True)
class KnownDevice:
    """A device as it can be known without importing torch (`uuid`: a CPU core's, else None)."""

    fingerprint: str
    name: str
    uuid: str | None = None


def known_without_torch(torch_device: str) -> KnownDevice | None:
    """`torch_device`'s fingerprint and name where they can be known without importing torch
    (seconds of CPU): a CPU's, from its description and the installed torch's version, the fingerprint
    `capture` gives it once torch is imported. None for a GPU (its identity comes from torch), and
    where the installed torch's version cannot be read."""
    if device_kind_of(torch_device) is not DeviceKind.CPU:
        return None
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None
    cpu = describe_cpu()
    core = device_index_of(torch_device)
    uuid = cpu_core_uuid(node_name(), core) if core is not None else None
    return KnownDevice(fingerprint(_cpu_identity(cpu, version, core)), cpu["name"], uuid)


def _capture_cpu(core: int | None = None) -> tuple[EnvironmentRecord, DeviceInfo]:
    """The whole CPU, or (`core` given) one core of a CPU fleet, which the worker has pinned itself to."""
    import torch

    cpu = describe_cpu()
    info = {**cpu, **software_info(), "torch_num_threads": torch.get_num_threads()}
    identity = _cpu_identity(cpu, _torch_version(), core)
    llc = cpu["llc_bytes"] or 0
    cores = cpu["physical_cores"] or cpu["logical_cores"] or 0
    if core is not None:
        info.update(host=node_name(), device_uuid=cpu_core_uuid(node_name(), core), pinned_cpu=core,
                    torch_device=f"cpu:{core}")
        cores = 1
    device_info = DeviceInfo(
        kind="cpu", name=cpu["name"], torch_device="cpu", memory_bytes=cpu["memory_bytes"], l2_bytes=llc, sm_count=cores
    )
    record = EnvironmentRecord(
        device_fingerprint=fingerprint(identity),
        device_name=cpu["name"],
        device_kind="cpu",
        identity=identity,
        info=info,
        memory_bytes=cpu["memory_bytes"],
        l2_bytes=llc,
        sm_count=cores,
        compute_capability=None,
        driver_version=None,
        cuda_version=None,
        torch_version=_torch_version(),
    )
    return record, device_info
