"""torch.fl, the torch.cuda-shaped device module, and torch.accelerator for fl.

torch.accelerator's answers (the accelerator, its count, availability, the current stream) come
from the native bridge's C++ device guard; tests/runtime/test_accelerator.py checks its figures on both
routes, tests/runtime/test_current_device.py where `device="fl"` lands.
"""
import pytest
import torch


def test_device_context_and_set_device(fl):
    assert torch.fl.current_device() == 0
    with torch.fl.device(1):
        assert torch.fl.current_device() == 1
        assert torch.empty(2, device="fl").device == torch.device("fl", 1)
        with torch.fl.device("fl:0"):
            assert torch.fl.current_device() == 0
        assert torch.fl.current_device() == 1
    assert torch.fl.current_device() == 0
    torch.fl.set_device(torch.device("fl", 1))
    try:
        assert torch.fl.current_device() == 1
    finally:
        torch.fl.set_device(0)
    with pytest.raises(fl.DeviceNotFoundError, match="fl:9 does not exist"):
        torch.fl.set_device(9)
    with pytest.raises(ValueError, match="expected an fl device"):
        torch.fl.set_device("cpu")


def test_names_properties_and_synchronize(fl):
    for spec in (None, 0, "fl:1", torch.device("fl", 1)):
        assert torch.fl.get_device_name(spec) == "Torch-FL Reference CPU Chip"
    props = torch.fl.get_device_properties(1)
    assert props.index == 1 and props.total_memory > 0 and props.vendor == "Torch-FL"
    a = torch.randn(300, 300, device="fl:1")
    b = a @ a
    for spec in (1, "fl:1", torch.device("fl", 1), None):
        torch.fl.synchronize(spec)
    assert torch.allclose(b.cpu(), a.cpu() @ a.cpu(), rtol=1e-4, atol=1e-3)


def test_torch_accelerator_answers_for_fl(fl):
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("fl")
    assert torch.accelerator.device_count() == torch.fl.device_count()
    stream = torch.accelerator.current_stream()
    assert stream.device_type == torch.fl.default_stream().device_type and stream.stream_id == 0
    assert stream == torch.fl.default_stream(0)      # the id PyTorch reports is our default stream's
