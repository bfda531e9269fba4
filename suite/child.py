"""One function call in a fresh process of its own: its result, its error, or why it gave neither.

`ChildCall(fn, args, context)` starts the process at once (a multiprocessing context: `spawn`, or
the runner's fork server); `.result(timeout_s)` waits for what it sends back; `.cancel()` ends it.
Used where a call must not share a process with its caller: a timer that runs once per process
(the cross-check's nvbench peer) and the report's verdicts, judged beside its drawing.

Unlike a multiprocessing Pool, a child that dies (a crash, `os._exit`, the OOM killer) is reported at
once with its exit code instead of after the whole timeout, and an error comes back as the text of
the exception (its type and message), so an exception that cannot be rebuilt in the caller cannot
hang it. The child is not a daemon: it may start processes of its own (torch.compile's workers).
The caller's environment of now is the child's (a fork server's own is that of an earlier moment).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

TERMINATE_GRACE_S = 5.0


class ChildCallError(RuntimeError):
    """The call raised in the child (the message is its type and text), or the child gave no result."""


def _child_main(conn: Connection, environ: dict[str, str], fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    os.environ.clear()
    os.environ.update(environ)
    try:
        result = fn(*args)
    except BaseException as exc:  # noqa: BLE001 - every error goes back to the caller as text
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    else:
        conn.send(("ok", result))
    finally:
        conn.close()


class ChildCall:
    """`fn(*args)` running in a fresh process started from `context`."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], context: Any) -> None:
        self._reader, writer = context.Pipe(duplex=False)
        self._process = context.Process(target=_child_main, args=(writer, dict(os.environ), fn, args), daemon=False)
        self._process.start()
        writer.close()  # the child holds the only writer: its death ends the pipe

    def result(self, timeout_s: float | None = None) -> Any:
        """What the call returned; ChildCallError when it raised, died or gave nothing in `timeout_s`.
        The child is ended in every case."""
        answered = False
        try:
            if not wait([self._reader, self._process.sentinel], timeout_s):
                raise ChildCallError(f"the process gave no result in {timeout_s:.0f} s")
            answered = True
            if not self._reader.poll():
                self._process.join(TERMINATE_GRACE_S)
                raise ChildCallError(f"the process ended (exit code {self._process.exitcode}) without a result")
            try:
                kind, payload = self._reader.recv()
            except EOFError:
                self._process.join(TERMINATE_GRACE_S)
                raise ChildCallError(f"the process ended (exit code {self._process.exitcode}) "
                                     "without a result") from None
            if kind == "error":
                raise ChildCallError(payload)
            return payload
        finally:
            if answered:  # it exits once it has sent (or has ended): give it the time to
                self._process.join(TERMINATE_GRACE_S)
            self.cancel()  # one that gave nothing in time is ended at once

    def cancel(self) -> None:
        """End the child if it still runs (terminate, then kill after a grace period); idempotent."""
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(TERMINATE_GRACE_S)
            if self._process.is_alive():
                self._process.kill()
        self._process.join(TERMINATE_GRACE_S)
        self._reader.close()
