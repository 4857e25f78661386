"""Per-op path accounting (always on) and the profiler (on request) (docs/users/profiling.md).

Two levels, one source of truth:

- Counting: every op call adds one to a (op, path) counter; a dict increment,
  cheap enough for the hot path.  `op_stats` reads it.
- Profiling: while a `profile()` is active, each call also records its host
  time, bytes copied by fallbacks, and, for vendor launches, a pair of vendor
  events around the launch (device time).  Outside a profile none of that
  runs: the hot path only checks that `ACTIVE` is None.

Paths: "native" (a vendor kernel; its variant, precise or fast, is recorded
too), "generic" (decomposed into vendor kernels), "cpu" (PyTorch's CPU kernel
on copies).  A profile's summary flags a fallback share (generic + cpu calls
over all calls) above a threshold, 10% unless configured.

Export: Chrome-trace JSON (`Profile.export_chrome_trace`), the format
torch.profiler writes and chrome://tracing / Perfetto read, with host spans on
one track and device spans (from the vendor events) on one track per device.
We export our own trace rather than feed torch.profiler because a Python
PrivateUse1 backend cannot register a Kineto activity source, so torch.profiler
would show our ops as CPU time only; its own trace (CPU side) can be opened
next to ours.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from fl_runtime.integration import process
from fl_runtime.ops import accounting
from fl_runtime.ops.accounting import (  # noqa: F401 (re-exported)
    CPU,
    FALLBACK_PATHS,
    FAST,
    GENERIC,
    NATIVE,
    PRECISE,
)

DEFAULT_WARN_SHARE = 0.10


@dataclass
class OpRow:
    """What a profile knows about one (op, path, variant)."""
    op: str
    path: str
    variant: str | None
    count: int = 0
    host_us: float = 0.0
    device_us: float = 0.0
    bytes_copied: int = 0

    def as_dict(self) -> dict:
        return {"op": self.op, "path": self.path, "variant": self.variant, "count": self.count,
                "host_us": round(self.host_us, 3), "device_us": round(self.device_us, 3),
                "bytes_copied": self.bytes_copied}


@dataclass
class _DeviceSpan:
    row: OpRow
    device: int
    begin: object     # streams.Event
    end: object


@dataclass
class Profile:
    """One profiling session; use through `profile()`."""
    warn_share: float = DEFAULT_WARN_SHARE
    rows: dict = field(default_factory=dict)
    trace: list = field(default_factory=list)
    _spans: list = field(default_factory=list)
    _device_origin: dict = field(default_factory=dict)   # device -> (event, host ts us)
    _t0_ns: int = 0
    _outer: Profile | None = None
    _closed: bool = False
    # Threads: ops on any thread report here; a row's counters are read-modify-write, so
    # updates take this lock (one uncontended acquire per call, and only while profiling).
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    # -- recording (called by dispatch and the fallback chain) -----------------
    def row(self, op: str, path: str, variant: str | None) -> OpRow:
        key = (op, path, variant)
        found = self.rows.get(key)
        if found is None:
            found = self.rows.setdefault(key, OpRow(op, path, variant))
        return found

    def add(self, op: str, path: str, variant: str | None, start_ns: int, nbytes: int = 0) -> OpRow:
        """One finished call that began at perf_counter_ns() == start_ns."""
        now = time.perf_counter_ns()
        ts = (start_ns - self._t0_ns) / 1e3
        args = {"path": path} if variant is None else {"path": path, "variant": variant}
        if nbytes:
            args["bytes_copied"] = nbytes
        event = {"name": op, "cat": path, "ph": "X", "ts": ts, "dur": (now - start_ns) / 1e3,
                 "pid": 0, "tid": 0, "args": args}
        with self._lock:
            row = self.row(op, path, variant)
            row.count += 1
            row.host_us += (now - start_ns) / 1e3
            row.bytes_copied += nbytes
            self.trace.append(event)
        return row

    def device_events(self, device, stream, event_type):
        """Record a start event on `stream` (and the device's origin the first time);
        returns the pair to close with `end_device_span`."""
        index = device.index
        if index not in self._device_origin:
            origin = event_type(device)
            origin.record(stream)
            with self._lock:
                self._device_origin.setdefault(index, (origin, (time.perf_counter_ns() - self._t0_ns) / 1e3))
        begin, end = event_type(device), event_type(device)
        begin.record(stream)
        return begin, end

    def end_device_span(self, row: OpRow, device_index: int, begin, end, stream) -> None:
        end.record(stream)
        with self._lock:
            self._spans.append(_DeviceSpan(row, device_index, begin, end))

    # -- session ---------------------------------------------------------------
    def _start(self) -> None:
        self._t0_ns = time.perf_counter_ns()

    def _finish(self) -> None:
        """Wait for the devices, turn vendor events into device times, warn if needed."""
        if self._closed:
            return
        self._closed = True
        for index in list(self._device_origin):
            _synchronize(index)
        with self._lock:
            spans, self._spans = self._spans, []
        for span in spans:
            origin, origin_ts = self._device_origin[span.device]
            dur_us = span.begin.elapsed_ms(span.end) * 1e3
            span.row.device_us += dur_us
            self.trace.append({"name": span.row.op, "cat": span.row.path, "ph": "X",
                               "ts": origin_ts + origin.elapsed_ms(span.begin) * 1e3, "dur": dur_us,
                               "pid": 1, "tid": span.device, "args": {"variant": span.row.variant}})
        share = self.fallback_share()
        if share > self.warn_share:
            warnings.warn(f"torch_fl: {share:.0%} of op calls ran through fallbacks (generic or CPU), above "
                          f"the {self.warn_share:.0%} threshold; see the profile summary for which ops, "
                          "and ask the vendor for kernels", stacklevel=3)

    # -- reading -----------------------------------------------------------------
    def fallback_share(self) -> float:
        total = sum(r.count for r in self.rows.values())
        fallback = sum(r.count for r in self.rows.values() if r.path in FALLBACK_PATHS)
        return fallback / total if total else 0.0

    def paths(self) -> dict[str, set[str]]:
        """{op: {path, ...}} seen in this profile."""
        found: dict[str, set[str]] = {}
        for row in self.rows.values():
            found.setdefault(row.op, set()).add(row.path)
        return found

    def table(self) -> list[dict]:
        """Rows sorted by host time, largest first."""
        return [r.as_dict() for r in sorted(self.rows.values(), key=lambda r: -r.host_us)]

    def summary(self, limit: int = 40) -> str:
        """A text table: op, path, variant, calls, host and device time, bytes copied."""
        header = f"{'op':<44} {'path':<8} {'variant':<8} {'calls':>7} {'host ms':>9} {'device ms':>10} {'copied':>10}"
        lines = [header, "-" * len(header)]
        for r in self.table()[:limit]:
            lines.append(f"{r['op'][:44]:<44} {r['path']:<8} {r['variant'] or '-':<8} {r['count']:>7} "
                         f"{r['host_us'] / 1e3:>9.3f} {r['device_us'] / 1e3:>10.3f} {_bytes(r['bytes_copied']):>10}")
        total = sum(r.count for r in self.rows.values())
        lines.append(f"{len(self.rows)} (op, path) rows, {total} calls, fallback share "
                     f"{self.fallback_share():.1%} (warning above {self.warn_share:.0%})")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {"ops": self.table(), "fallback_share": self.fallback_share(), "warn_share": self.warn_share}

    def export_chrome_trace(self, path: str | os.PathLike) -> Path:
        """Write Chrome-trace JSON (chrome://tracing, Perfetto, torch.profiler's format)."""
        meta = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "host (torch_fl ops)"}},
                {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "fl devices (vendor events)"}}]
        meta += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": i, "args": {"name": f"fl:{i}"}}
                 for i in sorted(self._device_origin)]
        out = Path(path)
        out.write_text(json.dumps({"traceEvents": meta + self.trace, "displayTimeUnit": "ms"}))
        return out

    def __enter__(self) -> Self:
        self._outer = accounting.set_active(self)
        self._start()
        return self

    def __exit__(self, *exc) -> None:
        accounting.set_active(self._outer)
        self._finish()


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _synchronize(index: int) -> None:
    process.start().synchronize(index)


def profile(warn_fallback_share: float | None = None) -> Profile:
    """`with torch_fl.profile() as prof:` records every fl op in the block; then
    `print(prof.summary())`, `prof.export_chrome_trace("trace.json")`."""
    if warn_fallback_share is None:
        warn_fallback_share = _configured_share()
    if not 0 <= warn_fallback_share <= 1:
        raise ValueError(f"warn_fallback_share must be in [0, 1], got {warn_fallback_share!r}")
    return Profile(warn_share=warn_fallback_share)


def _configured_share() -> float:
    rt = process.started()
    return rt.config.profiler.fallback_warning_share if rt is not None else DEFAULT_WARN_SHARE


def start_from_env() -> None:
    """TORCH_FL_PROFILE=path: profile the whole process; at exit write the Chrome
    trace to `path`, the summary table to stderr."""
    target = os.environ.get("TORCH_FL_PROFILE")
    if not target or accounting.ACTIVE is not None:
        return
    import atexit
    session = profile().__enter__()

    def finish() -> None:
        session.__exit__(None, None, None)
        session.export_chrome_trace(target)
        print(session.summary(), file=sys.stderr)
        print(f"torch_fl: profile trace written to {target}", file=sys.stderr)
    atexit.register(finish)
