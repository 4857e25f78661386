"""The two models the OpenCL plugin is checked and measured on (docs/vendors/opencl-plugin.md):
the README's CNN and the tiny GPT-2 of the "Models known to work" table, as builders
`torch-fl coverage` takes (each returns (model, example_inputs)):

    PYTHONPATH=.venv/opencl-site torch-fl coverage benchmarks/opencl_models.py:cnn --device 0
    PYTHONPATH=.venv/opencl-site torch-fl coverage benchmarks/opencl_models.py:gpt2 --device 0

and `opencl_device()`, the fl index of the first OpenCL device (the flat list is ordered
by device type, so "opencl" comes before "reference": fl:0 when both are installed).
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))
import models_report  # noqa: E402
from synthetic_digits import make_digits  # noqa: E402
from train_cnn import build_model  # noqa: E402


class _WithLoss(torch.nn.Module):
    """The model and its training loss, so the traced step is the step the tests run."""

    def __init__(self, model: torch.nn.Module, loss) -> None:
        super().__init__()
        self.model = model
        self.loss = loss

    def forward(self, *inputs):
        return self.loss(self.model, *inputs)


def cnn() -> tuple[torch.nn.Module, tuple]:
    images, labels = make_digits(64)
    return _WithLoss(build_model(), lambda m, x, y: torch.nn.functional.cross_entropy(m(x), y)), (images, labels)


def gpt2() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    model = models_report._gpt2()
    # no padding to look for: with a pad token and no mask, or with a mask, GPT-2 branches on
    # the ids' values, which tracing on fake tensors cannot follow (training runs the same ops)
    model.config.pad_token_id = None
    ids = models_report._lm_batch()["input_ids"]
    return _WithLoss(model, lambda m, x: m(input_ids=x, labels=x).loss), (ids,)


def opencl_device() -> str:
    import torch_fl
    found = [d["device"] for d in torch_fl.list_devices() if d["type"] == "opencl"]
    if not found:
        raise SystemExit(f"no OpenCL device: {torch_fl.why_no_devices()} (install the plugin: make opencl, "
                         "then PYTHONPATH=.venv/opencl-site)")
    return found[0]
