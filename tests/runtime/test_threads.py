"""Host threads share one runtime (docs/users/devices.md "Threads"): nothing is lost or aliased,
every value matches the CPU, and the current device and stream are per thread."""
import json
import random
import sys
import threading

import pytest
import torch

from conftest import ROOT

THREADS = 6


@pytest.fixture(autouse=True)
def frequent_thread_switches():
    """Switch threads every microsecond instead of every 5 ms, so that a multi-step update
    without a lock is interrupted often enough for a short test to catch it."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def _run_threads(target, count: int = THREADS, timeout: float = 120) -> list:
    """Run target(i, barrier) on `count` threads started together; re-raise the first failure."""
    barrier = threading.Barrier(count)
    failures: list = []

    def body(i: int) -> None:
        try:
            target(i, barrier)
        except BaseException as exc:      # noqa: BLE001 - handed to the test thread
            failures.append(exc)
    workers = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(count)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout)
    assert not any(w.is_alive() for w in workers), "a worker thread hung"
    if failures:
        raise failures[0]
    return failures


# 0.25: a thread empties the cache every fourth step while the others work, which is how a
# block freed during empty_cache's wait for the device once reached the vendor while in use.
@pytest.mark.parametrize("empty_cache_rate", ["0.01", "0.25"])
def test_threads_soak_checks_every_value_against_the_cpu(python, empty_cache_rate):
    """6 threads x fl:0/fl:1, own streams, cross-device copies, event waits, random ops."""
    result = python(f"""
        import runpy, sys
        sys.argv = ["soak_threads.py", "--seconds", "4", "--threads", "{THREADS}", "--json",
                    "--empty-cache-rate", "{empty_cache_rate}"]
        runpy.run_path({str(ROOT / 'benchmarks' / 'soak_threads.py')!r}, run_name="__main__")
    """, timeout=300)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["exceptions_and_failures"] == [], report["exceptions_and_failures"]
    assert report["wrong_values"] == 0 and report["failed_checks"] == 0 and report["hung_threads"] == 0
    assert report["steps"] >= THREADS * 5, report    # the threads really ran
    assert result.returncode == 0, result.stderr[-3000:]


def test_allocator_never_hands_out_a_live_block_twice(fl):
    """Allocate/release from many threads; deleters (release) race with allocations, and
    blocks used by a second stream go back to the pool through event queries (vendor
    calls, which let other threads run in the middle of the pool's bookkeeping)."""
    allocator = fl.runtime().allocators[0]
    stream = fl.runtime().streams.default[0]
    side = torch.fl.Stream("fl:0")
    live: set[int] = set()
    guard = threading.Lock()
    clashes: list[int] = []

    def work(i: int, barrier: threading.Barrier) -> None:
        rng = random.Random(i)
        mine = []
        barrier.wait()
        for _ in range(3000):
            if mine and rng.random() < 0.5:
                block = mine.pop(rng.randrange(len(mine)))
                with guard:
                    live.discard(block.ptr)
                allocator.release(block)
            else:
                block = allocator.allocate(rng.choice((64, 512, 4096, 70_000)), stream)
                with guard:
                    if block.ptr in live:
                        clashes.append(block.ptr)
                    live.add(block.ptr)
                if rng.random() < 0.3:
                    allocator.record_stream(block.ptr, side)
                mine.append(block)
        for block in mine:
            with guard:
                live.discard(block.ptr)
            allocator.release(block)
    allocator.settle()          # storages freed by earlier tests are accounted before the baseline
    before = allocator.stats.allocated
    _run_threads(work)
    allocator.settle()
    assert clashes == []
    assert allocator.stats.allocated == before     # every release was accounted, none twice


def test_live_tensors_made_by_threads_never_overlap(fl):
    kept: list[list[torch.Tensor]] = [[] for _ in range(THREADS)]

    def work(i: int, barrier: threading.Barrier) -> None:
        rng = random.Random(i)
        barrier.wait()
        for _ in range(400):
            t = torch.full((rng.choice((1, 100, 5000)),), float(i), device=f"fl:{i % 2}")
            if rng.random() < 0.3:
                kept[i].append(t)
    _run_threads(work)
    spans = sorted((t.device.index, t.data_ptr(), t.data_ptr() + t.nbytes) for ts in kept for t in ts)
    for (d1, _, end), (d2, start, _) in zip(spans, spans[1:]):
        assert d1 != d2 or end <= start, "two live tensors share device memory"
    for i, ts in enumerate(kept):
        for t in ts:
            assert bool((t.cpu() == float(i)).all())


def test_current_device_is_per_thread(fl):
    """set_device in one thread does not move another thread's `with torch.fl.device(0)`,
    nor its torch.fl.Event() and device="fl" factories; a new thread starts on fl:0."""
    moved, checked = threading.Event(), threading.Event()
    seen: dict = {}

    def mover() -> None:
        torch.fl.set_device(1)
        moved.set()
        checked.wait(30)
        seen["mover"] = (torch.fl.current_device(), torch.empty(1, device="fl").device.index)

    def holder() -> None:
        seen["fresh"] = torch.fl.current_device()
        with torch.fl.device(0):
            moved.wait(30)
            seen["holder"] = (torch.fl.current_device(), torch.fl.Event().device.index,
                              torch.empty(1, device="fl").device.index, torch.ones(2, device="fl").device.index)
        checked.set()
    threads = [threading.Thread(target=mover), threading.Thread(target=holder)]
    torch.fl.set_device(1)          # the test thread too: neither worker may see it
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert torch.fl.current_device() == 1
    finally:
        torch.fl.set_device(0)
    assert seen["fresh"] == 0
    assert seen["holder"] == (0, 0, 0, 0)
    assert seen["mover"] == (1, 1)


def test_current_stream_is_per_thread_and_one_stream_can_be_entered_by_two_threads(fl):
    """a enters `with shared:`, then b does, then a leaves first: each must get back its own
    previous stream (a stack shared by the threads would hand a b's)."""
    shared = torch.fl.Stream("fl:0")
    steps = {name: threading.Event() for name in ("a in", "b in", "a out")}
    seen: dict = {}

    def user(name: str, wait_for: str | None, then: str, wait_before_leaving: str | None) -> None:
        own = torch.fl.Stream("fl:0")
        with own:
            if wait_for:
                steps[wait_for].wait(30)
            with shared:
                seen[f"{name} inside"] = torch.fl.current_stream(0) is shared
                steps[then].set()
                if wait_before_leaving:
                    steps[wait_before_leaving].wait(30)
            seen[f"{name} after"] = torch.fl.current_stream(0) is own
            if name == "a":
                steps["a out"].set()
        seen[f"{name} out"] = torch.fl.current_stream(0) is torch.fl.default_stream(0)

    def bystander() -> None:
        seen["bystander"] = torch.fl.current_stream(0) is torch.fl.default_stream(0)
    threads = [threading.Thread(target=user, args=("a", None, "a in", "b in")),
               threading.Thread(target=user, args=("b", "a in", "b in", "a out"))]
    with torch.fl.stream(torch.fl.Stream("fl:0")):
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        other = threading.Thread(target=bystander)
        other.start()
        other.join(60)
    assert all(seen[f"{n} {w}"] for n in ("a", "b") for w in ("inside", "after", "out")), seen
    assert seen["bystander"]


def test_rng_offsets_are_never_drawn_twice(fl):
    rng = fl.runtime().rng
    drawn: list[list[int]] = [[] for _ in range(THREADS)]

    def work(i: int, barrier: threading.Barrier) -> None:
        barrier.wait()
        for _ in range(5000):
            drawn[i].append(rng.take(1, 4)[1])
    _run_threads(work)
    offsets = [o for d in drawn for o in d]
    assert len(offsets) == len(set(offsets)) == THREADS * 5000


def test_random_ops_from_threads_draw_distinct_values(fl):
    torch.manual_seed(0)
    out: list = [None] * THREADS

    def work(i: int, barrier: threading.Barrier) -> None:
        barrier.wait()
        out[i] = [torch.rand(64, device="fl:0").cpu() for _ in range(30)]
    _run_threads(work)
    rows = {tuple(t.tolist()) for per_thread in out for t in per_thread}
    assert len(rows) == THREADS * 30       # no two calls got the same counters


def test_profiler_counts_every_call_from_every_thread(fl):
    a = torch.ones(8, device="fl:0")

    def work(i: int, barrier: threading.Barrier) -> None:
        barrier.wait()
        for _ in range(300):
            a + 1
    with fl.profile(warn_fallback_share=1.0) as prof:
        _run_threads(work)
    calls = sum(r["count"] for r in prof.table() if r["op"] == "aten::add.Tensor")
    assert calls == THREADS * 300


def test_uploads_from_threads_keep_every_value(fl):
    """Small host-to-device copies from several threads onto both devices, each staged and
    enqueued without waiting (devices/uploads.py): every value arrives, each caller may reuse
    its buffer at once, and the pending list is shared without loss."""
    import torch_fl
    from fl_runtime.devices.uploads import LIMIT

    def body(i: int, barrier) -> None:
        device = f"fl:{i % 2}"
        busy = torch.randn(200, 200, device=device)
        barrier.wait()
        made = []
        for k in range(120):
            if k % 20 == 0:
                busy = busy @ busy / 200                # queued work the copies need not wait for
            source = torch.full((3, 5), float(i * 1000 + k))
            made.append((k, source.to(device)))
            source.fill_(-1.0)                          # the caller reuses its buffer at once
        for k, target in made:
            assert torch.equal(target.cpu(), torch.full((3, 5), float(i * 1000 + k))), (i, k)
    _run_threads(body)
    rt = torch_fl.runtime()
    assert all(rt.uploads.pending(d)[0] <= LIMIT for d in (0, 1))


def _gradients(x_cpu: torch.Tensor, w_cpu: torch.Tensor, device: str) -> tuple:
    """d/dw and d/dx of a small network's loss on `device`, and on the CPU (the reference).
    On the Python route a thread other than the importing one turns the autograd engine's
    multithreading off first, as docs/users/limits.md "Autograd and threads" asks (PyTorch's
    Python device guard gives the engine a worker for fl:0 only); the bridge needs nothing."""
    from fl_runtime import bridge
    if not bridge.status().active:
        torch.autograd.set_multithreading_enabled(False)

    def loss(x, w):
        hidden = torch.tanh(x @ w)
        return (hidden.softmax(-1) * hidden).sum() + (w ** 2).mean()
    x, w = x_cpu.to(device).requires_grad_(), w_cpu.to(device).requires_grad_()
    loss(x, w).backward()
    xc, wc = x_cpu.clone().requires_grad_(), w_cpu.clone().requires_grad_()
    loss(xc, wc).backward()
    return (w.grad, x.grad), (wc.grad, xc.grad)


def test_backward_on_fl1_from_a_plain_worker_thread(fl):
    """A thread that never touched torch.fl (it starts on fl:0) runs backward over fl:1 tensors:
    with the bridge the autograd engine's fl:1 worker runs it (docs/users/native-bridge.md); on
    the Python route the thread itself, after the step docs/users/limits.md names."""
    torch.manual_seed(0)
    x, w = torch.randn(16, 32), torch.randn(32, 8)
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(grads=_gradients(x, w, "fl:1")))
    worker.start()
    worker.join(120)
    (got_w, got_x), (want_w, want_x) = result["grads"]
    assert got_w.device == got_x.device == torch.device("fl", 1)
    torch.testing.assert_close(got_w.cpu(), want_w, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_x.cpu(), want_x, rtol=1e-5, atol=1e-5)


def test_threads_run_backward_on_different_devices_at_once(fl):
    """Six threads, three per device, each its own backward at the same moment; every gradient
    equals the CPU's."""
    def body(i: int, barrier: threading.Barrier) -> None:
        generator = torch.Generator().manual_seed(i)
        x, w = torch.randn(8, 24, generator=generator), torch.randn(24, 6, generator=generator)
        device = f"fl:{i % 2}"
        barrier.wait()
        for _ in range(3):
            (got_w, got_x), (want_w, want_x) = _gradients(x, w, device)
            assert got_w.device.index == i % 2
            torch.testing.assert_close(got_w.cpu(), want_w, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(got_x.cpu(), want_x, rtol=1e-5, atol=1e-5)
    _run_threads(body)
