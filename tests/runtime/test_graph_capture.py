"""torch.accelerator.Graph on fl: capture a stream's launches, replay them (docs/users/graph-capture.md).

Runs on the native bridge (it registers fl's GraphImplInterface); results are checked against
eager fl and the CPU.
"""
from __future__ import annotations

import gc

import pytest
import torch

from fl_runtime.errors import FLGraphCaptureError
from fl_runtime.integration import process
from fl_runtime.ops.graph import graph_capture


# Graphs need the native bridge (it registers fl's GraphImplInterface): on the Python route
# torch.accelerator.Graph() raises PyTorch's "not supported on device type: fl"
# (docs/users/native-bridge.md, docs/users/graph-capture.md); the last test checks that.
_BRIDGE = "__import__('fl_runtime.bridge', fromlist=['x']).status().active"
_needs_the_bridge = pytest.mark.skipif(
    f"not {_BRIDGE}", reason="the Python route: no torch.accelerator.Graph on fl (docs/users/native-bridge.md)")


@pytest.fixture(autouse=True)
def on_fl0(fl):
    torch.accelerator.set_device_index(0)
    yield


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to("fl")


def _capture(fn, pool=None):
    graph = torch.accelerator.Graph(pool=pool)
    with torch.Stream(device="fl"), graph:
        out = fn()
    return graph, out


@_needs_the_bridge
def test_replay_of_a_changed_input_equals_eager():
    model, x = _model(), torch.randn(3, 8, device="fl")
    reference = _model().cpu()
    with torch.no_grad():
        model(x)
        graph, y = _capture(lambda: model(x))
        for _ in range(3):
            x.copy_(torch.randn(3, 8))
            graph.replay()
            torch.accelerator.synchronize()
            assert torch.equal(y.cpu(), model(x).cpu())
            torch.testing.assert_close(y.cpu(), reference(x.cpu()))


@_needs_the_bridge
def test_capture_records_instead_of_running():
    """A captured launch runs at replay only: the output holds nothing computed before it."""
    x = torch.ones(4, device="fl")
    graph, y = _capture(lambda: x.mul(3).add_(1))
    torch.accelerator.synchronize()
    captured = graph_capture_of(graph)
    assert captured.launches() == 2 and captured.replays == 0
    x.fill_(2)
    graph.replay()
    assert y.cpu().tolist() == [7.0] * 4
    assert captured.replays == 1


def graph_capture_of(graph) -> graph_capture.CapturedGraph:
    """The CapturedGraph the bridge made for `graph` (tests reach it through gc: the bridge
    holds it in C++)."""
    found = [o for o in gc.get_objects() if isinstance(o, graph_capture.CapturedGraph) and o.steps]
    assert found, "no CapturedGraph with a capture"
    return found[-1]


@_needs_the_bridge
def test_in_place_on_an_input_accumulates_per_replay():
    x = torch.zeros(5, device="fl")
    graph, _ = _capture(lambda: x.add_(1))
    for _ in range(4):
        graph.replay()
    assert x.cpu().tolist() == [4.0] * 5


@_needs_the_bridge
def test_a_cpu_fallback_fails_the_capture_naming_the_op():
    x = torch.rand(4, device="fl") + 1
    graph = torch.accelerator.Graph()
    with pytest.raises(FLGraphCaptureError, match=r"aten::digamma.*CPU fallback"):
        with torch.Stream(device="fl"), graph:
            torch.digamma(x)
    assert not graph_capture._capturing            # the capture ended: fl runs eagerly again
    assert torch.allclose(torch.digamma(x).cpu(), torch.digamma(x.cpu()))


@_needs_the_bridge
@pytest.mark.parametrize("sync", [lambda x: x.sum().item(), lambda x: x.cpu(),
                                  lambda x: x + torch.ones(4)])
def test_host_round_trips_fail_the_capture(sync):
    x = torch.ones(4, device="fl")
    with pytest.raises(FLGraphCaptureError, match="synchronising call"):
        with torch.Stream(device="fl"), torch.accelerator.Graph():
            sync(x)


@_needs_the_bridge
def test_random_ops_fail_the_capture():
    with pytest.raises(FLGraphCaptureError, match="random"):
        with torch.Stream(device="fl"), torch.accelerator.Graph():
            torch.rand(4, device="fl")


@_needs_the_bridge
def test_an_error_swallowed_inside_the_capture_still_fails_it():
    x = torch.ones(4, device="fl")
    graph = torch.accelerator.Graph()
    with pytest.raises(FLGraphCaptureError, match="_local_scalar_dense"):
        with torch.Stream(device="fl"), graph:
            try:
                x.sum().item()
            except FLGraphCaptureError:
                pass


@_needs_the_bridge
def test_reset_then_recapture():
    x = torch.ones(3, device="fl")
    graph, y = _capture(lambda: x * 2)
    graph.replay()
    assert y.cpu().tolist() == [2.0] * 3
    graph.reset()
    with pytest.raises(RuntimeError, match="holds no capture"):
        graph.replay()
    with torch.Stream(device="fl"), graph:
        z = x * 5
    graph.replay()
    assert z.cpu().tolist() == [5.0] * 3


@_needs_the_bridge
def test_graphs_share_a_pool_and_it_outlives_them_while_tensors_hold_it():
    x = torch.ones(1024, device="fl")
    first, a = _capture(lambda: x + 1)
    pool = first.pool()
    second, b = _capture(lambda: a * 3, pool=pool)
    assert second.pool() == pool
    first.replay()
    second.replay()
    assert b.cpu().tolist() == [6.0] * 1024
    shared = graph_capture._pools[pool]
    assert shared.graphs == 2 and shared.lent == 2
    del first, second
    gc.collect()
    assert graph_capture._pools.get(pool) is shared and shared.graphs == 0   # a and b still hold it
    del a, b
    gc.collect()
    process.start().allocators[0].settle()
    assert pool not in graph_capture._pools


@_needs_the_bridge
def test_capture_leaves_other_streams_running_eagerly():
    x = torch.ones(4, device="fl")
    other = torch.Stream(device="fl")
    graph = torch.accelerator.Graph()
    with torch.Stream(device="fl"):
        graph.capture_begin()
        with other:
            eager = x * 7                       # another stream: runs now
        captured = x * 9
        graph.capture_end()
    other.synchronize()
    assert eager.cpu().tolist() == [7.0] * 4
    graph.replay()
    assert captured.cpu().tolist() == [9.0] * 4


@_needs_the_bridge
def test_one_capture_at_a_time():
    first = torch.accelerator.Graph()
    with torch.Stream(device="fl"):
        first.capture_begin()
        try:
            with pytest.raises(FLGraphCaptureError, match="another graph is capturing on fl:0"):
                torch.accelerator.Graph().capture_begin()
            torch.accelerator.set_device_index(1)
            with torch.Stream(device="fl:1"), pytest.raises(FLGraphCaptureError, match="one capture at a time"):
                torch.accelerator.Graph().capture_begin()
        finally:
            torch.accelerator.set_device_index(0)
            first.capture_end()


@_needs_the_bridge
def test_debug_dump_lists_the_launches(tmp_path):
    x = torch.ones(4, device="fl")
    graph = torch.accelerator.Graph()
    graph.enable_debug_mode()
    with torch.Stream(device="fl"), graph:
        x.mul(2).add_(1)
    graph.debug_dump(str(tmp_path / "g.txt"))
    lines = (tmp_path / "g.txt").read_text().splitlines()
    assert [line.split("\t")[2] for line in lines] == ["aten::mul.Tensor", "aten::add_.Tensor"]


@_needs_the_bridge
def test_an_op_that_runs_without_a_recordable_launch_fails_the_capture(monkeypatch):
    """A path that launched past the capture's hooks (here: hooks that record nothing) would
    leave the replay without that op: the capture fails instead of replaying wrong results."""
    monkeypatch.setattr(graph_capture.CapturedGraph, "_recorder", lambda self, original: original)
    x = torch.ones(4, device="fl")
    with pytest.raises(FLGraphCaptureError, match=r"aten::mul.Tensor.*without a launch the capture could record"):
        with torch.Stream(device="fl"), torch.accelerator.Graph():
            x * 2


@_needs_the_bridge
def test_a_training_step_backward_included_replays_like_eager():
    """backward() inside the capture: the autograd engine's launches run on the capturing
    stream (its device thread), so they are recorded too."""
    model = _model()
    reference = _model().cpu()
    x = torch.randn(4, 8, device="fl")
    side = torch.Stream(device="fl")
    with side:
        model(x).sum().backward()               # warm-up: the grads exist
    graph = torch.accelerator.Graph()
    with side, graph:
        for p in model.parameters():
            p.grad.zero_()
        model(x).sum().backward()
    for _ in range(2):
        batch = torch.randn(4, 8)
        x.copy_(batch)
        graph.replay()
        reference.zero_grad()
        reference(batch).sum().backward()
        for ours, theirs in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(ours.grad.cpu(), theirs.grad)


@_needs_the_bridge
def test_a_launch_failing_at_replay_raises_naming_the_op(monkeypatch):
    from fl_runtime.errors import GraphReplayError
    from fl_runtime.ops.graph import launch_list
    x = torch.ones(4, device="fl")
    graph, _ = _capture(lambda: x.mul(3))
    monkeypatch.setattr(launch_list, "_run_launches", lambda *args: (0, 7))
    with pytest.raises(GraphReplayError, match=r"the launch of aten::mul.Tensor failed"):
        graph.replay()


@_needs_the_bridge
def test_a_side_stream_reading_a_replays_output_waits_for_the_replay():
    """Once a second stream exists, work that touches a block another stream wrote last waits for
    it (docs/users/devices.md): a replay's writes count, its static output and the static input it
    updates in place, so a side stream that read them before does not read them half written."""
    a = torch.randn(600, 600, device="fl")
    acc = torch.zeros(600, 600, device="fl")
    side = torch.fl.Stream(0)

    def step():
        out = a @ a
        acc.add_(1)
        return out

    step()
    graph, out = _capture(step)
    torch.accelerator.synchronize()
    expected = a.cpu() @ a.cpu()
    for replay in range(1, 4):
        with torch.fl.stream(side):          # catches up with the last write it knows of
            _ = out + 0, acc + 0
        graph.replay()                       # the default stream rewrites both, slowly
        with torch.fl.stream(side):
            seen, counted = out * 1, acc * 1
        side.synchronize()
        torch.testing.assert_close(seen.cpu(), expected, rtol=1e-4, atol=1e-2)
        assert torch.equal(counted.cpu(), torch.full((600, 600), float(replay + 1)))


@_needs_the_bridge
def test_a_replayed_in_place_list_op_counts_its_tensors_as_written():
    """`_foreach_add_` writes a list and returns nothing (an optimizer step's shape): a side
    stream reading the list after a replay waits for it."""
    params = [torch.zeros(700, 700, device="fl") for _ in range(2)]
    a = torch.randn(700, 700, device="fl")
    side = torch.fl.Stream(0)

    def step():
        torch._foreach_add_(params, [a @ a, a @ a])

    step()
    graph, _ = _capture(step)
    torch.accelerator.synchronize()
    product = a.cpu() @ a.cpu()
    for replay in range(1, 3):
        with torch.fl.stream(side):
            _ = [p + 0 for p in params]
        graph.replay()
        with torch.fl.stream(side):
            seen = [p * 1 for p in params]
        side.synchronize()
        for value in seen:
            torch.testing.assert_close(value.cpu(), product * (replay + 1), rtol=1e-4, atol=5e-2)


@pytest.mark.skipif(_BRIDGE, reason="the Python route's error; the bridge's graphs: the tests above")
def test_no_graph_on_the_python_route():
    with pytest.raises(RuntimeError, match="not supported on device type: fl"):
        torch.accelerator.Graph()
