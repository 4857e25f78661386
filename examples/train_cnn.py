"""Train the small CNN with the ordinary PyTorch loop; only --device changes.

    python examples/train_cnn.py --device fl:0 --steps 200
    python examples/train_cnn.py --device cpu --steps 5 --report losses.json

The same script runs on the CPU and on fl:N, which is what the end-to-end
tests compare.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic_digits import make_digits  # noqa: E402


def build_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 10))


def train(device: str, steps: int, batch: int = 64, seed: int = 0, log_every: int = 0) -> dict:
    torch.manual_seed(seed)
    model = build_model().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    images, labels = make_digits(batch * 16, seed=seed)
    losses, started = [], time.perf_counter()
    for step in range(steps):
        start = (step * batch) % len(images)
        x = images[start:start + batch].to(device)
        y = labels[start:start + batch].to(device)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"  step {step:4d}  loss {losses[-1]:.4f}", flush=True)
    elapsed = time.perf_counter() - started
    test_x, test_y = make_digits(512, seed=seed + 1)
    with torch.no_grad():
        predicted = model(test_x.to(device)).argmax(dim=1).cpu()
    return {"device": device, "losses": losses, "seconds": elapsed,
            "accuracy": float((predicted == test_y).float().mean()),
            "param_devices": sorted({str(p.device) for p in model.parameters()}),
            "grad_devices": sorted({str(p.grad.device) for p in model.parameters() if p.grad is not None})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--report", help="write losses, devices and op paths as JSON here")
    args = parser.parse_args()
    if args.device.startswith("fl"):
        import torch_fl
        torch_fl.op_stats.reset()
    result = train(args.device, args.steps, args.batch, args.seed, log_every=max(1, args.steps // 10))
    if args.device.startswith("fl"):
        result["op_paths"] = torch_fl.op_stats.snapshot()
    print(f"final loss {result['losses'][-1]:.4f}, test accuracy {result['accuracy']:.1%}, "
          f"{1000 * result['seconds'] / args.steps:.1f} ms/step on {args.device}")
    if args.report:
        Path(args.report).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
