"""Tensors of two devices in one op, and copies to the host: as CUDA does.

An fl tensor with a CPU tensor that has dimensions is an error, on every path an op can
take (vendor kernel, generic kernel, CPU fallback); a 0-dim CPU tensor is a scalar and
is allowed. `.to("cpu", non_blocking=True)`, common in input pipelines, works."""
import pytest
import torch

SAME_DEVICE = "Expected all tensors to be on the same device"


def _path(fl, op, *args) -> str:
    return fl.runtime().launcher.chain.classify(op, args, {}, 0)


@pytest.mark.parametrize("fn, op, path", [
    (torch.add, torch.ops.aten.add.Tensor, "native"),
    (torch.logaddexp, torch.ops.aten.logaddexp.default, "generic"),
    (torch.hypot, torch.ops.aten.hypot.default, "cpu"),
])
def test_a_cpu_tensor_with_dimensions_next_to_an_fl_tensor_raises(fl, fn, op, path):
    a = torch.rand(3, device="fl:0")
    assert _path(fl, op, a, a) == path      # the op really takes the path under test
    for args in ((a, torch.rand(3)), (torch.rand(3), a)):
        with pytest.raises(RuntimeError, match=SAME_DEVICE):
            fn(*args)


def test_in_place_and_out_with_a_cpu_operand_raise(fl):
    a = torch.rand(3, device="fl:0")
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        a.mul_(torch.rand(3))
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.hypot(a, torch.rand(3), out=torch.empty(3, device="fl:0"))


@pytest.mark.parametrize("fn", [torch.add, torch.logaddexp, torch.hypot])
def test_a_zero_dim_cpu_tensor_is_a_scalar_and_allowed(fl, fn):
    a = torch.rand(4)
    got = fn(a.to("fl:0"), torch.tensor(0.5))
    assert got.device.type == "fl"
    torch.testing.assert_close(got.cpu(), fn(a, torch.tensor(0.5)))


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "offset view"])
def test_to_cpu_non_blocking_returns_the_values(fl, layout):
    host = torch.randn(5, 7)
    x = host.to("fl:0")
    y, want = {"contiguous": (x, host), "transposed": (x.t(), host.t()),
               "offset view": (x[1:, 2:], host[1:, 2:])}[layout]
    out = y.to("cpu", non_blocking=True)
    assert out.device.type == "cpu" and out.stride() == torch.empty_like(want).stride()   # as PyTorch's own
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    torch.testing.assert_close(y.cpu(), want, rtol=0, atol=0)


def test_to_copy_still_converts_and_moves_between_devices(fl):
    host = torch.randn(4, 3)
    x = host.to("fl:0")
    assert x.to(torch.float64).device == torch.device("fl:0")
    torch.testing.assert_close(x.to("cpu", torch.float64, non_blocking=True), host.double())
    torch.testing.assert_close(x.to("fl:1", non_blocking=True).cpu(), host)
    torch.testing.assert_close(x.half().cpu(), host.half())


def test_non_blocking_copy_in_a_loop_keeps_autograd(fl):
    w = torch.randn(3, device="fl:0", requires_grad=True)
    w.to("cpu", non_blocking=True).pow(2).sum().backward()
    torch.testing.assert_close(w.grad.cpu(), 2 * w.detach().cpu())


def test_cpu_index_tensors_are_moved_to_the_device_as_on_cuda(fl):
    """x[cpu_index]: the indices would otherwise reach the vendor as host addresses."""
    host = torch.arange(12.).reshape(3, 4)
    x = host.to("fl:0")
    for index in (torch.tensor([0, 2]), torch.tensor(1), torch.tensor([True, False, True])):
        torch.testing.assert_close(x[index].cpu(), host[index])
    y, want = x.clone(), host.clone()
    y[torch.tensor([1])] = 7.0
    want[torch.tensor([1])] = 7.0
    torch.testing.assert_close(y.cpu(), want)


@pytest.mark.parametrize("fn", [lambda a, c: torch.cat([a, c]), lambda a, c: torch.stack([a, c]),
                                lambda a, c: torch.where(a > 0, a, c)])
def test_tensor_lists_and_where_with_a_cpu_tensor_raise(fl, fn):
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        fn(torch.rand(3, device="fl:0"), torch.rand(3))


@pytest.mark.parametrize("fn", [torch.add, torch.mul, torch.Tensor.add_])
def test_tensors_of_two_fl_devices_raise_with_the_way_out(fl, fn):
    # a vendor kernel's call names both devices and the move (ops PyTorch checks itself before
    # reaching fl, e.g. logaddexp, keep PyTorch's message)
    a, b = torch.rand(3, device="fl:0"), torch.rand(3, device="fl:1")
    with pytest.raises(RuntimeError, match=SAME_DEVICE) as caught:
        fn(a, b)
    assert "fl:0 and fl:1" in str(caught.value) and ".to('fl:1')" in str(caught.value)
