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
"$venv/bin/python" -m pip install -q --upgrade pip 2>/dev/null || echo "bootstrap: could not upgrade pip (offline?); going on"
if [ -z "$(has_torch "$venv/bin/python")" ]; then
  echo "bootstrap: installing torch==2.13.0"
  "$venv/bin/python" -m pip install -q torch==2.13.0
fi
if ! "$venv/bin/python" -m pip install -q -e '.[dev]'; then
  # Offline machines (a GPU node with no package index) may already carry every dependency, e.g.
  # from wheels installed on PYTHONPATH: then put the checkout on the venv's path and add the
  # `rooflab` command by hand instead of failing.
  if PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$venv/bin/python" -c \
      'import sqlalchemy, alembic, pydantic, typer, rich, pandas, seaborn, jinja2, yaml, pytest, rooflab.runners.cli' 2>/dev/null; then
    echo "bootstrap: pip install failed; every dependency is importable, using the checkout in place"
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$PWD" > "$site/rooflab-checkout.pth"
    printf '#!/usr/bin/env bash\nexec "%s/bin/python" -m rooflab "$@"\n' "$(cd "$venv" && pwd)" > "$venv/bin/rooflab"
    chmod +x "$venv/bin/rooflab"
  else
    echo "bootstrap: pip install -e '.[dev]' failed and the dependencies are not all importable" >&2
    exit 1
  fi
fi
echo "bootstrap: $("$venv/bin/python" -c 'import torch; print("torch", torch.__version__)')"
