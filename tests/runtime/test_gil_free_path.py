"""The native bridge's steady state runs without Python (docs/users/native-bridge.md "Eager
ops"): once a call signature has its recorded program, tiny ops, views, the allocations
and frees of their outputs through the C++ caching allocator, and small copies to and from the
host (`.cpu()`, `.item()`, an upload) neither take the interpreter lock from C++ nor run a
Python frame.

Two independent probes, each shown to move when Python does run, so neither is vacuous:
- the bridge's count of its own GIL entries (python_calls.h python_entries: every Gil and the
  Python kernel's entry), with the C++ kernels' count of calls sent to Python (eager_stats);
- sys.setprofile, which sees any Python frame, including kernels PyTorch itself calls from
  C++ (torch.library Python registrations), which the bridge's count cannot see.
Each runs in a fresh process, so that the default stream's calls are measured before any second
stream switches cross-stream tracking on (then measured too: C++ orders those calls itself,
stream_order.h)."""
from __future__ import annotations

import json

import pytest
from conftest import run_python

pytestmark = pytest.mark.skipif("not __import__('fl_runtime.bridge', fromlist=['x']).status().active",
                                reason="the Python route: every op runs in Python by design")

_MEASURE = """
import json, sys, threading
import torch, torch_fl
native = sys.modules["fl_runtime.bridge._fl_bridge"]
HERE = __file__ if "__file__" in globals() else "<string>"

def steady_ops(device):
    x = torch.ones(16, device=device)
    inplace = torch.zeros(16, device=device)
    a = torch.ones(8, 8, device=device)
    host, upload = torch.ones(16), torch.empty(16, device=device)
    return [lambda: x + 1, lambda: inplace.add_(1), lambda: a @ a, lambda: torch.relu(x), lambda: x.sum(),
            lambda: a.view(64), lambda: a.t(), lambda: a[1], lambda: x * x, lambda: torch.softmax(a, -1),
            lambda: x.cpu(), lambda: x[1].item(), lambda: upload.copy_(host)]   # host copies (host_copies.h)

frames = []

def profile(frame, event, arg):
    if event == "call" and frame.f_code.co_filename != HERE:
        frames.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

def counters():
    hits = native.figures(0)["cache_hits"]
    return native.python_entries(), native.eager_stats()["python_calls"], hits

def measure(run, calls):
    torch.fl.synchronize()
    del frames[:]
    before = counters()
    sys.setprofile(profile)
    for _ in range(calls):
        run()
    sys.setprofile(None)
    after = counters()
    torch.fl.synchronize()
    return {"gil": after[0] - before[0], "python_kernel": after[1] - before[1], "cache_hits": after[2] - before[2],
            "frames": len(frames), "first_frames": frames[:3]}


def in_thread(drive):
    # drive(result) on another thread while this one waits in join(); its result.
    result = {}
    thread = threading.Thread(target=drive, args=(result,))
    thread.start()
    thread.join()
    return result
"""

_PROBE = _MEASURE + """
ops = steady_ops("fl:0")
def all_ops():
    for op in ops:
        op()
for _ in range(5):
    all_ops()
result = {"steady": measure(all_ops, 300)}
ones = torch.ones(16, device="fl:0")
result["value"] = (ones + 1).cpu().tolist() == [2.0] * 16
shapes = iter(range(3, 40))
result["new_signature"] = measure(lambda: torch.ones(next(shapes), device="fl:0") * 3, 1)
# The same from a second thread on the second device, while this one waits in join().
def drive(other):
    torch.fl.set_device(1)
    mine = steady_ops("fl:1")
    for op in mine * 5:
        op()
    torch.fl.synchronize()
    before = native.python_entries()
    for _ in range(300):
        for op in mine:
            op()
    other["gil"] = native.python_entries() - before
result["thread"] = in_thread(drive)
# On a second stream, cross-stream tracking on (stream_order.h): the inputs were made on the
# default stream, so most calls also wait for it (vendor events, no Python either).
side = torch.fl.Stream(0)
with torch.fl.stream(side):
    for _ in range(5):
        all_ops()
    result["side_stream"] = measure(all_ops, 300)
    result["side_value"] = (ones + 1).cpu().tolist() == [2.0] * 16
    # A training step: the autograd engine's thread makes the forward's stream current for each
    # node (the device guard's exchangeStream), which the bridge holds in C++ (stream_registry.h).
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to("fl:0")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randn(2, 8).to("fl:0")
    def train_step():
        opt.zero_grad(set_to_none=True)
        model(data).square().sum().backward()
        opt.step()
    for _ in range(5):
        train_step()
    result["side_training"] = measure(train_step, 20)
print(json.dumps(result))
"""


def _probe_result(script: str) -> dict:
    result = run_python(script)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def probe():
    return _probe_result(_PROBE)


def test_steady_state_tiny_ops_never_enter_python(probe):
    steady = probe["steady"]
    assert steady["gil"] == 0, steady
    assert steady["python_kernel"] == 0, steady
    assert steady["frames"] == 0, steady["first_frames"]
    assert probe["value"]


def test_steady_state_outputs_come_from_the_cpp_allocator_pool(probe):
    # Six of the ten ops allocate an output per call (not the three views nor add_), each
    # one a reuse of the block the previous call freed.
    assert probe["steady"]["cache_hits"] >= 6 * 300


def test_a_call_python_must_serve_moves_both_probes(probe):
    first = probe["new_signature"]
    assert first["gil"] >= 1 and first["python_kernel"] >= 1, first
    assert first["frames"] >= 1, first


def test_a_second_thread_on_another_device_stays_off_the_interpreter(probe):
    assert probe["thread"]["gil"] == 0, probe["thread"]


def test_steady_state_on_a_second_stream_never_enters_python(probe):
    side = probe["side_stream"]
    assert side["gil"] == 0 and side["python_kernel"] == 0, side
    assert side["frames"] == 0, side["first_frames"]
    assert probe["side_value"]


def test_training_steps_on_a_second_stream_never_enter_python(probe):
    # The profile probe sees this thread only; the bridge's count sees the engine's threads too.
    side = probe["side_training"]
    assert side["gil"] == 0 and side["python_kernel"] == 0, side


# A static-cache decode step's attention (one query position, grouped heads, the cache's additive
# or bool mask, no dropout): the C++ choice and the overrideable forward's recorded program
# (bridge/csrc/sdpa_kernel.h), on each device, the second from another thread.
_SDPA_PROBE = _MEASURE + """
import torch.nn.functional as F
def decode(device, mask_dtype, length=16):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(shape, generator=g).to(device) for shape in ((1, 4, 1, 8), (1, 2, length, 8), (1, 2, length, 8)))
    mask = torch.randn(1, 1, 1, length, generator=g)
    mask = (mask > -0.5) if mask_dtype == "bool" else mask
    want = F.scaled_dot_product_attention(q.cpu(), k.cpu(), v.cpu(), attn_mask=mask, enable_gqa=True)
    mask = mask.to(device)
    return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True), want

result = {}
for mask_dtype in ("float", "bool"):
    call, want = decode("fl:0", mask_dtype)
    for _ in range(3):
        call()
    result[mask_dtype] = measure(call, 200)
    result[mask_dtype]["close"] = torch.allclose(call().cpu(), want, rtol=1e-5, atol=1e-6)
result["new_signature"] = measure(decode("fl:0", "float", length=17)[0], 1)
def drive(other):
    torch.fl.set_device(1)
    call, want = decode("fl:1", "bool")
    for _ in range(3):
        call()
    torch.fl.synchronize()
    before = native.python_entries()
    outs = [call() for _ in range(200)]
    other["gil"] = native.python_entries() - before
    other["close"] = torch.allclose(outs[-1].cpu(), want, rtol=1e-5, atol=1e-6)
result["thread"] = in_thread(drive)
print(json.dumps(result))
"""


# The static-cache decode's two fallback ops (bridge/csrc/fallback_decompositions.h): the
# key/value write runs its generic kernel (copy_ on the device, one scatter_) in C++, and so does
# arange: CPU values, resize_ (resize_kernel.h) and one small upload (host_copies.h).
_DECOMPOSITION_PROBE = _PROBE.split("ops = steady_ops")[0] + """
from fl_runtime.bridge import status
cache = torch.zeros(1, 4, 16, 8, device="fl:0")
k = torch.ones(1, 4, 1, 8, device="fl:0")
positions = [torch.tensor([i], device="fl:0") for i in range(16)]
out = torch.empty_like(cache)
def write():
    for position in positions:
        cache.index_copy_(2, position, k)
        cache.index_copy(2, position, k)
        torch.index_copy(cache, 2, position, k, out=out)
for _ in range(3):
    write()
torch_fl.op_stats.reset()
result = {"write": measure(write, 20)}
result["write_counted"] = torch_fl.op_stats.snapshot()["aten::index_copy.out"]
result["cache"] = cache.cpu().eq(1).all().item()
for _ in range(3):
    torch.arange(0, 7, device="fl:0")
def positions_of():
    torch.arange(5, 12, device="fl:0")
arange = measure(positions_of, 50)
arange["chain_frames"] = [f for f in frames if "/ops/fallback/" in f]
result["arange"] = arange
result["arange_value"] = torch.arange(5, 12, device="fl:0").cpu().tolist()
# The same key/value write from a second thread on fl:1 (measure's probes are per thread too).
def write_on_fl1(into):
    torch.fl.set_device(1)
    cache1 = torch.zeros(2, 8, device="fl:1")
    row, at = torch.full((2, 1), 2.0, device="fl:1"), torch.tensor([3], device="fl:1")
    def write1():
        cache1.index_copy_(1, at, row)
    write1()
    write1()
    into.update(measure(write1, 200))
    into["value"] = cache1.cpu()[:, 3].tolist() == [2.0, 2.0]
worker = threading.Thread(target=write_on_fl1, args=(result.setdefault("thread", {}),))
worker.start()
worker.join()
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def sdpa_probe():
    return _probe_result(_SDPA_PROBE)


@pytest.mark.parametrize("mask", ["float", "bool"])
def test_steady_state_decode_attention_never_enters_python(sdpa_probe, mask):
    steady = sdpa_probe[mask]
    assert (steady["gil"], steady["python_kernel"], steady["frames"]) == (0, 0, 0), steady
    assert steady["close"]


def test_a_new_attention_signature_moves_both_probes(sdpa_probe):
    first = sdpa_probe["new_signature"]
    assert first["gil"] >= 1 and first["python_kernel"] >= 1 and first["frames"] >= 1, first


def test_decode_attention_on_a_second_thread_and_device_stays_off_the_interpreter(sdpa_probe):
    assert sdpa_probe["thread"] == {"gil": 0, "close": True}


@pytest.fixture(scope="module")
def decomposition_probe():
    result = run_python(_DECOMPOSITION_PROBE)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_steady_state_index_copy_never_enters_python(decomposition_probe):
    write = decomposition_probe["write"]
    assert write["gil"] == 0 and write["python_kernel"] == 0, write
    assert write["frames"] == 0, write["first_frames"]
    assert decomposition_probe["cache"]
    assert decomposition_probe["write_counted"] == {"generic": 3 * 16 * 20}


def test_steady_state_arange_never_enters_python(decomposition_probe):
    arange = decomposition_probe["arange"]
    assert arange["chain_frames"] == [], arange
    assert (arange["gil"], arange["python_kernel"], arange["frames"]) == (0, 0, 0), arange
    assert decomposition_probe["arange_value"] == list(range(5, 12))


def test_index_copy_from_a_second_thread_on_another_device_stays_off_the_interpreter(decomposition_probe):
    thread = decomposition_probe["thread"]
    assert thread["gil"] == 0 and thread["python_kernel"] == 0 and thread["frames"] == 0, thread
    assert thread["value"]
