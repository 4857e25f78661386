"""Allocation through the vendor honours alignment; the caching pool
makes a steady loop allocation-free at the vendor."""
import torch


def test_vendor_allocations_are_aligned(fl):
    alignment = fl.list_devices()[0]["alignment"]
    for n in (1, 3, 100, 4097):
        x = torch.empty(n, device="fl:0")
        assert x.data_ptr() % alignment == 0


def test_steady_training_loop_makes_no_vendor_allocations(fl):
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to("fl:0")
    opt = torch.optim.Adam(model.parameters())
    x, y = torch.randn(16, 32).to("fl:0"), torch.randint(0, 4, (16,)).to("fl:0")

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    for _ in range(3):
        step()
    stats = fl.runtime().allocators[0].stats
    before = stats.vendor_mallocs
    for _ in range(10):
        step()
    assert stats.vendor_mallocs == before
    assert stats.cache_hits > 0


def test_freed_memory_is_reused(fl):
    allocator = fl.runtime().allocators[0]
    x = torch.empty(1 << 16, device="fl:0")
    address = x.data_ptr()
    del x
    y = torch.empty(1 << 16, device="fl:0")
    assert y.data_ptr() == address and allocator.stats.allocated >= y.numel() * 4


def test_out_of_memory_is_a_torch_oom_with_figures(python, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("devices:\n  - type: reference\n    memory_fraction: 0.01\n")
    result = python("""
        import torch, torch_fl
        try:
            torch.empty(1 << 28, device="fl:0")
        except torch.OutOfMemoryError as exc:
            print("OOM", type(exc).__name__, exc)
    """, {"TORCH_FL_CONFIG": str(path), "FL_REFERENCE_MEMORY_MB": "1024"})
    assert result.returncode == 0, result.stderr
    assert "OOM FLOutOfMemoryError" in result.stdout and "memory_fraction 0.01" in result.stdout
    assert "fl:0 out of memory. Tried to allocate 1.00 GiB." in result.stdout
    assert "fl:0 has a total capacity of 1.00 GiB of which" in result.stdout
    assert "raise memory_fraction" in result.stdout


def test_empty_cache_gives_back_only_blocks_freed_before_its_wait(fl, monkeypatch):
    """A block another thread frees while empty_cache waits for the device may still be read
    by work that thread enqueued after the wait began: it must stay held (and pooled), or the
    vendor could hand the same memory to a new tensor while that work runs (a wrong value)."""
    allocator = fl.runtime().allocators[0]
    allocator.empty_cache()
    early = torch.empty(1 << 16, device="fl:0")
    early_address = early.data_ptr()
    del early                                     # freed before empty_cache: given back
    late = [torch.empty(1 << 17, device="fl:0")]
    late_address = late[0].data_ptr()
    wait_for_device = allocator._synchronize_device

    def another_thread_frees_during_the_wait():
        wait_for_device()
        late.clear()
        torch.empty(8, device="fl:0")             # ... and allocates, which collects what it freed
    monkeypatch.setattr(allocator, "_synchronize_device", another_thread_frees_during_the_wait)
    allocator.empty_cache()
    assert not allocator.holds(early_address)
    assert allocator.holds(late_address)
    again = torch.empty(1 << 17, device="fl:0")   # the late block is reused in stream order
    assert again.data_ptr() == late_address
