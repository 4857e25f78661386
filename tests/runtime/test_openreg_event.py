"""PyTorch's OpenReg event tests, ported to fl on the native bridge: torch.Event on fl.

Source: pytorch/pytorch test/cpp_extensions/open_registration_extension/torch_openreg/tests/
test_event.py.  Each test keeps the original's name and intent; the device is "fl".  Where the
original only ran a call, the port also checks the values the streams computed against the CPU.
"""
from __future__ import annotations

import pytest
import torch


# On the Python route PyTorch's generic torch.Event on fl is inert (records nothing: event_id
# stays 0; synchronize and elapsed_time raise PyTorch's "Backend doesn't support ...") and
# torch.Stream is fl:0's default stream (docs/users/limits.md "PyTorch's generic streams, events
# and graphs"); test_torch_event_is_inert_on_the_python_route checks that.
_BRIDGE = "__import__('fl_runtime.bridge', fromlist=['x']).status().active"
_needs_the_bridge = pytest.mark.skipif(
    f"not {_BRIDGE}",
    reason="the Python route: torch.Event on fl is inert and torch.Stream is fl:0's default stream "
           "(docs/users/native-bridge.md, docs/users/limits.md)")


@pytest.fixture(autouse=True)
def on_fl0(fl):
    torch.accelerator.set_device_index(0)
    yield
    torch.accelerator.set_device_index(0)


@_needs_the_bridge
def test_event_create():
    for device in ("fl", "fl:1"):
        event = torch.Event(device=device)
        assert (event.device.type, event.device.index, event.event_id) == ("fl", None, 0)
    event = torch.Event()                       # the current accelerator's
    assert (event.device.type, event.device.index, event.event_id) == ("fl", None, 0)
    event = torch.Stream(device="fl:1").record_event()
    assert (event.device.type, event.device.index) == ("fl", 1) and event.event_id != 0


@_needs_the_bridge
def test_event_query():
    assert torch.Event().query()                # never recorded: nothing to wait for
    event = torch.Stream(device="fl:1").record_event()
    event.synchronize()
    assert event.query()


@_needs_the_bridge
def test_event_record():
    stream = torch.Stream(device="fl:1")
    first, second = stream.record_event(), stream.record_event()
    assert 0 != first.event_id != second.event_id != 0


@_needs_the_bridge
def test_event_elapsed_time():
    stream = torch.Stream(device="fl:1")
    start = torch.Event(device="fl:1", enable_timing=True)
    start.record(stream)
    end = torch.Event(device="fl:1", enable_timing=True)
    end.record(stream)
    stream.synchronize()
    assert start.query() and end.query()
    assert start.elapsed_time(end) > 0


def test_event_wait_stream():
    first, second = torch.Stream(device="fl"), torch.Stream(device="fl")
    x = torch.randn(200, 200, device="fl")
    with first:
        y = x @ x
    second.wait_event(first.record_event())
    with second:
        total = y.sum()
    torch.testing.assert_close(total.cpu(), (x.cpu() @ x.cpu()).sum(), rtol=1e-4, atol=1e-2)


@_needs_the_bridge
def test_event_synchronize():
    event = torch.Event(device="fl")
    assert event.query()
    event.record(torch.Stream(device="fl"))
    event.synchronize()
    assert event.query()


@_needs_the_bridge
def test_event_different_devices():
    event0, event1 = torch.Event(device="fl:0"), torch.Event(device="fl:1")
    event0.record(torch.Stream(device="fl:0"))
    event1.record(torch.Stream(device="fl:1"))
    assert (event0.device.index, event1.device.index) == (0, 1)


def test_event_timing_disabled():
    first = torch.Event(device="fl:1", enable_timing=False)
    second = torch.Event(device="fl:1", enable_timing=False)
    stream = torch.Stream(device="fl:1")
    first.record(stream)
    second.record(stream)
    stream.synchronize()
    with pytest.raises(ValueError, match="Both events must be created with argument 'enable_timing=True'"):
        first.elapsed_time(second)


def test_event_wait_event():
    first, second = torch.Stream(device="fl"), torch.Stream(device="fl")
    event = first.record_event()
    second.wait_event(event)
    second.synchronize()
    assert event.query()


def test_device_synchronization():
    torch.accelerator.set_device_index(1)
    x, y = torch.randn(100, 100, device="fl"), torch.randn(100, 100, device="fl")
    z = torch.matmul(x, y)
    torch.accelerator.synchronize()
    assert torch.accelerator.current_device_index() == 1
    result = torch.sum(z)
    assert (result.device.type, result.device.index) == ("fl", 1)
    torch.testing.assert_close(result.cpu(), (x.cpu() @ y.cpu()).sum(), rtol=1e-4, atol=1e-2)


@_needs_the_bridge
def test_blocking_vs_non_blocking_synchronization():
    stream = torch.Stream(device="fl:0")
    event = torch.Event(device="fl:0")
    assert event.query() and event.event_id == 0 and event.device.index is None
    event.record(stream)
    assert event.event_id != 0
    x, y = torch.randn(50, 50, device="fl:0"), torch.randn(50, 50, device="fl:0")
    torch.matmul(x, y)
    event.query()                                # may be False: it does not wait
    event.synchronize()
    assert event.query() and event.device.index == 0
    second = stream.record_event()
    assert second.event_id != 0
    for _ in range(4):
        second.query()
    second.synchronize()
    assert second.query()


@_needs_the_bridge
def test_interleaved_stream_operations():
    stream = torch.Stream(device="fl:0")
    x, y = torch.randn(50, 50, device="fl:0"), torch.randn(50, 50, device="fl:0")
    first = stream.record_event()
    z1 = torch.matmul(x, y)
    second = stream.record_event()
    assert 0 != first.event_id != second.event_id != 0
    torch.matmul(z1, x)
    stream.synchronize()
    assert first.query() and second.query()


@_needs_the_bridge
def test_multiple_streams_wait_same_event():
    streams = [torch.Stream(device="fl:0") for _ in range(3)]
    assert streams[0].stream_id != streams[1].stream_id != streams[2].stream_id
    x, y = torch.randn(30, 30, device="fl:0"), torch.randn(30, 30, device="fl:0")
    event = streams[0].record_event()
    assert event.event_id != 0
    streams[1].wait_event(event)
    streams[2].wait_event(event)
    with streams[1]:
        z2 = torch.matmul(x, y)
    with streams[2]:
        z3 = torch.matmul(x, y)
    torch.accelerator.synchronize()
    assert event.query()
    assert torch.equal(torch.sum(z2).cpu(), torch.sum(z3).cpu())
    torch.testing.assert_close(z2.cpu(), x.cpu() @ y.cpu())


def test_event_lifecycle():
    stream = torch.Stream(device="fl:0")
    event = torch.Event(device="fl:0")
    event.record(stream)
    stream.synchronize()
    assert event.query()
    event.record(stream)                         # reused after synchronising
    stream.synchronize()
    assert event.query()
    events = []
    for _ in range(2):
        events.append(torch.Event(device="fl:0"))
        events[-1].record(stream)
    stream.synchronize()
    assert all(e.query() for e in events)


@_needs_the_bridge
def test_generic_stream_event():
    stream = torch.Stream("fl")
    assert stream.device_index == torch.accelerator.current_device_index()
    start, end = torch.Event("fl", enable_timing=True), torch.Event("fl", enable_timing=True)
    a, b = torch.randn(1000, device="fl"), torch.randn(1000, device="fl")
    with torch.accelerator.device_index(stream.device_index):
        total = a + b
        start.record(stream)
        start.synchronize()
        end.record()                             # without a stream: the current one
        end.synchronize()
        assert start.elapsed_time(end) > 0
    torch.testing.assert_close(total.cpu(), a.cpu() + b.cpu())


def test_stream_compatibility():
    first, second = torch.Stream(device="fl:0"), torch.Stream(device="fl:0")
    original = torch.accelerator.current_stream()
    try:
        torch.accelerator.set_stream(first)
        assert torch.accelerator.current_stream().stream_id == first.stream_id
        torch.accelerator.set_stream(second)
        assert torch.accelerator.current_stream().stream_id == second.stream_id
    finally:
        torch.accelerator.set_stream(original)


@pytest.mark.skipif(_BRIDGE, reason="the Python route's behaviour; the bridge's events: the tests above")
def test_torch_event_is_inert_on_the_python_route():
    stream = torch.Stream(device="fl:1")
    assert (stream.device_index, stream.stream_id) == (0, 0)        # fl:0's default stream
    event = torch.Event(device="fl:1")
    event.record(stream)
    assert event.event_id == 0 and event.query()                    # nothing recorded
    with pytest.raises(RuntimeError, match="Backend doesn't support synchronizing events"):
        event.synchronize()
    start, end = torch.Event(device="fl", enable_timing=True), torch.Event(device="fl", enable_timing=True)
    start.record()
    end.record()
    with pytest.raises(RuntimeError, match="Backend doesn't support elapsedTime"):
        start.elapsed_time(end)
    native = torch.fl.Event(enable_timing=True)                     # torch.fl's events work
    native.record()
    native.synchronize()
    assert native.query()
