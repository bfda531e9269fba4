"""What comes back from a GPU loan: the return folder (the device call's $OUT), packed after every
step within the device tool's limits, so that a call stopped at its limit, a crash or a lost step
still returns what finished.

The folder holds at most four files, whatever the loan wrote:
  steps.tsv          every step so far: status, exit code, seconds, expected, timeout, log, note
  plan.json          the plan as run: each step's commands, box, reserve, expected seconds, and outcome
  evidence.tar.gz    the work folder but its databases: logs, JSON and Markdown tables, ncu reports,
                     the export and the report; smallest files first, the largest left out (named in
                     LEFT-OUT.txt inside) when the whole would pass the size limit
  rooflab.db.gz      the results database (an SQLite backup, consistent even mid-write), gzipped;
                     kept at its last size under the limit
Standard library only.
"""
from __future__ import annotations

import gzip
import io
import os
import re
import shutil
import sqlite3
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

RETURN_MAX_FILES = 8
RETURN_MAX_FILE_BYTES = 16 * 1024 * 1024
RETURN_MAX_DEPTH = 2  # $OUT/a/b/file comes back, $OUT/a/b/c/file does not
RETURN_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
DATABASE_SUFFIXES = (".db", ".db-wal", ".db-shm", ".db-journal")
EVIDENCE = "evidence.tar.gz"
DATABASE = "rooflab.db.gz"
LEFT_OUT = "LEFT-OUT.txt"
HEADROOM_BYTES = 64 * 1024  # for the tar's end, gzip's trailer and LEFT-OUT.txt
TEMP_PREFIX = ".packing-"  # a file being written beside its place


def limits() -> dict:
    """The return folder's files and the device tool's limits on it, for the plan as JSON."""
    return {"files": ["steps.tsv", "plan.json", EVIDENCE, DATABASE], "max_files": RETURN_MAX_FILES,
            "max_file_bytes": RETURN_MAX_FILE_BYTES, "max_depth": RETURN_MAX_DEPTH, "names": RETURN_NAME.pattern}


def return_folder_problems(folder: Path, max_files: int = RETURN_MAX_FILES,
                           max_file_bytes: int = RETURN_MAX_FILE_BYTES) -> list[str]:
    """What in `folder` would not come back from the device call: too many files, a file too large,
    a file too deep, a name with other characters than letters, digits, '.', '_' and '-', a link."""
    problems, files = [], []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(not RETURN_NAME.match(part) for part in rel.parts):
            problems.append(f"{rel}: a name with characters other than letters, digits, '.', '_', '-'")
        if path.is_symlink():
            problems.append(f"{rel}: a link")
        elif path.is_file():
            files.append(path)
            if len(rel.parts) - 1 > RETURN_MAX_DEPTH:
                problems.append(f"{rel}: more than {RETURN_MAX_DEPTH} folders down")
            if path.stat().st_size > max_file_bytes:
                problems.append(f"{rel}: {path.stat().st_size} bytes, over {max_file_bytes}")
    if len(files) > max_files:
        problems.append(f"{len(files)} files, over {max_files}")
    return problems


def _evidence_files(work: Path) -> list[Path]:
    """Every file of the work folder but the databases, smallest first (ties by name)."""
    files = [p for p in work.rglob("*")
             if p.is_file() and not p.is_symlink() and not p.name.endswith(DATABASE_SUFFIXES)]
    return sorted(files, key=lambda p: (p.stat().st_size, str(p)))


def write_evidence(work: Path, target: Path, max_bytes: int) -> list[str]:
    """The work folder but its databases as `target` (a .tar.gz under `max_bytes`), written beside it
    and moved into place; returns the files left out for want of room, largest last."""
    left_out: list[str] = []
    fd, tmp_name = tempfile.mkstemp(prefix=TEMP_PREFIX + "evidence-", dir=target.parent)
    with os.fdopen(fd, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w") as tar:
            for path in _evidence_files(work):
                size = path.stat().st_size
                # its compressed size is at most its own plus the tar header and padding
                if raw.tell() + size + size // 100 + 2048 + HEADROOM_BYTES > max_bytes:
                    left_out.append(f"{path.relative_to(work)}\t{size}")
                    continue
                tar.add(path, arcname=f"{work.name}/{path.relative_to(work)}", recursive=False)
            if left_out:
                text = ("files left out of this archive (path, bytes): over the return limit of "
                        f"{max_bytes} bytes\n" + "\n".join(left_out) + "\n").encode()
                info = tarfile.TarInfo(f"{work.name}/{LEFT_OUT}")
                info.size = len(text)
                tar.addfile(info, io.BytesIO(text))
    os.chmod(tmp_name, 0o644)
    os.replace(tmp_name, target)
    return left_out


def _gzip_under(source: Path, target_dir: Path, max_bytes: int) -> Path | None:
    """`source` gzipped into a new file of `target_dir`, or None (nothing left) once it passes `max_bytes`."""
    fd, packed_name = tempfile.mkstemp(prefix=TEMP_PREFIX + "db-", suffix=".gz", dir=target_dir)
    with os.fdopen(fd, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz, source.open("rb") as src:
            while chunk := src.read(1 << 20):
                gz.write(chunk)
                if raw.tell() > max_bytes:
                    break
        fits = raw.tell() <= max_bytes
    if not fits:
        Path(packed_name).unlink()
        return None
    return Path(packed_name)


def write_database(db: Path, target: Path, max_bytes: int) -> str | None:
    """An SQLite backup of `db` (what its writers committed, the WAL included), gzipped into
    `target` when under `max_bytes`; else the last one stays. Returns why it was not written."""
    if not db.exists():
        return None
    with tempfile.TemporaryDirectory(prefix="rooflab-loan-") as scratch:
        backup = Path(scratch) / "rooflab.db"
        try:
            source = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
            dest = sqlite3.connect(backup)
            try:
                source.backup(dest)
            finally:
                dest.close()
                source.close()
        except sqlite3.Error as exc:
            return f"{DATABASE}: not written: {exc}"
        packed = _gzip_under(backup, target.parent, max_bytes)
    if packed is None:
        return f"{DATABASE}: over {max_bytes} bytes gzipped: the last one under the limit stays"
    os.chmod(packed, 0o644)
    os.replace(packed, target)
    return None


@dataclass(frozen=True)
class Packed:
    left_out: tuple[str, ...]  # files of the work folder not in the evidence archive
    database_note: str | None


def pack(work: Path, folder: Path, db: Path, max_bytes: int = RETURN_MAX_FILE_BYTES) -> Packed:
    """The return folder brought up to date with the work folder (steps.tsv and plan.json copied,
    the evidence archive and the database rewritten). Each file is written beside its place and
    moved in, so a kill mid-way leaves the last whole one (and at most a partial one of each beside
    it, under the size limit, which the next pack removes)."""
    for stale in folder.glob(TEMP_PREFIX + "*"):
        stale.unlink(missing_ok=True)
    for name in ("steps.tsv", "plan.json"):
        source = work / name
        if source.exists():
            fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{name}-", dir=folder)
            os.close(fd)
            shutil.copyfile(source, tmp)
            os.chmod(tmp, 0o644)
            os.replace(tmp, folder / name)
    left_out = write_evidence(work, folder / EVIDENCE, max_bytes)
    note = write_database(db, folder / DATABASE, max_bytes)
    return Packed(tuple(left_out), note)
