"""Lightning's Trainer and Fabric with accelerator="fl": one device (auto strategy), ddp, ddp_spawn.

Each run is a user's script in a fresh process (Lightning's ddp launcher
re-executes the script for rank 1; ddp_spawn spawns both ranks).  Every rank
writes what it saw (the device of each batch and parameter, its weights, the
loss before and after) to a JSON file; the test requires fl devices only,
ranks that agree, and a loss that went down.  The script imports torch_fl
before lightning and checks that torch_fl did not import it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from rank_runner import ROOT, free_port

SCRIPT = r'''
import json, os, sys, torch
import torch_fl
assert "lightning" not in sys.modules, "torch_fl imported lightning"     # registration waits for the user's import
import lightning as L
from torch.utils.data import DataLoader, TensorDataset

OUT = os.environ["OUT_DIR"]

class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        self.seen, self.losses = set(), []

    def training_step(self, batch, i):
        x, y = batch
        self.seen.update({str(x.device), str(next(self.parameters()).device)})
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.losses.append(float(loss))
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def on_train_end(self):
        stats = self.trainer.strategy.accelerator.get_device_stats(self.trainer.strategy.root_device)
        weights = torch.cat([p.detach().reshape(-1).cpu() for p in self.parameters()]).tolist()
        record = {"strategy": type(self.trainer.strategy).__name__, "root": str(self.trainer.strategy.root_device),
                  "seen": sorted(self.seen), "first": sum(self.losses[:4]), "last": sum(self.losses[-4:]),
                  "weights": weights, "stats": stats, "world": self.trainer.world_size}
        with open(os.path.join(OUT, f"rank{self.trainer.global_rank}.json"), "w") as f:
            json.dump(record, f)

def fabric_check():
    # Fabric: the same accelerator, its own registry and connector.
    fabric = L.Fabric(accelerator="fl", devices=1)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    x = fabric.to_device(torch.randn(8, 4))
    loss = model(x).pow(2).mean()
    fabric.backward(loss)
    optimizer.step()
    with open(os.path.join(OUT, "fabric.json"), "w") as f:
        json.dump({"device": str(fabric.device), "param": str(next(model.parameters()).device),
                   "input": str(x.device), "strategy": type(fabric.strategy).__name__}, f)

def main():
    strategy, devices = sys.argv[1], int(sys.argv[2])
    g = torch.Generator().manual_seed(1)
    X = torch.randn(128, 4, generator=g)
    Y = X.sum(1, keepdim=True)
    trainer = L.Trainer(accelerator="fl", devices=devices, strategy=strategy, max_epochs=3, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Model(), DataLoader(TensorDataset(X, Y), batch_size=16))
    if strategy == "auto":
        fabric_check()

if __name__ == "__main__":
    main()
'''


def _train(tmp_path, strategy: str, devices: int) -> list[dict]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OUT_DIR": str(out), "MASTER_PORT": str(free_port()),
           "MASTER_ADDR": "127.0.0.1"}
    proc = subprocess.run([sys.executable, str(script), strategy, str(devices)], capture_output=True, text=True,
                          check=False, timeout=240, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    records = [json.loads((out / f"rank{r}.json").read_text()) for r in range(devices)]
    for rank, record in enumerate(records):
        assert record["seen"] == [f"fl:{rank}"], record["seen"]         # batches and weights on fl, never CPU
        assert record["root"] == f"fl:{rank}"
        assert record["world"] == devices
        assert record["last"] < record["first"] * 0.7, (record["first"], record["last"])
        assert record["stats"]["allocated_bytes.all.current"] > 0, record["stats"]
    return records


def test_trainer_auto_strategy_one_device_trains_on_fl_and_fabric(tmp_path):
    (record,) = _train(tmp_path, "auto", 1)
    assert record["strategy"] == "SingleDeviceStrategy"
    fabric = json.loads((tmp_path / "out" / "fabric.json").read_text())
    assert fabric == {"device": "fl:0", "param": "fl:0", "input": "fl:0", "strategy": "SingleDeviceStrategy"}


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_trainer_ddp_on_two_fl_devices(tmp_path, strategy):
    records = _train(tmp_path, strategy, 2)
    assert {r["strategy"] for r in records} == {"DDPStrategy"}
    assert records[0]["weights"] == records[1]["weights"]     # DDP kept the ranks' weights identical


FABRIC_DDP = r'''
import os
import torch
import torch_fl
import lightning as L

def main():
    fabric = L.Fabric(accelerator="fl", devices=2, strategy="ddp")
    fabric.launch()                                  # re-runs this script for rank 1
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    g = torch.Generator().manual_seed(fabric.global_rank)     # different data per rank
    for _ in range(3):
        x = fabric.to_device(torch.randn(8, 4, generator=g))
        fabric.backward(model(x).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
    weights = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()]).tolist()
    # one write per line: both ranks share the pipe, and print() writes each argument apart
    line = " ".join(str(v) for v in ("FABRIC", fabric.global_rank, fabric.device,
                                      next(model.parameters()).device, type(fabric.strategy).__name__, weights))
    os.write(1, (line + "\n").encode())

if __name__ == "__main__":
    main()
'''


def test_fabric_ddp_on_two_fl_devices(tmp_path):
    script = tmp_path / "fabric_ddp.py"
    script.write_text(FABRIC_DDP)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MASTER_PORT": str(free_port()), "MASTER_ADDR": "127.0.0.1"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=False, timeout=240,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = sorted(line.split(" ", 5)[1:] for line in proc.stdout.splitlines() if line.startswith("FABRIC "))
    assert [r[:4] for r in ranks] == [["0", "fl:0", "fl:0", "DDPStrategy"], ["1", "fl:1", "fl:1", "DDPStrategy"]], \
        proc.stdout[-3000:]
    assert ranks[0][4] == ranks[1][4]        # different data, one set of weights: DDP averaged the gradients


def test_registers_when_lightning_was_imported_before_the_runtime(python):
    """Lightning first, the runtime after (autoload off); then devices, precision, Fabric's connector,
    and the standalone pytorch_lightning / lightning_fabric distribution."""
    result = python("""
        import lightning
        import torch_fl
        from lightning.pytorch.accelerators import AcceleratorRegistry
        from fl_runtime.integration.lightning.accelerator import FLAccelerator
        assert "fl" in AcceleratorRegistry
        assert FLAccelerator.parse_devices(-1) == FLAccelerator.parse_devices("auto") == [0, 1]
        assert FLAccelerator.parse_devices("0,1") == [0, 1] and FLAccelerator.parse_devices(1) == [0]
        for bad in (0, [0, 0], [5]):
            try:
                FLAccelerator.parse_devices(bad)
                raise AssertionError(bad)
            except lightning.fabric.utilities.exceptions.MisconfigurationException:
                pass
        t = lightning.Trainer(accelerator="fl", devices=[1], logger=False)
        print("ROOT", t.strategy.root_device)
        for precision in ("bf16-mixed", "16-mixed"):
            t = lightning.Trainer(accelerator="fl", devices=1, precision=precision, logger=False)
            scaler = t.precision_plugin.scaler
            print("PRECISION", precision, t.precision_plugin.device, scaler and scaler._device)
        f = lightning.Fabric(accelerator="fl", devices=1, precision="bf16-mixed")
        print("FABRIC", f.device, f._precision.device)

        # The standalone distribution (imported after the runtime started): its own classes.
        import torch, pytorch_lightning as pl, lightning_fabric
        class Tiny(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.net, self.seen = torch.nn.Linear(3, 1), set()
            def training_step(self, batch, i):
                self.seen.add(str(batch[0].device))
                return self.net(batch[0]).pow(2).mean()
            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)
        data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 3)), batch_size=4)
        t = pl.Trainer(accelerator="fl", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                       enable_progress_bar=False, enable_model_summary=False)
        model = Tiny()
        t.fit(model, data)
        print("PL", t.strategy.root_device, sorted(model.seen))     # (teardown moves the model to the CPU)
        print("LF", lightning_fabric.Fabric(accelerator="fl", devices=[1]).device)
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, timeout=180)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines()
             if line.split() and line.split()[0] in ("ROOT", "PRECISION", "FABRIC", "PL", "LF")]
    assert lines == ["ROOT fl:1", "PRECISION bf16-mixed fl None", "PRECISION 16-mixed fl fl", "FABRIC fl:0 fl",
                     "PL fl:0 ['fl:0']", "LF fl:1"], result.stdout


def test_registers_when_importing_lightning_is_what_starts_the_runtime(python):
    """`import pytorch_lightning` / `import lightning` as a script's first line: torch is imported
    inside them, so the runtime starts while they are half imported."""
    result = python("""
        import pytorch_lightning as pl
        print("PL", pl.Trainer(accelerator="fl", devices=1, logger=False).strategy.root_device)
        import lightning
        print("L", lightning.Trainer(accelerator="fl", devices=[1], logger=False).strategy.root_device)
    """, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.split() and line.split()[0] in ("PL", "L")]
    assert lines == ["PL fl:0", "L fl:1"], result.stdout
    result = python("""
        import lightning
        print("L", lightning.Trainer(accelerator="fl", devices=1, logger=False).strategy.root_device)
    """, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "L fl:0" in result.stdout.splitlines(), result.stdout
