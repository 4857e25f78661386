"""Runtime level: ops on fl:0 (vendor kernels through the ABI) against PyTorch CPU."""
import warnings

import pytest
import torch

from conftest import PYTHON_ROUTE
from hypothesis import given, strategies as st

FP32 = dict(rtol=1.3e-6, atol=1e-5)
REDUCE = dict(rtol=1e-4, atol=1e-4)


@st.composite
def broadcast_pair(draw):
    """Two shapes that broadcast together, with size-0/1 and 0-d cases."""
    out = draw(st.lists(st.integers(0, 5), min_size=0, max_size=4))
    def shrink(shape):
        keep = draw(st.integers(0, len(shape)))
        return [n if draw(st.booleans()) else 1 for n in shape[len(shape) - keep:]]
    return shrink(out), shrink(out)


def values(shape, seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 3


@given(broadcast_pair(), st.integers(0, 2**16), st.sampled_from(["add", "sub", "mul", "div", "maximum"]))
def test_binary_broadcasting(fl, shapes, seed, name):
    a, b = values(shapes[0], seed), values(shapes[1], seed + 1)
    fn = getattr(torch, name)
    expected = fn(a, b)
    got = fn(a.to("fl:0"), b.to("fl:0"))
    assert got.shape == expected.shape and got.dtype == expected.dtype
    torch.testing.assert_close(got.cpu(), expected, equal_nan=True, **FP32)


@given(st.integers(0, 2**16), st.sampled_from([2, -0.5, 3.25]))
def test_tensor_scalar_ops(fl, seed, scalar):
    a = values((3, 5), seed)
    fa = a.to("fl:0")
    for fn in (lambda t: t + scalar, lambda t: t * scalar, lambda t: t / scalar, lambda t: scalar - t,
               lambda t: t.pow(2), lambda t: t.clamp(-1, 1)):
        torch.testing.assert_close(fn(fa).cpu(), fn(a), **FP32)


@pytest.mark.parametrize("name", ["neg", "exp", "abs", "sigmoid", "tanh", "relu", "sqrt", "log", "rsqrt"])
def test_unary_including_special_values(fl, name):
    a = torch.tensor([0.0, -0.0, 1.5, -2.25, 1e-40, 80.0, -80.0, float("inf"), float("-inf"), float("nan")])
    fn = getattr(torch, name)
    torch.testing.assert_close(fn(a.to("fl:0")).cpu(), fn(a), equal_nan=True, rtol=1e-5, atol=1e-6)


@given(st.lists(st.integers(1, 6), min_size=1, max_size=3), st.integers(0, 2**16), st.data())
def test_reductions(fl, shape, seed, data):
    a = values(shape, seed)
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    keepdim = data.draw(st.booleans())
    fa = a.to("fl:0")
    torch.testing.assert_close(fa.sum().cpu(), a.sum(), **REDUCE)
    torch.testing.assert_close(fa.sum(dim, keepdim=keepdim).cpu(), a.sum(dim, keepdim=keepdim), **REDUCE)
    torch.testing.assert_close(fa.mean(dim, keepdim=keepdim).cpu(), a.mean(dim, keepdim=keepdim), **REDUCE)
    assert torch.equal(fa.argmax(dim).cpu(), a.argmax(dim))


@given(st.integers(1, 40), st.integers(1, 40), st.integers(1, 40), st.booleans(), st.booleans())
def test_matmul_with_transposed_operands(fl, m, k, n, ta, tb):
    a = values((k, m), m).t() if ta else values((m, k), m)
    b = values((n, k), n).t() if tb else values((k, n), n)
    torch.testing.assert_close((a.to("fl:0") @ b.to("fl:0")).cpu(), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride, padding, groups", [(1, 1, 1), (2, 0, 1), (1, 2, 2)])
def test_conv2d_forward(fl, stride, padding, groups):
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 4, 9, 9), torch.randn(6, 4 // groups, 3, 3), torch.randn(6)
    expected = torch.nn.functional.conv2d(x, w, b, stride=stride, padding=padding, groups=groups)
    got = torch.nn.functional.conv2d(x.to("fl:0"), w.to("fl:0"), b.to("fl:0"), stride=stride,
                                     padding=padding, groups=groups)
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-4)


def test_random_ops_are_reproducible_per_seed_and_device(fl):
    torch.manual_seed(5)
    a0, a1 = torch.randn(1000, device="fl:0"), torch.randn(1000, device="fl:1")
    torch.manual_seed(5)
    b0 = torch.randn(1000, device="fl:0")
    torch.randn(10, device="fl:0")                 # draws on fl:0 do not move fl:1's state
    b1 = torch.randn(1000, device="fl:1")
    assert torch.equal(a0.cpu(), b0.cpu()) and torch.equal(a1.cpu(), b1.cpu())
    assert abs(a0.cpu().mean()) < 0.15 and abs(a0.cpu().std() - 1) < 0.1
    u = torch.rand(1000, device="fl:0").cpu()
    assert 0 <= u.min() and u.max() < 1


def test_comparisons_and_where(fl):
    a, b = values((4, 4), 1), values((4, 4), 2)
    fa, fb = a.to("fl:0"), b.to("fl:0")
    assert torch.equal((fa > 0).cpu(), a > 0) and torch.equal((fa == fb).cpu(), a == b)
    assert torch.equal(torch.where(fa > 0, fa, fb).cpu(), torch.where(a > 0, a, b))


def test_repeated_signature_with_changing_scalars_and_random_state(fl):
    """The marshaler replays a template per input signature: what varies between
    calls (float scalars, wrapped numbers, tensor addresses, RNG offsets) must not stick."""
    a = values((3, 4), 7)
    fa = a.to("fl:0")
    for scalar in (0.5, -2.0, 3.25, 1e-3):
        torch.testing.assert_close((fa * scalar).cpu(), a * scalar, **FP32)
        torch.testing.assert_close((fa + torch.tensor(scalar)).cpu(), a + scalar, **FP32)
        torch.testing.assert_close(fa.clone().add_(fa, alpha=scalar).cpu(), a + scalar * a, **FP32)
    first, second = torch.randn(64, device="fl:0").cpu(), torch.randn(64, device="fl:0").cpu()
    assert not torch.equal(first, second)
    other = values((3, 4), 8).to("fl:0")
    assert torch.equal((other + 1).cpu(), other.cpu() + 1)     # same signature, other addresses


@pytest.mark.parametrize("make", [lambda: torch.tensor(2.5), lambda: torch.tensor([2.5]),
                                  lambda: torch.tensor([[2.5]]), lambda: torch.tensor([[1.0], [2.5], [3.0]])[1]],
                         ids=["0-d", "[1]", "[1,1]", "view-with-offset"])
def test_item_reads_any_one_element_tensor(fl, make):
    host = make()
    on_fl = torch.tensor([[1.0], [2.5], [3.0]]).to("fl:0")[1] if host.storage_offset() else host.to("fl:0")
    assert on_fl.item() == 2.5


def test_a_dtype_the_abi_lacks_is_refused_by_name(fl):
    from torch_fl import FLError
    with pytest.raises(FLError, match="uint64 tensors cannot live on fl:0.*keep this tensor on the CPU"):
        torch.zeros(2, dtype=torch.uint64).to("fl:0")


# -- fixes found by the OpInfo sweep ----------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8, torch.int64])
def test_inplace_bitwise_with_a_python_number(fl, dtype):
    # x |= 3 reaches the runtime as bitwise_or.Tensor_out with the wrapped 3 as a Python int
    x = torch.tensor([1, 0, 6, 5], dtype=dtype)
    got = x.to("fl:0")
    got |= 3
    got &= 5
    assert got.dtype == dtype and torch.equal(got.cpu(), (x | 3) & 5)


def test_numbers_in_tensor_slots_keep_the_wrapped_number_dtype():
    from fl_runtime.ops.schema import numbers_as_tensors
    op = torch.ops.aten.add.out
    ints = torch.ones(2, dtype=torch.int32)
    args, kwargs = numbers_as_tensors(op, (ints, 2.5), {"out": ints})
    assert args[1].dim() == 0 and args[1].dtype == torch.float32      # not float64: a wrapped number
    assert kwargs["out"] is ints
    assert numbers_as_tensors(op, (ints, ints), {}) == ((ints, ints), {})


@pytest.mark.parametrize("make", [lambda z: z.conj(), lambda z: z.conj().t(), lambda z: torch.fft.hfft(z)[None],
                                  lambda z: torch.fft.ifft(z.conj())])
def test_complex_conjugate_views_copy_their_values(fl, make):
    z = torch.randn(4, 6, dtype=torch.complex64, generator=torch.Generator().manual_seed(0))
    got = make(z.to("fl:0"))
    torch.testing.assert_close(got.cpu(), make(z))
    torch.testing.assert_close(got.clone().cpu(), make(z).resolve_conj())


def test_copy_into_a_conjugate_view_stores_the_conjugate(fl):
    z = torch.randn(5, dtype=torch.complex64)
    dst = torch.zeros(5, dtype=torch.complex64, device="fl:0")
    dst.conj().copy_(z.to("fl:0"))
    torch.testing.assert_close(dst.cpu(), z.conj())


@pytest.mark.parametrize("shape, warns", [((0,), False), ((5,), True), ((3,), False)])
def test_out_tensors_are_resized_to_the_result(fl, shape, warns):
    x = torch.randn(3, 4)
    out = torch.empty(shape, device="fl:0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fl.profile(warn_fallback_share=1.0) as prof:
            result = torch.sum(x.to("fl:0"), 1, out=out)
    assert result is out and out.shape == (3,)
    torch.testing.assert_close(out.cpu(), x.sum(1), **REDUCE)
    assert prof.paths()["aten::sum.IntList_out"] == {"native"}
    assert any("was resized" in str(w.message) for w in caught) == warns


def test_pin_memory_gives_a_pageable_copy_on_the_python_route(python):
    """Without the native bridge no pinned allocator exists: pin_memory() copies, truthfully
    unpinned (the bridge's pinned memory: tests/runtime/test_pinned_memory.py)."""
    result = python("""
        import torch, torch_fl
        x = torch.randn(4)
        pinned = x.pin_memory()
        assert torch.equal(pinned, x) and pinned.data_ptr() != x.data_ptr() and not pinned.is_pinned()
        assert torch.equal(pinned.to("fl:0", non_blocking=True).cpu(), x)
        print("ok")
    """, env=PYTHON_ROUTE)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


@pytest.mark.parametrize("pure_python_storage", ["0", "1"])
def test_error_hidden_by_a_tensor_freed_while_raising_is_reported(python, pure_python_storage):
    # the clone dies while Python unwinds the RuntimeError; the pure path's deleter (a C
    # callback into Python) cannot hand the pending error back, so the runtime logs it and
    # keeps it; the compiled deleter never enters Python, so the error always arrives
    result = python("""
        import torch, torch_fl
        from fl_runtime.devices import storage
        x = torch.tensor([True, False], device="fl:0")
        try:
            x.clone().__ior__(3)
        except (RuntimeError, SystemError) as exc:
            print("RAISED", type(exc).__name__, exc)
        print("HIDDEN", storage.last_hidden_error())
        print("LIVE", torch.ones(2, device="fl:0").sum().item())
    """, {"TORCH_FL_PURE_PYTHON": pure_python_storage})
    assert result.returncode == 0, result.stderr
    real = "result type Long can't be cast to the desired output type Bool"
    if pure_python_storage == "0":
        assert f"RAISED RuntimeError {real}" in result.stdout and "HIDDEN None" in result.stdout
    assert "LIVE 2.0" in result.stdout                        # the freed block went back to the allocator
    if f"RAISED RuntimeError {real}" not in result.stdout:    # hidden by the interpreter: reported instead
        assert "RAISED SystemError" in result.stdout and f"HIDDEN {real}" in result.stdout
        assert real in result.stderr                          # logged where the user sees it
