"""The reference vendor runs a small kernel on the launching thread when its stream is idle
(reference_vendor/src/driver/queue.c): values and stream order must be those of the worker."""
import torch

FP32 = dict(rtol=1e-5, atol=1e-5)


def test_small_kernel_behind_a_queued_large_one_reads_its_result(fl):
    big = torch.randn(384, 384, generator=torch.Generator().manual_seed(0))
    x = big.to("fl:0")
    for _ in range(3):
        y = x @ x                     # 576 KiB per operand: queued on the stream's worker
        corner = y[:2, :2] + 1        # small, but the stream is busy: it must queue behind the mm
        torch.testing.assert_close(corner.cpu(), (big @ big)[:2, :2] + 1, rtol=1e-4, atol=1e-3)


def test_a_chain_of_small_kernels_matches_the_cpu(fl):
    a = torch.randn(8, 8, generator=torch.Generator().manual_seed(1))
    on_fl, on_cpu = a.to("fl:0"), a.clone()
    for _ in range(50):
        on_fl = torch.tanh(on_fl * 1.01 + 0.5) @ on_fl.t()
        on_cpu = torch.tanh(on_cpu * 1.01 + 0.5) @ on_cpu.t()
        on_fl.mul_(0.1)
        on_cpu.mul_(0.1)
    torch.testing.assert_close(on_fl.cpu(), on_cpu, **FP32)


def test_small_kernels_on_two_streams_keep_event_order(fl):
    """A side stream waits for an event after a large kernel on the default stream; its small
    kernel then reads that result (the side stream is idle, but ordering goes through the wait)."""
    big = torch.randn(384, 384, generator=torch.Generator().manual_seed(2))
    x = big.to("fl:0")
    side = torch.fl.Stream("fl:0")
    y = x @ x
    done = torch.fl.Event()
    done.record()
    with torch.fl.stream(side):
        side.wait_event(done)
        corner = y[:2, :2] * 2
    side.synchronize()
    torch.testing.assert_close(corner.cpu(), (big @ big)[:2, :2] * 2, rtol=1e-4, atol=1e-3)
