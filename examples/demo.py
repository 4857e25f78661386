"""Torch-FL demo on the default plugin (the reference vendor): list devices,
run a matmul and a cross-device copy, then train a small CNN on fl:0 with the
ordinary PyTorch loop and watch the loss go down."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

import torch_fl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_cnn import train  # noqa: E402


def main() -> None:
    print(f"Torch-FL {torch_fl.__version__} on PyTorch {torch.__version__}")
    devices = torch_fl.list_devices()
    if not devices:
        sys.exit(f"no fl devices: {torch_fl.why_no_devices()}")
    for d in devices:
        print(f"  {d['device']}: {d['name']} ({d['vendor']}, plugin '{d['plugin']}', "
              f"{d['total_memory'] >> 20} MiB, alignment {d['alignment']})")

    print("\nmatmul of two 1000x1000 matrices on fl:0, then a copy to fl:1")
    torch.manual_seed(0)
    x = torch.randn(1000, 1000, device="fl:0")
    y = torch.randn(1000, 1000, device="fl:0")
    started = time.perf_counter()
    z = torch.matmul(x, y)
    z1 = z.to("fl:1") if len(devices) > 1 else z
    expected = x.cpu() @ y.cpu()
    error = (z1.cpu() - expected).abs().max().item()
    print(f"  z on {z1.device}, max |z - CPU result| = {error:.2e} ({time.perf_counter() - started:.3f}s)")

    print("\ntraining the CNN on fl:0 (synthetic seven-segment digits, batch 64)")
    torch_fl.op_stats.reset()
    result = train("fl:0", steps=300, log_every=25)
    fallbacks = torch_fl.op_stats.fallback_ops()
    print(f"  loss {result['losses'][0]:.3f} -> {result['losses'][-1]:.3f}, test accuracy "
          f"{result['accuracy']:.1%}, {1000 * result['seconds'] / 300:.1f} ms/step")
    print(f"  ops that ran on the vendor's kernels: {sum(1 for v in torch_fl.op_stats.snapshot().values() if 'native' in v)}"
          f", ops that fell back to the CPU: {fallbacks or 'none'}")


if __name__ == "__main__":
    main()
