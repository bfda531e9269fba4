"""`rooflab list SPEC`: the expanded cases of a spec, with their FLOPs and bytes, without running anything."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import typer

from rooflab.runners.cli.common import JsonOption
from rooflab.runners.cli.epilogue import console, respond
from rooflab.suite.case import Case
from rooflab.suite.ops.base import byte_split
from rooflab.suite.ops.registry import all_ops
from rooflab.suite.spec import apply_filters, expand, load_spec
from rooflab.vocab import DeviceKind

if TYPE_CHECKING:  # the spec's schema loads Pydantic: only when the command runs
    from rooflab.suite.spec_schema import Spec


def _si(value: float, unit: str = "") -> str:
    """1234567 -> '1.23 M' (powers of 1000), with an optional unit: '1.23 MB'."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".rstrip()


def _print_rows(rows: list[dict[str, Any]]) -> None:
    """Aligned plain columns (one line per case, never wrapped inside a cell: easy to grep)."""
    if not rows:
        return
    width = max(len("case_key"), *(len(r["case_key"]) for r in rows))
    header = (f"{'case_key':<{width}}  {'family':<10}  {'benchmark':<16}  {'FLOPs':>9}  {'bytes':>9}  {'read':>9}  "
              f"{'written':>9}")
    lines = [header]
    for r in rows:
        read, written = (("-", "-") if r["bytes_read"] is None  # a collective's link bytes: not split
                         else (_si(r["bytes_read"], "B"), _si(r["bytes_written"], "B")))
        lines.append(
            f"{r['case_key']:<{width}}  {r['family']:<10}  {r['benchmark']:<16}  {_si(r['flops']):>9}  "
            f"{_si(r['bytes'], 'B'):>9}  {read:>9}  {written:>9}"
        )
    console.print("\n".join(lines), soft_wrap=True, highlight=False, markup=False)


def case_row(case: Case, ops: Mapping[str, Any]) -> dict[str, Any]:
    """One case as a JSON-ready dict: its identity, settings and the op's FLOP/byte/memory models."""
    op = ops[case.op]
    flops = int(op.flops(case.params, case.dtype))
    nbytes = int(op.bytes(case.params, case.dtype))
    read, written = byte_split(op, case.params, case.dtype) or (None, None)
    return {
        "case_key": case.case_key,
        "benchmark": case.benchmark,
        "op": case.op,
        "op_version": case.op_version,
        "family": case.family,
        "backend": case.backend,
        "dtype": case.dtype,
        "cache": case.cache,
        "timing_mode": case.timing_mode,
        "collective_mode": case.collective_mode,
        "params": case.key_params,  # as the key and the database read them (a collective's `mode: isolated`)
        "tags": list(case.tags),
        "flops": flops,
        "bytes": nbytes,
        "bytes_read": read,
        "bytes_written": written,
        "intensity": flops / nbytes if nbytes else None,
        "memory_bytes": int(op.memory_bytes(case.params, case.dtype)),
        "max_memory_fraction": case.max_memory_fraction,
    }


def list_cases(
    spec_path: str, *, filters: list[str], device_kind: str | None, ops: Mapping[str, Any] | None = None
) -> tuple[Spec, list[dict[str, Any]]]:
    """Load, expand and filter a spec (with the registry's ops unless `ops` is given); SpecError on bad input."""
    spec = load_spec(spec_path, ops=ops)  # a malformed file is rejected before the ops are loaded
    if ops is None:
        ops = all_ops()
    cases = apply_filters(expand(spec, device_kind, ops=ops), filters, ops=ops)
    return spec, [case_row(c, ops) for c in cases]


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    @app.command("list")
    def list_command(
        spec: str = typer.Argument(
            ..., help="Spec file (or the name of a shipped spec: quick, nightly, roofline, health)."),
        filters: list[str] = typer.Option(
            [], "--filter", "-f",
            help="KEY=VALUE (op, family, backend, dtype, cache, timing_mode, benchmark, tag, "
                 "or a parameter); repeatable: "
            "a repeated key means OR (-f op=copy -f op=triad keeps both), different keys mean AND."
        ),
        device_kind: DeviceKind | None = typer.Option(
            None, "--device-kind", help="Keep only the benchmarks that run on this kind of device [default: all]."
        ),
        as_json: bool = JsonOption,
    ) -> None:
        """Print the cases a spec expands to (case_key, op, family, backend, dtype, cache, timing mode,
        params, FLOPs, bytes, and of them those read and those written) without running anything."""
        def show(listed: tuple[Spec, list[dict[str, Any]]]) -> None:
            loaded, rows = listed
            _print_rows(rows)
            where = f" for {device_kind.value} devices" if device_kind else ""
            console.print(
                f"{len(rows)} case{'s' if len(rows) != 1 else ''} from spec {loaded.name!r}{where}; "
                "case_key = op.vVERSION:backend:dtype:cache:timing_mode:params",
                soft_wrap=True,
                highlight=False,
                markup=False,
            )

        respond(lambda: list_cases(spec, filters=list(filters), device_kind=device_kind.value if device_kind else None),
                as_json=as_json, show=show,
                to_json=lambda listed: {"spec": listed[0].name, "path": str(listed[0].path),
                                        "sha256": listed[0].sha256, "count": len(listed[1]), "cases": listed[1]})

