"""A rank killed in the middle of an all-reduce: the survivor fails within seconds, naming it;
and SIGTERM ends a rank that waits on a stuck (live) peer.

The vendor collectives (reference vendor, reference_vendor/src/driver/collective.c "DEAD
PEERS") check while they wait that each peer's process still runs; a dead peer makes the
collective fail at once with an error naming its rank and pid, instead of at the group's
timeout (30 min under Lightning).  Two real jobs: plain DDP (two ranks as torchrun starts
them) and a Lightning Trainer with strategy="ddp" (its launcher re-runs the script for
rank 1).  In each, one rank SIGKILLs itself from a gradient hook, in the middle of its
backward's all-reduce; the other must exit non-zero within 30 s with the CollectiveError.
With a peer stuck instead (integration/distributed/interrupt.py), SIGTERM to the waiting
rank, which has a Python handler as Lightning installs one, ends it within seconds.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
from rank_runner import ROOT, run_ranks

# Two ranks of a DDP job, one step taken (the communicator made).
ONE_STEP = r'''
import os, signal, sys, time, torch, torch_fl
import torch.distributed as dist
dist.init_process_group("fl")
rank = dist.get_rank()
torch.fl.set_device(rank)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8).to("fl"))
x = torch.ones(4, 8, device="fl")
model(x).sum().backward()
'''

DDP = ONE_STEP + r'''
if rank == 0:
    # The last gradient's hook: rank 0 dies with the all-reduce under way.
    model.module.weight.register_hook(lambda g: os.kill(os.getpid(), signal.SIGKILL))
start = time.monotonic()
try:
    model(x).sum().backward()
    torch.fl.synchronize()
except Exception as exc:
    print(f"FAILED after {time.monotonic() - start:.1f} s: {exc}", flush=True)
    raise SystemExit(3)
print("NO ERROR", flush=True)
'''

LIGHTNING = r'''
import os, signal, time, torch, torch_fl
import lightning as L
from torch.utils.data import DataLoader, TensorDataset

def die(grad):
    with open("killed_at", "w") as f:
        f.write(repr(time.time()))
    os.kill(os.getpid(), signal.SIGKILL)

class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, i):
        if i == 2 and self.global_rank == 1:
            self.net.weight.register_hook(die)
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

if __name__ == "__main__":
    X = torch.randn(64, 4)
    trainer = L.Trainer(accelerator="fl", devices=2, strategy="ddp", max_epochs=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Model(), DataLoader(TensorDataset(X, X.sum(1, keepdim=True)), batch_size=8))
    print("NO ERROR", flush=True)
'''

NAMES_THE_PEER = re.compile(r"CollectiveError: .*all_reduce.*rank (\d) \(pid \d+\) died")
NAMES_A_DEAD_PEER = re.compile(r"CollectiveError: .*rank (\d) \(pid \d+\) died")
LIGHTNING_WATCHER = re.compile(r"\[rank: 1\] Child process with PID \d+ terminated with code -9")


def test_ddp_rank_killed_mid_all_reduce_fails_the_other_naming_it():
    killed, survivor = run_ranks(DDP, 2, timeout=90)
    assert killed.returncode == -9, killed.output[-2000:]
    assert survivor.returncode == 3, survivor.output[-3000:]
    failed = survivor.lines("FAILED after")
    assert failed and float(failed[0].split()[0]) < 30, survivor.output[-3000:]
    assert NAMES_THE_PEER.search(failed[0]).group(1) == "0", failed[0]


def test_lightning_rank_killed_mid_all_reduce_fails_the_other_naming_it(tmp_path):
    pytest.importorskip("lightning", reason="the test extra installs lightning")
    script = tmp_path / "train.py"
    script.write_text(LIGHTNING)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "NO ERROR" not in output, output[-3000:]
    # Lightning's own collectives (a barrier, a broadcast) may be the ones in flight when the
    # peer dies on a loaded machine: any collective, naming the dead rank.  Lightning's launcher
    # also watches its children (every 5 s) and, seeing rank 1 killed, kills the job itself,
    # naming the dead child: on a loaded machine that can come first, also a fast failure
    # that names it.  (The plain DDP test above has no such watcher: the runtime's error only.)
    named = NAMES_A_DEAD_PEER.search(output)
    watcher = LIGHTNING_WATCHER.search(output)
    assert (named is not None and named.group(1) == "1") or watcher is not None, output[-3000:]
    assert time.time() - float((tmp_path / "killed_at").read_text()) < 30, output[-3000:]


STUCK = ONE_STEP + r"""
if rank == 1:
    print("STUCK", flush=True)
    time.sleep(300)                       # alive, never joining the next all-reduce
# A handler that only notes the signal, as Lightning's does: Python runs it once the main
# thread is back in Python.
signal.signal(signal.SIGTERM, lambda signum, frame: print("HANDLER RAN", flush=True))
print("WAITING", flush=True)
try:
    model(x).sum().backward()
except Exception as exc:
    print(f"FAILED: {exc}", flush=True)
    sys.exit(3)
"""


def _rank(code: str, rank: int, port: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    return subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _wait_for_line(proc: subprocess.Popen, text: str, lines: list[str]) -> None:
    for line in proc.stdout:
        lines.append(line)
        if line.startswith(text):
            return
    raise AssertionError(f"no {text!r} line:\n{''.join(lines)[-3000:]}")


def test_sigterm_ends_a_rank_waiting_on_a_stuck_peer():
    from rank_runner import free_port
    port = free_port()
    waiting, stuck = _rank(STUCK, 0, port), _rank(STUCK, 1, port)
    try:
        out0, out1 = [], []
        _wait_for_line(stuck, "STUCK", out1)
        _wait_for_line(waiting, "WAITING", out0)
        time.sleep(1.0)                           # inside backward's all-reduce by now
        sent = time.monotonic()
        waiting.send_signal(signal.SIGTERM)
        rest, _ = waiting.communicate(timeout=60)
        elapsed = time.monotonic() - sent
    finally:
        for proc in (waiting, stuck):
            proc.kill()
            proc.communicate()
    output = "".join(out0) + rest
    assert elapsed < 15, output[-3000:]
    assert "HANDLER RAN" in output and "interrupted by SIGTERM" in output, output[-3000:]
    assert waiting.returncode in (3, 128 + signal.SIGTERM), (waiting.returncode, output[-3000:])
