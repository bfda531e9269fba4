"""`cuda_device()`: the DeviceInfo of GPU 0 as torch describes it, for the gpu-marked tests (a module
of its own, so that a test file that needs only this imports no other test module)."""
from __future__ import annotations

import torch

from rooflab.suite.device import DeviceInfo


def cuda_device() -> DeviceInfo:
    props = torch.cuda.get_device_properties(0)
    return DeviceInfo(
        kind="cuda", name=props.name, torch_device="cuda:0", memory_bytes=int(props.total_memory),
        l2_bytes=int(getattr(props, "L2_cache_size", 0)), compute_capability=(props.major, props.minor),
        sm_count=int(props.multi_processor_count),
    )
