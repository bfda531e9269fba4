"""Stream holds: keep the GPU from starting a batch until the host has enqueued all of it.

Without a hold, a CUDA event pair times whatever the GPU did between the two records; when the
GPU is idle as the start event is recorded (hot mode, small kernels), that includes the host's
dispatch of the timed call (torch dispatch, compiled-code guards: 5-30 us). With a hold, the
sequence on the stream is

    hold -> [flush] -> start event -> fn -> end event -> ... (up to MAX_SAMPLES_PER_HOLD samples)

and the hold ends only after the last end event is enqueued, so every pair brackets device work
alone: a sample is device time. Methods, in order of preference (`SyncMethod`):

- `blocking_kernel`: a one-thread kernel (CuPy RawKernel, no CUDA headers) spins on a word of
  pinned host memory until the host writes the hold's ticket into it. It gives up after
  `timeout_s` (read from the GPU's %globaltimer) and says so in a second word, so a timed call
  that waits for the device on the host cannot hang the GPU: the batch is then reported as not
  held and the engine falls back to `host_sync`.
- `sleep_kernel`: `torch.cuda._sleep` (torch only) for a duration sized from the host's enqueue
  time of the previous chunk, with margin. Its end is recorded with an event; if that event has
  already completed when the host finishes enqueueing, the hold was too short, the chunk is
  reported as not held (the batch is taken again) and the next sleeps are twice as long.
- `host_sync` (no hold: the device is synchronised after each sample, so samples contain the
  host's dispatch of the call when the GPU was idle) when neither hold works for a call, and
  `none` on a CPU (samples are host time by definition).

Holds are never used in warmup or the first call (lazy module loading and compilation there
could wait on the held stream).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from enum import StrEnum
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from rooflab.suite.ops.pointwise import external_stream
from rooflab.vocab import SyncMethod

if TYPE_CHECKING:  # torch loads when a hold is made (cp: the cupy module)
    import torch

MAX_SAMPLES_PER_HOLD = 8  # the launch queue is finite: a deep one behind a hold would block the host
HOLD_TIMEOUT_S = 5.0  # a blocking kernel gives up after this long
SLEEP_INITIAL_MS = 0.5
SLEEP_MARGIN = 2.0  # sleep this many times the last chunk's enqueue time ...
SLEEP_MIN_MS = 0.05  # ... and at least this long
SLEEP_SHRINK = 0.75  # after a chunk that was covered, the next sleep is at least this fraction as long
SLEEP_MAX_MS = 500.0
SLEEP_CALIBRATION_CYCLES = 2_000_000


class HoldMode(StrEnum):
    """What the engine is asked to do about host time in GPU samples (the default, or a peer's way)."""

    HELD = "held"  # a stream hold per chunk of samples (host_sync when no hold can cover the call)
    SYNC_PER_SAMPLE = "sync_per_sample"  # no hold; the device is synchronised after every sample (host_sync)
    UNHELD = "unheld"  # no hold and no synchronisation between samples: event pairs queued back to back


class NoHold:
    """The stream is not held: samples are enqueued back to back and the GPU starts on them at once,
    so an event pair holds whatever wait for the host fell between its records (do_bench's way)."""

    method = SyncMethod.UNHELD.value

    def hold(self, stream: torch.cuda.Stream) -> None:
        pass

    def release(self) -> bool:
        return True

    def timed_out(self) -> bool:
        return False


class StreamHoldFailed(RuntimeError):
    """A hold could not cover the enqueueing of a batch (the timed call waits on the device)."""


class StreamHold(Protocol):
    method: str

    def hold(self, stream: torch.cuda.Stream) -> None:
        """Enqueue the hold on `stream` (before a chunk of samples)."""

    def release(self) -> bool:
        """Let the stream go (after the chunk is enqueued); False if the hold already ended."""

    def timed_out(self) -> bool:
        """After a device synchronisation: whether a hold since the last call gave up on its own."""


BLOCKING_KERNEL_NAME = "rooflab_hold_stream"
# Spins until *release >= ticket (tickets grow, so a hold that starts after its release, or after a
# later one, passes at once). On timeout it writes its ticket to *timed_out and returns.
BLOCKING_KERNEL_SOURCE = r"""
extern "C" __global__ void rooflab_hold_stream(const volatile int* release, volatile int* timed_out,
                                               unsigned long long timeout_ns, int ticket)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    while (*release < ticket) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start > timeout_ns) {
            *timed_out = ticket;
            __threadfence_system();
            return;
        }
    }
}
"""


class BlockingKernelHold:
    """A spinning one-thread kernel released through pinned host memory (needs CuPy)."""

    method = SyncMethod.BLOCKING_KERNEL.value

    def __init__(self, torch_device: str, cp: ModuleType, *, timeout_s: float = HOLD_TIMEOUT_S) -> None:
        import torch

        self._torch, self._cp = torch, cp
        self._device = torch.device(torch_device)
        # [release ticket, timed-out ticket]: pinned, hence mapped into the device's address space
        # (unified addressing) at the same address
        self._words = torch.zeros(2, dtype=torch.int32, pin_memory=True)
        self._timeout_ns = cp.uint64(int(timeout_s * 1e9))
        self._kernel = cp.RawKernel(BLOCKING_KERNEL_SOURCE, BLOCKING_KERNEL_NAME)
        self._ticket = 0
        self._checked = 0
        # load the module now, unheld: a ticket of 0 is released already
        self._launch(torch.cuda.current_stream(self._device), 0)
        torch.cuda.synchronize(self._device)

    def _launch(self, stream: torch.cuda.Stream, ticket: int) -> None:
        cp = self._cp
        ptr = self._words.data_ptr()
        with external_stream(cp, stream.cuda_stream):
            self._kernel((1,), (1,), (cp.uint64(ptr), cp.uint64(ptr + 4), self._timeout_ns, cp.int32(ticket)))

    def hold(self, stream: torch.cuda.Stream) -> None:
        self._ticket += 1
        self._launch(stream, self._ticket)

    def release(self) -> bool:
        self._words[0] = self._ticket
        return True

    def timed_out(self) -> bool:
        out = int(self._words[1]) > self._checked
        self._checked = self._ticket
        return out


class SleepKernelHold:
    """`torch.cuda._sleep` sized from the host's enqueue time, checked after every chunk."""

    method = SyncMethod.SLEEP_KERNEL.value

    def __init__(self, torch_device: str, *, clock_s: Callable[[], float] = time.perf_counter) -> None:
        import torch

        self._torch = torch
        self._clock_s = clock_s
        self._device = torch.device(torch_device)
        self.cycles_per_ms = self._calibrate()
        self.sleep_ms = SLEEP_INITIAL_MS
        self._end: torch.cuda.Event | None = None
        self._held_at = 0.0

    def _calibrate(self) -> float:
        """GPU cycles per millisecond of `_sleep`, from an event-timed sleep (after a warm one)."""
        torch = self._torch
        stream = torch.cuda.current_stream(self._device)
        torch.cuda._sleep(1000)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        torch.cuda._sleep(SLEEP_CALIBRATION_CYCLES)
        end.record(stream)
        torch.cuda.synchronize(self._device)
        ms = start.elapsed_time(end)
        if not ms > 0:
            raise RuntimeError(f"cannot calibrate torch.cuda._sleep: {SLEEP_CALIBRATION_CYCLES} cycles took {ms} ms")
        return SLEEP_CALIBRATION_CYCLES / ms

    def hold(self, stream: torch.cuda.Stream) -> None:
        torch = self._torch
        torch.cuda._sleep(max(1, int(self.sleep_ms * self.cycles_per_ms)))
        self._end = torch.cuda.Event()
        self._end.record(stream)
        self._held_at = self._clock_s()

    def release(self) -> bool:
        enqueue_ms = (self._clock_s() - self._held_at) * 1e3
        assert self._end is not None  # a release follows its hold
        still_held = not self._end.query()
        if still_held:  # shrink slowly: a short last chunk of a batch says little about a full one
            self.sleep_ms = min(SLEEP_MAX_MS,
                                max(SLEEP_MIN_MS, SLEEP_MARGIN * enqueue_ms, SLEEP_SHRINK * self.sleep_ms))
        else:
            self.sleep_ms = min(SLEEP_MAX_MS, 2 * max(self.sleep_ms, SLEEP_MARGIN * enqueue_ms))
        return still_held

    def timed_out(self) -> bool:
        return False


_HOLDS: dict[str, StreamHold] = {}


def stream_hold_for(torch_device: str) -> StreamHold:
    """One hold per process and device (the kernel is compiled, or the sleep calibrated, once)."""
    hold = _HOLDS.get(torch_device)
    if hold is None:
        hold = _HOLDS[torch_device] = make_stream_hold(torch_device)
    return hold


def make_stream_hold(torch_device: str) -> StreamHold:
    """The best hold that works here: a blocking kernel through CuPy, else torch's sleep kernel."""
    try:
        import cupy as cp  # noqa: PLC0415 - optional: absent on most machines
    except Exception:  # ImportError, or a CUDA library problem raised at import
        cp = None
    if cp is not None:
        try:
            return BlockingKernelHold(torch_device, cp)
        except Exception:  # noqa: BLE001 - NVRTC or driver trouble: the sleep kernel still works
            pass
    return SleepKernelHold(torch_device)
