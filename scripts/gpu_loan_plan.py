"""The GPU loan's plan: its steps in priority order, each with its command lines, its time box, the
reserve the plan keeps for it while the steps before it run, and its expected seconds with where
that figure comes from; and the budget rule that turns them into each step's timeout.

Pure and standard-library only (it runs under any Python, before the carried wheels are installed):
scripts/gpu_loan.py runs the plan, scripts/gpu_loan_check.py checks it against the real CLI and
the CUDA expansion of the specs, and `scripts/gpu-validate.sh --plan-json WORK` prints it.
docs/gpu-validation.md describes every step.

The budget rule. A step is started with the timeout

    min(its box, left - the reserves of the steps after it - KILL_GRACE_S - ARCHIVE_S)

where `left` is the time to the deadline. At the timeout it gets SIGINT (rooflab stores the case in
flight), and SIGKILL KILL_GRACE_S later; the return folder is then packed (ARCHIVE_S). So a step
cut by the budget, even one that needs its whole kill grace, ends with every later step's reserve
still left; and a reserve holds its own step's kill grace and packing, so a step started on its
reserve alone still runs for `reserve - KILL_GRACE_S - ARCHIVE_S` seconds.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

BUDGET_S = 480  # seconds of commands after set-up: 8 of the loan's 15 minutes
KILL_GRACE_S = 20  # SIGKILL this long after SIGINT
ARCHIVE_S = 2  # allowance per step for packing the return folder
MIN_TIMEOUT_S = 5  # a step that would get less is not started ("budget spent")
DEFAULT_ROUNDS = 3
SPEC = "quick"
DEVICE = "cuda"
# make test-gpu narrowed to timing, attribution and counters (and the power counter the energy probe reads)
TEST_GPU_FILES = (
    "tests/runners/test_gpu_timing.py",
    "tests/runners/test_attribution_gpu.py",
    "tests/runners/test_counters_gpu.py",
    "tests/runners/test_power_gpu.py",
)
# the filtered quick run: quick's CUDA benchmarks that no earlier step measured, less the collectives
# (a machine of one GPU skips them), the working-set sweep and the FMA probe (ceilings, not questions)
QUICK_BENCHMARKS = (
    "gpu_pointwise", "gpu_reduction", "gpu_fusion_cos_cos", "gpu_fusion_bias_gelu_dropout_residual", "gpu_gemm",
    "gpu_gemm_epilogue", "gpu_batched_gemm", "gpu_attention", "gpu_attention_head_dim_128", "gpu_launch",
)
# how long a fresh Python process takes to import torch and start CUDA: 3.7 s on the H200
# (test_respects_cuda_visible_devices_in_a_fresh_process, examples/h200/logs/test-gpu-after-fixes.log);
# a rooflab command's start, 4.1 s (`rooflab devices` on the H100, examples/h100/part1/steps.tsv)
PROCESS_START_S = 3.7
CLI_START_S = 4.1
# a case of `rooflab run` on the H100: quick's 158 cases took 46.9 s (examples/h100/part1/run-quick.json)
RUN_CASE_S = 46.9 / 158


class CommandKind(StrEnum):
    """What runs a command line: `python -m rooflab`, `python scripts/X.py`, make, or a tool (nvidia-smi)."""

    ROOFLAB = "rooflab"
    SCRIPT = "script"
    MAKE = "make"
    TOOL = "tool"


@dataclass(frozen=True)
class Command:
    """One command line of a step. `args` follow the program (rooflab's verb and options, a
    script's options, make's target and variables, a tool's options). `stdout`: a file under the
    work folder that takes the command's standard output (else it goes to the step's log).
    `spec`, `filters` and `expected_cases`: for a rooflab command that selects cases, what it
    selects and how many cases of the CUDA expansion the estimate counted on."""

    kind: CommandKind
    program: str  # "rooflab", "scripts/gpu_gap_probe.py", "make", "nvidia-smi"
    args: tuple[str, ...]
    stdout: str | None = None
    spec: str | None = None
    filters: tuple[str, ...] = ()
    expected_cases: int | None = None
    env_append: tuple[tuple[str, str], ...] = ()  # (VARIABLE, words appended to the caller's value)

    def argv(self, python: str) -> list[str]:
        if self.kind == CommandKind.ROOFLAB:
            return [python, "-m", "rooflab", *self.args]
        if self.kind == CommandKind.SCRIPT:
            return [python, self.program, *self.args]
        return [self.program, *self.args]

    def as_dict(self, python: str) -> dict:
        return {"kind": self.kind.value, "program": self.program, "args": list(self.args),
                "argv": self.argv(python), "stdout": self.stdout, "spec": self.spec, "filters": list(self.filters),
                "expected_cases": self.expected_cases, "env_append": dict(self.env_append)}


@dataclass(frozen=True)
class Step:
    name: str
    answers: str  # the question it brings back evidence for
    commands: tuple[Command, ...]
    box_s: int  # the longest it may run, however much time is left
    reserve_s: int  # kept for it while the steps before it run (its kill grace and packing included)
    expected_s: float  # what it should take on an H100
    source: str  # where expected_s comes from: measured, extrapolated or estimated, and from what
    needs: str | None = None  # a tool without which the step is skipped ("ncu")
    outputs: tuple[str, ...] = field(default=())  # what it leaves in the work folder

    @property
    def least_timeout_s(self) -> float:
        """The timeout the step gets when it is started on its reserve alone."""
        return self.reserve_s - KILL_GRACE_S - ARCHIVE_S


@dataclass(frozen=True)
class LoanSettings:
    work: str  # the work folder (absolute): every artifact, the database, the logs
    python: str = "python3"  # the interpreter of every step
    rounds: int = DEFAULT_ROUNDS  # cross-check rounds
    ncu: str = "ncu"  # Nsight Compute's executable
    test_files: tuple[str, ...] = TEST_GPU_FILES

    @property
    def db(self) -> str:
        return f"sqlite:///{self.work}/rooflab.db"


def rooflab(verb: str, *rest: str, spec: str | None = None, filters: Sequence[str] = (), cases: int | None = None,
            stdout: str | None = None) -> Command:
    """`python -m rooflab VERB [SPEC] [-f F ...] REST...`."""
    args = [verb, *([spec] if spec else []), *(w for f in filters for w in ("-f", f)), *rest]
    return Command(CommandKind.ROOFLAB, "rooflab", tuple(args), stdout=stdout, spec=spec, filters=tuple(filters),
                   expected_cases=cases)


def script(path: str, *args: str, stdout: str | None = None) -> Command:
    return Command(CommandKind.SCRIPT, path, tuple(args), stdout=stdout)


def tool(program: str, *args: str, stdout: str | None = None) -> Command:
    return Command(CommandKind.TOOL, program, tuple(args), stdout=stdout)


# ---------------------------------------------------------------- the steps, in priority order


def env_step(s: LoanSettings) -> Step:
    query = ("name,pci.bus_id,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,"
             "power.draw,power.limit,temperature.gpu")
    return Step(
        "env", "which machine, driver, clocks and versions every figure of the loan belongs to",
        (tool("nvidia-smi", stdout="env/nvidia-smi.txt"),
         tool("nvidia-smi", "-q", stdout="env/nvidia-smi-q.txt"),
         tool("nvidia-smi", f"--query-gpu={query}", "--format=csv", stdout="env/nvidia-smi-query.csv"),
         script("scripts/gpu_versions.py", "--out", f"{s.work}/env/versions.json", "--ncu", s.ncu),
         rooflab("devices", "--json", stdout="env/devices.json")),
        box_s=30, reserve_s=30, expected_s=9,
        source="measured: env + devices + versions took 0.2 + 4.1 + 4.0 s on the H100 "
               "(examples/h100/part1/steps.tsv)",
        outputs=("env/",))


def crosscheck_s(cases: int, rounds: int, fixed_s: float, per_round_s: float) -> float:
    """A cross-check's seconds: one CLI start, then per case a fixed part (nvbench's child process
    and the case's preparation) and a part per round."""
    return round(CLI_START_S + cases * (fixed_s + per_round_s * rounds))


def like_copy_step(s: LoanSettings) -> Step:
    filters = ("benchmark=gpu_pointwise", "op=copy", "n=67108864")
    return Step(
        "like-copy", "do the large copies (88-176 us) agree within 2 % with do_bench and nvbench, each timed in "
                     "its own mode (write flush, pace, hold)?",
        (rooflab("crosscheck", "--device", DEVICE, "--peers", "do_bench,nvbench", "--rounds", str(s.rounds),
                 "--db", s.db, "--out", f"{s.work}/crosscheck-copy.json", spec=SPEC, filters=filters, cases=2),),
        box_s=90, reserve_s=37, expected_s=crosscheck_s(2, s.rounds, 5.0, 5.0),
        source="extrapolated: 4 copies x 4 peers x 3 rounds took 104.9 s on the H100 "
               "(examples/h100/recheck/crosscheck-copy.json), 26 s a case; here 2 of the peers, nvbench's "
               "process of its own per case the costly one: 5 + 5 s a round per case, + a CLI start",
        outputs=("crosscheck-copy.json",))


def like_gemm_step(s: LoanSettings) -> Step:
    filters = ("benchmark=gpu_gemm,gpu_gemm_peak", "op=matmul", "dtype=bfloat16", "n=4096,8192")
    return Step(
        "like-gemm", "do bf16 GEMMs of 4096^3 and 8192^3, cold and hot, agree within 2 % with do_bench and nvbench "
                     "in their modes; how much of the old 14 % (long GEMMs slower) does the pace explain?",
        (rooflab("crosscheck", "--device", DEVICE, "--peers", "do_bench,nvbench", "--rounds", str(s.rounds),
                 "--db", s.db, "--out", f"{s.work}/crosscheck-gemm.json", spec=SPEC, filters=filters, cases=4),),
        box_s=120, reserve_s=37, expected_s=crosscheck_s(4, s.rounds, 4.0, 3.0),
        source="extrapolated: 8 bf16 GEMMs x 4 peers x 3 rounds took 119.5 s on the H200 "
               "(examples/h200/crosscheck-matmul.json), 15 s a case; 2 of the peers here: 4 + 3 s a round "
               "per case, + a CLI start",
        outputs=("crosscheck-gemm.json",))


def gap_probe_step(s: LoanSettings) -> Step:
    return Step(
        "gap-probe", "the copy behind the write flush against the read flush; the 8192^3 GEMM back to back against "
                     "idle pace and hot (clock and power beside each)",
        (script("scripts/gpu_gap_probe.py", "--json", f"{s.work}/gap-probe.json", "--markdown",
                f"{s.work}/gap-probe.md"),),
        box_s=60, reserve_s=40, expected_s=20,
        source="estimated (never run on a GPU): a process start (3.7 s) and five engine figures of 0.2-3 s each "
               "(PROBE_TIMING in scripts/gpu_gap_probe.py)",
        outputs=("gap-probe.json", "gap-probe.md"))


def roofs_step(s: LoanSettings) -> Step:
    filters = ("benchmark=gpu_stream,gpu_elementary,gpu_gemm_peak",)
    return Step(
        "roofs", "the hbm_rw roof (write flush) against the best plain torch copy of the same run; the write-only "
                 "roof hbm_wo (a fill of 256 and 512 MiB); the elementary (cos, exp, erf) and bf16 matrix roofs "
                 "measured",
        (rooflab("run", "--device", DEVICE, "--db", s.db, "--json", spec=SPEC, filters=filters, cases=31,
                 stdout="run-roofs.json"),
         script("scripts/gpu_known_figures.py", "--device", DEVICE, "--only", "stream,matmul", "--db", s.db,
                "--json", f"{s.work}/known-figures.json", "--markdown", f"{s.work}/known-figures.md")),
        box_s=100, reserve_s=37, expected_s=round(CLI_START_S + 31 * RUN_CASE_S + 6 * 3 + 11),
        source="extrapolated: quick's 158 cases took 46.9 s on the H100 (examples/h100/part1/run-quick.json), "
               "0.3 s a case: 31 cases 10 s, + a CLI start and 6 cold Inductor compiles (about 3 s each, estimated); "
               "known figures without fusion and attention 11 s of 22.3 s (examples/h100/part1/logs/known.log)",
        outputs=("run-roofs.json", "known-figures.json", "known-figures.md"))


# the counters' write-back pass (runners/counters/writeback.py): a profiled child's start and its one replay of
# the two DRAM metrics, about 1 s (estimated)
WRITEBACK_PASS_S = PROCESS_START_S + 1
# the bytes-split step's cases: a copy whose 4 MiB output stays dirty in the L2 (its writes are all write-back)
# and a copy 64 times the size (its writes mostly evicted during the kernel)
BYTES_SPLIT_FILTERS = ("benchmark=gpu_pointwise", "op=copy", "dtype=float32", "n=1048576,67108864")


def bytes_split_step(s: LoanSettings) -> Step:
    command = rooflab("counters", "--device", DEVICE, "--ncu", s.ncu, "--keep-reports", f"{s.work}/bytes-split",
                      "--db", s.db, "--json", spec=SPEC, filters=BYTES_SPLIT_FILTERS, cases=2,
                      stdout="bytes-split.json")
    return Step(
        "bytes-split", "bytes read against dram__bytes_read and bytes written against dram__bytes_write, apart: does "
                       "the sweep catch the write-back of a copy whose output fits in the L2 (its writes within 10 %), "
                       "and are a large copy's reads and writes each within their tolerance?",
        (command,), box_s=70, reserve_s=27,
        expected_s=round(CLI_START_S + 2 * (PROCESS_START_S + 2 + WRITEBACK_PASS_S)),
        source="estimated (ncu never run by rooflab on a GPU): a CLI start (4.1 s) + 2 cases x (a profiled child's "
               "start, 3.7 s, + about 2 s of ncu passes, + the write-back pass: another start and about 1 s)",
        needs="ncu", outputs=("bytes-split.json", "bytes-split/"))


# (with the write-back pass, each case costs a second profiled child: the large copy and triad went to the
# bytes-split step, and the softmax, layernorm and attention sets wait for a later loan, docs/counters.md)
COUNTER_SETS: tuple[tuple[tuple[str, ...], int], ...] = (
    (("benchmark=gpu_gemm", "op=matmul", "dtype=bfloat16", "n=4096"), 1),  # a bf16 GEMM
    (("op=cos_cos", "n=67108864"), 2),  # eager and compiled
)


def counters_step(s: LoanSettings) -> Step:
    commands = tuple(
        rooflab("counters", "--device", DEVICE, "--ncu", s.ncu, "--keep-reports", f"{s.work}/counters", "--db", s.db,
                "--json", spec=SPEC, filters=filters, cases=cases, stdout=f"counters/counters-{i}.json")
        for i, (filters, cases) in enumerate(COUNTER_SETS, start=1))
    cases = sum(c for _, c in COUNTER_SETS)
    expected_s = round(len(commands) * CLI_START_S + cases * (PROCESS_START_S + 2 + WRITEBACK_PASS_S))
    return Step(
        "counters", "measured DRAM bytes (read and written apart) and FLOPs against the model on a bf16 GEMM and an "
                    "eager and a compiled cos_cos; ncu's real CSV for the fixtures",
        commands, box_s=150, reserve_s=37, expected_s=expected_s,
        source=f"estimated (ncu never run by rooflab on a GPU): {len(commands)} CLI starts (4.1 s) + {cases} cases x "
               "(a profiled child's start, 3.7 s, + about 2 s of ncu passes, + the write-back pass: another start "
               "and about 1 s)",
        needs="ncu", outputs=("counters/",))


def breakdown_step(s: LoanSettings) -> Step:
    return Step(
        "breakdown", "the layer breakdown on a GPU block for the first time: parts adding up to the whole, MFU "
                     "against the measured bf16 roof, the fusion estimate beside the measured compiled speedup",
        (rooflab("run", "--device", DEVICE, "--db", s.db, "--json", spec=SPEC,
                 filters=("op=transformer_block", "dtype=bfloat16"), cases=2, stdout="run-block.json"),
         rooflab("breakdown", "--device", DEVICE, "--db", s.db, "--json", stdout="breakdown.json")),
        box_s=90, reserve_s=37, expected_s=35,
        source="extrapolated: both blocks ran inside quick's 46.9 s on the H100 "
               "(examples/h100/part1/run-quick.json); two CLI starts (4.1 s each) and a cold Inductor compile of "
               "the block (about 20 s, estimated)",
        outputs=("run-block.json", "breakdown.json"))


def test_gpu_step(s: LoanSettings) -> Step:
    command = Command(
        CommandKind.MAKE, "make",
        ("--no-print-directory", "test-gpu", f"GPU_PY={s.python}", f"GPU_TESTS={' '.join(s.test_files)}"),
        env_append=(("PYTEST_ADDOPTS", f"--junitxml={s.work}/test-gpu.xml -p no:cacheprovider"),))
    return Step(
        "test-gpu", "make test-gpu narrowed to timing, attribution, counters and power: green on a GPU?",
        (command,), box_s=100, reserve_s=37, expected_s=45,
        source="extrapolated: on the H200 the timing, power and supervisor tests took about 10 s of calls and "
               "12 s of start-up and collection (examples/h200/logs/test-gpu-after-fixes.log); the attribution "
               "tests about 5 s and the counters test about 15 s (estimated)",
        outputs=("test-gpu.xml",))


def energy_probe_step(s: LoanSettings) -> Step:
    return Step(
        "energy-probe", "how often NVML's energy counter advances, idle and busy, and power_w over 0.1-2 s windows "
                        "against the counter's mean",
        (script("scripts/gpu_energy_probe.py", "--json", f"{s.work}/energy-probe.json", "--markdown",
                f"{s.work}/energy-probe.md"),),
        box_s=60, reserve_s=55, expected_s=31,
        source="computed: idle 2 s + the load's warm-up 1 s + busy 4 s + windows of 0.1-2 s five times each "
               "(19.3 s; the constants of scripts/gpu_energy_probe.py) + a process start (3.7 s)",
        outputs=("energy-probe.json", "energy-probe.md"))


def quick_step(s: LoanSettings) -> Step:
    filters = (f"benchmark={','.join(QUICK_BENCHMARKS)}",)
    return Step(
        "quick", "the rest of quick measured with the write flush, for the report's diagnosis against this loan's "
                 "roofs",
        (rooflab("run", "--device", DEVICE, "--db", s.db, "--json", spec=SPEC, filters=filters, cases=97,
                 stdout="run-quick.json"),),
        box_s=150, reserve_s=27, expected_s=round(CLI_START_S + 97 * RUN_CASE_S),
        source="extrapolated: 0.3 s a case (quick's 158 cases in 46.9 s on the H100, "
               "examples/h100/part1/run-quick.json) x 97 cases, + a CLI start",
        outputs=("run-quick.json",))


def export_report_step(s: LoanSettings) -> Step:
    return Step(
        "export-report", "every result of the loan as an export and the HTML report; the GPU's clocks after the load",
        (tool("nvidia-smi", "-q", "-d", "CLOCK,PERFORMANCE,POWER,TEMPERATURE", stdout="env/nvidia-smi-after.txt"),
         rooflab("export", "--format", "jsonl", "--db", s.db, "--out", f"{s.work}/results.jsonl.gz"),
         rooflab("report", "--db", s.db, "--out", f"{s.work}/report")),
        box_s=60, reserve_s=45, expected_s=20,
        source="measured: export 1.6-4.3 s, report 10.4-11.2 s on the H100 (examples/h100/part1/steps.tsv, "
               "examples/h100/part2/steps.tsv); a larger database here",
        outputs=("results.jsonl.gz", "report/", "env/nvidia-smi-after.txt"))


STEP_BUILDERS = (env_step, like_copy_step, like_gemm_step, gap_probe_step, roofs_step, bytes_split_step,
                 counters_step, breakdown_step, test_gpu_step, energy_probe_step, quick_step, export_report_step)
STEP_NAMES = ("env", "like-copy", "like-gemm", "gap-probe", "roofs", "bytes-split", "counters", "breakdown", "test-gpu",
              "energy-probe", "quick", "export-report")


class PlanError(ValueError):
    """A plan asked for that cannot be made (an unknown step, a step named twice)."""


def loan_plan(settings: LoanSettings, names: Sequence[str] | None = None) -> list[Step]:
    """The steps named (all, in priority order, when None), in the order named."""
    steps = {name: build(settings) for name, build in zip(STEP_NAMES, STEP_BUILDERS, strict=True)}
    if names is None:
        return list(steps.values())
    unknown = [n for n in names if n not in steps]
    if unknown:
        raise PlanError(f"--steps: unknown step {unknown[0]!r}; allowed: {', '.join(STEP_NAMES)}")
    twice = sorted({n for n in names if list(names).count(n) > 1})
    if twice:
        raise PlanError(f"--steps: {twice[0]!r} named twice")
    if not names:
        raise PlanError("--steps: name at least one step")
    return [steps[n] for n in names]


# ---------------------------------------------------------------- the budget rule


def later_reserve_s(steps: Sequence[Step], index: int) -> int:
    return sum(s.reserve_s for s in steps[index + 1:])


def step_timeout_s(step: Step, left_s: float, later_s: float, grace_s: float = KILL_GRACE_S,
                   archive_s: float = ARCHIVE_S) -> float:
    """The timeout a step starts with when `left_s` remain to the deadline and the steps after it
    keep `later_s` of reserves: its box, cut so that the step, killed at the end of its grace and
    packed, ends with those reserves still left."""
    return min(float(step.box_s), left_s - later_s - grace_s - archive_s)


@dataclass(frozen=True)
class Slot:
    name: str
    timeout_s: float  # what it was started with (0 when not started)
    start_s: float  # from the end of set-up
    end_s: float
    started: bool


def simulate(steps: Sequence[Step], took_s: Sequence[float], budget_s: float = BUDGET_S,
             grace_s: float = KILL_GRACE_S, archive_s: float = ARCHIVE_S) -> list[Slot]:
    """The budget rule played on durations: step i would take took_s[i] if let (a step stopped at
    its timeout takes the timeout plus the whole kill grace, the worst case); packing takes
    archive_s after each. For the tests and for the plan's own check (expected_fits)."""
    now, slots = 0.0, []
    for i, (step, want) in enumerate(zip(steps, took_s, strict=True)):
        timeout = step_timeout_s(step, budget_s - now, later_reserve_s(steps, i), grace_s, archive_s)
        if timeout < MIN_TIMEOUT_S:
            slots.append(Slot(step.name, 0.0, now, now, False))
            continue
        ran = want if want <= timeout else timeout + grace_s
        slots.append(Slot(step.name, timeout, now, now + ran, True))
        now += ran + archive_s
    return slots


def expected_total_s(steps: Sequence[Step]) -> float:
    """The plan's expected seconds: every step as expected, and its packing."""
    return sum(s.expected_s + ARCHIVE_S for s in steps)


def expected_fits(steps: Sequence[Step], budget_s: float = BUDGET_S) -> list[str]:
    """What keeps the plan from running every step to its expected seconds within the budget: a
    step whose box, or whose timeout when every step before it took its expected seconds, is
    shorter than its expected seconds; an expected total over the budget."""
    problems = [f"{s.name}: box {s.box_s} s is shorter than its expected {s.expected_s} s"
                for s in steps if s.box_s < s.expected_s]
    problems += [f"{s.name}: reserve {s.reserve_s} s leaves it no time after its kill grace and packing"
                 for s in steps if s.least_timeout_s < MIN_TIMEOUT_S]
    for step, slot in zip(steps, simulate(steps, [s.expected_s for s in steps], budget_s), strict=True):
        if slot.timeout_s < step.expected_s:
            problems.append(f"{step.name}: started with {slot.timeout_s:.0f} s when every step before it took its "
                            f"expected time, under its expected {step.expected_s} s")
    total = expected_total_s(steps)
    if total > budget_s:
        problems.append(f"expected total {total:.0f} s is over the budget of {budget_s} s")
    return problems


# ---------------------------------------------------------------- the plan as text and as JSON


def plan_dict(steps: Sequence[Step], settings: LoanSettings, budget_s: float = BUDGET_S) -> dict:
    return {
        "budget_s": budget_s, "kill_grace_s": KILL_GRACE_S, "archive_s_per_step": ARCHIVE_S,
        "min_timeout_s": MIN_TIMEOUT_S, "expected_total_s": expected_total_s(steps),
        "work": settings.work, "python": settings.python, "rounds": settings.rounds, "ncu": settings.ncu,
        "database": settings.db,
        "steps": [{"name": s.name, "answers": s.answers, "box_s": s.box_s, "reserve_s": s.reserve_s,
                   "least_timeout_s": s.least_timeout_s, "expected_s": s.expected_s, "source": s.source,
                   "needs": s.needs, "outputs": list(s.outputs),
                   "commands": [c.as_dict(settings.python) for c in s.commands]} for s in steps],
    }


def plan_json(steps: Sequence[Step], settings: LoanSettings, budget_s: float = BUDGET_S) -> str:
    return json.dumps(plan_dict(steps, settings, budget_s), indent=2)


def plan_text(steps: Sequence[Step], budget_s: float = BUDGET_S) -> str:
    """The plan as the loan call prints it before it starts: each step with its box, reserve and
    expected seconds and the source of that figure, then the expected total."""
    lines = [f"plan: {len(steps)} steps in this order, budget {budget_s:.0f} s after set-up; a step gets "
             f"min(box, left - later reserves - {KILL_GRACE_S} s kill grace - {ARCHIVE_S} s packing)",
             f"{'step':<14}{'box s':>7}{'reserve s':>11}{'expected s':>12}  source of the estimate"]
    for s in steps:
        lines.append(f"{s.name:<14}{s.box_s:>7}{s.reserve_s:>11}{s.expected_s:>12.0f}  {s.source}")
    lines.append(f"{'expected total':<32}{expected_total_s(steps):>12.0f}  (steps + {ARCHIVE_S} s of packing each; "
                 f"budget {budget_s:.0f} s)")
    return "\n".join(lines)


def with_rounds(settings: LoanSettings, rounds: int) -> LoanSettings:
    return replace(settings, rounds=rounds)
