"""What a CUDA GPU is, from torch's device properties and NVML.

Memory bandwidth is derived where NVML (or torch) gives the bus width and the maximum memory clock:
theoretical_memory_gbps = bus_width_bits / 8 * max_memory_clock_mhz * 1e6 * 2 / 1e9 (two transfers
per clock, the convention nvbench and triton use); it is None where either is unknown.
"""
from __future__ import annotations

from typing import Any

from rooflab.db import rates
from rooflab.runners.machine import nvml


def theoretical_memory_gbps(bus_width_bits: int | None, memory_clock_mhz: float | None) -> float | None:
    if not bus_width_bits or not memory_clock_mhz:
        return None
    bytes_per_s = bus_width_bits / 8 * memory_clock_mhz * 1e6 * 2
    return bytes_per_s / rates.GB


def _mode_enabled(value: Any) -> bool | None:
    """NVML (current, pending) mode pairs -> whether the current mode is enabled."""
    if value is None:
        return None
    current = value[0] if isinstance(value, (tuple, list)) else value
    return bool(current)


def describe(torch_device: str) -> dict[str, Any]:
    """Identity and informational fields of one CUDA device."""
    import torch

    device = torch.device(torch_device)
    props = torch.cuda.get_device_properties(device)
    handle = nvml.handle_for(torch_device)
    lib = nvml.nvml()

    def q(fn: str, *args: Any) -> Any:
        return nvml.call(fn, handle, *args) if handle is not None else None

    clock_sm = getattr(lib, "NVML_CLOCK_SM", 1) if lib else 1
    clock_mem = getattr(lib, "NVML_CLOCK_MEM", 2) if lib else 2
    bus_width = q("nvmlDeviceGetMemoryBusWidth") or getattr(props, "memory_bus_width", None) or None
    mem_clock = q("nvmlDeviceGetMaxClockInfo", clock_mem)
    if not mem_clock and getattr(props, "memory_clock_rate", None):
        mem_clock = props.memory_clock_rate / 1e3  # kHz -> MHz
    sm_clock = q("nvmlDeviceGetMaxClockInfo", clock_sm)
    if not sm_clock and getattr(props, "clock_rate", None):
        sm_clock = props.clock_rate / 1e3
    power_mw = q("nvmlDeviceGetEnforcedPowerLimit")
    cuda_driver = nvml.call("nvmlSystemGetCudaDriverVersion")
    return {
        "torch_device": str(device),
        "name": props.name,
        "uuid": nvml.torch_uuid(torch_device) or nvml.as_text(q("nvmlDeviceGetUUID")),
        "pci_bus_id": _pci_bus_id(q("nvmlDeviceGetPciInfo")),
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": int(props.multi_processor_count),
        "l2_bytes": int(props.L2_cache_size),
        "memory_bytes": int(props.total_memory),
        "memory_bus_width_bits": int(bus_width) if bus_width else None,
        "max_memory_clock_mhz": float(mem_clock) if mem_clock else None,
        "theoretical_memory_gbps": theoretical_memory_gbps(bus_width, mem_clock),
        "max_sm_clock_mhz": float(sm_clock) if sm_clock else None,
        "power_limit_w": power_mw / 1e3 if power_mw else None,
        "ecc_enabled": _mode_enabled(q("nvmlDeviceGetEccMode")),
        "mig_enabled": _mode_enabled(q("nvmlDeviceGetMigMode")),
        "persistence_mode": _mode_enabled(q("nvmlDeviceGetPersistenceMode")),
        "driver_version": nvml.as_text(nvml.call("nvmlSystemGetDriverVersion")),
        "cuda_driver_version": f"{cuda_driver // 1000}.{cuda_driver % 1000 // 10}" if cuda_driver else None,
        "cuda_runtime_version": torch.version.cuda,
        "nvml": handle is not None,
    }


def _pci_bus_id(info: Any) -> str | None:
    if info is None:
        return None
    bus_id = getattr(info, "busId", None) or getattr(info, "busIdLegacy", None)
    return nvml.as_text(bus_id)
