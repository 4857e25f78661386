"""FSDP2 (`torch.distributed.fsdp.fully_shard`) on fl: two ranks on fl:0 / fl:1 over the `fl`
process-group backend against one process on the full batch (docs/users/native-bridge.md).

FSDP2 shards every parameter across the ranks, all-gathers them on its own streams before each
forward and backward, frees the gathered copies by resizing their storage to 0 (and grows it
again for the next gather), reduce-scatters the gradients, and orders all of it with events:
the native bridge's storage resizes, streams and events, and the backend's all_gather_into_tensor
and reduce_scatter_tensor.  Layer sizes that two ranks do not divide exercise FSDP's padding.
A second run in the same ranks adds bf16 mixed precision, gradient accumulation without sync
and no resharding after forward, against the same FSDP2 run on the CPU.
"""
from __future__ import annotations

import pytest
from rank_runner import run_ranks

FSDP_SCRIPT = r"""
import collections, datetime, os, torch, torch.distributed as dist
import torch.nn.functional as F
import torch_fl
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from fl_runtime.integration.distributed.process_group import FLProcessGroup

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
calls = collections.Counter()

def counted(name, original):
    def call(*args, **kwargs):
        calls[name] += 1
        return original(*args, **kwargs)
    return call

for name in ("all_gather_single", "all_gather_single_coalesced", "reduce_scatter_single",
             "reduce_scatter_single_coalesced"):     # the names PyTorch's C++ calls on a Python group
    setattr(FLProcessGroup, name, counted(name, getattr(FLProcessGroup, name)))
torch.UntypedStorage.resize_ = counted("resize_", torch.UntypedStorage.resize_)

torch.fl.set_device(rank)
dist.init_process_group("fl", timeout=datetime.timedelta(seconds=90))
assert dist.get_backend() == "fl" and isinstance(dist.group.WORLD, FLProcessGroup), dist.group.WORLD
vendor = os.environ["TORCH_FL_VENDOR_COLLECTIVES"] == "1"
assert dist.group.WORLD.vendor_plugins == (frozenset({"reference"}) if vendor else frozenset())
dev = torch.device("fl", rank)
mesh = init_device_mesh("fl", (world,))

def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 5), torch.nn.Tanh(),
                               torch.nn.Linear(5, 3))

g = torch.Generator().manual_seed(7)
X, Y = torch.randn(4, 8, 6, generator=g), torch.randn(4, 8, 3, generator=g)
half = slice(rank * 4, rank * 4 + 4)
STEPS = 4

model = make_model().to(dev)
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
first = model[2].weight                       # 5 rows on 2 ranks: 3 here and 2 there (padded)
assert first.to_local().shape[0] == (3 if rank == 0 else 2) and first.to_local().device == dev, first.to_local().shape
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
for step in range(STEPS):
    loss = F.mse_loss(model(X[step, half].to(dev)), Y[step, half].to(dev))
    opt.zero_grad(); loss.backward(); opt.step()
full = [p.full_tensor().detach().cpu() for p in model.parameters()]
gathers = calls["all_gather_single"] + calls["all_gather_single_coalesced"]
scatters = calls["reduce_scatter_single"] + calls["reduce_scatter_single_coalesced"]
assert gathers >= STEPS and scatters >= STEPS and calls["resize_"] >= 2 * STEPS, calls
print("CALLS", dict(calls))

if rank == 0:
    reference = make_model().to("fl:0")
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=0.01)
    for step in range(STEPS):
        loss = F.mse_loss(reference(X[step].to("fl:0")), Y[step].to("fl:0"))
        ref_opt.zero_grad(); loss.backward(); ref_opt.step()
    for (name, want), got in zip(reference.named_parameters(), full):
        torch.testing.assert_close(got, want.detach().cpu(), rtol=0, atol=1e-5, msg=lambda m: f"{name}: {m}")
        print("EQUAL", name, float((got - want.detach().cpu()).abs().max()))

def train_mixed(device, mesh):
    # bf16 compute, fp32 reduction and master weights; two micro-batches a step, the first
    # without gradient sync; parameters kept gathered between forward and backward
    model = make_model().to(device)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh, mp_policy=policy, reshard_after_forward=False)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    for step in range(STEPS):
        for micro, sync in ((slice(0, 2), False), (slice(2, 4), True)):
            model.set_requires_gradient_sync(sync)
            rows = X[step, half][micro].to(device), Y[step, half][micro].to(device)
            (F.mse_loss(model(rows[0]), rows[1]) / 2).backward()
        opt.step(); opt.zero_grad()
    return [p.full_tensor().detach().cpu() for p in model.parameters()]

# The same FSDP2 run on the CPU (Gloo through the same group) is the reference here: one
# process in fp32 differs from bf16 compute by more than rounding can be told from a bug.
for (name, _), got, want in zip(make_model().named_parameters(), train_mixed(dev, mesh),
                                train_mixed(torch.device("cpu"), init_device_mesh("cpu", (world,)))):
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5, msg=lambda m: f"mixed precision {name}: {m}")
dist.destroy_process_group()
print("FSDP_OK")
"""


@pytest.mark.parametrize("vendor_collectives", ["1", "0"], ids=["vendor collectives", "host-staged"])
def test_fully_shard_on_two_ranks_matches_one_process(vendor_collectives):
    """Four AdamW steps; every full_tensor() weight within 1e-5 of one process's, whether the
    reference plugin's collectives (ABI 1.1) or Gloo through the host carry the gathers."""
    results = run_ranks(FSDP_SCRIPT, timeout=180, env={"TORCH_FL_VENDOR_COLLECTIVES": vendor_collectives})
    for r in results:
        assert r.returncode == 0, f"rank {r.rank} exited with {r.returncode}:\n{r.output[-6000:]}"
        assert r.lines("FSDP_OK"), r.output[-3000:]
    assert len(results[0].lines("EQUAL")) == 6, results[0].output[-3000:]


CHECKPOINT_SCRIPT = r"""
import datetime, os, sys, torch, torch.distributed as dist
import torch.nn.functional as F
import torch_fl
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from fl_runtime.integration.distributed.checkpoint import load_checkpoint, save_checkpoint

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.fl.set_device(rank)
dist.init_process_group("fl", timeout=datetime.timedelta(seconds=90))
dev, mesh, ckpt = torch.device("fl", rank), init_device_mesh("fl", (world,)), sys.argv[1]
g = torch.Generator().manual_seed(3)
X, Y = torch.randn(6, 8, 6, generator=g), torch.randn(6, 8, 3, generator=g)
half = slice(rank * 4, rank * 4 + 4)

def wrapped(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).to(dev)
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)     # 5 and 3 rows on 2 ranks: uneven shards
    fully_shard(model, mesh=mesh)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

def train(model, opt, steps):
    for step in steps:
        loss = F.mse_loss(model(X[step, half].to(dev)), Y[step, half].to(dev))
        opt.zero_grad(); loss.backward(); opt.step()

def full(model):
    return [p.full_tensor().detach().cpu() for p in model.parameters()]

model, opt = wrapped(0)                  # the same start on every rank
train(model, opt, range(3))
save_checkpoint(ckpt, 3, model=model, optimizer=opt)
saved = full(model)
train(model, opt, range(3, 6))
want = full(model)

resumed_model, resumed_opt = wrapped(1 + rank)   # each rank elsewhere: only the checkpoint aligns them
resumed = load_checkpoint(ckpt, model=resumed_model, optimizer=resumed_opt)
assert resumed.step == 3, resumed
for a, b in zip(full(resumed_model), saved):
    assert torch.equal(a, b), (a, b)
train(resumed_model, resumed_opt, range(3, 6))
for a, b in zip(full(resumed_model), want):
    assert torch.equal(a, b), (a - b).abs().max()
dist.destroy_process_group()
print("RESUMED_OK")
"""


def test_a_checkpoint_of_a_sharded_model_resumes_bit_for_bit(tmp_path):
    """save_checkpoint / load_checkpoint with FSDP2's uneven shards: every rank gets its own shard of
    the weights and of SGD's momentum back, and three more steps give the uninterrupted weights."""
    results = run_ranks(CHECKPOINT_SCRIPT.replace("sys.argv[1]", repr(str(tmp_path / "ckpt"))), timeout=180)
    for r in results:
        assert r.returncode == 0 and r.lines("RESUMED_OK"), f"rank {r.rank} exited with {r.returncode}:\n" \
                                                            f"{r.output[-6000:]}"
