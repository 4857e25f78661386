"""Streams and events: a hypothesis state machine against a happens-before model.

Three streams on device 0 get copies, memsets, kernel launches (the plugin's
own add_.Scalar or fill_.Scalar on float32, when it declares one), event
records and waits, queries, synchronizations and long "keep busy" copies in
random order.  The model
keeps a vector clock per stream and one for what the host has observed, so it
knows which results are guaranteed: every read is checked once the host
knows it ran.  Conflicting accesses are ordered the way a correct runtime
would, through events, so nothing the model checks is a race: FIFO per
stream, "a stream that waited an event sees everything before the record",
"synchronize means done", "a stream whose last work is a completed record
is done" and consistent event timings all follow.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, precondition, rule, \
    run_state_machine_as_test

from fl_runtime import abi
from fl_runtime.abi import ffi
from fl_runtime.ops.schema import compile_plan

from conformance import statuses
from conformance.harness import (STATUS, Declined, Device, DeviceTensor, KernelEntry, kernel_entries, launch,
                                 status_name, storage_bytes)
from conformance.stream_probes import (BEHIND, CHUNK, KINDS, PROBE_BYTES, Buffers,
                                       completed_record_completes_its_stream, elapsed_time_is_plausible,
                                       kind_is_ordered, measure_busy, one_stream_is_fifo,
                                       query_is_not_ready_behind_busy_work, rerecorded_event_moves,
                                       WorkRunsAtEnqueue,
                                       wait_event_orders_streams)

CATEGORY = "streams"
STREAMS = 3
FLOATS = 16384
NBYTES = 4 * FLOATS
BUSY_BYTES = 8 << 20                # a copy this long keeps a stream busy for a while
KERNEL_OPS = ("add_.Scalar", "fill_.Scalar")


def _join(a: list[int], b: list[int]) -> list[int]:
    return [max(x, y) for x, y in zip(a, b)]


@dataclass
class Buffer:
    ptr: int
    content: bytes | None = None                     # None until first written
    writer: tuple | None = None                      # (stream, clock) of the last write
    readers: list = field(default_factory=list)      # (stream, clock) of reads since


class StreamModel(RuleBasedStateMachine):
    """Subclassed per run with `device` and `kernel` (entry, or None) set."""
    device = None
    kernel = None
    buffers = Bundle("buffers")
    events = Bundle("events")

    @initialize()
    def setup(self) -> None:
        self.streams = [self.device.new_stream() for _ in range(STREAMS)]
        self.clock = [[0] * STREAMS for _ in range(STREAMS)]   # what each stream's next op is ordered after
        self.host = [0] * STREAMS                              # what the host knows has run
        self.recorded: dict = {}                               # event -> (stream, clock) of its latest record
        self.tail_record: list = [None] * STREAMS              # a record's clock while it is its stream's last work
        self.live_events: list = []
        self.helpers: list = []                                # events the model uses to order accesses
        self.pending: list = []                                # (stream, clock, host buffer, expected, what)
        self.live_buffers: list[Buffer] = []
        # Per stream scratch memory for keep_busy: work queued behind a long copy makes
        # a missing wait show as wrong bytes instead of passing by luck.
        self.scratch = [self.device.malloc(2 * BUSY_BYTES) for _ in range(STREAMS)]

    # -- the model ---------------------------------------------------------------
    def _enqueue(self, s: int) -> list[int]:
        """Advance stream s's clock for one new op; returns the op's clock."""
        self.tail_record[s] = None
        self.clock[s] = _join(self.clock[s], self.host)
        self.clock[s][s] += 1
        return list(self.clock[s])

    def _ordered(self, access: tuple, s: int) -> bool:
        stream, clock = access
        return clock[stream] <= _join(self.clock[s], self.host)[stream]

    def _order_before(self, accesses: list, s: int) -> None:
        """Make stream s wait for accesses it is not yet ordered after (as a runtime would)."""
        for access in accesses:
            if access is not None and not self._ordered(access, s):
                event = self._new_event()
                self.helpers.append(event)
                self._record(event, access[0])
                self._wait(s, event)

    def _learn(self, clock: list[int]) -> None:
        """The host observed completion up to `clock`: check every read that has now run."""
        self.host = _join(self.host, clock)
        for item in list(self.pending):
            stream, op_clock, host_buffer, expected, what = item
            if op_clock[stream] <= self.host[stream]:
                self.pending.remove(item)
                got = ffi.buffer(host_buffer, NBYTES)[:]
                assert got == expected, f"{what}: the bytes read back differ from what the ordered writes left"

    def _new_event(self):
        out = ffi.new("fl_event*")
        self.device.check(self.device.api.event_create(self.device.index, out), "event_create")
        return out[0]

    def _record(self, event, s: int) -> None:
        self.device.check(self.device.api.event_record(event, self.streams[s]), "event_record")
        self.recorded[event] = (s, self._enqueue(s))
        self.tail_record[s] = self.recorded[event][1]

    def _wait(self, s: int, event) -> None:
        self.device.check(self.device.api.stream_wait_event(self.streams[s], event), "stream_wait_event")
        self.tail_record[s] = None
        if event in self.recorded:
            self.clock[s] = _join(self.clock[s], self.recorded[event][1])

    def _write(self, buffer: Buffer, s: int, content: bytes) -> list[int]:
        """Account for a write just enqueued on s (the caller ordered it first)."""
        clock = self._enqueue(s)
        buffer.content, buffer.writer, buffer.readers = content, (s, clock), []
        return clock

    # -- rules -------------------------------------------------------------------
    @precondition(lambda self: len(self.live_buffers) < 6)
    @rule(target=buffers)
    def allocate(self) -> Buffer:
        buffer = Buffer(self.device.malloc(NBYTES))
        self.live_buffers.append(buffer)
        return buffer

    @rule(s=st.integers(0, STREAMS - 1))
    def keep_busy(self, s) -> None:
        self.device.d2d(self.streams[s], self.scratch[s], BUSY_BYTES, self.scratch[s], 0, BUSY_BYTES)
        self._enqueue(s)

    @rule(buffer=buffers, s=st.integers(0, STREAMS - 1), seed=st.integers(0, 1000))
    def upload(self, buffer, s, seed) -> None:
        data = storage_bytes(torch.arange(seed, seed + FLOATS, dtype=torch.float32))
        self._order_before([buffer.writer, *buffer.readers], s)
        self.device.h2d(self.streams[s], buffer.ptr, 0, data)
        self._write(buffer, s, data)

    @rule(buffer=buffers, s=st.integers(0, STREAMS - 1), value=st.sampled_from([0, 0x3F, 0x41]))
    def memset(self, buffer, s, value) -> None:
        self._order_before([buffer.writer, *buffer.readers], s)
        self.device.memset(self.streams[s], buffer.ptr, 0, value, NBYTES)
        self._write(buffer, s, bytes([value]) * NBYTES)

    @precondition(lambda self: self.kernel is not None)
    @rule(buffer=buffers, s=st.integers(0, STREAMS - 1), value=st.sampled_from([1.0, 2.0, -3.0]))
    def kernel_launch(self, buffer, s, value) -> None:
        entry = self.kernel
        if entry.op == "add_.Scalar" and buffer.content is None:
            return   # adding to undefined contents leaves them undefined
        self._order_before([buffer.writer, *buffer.readers], s)
        _launch_on_buffer(self.device, self.streams[s], entry, buffer.ptr, value)
        if entry.op == "add_.Scalar":
            result = torch.frombuffer(bytearray(buffer.content), dtype=torch.float32) + value
        else:
            result = torch.full((FLOATS,), value, dtype=torch.float32)
        self._write(buffer, s, storage_bytes(result))

    @rule(dst=buffers, src=buffers, s=st.integers(0, STREAMS - 1))
    def copy(self, dst, src, s) -> None:
        if dst is src or src.content is None:
            return
        self._order_before([src.writer, dst.writer, *dst.readers], s)
        self.device.d2d(self.streams[s], dst.ptr, 0, src.ptr, 0, NBYTES)
        clock = self._write(dst, s, src.content)
        src.readers.append((s, clock))

    @rule(buffer=buffers, s=st.integers(0, STREAMS - 1))
    def download(self, buffer, s) -> None:
        if buffer.content is None:
            return
        self._order_before([buffer.writer], s)
        host_buffer = self.device.d2h(self.streams[s], buffer.ptr, 0, NBYTES)
        clock = self._enqueue(s)
        buffer.readers.append((s, clock))
        self.pending.append((s, clock, host_buffer, buffer.content, f"d2h on stream {s}"))

    @precondition(lambda self: len(self.live_events) < 4)
    @rule(target=events)
    def create_event(self) -> object:
        event = self._new_event()
        self.live_events.append(event)
        return event

    @rule(event=events, s=st.integers(0, STREAMS - 1))
    def record(self, event, s) -> None:
        self._record(event, s)

    @rule(event=events, s=st.integers(0, STREAMS - 1))
    def wait(self, event, s) -> None:
        self._wait(s, event)

    @rule(event=events)
    def query_event(self, event) -> None:
        status = self.device.api.event_query(event)
        done = event in self.recorded and self._known_done(self.recorded[event])
        assert status in (STATUS["FL_SUCCESS"], STATUS["FL_NOT_READY"]), f"event_query: {status_name(status)}"
        assert status == STATUS["FL_SUCCESS"] or not done, "event_query says NOT_READY for an event known complete"
        if status == STATUS["FL_SUCCESS"] and event in self.recorded:
            self._learn(self.recorded[event][1])

    @rule(event=events)
    def synchronize_event(self, event) -> None:
        self.device.check(self.device.api.event_synchronize(event), "event_synchronize")
        if event in self.recorded:
            self._learn(self.recorded[event][1])

    @rule(s=st.integers(0, STREAMS - 1))
    def query_stream(self, s) -> None:
        status = self.device.api.stream_query(self.streams[s])
        assert status in (STATUS["FL_SUCCESS"], STATUS["FL_NOT_READY"]), f"stream_query: {status_name(status)}"
        tail = self.tail_record[s]
        assert status == STATUS["FL_SUCCESS"] or tail is None or not self._known_done((s, tail)), \
            "stream_query says NOT_READY for a stream whose last work, an event record, is known complete " \
            "(fl_abi.h ADDRESSES: an event record is work of its stream)"
        if status == STATUS["FL_SUCCESS"]:
            self._learn(self.clock[s])

    @rule(s=st.integers(0, STREAMS - 1))
    def synchronize_stream(self, s) -> None:
        self.device.synchronize(self.streams[s])
        self._learn(self.clock[s])
        assert self.device.api.stream_query(self.streams[s]) == STATUS["FL_SUCCESS"], \
            "stream_query is not FL_SUCCESS right after stream_synchronize"
        for event, (stream, clock) in self.recorded.items():
            if stream == s and self._known_done((stream, clock)):
                assert self.device.api.event_query(event) == STATUS["FL_SUCCESS"], \
                    "an event recorded before stream_synchronize is not complete after it"

    @rule(buffer=consumes(buffers))
    def free(self, buffer) -> None:
        for stream, clock in [a for a in (buffer.writer, *buffer.readers) if a is not None]:
            if not self._known_done((stream, clock)):
                self.synchronize_stream(stream)
        self.device.free(buffer.ptr)
        self.live_buffers.remove(buffer)

    @rule(s=st.integers(0, STREAMS - 1))
    def elapsed_times_are_consistent(self, s) -> None:
        mine = sorted(((clock[s], event) for event, (stream, clock) in self.recorded.items()
                       if stream == s), key=lambda pair: pair[0])
        if len(mine) < 2:
            return
        self.synchronize_stream(s)
        first = mine[0][1]
        ms, previous = ffi.new("float*"), 0.0
        for _, later in mine[1:]:
            self.device.check(self.device.api.event_elapsed_ms(first, later, ms), "event_elapsed_ms")
            assert ms[0] >= previous, (f"elapsed times of events recorded in order on one stream are not "
                                       f"monotonic: {ms[0]} ms after {previous} ms")
            previous = ms[0]

    def _known_done(self, access: tuple) -> bool:
        stream, clock = access
        return clock[stream] <= self.host[stream]

    def teardown(self) -> None:
        if not hasattr(self, "streams"):
            return
        for s in range(STREAMS):
            self.synchronize_stream(s)
        assert not self.pending, "reads remain unchecked after every stream was synchronized"
        for ptr in [buffer.ptr for buffer in self.live_buffers] + self.scratch:
            self.device.free(ptr)
        for event in self.live_events + self.helpers:
            self.device.check(self.device.api.event_destroy(event), "event_destroy")
        for stream in self.streams:
            self.device.destroy_stream(stream)


def _launch_on_buffer(device: Device, stream, entry: KernelEntry, ptr: int, value: float,
                      floats: int = FLOATS) -> None:
    """The model's kernel call: entry(buffer as `floats` contiguous float32, value), in place."""
    tensor = DeviceTensor(ptr, 0, torch.float32, (floats,), (1,))
    plan = compile_plan(entry.op)
    launch(device, stream, entry, plan, plan.normalize([tensor, value], {}), [tensor])


def _declines(device: Device, entry: KernelEntry) -> str | None:
    """The plugin's message when it declines the model's call of `entry` at launch
    (FL_ERROR_NOT_SUPPORTED, harness.Declined); None when it takes the call."""
    stream, ptr = device.new_stream(), device.malloc(NBYTES)
    try:
        device.memset(stream, ptr, 0, 0, NBYTES)
        _launch_on_buffer(device, stream, entry, ptr, 1.0)
        return None
    except Declined as exc:
        return exc.message or "(no message)"
    finally:
        try:
            device.destroy_stream(stream)   # synchronizes: a kernel failing on the stream fails here
        finally:
            device.free(ptr)


def _kernel_for_streams(device: Device) -> tuple[KernelEntry | None, list[str]]:
    """The plugin's own in-place float32 scalar kernel that takes the model's calls, if it
    declares one, and the messages of the candidates that declined them."""
    float32 = 1 << abi.DTYPE_TO_FL[torch.float32]
    declined = []
    for op in KERNEL_OPS:
        for entry in kernel_entries(device.plugin):
            if entry.op != op or not entry.dtypes & float32 or entry.variant_name != "precise":
                continue
            message = _declines(device, entry)
            if message is None:
                return entry, declined
            declined.append(f"{op}: {message}")
    return None, declined


@pytest.mark.parametrize("with_kernels", [True, False], ids=["with-kernels", "copies-only"])
def test_streams_and_events_follow_the_model(conformance, device, with_kernels):
    kernel, declined = _kernel_for_streams(device) if with_kernels else (None, [])
    if with_kernels and kernel is None:
        statuses.not_supported(
            f"the plugin declined the model's float32 call with FL_ERROR_NOT_SUPPORTED ({'; '.join(declined)})"
            if declined else f"the plugin declares none of {', '.join(KERNEL_OPS)} for float32")
    machine = type("StreamModelRun", (StreamModel,), {"device": device, "kernel": kernel})
    run_state_machine_as_test(machine, settings=conformance.property_settings(
        max_examples=conformance.profile.stateful_examples, stateful_step_count=conformance.profile.stateful_steps))


# ---- deterministic ordering probes (conformance.stream_probes) ----------------------

@pytest.fixture
def probe(device):
    """Two streams, scratch memory for busy work measured on stream A, a probe buffer."""
    a, b = device.new_stream(), device.new_stream()
    scratch, target = device.malloc(2 * CHUNK), device.malloc(PROBE_BYTES)
    try:
        yield measure_busy(device, a, scratch), a, b, target
    finally:
        for stream in (a, b):
            device.destroy_stream(stream)
        device.free(scratch)
        device.free(target)


def test_stream_wait_event_orders_work_behind_busy_stream(device, probe):
    busy, a, b, target = probe
    wait_event_orders_streams(device, busy, a, b, target)


def test_one_stream_runs_work_in_fifo_order(device, probe):
    busy, a, _, target = probe
    one_stream_is_fifo(device, busy, a, target)


def test_event_elapsed_time_matches_the_work(device, probe):
    busy, a, _, _ = probe
    elapsed_time_is_plausible(device, busy, a)


@pytest.mark.parametrize("kind", KINDS)
def test_every_enqueued_kind_waits_for_busy_work(device, probe, kind):
    """h2d, d2h, d2d, memset, a kernel launch, an event record and a wait, each queued behind
    busy work whose last copy writes the same buffer (stream_probes.kind_is_ordered)."""
    busy, a, b, target = probe
    fill = None
    if kind == "kernel":
        entry, declined = _kernel_for_streams(device)
        if entry is None:
            statuses.not_supported("the plugin has no float32 add_.Scalar / fill_.Scalar kernel that takes "
                                   f"a contiguous buffer ({'; '.join(declined) or 'none declared'})")
        fill = _probe_fill(device, entry)
    source = device.malloc(2 * PROBE_BYTES)
    try:
        kind_is_ordered(device, busy, a, b, Buffers(target, source), kind, fill)
    finally:
        device.free(source)


def _probe_fill(device: Device, entry: KernelEntry):
    """fill(stream, ptr): enqueue `entry` on the probe buffer; returns the bytes it must leave
    (fill_ writes 2.0; add_ adds 2.0 to what the busy stream's copy left there)."""
    floats = PROBE_BYTES // 4

    def fill(stream, ptr: int) -> bytes:
        _launch_on_buffer(device, stream, entry, ptr, 2.0, floats)
        if entry.op == "add_.Scalar":
            before = torch.frombuffer(bytearray(bytes([BEHIND]) * PROBE_BYTES), dtype=torch.float32)
            return storage_bytes(before + 2.0)
        return storage_bytes(torch.full((floats,), 2.0, dtype=torch.float32))
    return fill


def test_event_query_is_not_ready_behind_busy_work(device, probe):
    busy, a, b, target = probe
    try:
        query_is_not_ready_behind_busy_work(device, busy, a, b, target)
    except WorkRunsAtEnqueue as exc:
        statuses.not_supported(str(exc))


def test_rerecorded_event_moves_what_waits_wait_for(device, probe):
    busy, a, b, target = probe
    rerecorded_event_moves(device, busy, a, b, target)


def test_a_completed_record_completes_its_stream(device, probe):
    _, a, b, target = probe
    completed_record_completes_its_stream(device, a, b, target)
