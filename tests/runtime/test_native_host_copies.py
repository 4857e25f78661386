"""Copies between the host and an fl device served in C++ by the native bridge
(bridge/csrc/host_copies.h, pending_uploads.h; ops/owned/copies.py; docs/users/native-bridge.md
"Eager ops"): `.cpu()`, `.item()`, copy_ into a CPU tensor and small uploads give what PyTorch's
CPU gives, on both routes; an upload's source may change as soon as copy_ returns; in the
steady state none of them enters Python (two probes, each shown to move); a converting, large
or second-stream copy still takes the Python kernel; a vendor error raises the Python route's
VendorError."""
from __future__ import annotations

import sys
import threading

import pytest
import torch
from conftest import run_python
# Cross-stream tracking off for each test, as there (an autouse fixture, found by its name here).

from fl_runtime.ops.owned.copies import STAGE_BYTES

_needs_bridge = pytest.mark.skipif("not __import__('fl_runtime.bridge', fromlist=['x']).status().active",
                                   reason="the Python route: no C++ kernels to test")

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.uint8,
          torch.bool]
SHAPES = [(), (1,), (16,), (3, 5), (2, 3, 4)]


def _host(shape: tuple, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 100).to(dtype)
    return torch.randint(0, 200, shape, generator=g).to(dtype)


def _round_trips(host: torch.Tensor, device: str = "fl:0") -> list[torch.Tensor]:
    """Every served shape of host copy, each result back on the host: upload, download into a
    new tensor and into a given one, a row view (a storage offset) both ways, `.item()`."""
    on_fl = host.to(device)
    results = [on_fl.cpu(), torch.empty_like(host).copy_(on_fl)]
    into = torch.zeros((2, *host.shape), dtype=host.dtype, device=device)
    into[1].copy_(host)                                   # a target with a storage offset
    results.append(into[1].cpu())
    if host.numel():
        results.append(torch.tensor(on_fl.reshape(-1)[-1].item(), dtype=host.dtype))
    return results


def _expected(host: torch.Tensor) -> list[torch.Tensor]:
    expected = [host, host, host]
    if host.numel():
        expected.append(torch.tensor(host.reshape(-1)[-1].item(), dtype=host.dtype))
    return expected


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_host_copies_match_cpu(fl, dtype):
    for shape in SHAPES:
        host = _host(shape, dtype)
        for _ in range(3):              # the first call of a signature and the steady state
            for got, want in zip(_round_trips(host), _expected(host)):
                assert got.dtype == want.dtype and got.shape == want.shape, (shape, dtype)
                assert torch.equal(got, want), (shape, dtype)


def test_item_gives_the_python_scalar_type(fl):
    for value, dtype in ((2.5, torch.float32), (-7, torch.int64), (True, torch.bool), (0.5, torch.float16)):
        x = torch.tensor([value], dtype=dtype, device="fl:0")
        for _ in range(2):
            got = x.item()
            assert type(got) is type(value) and got == value


def test_the_python_route_gives_the_same_values(fl):
    """The same round trips with TORCH_FL_BRIDGE=0, against PyTorch's CPU in that process."""
    result = run_python(f"""
        import torch, torch_fl, sys
        sys.path.insert(0, "tests/runtime"); sys.path.insert(0, "tests")
        from test_native_host_copies import DTYPES, SHAPES, _host, _round_trips, _expected
        from fl_runtime import bridge
        assert not bridge.status().active
        for dtype in DTYPES:
            for shape in SHAPES:
                host = _host(shape, dtype)
                for got, want in zip(_round_trips(host), _expected(host)):
                    assert torch.equal(got, want), (shape, dtype)
        print("ok")
    """, env={"TORCH_FL_BRIDGE": "0"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def test_a_staged_upload_keeps_the_values_of_when_copy_returned(fl, monkeypatch):
    """Behind queued work, a small upload neither waits for its stream nor reads the caller's
    tensor after copy_ returns: changing it at once changes nothing on the device."""
    from fl_runtime.devices.streams import Stream
    waits = []
    original = Stream.synchronize
    monkeypatch.setattr(Stream, "synchronize", lambda self: (waits.append(self), original(self))[1])
    a = torch.randn(500, 500, device="fl:0")
    targets = []
    for i in range(40):
        if i % 10 == 0:
            busy = a @ a                                  # queued work the uploads must not wait for
        src = torch.full((4, 4), float(i))
        dst = torch.empty(4, 4, device="fl:0")
        dst.copy_(src)
        src.fill_(-1.0)                                   # the caller reuses its buffer right away
        targets.append(dst)
    assert waits == []
    assert all(torch.equal(t.cpu(), torch.full((4, 4), float(i))) for i, t in enumerate(targets))
    assert busy.shape == (500, 500)
    copies, held = fl.runtime().uploads.pending(0)
    assert copies <= 40 and held <= 40 * 64


def test_a_large_upload_is_right(fl):
    host = torch.randn(STAGE_BYTES // 4 * 3 + 5)
    on_fl = host.to("fl:0")
    host_copy = host.clone()
    host.zero_()
    assert torch.equal(on_fl.cpu(), host_copy)


def test_two_threads_on_two_devices_get_exact_values(fl):
    errors: list[BaseException] = []

    def body(device: int) -> None:
        try:
            torch.fl.set_device(device)
            work = torch.randn(100, 100, device=f"fl:{device}")
            for k in range(200):
                if k % 25 == 0:
                    work = work @ work / 100
                host = torch.arange(12, dtype=torch.int64) + device * 100000 + k
                on_fl = host.to(f"fl:{device}")
                host.fill_(-1)
                want = torch.arange(12, dtype=torch.int64) + device * 100000 + k
                assert torch.equal(on_fl.cpu(), want), (device, k)
                assert on_fl[5].item() == device * 100000 + k + 5, (device, k)
        except BaseException as exc:      # reported in the main thread
            errors.append(exc)
    threads = [threading.Thread(target=body, args=(d,)) for d in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def _steady_host_copies() -> list:
    x = torch.arange(16, dtype=torch.float32, device="fl:0")
    host = torch.arange(16, dtype=torch.float32)
    y = torch.empty(16, device="fl:0")
    out = torch.empty(16)
    return [lambda: x.cpu(), lambda: x[3].item(), lambda: y.copy_(host), lambda: host.to("fl:0"),
            lambda: out.copy_(x)]


@_needs_bridge
def test_steady_state_host_copies_never_enter_python(fl):
    """Both probes: the bridge's own counts (calls handed to Python, GIL entries) and a profile
    function that sees any Python frame; each moves for a converting copy, which stays in Python."""
    native = fl.runtime().launcher.native
    runs = _steady_host_copies()
    for run in runs * 3:
        run()
    frames = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename != __file__:
            frames.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    def measure(calls) -> tuple[int, int, int]:
        del frames[:]
        before = native.eager_stats()["python_calls"], native.python_entries()
        sys.setprofile(profile)
        try:
            for run in calls:
                run()
        finally:
            sys.setprofile(None)
        after = native.eager_stats()["python_calls"], native.python_entries()
        return after[0] - before[0], after[1] - before[1], len(frames)

    assert measure(runs * 20) == (0, 0, 0)
    x = torch.arange(16, dtype=torch.float32, device="fl:0")
    python_calls, gil, seen = measure([lambda: x.to("cpu", torch.float64)] * 3)
    assert python_calls >= 3 and gil >= 3 and seen > 0, "the probes must see a copy that runs in Python"


@_needs_bridge
def test_a_profile_sends_host_copies_to_python_and_a_second_stream_does_not(script):
    """In a process of its own (a second stream switches cross-stream tracking on for good)."""
    result = script("""
        import torch, torch_fl
        native = torch_fl.runtime().launcher.native
        x = torch.arange(16.0, device="fl:0")
        host = torch.ones(16)
        for _ in range(2):
            x.cpu(); x[2].item(); x.copy_(host)
        calls = lambda: native.eager_stats()["python_calls"]
        before = calls()
        x.cpu(); x[2].item(); x.copy_(host)
        assert calls() == before, "served in C++"
        with torch_fl.profile():
            x.cpu(); x[2].item(); x.copy_(host)
        assert calls() >= before + 3, "a profile times them in Python"
        a = torch.randn(500, 500, device="fl:0")
        expected = a.cpu() @ a.cpu()
        side = torch.fl.Stream()
        with torch.fl.stream(side):
            z = x * 3
            for _ in range(2):
                z.cpu(); z[2].item(); z.copy_(host)
            z.copy_(host * 3)
            before = calls()
            got, item = z.cpu(), z[2].item()
            assert calls() == before, "a second stream: served in C++ too"
            w = a @ a                  # slow, queued on the side stream
        before = calls()
        moved = w.cpu()                # the default stream waits for the side stream's write
        assert calls() == before, "cross-stream tracking on: still C++"
        assert torch.equal(got, torch.full((16,), 3.0)) and item == 3.0
        assert torch.allclose(moved, expected, rtol=1e-4, atol=1e-3)
        assert x[2].item() == 1.0 and torch.equal(x.cpu(), host)
        print("ok")
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


_DEVICE_ERROR = """
import sys, torch, torch_fl
native = sys.modules.get("fl_runtime.bridge._fl_bridge")
x = torch.arange(8.0, device="fl:0")
x.cpu(), x.cpu(), x[1].item(), x[1].item()
target = torch.zeros(5, 2, device="fl:0")
index, source = torch.tensor([9]).to("fl:0"), torch.ones(1, 2, device="fl:0")
for read in (lambda: x.cpu(), lambda: x[2].item()):
    target.index_copy_(0, index, source)            # fails on the device, later
    before = native.eager_stats()["python_calls"] if native else 0
    try:
        read()
        raise SystemExit("no error")
    except torch_fl.VendorError as exc:
        print(exc)
    if native:
        assert native.eager_stats()["python_calls"] == before, "the C++ path raised it"
    assert torch.equal(x.cpu(), torch.arange(8.0)), "the error is returned once"
"""


@pytest.mark.parametrize("route", ["1", "0"], ids=["bridge", "python-route"])
def test_a_device_error_surfaces_from_a_download_as_on_the_python_route(fl, route):
    """A kernel that fails on the device leaves its error on the stream (fl_abi.h ERRORS): the
    next `.cpu()` / `.item()` raises, from its stream wait, the same VendorError on both routes."""
    if route == "1" and not fl.runtime().launcher.native:
        pytest.skip("no native bridge built")
    result = run_python(_DEVICE_ERROR, env={"TORCH_FL_BRIDGE": route})
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2
    for line in lines:
        assert line.startswith("stream_synchronize(fl:0) failed in plugin 'reference' with FL_ERROR_KERNEL_FAILED")
        assert "index 9 is out of bounds" in line
