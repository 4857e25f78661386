"""Checkpoint/resume of a DDP job on fl, and a rank killed mid-run (docs/users/checkpoints.md).

One training script, launched by torchrun as a user would (2 ranks on fl:0/fl:1):
DDP with dropout (each device's random state), a global batch drawn each step from
the CPU's random state (the data position), a loss factor from Python's `random`,
SGD with momentum (optimizer state), and a throughput split that rebalances to 6/2
after step 3 (the split's state).  It checkpoints every 2 steps with
`save_checkpoint` and starts with `load_checkpoint`.  Every resumed run must end with
the uninterrupted run's weights, bit for bit:

- resumed in fresh processes from the uninterrupted run's step-4 checkpoint;
- rank 1 SIGKILLed in step 6 (before its backward, rank 0 waiting in the all-reduce),
  torchrun --max-restarts 1 restarts both ranks, which resume from step 4;
- with --max-restarts 0 the job ends (no hang) and torchrun names rank 1 and SIGKILL.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import pytest
import torch
from rank_runner import ROOT, free_port

SCRIPT = r'''
import datetime, os, random, signal, torch, torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
import torch_fl
from fl_runtime.integration.distributed import ThroughputSplit, load_checkpoint, save_checkpoint

STEPS, EVERY, KILL_AT = 6, 2, int(os.environ.get("KILL_AT", -1))
CKPT = os.environ["CKPT_DIR"]
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
torch.fl.set_device(local_rank)
dev = torch.device("fl", local_rank)
torch.manual_seed(0); torch.fl.manual_seed_all(0); random.seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Dropout(0.3),
                            torch.nn.Linear(16, 2)).to(dev)
ddp = DDP(model, device_ids=[local_rank])
opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
split = ThroughputSplit(global_batch=8)
resumed = load_checkpoint(CKPT, model=ddp, optimizer=opt, split=split)
start = resumed.step if resumed else 0
print(f"START rank {rank} attempt {attempt} step {start}", flush=True)
for step in range(start, STEPS):
    x, y = torch.randn(8, 6), torch.randn(8, 2)
    rows = split.rows()
    loss = F.mse_loss(ddp(x[rows].to(dev)), y[rows].to(dev)) * split.loss_scale() * (1 + random.random())
    if step == KILL_AT and rank == 1 and attempt == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    opt.zero_grad(); loss.backward(); opt.step()
    split.record(1.0, 3 if rank == 0 else 1)            # a fixed "measured" speed keeps the run deterministic
    if step % 3 == 2:
        split.rebalance()
    if (step + 1) % EVERY == 0:
        save_checkpoint(CKPT, step + 1, model=ddp, optimizer=opt, split=split, data_position=step + 1)
print(f"SPLIT rank {rank} {split.sizes}", flush=True)
if rank == 0:
    weights = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])
    torch.save(weights, os.path.join(os.environ["OUT_DIR"], "weights.pt"))
dist.destroy_process_group()
'''


def _torchrun(tmp_path, name: str, ckpt, restarts: int = 0, kill_at: int = -1) -> tuple:
    out = tmp_path / name
    out.mkdir()
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CKPT_DIR": str(ckpt), "OUT_DIR": str(out), "KILL_AT": str(kill_at)}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           "--max-restarts", str(restarts), "--master-port", str(free_port()), str(script)],
                          capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path, check=False)
    output = proc.stdout + proc.stderr
    weights = torch.load(out / "weights.pt") if (out / "weights.pt").exists() else None
    return proc.returncode, output, weights, time.monotonic() - start


def _starts(output: str) -> list[str]:
    # The ranks share torchrun's stdout, so two ranks' lines can run together: match, don't split.
    return sorted(re.findall(r"START rank \d attempt \d step \d+", output))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("uninterrupted")
    rc, output, weights, _ = _torchrun(tmp, "run", tmp / "ckpt")
    assert rc == 0, output[-5000:]
    assert _starts(output) == ["START rank 0 attempt 0 step 0", "START rank 1 attempt 0 step 0"]
    assert output.count("[6, 2]") == 2, output[-3000:]               # the split did rebalance
    return tmp / "ckpt", weights


def test_checkpoints_complete_and_pruned(uninterrupted):
    from fl_runtime.integration.distributed import latest_checkpoint
    ckpt, _ = uninterrupted
    assert sorted(p.name for p in ckpt.iterdir()) == ["step-00000004", "step-00000006"]     # keep=2
    assert latest_checkpoint(ckpt).name == "step-00000006"
    assert sorted(p.name for p in (ckpt / "step-00000004").iterdir()) == ["COMPLETE", "rank-0.pt", "rank-1.pt",
                                                                          "state.pt"]


def test_ddp_resumed_from_step_4_equals_uninterrupted_run(tmp_path, uninterrupted):
    ckpt, want = uninterrupted
    resume_dir = tmp_path / "ckpt"
    shutil.copytree(ckpt / "step-00000004", resume_dir / "step-00000004")
    rc, output, got, _ = _torchrun(tmp_path, "resumed", resume_dir)
    assert rc == 0, output[-5000:]
    assert _starts(output) == ["START rank 0 attempt 0 step 4", "START rank 1 attempt 0 step 4"]
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_killed_rank_is_restarted_by_torchrun_and_resumes(tmp_path, uninterrupted):
    _, want = uninterrupted
    rc, output, got, _ = _torchrun(tmp_path, "killed", tmp_path / "ckpt", restarts=1, kill_at=5)
    assert rc == 0, output[-5000:]
    assert _starts(output) == ["START rank 0 attempt 0 step 0", "START rank 0 attempt 1 step 4",
                               "START rank 1 attempt 0 step 0", "START rank 1 attempt 1 step 4"], output[-3000:]
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_killed_rank_without_restarts_ends_the_job_naming_the_rank(tmp_path):
    rc, output, got, seconds = _torchrun(tmp_path, "failed", tmp_path / "ckpt", restarts=0, kill_at=5)
    assert rc != 0 and got is None
    assert seconds < 120, f"the job took {seconds:.0f} s to end"
    root_cause = output[output.index("Root Cause"):]
    assert re.search(r"rank\s*: 1 \(local_rank: 1\)\s*exitcode\s*: -9", root_cause), root_cause
    assert "SIGKILL" in root_cause


def test_checkpoint_in_one_process(fl, tmp_path):
    """No process group: rank 0 of 1.  A directory without COMPLETE (a save cut short) is skipped;
    the optimizer's state comes back on the parameters' device; the random states are restored."""
    import random

    from fl_runtime.integration.distributed import (CheckpointError, latest_checkpoint, load_checkpoint,
                                                    save_checkpoint)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).to("fl:1")
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(4, 3, device="fl:1")).sum().backward()
    opt.step()
    save_checkpoint(tmp_path, 1, model=model, optimizer=opt, data_position={"epoch": 0, "batch": 1})
    (tmp_path / "step-00000002").mkdir()                                 # killed while saving step 2
    assert latest_checkpoint(tmp_path).name == "step-00000001"
    want = (torch.randn(3), torch.randn(3, device="fl:1").cpu(), random.random())
    with torch.no_grad():
        model.weight.zero_()
    opt.state.clear()
    resumed = load_checkpoint(tmp_path, model=model, optimizer=opt)
    assert resumed.step == 1 and resumed.data_position == {"epoch": 0, "batch": 1}
    assert model.weight.abs().sum().item() > 0
    assert {str(v.device) for s in opt.state.values() for k, v in s.items() if k != "step"} == {"fl:1"}
    got = (torch.randn(3), torch.randn(3, device="fl:1").cpu(), random.random())
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
    assert got[2] == want[2]
    with pytest.raises(CheckpointError, match="no optimizer state"):
        save_checkpoint(tmp_path, 3, model=model)
        load_checkpoint(tmp_path, model=model, optimizer=opt)
    assert load_checkpoint(tmp_path / "nothing-here", model=model) is None
    save_checkpoint(tmp_path, 1, model=model, optimizer=opt, data_position="again")   # over a complete one
    assert (tmp_path / "step-00000001" / "COMPLETE").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000001", "step-00000003"]   # keep=2


LIGHTNING_SCRIPT = r'''
import os, sys, torch
import torch_fl
import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        self.seen = set()

    def training_step(self, batch, i):
        x, y = batch
        self.seen.update({str(x.device), str(next(self.parameters()).device)})
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.05)

g = torch.Generator().manual_seed(3)
loader = DataLoader(TensorDataset(torch.randn(24, 4, generator=g), torch.randn(24, 1, generator=g)), batch_size=8)
mode, ckpt_dir = sys.argv[1], sys.argv[2]
model = Model()
trainer = L.Trainer(accelerator="fl", devices=1, max_epochs=2, logger=False, enable_progress_bar=False,
                    enable_model_summary=False,
                    callbacks=[ModelCheckpoint(dirpath=ckpt_dir, save_top_k=-1, every_n_epochs=1)])
trainer.fit(model, loader, ckpt_path=os.path.join(ckpt_dir, "epoch=0-step=3.ckpt") if mode == "resume" else None)
print("SEEN", sorted(model.seen), trainer.global_step)
weights = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])
torch.save(weights, os.path.join(ckpt_dir, f"weights-{mode}.pt"))
'''


def test_lightning_resumed_from_epoch_checkpoint_equals_uninterrupted_run(tmp_path):
    """Trainer(accelerator="fl"): 2 epochs of 3 Adam steps; a fresh process resumes from the checkpoint
    Lightning's ModelCheckpoint wrote after epoch 1 (model, optimizer, loop state) and ends with the
    uninterrupted run's weights bit for bit.  No dropout and no shuffling: Lightning's checkpoint holds
    no random state (docs/users/checkpoints.md "Lightning's checkpoints")."""
    pytest.importorskip("lightning", reason="the test extra installs lightning")
    script = tmp_path / "fit.py"
    script.write_text(LIGHTNING_SCRIPT)
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    resumed.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for mode, directory in (("full", full), ("resume", resumed)):
        if mode == "resume":
            shutil.copy(full / "epoch=0-step=3.ckpt", resumed)
        proc = subprocess.run([sys.executable, str(script), mode, str(directory)], capture_output=True, text=True, check=False,
                              timeout=180, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
        assert "SEEN ['fl:0'] 6" in proc.stdout, proc.stdout[-3000:]
    torch.testing.assert_close(torch.load(resumed / "weights-resume.pt"), torch.load(full / "weights-full.pt"),
                               rtol=0, atol=0)
