"""`torch.accelerator` on fl, as device-agnostic code (accelerate, torchtitan) calls it.

Every figure is checked against `torch.fl`'s own.  On the Python route PyTorch's C++
answers are routed to torch.fl (fl_runtime/integration/accelerator.py); with the native
bridge they come from its C++ allocator and device guard: the same assertions hold on both,
so the last test runs this file again in a child on the Python route.
PyTorch's CUDA builds (the 2.14 and 2.15 wheels) name CUDA the accelerator even on a
machine without a GPU, so there fl is not `torch.accelerator`'s device and these skip.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from conftest import PYTHON_ROUTE, ROOT
from fl_runtime import bridge


@pytest.fixture
def acc(fl):
    current = torch.accelerator.current_accelerator()
    if current is None or current.type != "fl":
        pytest.skip(f"PyTorch's current accelerator is {current}, not fl (a CUDA build of PyTorch)")
    previous = torch.accelerator.current_device_index()
    yield torch.accelerator
    torch.accelerator.set_device_index(previous)


def test_the_current_accelerator_is_fl_with_every_device(acc):
    assert acc.is_available() and acc.device_count() == torch.fl.device_count() >= 2


@pytest.mark.parametrize("index", [0, 1])
def test_memory_figures_are_torch_fl_figures(acc, index):
    keep = [torch.ones(1000 + 512 * k, device=f"fl:{index}") for k in range(3)]
    del keep[1]
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
        assert getattr(acc, name)(index) == getattr(torch.fl, name)(index), name
    assert acc.memory_allocated(index) >= sum(t.numel() * 4 for t in keep)
    # PyTorch's own statistics dictionary (the bridge's route) has more keys than torch.fl
    # reports; every key both have must agree, and the core ones must be there
    stats, own = acc.memory_stats(index), torch.fl.memory_stats(index)
    assert {"allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
            "num_device_alloc", "num_ooms"} <= stats.keys()
    assert {key: stats[key] for key in stats.keys() & own.keys()} == {key: own[key] for key in stats.keys() & own.keys()}
    assert acc.get_memory_info(index) == torch.fl.mem_get_info(index)


def test_the_default_index_is_the_current_device(acc):
    keep = torch.ones(4096, device="fl:1")
    acc.set_device_index(1)
    assert acc.current_device_index() == torch.fl.current_device() == 1
    assert acc.memory_allocated() == torch.fl.memory_allocated(1)
    with acc.device_index(0):
        assert torch.fl.current_device() == acc.current_device_index() == 0
    assert torch.fl.current_device() == 1
    acc.set_device_index(-1)                  # "a no-op if this device index is negative"
    assert torch.fl.current_device() == 1
    del keep


def test_peak_and_accumulated_resets(acc):
    big = torch.empty(1 << 20, device="fl:0")
    del big
    acc.reset_peak_memory_stats(0)
    assert acc.max_memory_allocated(0) == acc.memory_allocated(0)
    torch.empty(1 << 21, device="fl:0")       # a fresh size: a vendor allocation
    assert acc.memory_stats(0)["num_device_alloc"] >= 1
    acc.reset_accumulated_memory_stats(0)
    assert acc.memory_stats(0)["num_device_alloc"] == 0 == torch.fl.memory_stats(0)["num_device_alloc"]


def test_empty_cache_returns_every_cached_block(acc):
    t = torch.empty(1 << 20, device="fl:0")
    del t
    assert acc.memory_reserved(0) > acc.memory_allocated(0)
    acc.empty_cache()
    assert acc.memory_reserved(0) == acc.memory_allocated(0) == torch.fl.memory_reserved(0)


def test_streams_are_torch_fl_streams(acc):
    side = torch.fl.Stream("fl:0")
    assert acc.current_stream(0) == torch.fl.current_stream(0)
    with torch.fl.stream(side):
        assert acc.current_stream(0) == side
    acc.set_stream(side)
    try:
        assert torch.fl.current_stream(0) == side
    finally:
        acc.set_stream(torch.fl.default_stream(0))
    assert acc.current_stream(0) == torch.fl.default_stream(0)


def test_synchronize_waits_for_every_stream_of_the_device(acc):
    """torch.accelerator.synchronize: all kernels in all streams, whichever thread queued them."""
    side = torch.fl.Stream("fl:0")
    x = torch.randn(512, 512, device="fl:0")
    with torch.fl.stream(side):
        for _ in range(8):
            y = x @ x
    acc.synchronize(0)
    assert side.query()
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu(), rtol=1e-4, atol=1e-3)


def test_device_capability_names_the_dtypes_the_device_stores(acc):
    supported = acc.get_device_capability("fl:0")["supported_dtypes"]
    assert {torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool} <= supported


def test_this_process_runs_the_route_it_was_started_for(acc):
    assert bridge.status().active == (os.environ.get("TORCH_FL_BRIDGE") != "0"), bridge.status().detail


def test_the_same_assertions_hold_on_the_python_route(acc):
    """This file's other tests, in a child started with TORCH_FL_BRIDGE=0."""
    child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
                            "-k", "not python_route"], capture_output=True, text=True, timeout=300,
                           env={**os.environ, **PYTHON_ROUTE, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert child.returncode == 0, child.stdout[-4000:] + child.stderr[-2000:]
    summary = child.stdout.strip().splitlines()[-1]
    assert "passed" in summary and "skipped" not in summary and "failed" not in summary, summary
