"""The current device decides where `device="fl"` lands (docs/users/native-bridge.md): after
`torch.fl.set_device(1)`, `x.to("fl")`, `Module.to("fl")` and every factory with `device="fl"`
make their tensors on fl:1, as CUDA's do on cuda:1.  The current device is per thread.

On the Python route PyTorch's Python device guard knows one device, so these land on fl:0.
"""
from __future__ import annotations

import copy
import threading

import pytest
import torch

FL1 = torch.device("fl", 1)

# On the Python route `Tensor.to("fl")` (also inside Module.to and torch.tensor) goes to fl:0:
# PyTorch asks its Python device guard, which reports device 0 (docs/users/limits.md
# "Tensors and devices", docs/users/native-bridge.md); the last test checks that.
_BRIDGE = "__import__('fl_runtime.bridge', fromlist=['x']).status().active"
_needs_the_bridge = pytest.mark.skipif(
    f"not {_BRIDGE}", reason="the Python route: Tensor.to('fl') without an index goes to fl:0 (docs/users/limits.md)")


@pytest.fixture
def on_fl1(fl):
    torch.fl.set_device(1)
    yield
    torch.fl.set_device(0)


@_needs_the_bridge
def test_tensor_to_fl_lands_on_the_current_device(on_fl1):
    x = torch.randn(3, 4)
    for moved in (x.to("fl"), x.to(torch.device("fl")), x.to("fl", torch.float16), x.fl()):
        assert moved.device == FL1
        torch.testing.assert_close(moved.cpu().float(), x, rtol=1e-3, atol=1e-3)
    assert x.to("fl:0").to("fl").device == FL1              # fl:0 -> "fl" moves too, as on CUDA


@_needs_the_bridge
def test_module_to_fl_lands_on_the_current_device(on_fl1):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.BatchNorm1d(8))
    reference = copy.deepcopy(model)
    model.to("fl")
    assert {t.device for t in model.state_dict().values()} == {FL1}
    for got, want in zip(model.state_dict().values(), reference.state_dict().values()):
        assert torch.equal(got.cpu(), want)
    x = torch.randn(5, 4)
    torch.testing.assert_close(model(x.to("fl")).cpu(), reference(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make", [
    lambda: torch.empty(3, device="fl"),
    lambda: torch.zeros(2, 3, device="fl"),
    lambda: torch.ones(4, device="fl"),
    lambda: torch.full((2,), 7.0, device="fl"),
    lambda: torch.arange(5, device="fl"),
    pytest.param(lambda: torch.tensor([1.0, 2.0], device="fl"), marks=_needs_the_bridge),   # copies with .to
    lambda: torch.randn(3, device="fl"),
    lambda: torch.eye(3, device="fl"),
    lambda: torch.empty_strided((2, 2), (1, 2), device="fl"),
], ids=["empty", "zeros", "ones", "full", "arange", "tensor", "randn", "eye", "empty_strided"])
def test_factories_land_on_the_current_device(on_fl1, make):
    assert make().device == FL1


@_needs_the_bridge
def test_the_device_context_and_a_default_device_follow_it(on_fl1):
    with torch.fl.device(0):
        assert torch.ones(2).to("fl").device == torch.device("fl", 0)
    assert torch.ones(2).to("fl").device == FL1
    with torch.device("fl"):
        assert torch.zeros(2).device == FL1


@_needs_the_bridge
def test_another_thread_starts_on_fl0_and_keeps_its_own(on_fl1):
    seen = {}

    def worker():
        seen["start"] = torch.ones(1).to("fl").device
        torch.fl.set_device(1)
        seen["after"] = torch.nn.Linear(2, 2).to("fl").weight.device
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(60)
    assert seen == {"start": torch.device("fl", 0), "after": FL1}
    assert torch.fl.current_device() == 1


@pytest.mark.skipif(_BRIDGE, reason="the Python route's behaviour; the bridge's: the tests above")
def test_to_fl_without_an_index_goes_to_fl0_on_the_python_route(on_fl1):
    """docs/users/limits.md: `.to("fl")` lands on fl:0, factories follow the current device,
    and `.to(f"fl:{torch.fl.current_device()}")` is the way to follow it."""
    x = torch.randn(3)
    assert x.to("fl").device == torch.device("fl", 0)
    assert torch.nn.Linear(2, 2).to("fl").weight.device == torch.device("fl", 0)
    assert torch.zeros(2, device="fl").device == FL1
    moved = x.to(f"fl:{torch.fl.current_device()}")
    assert moved.device == FL1 and torch.equal(moved.cpu(), x)
