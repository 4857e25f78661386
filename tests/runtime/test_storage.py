"""Storages on fl (integration/storages.py): construction through Torch-FL's allocator,
the generated helpers (is_fl, .fl()), typed and untyped storages agreeing, all
against the same calls on the CPU."""
import pytest
import torch

from conftest import PYTHON_ROUTE
from fl_runtime.errors import DeviceNotFoundError


def test_untyped_storage_of_n_bytes_on_fl(fl):
    storage = torch.UntypedStorage(4, device="fl")
    assert isinstance(storage, torch.UntypedStorage)
    assert storage.device == torch.device("fl:0") and storage.nbytes() == 4 and storage.is_fl
    storage.copy_(torch.UntypedStorage([1, 2, 3, 4]))
    assert storage.cpu().tolist() == torch.UntypedStorage([1, 2, 3, 4]).tolist()


def test_untyped_storage_from_bytes_and_empty(fl):
    on_fl = torch.UntypedStorage([7, 0, 255], device="fl:1")
    assert on_fl.device == torch.device("fl:1")
    assert on_fl.cpu().tolist() == torch.UntypedStorage([7, 0, 255]).tolist()
    empty = torch.UntypedStorage(device="fl")
    assert empty.nbytes() == torch.UntypedStorage().nbytes() == 0 and empty.is_fl


def test_storage_construction_is_a_clear_error_not_a_crash(python):
    # Before Torch-FL routed it, this call killed the interpreter (a null C++ allocator).
    result = python("""
        import torch, torch_fl
        from fl_runtime.errors import DeviceNotFoundError
        s = torch.UntypedStorage(16, device="fl:0")
        assert s.nbytes() == 16 and s.device == torch.device("fl:0")
        try:
            torch.UntypedStorage(4, device="fl:9")
        except DeviceNotFoundError as exc:
            print("clear:", exc)
    """)
    assert result.returncode == 0, result.stderr
    assert "clear: fl:9 does not exist" in result.stdout


def test_cpu_storages_are_unchanged(fl):
    cpu = torch.UntypedStorage(3)
    assert cpu.device.type == "cpu" and cpu.nbytes() == 3 and not cpu.is_fl
    assert torch.UntypedStorage([1, 2]).tolist() == [1, 2]
    assert torch.UntypedStorage(2, device="cpu").nbytes() == 2
    with pytest.raises(DeviceNotFoundError):
        torch.UntypedStorage(2, device="fl:42")


def test_unsupported_constructor_forms_say_what_works(fl):
    with pytest.raises(TypeError, match="UntypedStorage\\(nbytes\\)"):
        torch.UntypedStorage(2, 3, device="fl")


def test_storage_moves_and_is_fl(fl):
    cpu = torch.arange(6, dtype=torch.float32).untyped_storage()
    assert not cpu.is_fl
    moved = cpu.fl()
    assert moved.is_fl and moved.device == torch.device("fl:0")
    assert moved.cpu().tolist() == cpu.tolist()
    assert cpu.fl(1).device == torch.device("fl:1")
    assert moved.fl(0) is moved or moved.fl(0).data_ptr() == moved.data_ptr()


def test_typed_and_untyped_storages_agree(fl):
    x = torch.arange(4.0, device="fl")
    typed, untyped = x.storage(), x.untyped_storage()
    assert typed.is_fl and untyped.is_fl
    assert typed.dtype == torch.float32 and typed.size() == 4 and untyped.nbytes() == 16
    assert typed._untyped_storage.data_ptr() == untyped.data_ptr()
    made = torch.TypedStorage(4, dtype=torch.float64, device="fl")
    assert made.is_fl and made.size() == 4 and made._untyped_storage.nbytes() == 32
    host = torch.TypedStorage([1.5, 2.5], dtype=torch.float32)
    on_fl = host.fl()
    assert on_fl.is_fl and on_fl.dtype == torch.float32 and on_fl.cpu().tolist() == host.tolist()


def test_typed_storage_of_a_dtype_the_abi_lacks_is_refused(fl):
    with pytest.raises(RuntimeError, match="uint16 dtype is not supported"):
        torch.TypedStorage(2, dtype=torch.uint16).fl()


def test_resizing_an_fl_storage_is_a_clear_error_on_the_python_route(python):
    """Without the native bridge PyTorch cannot resize an fl storage: a clear error, nothing
    lost (the bridge's resizes: tests/runtime/test_storage_resize.py)."""
    result = python("""
        import torch, torch_fl
        from fl_runtime.errors import NativeBridgeOffError
        x = torch.ones(3, device="fl")
        storage = x.untyped_storage()
        try:
            storage.resize_(32)
        except NativeBridgeOffError as exc:
            assert "t.resize_(...) works without it" in str(exc) and "TORCH_FL_BRIDGE=0" in str(exc)
        else:
            raise AssertionError("resized without the bridge")
        assert storage.nbytes() == 12 and torch.equal(x.cpu(), torch.ones(3))
        cpu = torch.UntypedStorage(2)
        cpu.resize_(5)                                     # CPU storages resize as before
        assert cpu.nbytes() == 5
        x.resize_(8)                                       # the tensor route works on fl
        assert x.untyped_storage().nbytes() >= 32
        print("ok")
    """, env=PYTHON_ROUTE)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr