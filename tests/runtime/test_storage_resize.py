"""Resizing fl storages on the native bridge (docs/users/native-bridge.md): what FSDP2 does to
free and refill a parameter's memory, `untyped_storage().resize_(0)` and back.

The kept prefix must be exact, views that share the storage must see the new memory, a storage
of fl:1 must stay on fl:1 whatever device is current, and the memory statistics must follow.
The Python route's clear error: tests/runtime/test_storage.py.
"""
from __future__ import annotations

import json

import pytest
import torch
from conftest import run_python


# On the Python route UntypedStorage.resize_() raises NativeBridgeOffError (test_storage.py checks
# it) and t.resize_ past its storage moves t to a new storage of its own, at offset 0, so earlier
# views keep the old memory (docs/users/limits.md, docs/users/native-bridge.md); the last test checks that.
_BRIDGE = "__import__('fl_runtime.bridge', fromlist=['x']).status().active"
_needs_the_bridge = pytest.mark.skipif(
    f"not {_BRIDGE}", reason="the Python route: UntypedStorage.resize_ raises NativeBridgeOffError, t.resize_ "
                             "moves t to a new storage (docs/users/limits.md, docs/users/native-bridge.md)")


@pytest.fixture(autouse=True)
def on_fl0(fl):
    torch.fl.set_device(0)
    yield
    torch.fl.set_device(0)


@_needs_the_bridge
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


@_needs_the_bridge
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


@_needs_the_bridge
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


@_needs_the_bridge
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


@_needs_the_bridge
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


@_needs_the_bridge
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


@pytest.mark.parametrize("start, offset, sizes", [
    (0, 0, [(5,), (5,), (2, 3), (0,), (40,)]),          # what arange(out=) does: grow an empty one
    pytest.param(16, 4, [(3, 2), (12,), (30,), (1, 1, 1)], marks=_needs_the_bridge),   # a view with an offset
])
def test_tensor_resize_keeps_values_and_strides_as_on_the_cpu(fl, start, offset, sizes):
    """Tensor.resize_ in every step: the kept prefix, the sizes, the strides and the storage
    size follow the CPU's."""
    device_base = torch.arange(start, dtype=torch.float32, device="fl:0")
    cpu_base = torch.arange(start, dtype=torch.float32)
    device, cpu = device_base[offset:], cpu_base[offset:]
    for size in sizes:
        device.resize_(size)
        cpu.resize_(size)
        kept = min(device.numel(), max(start - offset, 0))
        assert device.shape == cpu.shape and device.stride() == cpu.stride(), size
        assert device.storage_offset() == cpu.storage_offset()
        assert torch.equal(device.reshape(-1)[:kept].cpu(), cpu.reshape(-1)[:kept]), size
        assert device.untyped_storage().nbytes() >= cpu.untyped_storage().nbytes() - 4 * offset


def test_resize_to_a_memory_format_gives_the_cpu_strides(fl):
    device = torch.empty(0, device="fl:0").resize_((2, 3, 4, 5), memory_format=torch.channels_last)
    cpu = torch.empty(0).resize_((2, 3, 4, 5), memory_format=torch.channels_last)
    assert device.stride() == cpu.stride() and device.is_contiguous(memory_format=torch.channels_last)
    with pytest.raises(RuntimeError, match="required rank 4"):
        torch.empty(0, device="fl:0").resize_((2, 3), memory_format=torch.channels_last)


_RESIZE_PROBE = """
import json, sys
import torch, torch_fl
native = sys.modules["fl_runtime.bridge._fl_bridge"]

def resizes():          # arange(out=)'s grow of an empty tensor, and a grow that keeps values
    fresh, kept = torch.empty(0, device="fl:0"), torch.ones(8, device="fl:0")
    for n in (16, 4, 64, 0, 128):
        fresh.resize_(n)
    kept.resize_(16)
    return fresh, kept

def counts():
    return native.eager_stats()["python_calls"], native.python_entries()

resizes()               # the first call of the kept values' copy_ records its program
before = counts()
fresh, kept = resizes()
steady = counts()
fresh.resize_((2, 2, 2, 2), memory_format=torch.channels_last)
print(json.dumps({"steady": [a - b for a, b in zip(steady, before)],
                  "memory_format": [a - b for a, b in zip(counts(), steady)],
                  "values": kept[:8].cpu().tolist() == [1.0] * 8 and fresh.shape == (2, 2, 2, 2)}))
"""


def test_steady_state_resize_is_served_in_cpp(fl):
    """The bridge's resize_ kernel (bridge/csrc/resize_kernel.h) takes no Python for a plain
    resize; a memory format goes to the Python kernel (both probes move).  In a fresh process:
    a signature an earlier test sent to Python is retried only after 1, 2, 4 ... calls."""
    from fl_runtime import bridge
    if not bridge.status().active:
        pytest.skip("the Python route: resize_ is a Python kernel by design")
    result = run_python(_RESIZE_PROBE)
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["steady"] == [0, 0], figures
    assert figures["memory_format"][0] == 1 and figures["memory_format"][1] >= 1, figures
    assert figures["values"]


@pytest.mark.skipif(_BRIDGE, reason="the Python route's behaviour; the bridge's: the tests above")
def test_tensor_resize_moves_the_tensor_to_a_new_storage_on_the_python_route():
    x = torch.arange(4, dtype=torch.float32, device="fl:0")
    head, tail = x[:2], x[2:]
    tail.resize_(10)                                       # a view with an offset, grown: offset 0 now
    assert tail.storage_offset() == 0 and torch.equal(tail[:2].cpu(), torch.tensor([2.0, 3.0]))
    x.resize_(100)
    x[0] = 7.0
    assert x.untyped_storage().data_ptr() != head.untyped_storage().data_ptr()
    assert torch.equal(x[:4].cpu(), torch.tensor([7.0, 1.0, 2.0, 3.0]))
    assert torch.equal(head.cpu(), torch.tensor([0.0, 1.0]))   # the earlier view keeps the old memory
