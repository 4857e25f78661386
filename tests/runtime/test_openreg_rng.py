"""PyTorch's OpenReg RNG tests, ported to fl on the native bridge: device generators and the
torch.fl seeding functions.

Source: pytorch/pytorch test/cpp_extensions/open_registration_extension/torch_openreg/tests/
test_rng.py.  Each test keeps the original's name and intent; the device is "fl".

Not ported: test_offset_unsupported.  It checks that OpenReg, a CPU-simulated backend, refuses
generator offsets (torch.openreg.set_offset/get_offset raise).  fl generators have offsets (the
ABI's random kernels draw at counter offset + i); tests/runtime/test_generators.py checks them.
"""
from __future__ import annotations

import pytest
import torch

# torch.Generator(device="fl") needs the native bridge: on the Python route it raises
# NativeBridgeOffError (docs/users/native-bridge.md), checked by
# test_generators.py::test_fl_generator_cannot_be_created_on_the_python_route.
_needs_fl_generators = pytest.mark.skipif(
    "not __import__('fl_runtime.bridge', fromlist=['x']).status().active",
    reason="the Python route: torch.Generator(device='fl') raises NativeBridgeOffError (docs/users/native-bridge.md)")


@_needs_fl_generators
def test_generator(fl):
    generator = torch.Generator(device="fl:1")
    assert generator.device.type == "fl" and generator.device.index == 1


def test_rng_state(fl):
    state = torch.fl.get_rng_state(0)
    expected = torch.rand(100, device="fl:0").cpu()
    torch.fl.set_rng_state(state, 0)
    assert torch.equal(torch.rand(100, device="fl:0").cpu(), expected)
    states = torch.fl.get_rng_state_all()
    expected = [torch.rand(100, device=f"fl:{i}").cpu() for i in range(len(states))]
    torch.fl.set_rng_state_all(states)
    assert all(torch.equal(torch.rand(100, device=f"fl:{i}").cpu(), e) for i, e in enumerate(expected))


@_needs_fl_generators
def test_manual_seed(fl):
    torch.fl.manual_seed_all(42)
    assert torch.fl.initial_seed() == 42
    assert all(torch.Generator(device=f"fl:{i}").manual_seed(42).initial_seed() == 42
               for i in range(torch.fl.device_count()))


def test_seed(fl):
    torch.fl.seed_all()
    first = torch.fl.initial_seed()
    torch.fl.seed_all()
    assert torch.fl.initial_seed() != first


@_needs_fl_generators
def test_create_generator_and_seed(fl):
    generator = torch.Generator(device="fl:0")
    generator.manual_seed(42)
    assert generator.initial_seed() == 42
