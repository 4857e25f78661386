"""The graph path: a captured graph's launches recorded once and replayed
(ops/graph/launch_list.py, integration/graph_backend.py; docs/users/graph-path.md).

The engine's tests trace functions into ATen graphs with make_fx (PyTorch's tracer, no
dynamo: fast) and run them with a LaunchList on fl tensors: every call after the first
is a replay, so each check compares several calls, with new values, against PyTorch's
CPU result.  The user's route, torch.compile(model, backend="fl") with dynamo and
AOTAutograd, runs as a script in a subprocess: an MLP, a CNN and an HF GPT-2 trained
for a few steps, checked against the same training in eager mode.
"""
from __future__ import annotations

import threading
import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.fx.experimental.proxy_tensor import make_fx

from fl_runtime import abi
from fl_runtime.abi import ffi
from fl_runtime.ops import accounting
from fl_runtime.ops.graph import graph_plan, launch_list
from fl_runtime.errors import GraphReplayError
from fl_runtime.ops.graph.graph_record import LaunchStep
from fl_runtime.ops.graph.launch_list import LaunchList

FP32 = {"rtol": 1e-5, "atol": 1e-5}


def _launch_list(fl, fn, *cpu_inputs) -> LaunchList:
    return LaunchList(make_fx(fn)(*cpu_inputs), fl.runtime().launcher)


def _check(runner: LaunchList, fn, make_inputs, calls: int = 3) -> None:
    """`calls` calls (the first records, the rest replay), each with new values, against the CPU."""
    for call in range(calls):
        cpu_inputs = make_inputs(call)
        want = fn(*[t.clone() for t in cpu_inputs])
        got = runner(*[t.to("fl:0") for t in cpu_inputs])
        for w, g in zip(_flat(want), _flat(got)):
            torch.testing.assert_close(g.cpu(), w, **FP32, msg=lambda m: f"call {call}: {m}")


def _flat(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _randn(*shape, seed: int):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _mlp(x, w1, b1, w2):
    h = torch.nn.functional.gelu(torch.addmm(b1, x, w1.t()))
    return (h @ w2.t()).softmax(-1), h.sum(0)


def _mlp_inputs(call: int):
    return [_randn(5, 8, seed=call), _randn(16, 8, seed=10 + call), _randn(16, seed=20 + call),
            _randn(4, 16, seed=30 + call)]


def test_an_mlp_replays_as_launches_and_matches_the_cpu(fl):
    runner = _launch_list(fl, _mlp, *_mlp_inputs(0))
    _check(runner, _mlp, _mlp_inputs)
    (plan,) = runner.plans()
    kinds = [type(step).__name__ for step in plan.order]
    assert kinds.count("LaunchStep") == 5 and "PythonStep" not in kinds, kinds   # t() is a view: no step
    assert plan.workspace > 0          # the addmm and gelu results live in the workspace


def test_intermediates_share_workspace_bytes_when_their_lives_do_not_overlap(fl):
    def chain(x, w):
        for _ in range(8):
            x = torch.relu(x @ w) * 0.5
        return x
    inputs = lambda call: [_randn(16, 16, seed=call), _randn(16, 16, seed=50 + call)]   # noqa: E731
    runner = _launch_list(fl, chain, *inputs(0))
    _check(runner, chain, inputs)
    (plan,) = runner.plans()
    intermediate = 16 * 16 * 4
    assert plan.workspace < 4 * intermediate, plan.workspace     # 15 intermediates in a few slots


def test_views_of_intermediates_and_of_inputs_with_storage_offsets(fl):
    def views(x, y):
        a = (x + 1).t()[1:, ::2]                  # a view of an intermediate, read by a launch
        b = y.transpose(0, 1).expand(2, 6, 6)     # a view of an input, expanded
        return (a * 2).contiguous(), (b + a[:1, :1]).sum(0), a.sum()
    base = _randn(7, 6, 6, seed=1)

    def inputs(call):        # y is a slice: its storage offset differs per call
        return [_randn(6, 6, seed=call), (base + call)[call % 3 + 1]]
    runner = _launch_list(fl, views, *inputs(0))
    for call in range(4):
        cpu = inputs(call)
        want = views(*cpu)
        big = (base + call).to("fl:0")
        got = runner(cpu[0].to("fl:0"), big[call % 3 + 1])
        for w, g in zip(want, got):
            torch.testing.assert_close(g.cpu(), w, **FP32)
    assert len(runner.plans()) == 1, "a storage offset is addressed per call, not a new signature"


def test_in_place_writes_to_inputs_replay(fl):
    def step(param, grad):
        param.add_(grad, alpha=-0.1)
        return (param * param).sum()
    param = _randn(8, seed=0).to("fl:0")
    want = param.cpu()
    runner = _launch_list(fl, step, torch.zeros(8), torch.zeros(8))
    for call in range(4):
        grad = _randn(8, seed=call)
        want.add_(grad, alpha=-0.1)
        got = runner(param, grad.to("fl:0"))
        torch.testing.assert_close(param.cpu(), want, **FP32)
        torch.testing.assert_close(got.cpu(), (want * want).sum(), **FP32)


def test_another_input_layout_records_its_own_plan(fl):
    def fn(x):
        return torch.relu(x) + x.sum(0)
    runner = _launch_list(fl, fn, torch.zeros(3, 4))
    _check(runner, fn, lambda call: [_randn(3, 4, seed=call)])
    _check(runner, fn, lambda call: [_randn(3, 4, seed=call).t().contiguous().t()])   # column-major
    assert len(runner.plans()) == 2


OPS = [lambda x: x + 1.5, torch.relu, lambda x: x * x, torch.tanh, lambda x: x.t() @ x, lambda x: x.t() * 2,
       lambda x: x.sum(0, keepdim=True).expand_as(x) - x, lambda x: torch.cat([x, x])[: x.shape[0]],
       lambda x: x.mul_(0.5),                                       # in place on an intermediate (or the input)
       lambda x: x.t().t()[:, :],                                   # views only
       lambda x: torch.special.zeta(x.abs() + 2, x.abs() + 3)]      # no reference kernel: a Python step


@given(st.lists(st.integers(0, len(OPS) - 1), min_size=1, max_size=12), st.integers(1, 6))
def test_random_op_chains_replay_as_the_cpu_computes(fl, picks, n):
    def chain(x):
        outs = []
        for pick in picks:
            x = OPS[pick](x)
            outs.append(x.sum())
        return x, torch.stack(outs)
    runner = _launch_list(fl, chain, torch.zeros(n, n))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # zeta's fallback warning
        _check(runner, chain, lambda call: [_randn(n, n, seed=call) / 4])


def test_threads_each_replay_their_own_plan(fl):
    runner = _launch_list(fl, _mlp, *_mlp_inputs(0))
    errors = []

    def worker(seed: int) -> None:
        try:
            for call in range(15):
                cpu = _mlp_inputs(seed * 100 + call)
                want = _mlp(*cpu)
                got = runner(*[t.to("fl:0") for t in cpu])
                for w, g in zip(want, got):
                    torch.testing.assert_close(g.cpu(), w, **FP32)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_a_graph_with_a_fallback_runs_it_as_a_python_step(fl):
    def fn(x):
        return torch.special.zeta(x + 2, x + 3) * 2      # no reference kernel: the CPU fallback
    runner = _launch_list(fl, fn, torch.zeros(5))
    before = accounting.counts()[("aten::special_zeta.out", "cpu")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # the fallback's "no kernel" warning
        _check(runner, fn, lambda call: [_randn(5, seed=call).abs()])
    assert accounting.counts()[("aten::special_zeta.out", "cpu")] == before + 3     # every call, replays too
    (plan,) = runner.plans()
    assert [type(s).__name__ for s in plan.order] == ["LaunchStep", "LaunchStep", "PythonStep", "LaunchStep"]


def test_a_hidden_kernel_or_a_profile_runs_the_graph_eagerly(fl):
    def fn(x):
        return torch.logit(x) * 2
    inputs = lambda call: [_randn(6, seed=call).sigmoid()]    # noqa: E731
    runner = _launch_list(fl, fn, torch.full((6,), 0.5))
    _check(runner, fn, inputs, calls=2)
    devices = fl.runtime().devices
    hidden = [device.kernels.pop("logit", None) for device in devices]
    try:
        before = accounting.counts()
        _check(runner, fn, inputs, calls=1)
        assert accounting.counts()[("aten::logit", "native")] == before[("aten::logit", "native")]
    finally:
        for device, kernel in zip(devices, hidden):
            if kernel is not None:
                device.kernels["logit"] = kernel
    with fl.profile() as prof:
        _check(runner, fn, inputs, calls=1)
    assert {"aten::logit", "aten::mul.Tensor"} <= {row.op for row in prof.rows.values()}


def test_replayed_launches_are_counted(fl):
    runner = _launch_list(fl, _mlp, *_mlp_inputs(0))
    _check(runner, _mlp, _mlp_inputs, calls=2)
    before = accounting.counts()
    runner(*[t.to("fl:0") for t in _mlp_inputs(5)])
    after = accounting.counts()
    assert after[("aten::addmm", "native")] - before[("aten::addmm", "native")] == 1
    assert after[("aten::mm", "native")] - before[("aten::mm", "native")] == 1


def test_runs_leave_no_memory_behind_even_when_a_launch_fails(fl):
    runner = _launch_list(fl, _mlp, *_mlp_inputs(0))
    inputs = [t.to("fl:0") for t in _mlp_inputs(1)]
    _check(runner, _mlp, _mlp_inputs, calls=2)
    torch.fl.synchronize()
    baseline = torch.fl.memory_allocated()
    out = runner(*inputs)
    del out
    assert torch.fl.memory_allocated() == baseline
    (plan,) = runner.plans()
    step = next(s for s in plan.order if isinstance(s, LaunchStep) and s.name == "gelu")
    # the vendor declines the gelu launch it took when recorded: its launch_kernel, replaced
    declining = ffi.callback(launch_list.LAUNCH_TYPE, lambda *args: abi.ERROR_NOT_SUPPORTED)
    choice = type("Choice", (), {"entry": step.program.choice.entry, "launch_fn": declining})
    step.program = type("Program", (), {"choice": choice, "device": step.program.device})
    plan.steps = graph_plan.segments(plan.order)
    plan.valid = lambda: True
    with pytest.raises(GraphReplayError, match="declined"):
        runner(*inputs)
    assert torch.fl.memory_allocated() == baseline, "the workspace and the outputs made so far are freed"
    assert runner.eager_only
    _check(runner, _mlp, lambda call: _mlp_inputs(call + 7), calls=2)    # eager from now on, still right


SCRIPT = r"""
import copy
import torch
import torch_fl
import torch._dynamo
from torch._dynamo.backends.registry import list_backends
assert "fl" in list_backends(), list_backends()
from fl_runtime.ops import accounting

def train(model, x, y, compiled, steps=3):
    model = copy.deepcopy(model).to(x.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = lambda: torch.nn.functional.cross_entropy(model(x), y)
    run = torch.compile(loss_fn, backend="fl") if compiled else loss_fn
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = run()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, [t.detach().cpu() for t in model.state_dict().values()]   # BatchNorm's running stats too

torch.manual_seed(0)
models = {
    "mlp": (torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)),
            torch.randn(6, 8)),
    "cnn": (torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(4 * 3 * 3, 4)),
            torch.randn(6, 3, 8, 8)),
}
y = torch.tensor([0, 1, 2, 3, 0, 1])
for name, (model, x) in models.items():
    want_losses, want_params = train(model, x, y, compiled=False)
    accounting.reset_counts()
    got_losses, got_params = train(model, x.to("fl:0"), y.to("fl:0"), compiled=True)
    assert not [k for k in accounting.counts() if k[1] == "cpu"], accounting.counts()
    replays = sum(plan["replays"] for graph in torch_fl.graph_summary() for plan in graph["plans"])
    assert replays >= 4, torch_fl.graph_summary()     # steps 2 and 3 replayed a forward and a backward
    torch.testing.assert_close(torch.tensor(got_losses), torch.tensor(want_losses), rtol=1e-4, atol=1e-5)
    for w, g in zip(want_params, got_params):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    print(name, "ok")

# HF GPT-2, trained with AdamW: compiled on fl against eager on fl
from transformers import GPT2Config, GPT2LMHeadModel
config = GPT2Config(vocab_size=128, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
torch.manual_seed(0)
gpt2 = GPT2LMHeadModel(config)
ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1)).to("fl:0")
results = []
for compiled in (False, True):
    model = copy.deepcopy(gpt2).to("fl:0")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_of = lambda: model(input_ids=ids, labels=ids).loss
    run = torch.compile(loss_of, backend="fl") if compiled else loss_of
    losses = []
    for _ in range(3):
        optimizer.zero_grad()
        loss = run()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    results.append(losses)
torch.testing.assert_close(torch.tensor(results[1]), torch.tensor(results[0]), rtol=1e-4, atol=1e-5)
graphs = torch_fl.graph_summary()
assert all(not g["eager_only"] and not g["why_no_plan"] for g in graphs), graphs
print("gpt2 ok")

# dynamo never traces the runtime's own frames (its kernels are Python): under nn.Module.compile()
# the module's frames run eagerly with dynamo's frame hook set, and it used to compile fl's
# kernels, allocator and marshaler as "user code"
traced = []
def spy(gm, example_inputs):
    traced.extend(n.meta.get("stack_trace") or "" for n in gm.graph.nodes)
    return gm
module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()).to("fl:0")
module.compile(backend=spy)
module(torch.randn(2, 4, device="fl:0")).sum().backward()
assert not [t for t in traced if "fl_runtime" in t], traced
print("untraced ok")

# dynamic shapes: eager FX code, still right
f = torch.compile(lambda a: torch.relu(a) * 2, backend="fl", dynamic=True)
for n in (3, 5, 9):
    a = torch.randn(n)
    torch.testing.assert_close(f(a.to("fl:0")).cpu(), torch.relu(a) * 2)
print("dynamic ok")
"""


def test_torch_compile_backend_fl_trains_like_eager(script):
    result = script(SCRIPT, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    assert result.stdout.split() == ["mlp", "ok", "cnn", "ok", "gpt2", "ok", "untraced", "ok", "dynamic", "ok"]


def test_a_number_another_node_computes_is_never_baked_into_a_launch(fl):
    """A launch's arena holds its ints and floats for good; one that a node computes per
    run (here from a tensor's value) must reach the op through PyTorch every run."""
    aten = torch.ops.aten
    graph = torch.fx.Graph()             # x * k.sum().item(), relu(x) + 1 (make_fx cannot trace .item())
    x, k = graph.placeholder("x"), graph.placeholder("k")
    n = graph.call_function(aten._local_scalar_dense.default, (graph.call_function(aten.sum.default, (k,)),))
    relu = graph.call_function(aten.relu.default, (x,))
    graph.output((graph.call_function(aten.mul.Scalar, (x, n)), graph.call_function(aten.add.Scalar, (relu, 1))))
    runner = LaunchList(torch.fx.GraphModule(torch.nn.Module(), graph), fl.runtime().launcher)
    for call in range(3):
        x, k = _randn(3, seed=call), torch.full((2,), float(call))
        got = runner(x.to("fl:0"), k.to("fl:0"))
        torch.testing.assert_close(got[0].cpu(), x * (2.0 * call), **FP32)
        torch.testing.assert_close(got[1].cpu(), torch.relu(x) + 1, **FP32)


def test_a_graph_without_vendor_launches_runs_eagerly(fl):
    def fn(x):
        return torch.relu(x) * 2
    runner = _launch_list(fl, fn, torch.zeros(4))
    for call in range(2):            # CPU tensors: nothing for the graph path to replay
        x = _randn(4, seed=call)
        torch.testing.assert_close(runner(x), torch.relu(x) * 2)
    assert not runner.plans() and runner.summary()["why_no_plan"] == ["it launches no vendor kernel (nothing "
                                                                       "to replay)"]


def test_a_layout_changed_in_place_keeps_the_graph_eager(fl):
    def fn(x):
        y = x + 1
        y.transpose_(0, 1)
        return y * 2
    runner = _launch_list(fl, fn, torch.zeros(2, 3))
    _check(runner, fn, lambda call: [_randn(2, 3, seed=call)])
    assert not runner.plans() and "transpose_" in runner.summary()["why_no_plan"][0]


def test_out_of_memory_mid_graph_frees_what_the_run_made(fl):
    def fn(x):
        return x * 2, x + 1             # two outputs of 1 MiB: the second cannot fit
    runner = _launch_list(fl, fn, torch.zeros(1 << 18))
    x = _randn(1 << 18, seed=0).to("fl:1")
    for _ in range(2):                   # record, then a replay
        runner(x)
    torch.fl.synchronize(1)
    torch.fl.empty_cache()
    baseline = torch.fl.memory_allocated(1)
    total = torch.fl.get_device_properties(1).total_memory
    torch.fl.set_per_process_memory_fraction((torch.fl.memory_reserved(1) + (3 << 19)) / total, 1)
    try:
        with pytest.raises(torch.OutOfMemoryError):
            runner(x)
        assert torch.fl.memory_allocated(1) == baseline
    finally:
        torch.fl.set_per_process_memory_fraction(1.0, 1)
    doubled, plus_one = runner(x)        # the plan is intact
    torch.testing.assert_close(doubled.cpu(), x.cpu() * 2)
    torch.testing.assert_close(plus_one.cpu(), x.cpu() + 1)


def test_a_python_result_read_only_through_a_view_lives_until_that_launch(fl):
    """zeta has no reference kernel (a Python step); its result is read only through a
    transpose (a view: address arithmetic), so the launch after it reads the Python
    step's memory through its address: that tensor must outlive the launch."""
    def fn(x, w):
        y = torch.special.zeta(x + 2, x + 3)
        u = torch.special.zeta(x + 4, x + 5)
        z = x * 5                         # allocated after the Python steps: would take y's block
        return z, u, y.t() @ w
    inputs = lambda call: [_randn(4, 4, seed=call).abs(), _randn(4, 4, seed=10 + call)]    # noqa: E731
    runner = _launch_list(fl, fn, *inputs(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # the fallback's "no kernel" warning
        _check(runner, fn, inputs, calls=4)


def test_a_replay_waits_for_another_streams_writes_to_its_inputs(python):
    """A side stream writes the input (a long chain of kernels on the reference's own stream
    worker); the graph replays on the default stream and must read the finished values, and
    a side-stream reader of an input the graph writes in place must see the graph's write."""
    result = python("""
        import torch, torch_fl
        from torch.fx.experimental.proxy_tensor import make_fx
        from fl_runtime.ops.graph.launch_list import LaunchList

        def fn(x, acc):
            y = x
            for _ in range(20):              # keeps the graph's stream busy before it writes acc
                y = y * 1.0
            acc.add_(y)                      # an input written in place by a launch
            return (x * 2).sum()
        runner = LaunchList(make_fx(fn)(torch.zeros(1 << 20), torch.zeros(1 << 20)),
                            torch_fl.runtime().launcher)
        side = torch.fl.Stream()
        with torch.fl.stream(side):
            acc = torch.zeros(1 << 20, device="fl:0")   # its block belongs to the side stream
        for call in range(4):
            base = torch.full((1 << 20,), float(call), device="fl:0")
            with torch.fl.stream(side):
                x = base
                for _ in range(30):          # keeps the side stream busy
                    x = x * 1.0
                x = x + 1.0                  # call + 1 everywhere, once the side stream is done
                acc.mul_(1.0)                # the side stream is acc's last writer again
            total = runner(x, acc)
            with torch.fl.stream(side):
                seen = acc.sum()             # on the side stream, after the graph's add_
            torch.fl.synchronize()
            assert total.item() == 2 * (call + 1) * (1 << 20), (call, total.item())
            expected = sum(c + 1 for c in range(call + 1)) * (1 << 20)
            assert seen.item() == expected, (call, seen.item(), expected)
        summary = runner.summary()
        assert summary["plans"][0]["replays"] == 3 and summary["eager_runs"] == 0, summary
        print("ok")
    """)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert result.stdout.split() == ["ok"]


def test_the_same_graph_on_two_devices_keeps_a_plan_per_device(fl):
    runner = _launch_list(fl, _mlp, *_mlp_inputs(0))
    for call in range(3):
        for device in ("fl:0", "fl:1"):
            cpu = _mlp_inputs(call)
            got = runner(*[t.to(device) for t in cpu])
            for w, g in zip(_mlp(*cpu), got):
                assert g.device == torch.device(device)
                torch.testing.assert_close(g.cpu(), w, **FP32)
    assert sorted(plan.device_index for plan in runner.plans()) == [0, 1]
