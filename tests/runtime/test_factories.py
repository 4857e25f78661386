"""Factory functions with device="fl..." give what the CPU gives, on the right fl device.

Factories with no vendor kernel run through the fallback chain; on its CPU link
the op's `device=` must become the CPU (else the CPU call lands on fl again and
recurses) and the result must land on the device asked for.  Decompositions
that count in a dtype the ABI lacks (eye's uses uint16) are not a generic kernel.
"""
import pytest
import torch

from fl_runtime.errors import UnsupportedDtypeError


@pytest.mark.parametrize("factory, args", [
    (torch.triu_indices, (3, 3)),
    (torch.triu_indices, (4, 5, 1)),
    (torch.tril_indices, (4, 3, -1)),
    (torch.tril_indices, (0, 3)),
])
def test_index_factories_match_cpu(fl, factory, args):
    got = factory(*args, device="fl")
    assert got.device == torch.device("fl:0")
    assert torch.equal(got.cpu(), factory(*args))


def test_factory_lands_on_the_device_asked_for(fl):
    got = torch.triu_indices(3, 4, device="fl:1")
    assert got.device == torch.device("fl:1")
    assert torch.equal(got.cpu(), torch.triu_indices(3, 4))
    window = torch.hann_window(7, device="fl:1")
    assert window.device == torch.device("fl:1")
    torch.testing.assert_close(window.cpu(), torch.hann_window(7))


def test_unindexed_device_means_the_current_one(fl):
    with torch.fl.device(1):
        got = torch.tril_indices(3, 3, device="fl")
    assert got.device == torch.device("fl:1")
    assert torch.equal(got.cpu(), torch.tril_indices(3, 3))


@pytest.mark.parametrize("n", [1, 7, 512])
def test_eye_matches_cpu(fl, n):
    got = torch.eye(n, device="fl:0")
    assert got.device == torch.device("fl:0")
    assert torch.equal(got.cpu(), torch.eye(n))
    assert torch.equal(torch.eye(n, 3, dtype=torch.int64, device="fl:0").cpu(), torch.eye(n, 3, dtype=torch.int64))


def test_eye_as_the_first_op_of_a_process(python):
    result = python("""
        import torch, torch_fl
        x = torch.eye(512, device="fl:0")
        assert x.device == torch.device("fl:0"), x.device
        assert torch.equal(x.cpu(), torch.eye(512))
        print("ok")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


@pytest.mark.parametrize("make", [
    lambda device: torch.zeros(3, dtype=torch.uint16, device=device),
    lambda device: torch.tensor([1, 2], dtype=torch.uint16, device=device),
    lambda device: torch.full((2,), 1, dtype=torch.uint32, device=device),
    lambda device: torch.ones(3, dtype=torch.uint64, device=device),
    lambda device: torch.empty_strided((2, 2), (1, 2), dtype=torch.uint16, device=device),
])
def test_a_dtype_the_abi_lacks_is_a_clear_error(fl, make):
    assert make("cpu").dtype in (torch.uint16, torch.uint32, torch.uint64)      # the CPU makes it
    with pytest.raises(UnsupportedDtypeError, match=r"cannot live on fl:0.*convert it first"):
        make("fl:0")


def test_names_argument_behaves_as_on_the_cpu(fl):
    # PyTorch 2.13 has no named tensors: torch.empty(names=...) is a TypeError on every
    # device.  fl must raise exactly what the CPU raises, not something of its own.
    with pytest.raises(TypeError) as on_cpu:
        torch.empty([2, 3], names=["N", "C"])
    with pytest.raises(TypeError) as on_fl:
        torch.empty([2, 3], device="fl", names=["N", "C"])
    assert str(on_fl.value) == str(on_cpu.value)


@pytest.mark.skipif("not __import__('fl_runtime.bridge', fromlist=['x']).status().active",
                    reason="the Python route: no C++ factory kernel")
def test_the_cpp_factories_serve_exactly_the_stored_dtypes(fl):
    """The C++ empty_strided / empty kernels (bridge/csrc/factory_kernels.h) serve the dtypes of
    storage.py's DL_DTYPES, the list Python hands them, and send any other to the Python kernel,
    whose UnsupportedDtypeError names it."""
    from fl_runtime.devices.storage import DL_DTYPES
    native = fl.runtime().launcher.native
    torch.ones(1, device="fl:0").add_(1)       # releases what an earlier test's failed call held
    for dtype in DL_DTYPES:
        before = native.eager_stats()["python_calls"]
        made = (torch.empty_strided((2, 3), (3, 1), dtype=dtype, device="fl:0"), torch.empty(4, dtype=dtype, device="fl:0"))
        assert native.eager_stats()["python_calls"] == before, dtype
        assert [(t.dtype, t.device, t.stride()) for t in made] == [(dtype, torch.device("fl:0"), (3, 1)),
                                                                   (dtype, torch.device("fl:0"), (1,))]
    for dtype in (torch.uint16, torch.complex128):
        before = native.eager_stats()["python_calls"]
        with pytest.raises(UnsupportedDtypeError):
            torch.empty(4, dtype=dtype, device="fl:0")
        assert native.eager_stats()["python_calls"] == before + 1, dtype
