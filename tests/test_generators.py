"""Explicit generators with random ops on fl.

PyTorch 2.13 creates a device's Generator only through a C++ backend's hooks, so
`torch.Generator(device="fl")` cannot exist (PyTorch raises NotImplementedError).
An explicit CPU generator passed to a random op on fl is honoured: the op runs on the
CPU fallback with that generator, so its values equal the CPU's for the same seed and
the generator advances as on the CPU (README "Status and known limits").
"""
import pytest
import torch

from fl_runtime.errors import UnsupportedOpError


def _pair(seed: int = 5):
    return torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("draw", [
    lambda g, d: torch.randn(4, 3, generator=g, device=d),
    lambda g, d: torch.rand(5, generator=g, device=d),
    lambda g, d: torch.randint(0, 10, (6,), generator=g, device=d),
    lambda g, d: torch.randperm(7, generator=g, device=d),
    lambda g, d: torch.empty(5, device=d).uniform_(-1, 1, generator=g),
    lambda g, d: torch.empty(5, device=d).normal_(2.0, 0.5, generator=g),
    lambda g, d: torch.empty(8, device=d).bernoulli_(0.3, generator=g),
    lambda g, d: torch.multinomial(torch.tensor([0.1, 0.2, 0.7], device=d), 5, True, generator=g),
])
def test_explicit_cpu_generator_gives_the_cpu_values(fl, draw):
    g_cpu, g_fl = _pair()
    want = [draw(g_cpu, "cpu") for _ in range(2)]        # twice: the generator must advance
    got = [draw(g_fl, "fl:0") for _ in range(2)]
    for g, w in zip(got, want):
        assert g.device == torch.device("fl:0")
        torch.testing.assert_close(g.cpu(), w, rtol=0, atol=0)
    assert g_fl.get_state().equal(g_cpu.get_state())


def test_fl_generator_cannot_be_created(fl):
    with pytest.raises(NotImplementedError):
        torch.Generator(device="fl:1")


def test_strict_mode_refuses_the_explicit_generator(fl, monkeypatch):
    monkeypatch.setenv("TORCH_FL_STRICT", "1")
    with pytest.raises(UnsupportedOpError, match="explicit torch.Generator"):
        torch.empty(3, device="fl").uniform_(generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("shape", [(5,), (2, 3)])
def test_explicit_generator_after_a_generator_less_call_of_the_same_signature(fl, shape):
    # The first call records a launch template for the signature; the second must not
    # replay it (that would draw from the device's stream and ignore the seed).
    x = torch.empty(shape, device="fl:0")
    x.uniform_()
    x.uniform_(generator=torch.Generator().manual_seed(11))
    want = torch.empty(shape).uniform_(generator=torch.Generator().manual_seed(11))
    torch.testing.assert_close(x.cpu(), want, rtol=0, atol=0)
    x.uniform_()          # and the device stream still serves calls without a generator
    assert not torch.equal(x.cpu(), want)
