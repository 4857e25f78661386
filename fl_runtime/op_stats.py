"""Which path each op took (native vendor kernel or CPU fallback), counted.

Counting is a dict increment per call; reading it tells a user (and the tests)
whether a model really ran on the vendor's kernels.
"""
from __future__ import annotations

from collections import Counter

NATIVE = "native"
CPU = "cpu"

_counts: Counter = Counter()


def record(op: str, path: str) -> None:
    _counts[(op, path)] += 1


def snapshot() -> dict[str, dict[str, int]]:
    """{op: {path: count}} since the last reset."""
    table: dict[str, dict[str, int]] = {}
    for (op, path), count in _counts.items():
        table.setdefault(op, {})[path] = count
    return table


def fallback_ops() -> list[str]:
    """Ops that ran through the CPU fallback since the last reset."""
    return sorted({op for (op, path) in _counts if path == CPU})


def reset() -> None:
    _counts.clear()
