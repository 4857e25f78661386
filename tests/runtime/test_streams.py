"""torch.fl streams (docs/users/devices.md) and Tensor.record_stream with the caching allocator (docs/users/devices.md).

Must show: a side-stream kernel reads a tensor freed on the main stream.
Torch-FL differs from CUDA here.  CUDA's allocator knows only the stream a
block was allocated on, so without record_stream the freed block is handed
out again at once and the side stream's kernel may read overwritten data.
Torch-FL's launcher records every stream one of its kernels touches a block
on, so the data stays intact without record_stream too (asserted below);
record_stream is honoured for code that expects it and for uses the runtime
cannot see, and its effect on the allocator is shown directly.
"""
import gc
import os

import pytest
import torch

from fl_runtime.devices.storage import storage_base


def _block(fl, t):
    return fl.runtime().allocators[t.device.index].live[storage_base(t)]


def test_streams_are_torch_streams_and_ops_run_on_the_current_one(fl):
    side = torch.fl.Stream()
    assert isinstance(side, torch.Stream) and side.device_type == torch.fl.default_stream().device_type
    assert side != torch.fl.default_stream() and side.stream_id != 0
    assert side.device == torch.device("fl", 0) == torch.fl.Event().device   # torch.device, as on cuda
    x = torch.ones(64, device="fl:0")
    with torch.fl.stream(side):
        assert torch.fl.current_stream() == side
        y = x + 1                             # allocated and launched on `side`
    assert torch.fl.current_stream() == torch.fl.default_stream()
    assert _block(fl, y).stream is side and _block(fl, y).writer is side
    side.synchronize()
    assert side.query() and torch.equal(y.cpu(), torch.full((64,), 2.0))


def test_stream_context_is_per_device_and_none_is_a_no_op(fl):
    s1 = torch.fl.Stream(1)
    with torch.fl.stream(s1):
        assert torch.fl.current_stream(1) == s1
        assert torch.fl.current_stream(0) == torch.fl.default_stream(0)
    with torch.fl.stream(None):
        assert torch.fl.current_stream(1) == torch.fl.default_stream(1)


def _side_reads_then_main_frees(record: bool):
    """The side stream sums `a` (slow: behind a big matmul); meanwhile the main
    stream frees `a` and fills a same-size tensor.  Returns (sum, expected)."""
    side = torch.fl.Stream(0)
    a = torch.full((1000, 1000), 1.0, device="fl:0")
    big = torch.randn(900, 900, device="fl:0")
    side.wait_stream(torch.fl.current_stream())
    with torch.fl.stream(side):
        _ = big @ big @ big                   # keeps the side stream busy
        total = a.sum()
    if record:
        a.record_stream(side)
    del a
    b = torch.full((1000, 1000), 7.0, device="fl:0")   # would take a's block if it were free
    side.synchronize()
    return total.cpu().item(), b


def test_record_stream_keeps_a_freed_block_until_the_side_stream_is_done(fl):
    total, _ = _side_reads_then_main_frees(record=True)
    assert total == 1_000_000.0


def test_without_record_stream_the_runtime_still_keeps_the_data(fl):
    total, _ = _side_reads_then_main_frees(record=False)
    assert total == 1_000_000.0             # unlike CUDA: uses on other streams are tracked


def test_record_stream_marks_the_block_for_the_allocator(fl):
    side = torch.fl.Stream(0)
    a = torch.ones(4096, device="fl:0")
    block = _block(fl, a)
    a.record_stream(side)
    assert side in block.used_by
    a.record_stream(torch.fl.default_stream(0))      # its own stream: nothing to wait for
    assert block.used_by == {side}
    with pytest.raises(ValueError, match="record a stream of the tensor's own device"):
        a.record_stream(torch.fl.Stream(1))


def test_with_stream_makes_it_current(fl):
    side = torch.fl.Stream("fl:0")
    with side:
        assert torch.fl.current_stream(0) == side
        with torch.fl.default_stream(0):
            assert torch.fl.current_stream(0) == torch.fl.default_stream(0)
        assert torch.fl.current_stream(0) == side
    assert torch.fl.current_stream(0) == torch.fl.default_stream(0)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through Linux /proc")
def test_a_dropped_stream_is_destroyed(fl):
    streams = [torch.fl.Stream(0) for _ in range(4)]
    for s in streams:                       # the reference vendor runs a thread per stream
        with torch.fl.stream(s):
            torch.ones(8, device="fl:0").sum()
        s.synchronize()
    alive = _threads()
    del streams, s
    gc.collect()
    # Cached blocks keep the stream they were allocated on (their pool key) alive;
    # once the cache is emptied nothing does, and stream_destroy joins the threads.
    torch.fl.empty_cache()
    gc.collect()
    assert alive - _threads() >= 4
