"""Held-out check of `rooflab regressions` on series made with Apache Otava's test-data generators
(a script, not a test: it needs `otava-test-data`, which the project does not depend on).

    pip install --target /tmp/otd-site otava-test-data==0.1.9 --no-deps     # needs numpy, pandas
    PYTHONPATH=$PWD:/tmp/otd-site .venv/bin/python -m tests.perf.heldout_otava            # 100 per cell
    PYTHONPATH=$PWD:/tmp/otd-site .venv/bin/python -m tests.perf.heldout_otava --series 10 --only step

It goes the way a user's data goes, not through `detect`:

1. A real one-case CPU run (`rooflab run` of tests/perf/modes_cpu.yaml, copy, hot) is exported with
   `rooflab export --format jsonl`; that row is the template of every generated row, so the file
   has exactly the columns the current export writes.
2. Each cell makes `--series` series of 60 nights (seeds 1000.. by default, `--first-seed`) with
   otava_test_data's generators.
   Each series is one case (copy with its own `n`), each night one run (started a day after the
   one before, with its own fake commit) holding every series of the cell; a night's value is that
   run's median_ms, a converged result of good quality (the other timing columns follow the median:
   p10/p90 at -/+1 %, and gbps); the template's own figures, from one run on a shared machine, may
   well be noisy and are not kept.
3. The rows are written as CSV (or JSON Lines, `--format`), imported with
   `python -m rooflab import FILE --db sqlite:///...` into a fresh database, exported again and
   compared with what was written (every median, every run's start and commit, exactly), then
   judged with `python -m rooflab regressions --json --all --db ...` at its defaults.

Columns of the table: **regression** (suspect), share by status; **slower change point**: for a
planted slowdown, share with a slower change point within 3 nights of the planted night (a drift:
from 3 nights before its ramp to the end), else share with any slower change point (a false one);
**drift**: share with `drift: true`. "Within 3 nights" of a mid-history step is measured twice:
on the whole 60 nights (the change point found at the planted night +- 3) and on the series cut
after its third night at the new level (planted night + 3 nights), which is what a nightly job
would have seen by then.

Where otava-test-data 0.1.9 has the shape, its generator makes it: noise (noise_normal, which clips
at 4 sigma), steps and improvements (step_function), one-night spikes (outlier: the spike night
itself carries no noise), 50/50 bands (banding). It has no ramp and no bands with other shares than
50/50: the drift is a linear ramp written here plus noise_normal (added with combine), the 85/15
bands are written here in banding's way with a chosen share.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

try:
    import otava_test_data  # type: ignore[import-not-found]  # installed apart from the venv (below)
    from otava_test_data.generators import advanced, basic, combiner  # type: ignore[import-not-found]  # as above
except ImportError:  # pragma: no cover - depends on the environment
    sys.exit("heldout_otava: otava_test_data is not importable; install it apart from the project venv: "
             "pip install --target /tmp/otd-site otava-test-data --no-deps, then put /tmp/otd-site on PYTHONPATH")

NIGHTS = 60
ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_SPEC = ROOT / "tests" / "perf" / "modes_cpu.yaml"
FIRST_NIGHT = datetime(2026, 1, 5, 2, 0, tzinfo=UTC)
# tests/reports/gen_series.py draws its noise as otava-test-data does (numpy's default_rng(seed), one
# normal draw per night), and the project's goals and benchmark use seeds 0..199: with those seeds a
# step, noise or band series here is the project's own series, scaled. Held out: from seed 1000 on.
HELD_OUT_FIRST_SEED = 1000


@dataclass(frozen=True)
class Cell:
    name: str
    make: Callable[[int, float], np.ndarray]  # (seed, level_ms) -> values_ms
    planted_at: int | None  # first night of a planted slowdown (None: nothing slower planted)
    planted_to: int | None = None  # last night of the window a change point may fall in (drifts)
    nights: int = NIGHTS  # the series is cut after this many nights
    goal: str = ""


def level_ms(seed: int) -> float:
    """Each series has its own level, log-uniform between 0.05 and 50 ms (fixed by its seed)."""
    return float(10 ** np.random.default_rng(10_000 + seed).uniform(np.log10(0.05), np.log10(50.0)))


# -- the series -----------------------------------------------------------------------------------

def noise(noise_rel: float) -> Callable[[int, float], np.ndarray]:
    return lambda seed, lvl: basic.noise_normal(NIGHTS, mean=lvl, sigma=noise_rel * lvl, seed=seed).data


def step(size: float, at: int, noise_rel: float) -> Callable[[int, float], np.ndarray]:
    return lambda seed, lvl: basic.step_function(NIGHTS, value_before=lvl, value_after=lvl * (1 + size),
                                                 change_index=at, sigma=noise_rel * lvl, seed=seed).data


def spike(size: float, at: int, noise_rel: float) -> Callable[[int, float], np.ndarray]:
    return lambda seed, lvl: basic.outlier(NIGHTS, baseline=lvl, outlier_value=lvl * (1 + size), outlier_index=at,
                                           sigma=noise_rel * lvl, seed=seed).data


def ramp(size: float, over: int, noise_rel: float) -> Callable[[int, float], np.ndarray]:
    """Written here (otava-test-data has no ramp): flat, then a straight rise over the newest `over`
    nights ending `size` above the old level; plus otava's noise_normal, added with its combine."""
    def make(seed: int, lvl: float) -> np.ndarray:
        rise = np.clip((np.arange(NIGHTS) - (NIGHTS - over) + 1) / over, 0.0, 1.0)
        shape = basic.TimeSeries(data=lvl * (1 + size * rise), generator_name="ramp")
        return combiner.combine(shape, basic.noise_normal(NIGHTS, mean=0.0, sigma=noise_rel * lvl, seed=seed)).data
    return make


def bands(gap: float, upper_share: float, noise_rel: float) -> Callable[[int, float], np.ndarray]:
    """50/50: otava's banding. Other shares, written here as banding does it but with the share
    given: each night in the lower band, or with probability `upper_share` in the one `gap` above."""
    if upper_share == 0.5:
        return lambda seed, lvl: advanced.banding(NIGHTS, value1=lvl, value2=lvl * (1 + gap), sigma=noise_rel * lvl,
                                                  seed=seed).data

    def make(seed: int, lvl: float) -> np.ndarray:
        rng = np.random.default_rng(seed)
        data = np.where(rng.random(NIGHTS) < upper_share, lvl * (1 + gap), lvl)
        return data + rng.normal(0.0, noise_rel * lvl, NIGHTS)
    return make


def cells() -> list[Cell]:
    out = [
        Cell("+10 % step on the newest two nights, 2 %", step(0.10, NIGHTS - 2, 0.02), NIGHTS - 2,
             goal="regression >= 90 %"),
        Cell("+20 % step on the newest two nights, 5 %", step(0.20, NIGHTS - 2, 0.05), NIGHTS - 2,
             goal="regression >= 80 %"),
    ]
    for n in (0.005, 0.01, 0.02, 0.05):
        out.append(Cell(f"noise only, {100 * n:g} %", noise(n), None, goal="regression <= 1 %"))
    for n in (0.02, 0.05):
        for at, where in ((NIGHTS - 1, "newest"), (NIGHTS - 2, "second-newest")):
            for size in (0.10, 0.30, 1.0):
                out.append(Cell(f"+{100 * size:g} % one-night spike on the {where} night, {100 * n:g} %",
                                spike(size, at, n), None, goal="regression <= 1 %"))
    for n in (0.02, 0.05):
        out.append(Cell(f"-10 % step (improvement) on the newest two nights, {100 * n:g} %",
                        step(-0.10, NIGHTS - 2, n), None, goal="regression <= 1 %"))
    out.append(Cell("-10 % step (improvement) at night 40 of 60, 2 %", step(-0.10, 40, 0.02), None,
                    goal="regression <= 1 %"))
    for share in (0.5, 0.15):
        for n in (0.005, 0.01):
            out.append(Cell(f"two bands 10 % apart, {100 * (1 - share):g}/{100 * share:g}, {100 * n:g} %",
                            bands(0.10, share, n), None, goal="regression <= 1 %" if n == 0.005 else ""))
    out += [
        Cell("+5 % step at night 40 of 60, 1 %", step(0.05, 40, 0.01), 40,
             goal="slower change point at night 40 +- 3 >= 90 %"),
        Cell("+5 % step at night 40, 1 %, cut after night 40 + 3", step(0.05, 40, 0.01), 40, nights=43,
             goal="slower change point by the 3rd night >= 90 %"),
        Cell("+10 % drift over the last 30 nights, 1 %", ramp(0.10, 30, 0.01), NIGHTS - 30, NIGHTS - 1,
             goal="drift >= 80 %"),
    ]
    return out


# -- the export file ------------------------------------------------------------------------------

def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # the project only: otava_test_data stays out of rooflab's way
    done = subprocess.run([sys.executable, "-m", "rooflab", *args], cwd=ROOT, env=env, text=True,
                          capture_output=True)
    if check and done.returncode not in (0, 1):  # regressions exits 1 when it finds a regression
        sys.exit(f"rooflab {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


def template_row(work: Path) -> dict[str, Any]:
    """One real result row as `rooflab export --format jsonl` writes it (a CPU copy case)."""
    db = f"sqlite:///{work / 'template.db'}"
    cli("run", str(TEMPLATE_SPEC), "-f", "op=copy", "-f", "n=1048576", "-f", "cache=hot", "--device", "cpu",
        "--db", db)
    out = work / "template.jsonl"
    cli("export", "--db", db, "--format", "jsonl", "--out", str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    if len(rows) != 1 or rows[0]["status"] != "ok":
        sys.exit(f"heldout_otava: the template run gave {len(rows)} rows: {rows}")
    return rows[0]


def night_run(cell_index: int, night: int) -> tuple[str, datetime, str]:
    """(run_id, started_at, git_commit) of a night: a day apart, with a few minutes' jitter."""
    started = FIRST_NIGHT + timedelta(days=night, minutes=(night * 7) % 13)
    run_id = f"otava{cell_index:02d}-{started:%Y%m%dT%H%M%SZ}"
    commit = hashlib.sha1(f"heldout {cell_index} {night}".encode()).hexdigest()
    return run_id, started, commit


def rows_of(template: dict[str, Any], cell_index: int, series: list[np.ndarray]) -> list[dict[str, Any]]:
    """The export rows of a cell: one run per night holding one result per series, in export order."""
    # Each night's result is a converged, good measurement whose median is the generated value (the
    # night-to-night noise is the series'); the template's own figures come from one run on a shared
    # machine and may well be noisy, which would keep every night out of the baselines.
    within = {"p10_ms": 0.99, "p90_ms": 1.01, "mean_ms": 1.002, "min_ms": 0.98, "max_ms": 1.05, "iqr_ms": 0.01,
              "std_ms": 0.008, "first_call_ms": 20.0}
    good = {"quality": "good", "quality_reasons": [], "stop_reason": "converged", "rel_ci_halfwidth": 0.001,
            "throttled": False, "throttle_reasons": [], "status": "ok", "error": None}
    t_bytes_per_n = template["bytes"] / template["params"]["n"]
    rows = []
    nights = len(series[0])
    for night in range(nights):
        run_id, started, commit = night_run(cell_index, night)
        for j, values in enumerate(series):
            value_ms = float(values[night])
            n = template["params"]["n"] + 1024 * j  # a case of its own per series
            row = dict(template)
            row.update(
                run_id=run_id, started_at=started.isoformat(), git_commit=commit,
                measured_at=(started + timedelta(seconds=1 + j)).isoformat(),
                finished_at=(started + timedelta(seconds=2 + len(series))).isoformat(),
                run_status="complete", command_line=f"rooflab run {TEMPLATE_SPEC.name}",
                case_key=template["case_key"].replace(f"n={template['params']['n']}", f"n={n}"),
                params={"n": n}, bytes=int(t_bytes_per_n * n),
            )
            row.update(good)
            row.update({col: ratio * value_ms for col, ratio in within.items()})
            row["median_ms"] = value_ms  # exactly the generated value
            row["gbps"] = row["bytes"] / (value_ms * 1e-3) / 1e9
            rows.append(row)
    return rows


def write_export(rows: list[dict[str, Any]], path: Path, columns: list[str]) -> None:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps({c: r[c] for c in columns}) + "\n" for r in rows))
        return

    def text(v: Any) -> str:
        if v is None:
            return ""
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float):
            return repr(v)
        if isinstance(v, (dict, list)):
            return json.dumps(v, sort_keys=True, separators=(",", ":"))
        return str(v)

    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([text(r[c]) for c in columns] for r in rows)


def check_round_trip(db: str, work: Path, rows: list[dict[str, Any]]) -> None:
    """Export the imported database again: every (run, case) median, start time and commit must be
    what was written, and runs must come back in night order."""
    out = work / "back.jsonl"
    cli("export", "--db", db, "--format", "jsonl", "--out", str(out))
    back = [json.loads(line) for line in out.read_text().splitlines()]
    if len(back) != len(rows):
        sys.exit(f"round trip: wrote {len(rows)} rows, read back {len(back)}")
    want = {(r["run_id"], r["case_key"]): r for r in rows}
    for b in back:
        w = want[(b["run_id"], b["case_key"])]
        for col in ("median_ms", "git_commit"):
            if b[col] != w[col]:
                sys.exit(f"round trip: {b['run_id']} {b['case_key']} {col}: wrote {w[col]!r}, read {b[col]!r}")
        if datetime.fromisoformat(b["started_at"]) != datetime.fromisoformat(w["started_at"]):
            sys.exit(f"round trip: {b['run_id']} started_at: wrote {w['started_at']}, read {b['started_at']}")
    runs = list(dict.fromkeys(b["run_id"] for b in back))
    if runs != list(dict.fromkeys(r["run_id"] for r in rows)):
        sys.exit("round trip: the runs came back in another order")


# -- judging --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    seed: int
    status: str
    slower_nights: tuple[int, ...]  # nights (0-based) of the slower change points
    drift: bool


def judge_cell(index: int, c: Cell, first_seed: int, n_series: int, template: dict[str, Any], work: Path, fmt: str,
               keep: dict[int, np.ndarray]) -> list[Outcome]:
    seeds = range(first_seed, first_seed + n_series)
    series = [c.make(seed, level_ms(seed))[: c.nights] for seed in seeds]
    keep.update(zip(seeds, series, strict=True))
    rows = rows_of(template, index, series)
    path = work / f"cell{index:02d}.{fmt}"
    write_export(rows, path, list(template))
    db = f"sqlite:///{work / f'cell{index:02d}.db'}"
    done = cli("import", str(path), "--db", db)
    if done.returncode != 0:
        sys.exit(f"import failed: {done.stdout}{done.stderr}")
    check_round_trip(db, work, rows)
    done = cli("regressions", "--json", "--all", "--db", db)
    report = json.loads(done.stdout)
    night_of = {night_run(index, night)[0]: night for night in range(c.nights)}
    seed_of = {rows[j]["case_key"]: seed for j, seed in enumerate(seeds)}  # night 0 holds the series in seed order
    outcomes = []
    for s in report["series"]:
        outcomes.append(Outcome(
            seed_of[s["case_key"]], s["status"],
            tuple(night_of[cp["run_id"]] for cp in s["change_points"] if cp["direction"] == "slower"),
            bool(s["drift"])))
    if len(outcomes) != n_series:
        sys.exit(f"{c.name}: {n_series} series written, {len(outcomes)} judged")
    return sorted(outcomes, key=lambda o: o.seed)


def change_point_hit(c: Cell, o: Outcome) -> bool:
    if c.planted_at is None:
        return bool(o.slower_nights)
    hi = c.planted_to if c.planted_to is not None else c.planted_at + 3
    return any(c.planted_at - 3 <= n <= hi for n in o.slower_nights)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=100, help="series per cell")
    parser.add_argument("--first-seed", type=int, default=HELD_OUT_FIRST_SEED,
                        help="seeds FIRST..FIRST+N-1 (0 replays the project's own series, see above)")
    parser.add_argument("--only", default="", help="run only the cells whose name contains this")
    parser.add_argument("--format", choices=("csv", "jsonl"), default="csv", help="the export file written")
    parser.add_argument("--work", type=Path, default=None, help="keep the files here (default: a temporary folder)")
    parser.add_argument("--show-misses", type=int, default=3,
                        help="per cell, print this many series that went against the cell's goal")
    args = parser.parse_args()
    version = getattr(otava_test_data, "__version__", None) or _dist_version("otava-test-data")
    last_seed = args.first_seed + args.series - 1
    print(f"# {args.series} series of {NIGHTS} nights per cell (seeds {args.first_seed}..{last_seed}), "
          f"otava-test-data {version}, numpy {np.__version__}, Python {platform.python_version()}, "
          f"{platform.machine()}; via rooflab import ({args.format}) and "
          f"rooflab regressions --json --all (defaults)")
    print("| series | regression (suspect) | slower change point | drift | goal |")
    print("|---|---|---|---|---|")
    t0 = time.perf_counter()
    misses: list[str] = []
    with tempfile.TemporaryDirectory(prefix="heldout-otava-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        template = template_row(work)
        for index, c in enumerate(cells()):
            if args.only and args.only not in c.name:
                continue
            values: dict[int, np.ndarray] = {}
            got = judge_cell(index, c, args.first_seed, args.series, template, work, args.format, values)
            pct = lambda k, n=len(got): f"{100 * k / n:.3g} %"  # noqa: E731  (1 of 200 is 0.5 %, not 0 %)
            reg = sum(o.status == "regression" for o in got)
            sus = sum(o.status == "suspect" for o in got)
            cp = sum(change_point_hit(c, o) for o in got)
            dr = sum(o.drift for o in got)
            print(f"| {c.name} | {pct(reg)} ({pct(sus)}) | {pct(cp)} | {pct(dr)} | {c.goal} |", flush=True)
            for o in [o for o in got if _missed(c, o)][: args.show_misses]:
                v = values[o.seed]
                misses.append(f"{c.name} | seed {o.seed} | status {o.status} | slower change points at nights "
                              f"{list(o.slower_nights)} | drift {o.drift} | level {level_ms(o.seed):.4g} ms | "
                              f"values/level, newest 12: {np.round(v[-12:] / level_ms(o.seed), 3).tolist()}")
    print(f"\n{time.perf_counter() - t0:.0f} s wall")
    if misses:
        print("\nSeries against their cell's goal (first few per cell):")
        for line in misses:
            print("- " + line)


def _missed(c: Cell, o: Outcome) -> bool:
    if c.goal.startswith("regression >="):
        return o.status != "regression"
    if c.goal.startswith("regression <="):
        return o.status == "regression"
    if c.goal.startswith("slower change point"):
        return not change_point_hit(c, o)
    if c.goal.startswith("drift"):
        return not o.drift
    return False


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    main()
