"""The common paths run on the device: printing a tensor, torch.equal, an AMP step with
GradScaler("fl"), a DDP step (DDP scales gradients with mul.out).

Each makes no CPU fallback on the reference vendor (the runtime's per-op counters,
torch_fl.op_stats), and each generic kernel of fl_runtime/ops/fallback/common_kernels.py
agrees with PyTorch's CPU kernel.
"""
from __future__ import annotations

import json

import pytest
import torch
from rank_runner import run_ranks

import torch_fl  # noqa: F401  (registers fl)
from fl_runtime.tools import op_stats


def _cpu_fallbacks() -> list[str]:
    return sorted(op for op, paths in op_stats.snapshot().items() if op_stats.CPU in paths)


@pytest.fixture(autouse=True)
def _counted():
    op_stats.reset()
    yield


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.float16])
def test_printing_a_tensor_runs_on_the_device(dtype):
    cpu = (torch.arange(-6, 6).reshape(3, 4) * 0.75).to(dtype)
    text = repr(cpu.to("fl"))
    assert _cpu_fallbacks() == []
    expected = repr(cpu)
    expected = (expected.replace(", dtype=", ", device='fl:0', dtype=") if ", dtype=" in expected
                else expected[:-1] + ", device='fl:0')")
    assert text.split() == expected.split()          # the device suffix may wrap the line


def test_torch_equal_runs_on_the_device_and_agrees_with_the_cpu():
    a = torch.tensor([1.0, float("nan"), 3.0])
    cases = [(a[[0, 2]], a[[0, 2]]), (a, a), (a[:2], a[1:]), (torch.ones(2), torch.ones(3)),
             (torch.ones(2, 1), torch.ones(2)), (torch.arange(4), torch.arange(4.0))]
    for x, y in cases:
        assert torch.equal(x.to("fl"), y.to("fl")) == torch.equal(x, y), (x, y)
    assert _cpu_fallbacks() == []


@pytest.mark.parametrize("shape", [(), (0, 2), (5,), (2, 3, 4)])
def test_nonzero_and_masked_select_agree_with_the_cpu(shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    mask = x > 0.2
    assert torch.equal(torch.nonzero(x.to("fl") > 0.2).cpu(), torch.nonzero(mask))
    assert torch.equal(torch.masked_select(x.to("fl"), mask.to("fl")).cpu(), torch.masked_select(x, mask))
    assert _cpu_fallbacks() == []


def test_out_overloads_run_as_their_functional_overload():
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    out = torch.empty(0, device="fl")                  # resized, as out= allows
    torch.mul(a.to("fl"), b.to("fl"), out=out)
    torch.testing.assert_close(out.cpu(), a * b, rtol=0, atol=0)
    assert op_stats.snapshot()["aten::mul.out"] == {op_stats.GENERIC: 1}
    # An out= tensor the result cannot safely be cast to is refused, as on the CPU.
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        torch.mul(a.to("fl"), b.to("fl"), out=torch.empty(3, 4, dtype=torch.int64, device="fl"))


def test_amp_kernels_agree_with_the_cpu():
    grads = [torch.tensor([1.0, 2.0]), torch.tensor([[4.0, float("inf")]]), torch.tensor([8.0])]
    for with_inf in (False, True):
        chosen = grads if with_inf else [grads[0], grads[2]]
        cpu = [g.clone() for g in chosen]
        fl = [g.to("fl") for g in chosen]
        found_cpu, found_fl = torch.zeros(1), torch.zeros(1, device="fl")
        torch._amp_foreach_non_finite_check_and_unscale_(cpu, found_cpu, torch.tensor([0.5]))
        torch._amp_foreach_non_finite_check_and_unscale_(fl, found_fl, torch.tensor([0.5], device="fl"))
        assert found_fl.item() == found_cpu.item() == float(with_inf)
        for c, f in zip(cpu, fl):
            torch.testing.assert_close(f.cpu(), c, rtol=0, atol=0)
    # update_scale: growth after `interval` clean steps, backoff and reset after an inf step.
    scale_cpu, tracker_cpu = torch.tensor([1024.0]), torch.tensor([0], dtype=torch.int32)
    scale_fl, tracker_fl = scale_cpu.to("fl"), tracker_cpu.to("fl")
    for found in [0.0, 0.0, 0.0, 1.0, 0.0, 0.0]:
        torch._amp_update_scale_(scale_cpu, tracker_cpu, torch.tensor([found]), 2.0, 0.5, 2)
        torch._amp_update_scale_(scale_fl, tracker_fl, torch.tensor([found], device="fl"), 2.0, 0.5, 2)
        assert (scale_fl.item(), tracker_fl.item()) == (scale_cpu.item(), tracker_cpu.item())
    assert _cpu_fallbacks() == []


def test_an_amp_step_with_grad_scaler_makes_no_cpu_fallback():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to("fl")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("fl")
    x = torch.randn(4, 8, device="fl")
    for _ in range(2):
        with torch.autocast("fl", dtype=torch.float16):
            loss = model(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    assert scaler.get_scale() == 65536.0           # two clean steps, growth interval 2000: unchanged
    assert _cpu_fallbacks() == []


DDP_STEP = r'''
import json, torch, torch_fl
import torch.distributed as dist
from fl_runtime.tools import op_stats
dist.init_process_group("fl")
rank = dist.get_rank()
torch.fl.set_device(rank)
torch.manual_seed(0)
# fl:{rank} named: on the Python route .to("fl") goes to fl:0 (docs/users/limits.md)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2).to(f"fl:{rank}"))
op_stats.reset()
model(torch.full((4, 8), float(rank + 1), device="fl")).sum().backward()
grad = model.module.weight.grad.cpu()
print("RESULT", json.dumps({"cpu": sorted(op for op, p in op_stats.snapshot().items() if "cpu" in p),
                            "grad": grad.reshape(-1).tolist()}))
dist.destroy_process_group()
'''


def test_a_ddp_step_makes_no_cpu_fallback():
    results = run_ranks(DDP_STEP, 2, timeout=120)
    records = []
    for r in results:
        assert r.returncode == 0, r.output[-3000:]
        records.append(json.loads(r.lines("RESULT")[0]))
    for record in records:
        assert record["cpu"] == [], record
    # The averaged gradient of d(sum)/dW over inputs 1 and 2: mean of 4*1 and 4*2.
    assert records[0]["grad"] == records[1]["grad"] == [6.0] * 16
