"""Which path each op call took: the always-on counters, and the seam a profile plugs into.

Paths: "native" (a vendor kernel), "generic" (PyTorch's decomposition into
vendor kernels), "cpu" (PyTorch's CPU kernel on copies); see
docs/users/profiling.md "Where an op runs".  Counting appends the (op, path) key to a
list (one atomic operation in CPython, no lock on the hot path); the list is
folded into the counter under a lock when it grows long and whenever counts
are read.  Timing is the profiler's (fl_runtime.tools):
while a profile is active it is installed here as `ACTIVE`, and the op paths
report to it; outside a profile the hot path only checks that `ACTIVE` is None
(the per-signature programs, fast_path.py, check `HOOKED`: a profile or phase
timing is installed, so calls take the full path that reports to them).
The profiler lives above the ops layer, so it registers itself here instead
of being imported by it.
"""
from __future__ import annotations

import threading
from collections import Counter
from time import perf_counter_ns

NATIVE = "native"
GENERIC = "generic"
CPU = "cpu"
FALLBACK_PATHS = (GENERIC, CPU)
PRECISE = "precise"
FAST = "fast"

_counts: Counter = Counter()
_lock = threading.Lock()
# Calls not yet folded into _counts: appended without a lock, folded under it (fold).
pending: list[tuple[str, str]] = []
FOLD_AT = 1 << 14         # pending entries that trigger a fold (bounds its memory)
ACTIVE = None      # the innermost active tools.profiler.Profile, or None
PHASES = None      # a PhaseTimes while the launcher's phases are timed (benchmarks), or None
HOOKED = False     # ACTIVE or PHASES is set: op calls take the launcher's full path


_hooked_listeners: list = []
# path -> () -> {op: calls} the native bridge served through that path since the last call
_native_counts: dict = {}


def on_hooked(listener) -> None:
    """Call `listener(HOOKED)` whenever a profile or phase timing is installed or removed."""
    _hooked_listeners.append(listener)


def also_count(take, path: str = NATIVE) -> None:
    """Fold `take()`'s {op: calls} into the counts too, as calls through `path` (the native
    bridge counts the calls it serves in C++: vendor kernels, bridge/csrc/program_table.h, and
    generic kernels, bridge/csrc/fallback_decompositions.h).  One source per path."""
    _native_counts[path] = take


def _set_hooked() -> None:
    global HOOKED
    HOOKED = ACTIVE is not None or PHASES is not None
    for listener in _hooked_listeners:
        listener(HOOKED)


def record(op: str, path: str) -> None:
    """Count one call of `op` through `path` (always on; safe from any thread)."""
    pending.append((op, path))
    if len(pending) > FOLD_AT:
        fold()


def record_key(key: tuple[str, str]) -> None:
    """record() for a prebuilt (op, path) key (the per-signature programs hold theirs)."""
    pending.append(key)
    if len(pending) > FOLD_AT:
        fold()


def fold() -> None:
    """Move the pending calls into the counter.  Under the lock only one thread folds;
    other threads only ever append, at the end, so the first `n` entries copied here are
    the `n` deleted (each slice operation is atomic under the GIL)."""
    with _lock:
        n = len(pending)
        batch = pending[:n]
        del pending[:n]
        _counts.update(batch)
        for path, take in _native_counts.items():
            for op, calls in take().items():
                _counts[(op, path)] += calls


def counts() -> Counter:
    """A snapshot of the (op, path) -> calls counter since the last reset."""
    fold()
    with _lock:
        return Counter(_counts)


def reset_counts() -> None:
    fold()
    with _lock:
        _counts.clear()


def set_active(profile) -> object:
    """Install `profile` (or None) as the one op paths report timings to; returns the previous one."""
    global ACTIVE
    previous, ACTIVE = ACTIVE, profile
    _set_hooked()
    return previous


# The launcher's phases, in the order a launch goes through them (docs/users/limits.md
# "Speed": where an op's host time goes); "fallback" is a call the chain ran,
# less the native launches it made (those count in their own phases).
PHASE_NAMES = ("normalize", "layout", "allocate", "marshal", "order", "launch", "fallback")
NORMALIZE, LAYOUT, ALLOCATE, MARSHAL, ORDER, LAUNCH, FALLBACK = range(len(PHASE_NAMES))


class PhaseTimes:
    """Nanoseconds per launcher phase, summed over calls, while installed with
    set_phases().  The launcher's full path is the hook: it calls enter() and leave()
    around a call and lap(phase) at the end of each phase, so the timed path is the
    path (while phases are timed every call takes it: the per-signature programs and
    the native bridge's C++ kernels step aside).  A call made inside another's fallback
    (a generic kernel's launches) ends the outer phase in progress as "fallback" and
    reports its own phases.  One thread at a time (a benchmark's): the sums are not locked."""

    def __init__(self, clock=None) -> None:
        # perf_counter_ns by default; time.thread_time_ns leaves out the time other processes
        # hold the core (a shared machine), at the price of a system call per reading.
        self.clock = clock or perf_counter_ns
        self.ns = [0] * len(PHASE_NAMES)
        self.calls = 0          # launcher calls, nested ones (a generic kernel's) included
        self._last = 0          # the clock at the end of the last phase
        self._depth = 0

    def enter(self) -> None:
        now = self.clock()
        if self._depth:          # inside another call's fallback: that part is the fallback's
            self.ns[FALLBACK] += now - self._last
        self._last = now
        self._depth += 1
        self.calls += 1

    def lap(self, phase: int) -> None:
        now = self.clock()
        self.ns[phase] += now - self._last
        self._last = now

    def leave(self) -> None:
        self._depth -= 1

    def inside_ns(self) -> int:
        """Time inside the launcher: the phases cover each call end to end, once."""
        return sum(self.ns)

    def as_dict(self) -> dict[str, int]:
        return dict(zip(PHASE_NAMES, self.ns))


def set_phases(times: PhaseTimes | None) -> PhaseTimes | None:
    """Install `times` (or None) as the launcher's phase clock; returns the previous one."""
    global PHASES
    previous, PHASES = PHASES, times
    _set_hooked()
    return previous
