"""The reference vendor's fast kernel paths (reference_vendor/src/kernels/): contiguous foreach
loops, packed fused attention, layer norm's column map, and BLAS on the stream worker's own
thread.  Each fast path must give the values of the path it short-cuts, and the CPU's."""
import textwrap

import pytest
import torch

FP32 = dict(rtol=1e-5, atol=1e-6)


def _lists(seed: int, n: int = 3, transpose: bool = False):
    g = torch.Generator().manual_seed(seed)
    out = []
    for k in range(n):
        t = torch.randn(5 + k, 7, generator=g).abs() + 0.1
        out.append(t.t() if transpose else t)       # a transpose: the strided loop
    return out


def _on_fl(tensors):
    # .t() of a contiguous fl tensor keeps the transpose's strides on the device
    return [t.t().contiguous().to("fl:0").t() if not t.is_contiguous() else t.to("fl:0")
            for t in tensors]


@pytest.mark.parametrize("transpose", [False, True], ids=["contiguous", "strided"])
def test_foreach_ops_match_the_cpu_on_both_loops(fl, transpose):
    cpu_self, a, b = _lists(0, transpose=transpose), _lists(1, transpose=transpose), _lists(2, transpose=transpose)
    fl_self, fa, fb = _on_fl(cpu_self), _on_fl(a), _on_fl(b)
    assert all(t.is_contiguous() != transpose for t in fl_self)
    for cpu_args, fl_args, op in [
        ((cpu_self, 0.5), (fl_self, 0.5), torch._foreach_add_),
        ((cpu_self, 0.9), (fl_self, 0.9), torch._foreach_mul_),
        ((cpu_self, a, 0.3), (fl_self, fa, 0.3), torch._foreach_lerp_),
        ((cpu_self, a, 0.7), (fl_self, fa, 0.7), torch._foreach_lerp_),     # the other lerp branch
        ((cpu_self, a, b, 0.1), (fl_self, fa, fb, 0.1), torch._foreach_addcmul_),
        ((cpu_self, a, b, 0.2), (fl_self, fa, fb, 0.2), torch._foreach_addcdiv_),
        ((cpu_self,), (fl_self,), torch._foreach_sqrt_),
    ]:
        op(*cpu_args)
        op(*fl_args)
        for c, f in zip(cpu_self, fl_self):
            torch.testing.assert_close(f.cpu(), c, **FP32)
    roots_cpu, roots_fl = torch._foreach_sqrt(cpu_self), torch._foreach_sqrt(fl_self)
    for c, f in zip(roots_cpu, roots_fl):
        torch.testing.assert_close(f.cpu(), c, **FP32)


def test_foreach_addcmul_with_one_tensor_twice_matches_the_cpu(fl):
    """AdamW's exp_avg_sq.addcmul_(grad, grad): both operands are one tensor (read only)."""
    cpu_self, grads = _lists(3), _lists(4)
    fl_self, fl_grads = _on_fl(cpu_self), _on_fl(grads)
    torch._foreach_addcmul_(cpu_self, grads, grads, 0.001)
    torch._foreach_addcmul_(fl_self, fl_grads, fl_grads, 0.001)
    for c, f in zip(cpu_self, fl_self):
        torch.testing.assert_close(f.cpu(), c, **FP32)


def test_adamw_foreach_steps_match_the_cpu(fl):
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    fl_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    fl_model.load_state_dict(cpu_model.state_dict())
    fl_model.to("fl:0")
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, foreach=True) for m in (cpu_model, fl_model)]
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(1))
    for _ in range(5):
        for model, opt, inp in ((cpu_model, opts[0], x), (fl_model, opts[1], x.to("fl:0"))):
            opt.zero_grad()
            model(inp).square().mean().backward()
            opt.step()
    for c, f in zip(cpu_model.parameters(), fl_model.parameters()):
        torch.testing.assert_close(f.detach().cpu(), c.detach(), rtol=1e-4, atol=1e-5)


def _sdpa_case(seed: int, L: int, S: int, E: int, Hq: int = 4, Hk: int = 4):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2, Hq, L, E, generator=g), torch.randn(2, Hk, S, E, generator=g),
            torch.randn(2, Hk, S, E, generator=g))


@pytest.mark.parametrize("L,S,causal", [(64, 64, True), (7, 12, True), (12, 7, True), (9, 9, False)])
def test_fused_attention_and_its_backward_match_the_cpu(fl, L, S, causal):
    q, k, v = _sdpa_case(L * 100 + S, L, S, 16)
    F = torch.nn.functional
    grads = []
    for dev in ("cpu", "fl:0"):
        leaves = [t.detach().to(dev).requires_grad_() for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
        out.backward(torch.ones_like(out))
        grads.append([out.detach().cpu()] + [t.grad.cpu() for t in leaves])
    for c, f in zip(*grads):
        torch.testing.assert_close(f, c, rtol=1e-4, atol=1e-5)


def test_fused_attention_strided_heads_match_the_cpu(fl):
    """GPT-2 splits q, k, v out of one projection and transposes them: packed from strides."""
    g = torch.Generator().manual_seed(5)
    qkv = torch.randn(2, 10, 3 * 32, generator=g)
    F = torch.nn.functional

    def heads(t):
        return [x.view(2, 10, 4, 8).transpose(1, 2) for x in t.split(32, dim=2)]
    on_cpu = F.scaled_dot_product_attention(*heads(qkv), is_causal=True)
    on_fl = F.scaled_dot_product_attention(*heads(qkv.to("fl:0")), is_causal=True)
    torch.testing.assert_close(on_fl.cpu(), on_cpu, rtol=1e-4, atol=1e-5)


def test_fused_attention_infinite_value_behind_the_mask_gives_nan_as_the_cpu(fl):
    """A masked key still multiplies its value by 0 (0 * inf = NaN), as PyTorch's math path:
    the kernel stops at the last visible key only when every value is finite."""
    q, k, v = _sdpa_case(7, 6, 6, 8)
    v[0, 0, 5, 0] = float("inf")          # key 5: masked for every row but the last
    F = torch.nn.functional
    on_cpu = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    on_fl = F.scaled_dot_product_attention(q.to("fl:0"), k.to("fl:0"), v.to("fl:0"), is_causal=True)
    assert on_cpu[0, 0, :5, 0].isnan().all()         # the reference behaviour this pins
    torch.testing.assert_close(on_fl.cpu(), on_cpu, rtol=1e-4, atol=1e-5, equal_nan=True)


def test_layer_norm_and_group_norm_grads_match_the_cpu(fl):
    g = torch.Generator().manual_seed(6)
    x = torch.randn(6, 5, 64, generator=g)
    w, b = torch.randn(64, generator=g), torch.randn(64, generator=g)
    xg, wg, bg = torch.randn(3, 8, 4, 4, generator=g), torch.randn(8, generator=g), torch.randn(8, generator=g)
    F = torch.nn.functional
    results = []
    for dev in ("cpu", "fl:0"):
        leaves = [t.detach().to(dev).requires_grad_() for t in (x, w, b, xg, wg, bg)]
        ln = F.layer_norm(leaves[0], (64,), leaves[1], leaves[2])
        gn = F.group_norm(leaves[3], 4, leaves[4], leaves[5])
        (ln.square().sum() + gn.square().sum()).backward()
        results.append([ln.detach().cpu(), gn.detach().cpu()] + [t.grad.cpu() for t in leaves])
    for c, f in zip(*results):
        torch.testing.assert_close(f, c, rtol=1e-4, atol=1e-4)


_BLAS_THREADS = """
import ctypes, glob, os, sys
import torch, torch_fl
x = torch.randn(64, 64).to("fl:0")
(x @ x).cpu()                           # the first gemm sets BLAS's threads
import scipy_openblas32 as blas
lib = ctypes.CDLL(glob.glob(os.path.join(blas.get_lib_dir(), "libscipy_openblas*.so"))[0])
print("threads", lib.scipy_openblas_get_num_threads())
"""


@pytest.mark.parametrize("env,expected", [({}, 1), ({"FL_REFERENCE_BLAS_THREADS": "2"}, 2)])
def test_blas_runs_on_the_worker_thread_unless_asked(python, env, expected):
    out = python(_BLAS_THREADS, env={"OPENBLAS_NUM_THREADS": "", **env})   # "": as if unset
    assert out.returncode == 0, out.stderr
    assert f"threads {expected}" in out.stdout, out.stdout + out.stderr


def test_kernel_stats_file_counts_calls_and_inline_runs(python, tmp_path):
    path = tmp_path / "stats.tsv"
    out = python(textwrap.dedent("""
        import torch, torch_fl
        a = torch.ones(4, 4).to("fl:0")
        torch_fl.synchronize(0)         # the upload is enqueued without waiting: let the stream go idle
        for _ in range(3):
            b = a @ a                   # small, idle stream: runs inline
        big = torch.ones(256, 256).to("fl:0")
        for _ in range(3):
            c = big @ big               # 256 KiB per operand: the worker runs it
        torch_fl.synchronize(0)
    """), env={"FL_REFERENCE_KERNEL_STATS": str(path)})
    assert out.returncode == 0, out.stderr
    rows = [line.split("\t") for line in path.read_text().splitlines()]
    assert rows[0] == ["op", "calls", "inline", "ns", "cpu_ns"]
    mm = {r[0]: r for r in rows[1:]}["mm"]
    calls, inline = int(mm[1]), int(mm[2])
    assert calls == 6 and inline >= 1 and inline <= 3, mm
    assert int(mm[3]) > 0 and int(mm[4]) > 0


@pytest.mark.parametrize("beta", [1.0, 0.5])
def test_addmm_and_baddbmm_bias_fill_matches_the_cpu(fl, beta):
    """The row fill of beta * self: a bias row, a column, a full matrix, in place, batched."""
    g = torch.Generator().manual_seed(8)
    m1, m2 = torch.randn(6, 5, generator=g), torch.randn(5, 7, generator=g)
    for self in (torch.randn(7, generator=g), torch.randn(6, 1, generator=g), torch.randn(6, 7, generator=g),
                 torch.randn(7, 6, generator=g).t()):
        expected = torch.addmm(self, m1, m2, beta=beta, alpha=0.7)
        got = torch.addmm(self.to("fl:0"), m1.to("fl:0"), m2.to("fl:0"), beta=beta, alpha=0.7)
        torch.testing.assert_close(got.cpu(), expected, **FP32)
    acc = torch.randn(6, 7, generator=g)
    on_fl = acc.to("fl:0")
    on_fl.addmm_(m1.to("fl:0"), m2.to("fl:0"), beta=beta)
    torch.testing.assert_close(on_fl.cpu(), acc.addmm(m1, m2, beta=beta), **FP32)
    b1, b2, bias = torch.randn(3, 6, 5, generator=g), torch.randn(3, 5, 7, generator=g), torch.randn(7, generator=g)
    got = torch.baddbmm(bias.to("fl:0"), b1.to("fl:0"), b2.to("fl:0"), beta=beta)
    torch.testing.assert_close(got.cpu(), torch.baddbmm(bias, b1, b2, beta=beta), **FP32)
