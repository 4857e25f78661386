"""Device memory is not host memory: a stray host access is caught, not silently accepted."""


def test_host_write_into_device_memory_crashes(python):
    result = python("""
        import ctypes, torch, torch_fl
        x = torch.zeros(1024, device="fl:0")
        print("address", hex(x.data_ptr()), flush=True)
        ctypes.memset(x.data_ptr(), 0x7f, 16)      # a stray host write
        print("WRITE ACCEPTED", flush=True)
    """)
    assert "address" in result.stdout
    assert "WRITE ACCEPTED" not in result.stdout
    assert result.returncode == -11, (result.returncode, result.stderr[-2000:])   # SIGSEGV


def test_host_read_of_device_memory_crashes(python):
    result = python("""
        import ctypes, torch, torch_fl
        x = torch.ones(16, device="fl:0")
        print(ctypes.c_float.from_address(x.data_ptr()).value, flush=True)
    """)
    assert result.returncode == -11 and "1.0" not in result.stdout


def test_torch_refuses_host_views_of_fl_tensors(fl):
    import pytest
    import torch
    x = torch.ones(4, device="fl:0")
    with pytest.raises((TypeError, RuntimeError)):   # RuntimeError when NumPy is absent
        x.numpy()
