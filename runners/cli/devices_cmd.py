"""`rooflab devices`: the devices present, their identity and informational fields, and the default."""
from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from rooflab.runners.cli.common import JsonOption
from rooflab.runners.cli.epilogue import console, respond
from rooflab.runners.machine.environment import best_device, capture, list_devices


def _fmt_bytes(value: Any) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "-" if value is None else str(value)
    for unit, scale in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= scale:
            return f"{value / scale:.4g} {unit}"
    return f"{value} B"


def _fmt(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key.endswith("_bytes"):
        return _fmt_bytes(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def describe_devices() -> list[dict[str, Any]]:
    """One JSON-ready entry per device present, in `list_devices()` order."""
    default = best_device()
    out = []
    for name in list_devices():
        record, device = capture(name)
        out.append(
            {
                "torch_device": name,
                "default": name == default,
                "device_name": record.device_name,
                "device_kind": record.device_kind,
                "device_fingerprint": record.device_fingerprint,
                "l2_bytes": device.l2_bytes,
                "identity": dict(record.identity),
                "info": dict(record.info),
            }
        )
    return out


def _table(entry: dict[str, Any]) -> Table:
    mark = "  [bold green](used by make bench)[/]" if entry["default"] else ""
    table = Table(
        title=f"{entry['torch_device']}: {entry['device_name']}{mark}",
        title_justify="left",
        show_header=True,
        header_style="bold",
    )
    table.add_column("field")
    table.add_column("value", overflow="fold")
    table.add_column("kind", style="dim")
    table.add_row("device_fingerprint", entry["device_fingerprint"], "identity hash")
    for key, value in entry["identity"].items():
        table.add_row(key, _fmt(key, value), "identity")
    table.add_row("l2_bytes (flush sizing)", _fmt_bytes(entry["l2_bytes"]), "info")
    for key, value in entry["info"].items():
        table.add_row(key, _fmt(key, value), "info")
    return table


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    @app.command("devices")
    def devices(json_out: bool = JsonOption) -> None:
        """List the devices present (CUDA GPUs, then the CPU) and which one `make bench` uses."""
        respond(describe_devices, as_json=json_out, show=_show)


def _show(entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        console.print(_table(entry))
    default = next(e for e in entries if e["default"])
    console.print(f"make bench uses [bold]{default['torch_device']}[/] ({default['device_name']})")
