"""torch.distributed on fl tensors: every collective against the same collective on CPU tensors.

Two ranks on loopback, each a fresh process on its own device (rank r on fl:r).
Each rank runs a collective twice: on fl tensors through the default group
(the fl backend, host-staged Gloo) and on CPU copies of the same inputs
through PyTorch's own Gloo group (`new_group(backend="cpu:gloo")`), and
requires identical results.
"""
from __future__ import annotations

from rank_runner import assert_all_ok, run_ranks

COLLECTIVES = r"""
import datetime, os, torch, torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch_fl
from fl_runtime.integration.distributed import FLProcessGroup

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
timeout = datetime.timedelta(seconds=60)

dist.init_process_group("gloo", timeout=timeout)
assert isinstance(dist.group.WORLD, FLProcessGroup), type(dist.group.WORLD)
cpu = dist.new_group(backend="cpu:gloo")                 # PyTorch's own Gloo: the reference
assert not isinstance(cpu, FLProcessGroup)
dev = torch.device("fl", rank)
R = dist.ReduceOp
checked = []

def data(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed * 10 + rank)
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=g).to(dtype)
    return torch.randint(1, 7, shape, generator=g, dtype=dtype)

def same(name, fl_value, cpu_value):
    fl_list = fl_value if isinstance(fl_value, (list, tuple)) else [fl_value]
    cpu_list = cpu_value if isinstance(cpu_value, (list, tuple)) else [cpu_value]
    assert len(fl_list) == len(cpu_list), name
    for a, b in zip(fl_list, cpu_list):
        assert a.device.type == "fl", (name, a.device)
        torch.testing.assert_close(a.cpu(), b, rtol=1e-6, atol=1e-6, msg=lambda m: f"{name}: {m}")
    checked.append(name)

def fl(ts):
    return [t.to(dev) for t in ts] if isinstance(ts, list) else ts.to(dev)

# all_reduce: every ReduceOp Gloo has, on floats and ints; AVG; PREMUL_SUM (Gloo refuses it: SUM of scaled inputs)
for op in (R.SUM, R.AVG, R.PRODUCT, R.MIN, R.MAX):
    x = data(5, 3, seed=1)
    a, b = fl(x), x.clone()
    dist.all_reduce(a, op=op)
    dist.all_reduce(b, op=op, group=cpu)
    same(f"all_reduce {op}", a, b)
for op in (R.SUM, R.BAND, R.BOR, R.BXOR, R.MAX):
    x = data(7, dtype=torch.int64, seed=2)
    a, b = fl(x), x.clone()
    dist.all_reduce(a, op=op)
    dist.all_reduce(b, op=op, group=cpu)
    same(f"all_reduce int64 {op}", a, b)
for dtype in (torch.float64, torch.int32, torch.bfloat16):
    x = data(4, dtype=dtype, seed=3)
    a, b = fl(x), x.clone()
    dist.all_reduce(a)
    dist.all_reduce(b, group=cpu)
    same(f"all_reduce {dtype}", a, b)
x = data(6, seed=4)
a, b = fl(x), x * 0.25
dist.all_reduce(a, op=dist._make_nccl_premul_sum(0.25))
dist.all_reduce(b, group=cpu)
same("all_reduce PREMUL_SUM", a, b)

# async work and ordering after a write on a side stream
x = data(1000, seed=5)
s = torch.fl.Stream(device=dev)
with torch.fl.stream(s):
    a = fl(x) * 3
    work = dist.all_reduce(a, async_op=True)
work.wait()
b = x * 3
dist.all_reduce(b, group=cpu)
same("all_reduce async on a side stream", a, b)
fut_a = dist.all_reduce(fl(x), async_op=True).get_future()
assert fut_a.wait()[0].device.type == "fl"

# broadcast, reduce
for src in (0, 1):
    x = data(3, 2, seed=6)
    a, b = fl(x), x.clone()
    dist.broadcast(a, src=src)
    dist.broadcast(b, src=src, group=cpu)
    same(f"broadcast src={src}", a, b)
x = data(4, seed=7)
a, b = fl(x), x.clone()
dist.reduce(a, dst=1, op=R.MAX)
dist.reduce(b, dst=1, op=R.MAX, group=cpu)
if rank == 1:
    same("reduce MAX dst=1", a, b)

# all_gather, all_gather_into_tensor, gather, scatter
x = data(2, 3, seed=8)
outs_a = [torch.empty(2, 3, device=dev) for _ in range(world)]
outs_b = [torch.empty(2, 3) for _ in range(world)]
dist.all_gather(outs_a, fl(x))
dist.all_gather(outs_b, x, group=cpu)
same("all_gather", outs_a, outs_b)
a, b = torch.empty(world * 2, 3, device=dev), torch.empty(world * 2, 3)
dist.all_gather_into_tensor(a, fl(x))
dist.all_gather_into_tensor(b, x, group=cpu)
same("all_gather_into_tensor", a, b)
ga = [torch.empty(2, 3, device=dev) for _ in range(world)] if rank == 0 else None
gb = [torch.empty(2, 3) for _ in range(world)] if rank == 0 else None
dist.gather(fl(x), ga, dst=0)
dist.gather(x, gb, dst=0, group=cpu)
if rank == 0:
    same("gather", ga, gb)
chunks = [data(3, seed=9 + i) for i in range(world)]
a, b = torch.empty(3, device=dev), torch.empty(3)
dist.scatter(a, fl(chunks) if rank == 1 else None, src=1)
dist.scatter(b, chunks if rank == 1 else None, src=1, group=cpu)
same("scatter", a, b)

# reduce_scatter, reduce_scatter_tensor (SUM, AVG, PREMUL_SUM)
ins = [data(4, seed=20 + i) for i in range(world)]
a, b = torch.empty(4, device=dev), torch.empty(4)
dist.reduce_scatter(a, fl(ins))
dist.reduce_scatter(b, ins, group=cpu)
same("reduce_scatter", a, b)
x = data(world * 5, seed=30)
for op in (R.SUM, R.AVG):
    a, b = torch.empty(5, device=dev), torch.empty(5)
    dist.reduce_scatter_tensor(a, fl(x), op=op)
    dist.reduce_scatter_tensor(b, x, op=op, group=cpu)
    same(f"reduce_scatter_tensor {op}", a, b)
x_fl = fl(x)
a, b = torch.empty(5, device=dev), torch.empty(5)
dist.reduce_scatter_tensor(a, x_fl, op=dist._make_nccl_premul_sum(2.0))
dist.reduce_scatter_tensor(b, x * 2.0, group=cpu)
same("reduce_scatter_tensor PREMUL_SUM", a, b)
torch.testing.assert_close(x_fl.cpu(), x)          # the input is not scaled in place

# all_to_all, all_to_all_single (even and uneven splits)
outs_a = [torch.empty(2, device=dev) for _ in range(world)]      # Gloo's list form wants equal sizes
outs_b = [torch.empty(2) for _ in range(world)]
ins = [data(2, seed=40 + dst) for dst in range(world)]
dist.all_to_all(outs_a, fl(ins))
dist.all_to_all(outs_b, ins, group=cpu)
same("all_to_all", outs_a, outs_b)
x = data(world * 3, seed=50)
a, b = torch.empty(world * 3, device=dev), torch.empty(world * 3)
dist.all_to_all_single(a, fl(x))
dist.all_to_all_single(b, x, group=cpu)
same("all_to_all_single", a, b)
in_splits = [1, 3] if rank == 0 else [2, 2]
out_splits = [1, 2] if rank == 0 else [3, 2]
x = data(4, seed=60)
a, b = torch.empty(sum(out_splits), device=dev), torch.empty(sum(out_splits))
dist.all_to_all_single(a, fl(x), out_splits, in_splits)
dist.all_to_all_single(b, x, out_splits, in_splits, group=cpu)
same("all_to_all_single uneven", a, b)

# send/recv, isend/irecv, batch_isend_irecv
x = data(6, seed=70)
peer = 1 - rank
if rank == 0:
    dist.send(fl(x), dst=1); dist.send(x, dst=1, group=cpu)
else:
    a, b = torch.empty(6, device=dev), torch.empty(6)
    dist.recv(a, src=0); dist.recv(b, src=0, group=cpu)
    same("send/recv", a, b)
a, b = torch.empty(6, device=dev), torch.empty(6)
works = [dist.isend(fl(x), dst=peer), dist.irecv(a, src=peer)]
[w.wait() for w in works]
works = [dist.isend(x, dst=peer, group=cpu), dist.irecv(b, src=peer, group=cpu)]
[w.wait() for w in works]
same("isend/irecv", a, b)
if rank == 0:
    dist.send(fl(x), dst=1); dist.send(x, dst=1, group=cpu)
else:
    a, b2 = torch.empty(6, device=dev), torch.empty(6)
    assert dist.recv(a) == 0 and dist.recv(b2, group=cpu) == 0      # src=None: from any rank
    same("recv from any rank", a, b2)
a = torch.empty(6, device=dev)
ops = [dist.P2POp(dist.isend, fl(x), peer), dist.P2POp(dist.irecv, a, peer)]
[w.wait() for w in dist.batch_isend_irecv(ops)]
same("batch_isend_irecv", a, b)

# complex tensors (PyTorch reduces their real view)
x = torch.complex(data(4, seed=85), data(4, seed=86))
a, b = fl(x), x.clone()
dist.all_reduce(a)
dist.all_reduce(b, group=cpu)
same("all_reduce complex64", a, b)

# barrier, monitored_barrier (Gloo's, on the group's CPU side), object collectives (CPU tensors
# through the same group), new_group, functional collectives
dist.barrier()
dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
objs = [None] * world
dist.all_gather_object(objs, {"rank": rank})
assert objs == [{"rank": 0}, {"rank": 1}], objs
sub = dist.new_group([0, 1])
assert isinstance(sub, FLProcessGroup), type(sub)
x = data(3, seed=80)
a, b = fl(x), x.clone()
dist.all_reduce(a, group=sub)
dist.all_reduce(b, group=cpu)
same("all_reduce on new_group", a, b)
a = funcol.all_reduce(fl(x), "sum", dist.group.WORLD)
b = x.clone(); dist.all_reduce(b, group=cpu)
same("functional all_reduce", funcol.wait_tensor(a), b)
a = funcol.all_gather_tensor(fl(x), 0, dist.group.WORLD)
b = torch.empty(world * 3); dist.all_gather_into_tensor(b, x, group=cpu)
same("functional all_gather_tensor", funcol.wait_tensor(a), b)
xs = [data(3, seed=90), data(2, 2, seed=91)]
a = funcol.all_reduce_coalesced([fl(t) for t in xs], "sum", dist.group.WORLD)
bs = [t.clone() for t in xs]
for t in bs:
    dist.all_reduce(t, group=cpu)
same("functional all_reduce_coalesced", [funcol.wait_tensor(t) for t in a], bs)
a = funcol.all_gather_into_tensor_coalesced([fl(t) for t in xs], dist.group.WORLD)
bs = [torch.empty(world * t.shape[0], *t.shape[1:]) for t in xs]
for out, t in zip(bs, xs):
    dist.all_gather_into_tensor(out, t, group=cpu)
same("functional all_gather_into_tensor_coalesced", [funcol.wait_tensor(t) for t in a], bs)
ys = [data(world * 2, seed=92), data(world * 3, 2, seed=93)]
a = funcol.reduce_scatter_tensor_coalesced([fl(t) for t in ys], "sum", [0, 0], dist.group.WORLD)
bs = [torch.empty(t.shape[0] // world, *t.shape[1:]) for t in ys]
for out, t in zip(bs, ys):
    dist.reduce_scatter_tensor(out, t, group=cpu)
same("functional reduce_scatter_tensor_coalesced", [funcol.wait_tensor(t) for t in a], bs)

dist.destroy_process_group()
print("CHECKED", len(checked), ";".join(checked))
"""


# Every form of the backend string docs/users/distributed.md lists, as users write them:
# each routes fl tensors to the fl backend (and CPU tensors through the same group); only an
# explicit "cpu:gloo" (no fl entry) stays PyTorch's own Gloo group, which refuses fl tensors.
BACKEND_STRINGS = ["gloo", "GLOO", None, "fl", "cpu:gloo,fl:fl", "cpu:gloo,fl:gloo", "fl:gloo,cpu:gloo", "fl:gloo",
                   "cpu:gloo"]
VARIANTS = r"""
import datetime, os, torch, torch.distributed as dist
import torch_fl
from fl_runtime.integration.distributed import FLProcessGroup

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
timeout = datetime.timedelta(seconds=60)
for i, backend in enumerate(%r):
    store = dist.FileStore(os.path.join(os.environ["STORE_DIR"], f"variant{i}"), world)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    t = torch.full((4,), float(rank + 1), device=f"fl:{rank}")
    c = torch.full((2,), float(rank + 1))
    dist.all_reduce(c)
    assert c.tolist() == [3.0, 3.0], (backend, c)
    if backend == "cpu:gloo":
        assert not isinstance(dist.group.WORLD, FLProcessGroup)
        try:
            dist.all_reduce(t)
            raise AssertionError("PyTorch's Gloo took an fl tensor")
        except RuntimeError as exc:
            assert "fl" in str(exc), exc
    else:
        assert isinstance(dist.group.WORLD, FLProcessGroup), (backend, type(dist.group.WORLD))
        dist.all_reduce(t)
        assert t.cpu().tolist() == [3.0] * 4, (backend, t.cpu())
    print("VARIANT_OK", backend, flush=True)
    dist.destroy_process_group()
""" % (BACKEND_STRINGS,)


def test_every_backend_string_routes_fl_tensors(tmp_path):
    results = run_ranks(VARIANTS, timeout=120, env={"STORE_DIR": str(tmp_path)})
    for r in results:
        assert r.lines("VARIANT_OK") == [str(b) for b in BACKEND_STRINGS], r.output[-3000:]
    assert_all_ok(results)


def test_every_collective_matches_gloo_on_cpu(tmp_path):
    results = run_ranks(COLLECTIVES, timeout=150)
    assert_all_ok(results)
    for r in results:
        checked = r.lines("CHECKED")
        assert checked, r.output[-3000:]
        count = int(checked[0].split()[0])
        assert count == (37 if r.rank == 0 else 39), checked    # gather is checked on rank 0; reduce, recvs on 1


TORCHRUN_SCRIPT = r"""
import os, torch, torch.distributed as dist
import torch_fl
rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
torch.fl.set_device(local)
dist.init_process_group()                      # no backend: the accelerator's, fl
t = torch.ones(3, device="fl") * (rank + 1)
dist.all_reduce(t)
# One write() of one short line: the ranks share torchrun's stdout, and print's pieces can interleave.
os.write(1, f"TORCHRUN {rank} {t.device} {t.cpu().tolist()}\n".encode())
dist.destroy_process_group()
"""


def test_torchrun_launch(tmp_path):
    import os
    import subprocess
    import sys

    from rank_runner import ROOT, free_port
    script = tmp_path / "train.py"
    script.write_text(TORCHRUN_SCRIPT)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           "--master-port", str(free_port()), str(script)], capture_output=True, text=True, check=False,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("[3.0, 3.0, 3.0]") == 2, proc.stdout


DEAD_PEER = r"""
import datetime, os, sys, time, torch, torch.distributed as dist
import torch_fl
from fl_runtime.integration.distributed import CollectiveError
rank = int(os.environ["RANK"])
limit = datetime.timedelta(seconds=4)
dist.init_process_group("gloo", timeout=limit)
other = dist.new_group([0, 1], timeout=limit)            # its own connections, for the second case
t = torch.ones(4, device=f"fl:{rank}")
dist.all_reduce(t)
dist.all_reduce(t, group=other)
if rank == 1:
    time.sleep(9)                                        # stuck: alive, but calls nothing ...
    os._exit(0)                                          # ... then dead, without a word
for case, group, delay in (("STUCK", None, 0), ("DEAD", other, 7)):
    time.sleep(delay)
    before = t.cpu()
    start = time.monotonic()
    try:
        work = dist.all_reduce(t, group=group, async_op=True)
        if case == "STUCK":                              # Work.wait(timeout) gives up first ...
            try:
                work.wait(timeout=datetime.timedelta(seconds=1))
                print("WAIT NO ERROR")
            except CollectiveError as exc:
                print("WAIT", round(time.monotonic() - start, 1), exc.op)
        work.wait()                                      # ... then the group's timeout ends the collective
        print(case, "NO ERROR")
    except CollectiveError as exc:
        assert exc.rank == 0 and exc.op == "all_reduce", (exc.rank, exc.op)
        print(case, round(time.monotonic() - start, 1), str(exc).replace(chr(10), " "))
    assert torch.equal(t.cpu(), before), "a failed all_reduce changed the tensor"
os._exit(0)
"""


def test_stuck_or_dead_peer_ends_in_an_error_naming_rank_and_op():
    results = run_ranks(DEAD_PEER, timeout=90)
    assert_all_ok(results)
    for case in ("STUCK", "DEAD"):
        line = results[0].lines(case)
        assert line and "NO ERROR" not in line[0], results[0].output[-3000:]
        seconds, message = line[0].split(" ", 1)
        assert float(seconds) < 20, line                  # the group's 4 s timeout, not a hang
        assert message.startswith("torch_fl process group: rank 0 of 2: all_reduce failed"), message
    stuck_seconds = float(results[0].lines("STUCK")[0].split()[0])
    assert stuck_seconds >= 3, stuck_seconds              # it did wait for the timeout
    waited = results[0].lines("WAIT")
    assert waited and waited[0].split()[1] == "all_reduce" and float(waited[0].split()[0]) < 3, waited
