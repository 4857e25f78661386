"""The caching allocator under threads, several devices and several streams, on whichever
route this process runs (the bridge's C++ pool, or allocator.py with TORCH_FL_BRIDGE=0):
docs/users/devices.md "Memory"."""
import threading

import pytest
import torch

from fl_runtime import bridge


def _run(threads):
    errors = []

    def guarded(work):
        def run():
            try:
                work()
            except BaseException as exc:     # noqa: BLE001 - reported by the main thread
                errors.append(exc)
        return run
    started = [threading.Thread(target=guarded(work)) for work in threads]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join(timeout=240)
    assert not any(thread.is_alive() for thread in started), "a thread hung"
    if errors:
        raise errors[0]


def test_two_threads_on_two_devices_allocate_and_free_concurrently(fl):
    """Each thread makes its own device current and allocates, computes and frees there (and
    on the other device); every value is checked and, at the end, every byte is accounted."""
    for index in (0, 1):
        fl.runtime().allocators[index].settle()
    before = [torch.fl.memory_allocated(i) for i in (0, 1)]
    wrong: list[str] = []

    def work(device: int):
        def run():
            torch.fl.set_device(device)
            other = 1 - device
            for step in range(150):
                n = 64 + 97 * (step % 7)
                x = torch.full((n,), float(step), device=f"fl:{device}")
                y = x * 2 + 1                                   # outputs allocated on this device
                z = torch.full((n,), float(device), device=f"fl:{other}")    # and on the other one
                storage = torch.UntypedStorage(4 * n, device=f"fl:{device}")  # PyTorch's C++ allocation
                if storage.device != torch.device("fl", device):
                    wrong.append(f"storage on {storage.device}")
                got = y.cpu()
                if not torch.equal(got, torch.full((n,), 2.0 * step + 1)):
                    wrong.append(f"fl:{device} step {step}: {got[:4].tolist()}")
                if not torch.equal(z.cpu(), torch.full((n,), float(device))):
                    wrong.append(f"fl:{other} step {step}")
                del x, y, z, storage
            torch.fl.synchronize()
        return run
    _run([work(0), work(1)])
    assert wrong == []
    for index in (0, 1):
        fl.runtime().allocators[index].settle()
    assert [torch.fl.memory_allocated(i) for i in (0, 1)] == before


def test_a_block_used_by_another_stream_is_reused_only_once_that_stream_is_done(fl):
    """Freed on its own stream while a second stream may still read it (record_stream): the
    block is not handed out again until an event on the second stream has completed."""
    allocator = fl.runtime().allocators[0]
    main = fl.runtime().streams.default[0]
    side = torch.fl.Stream(0)
    big = torch.randn(700, 700, device="fl:0")
    size = 3 << 20
    for _ in range(4):
        block = allocator.allocate(size, main)
        side.wait_stream(torch.fl.current_stream())
        with torch.fl.stream(side):
            for _ in range(4):
                big = big @ big / 700          # keeps the side stream busy
        allocator.record_stream(block.ptr, side)
        allocator.release(block)
        again = allocator.allocate(size, main)
        side_busy = not side.query()           # after the allocation: busy then means busy before
        if side_busy:
            assert again.ptr != block.ptr, "a block still used by another stream was handed out"
        allocator.release(again)
        side.synchronize()
        allocator.settle()
        reused = allocator.allocate(size, main)     # its event has completed: back in the pool
        assert reused.ptr in (block.ptr, again.ptr)
        allocator.release(reused)
    torch.fl.synchronize()


def test_blocks_of_one_stream_are_not_reused_by_another(fl):
    allocator = fl.runtime().allocators[0]
    main, side = fl.runtime().streams.default[0], torch.fl.Stream(0)
    block = allocator.allocate(1 << 16, side)
    allocator.release(block)
    allocator.settle()
    other = allocator.allocate(1 << 16, main)
    assert other.ptr != block.ptr              # a pool per (stream, size)
    same = allocator.allocate(1 << 16, side)
    assert same.ptr == block.ptr
    allocator.release(other)
    allocator.release(same)


@pytest.mark.skipif(not bridge.status().active, reason="the bridge's c10 allocator (copy_data) runs only with it")
def test_copy_data_between_devices_waits_for_the_writes_to_its_source(fl):
    """c10::Allocator::copy_data from fl:0 to fl:1 while fl:0's stream is still writing the
    source (a queued matmul): the copy is ordered after that write, as copy_ is, never a read
    of the old bytes (before, 19 of 20 such copies read them)."""
    module = fl.runtime().allocators[0].bridge
    for _ in range(5):
        a = torch.randn(400, 400, device="fl:0")
        source = a @ a                                  # still being written on fl:0's stream
        on_one = torch.zeros(400, 400, device="fl:1")
        module.copy_data(on_one.data_ptr(), source.data_ptr(), 400 * 400 * 4)
        later = on_one + 1                              # fl:1's later work sees the copy
        assert torch.equal(on_one.cpu(), source.cpu()) and torch.equal(later.cpu(), source.cpu() + 1)


@pytest.mark.skipif(not bridge.status().active, reason="the bridge's c10 allocator (copy_data) runs only with it")
def test_copies_and_frees_go_to_the_device_the_memory_belongs_to(fl):
    """A thread whose current device is fl:1 copies and frees fl:0 memory through PyTorch's
    C++ allocator interface: the copy and the free use fl:0, not the current device."""
    module = fl.runtime().allocators[0].bridge
    source = torch.arange(256, dtype=torch.float32, device="fl:0")
    target = torch.zeros(256, device="fl:0")
    on_one = torch.zeros(256, device="fl:1")
    allocator = fl.runtime().allocators[0]
    allocator.settle()
    before = [torch.fl.memory_allocated(i) for i in (0, 1)]
    result = {}

    def work():
        torch.fl.set_device(1)
        module.copy_data(target.data_ptr(), source.data_ptr(), 256 * 4)          # fl:0 -> fl:0
        module.copy_data(on_one.data_ptr(), source.data_ptr(), 256 * 4)          # fl:0 -> fl:1
        storage = torch.UntypedStorage(1 << 20, device="fl:0")
        result["allocated"] = torch.fl.memory_allocated(0) - before[0]
        del storage                            # freed by a thread whose current device is fl:1
        torch.fl.synchronize()
    _run([work])
    assert torch.equal(target.cpu(), source.cpu()) and torch.equal(on_one.cpu(), source.cpu())
    assert result["allocated"] == 1 << 20
    allocator.settle()
    assert [torch.fl.memory_allocated(i) for i in (0, 1)] == before
