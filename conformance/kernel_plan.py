"""Kernel tests: one per (kernel-table entry, dtype) for numerics and one per entry
for robustness and for concurrency; which of them run, in which worker jobs, and how an outcome
becomes a test verdict.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from fl_runtime import abi

from . import statuses
from .harness import KernelEntry
from .isolation import Job, KernelWorkers
from .recipes import DTYPES, FP8_DTYPES
from .repro import REPRODUCER_HEADING


@dataclass(frozen=True)
class KernelTarget:
    entry: KernelEntry
    kind: str                 # "numerics", or one of PER_ENTRY
    dtype: str | None = None  # numerics only

    @property
    def unit(self) -> tuple:
        return (self.kind, self.dtype)

    @property
    def id(self) -> str:
        return "-".join(p for p in (self.entry.op, self.dtype, self.entry.variant_name) if p)


# Kinds with one test per entry, in the order a worker runs them after the entry's numerics.
PER_ENTRY = ("robustness", "concurrency")


def targets(entries: list[KernelEntry], kind: str) -> list[KernelTarget]:
    """Numerics: every dtype of ABI 1.1 (not_supported where undeclared), and the float8
    dtypes (ABI 1.2) where the kernel declares them."""
    if kind in PER_ENTRY:
        return [KernelTarget(e, kind) for e in entries]
    return [KernelTarget(e, kind, name) for e in entries for name, dtype in DTYPES.items()
            if dtype not in FP8_DTYPES or e.dtypes >> abi.DTYPE_TO_FL[dtype] & 1]


def precheck(target: KernelTarget, device: dict) -> tuple[str, str] | None:
    """(status, reason) when a target cannot run: the capability is not declared, or
    the suite cannot check it yet."""
    if target.kind != "numerics":
        return None
    code = abi.DTYPE_TO_FL[DTYPES[target.dtype]]
    if not target.entry.dtypes >> code & 1:
        return statuses.NOT_SUPPORTED, f"{target.entry.op} does not declare {target.dtype}"
    if not device.get("supported_dtypes", 0) >> code & 1:
        return statuses.NOT_SUPPORTED, f"device 0 cannot store {target.dtype}"
    if target.dtype == "complex64":
        return statuses.UNTESTED, "the suite has no complex value generators yet"
    return None


def jobs(runnable: list[KernelTarget]) -> list[Job]:
    """One job per entry, its units in test order."""
    by_entry: dict[int, Job] = {}
    for target in runnable:
        entry = target.entry
        job = by_entry.setdefault(entry.index, Job(entry.index, entry.op, entry.variant_name, []))
        job.units.append(target.unit)
    return list(by_entry.values())


def verdict(target: KernelTarget, device: dict, workers: KernelWorkers, details: dict) -> None:
    """The test body shared by kernel tests: skip, pass or fail from the worker's outcome."""
    skip = precheck(target, device)
    if skip is not None:
        (statuses.not_supported if skip[0] == statuses.NOT_SUPPORTED else statuses.untested)(skip[1])
    outcome = workers.outcome(target.entry.index, target.unit)
    # "message": a pass may carry one too (how many cases the plugin declined)
    details.update({k: outcome.get(k) for k in ("max_error", "error_ratio", "tolerance", "examples", "reproducer",
                                                "message") if outcome.get(k) not in (None, "")})
    if outcome["status"] == statuses.UNTESTED:
        statuses.untested(outcome["message"])
    if outcome["status"] == statuses.NOT_SUPPORTED:   # the plugin declined the calls (harness.Declined)
        statuses.not_supported(outcome["message"])
    if outcome["status"] != statuses.PASS:
        reproducer = outcome.get("reproducer")
        pytest.fail(outcome["message"] + (f"\n\n{REPRODUCER_HEADING}\n{reproducer}" if reproducer else ""),
                    pytrace=False)
