"""Torch-FL benchmarks: figures for fl:0 and native PyTorch CPU, measured in the same run.

    python benchmarks/bench.py [--steps 30] [--json out.json]

1. Dispatch cost per op on tiny tensors (us/op): what the runtime adds per call.
2. The example CNN's (examples/train_cnn.py) training step at batch 64 (ms/step) and its ratio to native.
3. The share of the fl step spent outside vendor kernels (reference vendor's
   kernel-time counter, an instrumentation symbol of that plugin only).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import torch_fl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from train_cnn import build_model  # noqa: E402
from synthetic_digits import make_digits  # noqa: E402

TINY_OPS = {
    "add (a + b)": lambda a, b: a + b,
    "mul_ in place": lambda a, b: a.mul_(1.0),
    "relu": lambda a, b: torch.relu(a),
    "mm 4x4": lambda a, b: a @ b,
    "sum": lambda a, b: a.sum(),
    "view (metadata only)": lambda a, b: a.view(16),
}


def time_per_call(fn, repeats: int, sync, clock) -> float:
    """Best of 5 rounds of `repeats` calls, in seconds per call, by `clock`."""
    for _ in range(50):
        fn()
    sync()
    best = float("inf")
    for _ in range(5):
        start = clock()
        for _ in range(repeats):
            fn()
        sync()
        best = min(best, (clock() - start) / repeats)
    return best


def dispatch_costs(repeats: int) -> list[dict]:
    """Per op: wall time per call, and the calling thread's CPU time per call (the
    latter is immune to other processes on a shared 2-core machine)."""
    rows = []
    for name, op in TINY_OPS.items():
        cpu_a, cpu_b = torch.ones(4, 4), torch.ones(4, 4)
        fl_a, fl_b = cpu_a.to("fl:0"), cpu_b.to("fl:0")
        row = {"op": name}
        for clock_name, clock in (("wall", time.perf_counter), ("thread", time.thread_time)):
            native = time_per_call(lambda: op(cpu_a, cpu_b), repeats, lambda: None, clock)
            ours = time_per_call(lambda: op(fl_a, fl_b), repeats, lambda: torch_fl.synchronize(0), clock)
            row.update({f"cpu_{clock_name}_us": native * 1e6, f"fl_{clock_name}_us": ours * 1e6,
                        f"added_{clock_name}_us": (ours - native) * 1e6})
        rows.append(row)
    return rows


def kernel_time_counter():
    """A function giving the reference vendor's cumulative kernel time in ns, or None
    when fl:0's plugin has no such instrumentation (it is not part of the ABI)."""
    from cffi import FFI
    ffi = FFI()
    ffi.cdef("uint64_t fl_reference_kernel_time_ns(void);")
    lib = ffi.dlopen(torch_fl.runtime().devices[0].plugin.source.path)   # the already-loaded library
    try:
        return lib.fl_reference_kernel_time_ns
    except AttributeError:
        return None


def cnn_step_ms(device: str, steps: int, batch: int = 64) -> float:
    torch.manual_seed(0)
    model = build_model().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    images, labels = make_digits(batch * 4)
    batches = [(images[i:i + batch].to(device), labels[i:i + batch].to(device))
               for i in range(0, len(images), batch)]

    def step(i):
        x, y = batches[i % len(batches)]
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss
    for i in range(3):
        step(i).item()
    start = time.perf_counter()
    for i in range(steps):
        loss = step(i)
    loss.item()
    return (time.perf_counter() - start) / steps * 1e3


def cnn_kernel_share(steps: int) -> tuple[float, float] | None:
    """(ms/step, share of the step outside vendor kernels) on fl:0."""
    counter = kernel_time_counter()
    if counter is None:
        return None
    before, start = counter(), time.perf_counter()
    ms = cnn_step_ms("fl:0", steps)
    wall = time.perf_counter() - start
    kernel_s = (counter() - before) / 1e9
    return ms, max(0.0, 1 - kernel_s / wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3, help="CNN rounds per device; the best counts")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, Torch-FL {torch_fl.__version__}, "
          f"plugin '{torch_fl.list_devices()[0]['plugin']}'\n")
    rows = dispatch_costs(args.repeats)
    print(f"{'tiny op (4x4 float32)':24s} {'wall: CPU':>10s} {'fl:0':>7s} {'added':>7s}"
          f"  {'thread CPU: CPU':>16s} {'fl:0':>7s} {'added':>7s}   (us per call)")
    for r in rows:
        print(f"{r['op']:24s} {r['cpu_wall_us']:10.2f} {r['fl_wall_us']:7.2f} {r['added_wall_us']:7.2f}"
              f"  {r['cpu_thread_us']:16.2f} {r['fl_thread_us']:7.2f} {r['added_thread_us']:7.2f}")
    # Alternate the two a few times and keep each one's best round: on a shared
    # machine a single round can be slowed several-fold by a neighbour.
    cpu_runs, fl_runs = [], []
    for _ in range(args.rounds):
        cpu_runs.append(cnn_step_ms("cpu", args.steps))
        fl_runs.append(cnn_step_ms("fl:0", args.steps))
    cpu_ms, fl_ms = min(cpu_runs), min(fl_runs)
    share = cnn_kernel_share(args.steps)
    print(f"\nCNN training step, batch 64: CPU {cpu_ms:.1f} ms, fl:0 {fl_ms:.1f} ms, ratio {fl_ms / cpu_ms:.2f}x")
    if share:
        print(f"share of the fl:0 step outside vendor kernels: {share[1]:.1%}")
    if args.json:
        Path(args.json).write_text(json.dumps({"dispatch": rows, "cnn_cpu_ms": cpu_ms, "cnn_fl_ms": fl_ms,
                                               "outside_kernels": share[1] if share else None}, indent=1))


if __name__ == "__main__":
    main()
