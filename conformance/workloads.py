"""Reference workloads `fl-sdk todo` traces: what users run, in tiny configurations.

The models the project runs end to end (docs/users/models.md; benchmarks/models_report.py
trains the same configurations against the CPU): the README's CNN, GPT-2, BERT, Llama, T5
and ViT from Hugging Face transformers (random weights from a config, nothing downloaded),
each as one training step (forward, loss, backward), and an AdamW step as PyTorch runs it
on an fl device (foreach).  transformers is optional: without it the five transformer
workloads are left out and `fl-sdk todo` says so.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

VOCAB = 96


@dataclass(frozen=True)
class Workload:
    name: str
    build: Callable[[], tuple[nn.Module, tuple]]   # (module returning its loss, example inputs)
    needs: str | None = None                        # an optional package it needs
    backward: bool = True                           # trace the backward too (a training step)


class _WithLoss(nn.Module):
    """A model and its training loss: the traced step is a training step."""

    def __init__(self, model: nn.Module, loss: Callable) -> None:
        super().__init__()
        self.model = model
        self.loss = loss

    def forward(self, *inputs):
        return self.loss(self.model, *inputs)


def _ids() -> torch.Tensor:
    return torch.randint(3, VOCAB, (2, 8), generator=torch.Generator().manual_seed(1))


def _causal_lm(model: nn.Module) -> tuple[nn.Module, tuple]:
    # No pad token: with one, the model branches on the ids' values, which tracing on
    # fake tensors cannot follow (training runs the same ops).
    model.config.pad_token_id = None
    return _WithLoss(model, lambda m, ids: m(input_ids=ids, labels=ids).loss), (_ids(),)


def cnn() -> tuple[nn.Module, tuple]:
    model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(64 * 7 * 7, 10))
    images, labels = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    return _WithLoss(model, lambda m, x, y: nn.functional.cross_entropy(m(x), y)), (images, labels)


def gpt2() -> tuple[nn.Module, tuple]:
    from transformers import GPT2Config, GPT2LMHeadModel
    return _causal_lm(GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)))


def llama() -> tuple[nn.Module, tuple]:
    from transformers import LlamaConfig, LlamaForCausalLM
    return _causal_lm(LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                                   num_attention_heads=2, num_key_value_heads=1,
                                                   intermediate_size=64, max_position_embeddings=32)))


def bert() -> tuple[nn.Module, tuple]:
    from transformers import BertConfig, BertForMaskedLM
    # No pad token (see _causal_lm), and eager attention: the SDPA path skips its mask when the
    # mask's values are all ones, another branch on values.
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, pad_token_id=None)
    config._attn_implementation = "eager"
    return _WithLoss(BertForMaskedLM(config), lambda m, ids: m(input_ids=ids, labels=ids).loss), (_ids(),)


def t5() -> tuple[nn.Module, tuple]:
    from transformers import T5Config, T5ForConditionalGeneration
    model = T5ForConditionalGeneration(T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2,
                                                num_heads=2, dropout_rate=0.0, decoder_start_token_id=0,
                                                pad_token_id=0, eos_token_id=1))
    return _WithLoss(model, lambda m, ids: m(input_ids=ids, labels=ids).loss), (_ids(),)


def vit() -> tuple[nn.Module, tuple]:
    from transformers import ViTConfig, ViTForImageClassification
    model = ViTForImageClassification(ViTConfig(image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=2,
                                                num_attention_heads=2, intermediate_size=64, num_labels=3,
                                                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    pixels = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    return _WithLoss(model, lambda m, x, y: m(pixel_values=x, labels=y).loss), (pixels, torch.tensor([0, 2]))


class AdamWStep(nn.Module):
    """One AdamW update of a small MLP's parameters, the way torch.optim runs it on an fl
    device (foreach: PyTorch picks it for accelerators), as a module `coverage` can trace."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))

    def forward(self, x):
        params = [p.detach().clone() for p in self.mlp.parameters()]
        grads = [torch.ones_like(p) for p in params]
        states = [{"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
                  for p in params]
        torch.optim._functional.adamw(
            params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], [],
            [s["step"] for s in states], foreach=True, amsgrad=False, beta1=0.9, beta2=0.999, lr=1e-3,
            weight_decay=1e-2, eps=1e-8, maximize=False)
        return sum(p.sum() for p in params) + x.sum()


def optimizer_step() -> tuple[nn.Module, tuple]:
    return AdamWStep(), (torch.zeros(1),)


WORKLOADS = (Workload("CNN", cnn), Workload("GPT-2", gpt2, "transformers"), Workload("BERT", bert, "transformers"),
             Workload("Llama", llama, "transformers"), Workload("T5", t5, "transformers"),
             Workload("ViT", vit, "transformers"), Workload("AdamW step", optimizer_step, backward=False))


def available(workload: Workload) -> bool:
    return workload.needs is None or importlib.util.find_spec(workload.needs) is not None
