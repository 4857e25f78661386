"""torch.fl memory API over the caching allocator (README "Device API")."""
import gc

import torch

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
    assert "tried to allocate 104857600 bytes" in message and "50331648 bytes in use" in message
    assert "limit 67108864 of 67108864 bytes" in message and "cached" in message
