"""torch.compile(model, mode="reduce-overhead") on fl: Inductor's graphs captured and replayed
(integration/reduce_overhead.py, docs/users/graph-capture.md)."""
from __future__ import annotations

import gc

import pytest
import torch

from fl_runtime.integration import reduce_overhead
from fl_runtime.ops import accounting

# Graphs need the native bridge (it registers fl's GraphImplInterface); on the Python route
# reduce-overhead runs without graphs (docs/users/native-bridge.md, docs/users/graph-capture.md).
_BRIDGE = "__import__('fl_runtime.bridge', fromlist=['x']).status().active"
_needs_the_bridge = pytest.mark.skipif(
    f"not {_BRIDGE}",
    reason="the Python route: no torch.accelerator.Graph on fl, reduce-overhead runs without graphs "
           "(docs/users/native-bridge.md)")


@pytest.fixture(autouse=True)
def fresh(fl):
    torch._dynamo.reset()
    gc.collect()             # the graphs of earlier tests: runners() lists live ones only
    torch.accelerator.set_device_index(0)
    yield
    torch._dynamo.reset()


def _models():
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    fl = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to("fl")
    fl.load_state_dict({k: v.to("fl") for k, v in cpu.state_dict().items()})
    return cpu, fl


def _native(op: str) -> int:
    accounting.fold()
    return accounting.counts().get((op, "native"), 0)


@_needs_the_bridge
def test_inference_replays_instead_of_dispatching():
    cpu, model = _models()
    compiled = torch.compile(model, mode="reduce-overhead")
    kept = []
    with torch.no_grad():
        for step in range(5):
            if step == 2:            # warm-up and capture done: later calls only replay
                dispatched = _native("aten::addmm")
            x = torch.randn(3, 8)
            kept.append((x, compiled(x.to("fl"))))
        assert _native("aten::addmm") == dispatched
    for x, y in kept:                # each call's result is its own (the next replay overwrote nothing)
        torch.testing.assert_close(y.cpu(), cpu(x))
    [runner] = reduce_overhead.runners()
    assert (runner["calls"], runner["captures"], runner["replays"]) == (5, 1, 4)


@_needs_the_bridge
def test_training_steps_replay_forward_and_backward():
    cpu, model = _models()
    compiled = torch.compile(model, mode="reduce-overhead")
    for _ in range(4):
        x = torch.randn(3, 8)
        model.zero_grad()
        cpu.zero_grad()
        compiled(x.to("fl")).square().sum().backward()
        cpu(x).square().sum().backward()
        for a, b in zip(model.parameters(), cpu.parameters()):
            torch.testing.assert_close(a.grad.cpu(), b.grad)
    runs = reduce_overhead.runners()
    assert len(runs) == 2 and all(r["replays"] >= 2 and r["why_eager"] is None for r in runs)


@_needs_the_bridge
def test_a_graph_that_cannot_be_captured_runs_eagerly_with_the_reason():
    def f(x):
        return torch.digamma(x + 1) * 2              # no fl kernel: the CPU fallback

    compiled = torch.compile(f, mode="reduce-overhead")
    for _ in range(3):
        x = torch.rand(4)
        torch.testing.assert_close(compiled(x.to("fl")).cpu(), f(x))
    [runner] = reduce_overhead.runners()
    assert runner["replays"] == 0 and "aten::digamma" in runner["why_eager"]


@pytest.mark.skipif(_BRIDGE, reason="the Python route's fallback; the bridge replays (tests above)")
def test_reduce_overhead_runs_without_graphs_on_the_python_route():
    """docs/users/native-bridge.md: without the bridge reduce-overhead runs, without graphs."""
    cpu, model = _models()
    compiled = torch.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(3):           # the second call is where the bridge would capture
            x = torch.randn(3, 8)
            torch.testing.assert_close(compiled(x.to("fl")).cpu(), cpu(x))
    runs = reduce_overhead.runners()
    assert runs and all(r["replays"] == 0 and "native bridge" in r["why_eager"] for r in runs)
