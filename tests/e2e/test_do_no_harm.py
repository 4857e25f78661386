"""Installing Torch-FL changes nothing for code that does not ask for fl.

Each script below is ordinary CPU code a user already runs: the Hugging Face Trainer with
`use_cpu=True`, Lightning with `accelerator="cpu"`, a plain training loop, `torch.compile`
on the CPU, a DataLoader with worker processes.  Each runs twice in fresh processes, with
PyTorch's backend autoload on (torch-fl starts at `import torch` and fl becomes the current
accelerator) and off (as if torch-fl were not installed).  The printed results must be
identical, bit for bit, and torch-fl must say nothing on stderr in the autoload run
(docs/users/do-no-harm.md).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from rank_runner import ROOT

_HF_TRAINER = r'''
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
transformers.logging.set_verbosity_error()
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2))
ids = torch.randint(0, 64, (16, 12), generator=torch.Generator().manual_seed(1))
data = [{"input_ids": row, "labels": row} for row in ids]
args = TrainingArguments(output_dir=OUT, per_device_train_batch_size=4, max_steps=2, use_cpu=True,
                         logging_steps=1, save_strategy="no", report_to=[], seed=0, disable_tqdm=True)
trainer = Trainer(model=model, args=args, train_dataset=data)
trainer.train()
result["losses"] = [row["loss"] for row in trainer.state.log_history if "loss" in row]
result["weights"] = digest(model)
result["device"] = str(trainer.args.device)
'''

_LIGHTNING_CPU = r'''
import lightning as L
class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        self.losses = []
    def training_step(self, batch, i):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.losses.append(loss.item())
        return loss
    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.01)
torch.manual_seed(0)
model = Tiny()
g = torch.Generator().manual_seed(1)
data = torch.utils.data.TensorDataset(torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g))
trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=2, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, default_root_dir=OUT)
trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=8))
result["losses"] = model.losses
result["weights"] = digest(model)
result["device"] = str(trainer.strategy.root_device)
'''

_PLAIN_LOOP = r'''
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(64, 3))
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
g = torch.Generator().manual_seed(1)
x, y = torch.randn(8, 1, 6, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
losses = []
for _ in range(5):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(torch.nn.functional.dropout(model(x), 0.2), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
result["losses"] = losses
result["weights"] = digest(model)
result["default_device"] = str(torch.empty(1).device)
'''

_COMPILE_CPU = r'''
def f(x, y):
    return torch.nn.functional.gelu(x @ y).sum(dim=1) * 2 + x.mean()
g = torch.Generator().manual_seed(1)
x, y = torch.randn(16, 8, generator=g), torch.randn(8, 4, generator=g)
compiled = torch.compile(f, backend="inductor")
result["compiled"] = compiled(x, y).tolist()
result["eager"] = f(x, y).tolist()
'''

_DATALOADER_WORKERS = r'''
class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 24
    def __getitem__(self, i):
        return torch.full((3,), float(i)) ** 2, torch.randn(2)     # workers seed their own RNG
torch.manual_seed(0)
loader = torch.utils.data.DataLoader(Squares(), batch_size=4, num_workers=2, shuffle=True)
result["batches"] = [[x.tolist(), r.tolist()] for x, r in loader]
'''

SCENARIOS = {"hf_trainer_use_cpu": _HF_TRAINER, "lightning_cpu": _LIGHTNING_CPU, "plain_cpu_loop": _PLAIN_LOOP,
             "torch_compile_cpu": _COMPILE_CPU, "dataloader_workers": _DATALOADER_WORKERS}

_PRELUDE = r'''
import json, os, sys, torch
OUT = os.environ["OUT_DIR"]
result = {}
def digest(module):
    return [p.detach().double().sum().item() for p in module.parameters()]
'''
_EPILOGUE = r'''
result["fl_started"] = "fl_runtime" in sys.modules
print("RESULT " + json.dumps(result))
'''


def _start(tmp_path, name: str, autoload: bool) -> subprocess.Popen:
    out = tmp_path / f"{name}-{int(autoload)}"
    out.mkdir()
    script = out / "script.py"
    script.write_text(_PRELUDE + textwrap.dedent(SCENARIOS[name]) + _EPILOGUE)
    env = {**os.environ, "OUT_DIR": str(out), "TORCH_DEVICE_BACKEND_AUTOLOAD": "1" if autoload else "0",
           "PYTHONPATH": str(ROOT), "TORCHINDUCTOR_CACHE_DIR": str(out / "inductor")}
    return subprocess.Popen([sys.executable, str(script)], cwd=out, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(process: subprocess.Popen) -> tuple[dict, str]:
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr[-4000:]
    line = next(line for line in stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT ")), stderr


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_cpu_code_gives_the_same_results_with_and_without_torch_fl(tmp_path, name):
    pytest.importorskip({"hf_trainer_use_cpu": "transformers", "lightning_cpu": "lightning"}.get(name, "torch"))
    with_fl, without_fl = _start(tmp_path, name, True), _start(tmp_path, name, False)
    (got, stderr), (want, _) = _finish(with_fl), _finish(without_fl)
    assert got.pop("fl_started") and not want.pop("fl_started"), "autoload on must start torch-fl, off must not"
    assert got == want
    noise = [line for line in stderr.splitlines() if "torch_fl" in line or "fl_runtime" in line]
    assert noise == [], "torch-fl spoke in a script that never asked for fl:\n" + "\n".join(noise)
