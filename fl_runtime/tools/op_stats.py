"""Which path each op took (native, generic, CPU), counted since the last reset.

A read-only view of the always-on counters in `fl_runtime.ops.accounting` (the one place
that accounts per-op paths); reading it tells a user (and the tests) whether a model
really ran on the vendor's kernels.  `torch_fl.profile()` adds times and bytes.
"""
from __future__ import annotations

from fl_runtime.ops.accounting import CPU, GENERIC, NATIVE, counts, record, reset_counts

__all__ = ["CPU", "GENERIC", "NATIVE", "fallback_ops", "record", "reset", "snapshot"]


def snapshot() -> dict[str, dict[str, int]]:
    """{op: {path: count}} since the last reset."""
    table: dict[str, dict[str, int]] = {}
    for (op, path), count in counts().items():
        table.setdefault(op, {})[path] = count
    return table


def fallback_ops() -> list[str]:
    """Ops that ran through a fallback (generic or CPU) since the last reset."""
    return sorted({op for (op, path) in counts() if path in (GENERIC, CPU)})


def reset() -> None:
    reset_counts()
