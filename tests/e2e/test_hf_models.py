"""Real Hugging Face models (and nn.TransformerEncoder) run unchanged on fl, with no CPU fallback.

Tiny models built from configs with random weights (no download), 3 AdamW steps on
fl:0 and on the CPU from the same weights: the losses agree within LOSS_TOL, greedy
`generate` gives identical tokens, and no op call took the CPU path.  The cases and
the harness are benchmarks/models_report.py's (the docs/users/models.md "Models known to work" table).

Ops that still run as generic kernels (PyTorch's or Torch-FL's decomposition on fl,
docs/users/profiling.md), asserted exactly below so a change shows:
arange.start_out, cumsum (int64), isin, triu (T5's masks in `generate`) and
_transformer_encoder_layer_fwd (the encoder's eval fast path).  GPT-2 and Llama no
longer build a causal mask with tril: their sdpa attention runs the reference
vendor's fused kernels, which take is_causal (ops/owned/attention.py).
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the test extra installs transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import models_report  # noqa: E402

# float32, 2 layers, 3 steps: differences are summation order only (measured <= 5e-7).
LOSS_TOL = 1e-5

GENERATE_GENERIC = ["aten::arange.start_out", "aten::cumsum", "aten::isin.Tensor_Tensor_out"]
EXPECTED_GENERIC = {
    "GPT-2": GENERATE_GENERIC,
    "BERT": [],
    "Llama": GENERATE_GENERIC,
    "T5": GENERATE_GENERIC + ["aten::triu.out"],
    "ViT": [],
    "nn.TransformerEncoder": ["aten::_transformer_encoder_layer_fwd"],
}


@pytest.fixture(autouse=True)
def _quiet():
    import transformers
    transformers.logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.mark.parametrize("case", models_report.CASES, ids=[c.name for c in models_report.CASES])
def test_model_matches_cpu_without_cpu_fallback(fl, case):
    row = models_report.compare(case)
    assert row.paths["cpu"] == 0, f"{case.name}: ops on the CPU fallback: {row.cpu_ops}"
    assert row.paths["native"] > 0
    assert row.max_loss_diff <= LOSS_TOL, f"{case.name}: losses differ by {row.max_loss_diff}"
    if case.generates:
        assert row.tokens_equal, f"{case.name}: greedy tokens differ from the CPU's"
    if case.name == "nn.TransformerEncoder":
        assert row.eval_diff is not None and row.eval_diff <= LOSS_TOL
    assert row.generic_ops == sorted(EXPECTED_GENERIC[case.name])


def test_report_script_runs_without_the_cpu_fallback(python, tmp_path):
    """The script as a user runs it, with the CPU fallback switched off in the config
    (docs/operators/config.md): any op that needed the CPU would raise UnsupportedOpError."""
    config = tmp_path / "config.yaml"
    config.write_text("fallback:\n  enable_cpu_fallback: false\n")
    out = python("import runpy, sys; sys.argv = ['models_report.py']\n"
                 "runpy.run_path('benchmarks/models_report.py', run_name='__main__')",
                 env={"TORCH_FL_CONFIG": str(config)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "| GPT-2 | train + generate | 3 |" in out.stdout
    assert "| nn.TransformerEncoder | train + eval | 3 |" in out.stdout
