"""Jobs whose ranks sit on several hosts (docs/users/multi-host.md).

On one machine, two ways to have several hosts:

- TORCH_FL_HOST_ID (loopback, runs anywhere): ranks that name different host ids
  count as different hosts.  4 ranks as 2 hosts x 2: every all-reduce form the
  hierarchical path takes, against PyTorch's Gloo on CPU tensors and against a
  flat group; the reference vendor's communicators (FL_REFERENCE_COMM_LOG) each
  join the ranks of one host.  2 ranks as 2 hosts with a plugin declaring
  FL_COMM_REACH_ANY: one communicator over both.
- Network namespaces (tests/netns_hosts.py; needs root, skipped with the reason
  where the machine forbids them): 2 hosts with their own address, hostname and
  /dev/shm, `torchrun --nnodes 2 --nproc-per-node 2` with a c10d rendezvous on
  host 0.  DDP training equals one process on the full batch and no vendor
  communicator spans the hosts; then host 1's network goes down mid-step: every
  rank raises CollectiveError naming the unreachable peer within the group's
  timeout, and `torchrun --max-restarts 1` resumes from the last complete
  checkpoint once the link is up, ending with the uninterrupted run's weights bit
  for bit.  An FSDP2 job can join once fl runs it: add its wrapper to
  tests/multihost_train.py's STRATEGIES and its name to JOBS.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from netns_hosts import NetnsHosts, why_unavailable
from rank_runner import assert_all_ok, run_ranks


REFERENCE_LIB = ROOT / "reference_vendor" / "libfl_reference.so"
TRAIN = ROOT / "tests" / "multihost_train.py"
JOBS = ["ddp", "fsdp2"]            # strategies of multihost_train.py run across namespace hosts


def _communicators(log: Path) -> dict[str, list[tuple[int, int, int]]]:
    """FL_REFERENCE_COMM_LOG: segment -> [(rank, size, pid)] of the processes that joined it
    (none when the plugin made no communicator: no log)."""
    comms: dict[str, list[tuple[int, int, int]]] = {}
    for line in (log.read_text() if log.exists() else "").splitlines():
        segment, _, rank, _, size, _, pid = line.split()
        comms.setdefault(segment, []).append((int(rank), int(size), int(pid)))
    return comms


def _assert_each_within_one_host(comms: dict, host_of_pid: dict[int, int], size: int) -> None:
    assert comms, "no vendor communicator was made"
    for segment, members in comms.items():
        assert sorted(r for r, _, _ in members) == list(range(size)), (segment, members)
        assert {s for _, s, _ in members} == {size}, (segment, members)
        assert len({host_of_pid[pid] for _, _, pid in members}) == 1, (segment, members, host_of_pid)


# ---- the ABI's reach ---------------------------------------------------------------------------------

def test_reach_is_read_from_the_extension_and_defaults_to_one_host():
    from fl_runtime import abi
    from fl_runtime.abi import ffi
    from fl_runtime.plugins.extensions import _reach
    ext = ffi.new("fl_collectives_extension*")
    full, short = ffi.sizeof("fl_collectives_extension"), ffi.offsetof("fl_collectives_extension", "reach")
    for size, reach, want in ((full, abi.COMM_REACH_ANY, abi.COMM_REACH_ANY),
                              (full, abi.COMM_REACH_HOST, abi.COMM_REACH_HOST),
                              (full, 0, abi.COMM_REACH_HOST),                 # a 1.2 plugin that left it 0
                              (full, 7, abi.COMM_REACH_HOST),                 # a value fl_abi.h does not name
                              (short, abi.COMM_REACH_ANY, abi.COMM_REACH_HOST)):   # a 1.1 plugin
        ext.base.struct_size, ext.reach = size, reach
        assert _reach(ext) == want, (size, reach)


def test_reference_vendor_declares_host_reach(fl):
    from fl_runtime import abi
    from fl_runtime.integration.process import start
    from fl_runtime.plugins.extensions import collectives_of
    assert collectives_of(start().devices[0].plugin).reach == abi.COMM_REACH_HOST


def test_host_layout_groups_ranks_by_identity():
    import torch.distributed as dist

    from fl_runtime.integration.distributed.elastic import attempt_scope
    from fl_runtime.integration.distributed.hosts import HostLayout, host_identity
    store = dist.HashStore()
    peers = dist.PrefixStore(f"fl-hosts/{attempt_scope()}/g/", store)
    for r, identity in ((1, "b"), (2, host_identity()), (3, "b")):
        peers.set(str(r), json.dumps([identity, f"name-{identity}"]))
    layout = HostLayout.exchange(store, 0, 4, "g")
    assert layout.hosts == ((0, 2), (1, 3)) and layout.names[1] == "name-b"
    assert layout.spans_hosts and layout.uniform and layout.host_of(3) == 1


# ---- several hosts on loopback (TORCH_FL_HOST_ID) ------------------------------------------------------

HIERARCHY = r"""
import datetime, os, torch, torch.distributed as dist
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
os.environ["TORCH_FL_HOST_ID"] = f"host{rank // 2}"
import torch_fl
from fl_runtime.integration.distributed import CollectiveError
local = rank % 2
torch.fl.set_device(local)
dev = torch.device("fl", local)
R = dist.ReduceOp
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
hier = dist.group.WORLD
cpu = dist.new_group(backend="cpu:gloo")
if rank == 3:
    os.environ["TORCH_FL_HIERARCHICAL"] = "0"        # one rank says no: the group is flat on every rank
flat = dist.new_group()
os.environ.pop("TORCH_FL_HIERARCHICAL", None)
print("PID", rank, os.getpid(), flush=True)
assert hier.hosts.hosts == ((0, 1), (2, 3)), hier.hosts
assert (hier.cross_host, flat.cross_host) == ("hierarchical", "flat"), (hier.cross_host, flat.cross_host)

def data(n, dtype, seed):
    g = torch.Generator().manual_seed(seed * 10 + rank)
    if dtype.is_floating_point:
        return (torch.rand(n, generator=g) + 0.5).to(dtype)
    return torch.randint(1, 4, (n,), generator=g, dtype=dtype)

checked = 0
# sizes the 2 ranks of a host divide (8) and do not (1, 5, 1001: the padded copy)
cases = [(R.SUM, torch.float32, n) for n in (1, 8, 1001)]
cases += [(op, torch.float32, 5) for op in (R.AVG, R.PRODUCT, R.MIN, R.MAX)]
cases += [(R.SUM, torch.bfloat16, 7), (R.SUM, torch.float64, 6), (R.SUM, torch.int64, 9), (R.MAX, torch.int32, 3),
          (R.BAND, torch.int64, 4)]                  # BAND: the vendor has no such op, flat in every group
for i, (op, dtype, n) in enumerate(cases):
    x = data(n, dtype, i)
    want = x.clone()
    dist.all_reduce(want, op=op, group=cpu)
    for group in (hier, flat):
        got = x.to(dev)
        work = dist.all_reduce(got, op=op, group=group, async_op=True)
        work.wait()
        tol = dict(rtol=1e-2, atol=1e-2) if dtype == torch.bfloat16 else dict(rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(got.cpu(), want, **tol, msg=lambda m: f"{op} {dtype} {n} {group.cross_host}: {m}")
        checked += 1
# a non-contiguous tensor (the flat path), and an all-reduce queued on a side stream behind its writer
x = data(12, torch.float32, 99)
got = x.to(dev).view(3, 4).t()
dist.all_reduce(got, group=hier)
want = x.view(3, 4).t().contiguous()
dist.all_reduce(want, group=cpu)
torch.testing.assert_close(got.cpu(), want)
side = torch.fl.Stream(device=dev)
with torch.fl.stream(side):
    got = x.to(dev) * 3
    work = dist.all_reduce(got, group=hier, async_op=True)
work.wait()
want = x * 3
dist.all_reduce(want, group=cpu)
torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-6)
# The smallest hierarchical all-reduce is rank 0's TORCH_FL_HIERARCHICAL_MIN_BYTES (all ranks must agree)
os.environ["TORCH_FL_HIERARCHICAL_MIN_BYTES"] = "64" if rank == 0 else "1000000"
sized = dist.new_group()
paths = []
for n in (15, 16):                                   # 60 and 64 bytes
    work = dist.all_reduce(torch.ones(n, device=dev), group=sized, async_op=True)
    work.wait()
    paths.append(work._site.transport)
assert paths == ["gloo (host-staged)", "vendor collectives within hosts, gloo (host-staged) between hosts"], paths
print("CHECKED", checked + 2, flush=True)
dist.destroy_process_group()
"""


def test_hierarchical_all_reduce_on_two_hosts_of_two_ranks(tmp_path):
    log = tmp_path / "comm.log"
    results = run_ranks(HIERARCHY, world_size=4, timeout=150, env={"FL_REFERENCE_COMM_LOG": str(log),
                                                                    "TORCH_FL_HIERARCHICAL_MIN_BYTES": "0"})
    assert_all_ok(results)
    assert all(r.lines("CHECKED") == ["26"] for r in results), [r.output[-2000:] for r in results]
    host_of_pid = {int(r.lines("PID")[0].split()[1]): r.rank // 2 for r in results}
    _assert_each_within_one_host(_communicators(log), host_of_pid, size=2)


REACH_ANY = r"""
import datetime, os, torch, torch.distributed as dist
rank = int(os.environ["RANK"])
os.environ["TORCH_FL_HOST_ID"] = f"host{rank}"
import torch_fl
torch.fl.set_device(0)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
g = dist.group.WORLD
t = torch.full((5,), float(rank + 1), device="fl:0")
dist.all_reduce(t)
assert t.cpu().tolist() == [3.0] * 5, t.cpu()
print("PATH", g.cross_host, sorted(g.vendor_plugins), flush=True)
dist.destroy_process_group()
"""


def test_a_plugin_reaching_any_rank_gets_one_communicator_across_hosts(tmp_path, build_plugin):
    lib = build_plugin(ROOT / "tests" / "fixtures" / "plugin_reach_any.c", "-ldl")
    log = tmp_path / "comm.log"
    results = run_ranks(REACH_ANY, world_size=2, timeout=120, env={
        "TORCH_FL_PLUGINS": str(lib), "TORCH_FL_DISABLE_ENTRY_POINTS": "1", "FL_REACH_INNER": str(REFERENCE_LIB),
        "FL_REFERENCE_COMM_LOG": str(log)})
    assert_all_ok(results)
    assert all(r.lines("PATH") == ["vendor ['reach_any']"] for r in results), [r.output[-2000:] for r in results]
    comms = list(_communicators(log).values())
    assert len(comms) == 1 and sorted((rank, size) for rank, size, _ in comms[0]) == [(0, 2), (1, 2)], comms


# ---- several hosts in network namespaces ---------------------------------------------------------------

UNAVAILABLE = why_unavailable()
needs_netns = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"no namespace hosts here: {UNAVAILABLE}")
GROUP_TIMEOUT = 8.0                # seconds, the fault job's init_process_group(timeout=...)
# The jobs' tiny gradient buckets would all stay flat below the default threshold.
EVERY_SIZE_HIERARCHICAL = {"TORCH_FL_HIERARCHICAL_MIN_BYTES": "0"}


@pytest.fixture
def hosts(tmp_path):
    with NetnsHosts(2, tmp_path / "hosts") as made:
        yield made


def _layouts(out: Path) -> list[dict]:
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(4)]


def _assert_ok(results) -> None:
    for r in results:
        assert r.returncode == 0, f"host {r.host}: torchrun exit {r.returncode}:\n{r.output[-6000:]}"


@pytest.fixture(scope="module", params=JOBS)
def uninterrupted(request, tmp_path_factory):
    """The job across 2 hosts x 2 ranks without faults: checkpoints every 2 steps, the reference."""
    if UNAVAILABLE is not None:
        pytest.skip(f"no namespace hosts here: {UNAVAILABLE}")
    tmp = tmp_path_factory.mktemp(f"uninterrupted-{request.param}")
    out = tmp / "out"
    out.mkdir()
    with NetnsHosts(2, tmp / "hosts") as made:
        job = made.torchrun(TRAIN, ["--out", str(out), "--ckpt", str(tmp / "ckpt"), "--strategy", request.param,
                                    "--reference"], nproc_per_node=2,
                            env={"FL_REFERENCE_COMM_LOG": str(tmp / "comm.log"), **EVERY_SIZE_HIERARCHICAL})
        results = job.wait(timeout=180)
    _assert_ok(results)
    return request.param, _layouts(out), _communicators(tmp / "comm.log")


@needs_netns
def test_ranks_on_two_hosts_train_as_one_process_on_the_full_batch(uninterrupted):
    _, reports, _ = uninterrupted
    assert [r["hosts"] for r in reports] == [[[0, 1], [2, 3]]] * 4
    assert [r["cross_host"] for r in reports] == ["hierarchical"] * 4
    identities = [r["host_identity"] for r in reports]
    assert identities[0] == identities[1] != identities[2] == identities[3]
    torch.testing.assert_close(torch.tensor(reports[0]["weights"]), torch.tensor(reports[0]["reference"]),
                               rtol=1e-5, atol=1e-6)


@needs_netns
def test_no_vendor_communicator_spans_the_hosts(uninterrupted):
    strategy, reports, comms = uninterrupted
    host_of_pid = {r["pid"]: r["rank"] // 2 for r in reports}
    if strategy == "fsdp2":
        # FSDP2's all-gathers and reduce-scatters cross hosts host-staged (docs/users/multi-host.md):
        # whatever communicator the plugin made stays within one host
        for segment, members in comms.items():
            assert len({host_of_pid[pid] for _, _, pid in members}) == 1, (segment, members)
        return
    _assert_each_within_one_host(comms, host_of_pid, size=2)
    assert len({host_of_pid[m[0][2]] for m in comms.values()}) == 2      # each host made its own


def _wait_for_files(directory: Path, pattern: str, count: int, limit: float, job) -> list[Path]:
    deadline = time.monotonic() + limit
    while len(found := sorted(directory.glob(pattern))) < count:
        if time.monotonic() > deadline or any(p.poll() is not None for p in job.procs):
            job.kill()
            logs = "\n".join(log.read_text(errors="replace")[-4000:] for log in job.logs)
            pytest.fail(f"{count} files {pattern} expected under {directory}, found {found}:\n{logs}")
        time.sleep(0.05)
    return found


@needs_netns
def test_a_host_losing_its_network_mid_step_fails_every_rank_then_resumes(tmp_path, hosts, uninterrupted):
    """Every strategy.  FSDP2's first all-reduce comes at the fault (its own collectives are
    all-gathers and reduce-scatters), so the ranks cut off from the c10d store's host make their
    vendor communicator then, and must fail that store wait within the group's timeout as DDP's
    ranks fail their Gloo step; the restart resumes FSDP2's shards from the checkpoint."""
    strategy, reports, _ = uninterrupted
    out = tmp_path / "out"
    out.mkdir()
    job = hosts.torchrun(TRAIN, ["--out", str(out), "--ckpt", str(tmp_path / "ckpt"), "--strategy", strategy,
                                 "--pause-at", "3", "--timeout", str(GROUP_TIMEOUT)], nproc_per_node=2, max_restarts=1,
                         env=EVERY_SIZE_HIERARCHICAL)
    _wait_for_files(out, "ready-*", 4, 150, job)              # every rank in step 3, before its all-reduces
    hosts.set_link(1, up=False)
    (out / "go").write_text("")
    errors = [json.loads(p.read_text()) for p in _wait_for_files(out, "error-*.json", 4, 3 * GROUP_TIMEOUT, job)]
    hosts.set_link(1, up=True)
    for rank, error in enumerate(errors):
        assert error["type"] == "CollectiveError", (rank, error)
        assert error["seconds"] <= GROUP_TIMEOUT + 0.5, (rank, error)     # the timeout, not a hang
        other = "flhost1" if rank < 2 else "flhost0"
        assert re.search(rf"Peers: rank \d on host {other} \(10\.77\.0\.\d\) is unreachable", error["message"]), error
    results = job.wait(timeout=150)
    _assert_ok(results)
    resumed = _layouts(out)
    assert [(r["attempt"], r["start"]) for r in resumed] == [(1, 2)] * 4     # from step 2, the last complete one
    assert resumed[0]["weights"] == reports[0]["weights"]                     # bit for bit
