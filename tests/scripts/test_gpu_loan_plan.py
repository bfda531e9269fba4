"""scripts/gpu_loan_plan.py: the loan's steps in the order asked, its budget rule (the kill grace
counted, every later step's reserve kept whatever the earlier ones do), the expected total within
480 s, and the plan as JSON."""
from __future__ import annotations

import json
import random
from dataclasses import replace
from typing import Any

import pytest

from tests.scripts.load import load_script

plan: Any = load_script("gpu_loan_plan")
SETTINGS = plan.LoanSettings(work="/loan/work", python="/usr/bin/python3")


def steps(**kw: Any) -> list:
    return plan.loan_plan(replace(SETTINGS, **kw))


def test_the_default_plan_is_the_priority_order_and_fits_480_s_as_expected() -> None:
    names = [s.name for s in steps()]
    assert names == ["env", "like-copy", "like-gemm", "gap-probe", "roofs", "bytes-split", "counters", "breakdown",
                     "test-gpu", "energy-probe", "quick", "export-report"]
    assert plan.expected_fits(steps()) == []
    assert plan.expected_total_s(steps()) <= plan.BUDGET_S == 480
    # every step as expected: each is started with at least its expected seconds, and all end in time
    slots = plan.simulate(steps(), [s.expected_s for s in steps()])
    assert all(slot.started and slot.timeout_s >= s.expected_s for slot, s in zip(slots, steps(), strict=True))
    assert slots[-1].end_s <= plan.BUDGET_S


def test_steps_run_in_the_order_given_and_bad_names_are_refused() -> None:
    chosen = plan.loan_plan(SETTINGS, ["quick", "env", "gap-probe"])
    assert [s.name for s in chosen] == ["quick", "env", "gap-probe"]
    for names, message in ((["env", "bogus"], "unknown step 'bogus'"), (["env", "env"], "'env' named twice"),
                           ([], "at least one step")):
        with pytest.raises(plan.PlanError, match=message):
            plan.loan_plan(SETTINGS, names)


def test_every_step_overrunning_to_its_kill_leaves_each_later_step_its_reserve_and_ends_in_the_budget() -> None:
    """The worst case: each step ignores SIGINT and is killed at the end of its grace."""
    plan_steps = steps()
    slots = plan.simulate(plan_steps, [1e9] * len(plan_steps))
    for slot, step in zip(slots, plan_steps, strict=True):
        assert slot.started and slot.timeout_s >= step.least_timeout_s - 1e-9, (step.name, slot)
    assert slots[-1].end_s + plan.ARCHIVE_S <= plan.BUDGET_S


def test_random_durations_never_pass_the_budget_nor_starve_a_later_step() -> None:
    rng = random.Random(28)
    plan_steps = steps()
    for _ in range(300):
        took = [rng.choice([rng.uniform(0, s.expected_s), rng.uniform(s.expected_s, 3 * s.box_s)]) for s in plan_steps]
        slots = plan.simulate(plan_steps, took)
        assert slots[-1].end_s + plan.ARCHIVE_S <= plan.BUDGET_S
        assert all(sl.started and sl.timeout_s >= st.least_timeout_s - 1e-9
                   for sl, st in zip(slots, plan_steps, strict=True))


def test_a_step_cut_by_the_budget_counts_its_kill_grace() -> None:
    step = replace(steps()[1], box_s=10_000)
    # 300 s left, 200 s of later reserves: it may run 300 - 200 - 20 (grace) - 2 (packing) = 78 s
    assert plan.step_timeout_s(step, 300.0, 200.0) == 78.0
    assert plan.step_timeout_s(step, 300.0, 200.0, grace_s=0.0) == 98.0
    assert plan.step_timeout_s(replace(step, box_s=40), 300.0, 200.0) == 40.0  # its own box when there is room
    # the old rule's failure: two long steps run to their timeouts leave a third less than nothing
    three = [replace(step, name="a", box_s=240), replace(step, name="b", box_s=240), replace(step, name="c", box_s=150)]
    slots = plan.simulate(three, [1e9, 1e9, 1e9], budget_s=480)
    assert slots[2].started and slots[2].timeout_s >= three[2].least_timeout_s


def test_rounds_and_test_files_reach_the_command_lines_and_the_estimate() -> None:
    three, five = steps(), steps(rounds=5, test_files=("tests/runners/test_gpu_timing.py",))
    like = {s.name: s for s in five}["like-copy"]
    (command,) = like.commands
    assert command.args[command.args.index("--rounds") + 1] == "5"
    assert like.expected_s > {s.name: s for s in three}["like-copy"].expected_s
    (make,) = {s.name: s for s in five}["test-gpu"].commands
    assert make.argv("py") == ["make", "--no-print-directory", "test-gpu", "GPU_PY=/usr/bin/python3",
                               "GPU_TESTS=tests/runners/test_gpu_timing.py"]
    assert dict(make.env_append)["PYTEST_ADDOPTS"].startswith("--junitxml=/loan/work/test-gpu.xml")


def test_the_plan_as_json_names_every_command_line_its_filters_and_time_box() -> None:
    data = json.loads(plan.plan_json(steps(), SETTINGS))
    assert data["budget_s"] == 480 and data["kill_grace_s"] == 20 and data["expected_total_s"] <= 480
    for step in data["steps"]:
        assert step["box_s"] > 0 and step["reserve_s"] > 0 and step["expected_s"] > 0 and step["source"]
        assert step["commands"] and all(c["argv"] for c in step["commands"])
    rooflab_lines = [c for s in data["steps"] for c in s["commands"] if c["kind"] == "rooflab"]
    assert all(c["argv"][:3] == ["/usr/bin/python3", "-m", "rooflab"] for c in rooflab_lines)
    selecting = [c for c in rooflab_lines if c["spec"]]
    assert all(c["filters"] and c["expected_cases"] for c in selecting)
    assert all("sqlite:////loan/work/rooflab.db" in c["argv"] for c in rooflab_lines if "--db" in c["argv"])
    text = plan.plan_text(steps())
    assert "expected total" in text and all(s.name in text for s in steps())


def test_the_docs_step_table_holds_the_plans_boxes_reserves_and_estimates() -> None:
    """docs/gpu-validation.md quotes the plan: a change to a box or an estimate must reach the page."""
    from tests.scripts.load import ROOT

    text = (ROOT / "docs" / "gpu-validation.md").read_text(encoding="utf-8")
    quoted = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`") and cells[0].strip("`") in plan.STEP_NAMES:
            quoted[cells[0].strip("`")] = (int(cells[2]), int(cells[3]), int(cells[4]))
    assert quoted == {s.name: (s.box_s, s.reserve_s, round(s.expected_s)) for s in steps()}
    assert f"Expected total: {plan.expected_total_s(steps()):.0f} s" in text
