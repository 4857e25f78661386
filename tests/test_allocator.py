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
    assert "OOM FLOutOfMemoryError" in result.stdout and "memory_fraction" in result.stdout
    assert "tried to allocate 1073741824 bytes" in result.stdout
