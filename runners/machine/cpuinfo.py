"""What a CPU is, read from Linux: model (/proc/cpuinfo), cores and caches (sysfs), memory (/proc/meminfo).

Every reader takes its root path as a parameter so tests can point it at a fake tree. Cache sizes
come from `<sysfs>/cpu0/cache/index*/{level,type,size}`; the last-level cache is the largest level
holding data (type Data or Unified). Where sysfs has no cache entries, `os.sysconf` is asked.
"""
from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

SYSFS_CPU = "/sys/devices/system/cpu"
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


@dataclass(frozen=True)
class CpuCaches:
    l1d_bytes: int | None
    l2_bytes: int | None
    l3_bytes: int | None
    llc_bytes: int | None  # last-level cache (per instance seen by cpu0)


def parse_size(text: str) -> int:
    """'32K' -> 32768, '1024K' -> 1048576, '16M' -> 16777216, '512' -> 512."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, flags=re.IGNORECASE)
    if not m:
        raise ValueError(f"unrecognised cache size {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def read_caches(sysfs_root: str | Path = SYSFS_CPU, cpu: str = "cpu0") -> CpuCaches:
    by_level: dict[int, int] = {}
    l1d = None
    cache_dir = Path(sysfs_root) / cpu / "cache"
    for index in sorted(cache_dir.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind not in ("Data", "Unified"):
            continue
        if level == 1:
            l1d = size
        by_level[level] = max(size, by_level.get(level, 0))
    if not by_level:
        return _sysconf_caches()
    return CpuCaches(l1d, by_level.get(2), by_level.get(3), by_level[max(by_level)])


def _sysconf_caches() -> CpuCaches:
    def conf(name: str) -> int | None:
        try:
            value = os.sysconf(name)
        except (ValueError, OSError):
            return None
        return value if value and value > 0 else None

    l1d, l2, l3 = conf("SC_LEVEL1_DCACHE_SIZE"), conf("SC_LEVEL2_CACHE_SIZE"), conf("SC_LEVEL3_CACHE_SIZE")
    return CpuCaches(l1d, l2, l3, l3 or l2 or l1d)


def cpu_model(cpuinfo_path: str | Path = "/proc/cpuinfo") -> str:
    """The 'model name' line (x86), else 'Model'/'Hardware' (Arm), else platform.processor()."""
    try:
        text = Path(cpuinfo_path).read_text()
    except OSError:
        text = ""
    for key in ("model name", "Model", "Hardware", "cpu model"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", text, flags=re.MULTILINE)
        if m:
            return m.group(1).strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def physical_cores(sysfs_root: str | Path = SYSFS_CPU) -> int | None:
    """Distinct (package, core) pairs in `<sysfs>/cpu*/topology`, or None when absent."""
    pairs = set()
    for topo in Path(sysfs_root).glob("cpu[0-9]*/topology"):
        try:
            pkg = (topo / "physical_package_id").read_text().strip()
            core = (topo / "core_id").read_text().strip()
        except OSError:
            continue
        pairs.add((pkg, core))
    return len(pairs) or None


def core_cpus(sysfs_root: str | Path | None = None, allowed: set[int] | None = None) -> list[int]:
    """One logical CPU per physical core, the lowest-numbered of its siblings, among the CPUs this
    process may run on (`allowed`; its affinity when None): the CPUs a CPU fleet pins its devices to.
    Without topology in sysfs every allowed CPU counts as a core (`sysfs_root`: SYSFS_CPU when None)."""
    if allowed is None:
        try:
            allowed = set(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            allowed = set(range(os.cpu_count() or 1))
    first: dict[tuple[str, str], int] = {}
    for topo in Path(sysfs_root or SYSFS_CPU).glob("cpu[0-9]*/topology"):
        cpu = int(topo.parent.name.removeprefix("cpu"))
        try:
            pair = ((topo / "physical_package_id").read_text().strip(), (topo / "core_id").read_text().strip())
        except OSError:
            continue
        if cpu in allowed and (pair not in first or cpu < first[pair]):
            first[pair] = cpu
    return sorted(first.values()) if first else sorted(allowed)


def memory_total_bytes(meminfo_path: str | Path = "/proc/meminfo") -> int:
    try:
        text = Path(meminfo_path).read_text()
    except OSError:
        text = ""
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", text, flags=re.MULTILINE)
    if m:
        return int(m.group(1)) * 1024
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def default_cpu_threads(sysfs_root: str | Path = SYSFS_CPU) -> int:
    """Threads a CPU case runs with unless told otherwise (`--threads`): OMP_NUM_THREADS when the
    environment sets it to a whole number >= 1 (the user's own choice, as torch itself honours it),
    else one per physical core; never more than the CPUs this process may run on (its affinity).
    SMT siblings share a core's arithmetic units and only add contention to a benchmark."""
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = os.cpu_count() or 1
    chosen = os.environ.get("OMP_NUM_THREADS", "").strip()
    if chosen.isdigit() and int(chosen) >= 1:
        return min(int(chosen), allowed)
    cores = physical_cores(sysfs_root) or allowed
    return max(1, min(cores, allowed))
