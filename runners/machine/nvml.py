"""NVML access shared by the environment capture and the clock monitor (nvidia-ml-py, `pynvml`).

`nvml()` initialises NVML once and returns the module, or None where there is no NVML (no driver,
a CPU-only machine). `handle_for(torch_device)` finds the NVML handle of a torch CUDA device by
its UUID, which is right whatever CUDA_VISIBLE_DEVICES reorders or hides; it falls back to the
ordinal named in CUDA_VISIBLE_DEVICES (or the torch index when that is unset).
"""
from __future__ import annotations

import os
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def nvml() -> Any | None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # ImportError, NVMLError (driver/library not found), OSError
        return None
    return pynvml


def normalize_uuid(uuid: Any) -> str:
    """'GPU-5f7e...' / b'GPU-5f7e...' / '5f7e...' -> '5f7e...' (lower case)."""
    text = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    text = text.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    return text


def torch_uuid(torch_device: str) -> str | None:
    """UUID of a torch CUDA device as NVML spells it ('GPU-...'), or None."""
    import torch

    try:
        props = torch.cuda.get_device_properties(torch.device(torch_device))
        raw = getattr(props, "uuid", None)
    except Exception:
        return None
    if raw is None:
        return None
    text = str(raw)
    return text if text.upper().startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def _as_str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def handle_for(torch_device: str) -> Any | None:
    """NVML handle of `torch_device` ('cuda:1'), or None without NVML or a match."""
    lib = nvml()
    if lib is None:
        return None
    import torch

    index = torch.device(torch_device).index or 0
    wanted = torch_uuid(torch_device)
    try:
        count = lib.nvmlDeviceGetCount()
        if wanted is not None:
            for i in range(count):
                handle = lib.nvmlDeviceGetHandleByIndex(i)
                if normalize_uuid(lib.nvmlDeviceGetUUID(handle)) == normalize_uuid(wanted):
                    return handle
        ordinal = _visible_ordinal(index)
        if ordinal is not None and ordinal < count:
            return lib.nvmlDeviceGetHandleByIndex(ordinal)
    except Exception:
        return None
    return None


def _visible_ordinal(index: int) -> int | None:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return index
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if index < len(entries) and entries[index].isdigit():
        return int(entries[index])
    return None


def call(fn_name: str, *args: Any) -> Any | None:
    """`pynvml.<fn_name>(*args)`, or None when NVML, the function or the query is unavailable."""
    lib = nvml()
    fn = getattr(lib, fn_name, None) if lib is not None else None
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported, NoPermission, ...
        return None


def as_text(value: Any) -> str | None:
    return None if value is None else _as_str(value)
