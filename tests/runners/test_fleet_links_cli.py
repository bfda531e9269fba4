"""`rooflab fleet --links`: the newest links night of a database judged, its slow ends and slow links
named in the text and in the JSON (`links`: a, b, status, deviation, ...), --fail-on's exit code, and
one line with exit code 2 where the suite holds no pair."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rooflab.db.importer import import_file
from rooflab.runners.cli.app import app
from rooflab.suite.ops.pairs import pair_of_key
from rooflab.suite.ops.registry import get_op
from tests.reports.fleet.test_links import night_rows


def _export(rows: list[dict], path: Path, suite: str) -> Path:
    """The simulated pairs as a rooflab export (JSON Lines) of `suite`."""
    op = get_op("sendrecv_pairs")
    with path.open("w", encoding="utf-8") as fh:
        for r in rows:
            found = pair_of_key(r["case_key"])
            assert found is not None
            matrix, ends = found
            params = {**dict(p.split("=", 1) for p in matrix.rpartition(":")[2].split(",")), **ends.params()}
            params = {k: int(v) if isinstance(v, str) and v.isdigit() else v for k, v in params.items()}
            nbytes = op.bytes(params, "float32")
            fh.write(json.dumps({
                "run_id": r["run_id"], "started_at": r["started_at"].isoformat(), "host": r["host"],
                "device_name": r["device_name"], "device_kind": "cuda", "device_fingerprint": "fp-h100",
                "suite": suite, "case_key": r["case_key"], "op": "sendrecv_pairs", "family": "collective",
                "backend": "nccl", "dtype": "float32", "params": params, "cache": "hot", "status": "ok",
                "median_ms": r["median_ms"], "p10_ms": r["median_ms"] * 0.99, "p90_ms": r["median_ms"] * 1.01,
                "n_samples": 50, "flops": 0, "bytes": nbytes, "intensity": None, "tflops": 0.0,
                "gbps": nbytes / r["median_ms"] / 1e6, "torch_version": "2.13.0", "cuda_version": "13.0",
                "driver_version": "580.65", "git_commit": "sim", "error": None, "device_uuid": r["device_uuid"],
                "timing_mode": "launch", "op_version": 1, "measured_at": r["started_at"].isoformat(),
                "rel_ci_halfwidth": r["rel_ci_halfwidth"], "throttled": False, "quality": "good",
                "memory_bytes": r["memory_bytes"], "ranks": 8, "collective_mode": "stream",
            }) + "\n")
    return path


@pytest.fixture(scope="module")
def links_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    base = tmp_path_factory.mktemp("links")
    rng = random.Random()
    slow: dict[object, float] = {"GPU-0104": 1.3, ("GPU-0002", "GPU-0007"): 1.35, "node2": 1.5}
    rows = night_rows(0, 4, 8, slow, rng) + night_rows(1, 4, 8, {}, rng)
    url = f"sqlite:///{base / 'r.db'}"
    import_file(url, _export(rows, base / "links.jsonl", "links"))
    return url


def test_the_slow_ends_and_the_slow_link_are_named(links_db: str) -> None:
    done = CliRunner().invoke(app, ["fleet", "--links", "--suite", "links", "--json", "--db", links_db,
                                    "--fail-on", "never"])
    assert done.exit_code == 0, done.output
    out = json.loads(done.output)
    flagged = {(e["kind"], e["end"]) for e in out["ends"] if e["status"] in ("suspect", "slow", "drain")}
    assert flagged == {("same_node", "GPU-0104"), ("across_nodes", "node2")}
    links = {(k["a"], k["b"]): k for k in out["links"]}
    slow_link = links[("GPU-0002", "GPU-0007")]
    assert slow_link["cause"] == "link" and slow_link["status"] in ("suspect", "slow", "drain")
    assert {"a", "b", "status", "deviation", "low", "high", "residual", "kind"} <= set(slow_link)
    assert [k for k, v in links.items() if v["cause"] == "link"] == [("GPU-0002", "GPU-0007")]
    assert out["fail_on"] == "never" and out["failed"] is False and len(out["night"]["runs"]) == 5


def test_the_text_and_fail_on(links_db: str) -> None:
    done = CliRunner().invoke(app, ["fleet", "--links", "--db", links_db, "--fail-on", "suspect"])
    assert done.exit_code == 1
    assert "slow end: GPU-0104 (node1)" in done.output and "slow node: node2 (node2)" in done.output
    assert "slow link: GPU-0002 - GPU-0007" in done.output


def test_a_suite_without_pairs_is_one_line_and_exit_code_2(links_db: str) -> None:
    done = CliRunner().invoke(app, ["fleet", "--links", "--suite", "health", "--db", links_db])
    assert done.exit_code == 2 and len(done.output.strip().splitlines()) == 1, done.output
    assert "no run of suite 'health'" in done.output
