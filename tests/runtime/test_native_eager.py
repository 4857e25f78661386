"""Eager ops served in C++ by the native bridge (bridge/csrc/eager_kernel.h;
docs/users/native-bridge.md "Eager ops"): a call whose signature has a recorded launch
program never enters Python, gives exactly what the Python route gives, is counted, and
every condition a program cannot know sends the call back to the Python kernel."""
from __future__ import annotations

import contextlib
import threading

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fl_runtime import bridge
from fl_runtime.ops import accounting
from fl_runtime.ops.eager.launcher import NATIVE_DISABLED

pytestmark = pytest.mark.skipif("not __import__('fl_runtime.bridge', fromlist=['x']).status().active",
                                reason="the Python route: no C++ kernels to test")


def _native(fl):
    native = fl.runtime().launcher.native
    assert native is not None, f"the bridge serves no eager ops ({bridge.status()})"
    return native


def _python_calls(fl) -> int:
    return _native(fl).eager_stats()["python_calls"]


@contextlib.contextmanager
def _python_route(fl):
    """Every eager call to its Python kernel (the switch the C++ kernels read)."""
    native = _native(fl)
    native.set_switch(NATIVE_DISABLED, True)
    try:
        yield
    finally:
        native.set_switch(NATIVE_DISABLED, False)


def _tiny_ops(device: str) -> dict:
    x = torch.arange(16, dtype=torch.float32, device=device) / 7
    a = torch.arange(64, dtype=torch.float32, device=device).reshape(8, 8) / 11
    inplace = torch.zeros(16, device=device)
    out = torch.empty(8, device=device)
    return {
        "add.Tensor": lambda: x + 1,
        "add_.Tensor": lambda: inplace.add_(1),
        "mm": lambda: a @ a,
        "relu": lambda: torch.relu(x - 1),
        "sum": lambda: x.sum(),
        "mul.Tensor": lambda: x * 2.5,                   # a float, patched per call
        "sum.IntList_out": lambda: torch.sum(a, 1, out=out),
        "view": lambda: a.view(64)[3:9],
    }


def test_a_repeated_signature_never_enters_python(fl):
    ops = _tiny_ops("fl:0")
    for run in ops.values():
        run(), run()                      # the first call records the program
    before_calls = _python_calls(fl)
    before = accounting.counts()
    for _ in range(10):
        for run in ops.values():
            run()
    assert _python_calls(fl) == before_calls, "a steady-state call went through Python"
    counted = accounting.counts()
    for name in ("aten::add.Tensor", "aten::add_.Tensor", "aten::mm", "aten::relu", "aten::mul.Tensor",
                 "aten::sum.IntList_out"):
        assert counted[(name, "native")] - before[(name, "native")] == 10, name


def test_values_match_the_python_route_and_cpu(fl):
    cpu = {name: run() for name, run in _tiny_ops("cpu").items() if name not in ("add_.Tensor",)}
    fast = {name: run().cpu() for name, run in _tiny_ops("fl:0").items() if name in cpu}
    with _python_route(fl):
        slow = {name: run().cpu() for name, run in _tiny_ops("fl:0").items() if name in cpu}
    for name in cpu:
        torch.testing.assert_close(fast[name], slow[name], rtol=0, atol=0, msg=name)
        torch.testing.assert_close(fast[name], cpu[name], msg=name)


_DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32]


def _case(op: str, shape: tuple, dtype: torch.dtype, device: str, seed: int):
    g = torch.Generator().manual_seed(seed)
    base = (torch.randn(shape, generator=g) * 4).to(dtype).to(device)
    other = (torch.randn(shape, generator=g) * 4).to(dtype).to(device)
    if op == "add":
        return base + other
    if op == "add_scalar":                # ints are in the key, per value
        return base + (seed + 1)
    if op == "mul_float":                 # floats are patched per call
        return base * (1.5 + seed) if dtype.is_floating_point else base * (seed - 2)
    if op == "inplace":
        target = base.clone()
        target.add_(other, alpha=2)
        return target
    if op == "out":
        out = torch.empty(shape, dtype=dtype, device=device)
        torch.add(base, other, out=out)
        return out
    if op == "transposed":
        return base.t() + other if len(shape) == 2 and shape[0] == shape[1] else base - other
    if op == "view_slice":
        return (base.reshape(-1)[1:] + 1) if base.numel() > 1 else base + 1
    if op == "relu":
        return torch.relu(base) if dtype.is_floating_point else torch.abs(base)
    raise AssertionError(op)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.sampled_from(["add", "add_scalar", "mul_float", "inplace", "out", "transposed",
                                           "view_slice", "relu"]),
                          st.sampled_from([(16,), (3, 3), (4, 5), (2, 3, 4)]), st.sampled_from(_DTYPES),
                          st.integers(0, 3)), min_size=1, max_size=6))
def test_a_mix_of_calls_matches_the_python_route(fl, calls):
    for op, shape, dtype, seed in calls:
        for _ in range(2):                # the second call runs the program the first recorded
            fast = _case(op, shape, dtype, "fl:0", seed).cpu()
        with _python_route(fl):
            slow = _case(op, shape, dtype, "fl:0", seed).cpu()
        torch.testing.assert_close(fast, slow, rtol=0, atol=0, msg=f"{op} {shape} {dtype}")
        torch.testing.assert_close(fast, _case(op, shape, dtype, "cpu", seed), msg=f"{op} {shape} {dtype}")


def test_two_threads_on_two_devices_match_cpu(fl):
    if torch.fl.device_count() < 2:
        pytest.skip("needs fl:0 and fl:1")
    errors: list = []
    expected = {name: run() for name, run in _tiny_ops("cpu").items() if name != "add_.Tensor"}

    def drive(index: int) -> None:
        try:
            torch.fl.set_device(index)
            ops = {name: run for name, run in _tiny_ops(f"fl:{index}").items() if name in expected}
            for _ in range(200):
                for name, run in ops.items():
                    result = run()
                    assert result.device == torch.device("fl", index)
            for name, run in ops.items():
                torch.testing.assert_close(run().cpu(), expected[name], msg=f"fl:{index} {name}")
        except BaseException as exc:      # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    before = _python_calls(fl)
    counted = accounting.counts()[("aten::add.Tensor", "native")]
    threads = [threading.Thread(target=drive, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # each thread's first calls per signature (and fl:1's factory calls) only
    assert _python_calls(fl) - before < 100
    # every call counted once, whichever thread and route served it
    assert accounting.counts()[("aten::add.Tensor", "native")] - counted == 2 * 201


def test_a_profile_takes_the_python_path_and_counts_every_call(fl):
    import torch_fl
    x = torch.ones(16, device="fl:0")
    x + 1, x + 1
    before = _python_calls(fl)
    with torch_fl.profile() as prof:
        for _ in range(5):
            x + 1
    assert _python_calls(fl) - before == 5
    assert sum(row.count for row in prof.rows.values() if row.op == "aten::add.Tensor") == 5
    x + 1
    after = _python_calls(fl)
    x + 1
    assert _python_calls(fl) == after, "after the profile the C++ kernel serves the call again"


def test_autocast_and_a_failed_call_take_the_python_path(fl):
    x = torch.ones(16, device="fl:0")
    x + 1, x + 1
    with pytest.raises(RuntimeError):
        torch.mm(torch.ones(2, 3, device="fl:0"), torch.ones(2, 3, device="fl:0"))
    before = _python_calls(fl)
    x + 1                                  # releases the failed call's held inputs
    assert _python_calls(fl) - before == 1
    x + 1
    assert _python_calls(fl) - before == 1
    a = torch.ones(8, 8, device="fl:0")
    a @ a, a @ a
    with torch.autocast("fl", dtype=torch.bfloat16):
        result = a @ a
    torch.testing.assert_close(result.float().cpu(), torch.full((8, 8), 8.0))


def test_calls_on_a_second_stream_and_after_it_stay_in_cpp_and_in_order(script):
    """In a process of its own (the first second stream switches tracking on): once a second
    stream exists, C++ serves calls on it and orders every call after writes on other streams
    (stream_order.h), as runtime.order_after_writers does on the Python route."""
    result = script("""
        import torch, torch_fl
        rt = torch_fl.runtime()
        native = rt.launcher.native
        calls = lambda: native.eager_stats()["python_calls"]
        x = torch.ones(1 << 16, device="fl:0")
        a = torch.randn(500, 500, device="fl:0")
        y = x * 2; y = x * 2; w = x + y; w = x + y; m = a @ a; m = a @ a; n = m + m; n = m + m
        before = calls()
        y = x * 2
        assert calls() == before
        side = torch.fl.Stream()
        with torch.fl.stream(side):
            z = x * 3; z = x * 3
            m = a @ a               # slow, on the side stream
            before = calls()
            z = x * 3
            m = a @ a
            assert calls() == before, "a second stream: C++"
        before = calls()
        w = z + y                   # the default stream reads what the side stream wrote
        n = m + m
        assert calls() == before, "tracking on: still C++"
        assert torch.equal(w.cpu(), torch.full((1 << 16,), 5.0))
        torch.testing.assert_close(n.cpu(), 2 * (a.cpu() @ a.cpu()), rtol=1e-4, atol=1e-3)
        print("ok")
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def _mlp_step(device: str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data, target = torch.randn(1, 8).to(device), torch.randn(1, 4).to(device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(data), target)
        loss.backward()
        opt.step()
        return loss.detach()
    return model, step


def test_a_train_step_stays_in_cpp_and_matches_cpu(fl):
    """Forward, backward (its seed gradient from empty_strided), SGD's foreach update: after
    the first steps no call of the step enters Python, and the weights stay CPU's."""
    model, step = _mlp_step("fl:0")
    cpu_model, cpu_step = _mlp_step("cpu")
    for _ in range(3):
        step(), cpu_step()
    before = _python_calls(fl)
    for _ in range(5):
        loss, cpu_loss = step(), cpu_step()
    assert _python_calls(fl) == before, "a steady-state train step went through Python"
    torch.testing.assert_close(loss.cpu(), cpu_loss)
    for got, want in zip(model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(got.detach().cpu(), want.detach())


def test_foreach_in_place_serves_in_cpp_and_keeps_the_per_tensor_route(fl):
    def lists(device):
        g = torch.Generator().manual_seed(1)
        return ([torch.randn(5, generator=g).to(device), torch.randn(2, 3, generator=g).to(device)],
                [torch.randn(5, generator=g).to(device), torch.randn(2, 3, generator=g).to(device)])
    (a, b), (ca, cb) = lists("fl:0"), lists("cpu")
    for alpha in (0.5, -2.0, 3.0):
        torch._foreach_add_(a, b, alpha=alpha)
        torch._foreach_add_(ca, cb, alpha=alpha)
    before = _python_calls(fl)
    torch._foreach_add_(a, b, alpha=0.25)          # a new float: patched, not a new signature
    torch._foreach_add_(ca, cb, alpha=0.25)
    assert _python_calls(fl) == before
    for got, want in zip(a, ca):
        torch.testing.assert_close(got.cpu(), want)
    mixed = [a[0], a[1].double()]                   # two dtypes: PyTorch's per-tensor loop
    torch._foreach_add_(mixed, [b[0], b[1].double()], alpha=2.0)
    torch._foreach_add_(mixed, [b[0], b[1].double()], alpha=2.0)
    torch.testing.assert_close(a[0].cpu(), ca[0] + 4 * cb[0])
    with pytest.raises(RuntimeError, match="same number of tensors"):
        torch._foreach_add_(a, b[:1], alpha=1.0)


def test_factories_serve_in_cpp_as_the_python_route_would(fl):
    from fl_runtime.errors import DeviceNotFoundError

    def made():
        return [torch.empty(2, 3, device="fl:0"), torch.empty((4, 0), dtype=torch.int64, device="fl:0"),
                torch.empty_strided((3, 4), (1, 3), dtype=torch.float64, device="fl:0"),
                torch.empty(2, 3, 4, 5, device="fl:0", memory_format=torch.channels_last),
                torch.ones_like(torch.ones(3, 2, device="fl:0").t())]
    made()
    before = _python_calls(fl)
    fast = made()
    assert _python_calls(fl) - before == 1, "only channels_last goes to the Python kernel"
    with _python_route(fl):
        slow = made()
    for got, want in zip(fast, slow):
        assert (got.shape, got.stride(), got.dtype, got.device) == (want.shape, want.stride(), want.dtype,
                                                                     want.device)
    torch.testing.assert_close(fast[-1].cpu(), torch.ones(2, 3))
    stats = torch.fl.memory_stats(0)["allocated_bytes.all.current"]
    grown = torch.empty(1 << 16, device="fl:0")
    assert torch.fl.memory_stats(0)["allocated_bytes.all.current"] - stats >= grown.nbytes
    with pytest.raises(DeviceNotFoundError):
        torch.empty(3, device=f"fl:{torch.fl.device_count()}")
    with pytest.raises(Exception, match="complex128|dtype"):
        torch.empty(3, dtype=torch.complex128, device="fl:0")


def test_a_memory_format_handed_to_python_keeps_its_references(fl):
    """A call the C++ kernels send to a Python kernel with a memory format (channels_last is the
    factories' Python kernel's; _to_copy's under a profile) passes it as a new reference: a
    borrowed one given away lost the format object a reference per call, until it was freed
    under live tensors and the next garbage collection crashed."""
    import sys

    import torch_fl
    x = torch.ones(2, 3, 4, 5, device="fl:0")
    before = sys.getrefcount(torch.channels_last), sys.getrefcount(torch.contiguous_format)
    for _ in range(20):
        torch.empty(2, 3, 4, 5, device="fl:0", memory_format=torch.channels_last)
    with torch_fl.profile():
        for _ in range(20):
            x.to(torch.float64, memory_format=torch.contiguous_format)
    assert (sys.getrefcount(torch.channels_last), sys.getrefcount(torch.contiguous_format)) == before
