"""A small model's step replayed as a captured graph, beside eager fl and native PyTorch, in one run.

    python benchmarks/graph_replay.py [--steps 200] [--rounds 3] [--json out.json]

For an MLP's forward (inference) and a training step (forward, backward, SGD update), each
with a batch of 8, it measures the time per step of:
- native PyTorch on the CPU (eager), one intra-op thread;
- fl eager on the reference vendor;
- fl replaying a torch.accelerator.Graph captured once (ops/graph/graph_capture.py), the input
  copied in each step;
- fl under torch.compile(mode="reduce-overhead") (integration/reduce_overhead.py).
Every fl step ends with a synchronize, so each figure is a whole step.  Rounds alternate and
each figure is the best round's.  docs/benchmarks/index.md ("Graph capture") has the figures.
"""
from __future__ import annotations

import argparse
import json
import time

import torch


def _model(device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                               torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(device)


def _inference(model, x):
    with torch.no_grad():
        return model(x)


def _training(model, x):
    for p in model.parameters():
        p.grad = None if p.grad is None else p.grad.zero_()
    model(x).square().mean().backward()
    with torch.no_grad():
        for p in model.parameters():
            p.sub_(p.grad, alpha=1e-3)


def _timed(step, steps: int, sync) -> float:
    step()
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return (time.perf_counter() - start) / steps


def _runners(kind: str, steps: int) -> dict:
    fn = _inference if kind == "inference" else _training
    batch = torch.randn(8, 64)
    cpu_model, fl_model = _model("cpu"), _model("fl")
    x = batch.to("fl")
    sync = torch.fl.synchronize

    def capture():
        side = torch.Stream(device="fl")
        with side:
            fn(fl_model, x)
        graph = torch.accelerator.Graph()
        with side, graph:
            fn(fl_model, x)
        return graph

    graph = capture()
    compiled_model = _model("fl")
    compiled = torch.compile(compiled_model, mode="reduce-overhead")
    return {
        "cpu_eager": lambda: _timed(lambda: fn(cpu_model, batch), steps, lambda: None),
        "fl_eager": lambda: _timed(lambda: fn(fl_model, x), steps, sync),
        "fl_graph_replay": lambda: _timed(lambda: (x.copy_(batch), graph.replay()), steps, sync),
        "fl_reduce_overhead": lambda: _timed(lambda: fn(compiled, x), steps, sync),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    import torch_fl  # noqa: F401
    torch.set_num_threads(1)
    results = {}
    for kind in ("inference", "training"):
        runners = _runners(kind, args.steps)
        best = {name: min(run() for _ in range(args.rounds)) for name, run in runners.items()}
        results[kind] = {name: round(seconds * 1e6, 1) for name, seconds in best.items()}
        base = best["fl_eager"]
        print(f"{kind}: " + ", ".join(f"{name} {seconds * 1e6:.0f} us ({base / seconds:.2f}x fl eager)"
                                      for name, seconds in best.items()))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"us_per_step": results}, out, indent=1)


if __name__ == "__main__":
    main()
