"""Vendor launches per optimizer step on a small model (docs/benchmarks/index.md "Optimizer steps").

Counts what one `opt.step()` dispatches on fl:0 (tools.op_stats: native launches and
fallback calls), after a first step so the optimizer state exists, for each optimizer
configuration: per-tensor (`foreach=False`), the default (foreach on fl, as on CUDA) and
`fused=True`.  Run: `PYTHONPATH=$PWD python benchmarks/optimizer_launches.py`.
"""
from __future__ import annotations

import argparse

import torch
from torch import nn

import torch_fl  # noqa: F401  (registers fl)
from fl_runtime.tools import op_stats

CONFIGS = {
    "AdamW foreach=False": lambda ps: torch.optim.AdamW(ps, lr=1e-3, foreach=False),
    "AdamW default": lambda ps: torch.optim.AdamW(ps, lr=1e-3),
    "AdamW fused=True": lambda ps: torch.optim.AdamW(ps, lr=1e-3, fused=True),
    "SGD momentum foreach=False": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=False),
    "SGD momentum default": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "SGD momentum fused=True": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, fused=True),
}


def _model(width: int, layers: int) -> nn.Module:
    torch.manual_seed(0)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(width, 2, 2 * width, dropout=0.0,
                                                               batch_first=True), layers)
    return nn.Sequential(encoder, nn.Linear(width, 8))


def step_counts(make_opt, width: int, layers: int) -> tuple[int, int, dict]:
    """(parameters, launches of one steady step, {op: {path: count}})."""
    model = _model(width, layers).to("fl:0")
    opt = make_opt(model.parameters())
    x = torch.randn(2, 5, width).to("fl:0")
    for _ in range(2):      # a first step builds the optimizer state: the counted one is steady
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
    model(x).sum().backward()
    torch.fl.synchronize()
    op_stats.reset()
    opt.step()
    torch.fl.synchronize()
    counts = op_stats.snapshot()
    total = sum(n for paths in counts.values() for n in paths.values())
    return sum(1 for _ in model.parameters()), total, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--detail", action="store_true", help="print the ops of each step")
    args = parser.parse_args()
    print("| optimizer | parameters | launches per step | per parameter | fallback calls |")
    print("|---|---|---|---|---|")
    for name, make in CONFIGS.items():
        n, total, counts = step_counts(make, args.width, args.layers)
        fallbacks = sum(c for paths in counts.values() for p, c in paths.items() if p != op_stats.NATIVE)
        print(f"| {name} | {n} | {total} | {total / n:.2f} | {fallbacks} |")
        if args.detail:
            print("|", ", ".join(f"{op} {paths}" for op, paths in sorted(counts.items())), "|||||")


if __name__ == "__main__":
    main()
