"""PyTorch's OpenReg device tests, ported to fl on the native bridge.

Source: pytorch/pytorch test/cpp_extensions/open_registration_extension/torch_openreg/tests/
test_device.py (OpenReg is PyTorch's own example of an out-of-tree PrivateUse1 backend).  Each
test keeps the original's name and intent; the device is "fl" and the device count ours.

Changed, with the reason:
- test_device_capability: OpenReg claims every dtype; an fl device stores the dtypes its plugin
  declares, so the capability must name exactly those.
- test_device_poison_fork: the child's error is Torch-FL's FLBadForkError (same advice: spawn).
- test_invalid_device_index: the index past the last device is the device count, not 2, and the
  message is the runtime's.
"""
from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from fl_runtime.errors import DeviceNotFoundError, FLBadForkError


def _multiprocessing_worker(device_idx, result_queue):
    try:
        torch.accelerator.set_device_index(device_idx)
        x = torch.randn(10, 10, device="fl")
        y = torch.randn(10, 10, device="fl")
        result_queue.put(("success", device_idx, torch.sum(torch.matmul(x, y)).item()))
    except Exception as exc:            # reported to the parent, which asserts on it
        result_queue.put(("error", device_idx, repr(exc)))


@pytest.fixture
def count(fl):
    """The device count; each test starts and ends on fl:0."""
    torch.accelerator.set_device_index(0)
    yield torch.fl.device_count()
    torch.accelerator.set_device_index(0)


def test_device_count(count):
    assert torch.accelerator.device_count() == count >= 2


def test_device_switch(count):
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == 1
    torch.accelerator.set_device_index(0)
    assert torch.accelerator.current_device_index() == 0


def test_device_context(count):
    device = torch.accelerator.current_device_index()
    with torch.accelerator.device_index(None):
        assert torch.accelerator.current_device_index() == device
    assert torch.accelerator.current_device_index() == device
    with torch.accelerator.device_index(1):
        assert torch.accelerator.current_device_index() == 1
    assert torch.accelerator.current_device_index() == device


def test_invalid_device_index(count):
    """A RuntimeError, as OpenReg and CUDA raise; the runtime's own DeviceNotFoundError (also an
    IndexError), as torch.fl.set_device raises on both routes."""
    with pytest.raises(RuntimeError, match=f"fl:{count} does not exist") as raised:
        torch.accelerator.set_device_index(count)
    assert isinstance(raised.value, DeviceNotFoundError)
    assert torch.accelerator.current_device_index() == 0


def test_device_capability(count):
    import torch_fl
    for index in range(count):
        supported = torch.accelerator.get_device_capability(f"fl:{index}")["supported_dtypes"]
        declared = {getattr(torch, name) for name in torch_fl.runtime().device(index).supported_dtypes}
        assert supported == declared and {torch.float32, torch.int64, torch.bool} <= supported


def test_tensor_device(count):
    x = torch.randn(2, 3, device="fl")
    assert x.device.type == "fl"
    x = torch.randn(2, 3, device="fl:1")
    assert x.device.type == "fl" and x.device.index == 1


def test_device_guard(count):
    original = torch.accelerator.current_device_index()
    with torch.accelerator.device_index(1):
        assert torch.accelerator.current_device_index() == 1
    assert torch.accelerator.current_device_index() == original


def test_device_switch_persistence(count):
    torch.accelerator.set_device_index(1)
    assert torch.randn(2, 3, device="fl").device.index == 1
    assert torch.randn(3, 3, device="fl").device.index == 1


def test_device_count_consistency(count):
    assert torch.accelerator.device_count() == count
    for index in range(count):
        torch.accelerator.set_device_index(index)
        assert torch.accelerator.current_device_index() == index


def _init_in_child(queue):
    try:
        torch.fl.init()
    except Exception as exc:
        queue.put(repr(exc))


def test_device_poison_fork(count):
    torch.fl.init()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_init_in_child, args=(queue,))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    error = queue.get(timeout=10)
    assert FLBadForkError.__name__ in error and "'spawn' method" in error


def test_device_properties(count):
    device = torch.device("fl:0")
    assert device.type == "fl" and device.index == 0 and "fl" in str(device) and "0" in str(device)
    capability = torch.accelerator.get_device_capability("fl:0")
    assert isinstance(capability, dict) and isinstance(capability["supported_dtypes"], set)
    assert capability["supported_dtypes"]
    assert capability["supported_dtypes"] == torch.accelerator.get_device_capability("fl:1")["supported_dtypes"]
    free, total = torch.accelerator.get_memory_info()
    assert 0 <= free <= total and total > 0


def test_current_device_after_operations(count):
    original = torch.accelerator.current_device_index()
    x = torch.randn(2, 3, device="fl")
    z = x + torch.randn(2, 3, device="fl")
    result = torch.sum(z)
    assert x.device.index == z.device.index == result.device.index == original
    assert torch.accelerator.current_device_index() == original
    torch.accelerator.set_device_index(1)
    a = torch.randn(5, 5, device="fl")
    product = torch.matmul(a, a)
    assert a.device.index == product.device.index == 1
    torch.testing.assert_close(product.cpu(), a.cpu() @ a.cpu())
    assert torch.accelerator.current_device_index() == 1


def test_device_context_restoration(count):
    original = torch.accelerator.current_device_index()
    with pytest.raises(ValueError):
        with torch.accelerator.device_index(1):
            assert torch.randn(2, 2, device="fl").device.index == 1
            raise ValueError("test exception")
    assert torch.accelerator.current_device_index() == original
    with pytest.raises(RuntimeError):
        with torch.accelerator.device_index(1):
            with torch.accelerator.device_index(0):
                assert torch.accelerator.current_device_index() == 0
                raise RuntimeError("nested exception")
    assert torch.accelerator.current_device_index() == original


def test_concurrent_device_operations(count):
    """Four threads, each on its own device, 50 rounds: the current device is per thread."""
    threads, rounds = 4, 50
    errors: list[str] = []
    barrier = threading.Barrier(threads)

    def worker(thread_id: int) -> None:
        barrier.wait()
        index = thread_id % 2
        for _ in range(rounds):
            torch.accelerator.set_device_index(index)
            x, y = torch.randn(10, 10, device="fl"), torch.randn(10, 10, device="fl")
            result = torch.sum(torch.matmul(x, y))
            seen = (torch.accelerator.current_device_index(), x.device.index, result.device.index)
            if seen != (index, index, index):
                errors.append(f"thread {thread_id}: expected fl:{index} everywhere, got {seen}")

    with ThreadPoolExecutor(max_workers=threads) as pool:
        for future in [pool.submit(worker, i) for i in range(threads)]:
            future.result()
    assert not errors, errors
    assert torch.accelerator.current_device_index() == 0      # this thread's was never touched


def test_device_initialization_state(count):
    torch.fl.init()
    assert torch.fl.is_initialized()
    assert torch.accelerator.device_count() > 0


def test_device_multiprocessing_spawn(count):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_multiprocessing_worker, args=(1, queue))
    child.start()
    status, device_idx, result = queue.get(timeout=240)
    child.join(timeout=60)
    assert (status, device_idx) == ("success", 1), result
    assert isinstance(result, float)


def test_device_state_after_errors(count):
    original = torch.accelerator.current_device_index()
    x, y = torch.randn(5, 5, device="fl"), torch.randn(3, 3, device="fl")
    with pytest.raises(RuntimeError):
        torch.matmul(x, y)
    assert torch.accelerator.current_device_index() == original
    z, w = torch.randn(5, 5, device="fl"), torch.randn(5, 5, device="fl")
    assert z.device.index == original
    torch.testing.assert_close(torch.matmul(z, w).cpu(), z.cpu() @ w.cpu())
