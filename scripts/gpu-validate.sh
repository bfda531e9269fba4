#!/usr/bin/env bash
# The GPU loan in one call (scripts/gpu_loan.py; docs/gpu-validation.md gives the exact device call):
#   scripts/gpu-validate.sh --wheels .whl --archive "$OUT" --call-limit-s 540 /tmp/gv
#   scripts/gpu-validate.sh --plan WORK | --plan-json WORK | --check WORK     (anywhere, no GPU needed)
# The interpreter: GV_PYTHON, else .venv/bin/python where there is one, else python3 (the GPU image's).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -n "${GV_PYTHON:-}" ]; then py=$GV_PYTHON
elif [ -x "$root/.venv/bin/python" ]; then py=$root/.venv/bin/python
else py=python3; fi
exec "$py" "$root/scripts/gpu_loan.py" "$@"
