"""A PostgreSQL server of the benchmark's own: initdb into a folder, pg_ctl start, and both undone after.

    with temporary_server(folder) as server_url:      # "postgresql+psycopg://postgres@127.0.0.1:PORT/postgres"
        ...

The server is PostgreSQL's own binaries (`pg_config --bindir`, else the newest of
/usr/lib/postgresql/*/bin), run as the `postgres` user when the benchmark runs as root (initdb refuses
root), on a free port of the loopback, with the settings of `SETTINGS` (a results server's: a
quarter of a small machine's memory for buffers, room for a night's WAL). Stopping it (`pg_ctl stop
-m fast`) and removing the folder happen however the block ends.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SETTINGS = {
    "shared_buffers": "1GB", "work_mem": "64MB", "maintenance_work_mem": "1GB", "max_wal_size": "8GB",
    "checkpoint_timeout": "30min", "listen_addresses": "'127.0.0.1'",
}


def binaries() -> Path:
    """The folder of PostgreSQL's server programs."""
    try:
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
        if (Path(out) / "initdb").exists():
            return Path(out)
    except (OSError, subprocess.CalledProcessError):
        pass
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    if not found:
        raise RuntimeError("no PostgreSQL server programs (initdb) found: install postgresql, or pass --postgres URL")
    return found[-1].parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@contextmanager
def temporary_server(folder: Path) -> Iterator[str]:
    """A fresh server with its data in `folder` (created; removed afterwards); yields its URL."""
    bindir, port = binaries(), free_port()
    folder.mkdir(parents=True)
    data = folder / "data"
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    try:
        subprocess.run(_as_server_user([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-E", "UTF8",
                                        "--locale=C.UTF-8", "--auth=trust"]),
                       check=True, capture_output=True)
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(f"port = {port}\nunix_socket_directories = '{folder}'\n")
            conf.writelines(f"{name} = {value}\n" for name, value in SETTINGS.items())
        subprocess.run(_as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(folder / "server.log"),
                                        "-w", "start"]), check=True, capture_output=True)
        try:
            yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run(_as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                           check=False, capture_output=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
