#!/usr/bin/env bash
# Creates the virtual environment and installs rooflab into it.
# torch: an existing torch >= 2.4 (a GPU machine's CUDA build) is kept as it is; when none is
# present, the CPU build torch==2.13.0 is installed (a plain `torch` would pull several GB of CUDA).
set -euo pipefail
venv=${1:-.venv}
python=${PYTHON:-python3}

has_torch() {  # prints the version of a torch >= 2.4 importable by $1, or nothing
  "$1" - <<'PY' 2>/dev/null || true
import torch
major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
if (major, minor) >= (2, 4):
    print(torch.__version__)
PY
}

system_torch=$(has_torch "$python")
if [ ! -x "$venv/bin/python" ]; then
  if [ -n "$system_torch" ]; then
    echo "bootstrap: using the system's torch $system_torch (venv with system site-packages)"
    "$python" -m venv --system-site-packages "$venv"
  else
    "$python" -m venv "$venv"
  fi
fi
"$venv/bin/python" -m pip install -q --upgrade pip
if [ -z "$(has_torch "$venv/bin/python")" ]; then
  echo "bootstrap: installing torch==2.13.0"
  "$venv/bin/python" -m pip install -q torch==2.13.0
fi
"$venv/bin/python" -m pip install -q -e '.[dev]'
echo "bootstrap: $("$venv/bin/python" -c 'import torch; print("torch", torch.__version__)')"
