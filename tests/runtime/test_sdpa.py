"""scaled_dot_product_attention on fl: the plugin's fused kernels when it offers them,
PyTorch's math path otherwise (ops/owned/attention.py, docs/users/attention.md).

Each case runs the same call on the CPU and on fl:0 and compares the output and
every gradient; the op counters say which path ran.  A tiny HF Llama (sdpa
attention) must reach the reference vendor's kernels once per layer and pass.
"""
import copy
import math
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from fl_runtime.ops import accounting

FWD = "aten::_scaled_dot_product_fused_attention_overrideable"
BWD = FWD + "_backward"
TOL = dict(rtol=1e-5, atol=2e-6)


def _inputs(b=2, hq=4, hk=4, l=5, s=7, e=8, ev=6, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=g, dtype=dtype) for shape in ((b, hq, l, e), (b, hk, s, e), (b, hk, s, ev))]


def _both(tensors, mask=None, grad_mask=False, **kwargs):
    """(CPU results, fl results, fl op counts): output, then grads of q, k, v (and mask)."""
    results = []
    for device in ("cpu", "fl:0"):
        q, k, v = [t.detach().to(device).requires_grad_() for t in tensors]
        m = None if mask is None else mask.detach().to(device).requires_grad_(grad_mask)
        accounting.reset_counts()
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=m, **kwargs)
        out.backward(torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape).to(device))
        results.append([out, q.grad, k.grad, v.grad] + ([m.grad] if grad_mask else []))
    return results[0], [t.cpu() for t in results[1]], accounting.counts()


def _fused_ran(counts) -> bool:
    return counts[(FWD, "native")] == 1 and counts[(BWD, "native")] == 1


CASES = {
    "plain": dict(),
    "causal": dict(is_causal=True),
    "causal L>S": dict(is_causal=True, shape=dict(l=7, s=5)),
    "scale": dict(scale=0.3),
    "gqa": dict(enable_gqa=True, shape=dict(hq=6, hk=2)),
    "bool mask": dict(mask=lambda: torch.rand(5, 7, generator=torch.Generator().manual_seed(3)) > 0.4),
    "float mask, grad": dict(mask=lambda: torch.randn(2, 1, 5, 7), grad_mask=True),
}


@pytest.mark.parametrize("name", CASES)
def test_fused_kernels_match_cpu_forward_and_gradients(fl, name):
    case = dict(CASES[name])
    tensors = _inputs(**case.pop("shape", {}))
    mask = case.pop("mask", lambda: None)()
    want, got, counts = _both(tensors, mask, **case)
    assert _fused_ran(counts), counts
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, **TOL)


STEADY = {
    "float mask": dict(mask=lambda: torch.randn(1, 1, 5, 7)),
    "bool mask": CASES["bool mask"],
    "gqa": CASES["gqa"],
    "causal": CASES["causal"],
    "sdpa_kernel(MATH)": dict(math=True, mask=lambda: torch.randn(5, 7)),
}


@pytest.mark.parametrize("name", STEADY)
def test_repeated_calls_match_cpu_and_count_as_the_first(fl, name):
    """The same call again and again: with the bridge, the second on is served in C++
    (bridge/csrc/sdpa_kernel.h, the forward's recorded program); each call gives the CPU's
    output and gradients and counts the fused kernels once (none under sdpa_kernel(MATH)),
    as the first call and the Python route (TORCH_FL_BRIDGE=0) do."""
    case = dict(STEADY[name])
    math_only = case.pop("math", False)
    tensors = _inputs(**case.pop("shape", {}))
    mask = case.pop("mask", lambda: None)()
    for _ in range(3):
        if math_only:
            with sdpa_kernel([SDPBackend.MATH]):
                want, got, counts = _both(tensors, mask, **case)
        else:
            want, got, counts = _both(tensors, mask, **case)
        assert (counts[(FWD, "native")], counts[(BWD, "native")]) == ((0, 0) if math_only else (1, 1)), counts
        for w, g in zip(want, got):
            torch.testing.assert_close(g, w, **TOL)


def test_repeated_inference_calls_match_cpu(fl):
    """No autograd (a decode step): the output alone, each call the CPU's."""
    q, k, v = _inputs(hq=4, hk=2, l=1)
    mask = torch.randn(2, 1, 1, 7)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    q, k, v, mask = (t.to("fl:0") for t in (q, k, v, mask))
    for _ in range(3):
        accounting.reset_counts()
        with torch.no_grad():
            got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        assert accounting.counts()[(FWD, "native")] == 1
        torch.testing.assert_close(got.cpu(), want, **TOL)


def test_a_kernel_hidden_after_steady_calls_gives_the_math_path(fl, monkeypatch):
    """The choice reads the kernel table as it is now: C++ asks again after it changes."""
    from fl_runtime.integration import process
    tensors = _inputs()
    for _ in range(2):
        assert _fused_ran(_both(tensors)[2])
    monkeypatch.delitem(process.start().device(0).kernels, BWD.removeprefix("aten::"))
    want, got, counts = _both(tensors)
    assert counts[(FWD, "native")] == 0
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, **TOL)


@pytest.mark.skipif("not __import__('fl_runtime.bridge', fromlist=['x']).status().active",
                    reason="the Python route: no C++ kernel to leave")
def test_a_python_mode_takes_the_python_kernel_with_the_same_values(fl):
    """A TorchDispatchMode on the thread (as torch.compile's tracing sets): the C++ kernel hands
    the call to attention.py's, which gives the same output; without it C++ serves the call."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    native = fl.runtime().launcher.native
    q, k, v = _inputs(hq=4, hk=2)
    want = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    q, k, v = (t.to("fl:0") for t in (q, k, v))
    # Until C++ serves it: an earlier test in this process (a dispatch mode, a compile) may have
    # sent this call signature to Python, and the eager kernel then retries its recording only
    # after 1, 2, 4 ... calls (eager_kernel.cpp).  A call that never leaves Python fails this.
    for _ in range(64):
        before = native.eager_stats()["python_calls"]
        got = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        if native.eager_stats()["python_calls"] == before:
            break
    assert native.eager_stats()["python_calls"] == before, "C++ never served the steady call"
    frames = []
    sys.setprofile(lambda frame, event, arg: frames.append(frame.f_code.co_name) if event == "call" else None)
    try:
        with Seen():
            in_mode = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    finally:
        sys.setprofile(None)
    assert "scaled_dot_product_attention" in frames          # attention.py's kernel
    for out in (got, in_mode):
        torch.testing.assert_close(out.cpu(), want, **TOL)


def test_threads_on_two_devices_match_cpu(fl):
    """Two threads, each calling attention on its own device over and over."""
    import threading
    q, k, v = _inputs(hq=4, hk=2, l=1)
    want = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    errors = []

    def drive(device):
        try:
            torch.fl.set_device(int(device[-1]))
            inputs = [t.to(device) for t in (q, k, v)]
            for _ in range(20):
                got = F.scaled_dot_product_attention(*inputs, enable_gqa=True)
            torch.testing.assert_close(got.cpu(), want, **TOL)
        except Exception as exc:   # noqa: BLE001 - reported below, in the test's thread
            errors.append(exc)
    threads = [threading.Thread(target=drive, args=(device,)) for device in ("fl:0", "fl:1")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_fully_masked_rows_give_zeros_as_pytorch(fl):
    mask = torch.ones(5, 7, dtype=torch.bool)
    mask[2] = False                     # row 2 sees no key: PyTorch's math path gives 0, not NaN
    want, got, counts = _both(_inputs(), mask)
    assert _fused_ran(counts)
    assert torch.equal(got[0][:, :, 2], torch.zeros_like(got[0][:, :, 2]))
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, **TOL)


def test_float64_keeps_full_precision(fl):
    want, got, counts = _both(_inputs(dtype=torch.float64), torch.randn(5, 7, dtype=torch.float64), is_causal=False)
    assert _fused_ran(counts)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("why", ["sdpa_kernel(MATH)", "dropout", "float16", "no plugin kernel"])
def test_math_path_when_the_fused_kernels_do_not_apply(fl, why, monkeypatch):
    """PyTorch's math path runs, with PyTorch's results, whenever the fused kernels cannot."""
    dtype = torch.float16 if why == "float16" else torch.float32
    tensors, kwargs = _inputs(dtype=dtype), {}
    if why == "no plugin kernel":
        from fl_runtime.integration import process
        kernels = process.start().device(0).kernels
        monkeypatch.delitem(kernels, FWD.removeprefix("aten::"))
    if why == "dropout":          # p=1 drops everything: deterministic on both devices
        kwargs["dropout_p"] = 1.0
    if why == "sdpa_kernel(MATH)":
        with sdpa_kernel([SDPBackend.MATH]):
            want, got, counts = _both(tensors, **kwargs)
    else:
        want, got, counts = _both(tensors, **kwargs)
    assert counts[(FWD, "native")] == 0 and counts[(BWD, "native")] == 0
    tol = dict(rtol=2e-3, atol=2e-3) if dtype == torch.float16 else TOL
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, **tol)


def test_pytorch_errors_are_unchanged(fl):
    q, k, v = [t.to("fl:0") for t in _inputs(hq=4, hk=2)]
    with pytest.raises(RuntimeError) as on_cpu:
        F.scaled_dot_product_attention(*[t.cpu() for t in (q, k, v)])
    with pytest.raises(RuntimeError) as on_fl:
        F.scaled_dot_product_attention(q, k, v)       # grouped heads without enable_gqa
    assert str(on_fl.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]


def test_hf_llama_with_sdpa_attention_runs_the_fused_kernels(fl):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                      attn_implementation="sdpa")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    losses, grads = [], []
    for m, device in ((model, "cpu"), (copy.deepcopy(model).to("fl:0"), "fl:0")):
        accounting.reset_counts()
        loss = m(input_ids=ids.to(device), labels=ids.to(device)).loss
        loss.backward()
        losses.append(loss.item())
        grads.append(m.model.layers[0].self_attn.q_proj.weight.grad.cpu())
    counts = accounting.counts()
    assert counts[(FWD, "native")] == config.num_hidden_layers, counts
    assert counts[(BWD, "native")] == config.num_hidden_layers, counts
    assert math.isclose(losses[0], losses[1], rel_tol=1e-5)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-5)


def test_inference_mode_runs_the_fused_forward(fl):
    """Below autograd (inference mode) the PrivateUse1 registration makes the same choice."""
    q, k, v = _inputs()
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    accounting.reset_counts()
    with torch.inference_mode():
        got = F.scaled_dot_product_attention(*[t.to("fl:0") for t in (q, k, v)], is_causal=True)
    assert accounting.counts()[(FWD, "native")] == 1
    torch.testing.assert_close(got.cpu(), want, **TOL)
