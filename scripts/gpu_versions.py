"""The versions a GPU loan's figures belong to: Python, every package the steps use (with whether
nvbench's `cuda.bench` imports), torch's CUDA and cuDNN, the GPU's properties, nvcc and Nsight
Compute. Written as JSON (the loan's `env` step, scripts/gpu_loan_plan.py); nothing here fails
for want of a package: a missing one reads null, an import that fails reads its error.

    python scripts/gpu_versions.py --out env/versions.json [--ncu PATH]
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

DISTRIBUTIONS = ("torch", "triton", "cupy-cuda13x", "cupy-cuda12x", "cupy", "cuda-bench", "cuda-bindings", "numpy",
                 "pandas", "sqlalchemy", "alembic", "pydantic", "pydantic-core", "typer", "rich", "nvidia-ml-py",
                 "pytest", "pytest-xdist", "pytest-timeout")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked (SystemExit with the message on a bad one); nothing is read."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    parser.add_argument("--ncu", default="ncu", help="Nsight Compute's executable (its --version is recorded)")
    return parser.parse_args(argv)


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for dist in DISTRIBUTIONS:
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    return out


def torch_facts() -> dict[str, Any]:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - recorded, not raised: the file says what is missing
        return {"torch_error": repr(exc)[:300]}
    out: dict[str, Any] = {"torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
                           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        out["gpu"] = {"name": p.name, "sm_count": p.multi_processor_count, "memory_bytes": p.total_memory,
                      "l2_bytes": getattr(p, "L2_cache_size", None), "capability": f"{p.major}.{p.minor}"}
    return out


def tool_version(argv: list[str]) -> str | None:
    """The last non-empty line a tool prints for --version, or None when it is not there."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"error: {exc}"
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return lines[-1] if lines else None


def versions(ncu: str) -> dict[str, Any]:
    out: dict[str, Any] = {"python": sys.version.split()[0], "executable": sys.executable,
                           "platform": platform.platform(), "packages": package_versions()}
    out.update(torch_facts())
    try:
        import cuda.bench  # noqa: F401 - nvbench's Python package: does it import here?
        out["cuda.bench_import"] = "ok"
    except Exception as exc:  # noqa: BLE001
        out["cuda.bench_import"] = repr(exc)[:200]
    out["nvcc"] = tool_version(["nvcc", "--version"])
    out["ncu"] = tool_version([ncu, "--version"])
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = versions(args.ncu)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
