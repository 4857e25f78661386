"""Resizing fl storages on the native bridge (docs/users/native-bridge.md): what FSDP2 does to
free and refill a parameter's memory, `untyped_storage().resize_(0)` and back.

The kept prefix must be exact, views that share the storage must see the new memory, a storage
of fl:1 must stay on fl:1 whatever device is current, and the memory statistics must follow.
The Python route's clear error: tests/runtime/test_storage.py.
"""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def on_fl0(fl):
    torch.fl.set_device(0)
    yield
    torch.fl.set_device(0)


def test_resize_to_zero_and_back_keeps_the_prefix_and_the_storage(fl):
    values = torch.randn(256)
    t = values.to("fl:0")
    storage = t.untyped_storage()
    storage.resize_(0)
    assert storage.nbytes() == 0 and t.untyped_storage().nbytes() == 0
    storage.resize_(256 * 4)
    assert t.untyped_storage().data_ptr() == storage.data_ptr() != 0
    t.copy_(values)
    storage.resize_(100 * 4)                              # shrink: the first 100 stay
    assert storage.nbytes() == 400
    assert torch.equal(torch.empty(0, device="fl:0").set_(storage).cpu(), values[:100])
    storage.resize_(512 * 4)                              # grow: the first 100 stay
    assert torch.equal(torch.empty(0, device="fl:0").set_(storage)[:100].cpu(), values[:100])


def test_growing_a_storage_that_views_share(fl):
    base = torch.arange(64, dtype=torch.float32, device="fl:0")
    view = base[10:20]
    strided = base.view(8, 8).t()
    base.untyped_storage().resize_(128 * 4)
    assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert torch.equal(view.cpu(), torch.arange(10, 20, dtype=torch.float32))
    assert torch.equal(strided.cpu(), torch.arange(64, dtype=torch.float32).view(8, 8).t())
    base[12] = -5.0                                        # the views read the new memory
    assert view[2].item() == -5.0 and strided[4, 1].item() == -5.0


def test_growing_a_tensor_grows_its_storage_in_place(fl):
    """Tensor.resize_ past its storage: as on the CPU, earlier views keep sharing the memory."""
    x = torch.arange(4, dtype=torch.float32, device="fl:0")
    head = x[:2]
    x.resize_(100)
    x[0] = 7.0
    cpu = torch.arange(4, dtype=torch.float32)
    cpu_head = cpu[:2]
    cpu.resize_(100)
    cpu[0] = 7.0
    assert torch.equal(head.cpu(), cpu_head) and torch.equal(x[:4].cpu(), cpu[:4])
    assert x.untyped_storage().nbytes() == cpu.untyped_storage().nbytes()


def test_resizing_on_fl1_while_fl0_is_current(fl):
    values = torch.randn(300)
    t = values.to("fl:1")
    storage = t.untyped_storage()
    for nbytes in (0, 300 * 4, 600 * 4):
        storage.resize_(nbytes)
        assert storage.device == torch.device("fl:1") and t.device == torch.device("fl:1")
    t.copy_(values)
    storage.resize_(1200 * 4)
    assert torch.equal(t.cpu(), values)
    assert torch.fl.current_device() == 0


def test_memory_statistics_follow_the_resizes(fl):
    torch.fl.empty_cache()
    before = torch.fl.memory_allocated(1)
    t = torch.ones(1 << 18, device="fl:1")                 # 1 MiB
    storage = t.untyped_storage()
    assert torch.fl.memory_allocated(1) - before == 1 << 20
    storage.resize_(0)
    assert torch.fl.memory_allocated(1) == before          # freed at once
    storage.resize_(1 << 21)
    assert torch.fl.memory_allocated(1) - before == 1 << 21
    assert torch.accelerator.memory_allocated(1) == torch.fl.memory_allocated(1)
    del t, storage
    assert torch.fl.memory_allocated(1) == before


def test_a_storage_that_borrows_its_memory_is_not_resized(fl):
    """As on the CPU: a storage over memory it does not own (no deleter) is not resizable and
    is refused, leaving the memory alone; the runtime's own storages resize (and stay so)."""
    owner = torch.arange(8.0, device="fl:0")
    borrowed = torch._C._construct_storage_from_data_pointer(owner.data_ptr(), owner.device, 16)
    assert not borrowed.resizable()
    with pytest.raises(RuntimeError, match="not resizable"):
        borrowed.resize_(64)
    assert borrowed.nbytes() == 16 and borrowed.data_ptr() == owner.data_ptr()
    cpu = torch.arange(8.0)
    with pytest.raises(RuntimeError, match="not resizable"):
        torch._C._construct_storage_from_data_pointer(cpu.data_ptr(), cpu.device, 16).resize_(64)
    own = torch.arange(4.0, device="fl:0").untyped_storage()
    own.resize_(32)
    own.resize_(8)
    assert own.resizable() and own.nbytes() == 8
