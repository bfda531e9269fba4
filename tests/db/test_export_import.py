"""Export -> import -> export round trips, idempotent import, malformed files refused whole."""
from __future__ import annotations

import csv
import gzip
import io
import json
import random
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from rooflab.db import query
from rooflab.db.columns import ALL_COLUMNS, EXPORT_COLUMNS
from rooflab.db.store import ResultStore
from rooflab.runners.cli.app import app
from tests.db.factories import make_case, make_env, make_measurement, make_run

runner = CliRunner()
CONTRACT_COLUMNS = (
    "run_id, started_at, host, device_name, device_kind, device_fingerprint, suite, case_key, op, family, backend, "
    "dtype, params, cache, status, median_ms, p10_ms, p90_ms, n_samples, flops, bytes, intensity, tflops, gbps, "
    "torch_version, cuda_version, driver_version, git_commit, error"
).split(", ")


def populate(url: str, n_cases: int = 12) -> int:
    """Two runs on two devices, with failures, skips, awkward text and float params; returns the row count."""
    rng = random.Random()
    count = 0
    with ResultStore(url) as store:
        for day, run_id in enumerate(("night-1", "night-2")):
            run = make_run(run_id, day=day, rng=rng)
            store.start_run(run)
            for index in (0, 1):
                env = make_env(index, name=("NVIDIA H100 80GB HBM3", "NVIDIA B200")[index])
                store.add_environment(run_id, env)
                for i in range(n_cases):
                    status = rng.choice(["ok", "ok", "ok", "failed", "skipped", "incorrect"])
                    m = make_measurement(run, make_case(i), env, rng=rng, status=status)
                    if status == "failed":
                        m = replace(m, error='CUDA out of memory, "tried" 2.5 GiB\nline two — ünïcode')
                    if i == 1:
                        case = replace(m.identity.case, params={"n": 2048, "alpha": 0.1 + rng.random(), "causal": True})
                        m = replace(m, identity=replace(m.identity, case=case))
                    store.add_measurement(m)
                    count += 1
            store.finish_run(run_id, "complete")
    return count


def export_bytes(url: str, fmt: str, out: Path, *extra: str) -> bytes:
    result = runner.invoke(app, ["export", "--format", fmt, "--out", str(out), "--db", url, *extra])
    assert result.exit_code == 0, result.output
    return out.read_bytes()


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_export_import_export_is_identical(fmt: str, sqlite_url: str, tmp_path: Path) -> None:
    rows = populate(sqlite_url)
    first = export_bytes(sqlite_url, fmt, tmp_path / f"a.{fmt}")
    target = f"sqlite:///{tmp_path / 'target.db'}"
    result = runner.invoke(app, ["import", str(tmp_path / f"a.{fmt}"), "--db", target, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["measurements_added"] == rows
    second = export_bytes(target, fmt, tmp_path / f"b.{fmt}")
    if fmt == "parquet":
        a, b = pq.read_table(tmp_path / "a.parquet"), pq.read_table(tmp_path / "b.parquet")
        assert a.num_rows == rows and a.equals(b)
        assert a.column_names == list(ALL_COLUMNS)
    else:
        assert first == second
    source, copy = query.results(sqlite_url), query.results(target)
    assert source.drop(columns=["run_order"]).equals(copy.drop(columns=["run_order"]))


def test_export_columns_follow_design_and_stdout_works(sqlite_url: str) -> None:
    populate(sqlite_url, n_cases=3)
    result = runner.invoke(app, ["export", "--format", "csv", "--db", sqlite_url])
    assert result.exit_code == 0
    reader = csv.DictReader(io.StringIO(result.stdout))
    assert reader.fieldnames is not None
    assert reader.fieldnames[: len(CONTRACT_COLUMNS)] == CONTRACT_COLUMNS == list(EXPORT_COLUMNS)
    rows = list(reader)
    assert len(rows) == 12
    for row in rows:
        assert isinstance(json.loads(row["params"]), dict)
    jsonl = runner.invoke(app, ["export", "--format", "jsonl", "--db", sqlite_url, "--run", "night-2"])
    records = [json.loads(line) for line in jsonl.stdout.splitlines()]
    assert len(records) == 6 and {r["run_id"] for r in records} == {"night-2"}
    assert all(isinstance(r["params"], dict) for r in records)
    since = runner.invoke(app, ["export", "--format", "jsonl", "--db", sqlite_url, "--since", "2026-03-02"])
    assert {json.loads(line)["run_id"] for line in since.stdout.splitlines()} == {"night-2"}
    bad = runner.invoke(app, ["export", "--format", "xml", "--db", sqlite_url])
    assert bad.exit_code == 2 and "csv, jsonl, parquet" in bad.output
    assert runner.invoke(app, ["export", "--format", "csv", "--since", "yesterday", "--db", sqlite_url]).exit_code == 2


def test_round_trip_into_postgres_and_back(postgres_url: str, sqlite_url: str, tmp_path: Path) -> None:
    populate(sqlite_url)
    first = export_bytes(sqlite_url, "jsonl", tmp_path / "a.jsonl.gz")
    assert runner.invoke(app, ["import", str(tmp_path / "a.jsonl.gz"), "--db", postgres_url]).exit_code == 0
    second = export_bytes(postgres_url, "jsonl", tmp_path / "b.jsonl.gz")
    assert gzip.decompress(first) == gzip.decompress(second)


@pytest.mark.parametrize("fmt", ["csv", "jsonl.gz", "parquet"])
def test_importing_twice_adds_nothing(fmt: str, any_url: str, tmp_path: Path) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    rows = populate(source, n_cases=5)
    path = tmp_path / f"export.{fmt}"
    export_bytes(source, fmt.split(".")[0], path)
    for expected_added in (rows, 0):
        result = runner.invoke(app, ["import", str(path), "--db", any_url, "--json"])
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        assert report["measurements_added"] == expected_added
        assert report["measurements_present"] == rows - expected_added
    assert len(query.results(any_url)) == rows
    assert len(query.runs(any_url)) == 2


# -- malformed files -------------------------------------------------------------------------------

def _csv_rows(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))


def _write_csv(path: Path, rows: list[list[str]]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows(rows)


def _break_csv(src: Path, dst: Path, fault: str) -> str:
    rows = _csv_rows(src)
    header = rows[0]
    last = rows[-1]
    if fault == "missing column":
        at = header.index("status")
        _write_csv(dst, [r[:at] + r[at + 1:] for r in rows])
        return "column 'status' is missing"
    if fault == "truncated line":
        text = src.read_text(encoding="utf-8").rstrip("\n")
        dst.write_text(text[: text.rindex("\n") + 40] + "\n", encoding="utf-8")
        return f"line {len(dst.read_text(encoding='utf-8').splitlines())}"
    col, value, expected = {
        "bad status": ("status", "fine", "column 'status'"),
        "bad number": ("median_ms", "fast", "column 'median_ms'"),
        "bad json": ("params", '{"n": 4', "column 'params'"),
        "naive time": ("started_at", "2026-03-01T02:00:00", "column 'started_at'"),
    }[fault]
    last[header.index(col)] = value
    _write_csv(dst, rows)
    return f"line {len(dst.read_text(encoding='utf-8').splitlines())}, {expected}"


def _break_jsonl(src: Path, dst: Path, fault: str) -> str:
    lines = src.read_text(encoding="utf-8").splitlines()
    last = json.loads(lines[-1])
    if fault == "truncated line":
        lines[-1] = lines[-1][: len(lines[-1]) // 2]
        dst.write_text("\n".join(lines), encoding="utf-8")
        return f"line {len(lines)}: invalid JSON"
    if fault == "missing column":
        del last["status"]
        expected = "column 'status' is missing"
    else:
        col, value = {"bad status": ("status", "fine"), "bad number": ("median_ms", "fast"),
                      "bad json": ("params", [1, 2]), "naive time": ("started_at", "2026-03-01T02:00:00")}[fault]
        last[col] = value
        expected = f"column '{col}'"
    lines[-1] = json.dumps(last)
    dst.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return f"line {len(lines)}, {expected}" if fault != "missing column" else f"line {len(lines)}: {expected}"


def _break_parquet(src: Path, dst: Path, fault: str) -> str:
    import pyarrow as pa

    table = pq.read_table(src)
    if fault == "truncated line":
        data = src.read_bytes()
        dst.write_bytes(data[: len(data) * 2 // 3])
        return "not a readable Parquet file"
    if fault == "missing column":
        pq.write_table(table.drop_columns(["status"]), dst)
        return "column 'status' is missing"
    col, value = {"bad status": ("status", "fine"), "bad number": ("n_samples", "x"),
                  "bad json": ("params", '{"n": 4'), "naive time": ("started_at", "2026-03-01T02:00:00")}[fault]
    values = table.column(col).to_pylist()
    values[-1] = value
    table = table.set_column(table.column_names.index(col), col,
                             pa.array([None if v is None else str(v) for v in values]))
    pq.write_table(table, dst)
    return f"row {table.num_rows}, column '{col}'"


@pytest.fixture(scope="module")
def good_exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One valid export per format (the faults are planted into copies of them)."""
    folder = tmp_path_factory.mktemp("good")
    source = f"sqlite:///{folder / 'source.db'}"
    populate(source, n_cases=4)
    return {fmt: folder / f"good.{fmt}" for fmt in ("csv", "jsonl", "parquet")
            if export_bytes(source, fmt, folder / f"good.{fmt}")}


FAULTS = ["missing column", "bad status", "bad number", "bad json", "naive time", "truncated line"]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
@pytest.mark.parametrize("fault", FAULTS)
def test_malformed_file_is_refused_whole_with_exit_2(
    fmt: str, fault: str, tmp_path: Path, good_exports: dict[str, Path]
) -> None:
    good = good_exports[fmt]
    bad = tmp_path / f"bad.{fmt}"
    expected = {"csv": _break_csv, "jsonl": _break_jsonl, "parquet": _break_parquet}[fmt](good, bad, fault)
    target = f"sqlite:///{tmp_path / 'target.db'}"
    with ResultStore(target) as store:  # a database that already holds something
        store.start_run(make_run("existing"))
    result = runner.invoke(app, ["import", str(bad), "--db", target])
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert str(bad) in message and expected in message, message
    assert "Traceback" not in result.output
    assert len(query.results(target)) == 0
    assert list(query.runs(target)["run_id"]) == ["existing"]


def test_unknown_extension_and_missing_file_exit_2(tmp_path: Path, sqlite_url: str) -> None:
    (tmp_path / "results.xlsx").write_text("x")
    for path in (tmp_path / "results.xlsx", tmp_path / "absent.csv"):
        result = runner.invoke(app, ["import", str(path), "--db", sqlite_url])
        assert result.exit_code == 2 and str(path) in " ".join(result.output.split())


def test_a_collective_from_a_file_written_before_its_mode_was_recorded_reads_as_isolated(
        sqlite_url: str, tmp_path: Path) -> None:
    """A file without the `collective_mode` column holds collectives timed isolated (one call after a
    barrier per sample; the pace `back_to_back` it says is what revision 0009 wrote for them): the
    import records that, as the upgrade to revision 0010 does; a file with the column is read as is."""
    from rooflab.record import with_columns

    run, env = make_run("comms"), make_env(0)
    with ResultStore(sqlite_url) as store:
        store.start_run(run)
        store.add_environment(run.run_id, env)
        store.add_measurement(with_columns(make_measurement(run, make_case(1), env, rng=random.Random(1)), ranks=2,
                                           pace="back_to_back", collective_mode="stream"))
        store.add_measurement(with_columns(make_measurement(run, make_case(2), env, rng=random.Random(2)),
                                           pace="back_to_back"))
    export_bytes(sqlite_url, "csv", tmp_path / "new.csv")
    with open(tmp_path / "new.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    with open(tmp_path / "old.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, [c for c in rows[0] if c != "collective_mode"])
        writer.writeheader()
        writer.writerows({k: v for k, v in r.items() if k != "collective_mode"} for r in rows)
    for name, expected in (("new", ["stream", "back_to_back"]), ("old", ["isolated", "barrier"])):
        target = f"sqlite:///{tmp_path / name}.db"
        assert runner.invoke(app, ["import", str(tmp_path / f"{name}.csv"), "--db", target]).exit_code == 0
        got = query.results(target).set_index("case_key")
        collective, kernel = got.loc[make_case(1).case_key], got.loc[make_case(2).case_key]
        assert [collective["collective_mode"], collective["pace"]] == expected, name
        assert not isinstance(kernel["collective_mode"], str) and kernel["pace"] == "back_to_back", name


def _rewrite_csv(src: Path, dst: Path, change: Callable[[list[dict[str, str]]], list[dict[str, str]]]) -> None:
    with open(src, newline="", encoding="utf-8") as f:
        rows = change(list(csv.DictReader(f)))
    with open(dst, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_the_split_travels_and_a_file_without_it_leaves_it_unknown(sqlite_url: str, tmp_path: Path) -> None:
    """Bytes read and written go out and come back in every format; a file written before they were
    exported imports with the split unknown (empty), its total kept."""
    populate(sqlite_url, n_cases=4)
    source = query.results(sqlite_url)
    ok = source[source["status"] == "ok"]
    assert len(ok) and (ok["bytes_read"] + ok["bytes_written"] == ok["bytes"]).all()
    for fmt in ("csv", "jsonl", "parquet"):
        export_bytes(sqlite_url, fmt, tmp_path / f"split.{fmt}")
        target = f"sqlite:///{tmp_path / fmt}.db"
        assert runner.invoke(app, ["import", str(tmp_path / f"split.{fmt}"), "--db", target]).exit_code == 0
        back = query.results(target)
        assert list(back["bytes_read"].fillna(-1)) == list(source["bytes_read"].fillna(-1)), fmt
        assert list(back["bytes_written"].fillna(-1)) == list(source["bytes_written"].fillna(-1)), fmt
    _rewrite_csv(tmp_path / "split.csv", tmp_path / "old.csv",
                 lambda rows: [{k: v for k, v in r.items() if k not in ("bytes_read", "bytes_written")} for r in rows])
    target = f"sqlite:///{tmp_path / 'old'}.db"
    assert runner.invoke(app, ["import", str(tmp_path / "old.csv"), "--db", target]).exit_code == 0
    old = query.results(target)
    assert old["bytes_read"].isna().all() and old["bytes_written"].isna().all()
    assert list(old["bytes"]) == list(source["bytes"])


@pytest.mark.parametrize(("read", "written", "expected"), [
    ("5", "7", "must equal bytes"),  # a split that does not add up to the total
    ("5", "", "go together"),  # half a split
])
def test_a_split_that_does_not_add_up_is_refused_whole(read: str, written: str, expected: str, sqlite_url: str,
                                                       tmp_path: Path) -> None:
    populate(sqlite_url, n_cases=3)
    export_bytes(sqlite_url, "csv", tmp_path / "good.csv")

    def plant(rows: list[dict[str, str]]) -> list[dict[str, str]]:
        rows[-1] = {**rows[-1], "bytes": "100", "bytes_read": read, "bytes_written": written}
        return rows

    _rewrite_csv(tmp_path / "good.csv", tmp_path / "bad.csv", plant)
    target = f"sqlite:///{tmp_path / 'target.db'}"
    result = runner.invoke(app, ["import", str(tmp_path / "bad.csv"), "--db", target])
    message = " ".join(result.output.split())
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert str(tmp_path / "bad.csv") in message and "'bytes_read' and 'bytes_written'" in message
    assert expected in message
    assert not (tmp_path / "target.db").exists()  # nothing written, not even the database
