"""torch.optim on fl: the fused and foreach paths reach the vendor (docs/users/optimizers.md).

PyTorch lists fl among the devices with foreach and fused kernels, so
`AdamW(params)` takes the foreach path and `AdamW(params, fused=True)` calls
`_fused_adamw_` once per (device, dtype) group.  Each check trains the same
small model with the same optimizer on the CPU and on fl:0 for a few steps
and compares parameters and optimizer state; the launch counts show the
step reaches the vendor as a few tensor-list kernels, with no fallback.
"""
import copy

import pytest
import torch
from torch import nn

from fl_runtime.tools import op_stats

TOL = {torch.float32: dict(rtol=1e-6, atol=1e-6), torch.float64: dict(rtol=1e-12, atol=1e-12)}
STEPS = 4


def _model(dtype=torch.float32) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)).to(dtype)


def _train(model: nn.Module, device: str, make_opt, steps: int = STEPS, backward: bool = False):
    """`steps` optimizer steps.  The gradients are drawn on the CPU and copied, so both devices
    step from bit-identical gradients and any difference is the optimizer's; backward=True
    takes them from a real forward/backward instead (which differ in the last bits)."""
    model = copy.deepcopy(model).to(device)
    opt = make_opt(model.parameters())
    gen = torch.Generator().manual_seed(1)
    dtype = next(model.parameters()).dtype
    x = torch.randn(5, 4, dtype=dtype, generator=gen).to(device)
    for _ in range(steps):
        opt.zero_grad()
        if backward:
            model(x).pow(2).sum().backward()
        else:
            for p in model.parameters():
                p.grad = torch.randn(p.shape, dtype=dtype, generator=gen).to(device)
        opt.step()
    return model, opt


def _assert_same(fl_pair, cpu_pair, dtype):
    (fl_model, fl_opt), (cpu_model, cpu_opt) = fl_pair, cpu_pair
    for got, want in zip(fl_model.parameters(), cpu_model.parameters()):
        assert got.device.type == "fl"
        torch.testing.assert_close(got.detach().cpu(), want.detach(), **TOL[dtype])
    for got_p, want_p in zip(fl_model.parameters(), cpu_model.parameters()):
        got, want = fl_opt.state[got_p], cpu_opt.state[want_p]
        assert got.keys() == want.keys()
        for key in want:
            if isinstance(want[key], torch.Tensor):
                torch.testing.assert_close(got[key].cpu(), want[key], **TOL[dtype], msg=key)


ADAM_CASES = [
    (torch.optim.AdamW, dict(lr=0.01)),
    (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
    (torch.optim.Adam, dict(lr=0.01, weight_decay=0.05, maximize=True)),
    (torch.optim.Adam, dict(lr=torch.tensor(0.01), amsgrad=True)),      # the .tensor_lr overload
    (torch.optim.SGD, dict(lr=0.1)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.1, maximize=True)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("opt_class,kwargs", ADAM_CASES)
def test_fused_matches_cpu(fl, opt_class, kwargs, dtype):
    model = _model(dtype)

    def make(device):
        args = dict(kwargs)
        if isinstance(args["lr"], torch.Tensor):
            args["lr"] = args["lr"].to(device)
        return lambda params: opt_class(params, fused=True, **args)
    op_stats.reset()
    on_fl = _train(model, "fl:0", make("fl:0"))
    assert not op_stats.fallback_ops(), op_stats.snapshot()
    _assert_same(on_fl, _train(model, "cpu", make("cpu")), dtype)


@pytest.mark.parametrize("foreach", [None, True, False])
def test_default_and_foreach_match_cpu(fl, foreach):
    model = _model()
    make = lambda params: torch.optim.AdamW(params, lr=0.01, weight_decay=0.1, foreach=foreach)  # noqa: E731
    _assert_same(_train(model, "fl:0", make), _train(model, "cpu", make), torch.float32)
    # and from real gradients, which differ from the CPU's in the last bits (summation order)
    fl_model, _ = _train(model, "fl:0", make, backward=True)
    cpu_model, _ = _train(model, "cpu", make, backward=True)
    for got, want in zip(fl_model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-5, atol=1e-5)


def _step_counts(make_opt) -> dict:
    model, opt = _train(_model(), "fl:0", make_opt, steps=1)   # state exists: the next step is steady
    model(torch.randn(5, 4).to("fl:0")).sum().backward()
    op_stats.reset()
    opt.step()
    counts = op_stats.snapshot()
    assert not op_stats.fallback_ops(), counts
    return counts


def test_fused_adamw_is_one_vendor_launch(fl):
    counts = _step_counts(lambda params: torch.optim.AdamW(params, lr=0.01, fused=True))
    assert counts.pop("aten::_fused_adamw_") == {"native": 1}
    # the other launch is PyTorch's step-counter increment, itself one list kernel
    assert counts == {"aten::_foreach_add_.Scalar": {"native": 1}}, counts


@pytest.mark.parametrize("found_inf", [0.0, 1.0])
@pytest.mark.parametrize("op", ["adamw", "sgd"])
def test_grad_scaler_arguments(fl, op, found_inf):
    """GradScaler's grad_scale (grads divided by it, in place) and found_inf (1: the step is
    skipped) on the vendor kernel: the same parameters, grads and state as ATen's CPU kernel."""
    def run(device):
        gen = torch.Generator().manual_seed(2)
        made = [[torch.rand(3, 2, generator=gen).to(device) for _ in range(2)] for _ in range(4)]
        params, grads, m, v = made
        scaler = dict(grad_scale=torch.tensor(4.0).to(device), found_inf=torch.tensor(found_inf).to(device))
        if op == "adamw":
            steps = [torch.tensor(3.0).to(device) for _ in range(2)]
            torch._fused_adamw_(params, grads, m, v, [], steps, lr=0.1, beta1=0.9, beta2=0.99,
                                weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False, **scaler)
        else:
            torch._fused_sgd_(params, grads, m, weight_decay=0.01, momentum=0.9, lr=0.1, dampening=0.0,
                              nesterov=False, maximize=False, is_first_step=False, **scaler)
        return [t.cpu() for t in params + grads + m + v]
    want = run("cpu")
    op_stats.reset()
    got = run("fl:0")
    assert not op_stats.fallback_ops(), op_stats.snapshot()
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **TOL[torch.float32])


def test_foreach_adamw_step_is_list_launches(fl):
    """The default (foreach) AdamW step: every tensor-list op reaches the vendor once per
    list, the per-parameter bias corrections too (Scalar[]: _foreach_div_.ScalarList,
    _foreach_addcdiv_.ScalarList), so the step's launches do not grow with the parameters."""
    counts = _step_counts(lambda params: torch.optim.AdamW(params, lr=0.01, weight_decay=0.1))
    assert counts == {
        "aten::_foreach_mul_.Scalar": {"native": 2},          # weight decay, beta2
        "aten::_foreach_lerp_.Scalar": {"native": 1},
        "aten::_foreach_addcmul_.Scalar": {"native": 1},
        "aten::_foreach_sqrt.out": {"native": 1},
        "aten::_foreach_div_.ScalarList": {"native": 1},      # / sqrt(bias_correction2), per parameter
        "aten::_foreach_add_.Scalar": {"native": 1},          # + eps
        "aten::_foreach_addcdiv_.ScalarList": {"native": 1},  # step sizes, per parameter
    }, counts                                          # 8 launches; 8 per parameter (32) at first


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_foreach_scalarlist_ops_match_cpu_bit_for_bit(fl, dtype):
    """Entry k takes scalars[k] (ints, floats and bools alike travel as doubles, fl_abi.h),
    across calls whose scalars change (the template patches them): ATen's CPU values."""
    def run(device, scalars_per_call):
        gen = torch.Generator().manual_seed(5)
        shapes = [(3, 4), (5,), (2, 2, 2)]
        xs, a, b = ([torch.randn(s, dtype=dtype, generator=gen).to(device) for s in shapes] for _ in range(3))
        b = [t.abs() + 0.1 for t in b]
        for scalars in scalars_per_call:
            torch._foreach_div_(xs, scalars)
            torch._foreach_addcdiv_(xs, a, b, scalars)
        return [t.cpu() for t in xs]
    # three calls of one signature (the template's patched values), then ints and a bool
    calls = [[0.5, -3.0, 1e-3], [2.0, 1.5, -0.25], [1 / 3, 7.5, 2.0], [2, True, -7]]
    want = run("cpu", calls)
    op_stats.reset()
    got = run("fl:0", calls)
    assert not op_stats.fallback_ops(), op_stats.snapshot()
    assert op_stats.snapshot()["aten::_foreach_div_.ScalarList"] == {"native": 4}
    for g, w in zip(got, want):
        assert torch.equal(g, w), (g, w)


def test_foreach_scalarlist_signature_does_not_grow_with_new_values(fl):
    """A step's new bias corrections are data: one meta-cache signature for every step's
    values (an entry per step would grow without end in a long training run)."""
    import torch_fl
    _, spec_cache = torch_fl.runtime().launcher._plan("_foreach_div_.ScalarList")
    before = len(spec_cache._memo)          # other tests' signatures
    xs = [torch.ones(3, 7).to("fl:0"), torch.ones(2, 7).to("fl:0")]
    for step in range(1, 6):
        torch._foreach_div_(xs, [1 + 0.1 * step, 1 - 0.01 * step])
    assert len(spec_cache._memo) == before + 1, list(spec_cache._memo)


def test_foreach_scalarlist_refuses_mismatched_lengths_and_huge_ints(fl):
    xs = [torch.ones(2).to("fl:0"), torch.ones(3).to("fl:0")]
    with pytest.raises(RuntimeError, match="same number of elements as scalar list"):
        torch._foreach_div_(xs, [2.0])
    # 2**60 + 1 has no exact double: the call leaves the vendor kernel, it is never rounded
    op_stats.reset()
    ints = [torch.ones(2, dtype=torch.float64).to("fl:0") for _ in range(2)]
    torch._foreach_div_(ints, [2 ** 60 + 1, 4])
    assert "aten::_foreach_div_.ScalarList" not in {op for op, paths in op_stats.snapshot().items()
                                                     if paths.get("native")}, op_stats.snapshot()
    want = [torch.ones(2, dtype=torch.float64).div_(2 ** 60 + 1), torch.ones(2, dtype=torch.float64).div_(4)]
    for g, w in zip(ints, want):
        assert torch.equal(g.cpu(), w)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_foreach_sgd_matches_cpu(fl, momentum):
    model = _model()
    make = lambda params: torch.optim.SGD(params, lr=0.1, momentum=momentum, foreach=True)  # noqa: E731
    _assert_same(_train(model, "fl:0", make), _train(model, "cpu", make), torch.float32)


def test_foreach_ops_off_the_fast_route(fl):
    """Integer lists, broadcasting and mixed dtypes take PyTorch's per-tensor loop on fl's
    ordinary kernels (as CUDA's slow route): the same values as on the CPU, and no fallback."""
    cases = [  # (make the lists on a device, run the in-place op on them)
        (lambda d: [[torch.arange(4).to(d)]], lambda ls: torch._foreach_add_(ls[0], 3)),
        (lambda d: [[torch.ones(2, 3).to(d)], [torch.arange(3.0).to(d)]],
         lambda ls: torch._foreach_add_(ls[0], ls[1], alpha=2)),
        (lambda d: [[torch.ones(3).to(d), torch.ones(2, dtype=torch.float64).to(d)]],
         lambda ls: torch._foreach_mul_(ls[0], 1.5)),
        (lambda d: [[torch.rand(3, generator=torch.Generator().manual_seed(3)).to(d)],
                    [torch.rand(3, generator=torch.Generator().manual_seed(4)).to(d)]],
         lambda ls: torch._foreach_lerp_(ls[0], ls[1], 0.7)),      # a supported one, for contrast
    ]
    for make, run in cases:
        cpu_lists, fl_lists = make("cpu"), make("fl:0")
        run(cpu_lists)
        op_stats.reset()
        run(fl_lists)
        assert not op_stats.fallback_ops(), op_stats.snapshot()
        for got, want in zip(fl_lists[0], cpu_lists[0]):
            assert got.dtype == want.dtype
            torch.testing.assert_close(got.cpu(), want)


def test_foreach_sqrt_out_of_place(fl):
    xs = [torch.rand(3, 2), torch.rand(5, dtype=torch.float64) + 1, torch.arange(4)]
    for inputs in (xs[:1], xs[1:2], xs):            # one float32 list, one float64, a mixed one
        got = torch._foreach_sqrt([t.to("fl:0") for t in inputs])
        want = torch._foreach_sqrt(inputs)
        for g, w in zip(got, want):
            assert g.device.type == "fl" and g.dtype == w.dtype
            torch.testing.assert_close(g.cpu(), w)


def test_foreach_list_length_mismatch_raises(fl):
    a = [torch.ones(2).to("fl:0"), torch.ones(2).to("fl:0")]
    with pytest.raises(RuntimeError, match="same number of tensors"):
        torch._foreach_add_(a, a[:1])
    with pytest.raises(RuntimeError, match="at least one tensor"):
        torch._foreach_mul_([], 2.0)
