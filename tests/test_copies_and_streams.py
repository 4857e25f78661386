"""Copies host<->fl and fl:i->fl:j are ordered after the writes that
produced their source, also across streams."""
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
