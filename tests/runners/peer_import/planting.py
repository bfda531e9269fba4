"""Planted faults and planted runs made from the committed real outputs (never the outputs themselves):
a table slowed by a factor (its algbw, busbw and footer average rewritten as nccl-tests prints them),
a table cut short, a busbw edited, a `#wrong` above 0. Not a test module (no `test_` prefix)."""
from __future__ import annotations

import math
import random
import re
from pathlib import Path

FIXTURES = Path(__file__).with_name("fixtures")
ROW = re.compile(r"^(\s*)(\d+)(\s+)(\d+)(\s+\S+\s+\S+\s+-?\d+)(.*)$")


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: two decimals, else one, else none, else an exponent, within `width`."""
    for fmt in (f"{{:{width}.2f}}", f"{{:{width}.1f}}", f"{{:{width}.0f}}"):
        text = fmt.format(value)
        if len(text) <= width:
            return text
    return f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"


def _factor(ranks: int) -> float:
    return 2 * (ranks - 1) / ranks  # all_reduce


def slowed(text: str, factor: float, *, ranks: int, from_bytes: int = 0, jitter: float = 0.0, seed: int = 0) -> str:
    """The all_reduce table of `text` with every time at or above `from_bytes` multiplied by
    `factor` (and each by its own random factor exp(N(0, jitter)): another run's noise), its
    bandwidths and the footer's average rewritten to match."""
    rng = random.Random(seed)
    out, busbws = [], []
    for line in text.splitlines():
        m = ROW.match(line)
        if not m:
            out.append(line)
            continue
        size = int(m.group(2))
        fields = m.group(6).split()
        halves = []
        for half in (fields[0:4], fields[4:8]):
            t = float(half[0]) * (factor if size >= from_bytes else 1.0) * math.exp(rng.gauss(0.0, jitter))
            algbw = size / (t * 1e-6) / 1e9
            busbw = algbw * _factor(ranks)
            busbws.append(float(float_str(busbw, 6)))
            halves.append(f"  {float_str(t, 7)}  {float_str(algbw, 6)}  {float_str(busbw, 6)}  {half[3]:>6}")
        out.append(f"{m.group(1)}{m.group(2)}{m.group(3)}{m.group(4)}{m.group(5)}{''.join(halves)}")
    average = sum(busbws) / len(busbws)
    return "\n".join(re.sub(r"(Avg bus bandwidth\s*:\s*)\S+", lambda m: f"{m.group(1)}{average:g}", line)
                     for line in out) + "\n"


def replace_line(text: str, number: int, old: str, new: str) -> str:
    """`text` with `old` replaced by `new` on line `number` (1-based) only."""
    lines = text.splitlines()
    assert old in lines[number - 1], (lines[number - 1], old)
    lines[number - 1] = lines[number - 1].replace(old, new, 1)
    return "\n".join(lines) + "\n"


def row_line(text: str, size: int) -> int:
    """The line number of the table row of `size` bytes (the first)."""
    for number, line in enumerate(text.splitlines(), start=1):
        m = ROW.match(line)
        if m and int(m.group(2)) == size:
            return number
    raise KeyError(size)
