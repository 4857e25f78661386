"""Copies on one fl device served in C++ by the native bridge (ops/owned/copies.py,
bridge/csrc/eager_kernel.h, bridge/csrc/to_copy_kernel.h; docs/users/native-bridge.md "Eager
ops"): copy_, clone, contiguous and Tensor.to on the device give what PyTorch's CPU gives, and
once a signature's copy has its launch program no call of it enters Python; a lazy view, a
profile and a second stream still take the Python kernel.  The value tests also run on the
Python route (TORCH_FL_BRIDGE=0)."""
from __future__ import annotations

import logging
import sys

import pytest
import torch

from fl_runtime import bridge
from fl_runtime.logs import logger
from fl_runtime.ops import accounting

_needs_bridge = pytest.mark.skipif("not __import__('fl_runtime.bridge', fromlist=['x']).status().active",
                                   reason="the Python route: no C++ kernels to test")


def _inputs(device: str) -> dict:
    g = torch.Generator().manual_seed(7)
    return {"x": torch.randn(16, generator=g).to(device), "m": torch.randn(4, 4, generator=g).to(device),
            "row": torch.randn(4, generator=g).to(device), "i": torch.randint(-50, 50, (3, 5), generator=g).to(device),
            "y": torch.zeros(16, device=device), "yd": torch.zeros(16, device=device, dtype=torch.float64),
            "yi": torch.zeros(16, device=device, dtype=torch.int32), "ym": torch.zeros(4, 4, device=device)}


def _copies(t: dict) -> dict:
    """name -> a copy of the inputs `t` on their device, returning the tensor it made or wrote."""
    return {
        "copy_ contiguous": lambda: t["y"].copy_(t["x"]),
        "copy_ non_blocking": lambda: t["y"].copy_(t["x"] * 2, non_blocking=True),
        "copy_ strided source": lambda: t["ym"].copy_(t["m"].t()),
        "copy_ strided target": lambda: t["ym"].t().copy_(t["m"] + 1),
        "copy_ broadcast": lambda: t["ym"].copy_(t["row"]),
        "copy_ float to double": lambda: t["yd"].copy_(t["x"]),
        "copy_ float to int32": lambda: t["yi"].copy_(t["x"] * 10),
        "clone": lambda: t["x"].clone(),
        "clone strided": lambda: t["m"].t().clone(),
        "contiguous": lambda: t["m"].t().contiguous(),
        "to float64": lambda: t["x"].to(torch.float64),
        "double()": lambda: t["m"].t().double(),
        "to float16": lambda: t["x"].to(torch.float16),
        "int64 to float": lambda: t["i"].float(),
        "to same device and dtype, copy=True": lambda: t["x"].to(t["x"].device, torch.float64, copy=True),
        "to contiguous_format": lambda: t["m"].t().to(memory_format=torch.contiguous_format),
    }


def _as_cpu(value: torch.Tensor) -> torch.Tensor:
    return value.cpu()


def test_copies_on_the_device_match_cpu(fl):
    """Every copy, three times (its first call records a program, the later ones replay it)."""
    want = {name: run().clone() for name, run in _copies(_inputs("cpu")).items()}
    copies = _copies(_inputs("fl:0"))
    for _ in range(3):
        for name, run in copies.items():
            got = _as_cpu(run())
            assert got.dtype == want[name].dtype and got.stride() == want[name].stride(), name
            assert torch.equal(got, want[name]), name


@_needs_bridge
def test_steady_state_copies_never_enter_python(fl):
    """After a warm-up, neither the bridge's counters (its Python kernels, its GIL entries) nor
    a profile function (any Python frame, torch.library's own included) see a call."""
    native = fl.runtime().launcher.native
    copies = _copies(_inputs("fl:0"))
    for _ in range(3):
        for run in copies.values():
            run()
    fl.synchronize()
    frames = []

    def profile(frame, event, arg):
        if event == "call":
            frames.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")
    before = native.eager_stats()["python_calls"], native.python_entries()
    sys.setprofile(profile)
    try:
        for _ in range(10):
            for run in copies.values():
                run()
    finally:
        sys.setprofile(None)
    after = native.eager_stats()["python_calls"], native.python_entries()
    assert after == before, "a steady-state copy went through Python"
    assert [f for f in frames if "test_native_copies" not in f] == []


@_needs_bridge
def test_served_copies_are_counted_once_each(fl):
    x, y = torch.ones(16, device="fl:0"), torch.zeros(16, device="fl:0")
    y.copy_(x), x.clone(), x.to(torch.float64)
    before = accounting.counts()[("aten::copy_", "native")]
    for _ in range(7):
        y.copy_(x)
        x.clone()                   # empty_strided + copy_
        x.to(torch.float64)         # empty_like + copy_
    assert accounting.counts()[("aten::copy_", "native")] - before == 21


def _python_calls(fl) -> int:
    return fl.runtime().launcher.native.eager_stats()["python_calls"]


@_needs_bridge
def test_a_conjugate_view_takes_the_python_kernel_every_time(fl):
    g = torch.Generator().manual_seed(3)
    z = torch.randn(8, dtype=torch.complex64, generator=g)
    src, dst = z.to("fl:0"), torch.zeros(8, dtype=torch.complex64, device="fl:0")
    dst.copy_(src.conj()), dst.copy_(src.conj())
    before = _python_calls(fl)
    for _ in range(3):
        dst.copy_(src.conj())
    assert _python_calls(fl) - before >= 3      # copies.py _copy_lazy_views, and its host copies
    assert torch.equal(dst.cpu(), z.conj().resolve_conj())
    assert torch.equal(src.conj().clone().resolve_conj().cpu(), z.conj().resolve_conj())


@_needs_bridge
def test_a_profile_sees_every_copy(fl):
    import torch_fl
    x, y = torch.ones(16, device="fl:0"), torch.zeros(16, device="fl:0")
    y.copy_(x), y.copy_(x)
    before = _python_calls(fl)
    with torch_fl.profile() as prof:
        for _ in range(4):
            y.copy_(x)
    assert _python_calls(fl) - before == 4
    assert sum(row.count for row in prof.rows.values() if row.op == "aten::copy_") == 4
    after = _python_calls(fl)
    y.copy_(x)
    assert _python_calls(fl) == after, "after the profile the C++ kernel serves the copy again"


@_needs_bridge
def test_converting_host_copies_stay_in_python_and_stay_right(fl):
    """To and from the host: raw copies are C++ (test_native_host_copies.py), a converting or
    broadcasting one is the Python kernel's (copies.py)."""
    g = torch.Generator().manual_seed(5)
    host = torch.randn(16, generator=g)
    x = host.to("fl:0")
    x.cpu(), x.cpu()
    before = _python_calls(fl)
    assert torch.equal(x.cpu(), host)
    assert _python_calls(fl) == before
    assert torch.equal(x.to("cpu", torch.float64), host.double())
    y = torch.empty(4, 16, device="fl:0")
    y.copy_(host * 3)
    assert torch.equal(y.cpu(), (host * 3).expand(4, 16))
    assert _python_calls(fl) - before >= 2


def test_to_copy_errors_and_pinned_requests_are_the_python_kernels(fl):
    """A dtype fl does not store fails in empty_like on both routes; pin_memory=True goes to
    the Python kernel (copies.py _to_copy), which gives an ordinary fl tensor."""
    from fl_runtime.errors import UnsupportedDtypeError
    x = torch.ones(4, device="fl:0")
    for _ in range(2):
        with pytest.raises(UnsupportedDtypeError, match="complex128"):
            x.to(torch.complex128)
        pinned = torch.ops.aten._to_copy(x, dtype=torch.float64, pin_memory=True)
        assert pinned.device == x.device and pinned.dtype == torch.float64
        assert torch.equal(pinned.cpu(), torch.ones(4, dtype=torch.float64))


@_needs_bridge
def test_a_changed_to_copy_schema_keeps_the_python_kernel(fl):
    """A torch whose _to_copy schema is not the one the C++ kernel reads by position (here a
    stand-in schema string) registers no C++ kernel: copies.register_to_copy keeps the Python
    _to_copy, says why in a debug log, and the runtime's start does not fail."""
    from fl_runtime.ops.owned import copies

    class Library:
        impls: list = []

        def impl(self, name, kernel, key):
            self.impls.append((name, kernel, key))

    native = fl.runtime().launcher.native
    installed = str(torch.ops.aten._to_copy.default._schema)
    changed = installed.replace("Layout? layout=None, ", "")
    library = Library()
    records = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        why = copies.register_to_copy(library, native, changed)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert why == "aten::_to_copy has 6 arguments, not 7"
    assert library.impls == [("_to_copy", copies._to_copy, "PrivateUse1")]
    assert [r.getMessage() for r in records] == ["_to_copy stays in Python: aten::_to_copy has 6 arguments, not 7"]
    renamed = installed.replace("dtype=None", "scalar_type=None")
    assert copies.register_to_copy(Library(), native, renamed) == "aten::_to_copy's argument 1 is scalar_type, not dtype"
    assert torch.equal(torch.ones(3, device="fl:0").to(torch.float64).cpu(), torch.ones(3, dtype=torch.float64))


def test_a_hidden_copy_kernel_takes_the_host_route_with_the_same_values(fl):
    """A vendor without copy_ (a kernel table without it: its epoch changes): the program
    recorded before is not replayed (no launch is counted), a converting copy goes through
    the host."""
    x = torch.arange(16, dtype=torch.float32, device="fl:0")
    yd = torch.zeros(16, dtype=torch.float64, device="fl:0")
    yd.copy_(x), yd.copy_(x)
    devices = fl.runtime().devices
    hidden = [device.kernels.pop("copy_", None) for device in devices]
    try:
        yd.zero_()
        launched = accounting.counts()[("aten::copy_", "native")]
        yd.copy_(x * 2)
        assert accounting.counts()[("aten::copy_", "native")] == launched, "the vendor's copy_ ran"
        assert torch.equal(yd.cpu(), torch.arange(16, dtype=torch.float64) * 2)
    finally:
        for device, choice in zip(devices, hidden):
            if choice is not None:
                device.kernels["copy_"] = choice
    yd.copy_(x)
    assert torch.equal(yd.cpu(), torch.arange(16, dtype=torch.float64))


@_needs_bridge
def test_copies_after_a_second_stream_stay_in_cpp_and_wait_for_its_writes(script):
    """In a process of its own (the first second stream switches tracking on): copies on the
    device read what another stream wrote only once it is written (stream_order.h), in C++."""
    result = script("""
        import torch, torch_fl
        native = torch_fl.runtime().launcher.native
        x = torch.ones(1 << 16, device="fl:0")
        y = torch.empty(1 << 16, device="fl:0")
        a = torch.randn(400, 400, device="fl:0")
        m = torch.empty(400, 400, device="fl:0")
        for _ in range(2):
            y.copy_(x); x.clone(); x.double(); m.copy_(a @ a); (a @ a).double()
        before = native.eager_stats()["python_calls"]
        y.copy_(x); x.clone(); x.double()
        assert native.eager_stats()["python_calls"] == before, "steady copies in C++"
        side = torch.fl.Stream()
        with torch.fl.stream(side):
            z = x * 3; z = x * 3
            p = a @ a; p = a @ a          # slow, on the side stream
        before = native.eager_stats()["python_calls"]
        y.copy_(z)
        m.copy_(p)
        w = p.double()
        assert native.eager_stats()["python_calls"] == before, "copies after a second stream: C++"
        expected = a.cpu() @ a.cpu()
        assert torch.equal(y.cpu(), torch.full((1 << 16,), 3.0))
        torch.testing.assert_close(m.cpu(), expected, rtol=1e-4, atol=1e-3)
        torch.testing.assert_close(w.cpu(), expected.double(), rtol=1e-4, atol=1e-3)
        print("ok")
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
