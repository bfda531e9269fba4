"""One run per device at a time: an exclusive lock file per device on this host.

A run takes the lock of every device it measures (`flock`, so the kernel releases it when the
process ends, however it ends) and keeps it until it has finished. A second run on a held device
waits up to `wait_s` seconds, then refuses with DeviceBusyError naming the holder (its pid, run
id, command and start time, which the holder writes into the file). A lock file whose recorded
holder is no longer running is stale: it holds no lock, is taken over, and the take-over is noted.

Locks live in ROOFLAB_LOCK_DIR, by default `<temp dir>/rooflab-locks`, shared by every user of the
host. A CPU run locks `cpu`; a GPU run locks `gpu-<UUID>` where NVML names the physical GPU
behind `cuda:N` (through CUDA_VISIBLE_DEVICES), else `cuda-<ordinal>`.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rooflab.runners.machine.nvml import call, normalize_uuid
from rooflab.vocab import DeviceKind, device_index_of, device_kind_of

LOCK_DIR_ENV = "ROOFLAB_LOCK_DIR"
POLL_S = 0.25


class DeviceBusyError(Exception):
    """Another run holds the lock of a device this run needs (exit code ExitCode.DEVICE_BUSY)."""


@dataclass(frozen=True)
class Holder:
    """What the process holding a lock wrote about itself."""

    pid: int | None
    host: str
    run_id: str
    command: str
    started_at: str

    @property
    def alive(self) -> bool:
        return self.pid is not None and pid_alive(self.pid)

    def describe(self) -> str:
        if self.pid is None:
            return "another process (it wrote nothing about itself)"
        state = "" if self.alive else ", no longer running: a process it started may still hold the lock"
        what = f"run {self.run_id}" if self.run_id else "a run"
        return f"{what} (pid {self.pid}{state}; started {self.started_at}; {self.command})"


def lock_dir() -> Path:
    return Path(os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "rooflab-locks")


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this host (a zombie counts as ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def lock_name(torch_device: str) -> str:
    """The file name (without suffix) of a torch device's lock: the physical device where known."""
    kind = device_kind_of(torch_device)
    if kind is not DeviceKind.CUDA:
        return kind.value
    index = device_index_of(torch_device) or 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    entry = str(index)
    if visible is not None:
        entries = [e.strip() for e in visible.split(",") if e.strip()]
        entry = entries[index] if index < len(entries) else str(index)
    if not entry.isdigit():  # CUDA_VISIBLE_DEVICES=GPU-<uuid> or MIG-<uuid>
        return "gpu-" + _safe(entry.lower().removeprefix("gpu-"))
    uuid = _nvml_uuid(int(entry))
    return f"gpu-{_safe(uuid)}" if uuid else f"cuda-{int(entry)}"


def _nvml_uuid(ordinal: int) -> str | None:
    handle = call("nvmlDeviceGetHandleByIndex", ordinal)
    uuid = call("nvmlDeviceGetUUID", handle) if handle is not None else None
    return normalize_uuid(uuid) if uuid else None


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def read_holder(path: Path) -> Holder | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "null")
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    pid = data.get("pid")
    return Holder(
        pid=pid if isinstance(pid, int) else None, host=str(data.get("host", "")), run_id=str(data.get("run_id", "")),
        command=str(data.get("command", "")), started_at=str(data.get("started_at", "")),
    )


def _open(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.chmod(path.parent, 0o1777)  # one folder for every user of the host, like /tmp
    except OSError:
        pass
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        os.fchmod(fd, 0o666)
    except OSError:
        pass
    return fd


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _write_holder(fd: int, run_id: str, command: str) -> None:
    record = {
        "pid": os.getpid(), "host": socket.gethostname(), "run_id": run_id, "command": command,
        "started_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)


@contextmanager
def device_locks(
    torch_devices: Sequence[str],
    *,
    run_id: str,
    command: str,
    wait_s: float = 0.0,
    note: Callable[[str], Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[list[Path]]:
    """Hold the lock of every device in `torch_devices` for the body (taken in a fixed order, so
    two runs asking for overlapping devices cannot deadlock)."""
    folder = lock_dir()
    names = sorted({lock_name(d): d for d in torch_devices}.items())
    held: list[tuple[int, Path]] = []
    deadline = clock() + max(0.0, wait_s)
    try:
        for name, torch_device in names:
            path = folder / f"{name}.lock"
            try:
                fd = _open(path)
            except OSError as exc:
                raise DeviceBusyError(
                    f"cannot open the lock file {path} of {torch_device}: {exc.strerror or exc} "
                    f"(set {LOCK_DIR_ENV} to a writable folder, or --no-lock)"
                ) from None
            said_waiting = False
            while not _try_lock(fd):
                if clock() >= deadline:
                    os.close(fd)
                    holder = read_holder(path)
                    who = holder.describe() if holder else "another process"
                    waited = f" after waiting {wait_s:g} s" if wait_s > 0 else ""
                    raise DeviceBusyError(
                        f"{torch_device} is busy{waited}: {who} holds {path}. Two runs on one device "
                        "contaminate each other's timings; wait for it (--lock-wait-s SECONDS) "
                        "or override with --no-lock"
                    )
                if note is not None and not said_waiting:
                    holder = read_holder(path)
                    note(f"waiting up to {wait_s:g} s for {torch_device}: "
                         f"{holder.describe() if holder else 'another process'} holds it")
                    said_waiting = True
                time.sleep(POLL_S)
            previous = read_holder(path)
            if previous is not None and previous.pid not in (None, os.getpid()) and not previous.alive and note:
                note(f"took over the stale lock of {torch_device} left by pid {previous.pid} (no longer running)")
            _write_holder(fd, run_id, command)
            held.append((fd, path))
        yield [path for _, path in held]
    finally:
        for fd, _ in reversed(held):
            try:
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
