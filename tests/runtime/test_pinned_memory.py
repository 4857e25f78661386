"""Pinned host memory for fl on the native bridge (docs/users/native-bridge.md): pin_memory(),
pin_memory=True factories, non_blocking copies both ways, DataLoader(pin_memory=True) with
workers.  Every value is compared with the CPU's.

A copy from the host returns before the device has read the source (ops/owned/copies.py): the
runtime stages a small source in a buffer of its own and waits for a large one, so changing a
pinned source right after `non_blocking=True` must never change what arrived.  The tests queue
work on the stream first, so a copy that read the source late would read the changed bytes.
The Python route (no pinned allocator, an ordinary copy): tests/runtime/test_ops.py.
"""
from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from fl_runtime.ops.owned.copies import STAGE_BYTES

# Pinned host memory needs the native bridge: on the Python route pin_memory() is an ordinary CPU
# copy (one warning), is_pinned() False, and pin_memory=True factories raise PyTorch's
# NotImplementedError (docs/users/limits.md, docs/users/native-bridge.md); the last test checks it.
# The non_blocking uploads below hold on both routes.
_BRIDGE = "__import__('fl_runtime.bridge', fromlist=['x']).status().active"
_needs_the_bridge = pytest.mark.skipif(
    f"not {_BRIDGE}", reason="the Python route: no pinned host memory, pin_memory() is an ordinary copy "
                             "(docs/users/limits.md)")

# Element counts of float32 sources: staged by the runtime, and large enough to be waited for.
SIZES = [STAGE_BYTES // 4 // 2, STAGE_BYTES // 4 * 4]


def _keep_busy(device: str) -> torch.Tensor:
    """Queue ~20 ms of kernels on the device's current stream (a copy queued now waits for them)."""
    a = torch.randn(256, 256, device=device)
    for _ in range(6):
        a = a @ a / 256
    return a


@_needs_the_bridge
def test_pin_memory_pins_a_copy_with_the_same_values(fl):
    source = torch.randn(1000)
    pinned = source.pin_memory()
    assert pinned.is_pinned() and not source.is_pinned()
    assert pinned.data_ptr() != source.data_ptr() and torch.equal(pinned, source)
    assert pinned.pin_memory() is pinned                  # already pinned: the same tensor


@_needs_the_bridge
def test_pin_memory_factories_give_pinned_host_tensors(fl):
    for tensor in (torch.empty(100, pin_memory=True), torch.zeros(3, 5, pin_memory=True),
                   torch.empty_like(torch.ones(7), pin_memory=True)):
        assert tensor.is_pinned() and tensor.device.type == "cpu"
    ones = torch.ones(3, 5, pin_memory=True)
    assert ones.is_pinned() and torch.equal(ones, torch.ones(3, 5))
    assert not torch.empty(10).is_pinned()


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("device", ["fl:0", "fl:1"])
def test_non_blocking_upload_from_pinned_memory_is_exact_and_safe_to_reuse(fl, n, device):
    source = torch.randn(n).pin_memory()
    expected = source.clone()
    _keep_busy(device)
    arrived = source.to(device, non_blocking=True)
    source.fill_(-1.0)                                    # the caller reuses its buffer at once
    into = torch.empty(n, device=device)
    _keep_busy(device)
    into.copy_(expected.pin_memory(), non_blocking=True)
    assert torch.equal(arrived.cpu(), expected) and torch.equal(into.cpu(), expected)


@_needs_the_bridge
@pytest.mark.parametrize("n", SIZES)
def test_non_blocking_download_into_pinned_memory_is_exact(fl, n):
    on_device = torch.randn(n, device="fl:1")
    _keep_busy("fl:1")
    on_device.mul_(3)                                     # queued behind the busy work
    expected = on_device.cpu()
    into = torch.empty(n, pin_memory=True)
    into.copy_(on_device, non_blocking=True)
    moved = on_device.to("cpu", non_blocking=True)
    torch.fl.synchronize(1)
    assert torch.equal(into, expected) and torch.equal(moved, expected)


@_needs_the_bridge
def test_dataloader_pins_batches_from_worker_processes(fl):
    data = torch.arange(64 * 6, dtype=torch.float32).reshape(64, 6)
    labels = torch.arange(64)
    loader = DataLoader(TensorDataset(data, labels), batch_size=8, num_workers=2, pin_memory=True)
    seen = []
    for batch, label in loader:
        assert batch.is_pinned() and label.is_pinned()
        on_device = batch.to("fl:1", non_blocking=True)
        seen.append((on_device * 2).cpu())
        assert torch.equal(label.to("fl:1", non_blocking=True).cpu(), label)
    assert torch.equal(torch.cat(seen), data * 2)


@_needs_the_bridge
def test_pinned_blocks_come_from_the_plugins_host_memory_extension(python):
    """The reference vendor offers ABI 1.2's host-memory extension: pinned blocks are its
    page-locked ones (fl_host_memory.h), freed back to it by empty_host_cache()."""
    result = python("""
        import json
        from fl_runtime.plugins import extensions
        calls = {"alloc": 0, "free": 0}
        alloc, free = extensions.HostMemory.alloc, extensions.HostMemory.free
        def counted_alloc(self, device, size):
            calls["alloc"] += 1
            return alloc(self, device, size)
        def counted_free(self, address):
            calls["free"] += 1
            return free(self, address)
        extensions.HostMemory.alloc, extensions.HostMemory.free = counted_alloc, counted_free
        import torch, torch_fl
        x = torch.arange(4096.0)
        pinned = x.pin_memory()
        ok = pinned.is_pinned() and torch.equal(pinned, x) and torch.equal(pinned.to("fl:1").cpu(), x)
        del pinned
        torch.accelerator.empty_host_cache()
        print(json.dumps({"ok": bool(ok), **calls}))
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert result.returncode == 0, result.stderr
    got = __import__("json").loads(result.stdout.splitlines()[-1])
    assert got == {"ok": True, "alloc": 1, "free": 1}


@pytest.mark.skipif(_BRIDGE, reason="the Python route's fallback; the bridge's pinned memory: the tests above")
def test_pinning_is_an_ordinary_copy_with_a_warning_on_the_python_route(fl, monkeypatch):
    from fl_runtime.ops.owned import copies
    monkeypatch.setattr(copies, "_pin_warned", False)      # one warning per process: see it here
    source = torch.randn(1000)
    with pytest.warns(UserWarning, match="pinned host memory needs the native bridge"):
        copy = source.pin_memory()
    assert not copy.is_pinned() and copy.data_ptr() != source.data_ptr() and torch.equal(copy, source)
    with pytest.raises(NotImplementedError, match="getPinnedMemoryAllocator"):
        torch.empty(10, pin_memory=True)
    on_device = torch.arange(300.0, device="fl:1").mul_(3)
    assert torch.equal(on_device.to("cpu", non_blocking=True), torch.arange(300.0) * 3)   # final at once
    data = torch.arange(8 * 6, dtype=torch.float32).reshape(8, 6)
    for batch, in DataLoader(TensorDataset(data), batch_size=4, pin_memory=True):
        assert not batch.is_pinned()
        assert torch.equal(batch.to("fl:1", non_blocking=True).cpu(), batch)
