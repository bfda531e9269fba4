#!/usr/bin/env bash
# The GPU evidence run in one command: environment, `make test-gpu`, the quick and roofline specs
# measured for real (quick's collectives over every GPU), the cross-check, known figures beside rooflab's
# ceilings, a timed sample of the nightly spec with its projection, the export and the report,
# every artifact under OUTDIR. docs/gpu-validation.md says how to run it and what each file is.
#
# usage: scripts/gpu-validate.sh [--part all|1|2] [--steps a,b,...] [--budget-s S] [--archive FILE] OUTDIR
#
#   --part 1     env devices versions test-gpu quick known ceilings export report env-after
#   --part 2     env devices versions roofline crosscheck crosscheck-like nightly-sample gap-probe energy-probe known
#                ceilings export report env-after
#   --part all   every step (the default; on an H100 it does not fit one 10-minute call: use 1 then 2,
#                then --steps env,versions,counters,export,report; collectives on a multi-GPU machine)
#   --steps      exactly these steps, in the script's order
#   --budget-s   wall-clock budget of the whole script (default 540 s with a GPU, 1200 s without):
#                each step's timeout is cut so that the steps after it keep their reserve
#   --archive    after every step, pack OUTDIR into this .tar.gz (what a device call brings back)
#
# Each step is logged in OUTDIR/steps.tsv (status, exit code, seconds, timeout, log file, note) and
# OUTDIR/logs/STEP.log; a failing or timed-out step does not stop the rest. Without a CUDA device the
# GPU-only steps are skipped with their reason and the others run small CPU versions of themselves.
# Nothing is installed: on a GPU machine run `source .whl/activate.sh` first (../shared/gpu/fetch-wheels.sh).
# Environment: GV_PYTHON (interpreter), GV_DEVICE (auto|cpu|cuda), GV_TIMEOUT_<STEP> (seconds, e.g.
# GV_TIMEOUT_QUICK=400), GV_NIGHTLY_SHARDS (default 24), GV_CROSSCHECK_FILTERS, GV_NCU (the ncu executable).
# Exit code: 0 when every step ran ok or was skipped for want of a device or a tool, 1 when one failed,
# timed out or was left out for want of budget, 2 on bad usage.
set -uo pipefail

ALL_STEPS=(env devices versions test-gpu quick collectives roofline crosscheck crosscheck-like counters nightly-sample
  gap-probe energy-probe known ceilings export report env-after)
PART1=(env devices versions test-gpu quick known ceilings export report env-after)
PART2=(env devices versions roofline crosscheck crosscheck-like nightly-sample gap-probe energy-probe known ceilings export
  report env-after)

usage() { sed -n '7,26p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "gpu-validate: $*" >&2; exit 2; }

part=all steps_arg="" budget_s="" archive="" outdir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --part) [ $# -ge 2 ] || die "--part needs a value (all, 1 or 2)"; part=$2; shift 2 ;;
    --steps) [ $# -ge 2 ] || die "--steps needs a comma-separated list"; steps_arg=$2; shift 2 ;;
    --budget-s) [ $# -ge 2 ] || die "--budget-s needs seconds"; budget_s=$2; shift 2 ;;
    --archive) [ $# -ge 2 ] || die "--archive needs a file name"; archive=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$outdir" ] || die "one OUTDIR only (got $outdir and $1)"; outdir=$1; shift ;;
  esac
done
[ -n "$outdir" ] || { usage >&2; die "give OUTDIR, the folder for every artifact"; }
case "$part" in
  all) selected=("${ALL_STEPS[@]}") ;;
  1) selected=("${PART1[@]}") ;;
  2) selected=("${PART2[@]}") ;;
  *) die "--part $part: allowed all, 1, 2" ;;
esac
if [ -n "$steps_arg" ]; then
  IFS=',' read -r -a wanted <<<"$steps_arg"
  for w in "${wanted[@]}"; do
    [[ " ${ALL_STEPS[*]} " == *" $w "* ]] || die "--steps: unknown step '$w'; allowed: ${ALL_STEPS[*]}"
  done
  selected=()
  for s in "${ALL_STEPS[@]}"; do [[ ",$steps_arg," == *",$s,"* ]] && selected+=("$s"); done
fi
if [ -n "$budget_s" ] && ! [[ "$budget_s" =~ ^[0-9]+$ && "$budget_s" -gt 0 ]]; then
  die "--budget-s $budget_s: a whole number of seconds > 0"
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || die "cannot enter $root"
mkdir -p "$outdir"/logs "$outdir"/env || die "cannot create $outdir"
OUT=$(cd "$outdir" && pwd)
if [ -n "$archive" ]; then
  mkdir -p "$(dirname "$archive")" && archive="$(cd "$(dirname "$archive")" && pwd)/$(basename "$archive")"
fi
if [ -n "${GV_PYTHON:-}" ]; then PY=$GV_PYTHON
elif [ -x .venv/bin/python ]; then PY=$root/.venv/bin/python
else PY=python3; fi
export PY OUT
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export DB="sqlite:///$OUT/rooflab.db" SAMPLE_DB="sqlite:///$OUT/nightly-sample.db"

kind=${GV_DEVICE:-auto}
if [ "$kind" = auto ]; then
  if "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then kind=cuda; else kind=cpu; fi
fi
case "$kind" in cpu|cuda) ;; *) die "GV_DEVICE=$kind: allowed auto, cpu, cuda" ;; esac
export KIND=$kind
export NIGHTLY_SHARDS=${GV_NIGHTLY_SHARDS:-24}
# 32 cases of quick over the four families, from 4 MB copies (a few us) to 8192^3 GEMMs (about 1.5 ms)
export CROSSCHECK_FILTERS=${GV_CROSSCHECK_FILTERS:-"-f family=pointwise,reduction,gemm,attention -f dtype=bfloat16 -f benchmark=gpu_pointwise,gpu_reduction,gpu_gemm,gpu_attention -f op=copy,triad,softmax,layernorm,matmul,attention"}
[ -n "$budget_s" ] || budget_s=$([ "$KIND" = cuda ] && echo 540 || echo 1200)
start_s=$(date +%s)
deadline_s=$((start_s + budget_s))

# ---------------------------------------------------------------- the steps
# Each prints to its log; a non-zero exit marks it failed. Exit code 3 with a first line
# "SKIP: reason" marks it skipped.
skip() { echo "SKIP: $*"; exit 3; }
rooflab() { "$PY" -m rooflab "$@"; }
export -f skip rooflab

step_env() {
  { echo "date: $(date -u +%FT%TZ)"; uname -a; echo "nproc: $(nproc)"; free -g 2>/dev/null; df -h . 2>/dev/null
    echo "git: $(git rev-parse HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | wc -l) changed files"; } > "$OUT/env/system.txt"
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    cat "$OUT/env/system.txt"; skip "no nvidia-smi on this machine (system facts in env/system.txt)"
  fi
  nvidia-smi > "$OUT/env/nvidia-smi.txt"
  nvidia-smi -q > "$OUT/env/nvidia-smi-q.txt"
  local fields=name,pci.bus_id,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.draw,power.limit,temperature.gpu
  # the throttle-reason field has had two names; the query fails as a whole on an unknown one
  nvidia-smi --query-gpu=$fields,clocks_event_reasons.active --format=csv > "$OUT/env/nvidia-smi-query.csv" 2>/dev/null \
    || nvidia-smi --query-gpu=$fields --format=csv > "$OUT/env/nvidia-smi-query.csv"
  cat "$OUT/env/nvidia-smi-query.csv"
}
step_devices() { rooflab devices --json > "$OUT/env/devices.json" && cat "$OUT/env/devices.json"; }
step_versions() {
  "$PY" - "$OUT/env/versions.json" <<'PY'
import importlib.metadata as md, json, platform, shutil, subprocess, sys
out = {"python": sys.version.split()[0], "executable": sys.executable, "platform": platform.platform()}
for dist in ("torch", "triton", "cupy-cuda13x", "cupy-cuda12x", "cupy", "cuda-bench", "cuda-bindings", "numpy",
             "pandas", "sqlalchemy", "alembic", "pydantic", "typer", "nvidia-ml-py", "pytest"):
    try:
        out[dist] = md.version(dist)
    except md.PackageNotFoundError:
        out[dist] = None
try:
    import torch
    out["torch_cuda"] = torch.version.cuda
    out["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    out["cuda_available"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        out["gpu"] = {"name": p.name, "sm_count": p.multi_processor_count, "memory_bytes": p.total_memory,
                      "l2_bytes": getattr(p, "L2_cache_size", None), "capability": f"{p.major}.{p.minor}"}
except Exception as exc:  # noqa: BLE001
    out["torch_error"] = repr(exc)
try:
    import cuda.bench  # noqa: F401  (nvbench's Python package)
    out["cuda.bench_import"] = "ok"
except Exception as exc:  # noqa: BLE001
    out["cuda.bench_import"] = repr(exc)[:200]
nvcc = shutil.which("nvcc")
out["nvcc"] = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1:] if nvcc else None
json.dump(out, open(sys.argv[1], "w"), indent=2)
print(json.dumps(out, indent=2))
PY
}
step_test_gpu() {
  [ "$KIND" = cuda ] || skip "no CUDA device: every gpu-marked test would be skipped"
  PYTEST_ADDOPTS="--junitxml=$OUT/test-gpu.xml -p no:cacheprovider" make --no-print-directory test-gpu GPU_PY="$PY"
}
run_spec() {  # run_spec SPEC DB JSON_OUT [args...]: rooflab run, its JSON summary kept
  local spec=$1 db=$2 json=$3; shift 3
  rooflab run "$spec" --db "$db" --json "$@" > "$json"; local rc=$?
  cat "$json"; return $rc
}
export -f run_spec
step_quick() {
  if [ "$KIND" = cuda ]; then run_spec quick "$DB" "$OUT/run-quick.json" --device cuda
  else run_spec quick "$DB" "$OUT/run-quick.json" --device cpu -f benchmark=cpu_stream,cpu_gemm_peak,cpu_launch --max-time-ms 200; fi
}
# quick's collective cases (docs/collectives.md): NCCL over every GPU of the machine (`--devices all`,
# one rank per GPU), gloo over two CPU ranks without one. On one GPU every case is skipped (a collective
# needs two): the run still shows that, and the step is then marked skipped.
step_collectives() {
  if [ "$KIND" != cuda ]; then
    run_spec quick "$DB" "$OUT/run-collectives.json" --device cpu -f family=collective --max-time-ms 200
    return $?
  fi
  local gpus rc
  gpus=$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null)
  run_spec quick "$DB" "$OUT/run-collectives.json" --devices all -f family=collective; rc=$?
  [ "$rc" = 0 ] || return $rc
  [ "${gpus:-0}" -ge 2 ] || skip "${gpus:-no} GPU(s): a collective needs at least 2 GPUs (every case skipped)"
}
step_roofline() {
  if [ "$KIND" = cuda ]; then run_spec roofline "$DB" "$OUT/run-roofline.json" --device cuda
  else run_spec roofline "$DB" "$OUT/run-roofline.json" --device cpu -f benchmark=cpu_gemm_peak -f m=256,512 --max-time-ms 200; fi
}
step_crosscheck() {
  if ! rooflab crosscheck --help >/dev/null 2>&1; then
    echo "ABSENT: this checkout's rooflab has no crosscheck command"; exit 4
  fi
  if [ "$KIND" = cuda ]; then
    # shellcheck disable=SC2086  # the filters are words on purpose
    rooflab crosscheck quick --device cuda --peers torch,do_bench,nvbench,cupyx $CROSSCHECK_FILTERS \
      --db "$DB" --json --out "$OUT/crosscheck.json"
  else
    rooflab crosscheck quick --device cpu --peers torch -f benchmark=cpu_stream -f op=stream_triad,stream_dot \
      --db "$DB" --json --out "$OUT/crosscheck.json"
  fi
}
# the cases of quick under Nsight Compute, one `rooflab counters` per line (docs/counters.md): the
# 2^26-element float32 copies, both cos_cos forms, softmax and layernorm, two GEMMs, fused and naive
# attention, and the FMA and elementary-function probes (known FLOP counts)
export COUNTER_SETS=${GV_COUNTER_SETS:-"-f op=copy,stream_copy -f dtype=float32 -f n=67108864
-f op=cos_cos
-f op=softmax,layernorm -f dtype=bfloat16
-f op=matmul -f dtype=bfloat16 -f m=4096,8192
-f op=attention -f kernel=sdpa_flash,naive -f seq_q=1024 -f causal=false
-f op=fma_intensity,elementary -f k=64"}
step_counters() {
  if ! rooflab counters --help >/dev/null 2>&1; then
    echo "ABSENT: this checkout's rooflab has no counters command"; exit 4
  fi
  if [ "$KIND" != cuda ]; then  # no counters on a CPU: the command must refuse, write nothing, exit 2
    rooflab counters quick --device cpu --db "$DB" > "$OUT/counters-refusal.txt" 2>&1; local rc=$?
    cat "$OUT/counters-refusal.txt"
    [ "$rc" = 2 ] || { echo "expected rooflab counters to refuse the CPU with exit code 2, got $rc"; return 1; }
    skip "no CUDA device: rooflab counters refused as it should ($(head -n 1 "$OUT/counters-refusal.txt" | cut -c1-160))"
  fi
  local ncu=${GV_NCU:-$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)}
  [ -n "$ncu" ] || skip "Nsight Compute (ncu) is not installed: not on PATH, nor in /usr/local/cuda/bin"
  "$ncu" --version
  mkdir -p "$OUT/counters"
  local i=0 rc=0 set
  while IFS= read -r set; do
    [ -n "$set" ] || continue
    i=$((i + 1))
    echo "== rooflab counters quick $set"
    # shellcheck disable=SC2086  # the filters are words on purpose
    rooflab counters quick --device cuda --ncu "$ncu" $set --db "$DB" --keep-reports "$OUT/counters" --json \
      > "$OUT/counters/counters-$i.json" || rc=$?
    "$PY" -c 'import json, sys
for r in json.load(open(sys.argv[1]))["readings"]:
    print(r["case_key"], r["status"], r["dram_bytes"], r["model_bytes"], r["bytes_ratio"], r["reason"] or "", r["error"] or "")' \
      "$OUT/counters/counters-$i.json" || true
  done <<< "$COUNTER_SETS"
  return $rc
}
step_crosscheck_like() {  # like for like: copies and GEMMs of 50 us and more, rooflab in each peer's own mode
  if ! rooflab crosscheck --help >/dev/null 2>&1; then
    echo "ABSENT: this checkout's rooflab has no crosscheck command"; exit 4
  fi
  if [ "$KIND" = cuda ]; then
    # the 2 % goal's cases (50 us and more): the 2^26-element copies and every GEMM of 4096^3 to 8192^3
    # (gpu_gemm holds 4096^3 and 8192^3, gpu_gemm_peak the sizes between; the n filter picks both)
    rooflab crosscheck quick --device cuda --peers do_bench,nvbench -f benchmark=gpu_pointwise,gpu_gemm,gpu_gemm_peak \
      -f op=copy,matmul -f dtype=float32,bfloat16 -f n=67108864,4096,5120,6144,7168,8192 \
      --db "$DB" --json --out "$OUT/crosscheck-like.json"
  else  # the torch peer on quick's hot CPU cases: the same mode but for what a sample is
    rooflab crosscheck quick --device cpu --peers torch -f cache=hot -f op=stream_copy -f n=524288,2097152,8388608 \
      --db "$DB" --json --out "$OUT/crosscheck-like.json"
  fi
  "$PY" - "$OUT/crosscheck-like.json" <<'PYEOF'
import json, sys
report = json.load(open(sys.argv[1]))
print("case | peer | ms | ratio as configured | modes that differ | in-mode ratio | verdict")
for c in report["checks"]:
    if c["status"] == "ok":
        print(f'{c["case_key"]} | {c["peer"]} | {c["rooflab_median_ms"]:.4g} | {c["ratio"]:.3f} | '
              f'{"; ".join(c["method_differences"]) or "none"} | {c["in_mode_ratio"]:.3f} | '
              f'{"DISAGREE" if c["disagrees"] else "agree"}{" (contended)" if c["contended"] else ""}')
PYEOF
}
step_nightly_sample() {
  local spec=nightly extra=(--device cuda) kind_=cuda shards=$NIGHTLY_SHARDS
  if [ "$KIND" != cuda ]; then  # nightly has no CPU case: the same procedure on quick's CPU cases
    spec=quick kind_=cpu shards=12 extra=(--device cpu --max-time-ms 200)
    echo "no CUDA device: sampling quick's CPU cases instead of nightly's (which has none on a CPU)"
  fi
  local t0 rc; t0=$(date +%s)
  run_spec "$spec" "$SAMPLE_DB" "$OUT/run-nightly-sample.json" --shard "0/$shards" "${extra[@]}"; rc=$?
  echo "sample wall time: $(( $(date +%s) - t0 )) s (exit code $rc)"
  "$PY" scripts/gpu_nightly_projection.py --db "$SAMPLE_DB" --spec "$spec" --device-kind "$kind_" --shards "$shards" \
    --goal-s 1200 --json "$OUT/nightly-projection.json" --markdown "$OUT/nightly-projection.md" || return $?
  return $rc
}
step_gap_probe() {  # read against write flush, back to back against idle pace (docs/crosscheck.md, docs/timing.md)
  if [ "$KIND" = cuda ]; then
    "$PY" scripts/gpu_gap_probe.py --json "$OUT/gap-probe.json" --markdown "$OUT/gap-probe.md"
  else
    "$PY" scripts/gpu_gap_probe.py --device cpu --json "$OUT/gap-probe.json" --markdown "$OUT/gap-probe.md"
  fi
}
step_energy_probe() {  # the NVML energy counter's period, and power_w against a tight-loop reference
  "$PY" scripts/gpu_energy_probe.py --json "$OUT/energy-probe.json" --markdown "$OUT/energy-probe.md"
}
step_known() {
  local extra=()
  [ -f "$OUT/rooflab.db" ] && extra=(--db "$DB")
  "$PY" scripts/gpu_known_figures.py --device "$KIND" "${extra[@]}" --json "$OUT/known-figures.json" \
    --markdown "$OUT/known-figures.md"
}
step_ceilings() {
  [ -f "$OUT/rooflab.db" ] || skip "no results database (neither quick nor roofline ran)"
  rooflab roofline --device "$KIND" --db "$DB" --json --out "$OUT/ceilings" > "$OUT/ceilings.json"; local rc=$?
  cat "$OUT/ceilings.json"; return $rc
}
step_export() {
  [ -f "$OUT/rooflab.db" ] || skip "no results database"
  rooflab export --format jsonl --db "$DB" --out "$OUT/results.jsonl.gz" || return $?
  if [ -f "$OUT/nightly-sample.db" ]; then
    rooflab export --format jsonl --db "$SAMPLE_DB" --out "$OUT/nightly-sample.jsonl.gz" || return $?
  fi
  ls -l "$OUT"/*.jsonl.gz
}
step_report() {
  [ -f "$OUT/rooflab.db" ] || skip "no results database"
  rooflab report --db "$DB" --out "$OUT/report"
}
step_env_after() {
  command -v nvidia-smi >/dev/null 2>&1 || skip "no nvidia-smi on this machine"
  nvidia-smi -q -d CLOCK,PERFORMANCE,POWER,TEMPERATURE > "$OUT/env/nvidia-smi-after.txt" && tail -n 40 "$OUT/env/nvidia-smi-after.txt"
}
export -f step_env step_devices step_versions step_test_gpu step_quick step_collectives step_roofline step_crosscheck \
  step_crosscheck_like step_counters step_nightly_sample step_gap_probe step_energy_probe step_known step_ceilings step_export step_report step_env_after

# timeout (s) of each step with a GPU and without one, and the reserve it keeps for itself when an
# earlier step's timeout is cut to fit the budget
declare -A T_GPU=([env]=30 [devices]=90 [versions]=60 [test-gpu]=240 [quick]=300 [collectives]=240 [roofline]=240
  [crosscheck]=150 [crosscheck-like]=150 [counters]=420 [nightly-sample]=150 [gap-probe]=120 [energy-probe]=60
  [known]=150 [ceilings]=60 [export]=60 [report]=120 [env-after]=20)
declare -A T_CPU=([env]=30 [devices]=120 [versions]=120 [test-gpu]=10 [quick]=300 [collectives]=180 [roofline]=240
  [crosscheck]=240 [crosscheck-like]=180 [counters]=60 [nightly-sample]=300 [gap-probe]=180 [energy-probe]=60
  [known]=400 [ceilings]=120 [export]=120 [report]=240 [env-after]=10)
declare -A RESERVE=([known]=75 [ceilings]=15 [export]=15 [report]=40 [env-after]=5)

steps_tsv=$OUT/steps.tsv
printf 'step\tstatus\trc\tseconds\ttimeout_s\tlog\tnote\n' > "$steps_tsv"
failures=0

pack() {
  [ -n "$archive" ] || return 0
  tar -czf "$archive.tmp" -C "$(dirname "$OUT")" "$(basename "$OUT")" 2>/dev/null && mv -f "$archive.tmp" "$archive"
}

run_step() {  # run_step NAME INDEX
  local name=$1 idx=$2 later=0 j now timeout_s eff log rc status note t0 t1 secs var
  for ((j = idx + 1; j < ${#selected[@]}; j++)); do later=$((later + ${RESERVE[${selected[$j]}]:-0})); done
  if [ "$KIND" = cuda ]; then timeout_s=${T_GPU[$name]}; else timeout_s=${T_CPU[$name]}; fi
  var="GV_TIMEOUT_$(echo "$name" | tr 'a-z-' 'A-Z_')"
  timeout_s=${!var:-$timeout_s}
  now=$(date +%s)
  eff=$((deadline_s - now - later))
  [ "$eff" -lt "$timeout_s" ] || eff=$timeout_s
  log=$OUT/logs/$name.log
  if [ "$eff" -lt "$timeout_s" ] && [ "$eff" -lt 5 ]; then
    printf '%s\tskipped\t-\t0\t%s\t%s\t%s\n' "$name" "$eff" "-" "budget spent: ${eff}s left after the reserve of later steps" >> "$steps_tsv"
    echo "== $name: skipped (budget spent)"
    failures=$((failures + 1))  # the evidence is missing: say so in the exit code
    return
  fi
  echo "== $name (timeout ${eff}s)"
  t0=$(date +%s%N)
  # SIGINT first: rooflab stores the case in flight and marks the run interrupted; KILL 20 s later
  timeout -s INT -k 20 "$eff" bash -c "step_${name//-/_}" > "$log" 2>&1
  rc=$?
  t1=$(date +%s%N)
  secs=$(( (t1 - t0) / 1000000000 )).$(( (t1 - t0) / 100000000 % 10 ))
  note=""
  case $rc in
    0) status=ok ;;
    3) status=skipped; note=$(sed -n 's/^SKIP: //p' "$log" | head -n 1) ;;
    4) status=absent; note=$(sed -n 's/^ABSENT: //p' "$log" | head -n 1) ;;
    124|137) status=timeout; note="stopped after ${eff}s"; failures=$((failures + 1)) ;;
    *) status=failed; note=$(grep -v '^\s*$' "$log" | tail -n 1 | cut -c1-200 | tr '\t' ' '); failures=$((failures + 1)) ;;
  esac
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$secs" "$eff" "logs/$name.log" "$note" >> "$steps_tsv"
  echo "   $status (exit $rc, ${secs}s)${note:+: $note}"
  pack
}

echo "gpu-validate: device kind $KIND, python $PY, budget ${budget_s}s, steps: ${selected[*]}"
echo "gpu-validate: artifacts in $OUT${archive:+, archive $archive}"
for i in "${!selected[@]}"; do run_step "${selected[$i]}" "$i"; done

(cd "$OUT" && find . -type f ! -name artifacts.txt -printf '%s\t%p\n' | sort -k2 > artifacts.txt)
pack
echo
echo "==================== steps (total $(( $(date +%s) - start_s ))s of ${budget_s}s)"
column -t -s $'\t' "$steps_tsv" 2>/dev/null || cat "$steps_tsv"
if [ -f "$OUT/known-figures.md" ]; then  # its first table: rooflab against this run and the published figures
  echo; echo "==================== known-figures.md"
  awk '/^\| figure \| unit/ {on = 1} on && /^$/ {exit} on' "$OUT/known-figures.md"
fi
if [ -f "$OUT/nightly-projection.md" ]; then
  echo; echo "==================== nightly-projection.md"
  grep '^- ' "$OUT/nightly-projection.md"; grep '^|' "$OUT/nightly-projection.md" | head -n 12
fi
[ "$failures" -eq 0 ] && exit 0 || exit 1
