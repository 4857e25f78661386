"""PyTorch's OpenReg storage and serialization tests, ported to fl on the native bridge.

Source: pytorch/pytorch test/cpp_extensions/open_registration_extension/torch_openreg/tests/
test_storage.py.  Each test keeps the original's name and intent; the device is "fl".

Not ported, because they test OpenReg's own tensor metadata: test_copy_backend_meta,
test_serialization_metadata_preservation, test_fake_tensor_metadata_preservation and
test_fake_tensor_metadata_preservation_functional (and the metadata half of test_serialization).
torch._utils.set_tensor_metadata works only for a backend that registers BackendMeta
serialization functions in C++ (OpenReg registers its own); fl tensors carry no backend
metadata, so there is nothing to preserve.

Changed: test_open_device_numpy_serialization loads the legacy
_rebuild_device_tensor_from_numpy pickle from a file written here (the original embeds bytes
that name "openreg:0"; PyTorch no longer writes this form).
"""
from __future__ import annotations

import io
import unittest.mock

import numpy
import pytest
import torch
from torch.serialization import safe_globals


@pytest.mark.skipif("not __import__('fl_runtime.bridge', fromlist=['x']).status().active",
                    reason="the Python route: pin_memory() is an ordinary CPU copy, is_pinned() False "
                           "(docs/users/limits.md); tests/runtime/test_pinned_memory.py checks it")
def test_rewrapped_storage(fl):
    pinned = torch.randn(10).pin_memory()
    rewrapped = torch.tensor((), dtype=torch.float32).set_(pinned.untyped_storage()[2:], size=(5,), stride=(1,),
                                                           storage_offset=0)
    assert rewrapped.is_pinned()
    assert pinned.data_ptr() != rewrapped.data_ptr()
    assert torch.equal(rewrapped.view(torch.uint8), pinned.view(torch.uint8)[2:22])     # the same bytes


def test_serialization(fl, tmp_path):
    assert torch.serialization.location_tag(torch.UntypedStorage(4, device=torch.device("fl"))) == "fl:0"
    assert torch.serialization.location_tag(torch.UntypedStorage(4, device=torch.device("fl:0"))) == "fl:0"
    restored = torch.serialization.default_restore_location(torch.empty(4, 4).storage(), "fl:0")
    assert restored.is_fl
    tensor = torch.randn(3, 3, device="fl")
    torch.save(tensor, tmp_path / "data.pt")
    loaded = torch.load(tmp_path / "data.pt")
    assert loaded.is_fl and torch.equal(loaded.cpu(), tensor.cpu())
    on_cpu = torch.load(tmp_path / "data.pt", map_location="cpu")
    assert not on_cpu.is_fl and torch.equal(on_cpu, tensor.cpu())


class _LegacyNumpyTensor:
    """Pickles as PyTorch's legacy form of a device tensor: its values as a numpy array."""

    def __init__(self, values: numpy.ndarray, device: str) -> None:
        self.values, self.device = values, device

    def __reduce__(self):
        return torch._utils._rebuild_device_tensor_from_numpy, (self.values, torch.float32, self.device, False)


def test_open_device_numpy_serialization(fl):
    buffer = io.BytesIO()
    torch.save({"x": _LegacyNumpyTensor(numpy.array([[1, 2, 3], [4, 5, 6]], dtype=numpy.float32), "fl:0")}, buffer)
    allowed = [numpy._core.multiarray._reconstruct, numpy.ndarray, numpy.dtype, numpy.dtypes.Float32DType,
               torch._utils._rebuild_device_tensor_from_numpy]
    with safe_globals(allowed):
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=True)
        buffer.seek(0)
        loaded_cpu = torch.load(buffer, weights_only=True, map_location="cpu")
    expected = torch.tensor([[1, 2, 3], [4, 5, 6]], dtype=torch.float32, device="fl")
    assert loaded["x"].device == torch.device("fl:0") and torch.equal(loaded["x"].cpu(), expected.cpu())
    assert loaded_cpu["x"].is_cpu and torch.equal(loaded_cpu["x"], expected.cpu())


def test_open_device_cpu_serialization(fl, tmp_path):
    with unittest.mock.patch.object(torch._C, "_has_storage", return_value=False):
        x = torch.randn(2, 3)
        x_fl = x.to("fl")
        rebuild = x_fl._reduce_ex_internal(torch.serialization.DEFAULT_PROTOCOL)[0]
        assert rebuild is torch._utils._rebuild_device_tensor_from_cpu_tensor
        torch.save({"x": x_fl}, tmp_path / "sd.pt")
        loaded = torch.load(tmp_path / "sd.pt", weights_only=True)
        loaded_cpu = torch.load(tmp_path / "sd.pt", weights_only=True, map_location="cpu")
        assert not loaded["x"].is_cpu and torch.equal(loaded["x"].cpu(), x)
        assert loaded_cpu["x"].is_cpu and torch.equal(loaded_cpu["x"], x)
        with pytest.raises(RuntimeError, match="Cannot serialize tensors on backends with no storage under "
                                               "skip_data context manager"):
            with torch.serialization.skip_data():
                torch.save({"x": x_fl}, tmp_path / "skipped.pt")


def test_serialization_map_location_cpu(fl, tmp_path):
    tensor = torch.randn(3, 3, device="fl")
    torch.save(tensor, tmp_path / "data.pt")
    loaded = torch.load(tmp_path / "data.pt", map_location="cpu")
    assert loaded.is_cpu and torch.equal(loaded, tensor.cpu())


def test_serialization_map_location_device(fl, tmp_path):
    tensor = torch.randn(3, 3, device="fl:0")
    torch.save(tensor, tmp_path / "data.pt")
    loaded = torch.load(tmp_path / "data.pt", map_location="fl:1")
    assert loaded.device.index == 1 and torch.equal(loaded.cpu(), tensor.cpu())


def test_serialization_storage_location_tag(fl):
    assert torch.serialization.location_tag(torch.UntypedStorage(4, device=torch.device("fl:1"))) == "fl:1"
    assert torch.serialization.location_tag(torch.UntypedStorage(4, device=torch.device("fl"))) == "fl:0"


def test_serialization_default_restore_location(fl):
    cpu = torch.empty(4, 4).storage()
    assert torch.serialization.default_restore_location(cpu, "fl:0").is_fl
    restored = torch.serialization.default_restore_location(cpu, "fl:1")
    assert restored.is_fl and restored.device == torch.device("fl:1")
