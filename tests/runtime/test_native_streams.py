"""Streams in the native bridge (bridge/csrc/stream_registry.h, stream_order.h): calls on any
stream the runtime made are served in C++, ordered after other streams' writes as the Python
route orders them (runtime.order_after_writers), and a dropped stream is destroyed by the bridge
once no call holds it, its blocks going back to the default stream's pool.  Values are compared
with the CPU; "served in C++" is read from the C++ kernels' count of calls sent to Python."""
from __future__ import annotations

import gc
import threading

import pytest
import torch

from fl_runtime.devices.storage import storage_base

pytestmark = pytest.mark.skipif("not __import__('fl_runtime.bridge', fromlist=['x']).status().active",
                                reason="the Python route: no C++ kernels (test_streams.py covers its streams)")


def _native(fl):
    return fl.runtime().launcher.native


def _python_calls(fl) -> int:
    return _native(fl).eager_stats()["python_calls"]


def _block(fl, t):
    return fl.runtime().allocators[t.device.index].live[storage_base(t)]


def test_steady_calls_on_a_second_stream_run_there_in_cpp(fl):
    x = torch.arange(64, dtype=torch.float32, device="fl:0")
    side = torch.fl.Stream(0)
    with torch.fl.stream(side):
        for _ in range(3):
            y = x * 2 + 1
        before = _python_calls(fl)
        y = x * 2 + 1
        assert _python_calls(fl) == before, "served in C++"
    assert _block(fl, y).stream is side and _block(fl, y).writer is side
    side.synchronize()
    assert torch.equal(y.cpu(), torch.arange(64.0) * 2 + 1)


def test_a_cpp_served_kernel_waits_for_another_streams_write(fl):
    a = torch.randn(500, 500, device="fl:0")
    expected = a.cpu() @ a.cpu() + 1
    for _ in range(2):
        z = a @ a
        w = z + 1
    side = torch.fl.Stream(0)
    for _ in range(3):
        with torch.fl.stream(side):
            z = a @ a                 # queued behind nothing else, still running below
        before = _python_calls(fl)
        w = z + 1                     # the default stream reads it: waits for `side`
        assert _python_calls(fl) == before, "served in C++"
        torch.testing.assert_close(w.cpu(), expected, rtol=1e-4, atol=1e-3)


def test_a_block_another_stream_read_waits_for_it_before_reuse(fl):
    """A side stream sums `a` behind a slow matmul; the main stream frees `a` and fills a
    same-size tensor at once.  The block must not be handed out before the side stream read it."""
    side = torch.fl.Stream(0)
    big = torch.randn(900, 900, device="fl:0")
    warm = torch.full((1000, 1000), 1.0, device="fl:0")
    with torch.fl.stream(side):
        for _ in range(2):
            warm.sum(), big @ big
    for _ in range(3):
        a = torch.full((1000, 1000), 1.0, device="fl:0")
        side.wait_stream(torch.fl.current_stream())
        with torch.fl.stream(side):
            _ = big @ big @ big
            before = _python_calls(fl)
            total = a.sum()
            assert _python_calls(fl) == before, "served in C++"
        del a
        b = torch.full((1000, 1000), 7.0, device="fl:0")
        side.synchronize()
        assert total.cpu().item() == 1_000_000.0
        assert b[0, 0].item() == 7.0


def test_a_dropped_stream_is_destroyed_and_its_blocks_return_to_the_default_pool(fl):
    native = _native(fl)
    x = torch.ones(4096, device="fl:0")
    x + 1
    known = _known_streams(fl)
    side = torch.fl.Stream(0)
    assert native.known_streams() == known + 1
    with torch.fl.stream(side):
        y = x + 1
        y = x + 1                     # its block was allocated for `side`
    side.synchronize()
    del y
    before = native.figures(0)
    del side
    assert _known_streams(fl) == known, "the bridge destroyed it"
    z = x + 1                         # same size, default stream: the side stream's block
    after = native.figures(0)
    assert after["cache_hits"] > before["cache_hits"] and after["reserved"] == before["reserved"]
    assert torch.equal(z.cpu(), torch.full((4096,), 2.0))


def _known_streams(fl) -> int:
    """Streams the bridge still holds once freed storages and dropped objects are collected."""
    for allocator in fl.runtime().allocators:
        allocator.settle()            # storages freed through the compiled deleter (storage.py)
    gc.collect()
    return _native(fl).known_streams()


def _ping_pong(device: str, rounds: int, result: dict) -> None:
    """Alternate writes of one tensor between a stream of this thread and the default one."""
    torch.fl.set_device(torch.device(device).index)
    side = torch.fl.Stream(device)
    a = torch.randn(200, 200, device=device)
    t = torch.zeros(200, 200, device=device)
    host_a, host_t = a.cpu(), torch.zeros(200, 200)
    for i in range(rounds):
        if i % 2:
            with torch.fl.stream(side):
                t = t + a @ a
        else:
            t = t * 0.5 + 1
        host_t = host_t + host_a @ host_a if i % 2 else host_t * 0.5 + 1
    result[device] = (t.cpu(), host_t)


def test_threads_on_their_own_streams_and_devices_keep_every_value(fl):
    before = _python_calls(fl)
    results: dict = {}
    threads = [threading.Thread(target=_ping_pong, args=(f"fl:{i}", 40, results)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for device in ("fl:0", "fl:1"):
        got, expected = results[device]
        torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-2)
    assert _python_calls(fl) - before < 40, "most calls served in C++"


def test_streams_made_and_dropped_by_many_threads_leave_none_behind(fl):
    known = _known_streams(fl)
    errors: list = []

    def churn(index: int) -> None:
        try:
            for _ in range(20):
                side = torch.fl.Stream(index % 2)
                x = torch.ones(256, device=f"fl:{index % 2}")
                with torch.fl.stream(side):
                    y = (x + 1) * 3
                assert torch.equal(y.cpu(), torch.full((256,), 6.0))
                del side, y
        except BaseException as exc:     # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=churn, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert _known_streams(fl) == known


def test_a_stream_waits_once_per_write_of_a_block(fl):
    """Reading a block another stream wrote waits for that stream once; later reads of the same
    write need no new wait, and the next write needs one again (stream_order.h)."""
    native = _native(fl)
    waits = lambda: native.eager_stats()["stream_waits"]     # noqa: E731
    a = torch.randn(400, 400, device="fl:0")
    t = torch.empty(400, 400, device="fl:0")
    side = torch.fl.Stream(0)
    for _ in range(2):
        torch.mm(a, a, out=t)
        with torch.fl.stream(side):
            t * 2, t + 1
    expected = a.cpu() @ a.cpu()
    for scale in (1.0, 2.0, 3.0):
        torch.mm(a * scale, a, out=t)          # the default stream writes t (slow)
        before, calls = waits(), _python_calls(fl)
        with torch.fl.stream(side):
            first = t * 2
            for _ in range(20):
                again = t + 1
        assert _python_calls(fl) == calls, "served in C++"
        assert waits() == before + 1, "one wait per write"
        side.synchronize()
        torch.testing.assert_close(first.cpu(), 2 * scale * expected, rtol=1e-4, atol=1e-2)
        torch.testing.assert_close(again.cpu(), scale * expected + 1, rtol=1e-4, atol=1e-2)


def test_a_read_racing_another_threads_write_is_stale_for_that_call_only(fl):
    """A write is marked before its work is enqueued (stream_order.h "Once per write").  A
    reader on another thread and stream that comes in between waits for an event that does not
    cover the write; it must not stay "caught up", or its later reads skip the wait and read
    the block before the write lands (a stale value, no error).  The plugin's memcpy_h2d_async
    holds the writer's upload between its mark and its enqueue until the racy read is done, and
    queues it behind slow matmuls on a third stream, so a later read that skips the wait reads
    the old values."""
    from fl_runtime.abi import ffi
    native = _native(fl)
    waits = lambda: native.eager_stats()["stream_waits"]     # noqa: E731
    a = torch.randn(1000, 1000, device="fl:0")
    busy = torch.empty(1000, 1000, device="fl:0")
    t = torch.zeros(64, device="fl:0")
    writes, reads, slow = torch.fl.Stream(0), torch.fl.Stream(0), torch.fl.Stream(0)
    for _ in range(3):                    # every call below served in C++ from here on
        with torch.fl.stream(writes):
            t.copy_(torch.zeros(64))
        with torch.fl.stream(reads):
            t + 0
    torch.fl.synchronize()
    table = ffi.cast("fl_api *", fl.runtime().device(0).plugin.api)
    original = table.memcpy_h2d_async
    gate = ffi.new("fl_event *")
    assert table.event_create(0, gate) == 0
    marked, read = threading.Event(), threading.Event()
    writer_thread = []

    def held_upload(stream, *args):
        if threading.get_ident() in writer_thread:
            marked.set()
            read.wait(30)                  # the reader's call runs now, between mark and enqueue
            assert table.stream_wait_event(stream, gate[0]) == 0
        return original(stream, *args)

    def write():
        writer_thread.append(threading.get_ident())
        with torch.fl.stream(writes):
            t.copy_(torch.full((64,), 7.0))

    with torch.fl.stream(slow):
        for _ in range(3):
            torch.mm(a, a, out=busy)       # ~40 ms each on the reference vendor
        assert table.event_record(gate[0], fl.runtime().streams.current(0).handle) == 0
    table.memcpy_h2d_async = callback = ffi.callback(ffi.typeof(original), held_upload)
    try:
        writer = threading.Thread(target=write)
        writer.start()
        assert marked.wait(30), "the writer reached its upload"
        with torch.fl.stream(reads):
            t + 0                          # the racy read: may see either value
        read.set()
        writer.join(30)
        before, calls = waits(), _python_calls(fl)
        with torch.fl.stream(reads):
            after = t + 0                  # after the threads met: must wait for the upload
        waited = waits() - before
        assert _python_calls(fl) == calls, "served in C++"
        torch.fl.synchronize()
    finally:
        table.memcpy_h2d_async = original
        table.event_destroy(gate[0])
    del callback
    assert after.cpu().eq(7).all(), f"the read after the write saw it: {after.cpu()[:4]}"
    assert waited == 1, "the racy read did not leave the reader caught up"
