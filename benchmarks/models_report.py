"""Real models on fl vs the CPU: the table of docs/users/models.md "Models known to work".

Each case builds a tiny Hugging Face model (or nn.TransformerEncoder) from a config
with random weights under a fixed seed (no download), trains it a few steps with
AdamW on fl:0 and on the CPU from the same weights and batch, and, for models that
generate, runs greedy `generate` on both.  It reports the largest loss difference,
whether the greedy tokens match, and how many op calls took each path on fl
(native / generic / cpu, from `torch_fl.op_stats`).  Dropout is 0 in every config:
the fl and CPU generators differ, and dropout would make the losses incomparable.

    PYTHONPATH=$PWD python benchmarks/models_report.py

tests/e2e/test_hf_models.py runs the same cases and asserts on them.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

STEPS = 3
NEW_TOKENS = 5
VOCAB = 96


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], nn.Module]
    batch: Callable[[], dict]
    generates: bool


@dataclass
class Outcome:
    losses: list[float]
    tokens: list[list[int]] | None
    eval_output: torch.Tensor | None = None


@dataclass
class Row:
    case: str
    mode: str
    steps: int
    max_loss_diff: float
    tokens_equal: bool | None
    eval_diff: float | None
    paths: dict[str, int]
    generic_ops: list[str] = field(default_factory=list)
    cpu_ops: list[str] = field(default_factory=list)


def _ids(batch: int = 2, length: int = 8) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, length), generator=torch.Generator().manual_seed(1))


def _lm_batch() -> dict:
    ids = _ids()
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                      pad_token_id=0, eos_token_id=1, bos_token_id=2))


def _bert() -> nn.Module:
    from transformers import BertConfig, BertForMaskedLM
    return BertForMaskedLM(BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0, pad_token_id=0))


def _llama() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM
    return LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                        num_key_value_heads=1, intermediate_size=64, max_position_embeddings=32,
                                        pad_token_id=0, eos_token_id=1, bos_token_id=2))


def _t5() -> nn.Module:
    from transformers import T5Config, T5ForConditionalGeneration
    return T5ForConditionalGeneration(T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2,
                                               num_heads=2, dropout_rate=0.0, decoder_start_token_id=0,
                                               pad_token_id=0, eos_token_id=1))


def _vit() -> nn.Module:
    from transformers import ViTConfig, ViTForImageClassification
    return ViTForImageClassification(ViTConfig(image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=2,
                                               num_attention_heads=2, intermediate_size=64, num_labels=3,
                                               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def _vit_batch() -> dict:
    gen = torch.Generator().manual_seed(1)
    return {"pixel_values": torch.randn(2, 3, 16, 16, generator=gen), "labels": torch.tensor([0, 2])}


class _EncoderRegressor(nn.Module):
    """nn.TransformerEncoder with an MSE loss, so it trains like the HF models."""

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True)
        # Nested tensors (the fast path's padding route) are not what this case checks.
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, src, target):
        out = self.encoder(src)
        return {"loss": nn.functional.mse_loss(out, target), "output": out}


def _encoder_batch() -> dict:
    gen = torch.Generator().manual_seed(1)
    return {"src": torch.randn(2, 8, 32, generator=gen), "target": torch.randn(2, 8, 32, generator=gen)}


CASES = [
    Case("GPT-2", _gpt2, _lm_batch, True),
    Case("BERT", _bert, _lm_batch, False),
    Case("Llama", _llama, _lm_batch, True),
    Case("T5", _t5, _lm_batch, True),
    Case("ViT", _vit, _vit_batch, False),
    Case("nn.TransformerEncoder", _EncoderRegressor, _encoder_batch, False),
]


def run_case(case: Case, device: str, steps: int = STEPS, seed: int = 0) -> Outcome:
    """Train `steps` AdamW steps on `device`, then generate greedily (or, for the
    encoder, run the eval/no-grad fast path); weights are built on the CPU under
    `seed` so both devices start from the same ones."""
    torch.manual_seed(seed)
    model = case.build().to(device)
    batch = {k: v.to(device) for k, v in case.batch().items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    losses = []
    for _ in range(steps):
        loss = _loss(model(**batch))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    model.eval()
    tokens = eval_output = None
    with torch.no_grad():
        if case.generates:
            prompt = batch["input_ids"][:, :4]
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW_TOKENS,
                                 do_sample=False, min_new_tokens=NEW_TOKENS)
            tokens = out.cpu().tolist()
        elif isinstance(model, _EncoderRegressor):
            eval_output = model(**batch)["output"].cpu()
    return Outcome(losses, tokens, eval_output)


def _loss(output) -> torch.Tensor:
    return output["loss"] if isinstance(output, dict) else output.loss


def compare(case: Case, steps: int = STEPS) -> Row:
    """The case on the CPU and on fl:0, and the op paths the fl run took."""
    import torch_fl
    from torch_fl import op_stats

    assert torch_fl.list_devices(), torch_fl.why_no_devices()
    reference = run_case(case, "cpu", steps)
    op_stats.reset()
    got = run_case(case, "fl:0", steps)
    table = op_stats.snapshot()
    paths = {path: sum(counts.get(path, 0) for counts in table.values()) for path in ("native", "generic", "cpu")}
    diff = max(abs(a - b) for a, b in zip(reference.losses, got.losses))
    eval_diff = (None if reference.eval_output is None else
                 (reference.eval_output - got.eval_output).abs().max().item())
    mode = "train + generate" if case.generates else ("train + eval" if eval_diff is not None else "train")
    return Row(case.name, mode, steps, diff,
               None if reference.tokens is None else reference.tokens == got.tokens, eval_diff, paths,
               sorted(op for op, c in table.items() if c.get("generic")),
               sorted(op for op, c in table.items() if c.get("cpu")))


def markdown(rows: list[Row]) -> str:
    lines = ["| model | run | steps | max loss diff | greedy tokens / eval output | calls native / generic / cpu |"
             " generic-kernel ops |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        check = ("identical" if r.tokens_equal else "DIFFER") if r.tokens_equal is not None else (
            f"max diff {r.eval_diff:.1e}" if r.eval_diff is not None else "-")
        generic_ops = ", ".join(op.removeprefix("aten::") for op in r.generic_ops) or "-"
        lines.append(f"| {r.case} | {r.mode} | {r.steps} | {r.max_loss_diff:.1e} | {check} | "
                     f"{r.paths['native']} / {r.paths['generic']} / {r.paths['cpu']} | {generic_ops} |")
    return "\n".join(lines)


def main() -> int:
    import warnings

    import transformers
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    rows = [compare(case) for case in CASES]
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, reference vendor, fl:0 vs CPU\n")
    print(markdown(rows))
    return 0 if all(r.paths["cpu"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
