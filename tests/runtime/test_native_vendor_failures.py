"""A vendor call the bridge makes itself fails (bridge/csrc/vendor_failure.h): the C++ path
raises the runtime's VendorError naming the call, hands nothing to Python, leaks no memory, and
the next call, with the vendor healthy again, gives the right values.

The fault is injected by swapping one function of the plugin's fl_api table for a callback that
fails while `failing` is set; the table is the one the bridge calls through, so the C++ path
sees the fault exactly as a vendor's error code."""
from __future__ import annotations

import contextlib
import sys

import pytest
import torch

from fl_runtime.abi import ffi

pytestmark = pytest.mark.skipif("not __import__('fl_runtime.bridge', fromlist=['x']).status().active",
                                reason="the Python route: no C++ calls to the vendor")

FAILED = 999      # not a status of fl_abi.h: the message must still name it


@contextlib.contextmanager
def _failing(fl, function: str):
    """Yields a switch: while switch["on"], the plugin's `function` returns FAILED."""
    table = ffi.cast("fl_api *", fl.runtime().device(0).plugin.api)
    original = getattr(table, function)
    switch = {"on": False, "calls": 0}

    def call(*args):
        if switch["on"]:
            switch["calls"] += 1
            return FAILED
        return original(*args)
    callback = ffi.callback(ffi.typeof(original), call)
    setattr(table, function, callback)
    try:
        yield switch
    finally:
        setattr(table, function, original)


def _python_calls() -> int:
    return sys.modules["fl_runtime.bridge._fl_bridge"].eager_stats()["python_calls"]


def _allocated() -> int:
    torch.fl.synchronize()
    return torch.fl.memory_allocated(0)


@pytest.mark.parametrize("function", ["event_create", "event_record", "stream_wait_event"])
def test_a_failed_cross_stream_wait_raises_and_the_next_call_waits_again(fl, function):
    a = torch.randn(300, 300, device="fl:0")
    expected = a.cpu() @ a.cpu() + 1
    side = torch.fl.Stream(0)
    for _ in range(2):
        with torch.fl.stream(side):
            z = a @ a
        w = z + 1                            # the default stream reads what `side` wrote
    with _failing(fl, function) as switch:
        with torch.fl.stream(side):
            z = a @ a
        held, calls = _allocated(), _python_calls()
        switch["on"] = True
        with pytest.raises(fl.VendorError, match=f"{function}.*status 999"):
            w = z + 1
        switch["on"] = False
        assert switch["calls"] == 1 and _python_calls() == calls, "the C++ path raised it"
        assert _allocated() == held, "the failed call's output was freed"
        w = z + 1                            # not noted as caught up: waits, reads the write
    torch.testing.assert_close(w.cpu(), expected, rtol=1e-4, atol=1e-3)
    side.synchronize()


def test_a_failed_download_raises_and_leaves_the_tensor(fl):
    x = torch.arange(64, dtype=torch.float32, device="fl:0")
    x.cpu(), x.cpu()
    with _failing(fl, "memcpy_d2h_async") as switch:
        calls = _python_calls()
        switch["on"] = True
        for read in (x.cpu, lambda: x[3].item()):
            with pytest.raises(fl.VendorError, match="memcpy_d2h_async.*status 999"):
                read()
        switch["on"] = False
        assert _python_calls() == calls, "the C++ path raised it"
    assert torch.equal(x.cpu(), torch.arange(64.0)) and x[3].item() == 3.0


def test_a_failed_upload_raises_and_leaves_the_destination(fl):
    dst = torch.full((64,), 7.0, device="fl:0")
    source = torch.arange(64, dtype=torch.float32)
    dst.copy_(source), dst.fill_(7.0)
    with _failing(fl, "memcpy_h2d_async") as switch:
        held, calls = _allocated(), _python_calls()
        switch["on"] = True
        with pytest.raises(fl.VendorError, match="memcpy_h2d_async.*status 999"):
            dst.copy_(source)
        switch["on"] = False
        assert _python_calls() == calls, "the C++ path raised it"
        assert _allocated() == held
    assert torch.equal(dst.cpu(), torch.full((64,), 7.0)), "nothing the user had is lost"
    dst.copy_(source)
    assert torch.equal(dst.cpu(), source)


def test_an_upload_that_gets_no_event_waits_for_its_copy_instead(fl):
    """The stage of a C++ upload is held until an event after the copy completes
    (pending_uploads.h); with no event to be had it waits for the stream, as uploads.py does,
    so the copy is right and no stage is left held."""
    native = sys.modules["fl_runtime.bridge._fl_bridge"]
    dst = torch.zeros(1024, device="fl:0")
    dst.copy_(torch.ones(1024))
    torch.fl.synchronize()
    held = native.pending_uploads(0)
    with _failing(fl, "event_record") as switch:
        switch["on"] = True
        for value in (2.0, 3.0):
            dst.copy_(torch.full((1024,), value))
        switch["on"] = False
        assert switch["calls"] == 2, "the upload asked for an event"
    assert native.pending_uploads(0) == held
    assert torch.equal(dst.cpu(), torch.full((1024,), 3.0))
