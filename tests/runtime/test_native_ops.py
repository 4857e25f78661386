"""Breadth of the reference vendor: the common training ops run natively on fl:0.

Every case runs in one fresh process with TORCH_FL_STRICT=1, so any op without
a native kernel raises instead of falling back to the CPU.  Each case runs a
function on CPU tensors and on fl:0 copies (contiguous and, for tensors with
two or more dims, a transposed non-contiguous layout) and compares outputs and
input gradients.  The subprocess reports failures per family as JSON; the
tests below assert on their family.  Run this file directly
(`python tests/runtime/test_native_ops.py`) to see the report.
"""
from __future__ import annotations

import json
import sys
from typing import Callable

import pytest

FAMILIES = ("elementwise", "unary", "activation", "reduction", "matmul", "conv", "pool", "norm",
            "softmax", "loss", "embedding", "indexing", "shape", "dropout", "half", "training")

# ---------------------------------------------------------------------------
# checks (run inside the strict subprocess)
# ---------------------------------------------------------------------------


def _layouts(t):
    """The tensor as given and, for >= 2 dims, the same values with transposed strides."""
    yield t
    if t.dim() >= 2:
        yield t.transpose(-1, -2).contiguous().transpose(-1, -2)


def _flat(out) -> list:
    if isinstance(out, (tuple, list)):
        return [o for item in out for o in _flat(item)]
    return [out] if out is not None else []


def _check_case(fn: Callable, inputs: list, grad: bool, tol: dict) -> None:
    import torch
    for layout in range(2):
        variants = [list(_layouts(x))[min(layout, x.dim() >= 2)] if isinstance(x, torch.Tensor) else x
                    for x in inputs]
        if layout and all(v is x for v, x in zip(variants, inputs)):
            continue
        cpu = [v.detach().clone().requires_grad_(grad and v.is_floating_point())
               if isinstance(v, torch.Tensor) else v for v in variants]
        dev = [v.detach().to("fl:0").requires_grad_(grad and v.is_floating_point())
               if isinstance(v, torch.Tensor) else v for v in variants]
        expected, got = _flat(fn(*cpu)), _flat(fn(*dev))
        assert len(expected) == len(got)
        for e, g in zip(expected, got):
            assert g.device.type == "fl", f"result on {g.device}"
            torch.testing.assert_close(g.cpu(), e, equal_nan=True, **tol)
        if not grad:
            continue
        heads = [(e, g) for e, g in zip(expected, got) if e.requires_grad]
        seeds = [torch.randn_like(e) for e, _ in heads]
        torch.autograd.backward([e for e, _ in heads], seeds)
        torch.autograd.backward([g for _, g in heads], [s.to("fl:0") for s in seeds])
        for c, d in zip(cpu, dev):
            if isinstance(c, torch.Tensor) and c.grad is not None:
                torch.testing.assert_close(d.grad.cpu(), c.grad, equal_nan=True, **tol)


def _cases(torch, F) -> dict:
    """family -> [(name, fn, inputs, grad, tol)]"""
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)                       # noqa: E731
    pos = lambda *s: torch.rand(*s, generator=g) + 0.1               # noqa: E731
    idx = lambda hi, *s: torch.randint(0, hi, s, generator=g)        # noqa: E731
    fp = dict(rtol=1e-5, atol=1e-5)
    red = dict(rtol=1e-4, atol=1e-5)
    x, y = r(4, 6) * 2, r(4, 6)
    img = r(2, 3, 7, 6)
    return {
        "elementwise": [
            ("add", lambda a, b: a + 2 * b, [x, y], True, fp),
            ("mul_div", lambda a, b: a * b / (b.abs() + 1), [x, y], True, fp),
            ("maximum", torch.maximum, [x, y], True, fp),
            ("pow_tensor", lambda a, b: a ** b, [pos(4, 6), y], True, red),
            ("atan2", torch.atan2, [x, y], True, fp),
            ("remainder_fmod", lambda a: (a % 1.5, torch.fmod(a, 1.5)), [x], False, fp),
            ("where_masked_fill", lambda a, b: torch.where(a > b, a, b).masked_fill(a < -1, 0.5),
             [x, y], True, fp),
            ("compare_logical", lambda a, b: ((a > b) & (a < 1)) | ~(b >= 0).logical_not(),
             [x, y], False, fp),
            ("clamp_min_max", lambda a: a.clamp_min(-0.5) + a.clamp_max(0.5), [x], True, fp),
            ("xlogy", torch.xlogy, [pos(4, 6), pos(4, 6)], True, fp),
        ],
        "unary": [
            (name, getattr(torch, name), [x], True, fp)
            for name in ("sin", "cos", "exp", "expm1", "erf", "tanh", "sigmoid", "atan")
        ] + [
            ("log1p_rsqrt", lambda a: torch.log1p(a) + torch.rsqrt(a), [pos(4, 6)], True, fp),
            ("rounding_sign", lambda a: (a.floor(), a.ceil(), a.round(), a.trunc(), a.sign()),
             [x], False, fp),
            ("predicates", lambda a: (torch.isnan(a / a.round()), torch.isinf(a / a.round()),
                                      torch.isfinite(a / a.round())), [x], False, fp),
        ],
        "activation": [
            ("gelu", F.gelu, [x], True, fp),
            ("gelu_tanh", lambda a: F.gelu(a, approximate="tanh"), [x], True, fp),
            ("silu", F.silu, [x], True, fp),
            ("leaky_relu", lambda a: F.leaky_relu(a, 0.2), [x], True, fp),
            ("elu", F.elu, [x], True, fp),
            ("softplus", lambda a: F.softplus(a, 2.0, 3.0), [x], True, fp),
            ("hardtanh", F.hardtanh, [x], True, fp),
            ("logsigmoid", F.logsigmoid, [x], True, fp),
            ("relu", F.relu, [x], True, fp),
        ],
        "reduction": [
            ("sum_mean", lambda a: (a.sum(1), a.mean((0, 2), keepdim=True)), [r(3, 4, 5)], True, red),
            ("amax_amin", lambda a: (a.amax(1), a.amin((0, 2))), [r(3, 4, 5)], True, red),
            ("max_min_dim", lambda a: (a.max(1), a.min(2, keepdim=True)), [r(3, 4, 5)], True, red),
            ("argmax_argmin", lambda a: (a.argmax(1), a.argmin(), a.argmin(0)), [r(3, 4, 5)], False, red),
            ("var_std", lambda a: (a.var(1), a.std(), torch.var_mean(a, (0, 1), correction=0)),
             [r(3, 4, 5)], True, red),
            ("norm", lambda a: (a.norm(), a.norm(1, dim=1), torch.linalg.vector_norm(a, 3.0)),
             [r(3, 4, 5)], True, red),
            ("prod_cumsum", lambda a: (a.prod(1), a.cumsum(2)), [r(3, 4, 5)], True, red),
            ("all_any", lambda a: ((a > -2).all(), (a > 1).any(1), (a > 0).all(-1, keepdim=True)),
             [r(3, 4, 5)], False, red),
        ],
        "matmul": [
            ("mm", torch.mm, [r(5, 7), r(7, 3)], True, red),
            ("addmm", lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2), [r(3), r(5, 7), r(7, 3)],
             True, red),
            ("bmm", torch.bmm, [r(2, 5, 7), r(2, 7, 3)], True, red),
            ("baddbmm", lambda c, a, b: torch.baddbmm(c, a, b, alpha=0.5), [r(2, 5, 3), r(2, 5, 7),
                                                                           r(2, 7, 3)], True, red),
            ("linear_matmul", lambda a, w: F.linear(a, w) @ w, [r(2, 3, 4), r(4, 4)], True, red),
        ],
        "conv": [
            ("conv1d", lambda a, w, b: F.conv1d(a, w, b, padding=1), [r(2, 3, 9), r(4, 3, 3), r(4)],
             True, red),
            ("conv2d", lambda a, w: F.conv2d(a, w, stride=2, padding=1), [img, r(4, 3, 3, 3)], True, red),
        ],
        "pool": [
            ("max_pool2d", lambda a: F.max_pool2d(a, 2), [img], True, fp),
            ("avg_pool2d", lambda a: F.avg_pool2d(a, 3, 2, 1, count_include_pad=False), [img], True, fp),
            ("avg_pool2d_ceil", lambda a: F.avg_pool2d(a, 2, ceil_mode=True), [img], True, fp),
        ],
        "norm": [
            ("layer_norm", lambda a, w, b: F.layer_norm(a, (6,), w, b), [r(3, 4, 6), r(6), r(6)], True, red),
            ("group_norm", lambda a, w, b: F.group_norm(a, 3, w, b), [r(2, 6, 4, 3), r(6), r(6)], True, red),
            ("batch_norm_train", lambda a, w, b: F.batch_norm(a, None, None, w, b, training=True),
             [r(4, 3, 5, 2), r(3), r(3)], True, red),
            ("batch_norm_eval", (lambda m, v: lambda a, w: F.batch_norm(a, m.to(a.device), v.to(a.device), w,
                                                                     training=False))(r(3), pos(3)),
             [r(4, 3, 5), r(3)], True, red),
        ],
        "softmax": [
            ("softmax", lambda a: F.softmax(a, 1), [r(3, 5, 4)], True, fp),
            ("log_softmax", lambda a: F.log_softmax(a, -1), [r(3, 5, 4)], True, fp),
        ],
        "loss": [
            ("cross_entropy", lambda a: F.cross_entropy(a, torch.tensor([1, 0, 4]).to(a.device),
                                                       label_smoothing=0.1), [r(3, 5)], True, fp),
            ("mse", F.mse_loss, [r(3, 5), r(3, 5)], True, fp),
            ("bce", lambda a, t: F.binary_cross_entropy(torch.sigmoid(a), t), [r(3, 5), pos(3, 5) / 1.2],
             True, fp),
            ("bce_logits", F.binary_cross_entropy_with_logits, [r(3, 5), pos(3, 5) / 1.2], True, fp),
            ("smooth_l1_huber", lambda a, t: F.smooth_l1_loss(a, t, beta=0.5) + F.huber_loss(a, t),
             [r(3, 5), r(3, 5)], True, fp),
            ("kl_div", lambda a, t: F.kl_div(F.log_softmax(a, 1), F.softmax(t, 1), reduction="batchmean"),
             [r(3, 5), r(3, 5)], True, fp),
        ],
        "embedding": [
            ("embedding", lambda w: F.embedding(torch.tensor([[1, 3], [3, 0]]).to(w.device), w, padding_idx=0),
             [r(5, 4)], True, fp),
        ],
        "indexing": [
            ("gather", lambda a: a.gather(1, torch.tensor([[0, 5], [2, 2], [1, 0], [4, 3]]).to(a.device)),
             [x], True, fp),
            ("scatter", lambda a, s: a.scatter(1, torch.tensor([[0, 5], [2, 3]]).to(a.device), s),
             [r(2, 6), r(2, 2)], True, fp),
            ("scatter_add", lambda a, s: a.scatter_add(0, torch.tensor([[0, 1], [0, 0]]).to(a.device), s),
             [r(2, 6), r(2, 2)], True, fp),
            ("index_select", lambda a: a.index_select(1, torch.tensor([5, 0, 5]).to(a.device)), [x], True, fp),
            ("advanced_index", lambda a: (a[torch.tensor([3, 0]).to(a.device)],
                                          a[:, torch.tensor([1, 1, 0]).to(a.device)],
                                          a[torch.tensor([0, 2]).to(a.device), torch.tensor([5, 1]).to(a.device)]),
             [x], True, fp),
            ("index_put", lambda a, v: a.index_put((torch.tensor([0, 2, 0]).to(a.device),), v, accumulate=True),
             [x, r(3, 6)], True, fp),
            ("flip_roll", lambda a: (a.flip(0, 1), a.roll((1, -2), (0, 1))), [x], True, fp),
        ],
        "shape": [
            ("cat", lambda a, b: torch.cat([a, b, a], 1), [x, y[:, :2]], True, fp),
            ("stack", lambda a, b: torch.stack([a, b], 1), [x, y], True, fp),
        ],
        "half": [
            (f"{name}_{dt}", (lambda f, d: lambda *t: f(*[v.to(d) for v in t]).float())(f, getattr(torch, dt)),
             inputs, False, dict(rtol=2e-2, atol=2e-2))
            for dt in ("float16", "bfloat16")
            for name, f, inputs in (
                ("add_mul", lambda a, b: a * b + a, [x, y]),
                ("mm", torch.mm, [r(5, 7), r(7, 3)]),
                ("softmax", lambda a: F.softmax(a, 1), [x]),
                ("layer_norm", lambda a: F.layer_norm(a, (6,)), [x]),
                ("conv2d", lambda a, w: F.conv2d(a, w), [img, r(2, 3, 3, 3)]),
                ("gelu", F.gelu, [x]),
            )
        ],
    }


def _check_dropout(torch, F) -> list[str]:
    """No CPU reference for random masks: check the semantics instead."""
    x = torch.randn(200, 50).to("fl:0").requires_grad_()
    y = F.dropout(x, 0.3, training=True)
    kept = y.detach().cpu() != 0
    errors = []
    if abs(kept.float().mean().item() - 0.7) > 0.03:
        errors.append(f"dropout keeps {kept.float().mean().item():.3f} of elements, expected ~0.7")
    if not torch.allclose(y.detach().cpu()[kept], x.detach().cpu()[kept] / 0.7):
        errors.append("kept elements are not scaled by 1/(1-p)")
    y.sum().backward()
    if not torch.allclose(x.grad.cpu(), kept.float() / 0.7):
        errors.append("dropout's gradient is not mask/(1-p)")
    if torch.equal(F.dropout(x, 0.3).detach().cpu() != 0, kept):
        errors.append("two dropout calls drew the same mask")
    return errors


def _train_losses(torch, make_model, inputs, loss_fn, make_opt, device: str, steps: int = 3) -> list:
    torch.manual_seed(0)
    model = make_model().to(device)
    opt = make_opt(model.parameters())
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model, *[t.to(device) for t in inputs])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _check_training(torch, F) -> list[str]:
    nn = torch.nn

    class ResBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(8)
            self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(8)
            self.head = nn.Linear(8, 4)

        def forward(self, x):
            h = F.relu(self.bn1(self.conv1(x)))
            h = F.relu(self.bn2(self.conv2(h)) + h)
            return self.head(F.adaptive_avg_pool2d(F.max_pool2d(h, 2), 1).flatten(1))

    g = torch.Generator().manual_seed(1)
    setups = {
        "transformer_adamw": (
            lambda: nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, activation="gelu", batch_first=True),
            [torch.randn(2, 5, 16, generator=g), torch.randn(2, 5, 16, generator=g)],
            lambda m, x, t: F.mse_loss(m(x), t),
            lambda p: torch.optim.AdamW(p, lr=1e-3)),
        "resnet_block_sgd_momentum": (
            ResBlock, [torch.randn(4, 3, 8, 8, generator=g), torch.tensor([0, 3, 1, 2])],
            lambda m, x, t: F.cross_entropy(m(x), t),
            lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
        "embedding_conv1d_adam": (
            lambda: nn.Sequential(nn.Embedding(10, 6), nn.Flatten(0, -1), nn.Unflatten(0, (1, 4, 6)),
                                  nn.Conv1d(4, 2, 3), nn.Flatten(), nn.Linear(8, 1)),
            [torch.tensor([1, 5, 9, 0]), torch.rand(1, 1, generator=g)],
            lambda m, x, t: F.binary_cross_entropy_with_logits(m(x), t),
            lambda p: torch.optim.Adam(p, lr=1e-2)),
    }
    errors = []
    for name, (make, inputs, loss_fn, make_opt) in setups.items():
        cpu = _train_losses(torch, make, inputs, loss_fn, make_opt, "cpu")
        dev = _train_losses(torch, make, inputs, loss_fn, make_opt, "fl:0")
        if not torch.allclose(torch.tensor(dev), torch.tensor(cpu), rtol=1e-4, atol=1e-5):
            errors.append(f"{name}: losses on fl:0 {dev} differ from CPU {cpu}")
    # with dropout on, no CPU match is possible; it must still run natively
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, batch_first=True).to("fl:0")
    layer(torch.randn(2, 5, 16).to("fl:0")).sum().backward()
    return errors


def main() -> dict:
    """Run every family on fl:0; {family: [failure messages]}."""
    import torch
    import torch.nn.functional as F
    import torch_fl  # noqa: F401  (registers fl)
    from fl_runtime.tools import op_stats

    report: dict[str, list[str]] = {name: [] for name in FAMILIES}
    for family, cases in _cases(torch, F).items():
        for name, fn, inputs, grad, tol in cases:
            try:
                _check_case(fn, inputs, grad, tol)
            except Exception as exc:   # reported per case, the test names it
                report[family].append(f"{name}: {type(exc).__name__}: {str(exc)[:400]}")
    for family, check in (("dropout", _check_dropout), ("training", _check_training)):
        try:
            report[family] += check(torch, F)
        except Exception as exc:
            report[family].append(f"{type(exc).__name__}: {str(exc)[:400]}")
    report["_fallbacks"] = op_stats.fallback_ops()
    return report


# ---------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def strict_report():
    from conftest import run_python
    proc = run_python("import json, sys; sys.path.insert(0, 'tests/runtime'); import test_native_ops as t; "
                      "print('REPORT' + json.dumps(t.main()))",
                      env={"TORCH_FL_STRICT": "1"}, timeout=240)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT")]
    assert proc.returncode == 0 and lines, f"strict run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1][len("REPORT"):])


@pytest.mark.parametrize("family", FAMILIES)
def test_family_runs_natively_and_matches_cpu(strict_report, family):
    assert strict_report[family] == [], "\n".join(strict_report[family])


def test_nothing_fell_back(strict_report):
    assert strict_report["_fallbacks"] == []


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
    sys.exit(0)
