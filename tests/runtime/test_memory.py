"""torch.fl memory API over the caching allocator (docs/users/devices.md)."""
import gc
from types import SimpleNamespace

import pytest
import torch

from fl_runtime import abi
from fl_runtime.abi import ffi
from fl_runtime.errors import FLOutOfMemoryError, VendorError
from fl_runtime.ops.eager.launcher import _raise_launch_failure

MIB = 1 << 20


def test_allocated_peak_reserved_and_reset(fl):
    gc.collect()          # earlier tests' garbage must not be freed in the middle of the counts
    torch.fl.empty_cache()
    torch.fl.reset_peak_memory_stats(0)
    base = torch.fl.memory_allocated(0)
    x = torch.empty(4 * MIB // 4, device="fl:0")
    assert torch.fl.memory_allocated(0) == base + 4 * MIB
    assert torch.fl.max_memory_allocated(0) >= base + 4 * MIB
    assert torch.fl.memory_reserved(0) >= torch.fl.memory_allocated(0)
    del x
    assert torch.fl.memory_allocated(0) == base          # freed storages are accounted at once
    assert torch.fl.memory_reserved(0) >= 4 * MIB        # ... but the block stays cached
    assert torch.fl.max_memory_allocated(0) >= base + 4 * MIB
    torch.fl.reset_peak_memory_stats(0)
    assert torch.fl.max_memory_allocated(0) == base
    torch.fl.empty_cache()
    assert torch.fl.memory_reserved(0) == torch.fl.memory_allocated(0)
    assert torch.fl.max_memory_reserved(0) >= torch.fl.memory_reserved(0)


def test_memory_stats_summary_and_mem_get_info(fl):
    keep = torch.ones(1000, device="fl:1")
    stats = torch.fl.memory_stats("fl:1")
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                "reserved_bytes.all.peak", "num_alloc_retries", "num_ooms", "active.all.current"):
        assert isinstance(stats[key], int), key
    assert stats["allocated_bytes.all.current"] >= keep.numel() * 4
    summary = torch.fl.memory_summary(1)
    assert "fl:1" in summary and "Allocated (live tensors)" in summary and "Peak" in summary
    free, total = torch.fl.mem_get_info(1)
    assert total == torch.fl.get_device_properties(1).total_memory and 0 < free <= total


def test_per_process_memory_fraction_caps_allocation(fl):
    total = torch.fl.get_device_properties(1).total_memory
    torch.fl.set_per_process_memory_fraction(0.01, 1)
    try:
        try:
            torch.empty(total // 50, dtype=torch.uint8, device="fl:1")
            raise AssertionError("allocation above the fraction succeeded")
        except torch.OutOfMemoryError as exc:
            assert isinstance(exc, fl.FLOutOfMemoryError) and "memory_fraction 0.01" in str(exc)
        assert torch.fl.memory_stats(1)["num_ooms"] >= 1
    finally:
        torch.fl.set_per_process_memory_fraction(1.0, 1)
    torch.empty(total // 50, dtype=torch.uint8, device="fl:1")
    for bad in (0, 1.5, True):
        try:
            torch.fl.set_per_process_memory_fraction(bad)
            raise AssertionError(f"fraction {bad!r} accepted")
        except ValueError as exc:
            assert "(0, 1]" in str(exc)


def test_device_oom_empties_the_cache_retries_then_explains(python):
    # 64 MiB devices: 40 MiB cached + 40 MiB asked only fits after emptying the cache;
    # 100 MiB never fits.
    result = python("""
        import torch, torch_fl
        x = torch.empty(40 << 20, dtype=torch.uint8, device="fl:0"); del x
        y = torch.empty(40 << 20, dtype=torch.uint8, device="fl:1"); del y   # fl:1 stays cached
        z = torch.empty(48 << 20, dtype=torch.uint8, device="fl:0")
        print("retried", torch.fl.memory_stats(0)["num_alloc_retries"])
        try:
            torch.empty(100 << 20, dtype=torch.uint8, device="fl:0")
        except torch.OutOfMemoryError as exc:
            print("OOM", type(exc).__name__, exc)
    """, {"FL_REFERENCE_MEMORY_MB": "64"})
    assert result.returncode == 0, result.stderr
    assert "retried 1" in result.stdout
    message = result.stdout.split("OOM ", 1)[1]
    assert message.startswith("FLOutOfMemoryError")
    assert "fl:0 out of memory. Tried to allocate 100.00 MiB." in message
    assert "fl:0 has a total capacity of 64.00 MiB of which" in message
    assert "48.00 MiB allocated by tensors" in message
    # memory_fraction is already 1: no advice to raise it, none about a cap
    assert "memory_fraction" not in message and "To fit: free tensors" in message


def test_oom_inside_ops_raises_oom_and_frees_what_the_launch_allocated(python):
    # 64 MiB device: repeated matmul chains until memory runs out, the exception kept
    # (as a REPL keeps the last one); then a two-output op that fails at its second
    # output.  Every byte comes back once the user's tensors are dropped, and the exit is silent.
    result = python("""
        import gc, torch, torch_fl
        a = torch.randn(1024, 1024, device="fl:0")                  # 4 MiB
        before = torch.fl.memory_allocated(0)
        results, errors = [], []
        try:
            for _ in range(100):
                results.append((a @ a) @ a)      # the inner product is a temporary
        except torch.OutOfMemoryError as exc:
            errors.append(exc)
        print("MATMUL", type(errors[-1]).__name__, isinstance(errors[-1], torch_fl.FLOutOfMemoryError))
        results.clear()
        gc.collect()
        print("MATMUL-LEAK", torch.fl.memory_allocated(0) - before)

        x = torch.randn(4, 1 << 20, device="fl:0")                  # 16 MiB
        fill = [torch.empty(1 << 20, device="fl:0") for _ in range(10)]   # 40 MiB: 8 MiB left
        before_max = torch.fl.memory_allocated(0)
        try:
            torch.max(x, 0)          # values (4 MiB) fit, indices (int64, 8 MiB) do not
        except torch.OutOfMemoryError as exc:
            errors.append(exc)
        print("MAX", type(errors[-1]).__name__, len(errors))
        print("MAX-HELD", torch.fl.memory_allocated(0) - before_max)   # the exception is still alive
        del x, fill
        gc.collect()
        torch.fl.empty_cache()
        print("FINAL-LEAK", torch.fl.memory_allocated(0) - before,
              torch.fl.memory_reserved(0) - torch.fl.memory_allocated(0))
        print("HIDDEN", torch_fl.last_hidden_error())
        print("AGAIN", (a @ a).sum().item() != 0)
    """, {"FL_REFERENCE_MEMORY_MB": "64"})
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert lines["MATMUL"] == "FLOutOfMemoryError True"
    assert lines["MATMUL-LEAK"] == "0"
    assert lines["MAX"] == "FLOutOfMemoryError 2"
    assert lines["MAX-HELD"] == "0"
    assert lines["FINAL-LEAK"] == "0 0"
    assert lines["HIDDEN"] == "None" and lines["AGAIN"] == "True"


@pytest.mark.parametrize("pure_python_storage", ["0", "1"])
def test_tensor_freed_while_python_raises_gives_its_block_back(python, pure_python_storage):
    # The clone dies while the interpreter unwinds the RuntimeError, with the exception
    # still pending; its deleter must still give the block back (50 times: no leak),
    # never fail inside the C callback, and report the error it could not pass on.
    result = python("""
        import gc, torch, torch_fl
        x = torch.tensor([True, False] * 512, device="fl:0")
        before = torch.fl.memory_allocated(0)
        for _ in range(50):
            try:
                x.clone().__ior__(3)
            except (RuntimeError, SystemError):
                pass
        gc.collect()
        print("LEAK", torch.fl.memory_allocated(0) - before)
        print("HIDDEN", type(torch_fl.last_hidden_error()).__name__)
    """, {"TORCH_FL_PURE_PYTHON": pure_python_storage})
    assert result.returncode == 0, result.stderr
    assert "LEAK 0" in result.stdout
    assert "Exception ignored" not in result.stderr
    if pure_python_storage == "0":     # the compiled deleter never enters Python: nothing is hidden
        assert result.stderr == "" and "HIDDEN NoneType" in result.stdout
    # every stderr line is the runtime's own report of the hidden error (if the interpreter hid it)
    for line in result.stderr.splitlines():
        assert line.startswith("torch_fl ERROR: an fl tensor was freed while Python was raising RuntimeError"), line
    if result.stderr:
        assert "HIDDEN RuntimeError" in result.stdout


def test_vendor_out_of_memory_from_a_kernel_is_an_out_of_memory_error():
    message = ffi.new("char[]", b"scratch buffer of 1 GiB")
    checked = []

    def check(status, call):         # Plugin.check: raises for any non-success status
        checked.append(call)
        raise VendorError(call, status, "FL_ERROR_X", "", "fake")
    plugin = SimpleNamespace(api=SimpleNamespace(last_error_message=lambda: message), name="fake", check=check)
    device = SimpleNamespace(index=3, plugin=plugin)
    with pytest.raises(torch.OutOfMemoryError) as caught:
        _raise_launch_failure(device, abi.ERROR_OUT_OF_MEMORY, "aten::mm")
    assert isinstance(caught.value, FLOutOfMemoryError)
    assert "launch_kernel(aten::mm) on fl:3" in str(caught.value) and "scratch buffer of 1 GiB" in str(caught.value)
    with pytest.raises(VendorError):
        _raise_launch_failure(device, abi.ERROR_NOT_SUPPORTED + 1000, "aten::mm")
    assert checked == ["launch_kernel(aten::mm) on fl:3"]
