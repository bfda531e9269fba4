"""What reports ask of an op by its stored name: read-only? a fusion chain? its unfused bytes? its
elementary functions?

The answers live on the op classes (suite.ops.base.Op: `reads_only`, `fusion_chain`,
`unfused_bytes`, `elementary`); this module only looks the op up. An op that is not registered in this process
(a plugin op whose module is not loaded) has no answers: not read-only, not a chain, no unfused bytes.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rooflab.suite.ops.registry import get_op


def _op(name: str) -> Any:
    try:
        return get_op(name)
    except KeyError:
        return None


def reads_only(op_name: str) -> bool:
    """True for an op whose traffic is reads (held against the read-only HBM roof)."""
    op = _op(str(op_name))
    return bool(op is not None and op.reads_only)


def fusion_chain_ops(op_names: Any) -> list[str]:
    """Those of `op_names` that are fusion chains (their eager and compiled results are compared)."""
    return sorted({str(n) for n in op_names if (op := _op(str(n))) is not None and op.fusion_chain})


def unfused_bytes(op_name: str, params: Mapping[str, Any], dtype: str) -> int | None:
    """DRAM bytes of the op's unfused form (Op.unfused_bytes), or None when the op has none, is not
    registered, or its params or dtype are not ones it knows (an unknown dtype is not sized)."""
    op = _op(str(op_name))
    if op is None:
        return None
    try:
        return op.unfused_bytes(dict(params), str(dtype))
    except (KeyError, ValueError, TypeError):
        return None


def elementary_counts(op_name: str, params: Mapping[str, Any], dtype: str) -> dict[str, int]:
    """Elementary functions of one call by function name (Op.elementary); {} when the op declares none,
    is not registered, or its params or dtype are not ones it knows."""
    op = _op(str(op_name))
    if op is None:
        return {}
    try:
        return {str(f): int(n) for f, n in op.elementary(op.with_defaults(dict(params)), str(dtype)).items() if n}
    except (KeyError, ValueError, TypeError):
        return {}
