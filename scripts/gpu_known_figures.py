"""Known figures measured beside rooflab's ceilings, in the same run, with plain torch.

Each figure is timed here independently of rooflab's engine: CUDA events around one call (on a CPU
the host clock, the call being synchronous), the L2 (or last-level cache) flushed before every call
by writing one buffer twice its size (CacheFlush: rooflab's default cold flush), so that the cache
holds none of the inputs or outputs; warm-up first, then the median of at least 20 calls.

Figures (sizes of the `gpu` profile; `cpu` and `tiny` are smaller, for a CPU and for the tests):
- copy: y.copy_(x), 1 GiB float32 arrays, bytes read + written
- triad: a = b + s*c (one torch.add with alpha), bytes 3 arrays; dot: torch.dot, bytes 2 arrays
- matmul: 8192^3 bfloat16 torch.matmul, 2·m·n·k FLOPs
- fusion: one x.cos() against x.cos().cos() eager (two kernels) and through torch.compile (one)
- attention: SDPA's flash backend against the naive softmax(q·kᵀ/√d)·v at 4k, 8k and 16k tokens
  (16k tokens per batch, 16 heads of 64, non-causal), 4·b·h·s²·d FLOPs

Then each is set beside rooflab's figure read from the results database (the ceilings from
reports.roofs.ceilings, the fusion and attention cases of the same shape) and the published references,
and a row is marked `below` when rooflab's figure is more than BELOW_TOLERANCE under the best of them.

    python scripts/gpu_known_figures.py --db sqlite:///out/rooflab.db --device auto \
        --json out/known-figures.json --markdown out/known-figures.md
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

import pandas as pd

from rooflab.reports.data.reads import REPORT_COLUMNS, load_device_results
from rooflab.reports.roofs.ceilings import compute_ceilings
from rooflab.vocab import DeviceKind, device_kind_of

MIN_REPS = 20
WARMUP_CALLS = 3
# rooflab's figure counts as "below" a reference when under it by more than this: two medians of
# the same kernel taken minutes apart on one GPU differ by about 1-2 %.
BELOW_TOLERANCE = 0.03


class Group(StrEnum):
    STREAM = "stream"
    MATMUL = "matmul"
    FUSION = "fusion"
    ATTENTION = "attention"


@dataclass(frozen=True)
class Profile:
    """Problem sizes of one run of the figures."""

    name: str
    stream_n: int  # float32 elements per array
    matmul_mnk: int
    matmul_dtype: str
    cos_n: int
    cos_dtype: str
    attention: tuple[tuple[int, int], ...]  # (tokens, batch)
    heads: int
    head_dim: int
    attention_dtype: str
    flush_bytes: int  # used when the device reports no cache size


PROFILES = {
    # rooflab's quick spec measures cos_cos at n=2^26 bf16 and attention at 4096 tokens, batch 4,
    # 16 heads of 64, bf16: the same shapes here, so that the two can be read side by side.
    "gpu": Profile("gpu", 1 << 28, 8192, "bfloat16", 1 << 26, "bfloat16",
                   ((4096, 4), (8192, 2), (16384, 1)), 16, 64, "bfloat16", 256 << 20),
    # the CPU shapes of quick.yaml (cpu_stream, cpu_fusion, cpu_attention)
    "cpu": Profile("cpu", 1 << 24, 1024, "float32", 1 << 20, "float32", ((256, 1), (512, 1)), 8, 64, "float32",
                   64 << 20),
    "tiny": Profile("tiny", 1 << 18, 128, "float32", 1 << 16, "float32", ((128, 1),), 2, 32, "float32", 4 << 20),
}


@dataclass(frozen=True)
class Measured:
    """One figure measured here."""

    key: str  # copy, triad, dot, matmul, cos, cos_cos_eager, cos_cos_compiled, attention_flash_4096, ...
    group: str
    label: str
    unit: str  # GB/s or TFLOP/s
    value: float | None
    median_ms: float | None
    reps: int
    shape: str
    check: str | None = None  # what the correctness check found
    error: str | None = None


@dataclass(frozen=True)
class Published:
    key: str
    device_family: str  # H100, H200
    value: float
    unit: str
    source: str


PUBLISHED: tuple[Published, ...] = (
    Published("copy", "H100", 3000.0, "GB/s",
              "device-to-device torch copy, read + write, H100 80GB HBM3 (about 3.0 TB/s)"),
    Published("copy", "H200", 4300.0, "GB/s", "device-to-device torch copy, read + write, H200 (about 4.3 TB/s)"),
    Published("triad", "H100", 2970.0, "GB/s", "BabelStream, H100, triad"),
    Published("dot", "H100", 3180.0, "GB/s", "BabelStream, H100, dot"),
    Published("matmul", "H100", 794.5, "TFLOP/s", "maximum achievable matmul FLOPS (MAMF), H100 SXM, bf16"),
)


@dataclass(frozen=True)
class Row:
    """One line of the comparison: rooflab's figure, the one measured here, the published one."""

    figure: str
    unit: str
    rooflab: float | None
    rooflab_source: str | None
    measured: float | None
    published: float | None
    published_source: str | None
    verdict: str  # ok, below, no rooflab figure, no reference

    @property
    def ratio_measured(self) -> float | None:
        return _ratio(self.rooflab, self.measured)

    @property
    def ratio_published(self) -> float | None:
        return _ratio(self.rooflab, self.published)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio_measured": self.ratio_measured, "ratio_published": self.ratio_published}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


# ---------------------------------------------------------------- timing


def esize(dtype: str) -> int:
    return {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}[dtype]


def torch_dtype(dtype: str) -> Any:
    import torch

    return getattr(torch, dtype)


class CacheFlush:
    """Write a buffer of twice the cache size (a new value each time): the cache ends up full of that
    buffer's dirty lines, none of the timed kernel's inputs or outputs, as after a kernel that wrote.
    That is rooflab's default cold flush (docs/timing.md), so the figures compare like with like."""

    def __init__(self, device: str, cache_bytes: int) -> None:
        import torch

        n = max(2 * cache_bytes // 4, 1 << 16)
        self.write = torch.empty(n, dtype=torch.float32, device=device)
        self.count = 0

    def __call__(self) -> None:
        self.count += 1
        self.write.fill_(float(self.count))


def time_calls_ms(fn: Callable[[], Any], device: str, flush: Callable[[], None], reps: int = MIN_REPS,
                  warmup: int = WARMUP_CALLS) -> list[float]:
    """Per-call times in ms, the cache flushed before each call (outside the timed region)."""
    import torch

    if reps < MIN_REPS:
        raise ValueError(f"reps {reps}: at least {MIN_REPS} (the median of fewer is not reported)")
    for _ in range(warmup):
        fn()
    if _on_gpu(device):
        torch.cuda.synchronize(device)
        pairs = []
        for _ in range(reps):
            flush()  # the GPU is busy flushing while the host enqueues start, fn, end
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize(device)
        return [s.elapsed_time(e) for s, e in pairs]
    times = []
    for _ in range(reps):
        flush()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def median_ms(times: Sequence[float]) -> float:
    return float(statistics.median(times))


# ---------------------------------------------------------------- the figures


@dataclass
class Bench:
    device: str
    profile: Profile
    reps: int = MIN_REPS
    compile: bool = True
    flush: Callable[[], None] = field(default=lambda: None)

    def measure(self, key: str, group: Group, label: str, unit: str, fn: Callable[[], Any], work: float,
                shape: str, check: Callable[[], str] | None = None) -> Measured:
        """Time fn; value = work / median (bytes -> GB/s, FLOPs -> TFLOP/s); run the check after."""
        try:
            times = time_calls_ms(fn, self.device, self.flush, self.reps)
            med = median_ms(times)
            scale = 1e9 if unit == "GB/s" else 1e12
            value = work / (med * 1e-3) / scale if med > 0 else None
            found = check() if check else None
            return Measured(key, group.value, label, unit, value, med, len(times), shape, found)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - one figure failing leaves the others
            error = f"{type(exc).__name__}: {exc}"[:400]
            return Measured(key, group.value, label, unit, None, None, 0, shape, None, error)


def stream_figures(b: Bench) -> list[Measured]:
    import torch

    n = b.profile.stream_n
    x = torch.rand(n, device=b.device)
    y = torch.empty_like(x)
    c = torch.rand(n, device=b.device)
    a = torch.empty_like(x)
    s = 0.4
    nb = 4 * n
    shape = f"n={n} float32 ({nb >> 20} MiB per array)"

    def check_copy() -> str:
        return "copy equals its source" if torch.equal(y, x) else "MISMATCH: copy differs from its source"

    def check_triad() -> str:
        err = float((a - (x + s * c)).abs().max())
        return f"max abs error {err:.2e}" + ("" if err < 1e-5 else " MISMATCH")

    dot_out: list[Any] = []

    def dot() -> Any:
        dot_out[:] = [torch.dot(x, c)]

    def check_dot() -> str:
        ref = float((x.double() * c.double()).sum())
        rel = abs(float(dot_out[0]) - ref) / abs(ref)
        return f"relative error {rel:.2e} against float64" + ("" if rel < 1e-3 else " MISMATCH")

    return [
        b.measure("copy", Group.STREAM, "copy y = x (read + write)", "GB/s", lambda: y.copy_(x), 2 * nb, shape,
                  check_copy),
        b.measure("triad", Group.STREAM, "triad a = x + s*c", "GB/s", lambda: torch.add(x, c, alpha=s, out=a), 3 * nb,
                  shape, check_triad),
        b.measure("dot", Group.STREAM, "dot x·c (read only)", "GB/s", dot, 2 * nb, shape, check_dot),
    ]


def matmul_figures(b: Bench) -> list[Measured]:
    import torch

    m = b.profile.matmul_mnk
    dt = torch_dtype(b.profile.matmul_dtype)
    x = torch.randn(m, m, device=b.device, dtype=dt)
    w = torch.randn(m, m, device=b.device, dtype=dt)
    out = torch.empty(m, m, device=b.device, dtype=dt)

    def check() -> str:
        rows = min(m, 64)
        ref = x[:rows].double() @ w.double()
        rel = float(torch.linalg.norm(out[:rows].double() - ref) / torch.linalg.norm(ref))
        bound = 1e-2 if b.profile.matmul_dtype in ("bfloat16", "float16") else 1e-3
        return f"relative error {rel:.1e} on {rows} rows against float64" + ("" if rel < bound else " MISMATCH")

    return [b.measure("matmul", Group.MATMUL, f"torch.matmul {m}^3 {b.profile.matmul_dtype}", "TFLOP/s",
                      lambda: torch.matmul(x, w, out=out), 2.0 * m ** 3, f"m=n=k={m} {b.profile.matmul_dtype}", check)]


def fusion_figures(b: Bench) -> list[Measured]:
    import torch

    n, dname = b.profile.cos_n, b.profile.cos_dtype
    x = torch.rand(n, device=b.device, dtype=torch_dtype(dname)) * 6 - 3
    y = torch.empty_like(x)
    tmp = torch.empty_like(x)
    nbytes = 2 * n * esize(dname)  # read x, write y: the fused minimum, also what one cos moves
    shape = f"n={n} {dname}"

    def two_kernels() -> None:
        torch.cos(x, out=tmp)
        torch.cos(tmp, out=y)

    figures = [
        b.measure("cos", Group.FUSION, "one x.cos()", "GB/s", lambda: torch.cos(x, out=y), nbytes, shape),
        b.measure("cos_cos_eager", Group.FUSION, "x.cos().cos() eager (2 kernels)", "GB/s", two_kernels, nbytes, shape),
    ]
    if b.compile:
        fused = torch.compile(lambda t: t.cos().cos())
        got: list[Any] = []

        def run() -> None:
            got[:] = [fused(x)]

        def check() -> str:
            err = float((got[0].float() - x.float().cos().cos()).abs().max())
            bound = 1e-2 if dname in ("bfloat16", "float16") else 1e-5
            return f"max abs error {err:.1e} against eager" + ("" if err < bound else " MISMATCH")

        figures.append(b.measure("cos_cos_compiled", Group.FUSION, "x.cos().cos() torch.compile (1 kernel)", "GB/s",
                                 run, nbytes, shape, check))
    return figures


def attention_figures(b: Bench) -> list[Measured]:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    p = b.profile
    dt = torch_dtype(p.attention_dtype)
    figures = []
    for tokens, batch in p.attention:
        shape = f"batch={batch} heads={p.heads} seq={tokens} head_dim={p.head_dim} {p.attention_dtype} non-causal"
        flops = 4.0 * batch * p.heads * tokens * tokens * p.head_dim
        q, k, v = (torch.randn(batch, p.heads, tokens, p.head_dim, device=b.device, dtype=dt) for _ in range(3))
        scale = 1.0 / math.sqrt(p.head_dim)
        outs: dict[str, Any] = {}

        def flash(q=q, k=k, v=v, outs=outs) -> None:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                outs["flash"] = F.scaled_dot_product_attention(q, k, v)

        def naive(q=q, k=k, v=v, outs=outs, scale=scale) -> None:
            outs["naive"] = torch.softmax((q @ k.transpose(-2, -1)) * scale, dim=-1) @ v

        def check(outs=outs) -> str:
            if "flash" not in outs:
                return "flash did not run"
            a, r = outs["flash"].float(), outs["naive"].float()
            rel = float(torch.linalg.norm(a - r) / torch.linalg.norm(r))
            bound = 2e-2 if p.attention_dtype in ("bfloat16", "float16") else 1e-4
            return f"flash against naive: relative error {rel:.1e}" + ("" if rel < bound else " MISMATCH")

        figures.append(b.measure(f"attention_flash_{tokens}", Group.ATTENTION, f"SDPA flash, {tokens} tokens",
                                 "TFLOP/s", flash, flops, shape))
        figures.append(b.measure(f"attention_naive_{tokens}", Group.ATTENTION, f"naive attention, {tokens} tokens",
                                 "TFLOP/s", naive, flops, shape, check))
        del q, k, v, outs
        if _on_gpu(b.device):
            torch.cuda.empty_cache()
    return figures


MEASURERS: dict[Group, Callable[[Bench], list[Measured]]] = {
    Group.STREAM: stream_figures,
    Group.MATMUL: matmul_figures,
    Group.FUSION: fusion_figures,
    Group.ATTENTION: attention_figures,
}


# ---------------------------------------------------------------- rooflab's side


def device_family(name: str | None) -> str | None:
    text = (name or "").upper()
    for family in ("H200", "H100"):
        if family in text:
            return family
    return None


def published_for(key: str, device_name: str | None) -> Published | None:
    family = device_family(device_name)
    return next((p for p in PUBLISHED if p.key == key and p.device_family == family), None)


def _params(value: Any) -> dict:
    if isinstance(value, str):
        return json.loads(value)
    return dict(value or {})


def case_figure(rows: Any, op: str, unit: str, *, dtype: str, backend: str = "eager",
                **params: Any) -> tuple[float | None, str | None]:
    """rooflab's best ok figure (gbps or tflops) of the cold, launch-mode cases of `op` whose
    parameters include `params`, with its case key."""
    if rows is None or rows.empty:
        return None, None
    sub = rows[(rows["op"] == op) & (rows["dtype"] == dtype) & (rows["backend"] == backend)
               & (rows["status"] == "ok") & (rows["cache"] == "cold") & (rows["timing_mode"] == "launch")]
    if "throttled" in sub.columns:
        sub = sub[~sub["throttled"].astype(bool)]
    keep = [all(_params(p).get(k) == v for k, v in params.items()) for p in sub["params"]]
    sub = sub[pd.Series(keep, index=sub.index, dtype=bool)] if len(sub) else sub
    column = "gbps" if unit == "GB/s" else "tflops"
    values = pd.to_numeric(sub[column], errors="coerce") if len(sub) else None
    if values is None or values.dropna().empty:
        return None, None
    best = sub.loc[values.idxmax()]
    return float(best[column]), str(best["case_key"])


def _verdict(rooflab: float | None, refs: Iterable[float | None]) -> str:
    known = [r for r in refs if r is not None]
    if rooflab is None:
        return "no rooflab figure"
    if not known:
        return "no reference"
    return "below" if rooflab < (1.0 - BELOW_TOLERANCE) * max(known) else "ok"


def compare(measured: Sequence[Measured], rows: Any, device_name: str | None, profile: Profile) -> list[Row]:
    """The comparison table: one row per figure measured here (and per published one)."""
    by_key = {m.key: m for m in measured}
    dc = compute_ceilings(rows, device_name or "") if rows is not None and not rows.empty else None
    out: list[Row] = []

    def ceiling(kind: str, dtype: str | None = None) -> tuple[float | None, str | None]:
        c = dc.get(kind, dtype=dtype) if dc is not None else None
        return (c.value, f"{c.label}: {c.case_key}") if c else (None, None)

    def add(figure: str, unit: str, rooflab: tuple[float | None, str | None], key: str | None,
            published_key: str | None = None) -> None:
        m = by_key.get(key) if key else None
        pub = published_for(published_key, device_name) if published_key else None
        mv = m.value if m else None
        out.append(Row(figure, unit, rooflab[0], rooflab[1], mv, pub.value if pub else None,
                       pub.source if pub else None, _verdict(rooflab[0], (mv, pub.value if pub else None))))

    add("HBM read+write (copy)", "GB/s", ceiling("hbm_rw"), "copy", "copy")
    add("HBM read+write (triad)", "GB/s", ceiling("hbm_rw"), "triad", "triad")
    add("HBM read-only (dot)", "GB/s", ceiling("hbm_ro"), "dot", "dot")
    add(f"matrix {profile.matmul_dtype} ({profile.matmul_mnk}^3 matmul)", "TFLOP/s",
        ceiling("matrix", profile.matmul_dtype), "matmul", "matmul")
    n, dt = profile.cos_n, profile.cos_dtype
    compiled = case_figure(rows, "cos_cos", "GB/s", dtype=dt, backend="compiled", n=n)
    add("cos one kernel vs rooflab cos_cos compiled", "GB/s", compiled, "cos")
    add("cos_cos torch.compile", "GB/s", compiled, "cos_cos_compiled")
    add("cos_cos eager (2 kernels)", "GB/s", case_figure(rows, "cos_cos", "GB/s", dtype=dt, backend="eager", n=n),
        "cos_cos_eager")
    for tokens, batch in profile.attention:
        for kernel, name in (("sdpa_flash", "flash"), ("naive", "naive")):
            add(f"attention {name} {tokens} tokens", "TFLOP/s",
                case_figure(rows, "attention", "TFLOP/s", dtype=profile.attention_dtype, kernel=kernel, batch=batch,
                            heads=profile.heads, seq_q=tokens, seq_k=tokens, head_dim=profile.head_dim, causal=False),
                f"attention_{name}_{tokens}")
    return out


def load_rows(db_url: str, device: str) -> tuple[str | None, Any]:
    """(device name, its results) from the database; (None, None) when it holds none of that kind."""
    try:
        return load_device_results(db_url, device, REPORT_COLUMNS)
    except Exception as exc:  # noqa: BLE001 - no results of the device: the table says so
        print(f"known-figures: no rooflab results for {device!r} in {db_url}: {exc}", file=sys.stderr)
        return None, None


# ---------------------------------------------------------------- output


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "ratio":
        return f"{value:.3f}"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"


def markdown(rows: Sequence[Row], measured: Sequence[Measured], header: Mapping[str, Any]) -> str:
    lines = [f"# Known figures on {header.get('device_name')}", ""]
    lines += [f"- {k}: {v}" for k, v in header.items()]
    lines += ["", "| figure | unit | rooflab | this run (torch) | rooflab / this run | published "
                  "| rooflab / published | verdict | rooflab source |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for r in rows:
        lines.append(f"| {r.figure} | {r.unit} | {_fmt(r.rooflab)} | {_fmt(r.measured)} "
                     f"| {_fmt(r.ratio_measured, 'ratio')} | {_fmt(r.published)} | {_fmt(r.ratio_published, 'ratio')} "
                     f"| {r.verdict} | {r.rooflab_source or '-'} |")
    lines += ["", "## Figures measured in this run", "",
              "| figure | value | unit | median ms | reps | shape | check | error |",
              "| --- | ---: | --- | ---: | ---: | --- | --- | --- |"]
    for m in measured:
        lines.append(f"| {m.label} | {_fmt(m.value)} | {m.unit} | {_fmt(m.median_ms)} | {m.reps} | {m.shape} "
                     f"| {m.check or '-'} | {m.error or '-'} |")
    sources = sorted({(p.key, p.device_family, p.source) for p in PUBLISHED})
    lines += ["", "Published references: " + "; ".join(f"{k} ({fam}): {src}" for k, fam, src in sources), ""]
    return "\n".join(lines)


def text_table(rows: Sequence[Row]) -> str:
    head = ("figure", "unit", "rooflab", "this run", "r/run", "published", "r/pub", "verdict")
    body = [(r.figure, r.unit, _fmt(r.rooflab), _fmt(r.measured), _fmt(r.ratio_measured, "ratio"), _fmt(r.published),
             _fmt(r.ratio_published, "ratio"), r.verdict) for r in rows]
    widths = [max(len(str(x[i])) for x in (head, *body)) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)) for line in (head, *body))


# ---------------------------------------------------------------- main


def _on_gpu(device: str) -> bool:
    return device_kind_of(device) is DeviceKind.CUDA


def resolve_device(text: str) -> str:
    import torch

    if text == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        kind = device_kind_of(text)
    except ValueError:
        raise SystemExit(f"known-figures: --device {text!r}: allowed auto, cpu, cuda, cuda:N") from None
    if kind is DeviceKind.CUDA and not torch.cuda.is_available():
        raise SystemExit(f"known-figures: --device {text}: torch sees no CUDA device here")
    return text


def cache_bytes(device: str, profile: Profile) -> int:
    import torch

    if _on_gpu(device):
        l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
        return l2 or profile.flush_bytes
    return profile.flush_bytes


def parse_groups(text: str) -> list[Group]:
    allowed = [g.value for g in Group]
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part not in allowed:
            raise SystemExit(f"known-figures: --only {part!r}: allowed {', '.join(allowed)}")
        out.append(Group(part))
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, checked (SystemExit with the message on a bad one); nothing is measured."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", help="rooflab results database (SQLAlchemy URL); without it only this run's figures")
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    ap.add_argument("--profile", choices=sorted(PROFILES), help="sizes; default gpu on a GPU, cpu on a CPU")
    ap.add_argument("--reps", type=int, default=MIN_REPS, help=f"timed calls per figure (>= {MIN_REPS})")
    ap.add_argument("--only", default=",".join(g.value for g in Group), help="comma-separated groups")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile figure")
    ap.add_argument("--json", dest="json_out", help="write the figures and the comparison here")
    ap.add_argument("--markdown", help="write the comparison table here (Markdown)")
    args = ap.parse_args(argv)
    if args.reps < MIN_REPS:
        raise SystemExit(f"known-figures: --reps {args.reps}: at least {MIN_REPS}")
    parse_groups(args.only)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    groups = parse_groups(args.only)

    import torch

    device = resolve_device(args.device)
    profile = PROFILES[args.profile or ("gpu" if _on_gpu(device) else "cpu")]
    torch.manual_seed(1234)
    name = torch.cuda.get_device_name(device) if _on_gpu(device) else "cpu"
    bench = Bench(device, profile, args.reps, not args.no_compile, CacheFlush(device, cache_bytes(device, profile)))
    measured: list[Measured] = []
    status = "complete"
    try:
        for group in groups:
            t0 = time.monotonic()
            measured += MEASURERS[group](bench)
            print(f"known-figures: {group.value} measured in {time.monotonic() - t0:.1f} s", file=sys.stderr,
                  flush=True)
    except KeyboardInterrupt:
        status = "interrupted"
        print("known-figures: interrupted; writing what was measured", file=sys.stderr)
    db_name, rows = load_rows(args.db, "cuda" if _on_gpu(device) else "cpu") if args.db else (None, None)
    table = compare(measured, rows, db_name or name, profile)
    header = {
        "device_name": db_name or name, "torch_device": device, "torch": torch.__version__,
        "cuda": torch.version.cuda, "profile": profile.name, "reps": args.reps, "status": status,
        "database": args.db or "none",
    }
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            json.dump({**header, "figures": [asdict(m) for m in measured], "comparison": [r.as_dict() for r in table],
                       "published": [asdict(p) for p in PUBLISHED], "below_tolerance": BELOW_TOLERANCE}, fh, indent=2)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as fh:
            fh.write(markdown(table, measured, header))
    print(text_table(table))
    failed = [m for m in measured if m.error or (m.check and "MISMATCH" in m.check)]
    for m in failed:
        print(f"known-figures: {m.key}: {m.error or m.check}", file=sys.stderr)
    return 1 if failed or status != "complete" else 0


if __name__ == "__main__":
    sys.exit(main())
