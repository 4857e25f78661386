"""Hugging Face `transformers.Trainer` (through `accelerate`) training on fl, as a user runs it.

The script below is what a user writes (docs/users/lightning-and-hf.md "Hugging Face
Trainer"): a tiny random-weight GPT-2, AdamW (the Trainer's default), 3 steps of a
global batch of 8.  It runs three times, each a fresh process: on the CPU (the
reference), on fl:0 alone, and as two ranks on fl:0/fl:1 under torchrun (4 rows
each, Trainer's own DDP): with the documented recipe (use_cpu=True and
ACCELERATE_TORCH_DEVICE), with the device override alone, and with no device named.
Every two-rank form must train as one data-parallel job: ranks bitwise equal and
equal to one process on the full batch (never ranks that silently diverge).  The logged losses and the final weights must match the
CPU run's.  AdamW divides each update by sqrt(second moment), which magnifies
summation-order differences in tiny gradients, hence a weight tolerance of 1e-4
(measured: 1.2e-5); the logged losses are rounded to 4 places by the Trainer.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from rank_runner import ROOT, free_port

pytest.importorskip("transformers", reason="the test extra installs transformers")
pytest.importorskip("accelerate", reason="the test extra installs accelerate (the Trainer requires it)")

SCRIPT = r'''
import json, os, torch
DEVICE = os.environ["TRAIN_DEVICE"]
world = int(os.environ.get("WORLD_SIZE", 1))
if DEVICE == "fl":
    # What a user adds for fl (docs/users/lightning-and-hf.md "Hugging Face Trainer"): accelerate's device override,
    # per rank; with several processes, use_cpu=True below picks accelerate's Gloo + plain-DDP path.
    import torch_fl
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    os.environ["ACCELERATE_TORCH_DEVICE"] = f"fl:{local_rank}"
    torch.fl.set_device(local_rank)
# TRAIN_USE_CPU=0: the several-rank recipe without use_cpu=True (Torch-FL sets the job up alike).
recipe_use_cpu = os.environ.get("TRAIN_USE_CPU", "1") == "1"
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
transformers.logging.set_verbosity_error()

torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
ids = torch.randint(0, 64, (24, 12), generator=torch.Generator().manual_seed(1))
data = [{"input_ids": row, "labels": row} for row in ids]
args = TrainingArguments(output_dir=os.environ["OUT_DIR"], per_device_train_batch_size=8 // world, max_steps=3,
                         learning_rate=1e-2, logging_steps=1, save_strategy="no", report_to=[], seed=0,
                         disable_tqdm=True, use_cpu=DEVICE == "cpu" or (DEVICE == "fl" and world > 1 and recipe_use_cpu),
                         ddp_find_unused_parameters=False)
if "TRAIN_COMPILE" in os.environ:
    # The graph path (docs/users/graph-path.md): the model's forward compiled in place.
    # TrainingArguments' torch_compile_backend goes through accelerate's fixed list of
    # backend names, and nn.Module.compile() compiles nothing on PyTorch 2.13.
    model.forward = torch.compile(model.forward, backend=os.environ["TRAIN_COMPILE"])
trainer = Trainer(model=model, args=args, train_dataset=data)
trainer.train()
weights = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])
torch.save(weights, os.path.join(os.environ["OUT_DIR"], f"weights{args.process_index}.pt"))
# One file per rank: the ranks share torchrun's stdout, where their lines can interleave mid-line.
with open(os.path.join(os.environ["OUT_DIR"], f"result{args.process_index}.json"), "w") as f:
    json.dump({"rank": args.process_index, "world": args.world_size, "parallel": str(args.parallel_mode),
               "device": str(next(model.parameters()).device), "args_device": str(args.device),
               "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
               "graph_replays": sum(plan["replays"] for graph in torch_fl.graph_summary()
                                    for plan in graph["plans"]) if DEVICE == "fl" else 0}, f)
'''


def _run(tmp_path, name: str, device: str, ranks: int, extra_env: dict | None = None
         ) -> tuple[list[dict], list[torch.Tensor]]:
    out = tmp_path / name
    out.mkdir()
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    command = [sys.executable, str(script)]
    if ranks > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
                   "--master-port", str(free_port()), str(script)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAIN_DEVICE": device, "OUT_DIR": str(out), **(extra_env or {})}
    proc = subprocess.run(command, check=False, capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert proc.returncode == 0, f"{name}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    written = sorted(out.glob("result*.json"))
    assert len(written) == ranks, f"{name}: {len(written)} of {ranks} ranks wrote a result\n{proc.stdout[-3000:]}"
    results = sorted((json.loads(path.read_text()) for path in written), key=lambda r: r["rank"])
    return results, [torch.load(out / f"weights{r}.pt") for r in range(ranks)]


@pytest.fixture(scope="module")
def cpu_reference(tmp_path_factory):
    results, weights = _run(tmp_path_factory.mktemp("hf_cpu"), "cpu", "cpu", 1)
    assert results[0]["device"] == "cpu" and len(results[0]["losses"]) == 3
    return results[0]["losses"], weights[0]


def test_trainer_on_one_fl_device_matches_cpu(tmp_path, cpu_reference):
    losses, weights = cpu_reference
    results, got = _run(tmp_path, "fl1", "fl", 1)
    assert results[0]["device"] == "fl:0" and results[0]["args_device"] == "fl:0", results
    assert results[0]["parallel"] == "ParallelMode.NOT_PARALLEL"
    assert results[0]["losses"] == pytest.approx(losses, abs=2e-4)
    torch.testing.assert_close(got[0], weights, rtol=0, atol=1e-4)


def test_trainer_naming_no_device_follows_accelerate_onto_fl_and_matches_cpu(tmp_path, cpu_reference):
    """docs/users/do-no-harm.md: code that names no device gets fl, the current accelerator; the
    script neither imports torch_fl nor sets ACCELERATE_TORCH_DEVICE."""
    losses, weights = cpu_reference
    results, got = _run(tmp_path, "auto", "auto", 1)
    assert results[0]["device"] == "fl:0" and results[0]["args_device"] == "fl:0", results
    assert results[0]["losses"] == pytest.approx(losses, abs=2e-4)
    torch.testing.assert_close(got[0], weights, rtol=0, atol=1e-4)


def test_trainer_compiling_with_backend_fl_matches_cpu(tmp_path, cpu_reference):
    """The model's forward compiled with backend="fl" before the Trainer: the graph path
    under the Trainer's loop; steps 2 and 3 replay the forward and backward."""
    losses, weights = cpu_reference
    results, got = _run(tmp_path, "fl_compiled", "fl", 1, {"TRAIN_COMPILE": "fl"})
    assert results[0]["device"] == "fl:0" and results[0]["graph_replays"] >= 4, results
    assert results[0]["losses"] == pytest.approx(losses, abs=2e-4)
    torch.testing.assert_close(got[0], weights, rtol=0, atol=1e-4)


def _assert_one_data_parallel_job(results, got, cpu_reference) -> None:
    losses, weights = cpu_reference
    for rank, result in enumerate(results):
        assert result["device"] == f"fl:{rank}" and result["args_device"] == f"fl:{rank}", results
        assert result["parallel"] == "ParallelMode.DISTRIBUTED" and result["world"] == 2, results
        # The Trainer logs the mean over ranks of each rank's mean loss: the full batch's mean.
        assert result["losses"] == pytest.approx(losses, abs=2e-4)
    torch.testing.assert_close(got[0], got[1], rtol=0, atol=0)      # DDP keeps the ranks identical
    torch.testing.assert_close(got[0], weights, rtol=0, atol=1e-4)


def test_trainer_two_ranks_under_torchrun_match_cpu_full_batch(tmp_path, cpu_reference):
    """The documented recipe: use_cpu=True and ACCELERATE_TORCH_DEVICE=fl:<LOCAL_RANK>."""
    _assert_one_data_parallel_job(*_run(tmp_path, "fl2", "fl", 2), cpu_reference)


def test_trainer_two_ranks_without_use_cpu_train_as_one_job(tmp_path, cpu_reference):
    """ACCELERATE_TORCH_DEVICE per rank but no use_cpu=True: accelerate alone would leave each
    rank training by itself (ParallelMode.NOT_PARALLEL, diverging weights)."""
    _assert_one_data_parallel_job(*_run(tmp_path, "fl2_no_cpu", "fl", 2, {"TRAIN_USE_CPU": "0"}), cpu_reference)


def test_trainer_two_ranks_naming_no_device_train_as_one_job(tmp_path, cpu_reference):
    """Neither torch_fl imported nor a device named: fl is the current accelerator, and the
    two ranks still train as one job on fl:0 and fl:1."""
    _assert_one_data_parallel_job(*_run(tmp_path, "auto2", "auto", 2), cpu_reference)
