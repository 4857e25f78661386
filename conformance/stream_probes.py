"""Deterministic probes of stream ordering: work queued behind a long busy period.

Random interleavings (the state machine in suites/suite_streams.py) find an
ordering bug only when the racing work happens to be slow enough; then
hypothesis shrinks a flaky failure for minutes.  These probes make the race
certain instead: they first measure, with the host clock, how many large
device-to-device copies keep a stream busy for BUSY_MS, then enqueue that
busy work ahead of what is checked.  Anything that does not wait for it
(a stream that ignores an event wait, a queue that runs the newest work
first) reads stale bytes every time, not by luck.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

from fl_runtime.abi import ffi

from .harness import Device

BUSY_MS = 40.0            # long enough that no missing wait goes unseen on a loaded host
CHUNK = 8 << 20           # bytes per busy copy
MAX_COPIES = 4096
PROBE_BYTES = 4096


class OrderingError(AssertionError):
    """A stream ran work out of the order the ABI guarantees."""


@dataclass
class Busy:
    """Busy work for one stream: `copies` d2d copies of CHUNK bytes within one scratch allocation."""
    dev: Device
    scratch: int
    copies: int
    host_ms: float = 0.0  # what they took, by the host clock, when measured

    def enqueue(self, stream) -> None:
        for i in range(self.copies):
            src, dst = (0, CHUNK) if i % 2 == 0 else (CHUNK, 0)
            self.dev.d2d(stream, self.scratch, dst, self.scratch, src, CHUNK)


def _timed(busy: Busy, stream) -> float:
    started = time.perf_counter()
    busy.enqueue(stream)
    busy.dev.synchronize(stream)
    return (time.perf_counter() - started) * 1e3


def measure_busy(dev: Device, stream, scratch: int) -> Busy:
    """Grow the number of copies until they keep `stream` busy for BUSY_MS (host clock).
    The first pass touches fresh pages and is discarded; the figure kept is the faster
    of two timings, so a preempted host does not inflate it."""
    busy = Busy(dev, scratch, 2)
    _timed(busy, stream)
    while True:
        busy.host_ms = _timed(busy, stream)
        if busy.host_ms >= BUSY_MS or busy.copies >= MAX_COPIES:
            busy.host_ms = min(busy.host_ms, _timed(busy, stream))
            return busy
        busy.copies = min(MAX_COPIES, busy.copies * max(2, math.ceil(BUSY_MS / max(busy.host_ms, 0.01))))


class Events:
    """Events created for a probe, destroyed with it."""

    def __init__(self, dev: Device) -> None:
        self.dev, self.made = dev, []

    def record(self, stream) -> object:
        out = ffi.new("fl_event*")
        self.dev.check(self.dev.api.event_create(self.dev.index, out), "event_create")
        self.made.append(out[0])
        self.dev.check(self.dev.api.event_record(out[0], stream), "event_record")
        return out[0]

    def elapsed_ms(self, start, end) -> float:
        ms = ffi.new("float*")
        self.dev.check(self.dev.api.event_elapsed_ms(start, end, ms), "event_elapsed_ms")
        return float(ms[0])

    def destroy(self) -> None:
        for event in self.made:
            self.dev.check(self.dev.api.event_destroy(event), "event_destroy")
        self.made.clear()


def wait_event_orders_streams(dev: Device, busy: Busy, a, b, target: int, rounds: int = 3) -> None:
    """Stream a: busy work, then memset(target, v), record E.  Stream b: wait E, read
    target.  b must see v every round (a stream that waits an event sees everything
    enqueued before the record)."""
    events = Events(dev)
    try:
        for value in range(0x31, 0x31 + rounds):
            busy.enqueue(a)
            dev.memset(a, target, 0, value, PROBE_BYTES)
            event = events.record(a)
            dev.check(dev.api.stream_wait_event(b, event), "stream_wait_event")
            seen = dev.read(b, target, 0, PROBE_BYTES)
            dev.synchronize(a)
            if seen != bytes([value]) * PROBE_BYTES:
                raise OrderingError(
                    f"round {value - 0x30}: stream B waited an event recorded on stream A after "
                    f"memset({value:#x}) behind {busy.host_ms:.0f} ms of copies, then read "
                    f"{_describe(seen)}: stream_wait_event did not make B wait")
    finally:
        dev.synchronize(a)
        dev.synchronize(b)
        events.destroy()


def one_stream_is_fifo(dev: Device, busy: Busy, stream, target: int, writes: int = 8) -> None:
    """Behind busy work, memsets of 1..writes then a read on one stream: the read must see
    the last value (work on one stream runs in the order it was enqueued)."""
    busy.enqueue(stream)
    for value in range(1, writes + 1):
        dev.memset(stream, target, 0, value, PROBE_BYTES)
    seen = dev.read(stream, target, 0, PROBE_BYTES)
    if seen != bytes([writes]) * PROBE_BYTES:
        raise OrderingError(f"memsets of 1..{writes} then a read, queued on one stream behind "
                            f"{busy.host_ms:.0f} ms of copies, read {_describe(seen)}: "
                            "the stream did not run its work in FIFO order")


def elapsed_time_is_plausible(dev: Device, busy: Busy, stream) -> None:
    """Events around the busy work: elapsed time non-negative, finite, at least a
    quarter of what the host measured for the same work and no more than the host
    waited in all."""
    events = Events(dev)
    try:
        started = time.perf_counter()
        first = events.record(stream)
        busy.enqueue(stream)
        second = events.record(stream)
        dev.synchronize(stream)
        waited_ms = (time.perf_counter() - started) * 1e3
        ms = events.elapsed_ms(first, second)
        if not (math.isfinite(ms) and busy.host_ms / 4 <= ms <= waited_ms * 1.05 + 1.0):
            raise OrderingError(f"event_elapsed_ms around {busy.copies} copies is {ms!r} ms; the host "
                                f"measured {busy.host_ms:.1f} ms for them and waited {waited_ms:.1f} ms")
    finally:
        events.destroy()


def _describe(seen: bytes) -> str:
    values = sorted(set(seen))
    return f"bytes {', '.join(hex(v) for v in values[:4])}{' ...' if len(values) > 4 else ''}"
