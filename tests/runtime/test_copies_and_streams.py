"""Copies host<->fl and fl:i->fl:j are ordered after the writes that
produced their source, also across streams."""
import pytest
import torch


def test_round_trips_of_many_dtypes_and_layouts(fl):
    for dtype in (torch.float32, torch.float64, torch.int64, torch.int32, torch.bool, torch.float16):
        cpu = (torch.arange(60) % 7).to(dtype).reshape(3, 4, 5)
        for device in ("fl:0", "fl:1"):
            assert torch.equal(cpu.to(device).cpu(), cpu)
        assert torch.equal(cpu.to("fl:0").to("fl:1").cpu(), cpu)
        strided = cpu.transpose(0, 2)
        assert torch.equal(strided.to("fl:0").cpu(), strided)


def test_copy_into_non_contiguous_fl_tensor_and_dtype_conversion(fl):
    target = torch.zeros(4, 6, device="fl:0")
    target.t()[1:3].copy_(torch.ones(2, 4, dtype=torch.float64))
    expected = torch.zeros(4, 6)
    expected.t()[1:3] = 1
    assert torch.equal(target.cpu(), expected)


def test_cross_device_copy_sees_pending_kernel(fl):
    a = torch.randn(700, 700, device="fl:0")
    for _ in range(3):
        z = a @ a          # queued on fl:0's stream, still running when the copy is enqueued
        moved = z.to("fl:1")
        assert torch.allclose(moved.cpu(), a.cpu() @ a.cpu(), rtol=1e-4, atol=1e-3)


def test_copy_after_kernel_on_another_stream_sees_its_result(fl):
    a = torch.randn(800, 800, device="fl:0")
    expected = a.cpu() @ a.cpu()
    side = torch.fl.Stream(0)
    with torch.fl.stream(side):
        z = a @ a                      # asynchronous, on the side stream
    # Back on the default stream: the copy must wait for the side stream's write.
    assert torch.allclose(z.cpu(), expected, rtol=1e-4, atol=1e-3)
    assert torch.allclose(z.to("fl:1").cpu(), expected, rtol=1e-4, atol=1e-3)


def test_kernel_on_default_stream_waits_for_side_stream_writer(fl):
    a = torch.randn(600, 600, device="fl:0")
    side = torch.fl.Stream(0)
    with torch.fl.stream(side):
        z = a @ a
    w = z + 1                          # default stream reads what the side stream wrote
    assert torch.allclose(w.cpu(), a.cpu() @ a.cpu() + 1, rtol=1e-4, atol=1e-3)


def _count_stream_waits(monkeypatch) -> list:
    from fl_runtime.devices.streams import Stream
    waits = []
    original = Stream.synchronize
    monkeypatch.setattr(Stream, "synchronize", lambda self: (waits.append(self), original(self))[1])
    return waits


def test_a_small_upload_does_not_wait_for_the_stream_and_keeps_the_callers_values(fl, monkeypatch):
    """copy_ from a small host tensor stages it and returns without synchronising the stream
    (which would wait for every queued kernel); the caller may change its tensor at once."""
    import torch_fl
    from fl_runtime.ops.owned.copies import STAGE_BYTES
    a = torch.randn(600, 600, device="fl:0")
    busy = a @ a                                        # queued work the upload must not wait for
    waits = _count_stream_waits(monkeypatch)
    src = torch.arange(12.0).reshape(3, 4)
    dst = torch.empty(3, 4, device="fl:0")
    dst.copy_(src)
    src.add_(100)                                       # the caller reuses its buffer right away
    positions = torch.arange(7, device="fl:0")          # arange: made on the host, uploaded
    assert waits == [] and src.numel() * 4 <= STAGE_BYTES
    assert torch.equal(dst.cpu(), torch.arange(12.0).reshape(3, 4))
    assert torch.equal(positions.cpu(), torch.arange(7))
    assert torch.allclose(busy.cpu(), a.cpu() @ a.cpu(), rtol=1e-4, atol=1e-3)
    torch.fl.synchronize()
    a @ a                                               # a later upload retires the finished ones
    dst.copy_(src)
    assert torch_fl.runtime().uploads.pending(0)[0] <= 1


def test_a_large_upload_from_the_callers_memory_waits_for_its_stream(fl, monkeypatch):
    """Above STAGE_BYTES the caller's own buffer is read by the device: copy_ returns when it has."""
    from fl_runtime.ops.owned.copies import STAGE_BYTES
    src = torch.randn(STAGE_BYTES // 4 + 1)
    waits = _count_stream_waits(monkeypatch)
    dst = src.to("fl:0")
    assert len(waits) == 1
    src.zero_()
    assert not torch.equal(dst.cpu(), src)


def test_pending_uploads_stay_bounded_and_every_value_arrives(fl):
    import torch_fl
    from fl_runtime.devices.uploads import LIMIT
    a = torch.randn(400, 400, device="fl:0")
    a @ a
    sources = [torch.full((5,), float(i)) for i in range(LIMIT + 40)]
    targets = [s.to("fl:0") for s in sources]
    for s in sources:
        s.fill_(-1.0)
    assert torch_fl.runtime().uploads.pending(0)[0] <= LIMIT
    assert all(torch.equal(t.cpu(), torch.full((5,), float(i))) for i, t in enumerate(targets))


@pytest.fixture
def upload_limits():
    """Sets the upload holders' limits (devices/uploads.py set_limits) for one test."""
    import torch_fl
    holders = torch_fl.runtime().uploads
    previous = holders.limits
    yield holders.set_limits
    holders.set_limits(*previous)


def test_pending_uploads_hold_bounded_host_memory(fl, upload_limits):
    """Converted uploads hold their converted host copy until the device has read it: past
    LIMIT_BYTES per device the oldest are waited for (a large `model.to("fl", torch.half)`)."""
    import torch_fl
    from fl_runtime.devices.uploads import LIMIT
    upload_limits(LIMIT, 64 << 10)
    a = torch.randn(400, 400, device="fl:0")
    a @ a
    sources = [torch.full((20000,), float(i), dtype=torch.float64) for i in range(12)]   # 160 KB each
    targets = [s.to("fl:0", torch.float32) for s in sources]         # each converts to a fresh 80 KB copy
    copies, held = torch_fl.runtime().uploads.pending(0)
    assert copies <= 1 and held <= 80000
    assert all(torch.equal(t.cpu(), torch.full((20000,), float(i))) for i, t in enumerate(targets))


def test_staged_and_converted_uploads_share_one_limit(fl, upload_limits):
    """Small staged uploads (served in C++ with the bridge) and converted ones (the runtime's own
    host copies) are held by one holder per device, so one limit bounds them together: never
    more than `copies` pending, and every value arrives."""
    import torch_fl
    upload_limits(6, 256 << 20)
    a = torch.randn(400, 400, device="fl:0")
    targets, most = [], 0
    for i in range(40):
        if i % 8 == 0:
            a @ a                                               # queued work, so copies stay pending
        staged = torch.full((4,), float(i))
        converted = torch.full((4,), float(-i), dtype=torch.float64)
        targets.append((i, staged.to("fl:0"), converted.to("fl:0", torch.float32)))
        staged.fill_(7.0)
        most = max(most, torch_fl.runtime().uploads.pending(0)[0])
    assert 1 <= most <= 6
    for i, staged, converted in targets:
        assert torch.equal(staged.cpu(), torch.full((4,), float(i)))
        assert torch.equal(converted.cpu(), torch.full((4,), float(-i)))
