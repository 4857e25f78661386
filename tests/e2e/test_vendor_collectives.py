"""The fl process group's vendor path (ABI 1.1 collectives) against its host-staged path.

Two ranks on loopback, rank r on fl:r of the reference plugin, which offers the
collectives extension.  Each rank runs every collective the vendor path takes
twice: through the default group (vendor collectives: the Work names the path)
and through a second fl group made with TORCH_FL_VENDOR_COLLECTIVES=0
(host-staged through Gloo), and requires the same values.  Then: stream
ordering behind busy work, a mixed job (one rank without vendor collectives:
the whole group goes host-staged and still computes right), and a mismatched
call, which fails on both ranks with the plugin's status instead of hanging or
returning wrong values.
"""
from __future__ import annotations

from rank_runner import assert_all_ok, run_ranks

PRELUDE = r"""
import datetime, os, torch, torch.distributed as dist
import torch_fl
from fl_runtime.integration.distributed import CollectiveError, FLProcessGroup

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dev = torch.device("fl", rank)
R = dist.ReduceOp
timeout = datetime.timedelta(seconds=60)

def path(work):
    work.wait()
    return work._site.transport

def data(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed * 10 + rank)
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=g).to(dtype)
    return torch.randint(0 if dtype == torch.uint8 else -5, 7, shape, generator=g, dtype=dtype)
"""

VERSUS_STAGED = PRELUDE + r"""
dist.init_process_group("gloo", timeout=timeout)
vendor = dist.group.WORLD
assert isinstance(vendor, FLProcessGroup) and vendor.vendor_plugins == {"reference"}, vendor.vendor_plugins
os.environ["TORCH_FL_VENDOR_COLLECTIVES"] = "0"
staged = dist.new_group([0, 1])
del os.environ["TORCH_FL_VENDOR_COLLECTIVES"]
assert isinstance(staged, FLProcessGroup) and staged.vendor_plugins == frozenset(), staged.vendor_plugins
checked = []

def both(name, run, make, exact=True):
    # run(inputs..., group) -> Work; make() -> fresh fl tensors (the same values for both paths)
    a, b = make(), make()
    assert path(run(*a, group=vendor)) == "vendor collectives", name
    assert path(run(*b, group=staged)) == "gloo (host-staged)", name
    for x, y in zip(a, b):
        xs = x if isinstance(x, list) else [x]
        ys = y if isinstance(y, list) else [y]
        for u, v in zip(xs, ys):
            assert u.device.type == "fl"
            if exact:
                assert torch.equal(u.cpu(), v.cpu()), (name, u.cpu(), v.cpu())
            else:
                torch.testing.assert_close(u.cpu(), v.cpu(), rtol=1e-6, atol=1e-6)
    checked.append(name)

for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.int64,
              torch.int8, torch.uint8):
    ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX] + ([R.AVG] if dtype.is_floating_point else [])
    if dtype in (torch.float16, torch.int8, torch.uint8):
        ops = [R.SUM, R.MAX]       # the ops Gloo's host path has for these dtypes
    for op in ops:
        x = data(37, dtype=dtype, seed=1)
        both(f"all_reduce {dtype} {op}", lambda t, group: dist.all_reduce(t, op=op, group=group, async_op=True),
             lambda: [x.to(dev)], exact=op != R.AVG)
# int16 (Gloo has none): against the reduction of every rank's inputs, rebuilt here
def data_of(r, *shape, dtype, seed):
    return torch.randint(-5, 7, shape, generator=torch.Generator().manual_seed(seed * 10 + r), dtype=dtype)
for op, fold in ((R.SUM, torch.add), (R.PRODUCT, torch.mul), (R.MIN, torch.minimum), (R.MAX, torch.maximum)):
    t = data(29, dtype=torch.int16, seed=11).to(dev)
    assert path(dist.all_reduce(t, op=op, async_op=True)) == "vendor collectives"
    assert torch.equal(t.cpu(), fold(data_of(0, 29, dtype=torch.int16, seed=11),
                                     data_of(1, 29, dtype=torch.int16, seed=11))), op
    checked.append(f"all_reduce int16 {op}")
x = data(3 << 20, seed=2)                       # 12 MiB: many shared-memory chunks
both("all_reduce 12 MiB", lambda t, group: dist.all_reduce(t, group=group, async_op=True), lambda: [x.to(dev)])
for src in (0, 1):
    x = data(5, 3, seed=3)
    both(f"broadcast src={src}", lambda t, group: dist.broadcast(t, src=src, group=group, async_op=True),
         lambda: [x.to(dev)])
x = data(4, 3, seed=4)
both("all_gather", lambda outs, t, group: dist.all_gather(outs, t, group=group, async_op=True),
     lambda: [[torch.empty(4, 3, device=dev) for _ in range(world)], x.to(dev)])
both("all_gather_into_tensor",
     lambda out, t, group: dist.all_gather_into_tensor(out, t, group=group, async_op=True),
     lambda: [torch.empty(world * 4, 3, device=dev), x.to(dev)])
x = data(world * 6, seed=5)
for op in (R.SUM, R.MAX, R.AVG):
    both(f"reduce_scatter_tensor {op}",
         lambda out, t, group: dist.reduce_scatter_tensor(out, t, op=op, group=group, async_op=True),
         lambda: [torch.empty(6, device=dev), x.to(dev)], exact=op != R.AVG)
x = data(world * 3, 2, seed=6)
both("all_to_all_single", lambda out, t, group: dist.all_to_all_single(out, t, group=group, async_op=True),
     lambda: [torch.empty(world * 3, 2, device=dev), x.to(dev)])
both("all_reduce empty", lambda t, group: dist.all_reduce(t, group=group, async_op=True),
     lambda: [torch.empty(0, device=dev)])

# What the vendor path declines goes host-staged, in the same group, with the right values.
x = data(8, dtype=torch.int64, seed=8)
a, b = x.to(dev), x.clone()
assert path(dist.all_reduce(a, op=R.BXOR, async_op=True)) == "gloo (host-staged)"
cpu = dist.new_group(backend="cpu:gloo")
dist.all_reduce(b, op=R.BXOR, group=cpu)
assert torch.equal(a.cpu(), b)
a = data(6, 4, seed=9).to(dev).t()                 # not contiguous
b = a.cpu().clone()
assert path(dist.all_reduce(a, async_op=True)) == "gloo (host-staged)"
dist.all_reduce(b, group=cpu)
assert torch.equal(a.cpu(), b)

# Stream ordering: the collective is queued behind busy work on a side stream, and later work
# on that stream reads its result without a host wait.
m = data(256, 256, seed=10)
s = torch.fl.Stream(device=dev)
with torch.fl.stream(s):
    busy = m.to(dev)
    for _ in range(8):
        busy = busy @ busy * 1e-2
    work = dist.all_reduce(busy, async_op=True)
    after = busy * 2
expect = m.clone()
for _ in range(8):
    expect = expect @ expect * 1e-2
dist.all_reduce(expect, group=cpu)
work.wait()
torch.testing.assert_close(busy.cpu(), expect, rtol=1e-4, atol=1e-6)
torch.testing.assert_close(after.cpu(), expect * 2, rtol=1e-4, atol=1e-6)
checked.append("ordering")
dist.destroy_process_group()
print("CHECKED", len(checked))
"""


def test_vendor_path_matches_host_staged_path():
    results = run_ranks(VERSUS_STAGED, timeout=240)
    assert_all_ok(results)
    for r in results:
        assert r.lines("CHECKED") == ["44"], r.output[-3000:]


MIXED_AND_ERRORS = PRELUDE + r"""
# Rank 1 has no vendor collectives: the group must go host-staged on both ranks.
if rank == 1:
    os.environ["TORCH_FL_VENDOR_COLLECTIVES"] = "0"
dist.init_process_group("gloo", timeout=timeout)
assert dist.group.WORLD.vendor_plugins == frozenset()
t = torch.full((5,), float(rank + 1), device=dev)
assert path(dist.all_reduce(t, async_op=True)) == "gloo (host-staged)"
assert t.cpu().tolist() == [3.0] * 5
os.environ.pop("TORCH_FL_VENDOR_COLLECTIVES", None)
g = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=20))
assert g.vendor_plugins == {"reference"}

# A mismatched call (different counts) fails on both ranks with the plugin's status, no hang.
t = torch.ones(4 + rank, device=dev)
try:
    dist.all_reduce(t, group=g)
    raise AssertionError("a mismatched all_reduce succeeded")
except CollectiveError as exc:
    assert "FL_ERROR_COLLECTIVE_MISMATCH" in str(exc) and "all_reduce" in str(exc), exc
assert t.cpu().tolist() == [1.0] * (4 + rank)       # untouched, never half-written
# Every later collective on that stream fails too: none reports success over an untouched buffer.
try:
    dist.all_reduce(torch.ones(3, device=dev), group=g)
    raise AssertionError("a collective after a failure succeeded")
except CollectiveError as exc:
    assert "FL_ERROR_COLLECTIVE_MISMATCH" in str(exc), exc
print("MIXED_OK", flush=True)

# DDP over the vendor path, rank 1 gone before its backward: rank 0's gradient all-reduce fails
# (the communicator's timeout) and DDP raises it.  DDP's C++ reducer reads the Work's future:
# its failure must be an error there, not an exception object posing as the result (a crash).
h = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=3))
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2).to(dev), device_ids=[rank], process_group=h)
loss = model(torch.ones(3, 4, device=dev)).sum()
if rank == 1:
    os._exit(0)
try:
    loss.backward()
    print("DDP no error")
except RuntimeError as exc:
    print("DDP", "CollectiveError" in str(exc) and "FL_ERROR_TIMEOUT" in str(exc), flush=True)
os._exit(0)      # the failed groups cannot be destroyed cleanly; the test is over
"""


def test_mixed_job_goes_host_staged_and_a_mismatch_fails_on_both_ranks():
    results = run_ranks(MIXED_AND_ERRORS, timeout=180)
    assert_all_ok(results)
    for r in results:
        assert r.lines("MIXED_OK") == [""], r.output[-3000:]
    assert results[0].lines("DDP") == ["True"], results[0].output[-3000:]
