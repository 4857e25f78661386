"""The README snippet as a script: matmul on a device, then a cross-device copy.

    python examples/snippet.py --device fl:0 --to fl:1 --report out.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--to", default=None, help="copy the result to this device")
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--report")
    args = parser.parse_args()
    if args.device.startswith("fl"):
        import torch_fl
        print(torch_fl.list_devices())
    torch.manual_seed(0)
    x = torch.randn(args.size, args.size, device=args.device)
    y = torch.randn(args.size, args.size, device=args.device)
    z = torch.matmul(x, y)
    moved = z.to(args.to) if args.to else z
    x_cpu, y_cpu, z_cpu = x.cpu(), y.cpu(), moved.cpu()
    expected = x_cpu.double() @ y_cpu.double()
    report = {"z_device": str(moved.device), "x_mean": x_cpu.mean().item(), "x_std": x_cpu.std().item(),
              "max_abs_error": (z_cpu.double() - expected).abs().max().item(),
              "max_abs_value": expected.abs().max().item()}
    print(json.dumps(report))
    if args.report:
        Path(args.report).write_text(json.dumps(report))


if __name__ == "__main__":
    main()
