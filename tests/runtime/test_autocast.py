"""torch.autocast("fl") with the cast policy of fl_runtime.autocast, and GradScaler("fl").

Low-precision ops the reference vendor lacks run on the CPU fallback; the
GradScaler's _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_
have no vendor kernel and run there too (by design: a few scalars per step).
"""
import pytest
import torch

from fl_runtime.integration.autocast import policy_of


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_policy_lower_for_matmuls_fp32_for_reductions_and_losses(fl, dtype):
    x = torch.randn(8, 16, device="fl:0")
    w = torch.randn(4, 16, device="fl:0")
    target = torch.randint(0, 4, (8,), device="fl:0")
    with torch.autocast("fl", dtype=dtype):
        assert torch.is_autocast_enabled("fl") and torch.fl.get_autocast_dtype() == dtype
        logits = torch.nn.functional.linear(x, w)
        product = x @ x.t()
        assert logits.dtype == dtype and product.dtype == dtype
        assert torch.softmax(logits, dim=1).dtype == torch.float32
        assert logits.sum().dtype == torch.float32
        assert torch.nn.functional.cross_entropy(logits, target).dtype == torch.float32
        assert torch.cat([logits, x[:, :4]]).dtype == torch.float32      # promote: widest input
        assert (x + 1).dtype == torch.float32                            # not listed: unchanged
    assert not torch.is_autocast_enabled("fl")
    assert torch.nn.functional.linear(x, w).dtype == torch.float32
    expected = torch.nn.functional.linear(x.cpu().to(dtype), w.cpu().to(dtype)).float()
    assert torch.allclose(logits.float().cpu(), expected, rtol=2e-2, atol=2e-2)


def test_conv_runs_low_and_cpu_tensors_are_untouched(fl):
    conv = torch.nn.Conv2d(3, 4, 3).to("fl:0")
    with torch.autocast("fl", dtype=torch.bfloat16):
        assert conv(torch.randn(1, 3, 8, 8, device="fl:0")).dtype == torch.bfloat16
        cpu = torch.randn(2, 2)
        assert (cpu @ cpu).dtype == torch.float32         # fl autocast does not touch CPU ops
    assert policy_of("conv2d") == "lower" and policy_of("log_softmax") == "fp32"
    assert policy_of("stack") == "promote" and policy_of("relu") is None


def test_grad_scaler_trains_under_autocast(fl):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2)).to("fl:0")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("fl", init_scale=2.0 ** 8)
    x, y = torch.randn(32, 16, device="fl:0"), torch.randint(0, 2, (32,), device="fl:0")
    losses = []
    for _ in range(8):
        opt.zero_grad()
        with torch.autocast("fl", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())
    assert losses[-1] < losses[0] and scaler.get_scale() == 2.0 ** 8
    # An inf gradient makes the scaler skip the step and halve the scale.
    weights = [p.detach().clone() for p in model.parameters()]
    opt.zero_grad()
    scaler.scale(model(x).sum() * float("inf")).backward()
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 2.0 ** 7
    assert all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(weights, model.parameters()))
