"""A warm Python for a fake profiler that runs many short children: `python -m MODULE ARGS...`
started by a fork of an interpreter that imported torch once, instead of a fresh interpreter that
imports it again (about 4 s of CPU each on the test machine).

`WarmPython(preload)` starts the server (`python -m tests.runners.warm_python SOCKET MODULE...`: it
imports the MODULEs, then listens on SOCKET); `run(address, argv, env, cwd)`, called from
any process (tests/runners/fake_ncu.py does, when $FAKE_NCU_WARM_PYTHON names the socket), hands it
the command line, the environment, the working folder and its own stdin, stdout and stderr, and
returns the child's exit code. The server forks; the child takes the caller's three streams (or
the three descriptors `fds` names), environment, folder and `sys.argv`, and runs MODULE as `-m`
runs it (`runpy`, `__name__` is "__main__"). Calls from several threads run their children at
once (the ranks of a group, each started as a launcher starts it); a child holds no other call's
connection. What a fork cannot show is that the command line starts in a fresh interpreter: tests
that need that keep a real exec.
"""
from __future__ import annotations

import importlib
import json
import os
import runpy
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

READY = "ready"
REPO = Path(__file__).resolve().parents[2]


def run(address: str, argv: Sequence[str], env: Mapping[str, str], cwd: str, fds: Sequence[int] = (0, 1, 2)) -> int:
    """`argv` (`[python, "-m", MODULE, *args]`) run by the warm server at `address`, its stdin, stdout
    and stderr the descriptors `fds` (this process's own by default); its exit code."""
    assert len(argv) >= 3 and argv[1] == "-m", f"not a `python -m MODULE` command line: {argv}"
    request = json.dumps({"module": argv[2], "args": list(argv[3:]), "env": dict(env), "cwd": cwd}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(address)
        socket.send_fds(conn, [len(request).to_bytes(8, "big") + request], list(fds))
        reply = b""
        while chunk := conn.recv(4096):
            reply += chunk
    return int(json.loads(reply)["returncode"])


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    size = int.from_bytes(data[:8], "big")
    body = data[8:]
    while len(body) < size:
        body += conn.recv(size - len(body))
    return json.loads(body), fds


def _child(request: dict, fds: list[int]) -> int:
    """In the forked child: take the caller's streams, environment, folder and argv; run the module."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = [request["module"], *request["args"]]
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        if isinstance(exc.code, str):  # what an interpreter prints for sys.exit("message")
            print(exc.code, file=sys.stderr)
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - what an interpreter does with an uncaught exception
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def serve(address: str, preload: Sequence[str]) -> None:
    for module in preload:
        importlib.import_module(module)
    live: set[socket.socket] = set()  # the connections whose children run: a new child closes them
    lock = threading.Lock()

    def answer(conn: socket.socket, pid: int) -> None:
        _, status = os.waitpid(pid, 0)
        with lock:
            live.discard(conn)
        with conn:
            conn.sendall(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(address)
        server.listen()
        print(READY, flush=True)
        while True:
            conn, _ = server.accept()
            request, fds = _receive(conn)
            with lock:
                pid = os.fork()
                if pid == 0:
                    for other in (server, conn, *live):
                        other.close()
                    os._exit(_child(request, fds))
                live.add(conn)
            for fd in fds:
                os.close(fd)
            threading.Thread(target=answer, args=(conn, pid), daemon=True).start()


class WarmPython:
    """The server process (a context manager: it is killed on exit) and its socket's address."""

    def __init__(self, preload: Sequence[str]) -> None:
        # a folder of its own under the system's temporary folder: a socket's path is at most 107 bytes
        self._folder = tempfile.mkdtemp(prefix="rooflab-warm-")
        self.address = os.path.join(self._folder, "socket")
        # a session of its own: closing it ends the server and any child still running
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.runners.warm_python", self.address, *preload],
                                     cwd=REPO, stdout=subprocess.PIPE, text=True, start_new_session=True)

    def wait_ready(self) -> None:
        """Wait until the server has imported its modules and listens."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == READY, f"the warm python did not start (exit code {self.proc.poll()})"

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        shutil.rmtree(self._folder, ignore_errors=True)

    def __enter__(self) -> WarmPython:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2:])
