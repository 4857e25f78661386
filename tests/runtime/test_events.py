"""torch.fl.Event: record, wait, query, synchronize, elapsed_time (docs/users/devices.md)."""
import pytest
import torch


def _busy(device: str = "fl:0", n: int = 700):
    a = torch.randn(n, n, device=device)
    return a, a @ a @ a


def test_record_query_synchronize(fl):
    event = torch.fl.Event()
    a, result = _busy()
    event.record()                        # on the current stream, after the matmuls
    event.synchronize()
    assert event.query()
    assert torch.allclose(result.cpu(), a.cpu() @ a.cpu() @ a.cpu(), rtol=1e-3, atol=1e-2)


def test_wait_orders_a_side_stream_after_the_event(fl):
    side = torch.fl.Stream(0)
    a, product = _busy()
    done = torch.fl.Event()
    done.record()                         # default stream: product is being written
    done.wait(side)
    with torch.fl.stream(side):
        total = product.sum()
    assert torch.allclose(total.cpu(), (a.cpu() @ a.cpu() @ a.cpu()).sum(), rtol=1e-3)


def test_elapsed_time_needs_timing_and_measures(fl):
    start, end = torch.fl.Event(enable_timing=True), torch.fl.Event(enable_timing=True)
    start.record()
    _busy(n=600)
    end.record()
    ms = start.elapsed_time(end)
    assert 0.0 < ms < 60_000
    untimed = torch.fl.Event()
    untimed.record()
    with pytest.raises(ValueError, match="enable_timing"):
        untimed.elapsed_time(end)
    with pytest.raises(ValueError, match="never recorded"):
        torch.fl.Event(enable_timing=True).elapsed_time(end)


def test_stream_record_event_and_interprocess_refused(fl):
    side = torch.fl.Stream("fl:1")
    event = side.record_event()
    event.synchronize()
    assert event.query() and event.device.index == 1
    with pytest.raises(ValueError, match="interprocess"):
        torch.fl.Event(interprocess=True)
