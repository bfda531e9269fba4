"""The test CPU the op tests prepare their cases on (a description, not this machine's): 8 GiB of
memory, a 1 MiB cache, two cores."""
from __future__ import annotations

from rooflab.suite.device import DeviceInfo

CPU = DeviceInfo(kind="cpu", name="test cpu", torch_device="cpu", memory_bytes=8 << 30, l2_bytes=1 << 20, sm_count=2)
