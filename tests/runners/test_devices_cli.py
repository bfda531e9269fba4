"""`rooflab devices`: table and JSON output name the devices present and the default one."""
from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

from rooflab.runners.cli import devices_cmd
from rooflab.runners.machine.environment import best_device, capture


def app() -> typer.Typer:
    a = typer.Typer()
    devices_cmd.register(a, typer.Typer())

    @a.callback()
    def _root() -> None:  # keep `devices` a subcommand
        return None

    return a


def test_json_lists_every_device_with_identity_info_and_the_default() -> None:
    result = CliRunner().invoke(app(), ["devices", "--json"])
    assert result.exit_code == 0, result.output
    entries = json.loads(result.stdout)
    assert entries[-1]["torch_device"] == "cpu"
    assert [e["torch_device"] for e in entries if e["default"]] == [best_device()]
    cpu = entries[-1]
    record, device = capture("cpu")
    assert cpu["device_fingerprint"] == record.device_fingerprint
    assert cpu["identity"]["model"] == record.identity["model"]
    assert cpu["l2_bytes"] == device.l2_bytes > 0
    assert "git_commit" in cpu["info"] and "host" in cpu["info"]


def test_table_names_the_device_make_bench_uses() -> None:
    result = CliRunner().invoke(app(), ["devices"])
    assert result.exit_code == 0, result.output
    assert "device_fingerprint" in result.stdout
    assert f"make bench uses {best_device()}" in result.stdout
