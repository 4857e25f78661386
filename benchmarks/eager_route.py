"""Eager host cost per op on both routes, beside native PyTorch, in one run.

    python benchmarks/eager_route.py [--rounds 5] [--json out.json]

Columns: native PyTorch on the CPU; fl with the native bridge, whose C++ kernels serve a
repeated call signature without Python (docs/users/native-bridge.md "Eager ops"); fl on the
Python route (TORCH_FL_BRIDGE=0, in a child process: the route is fixed at start-up).  The
rows: tiny ops (`x + 1` on 16 floats, `x.add_(1)`, an 8x8 mm, relu, sum, a view), host copies
(`.item()`, `.cpu()` and an upload of 16 floats; a clone of 16 floats on the CPU), a batch-1
MLP training step (~40 ops), two threads each driving its own device against one thread (a
Python loop, and a TorchScript loop, which runs without the GIL; native: two threads on the CPU), and
last a few rows run on a second stream with inputs made on the default one (cross-stream write
tracking on; their CPU column is the default-stream row's, as the CPU has no streams).
Rounds alternate between the columns (the machine is shared: `uptime` is printed), each
keeping its best; the figures are microseconds per op (per step for the MLP).
`--plugin null` runs the fl columns on the null plugin (benchmarks/null_plugin.py: launches
return at once, no stream worker threads), so the two-thread row measures the runtime alone.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

CHILD = "--child"
SECOND = " (second stream)"


def _ops(device: str) -> dict:
    import torch
    x = torch.ones(16, device=device)
    inplace = torch.zeros(16, device=device)
    a = torch.ones(8, 8, device=device)
    host = torch.ones(16)
    fl = device != "cpu"
    return {
        "x + 1": lambda: x + 1,
        "x.add_(1)": lambda: inplace.add_(1),
        "mm 8x8": lambda: a @ a,
        "relu": lambda: torch.relu(x),
        "sum": lambda: x.sum(),
        "view": lambda: a.view(64),
        # Host copies; on the CPU their equivalent is a clone of 16 floats.
        "x[3].item()": lambda: x[3].item(),
        ".cpu() of 16 floats": (lambda: x.cpu()) if fl else (lambda: x.clone()),
        "upload of 16 floats": (lambda: host.to(device)) if fl else (lambda: host.clone()),
    }


def _mlp_step(device: str):
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(1, 32).to(device)
    target = torch.randn(1, 10).to(device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(data), target)
        loss.backward()
        opt.step()
    return step


def _sync(device: str) -> None:
    import torch
    if device.startswith("fl"):
        torch.fl.synchronize()


def _best_us(run, device: str, calls: int) -> float:
    for _ in range(20):
        run()
    _sync(device)
    start = time.perf_counter()
    for _ in range(calls):
        run()
    _sync(device)
    return (time.perf_counter() - start) / calls * 1e6


def _threads_us(devices: list[str], calls: int, in_place: bool) -> float:
    """Wall time per op of `len(devices)` threads, each running x + 1 (or x.add_(1)) on its
    own device."""
    import torch
    ready = threading.Barrier(len(devices) + 1)
    done = []

    def drive(device: str) -> None:
        if device.startswith("fl"):
            torch.fl.set_device(int(device.split(":")[1]))
        x = torch.ones(16, device=device)
        op = x.add_ if in_place else x.add
        for _ in range(50):
            op(1)
        ready.wait()
        for _ in range(calls):
            op(1)
        _sync(device)
        done.append(time.perf_counter())
    threads = [threading.Thread(target=drive, args=(d,)) for d in devices]
    for t in threads:
        t.start()
    ready.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return (max(done) - start) / (calls * len(devices)) * 1e6


def _script_loops():
    """TorchScript loops of tiny ops: calling one releases the GIL until it returns, so two
    threads running them measure the op path itself (the C++ kernels take no global lock),
    where the Python loop of _threads_us measures the interpreter's lock as much."""
    import torch

    def add_inplace(x: torch.Tensor, n: int) -> torch.Tensor:
        for _ in range(n):
            x.add_(1)
        return x

    def add_chain(x: torch.Tensor, n: int) -> torch.Tensor:
        for _ in range(n):
            x = x + 1            # each result feeds the next: nothing for the JIT to drop
        return x
    return {"x.add_(1)": torch.jit.script(add_inplace), "x = x + 1": torch.jit.script(add_chain)}


def _script_threads_us(devices: list[str], calls: int, loop) -> float:
    """Wall time per op of `len(devices)` threads, each running `loop` on its own device."""
    import torch
    xs = [torch.ones(16, device=d) for d in devices]
    for x in xs:
        loop(x, 50)
    ready = threading.Barrier(len(devices) + 1)

    def drive(device: str, x) -> None:
        if device.startswith("fl"):
            torch.fl.set_device(int(device.split(":")[1]))
        ready.wait()
        loop(x, calls)
        _sync(device)
    threads = [threading.Thread(target=drive, args=(d, x)) for d, x in zip(devices, xs)]
    for t in threads:
        t.start()
    ready.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return (time.perf_counter() - start) / (calls * len(devices)) * 1e6


def _thread_rows(fl: bool, calls: int, repeats: int = 5) -> dict:
    """1 thread against 2 threads (on 2 devices for fl; the CPU twice for native), alternated
    `repeats` times, best of each: one run of a TorchScript loop lasts tens of milliseconds, where
    a scheduler's hiccup on 2 cores moves a single figure by 30%."""
    one, two = (["fl:0"], ["fl:0", "fl:1"]) if fl else (["cpu"], ["cpu", "cpu"])
    runs = {}
    for name, in_place in (("x + 1", False), ("x.add_(1)", True)):
        runs[name] = lambda devices, in_place=in_place: _threads_us(devices, calls, in_place)
    for name, loop in _script_loops().items():
        runs[f"{name}, TorchScript"] = lambda devices, loop=loop: _script_threads_us(devices, calls * 100, loop)
    figures: dict[str, float] = {}
    for name, run in runs.items():
        for _ in range(repeats):
            for label, devices in (("1 thread", one), ("2 threads", two)):
                key = f"{name}, {label}"
                figures[key] = min(run(devices), figures.get(key, float("inf")))
    return figures


def measure(device: str, calls: int) -> dict:
    """One round of every row on `device` ("cpu" or "fl")."""
    import torch
    fl = device == "fl"
    target = "fl:0" if fl else "cpu"
    figures = {name: _best_us(run, target, calls) for name, run in _ops(target).items()}
    figures["MLP train step"] = _best_us(_mlp_step(target), target, max(calls // 40, 50))
    if not fl or torch.fl.device_count() >= 2:
        figures.update(_thread_rows(fl, calls))
    if fl:
        ops, step = _ops(target), _mlp_step(target)      # inputs and model made on the default stream
        side = torch.fl.Stream(target)
        with torch.fl.stream(side):      # tracking is on from here (stream_order.h): these rows come last
            for name in ("x + 1", "mm 8x8", "x[3].item()", "upload of 16 floats"):
                figures[name + SECOND] = _best_us(ops[name], target, calls)
            figures["MLP train step" + SECOND] = _best_us(step, target, max(calls // 40, 50))
    return figures


def _child(route: str, calls: int, plugin: str | None) -> dict:
    env = {**os.environ, "TORCH_FL_BRIDGE": "0" if route == "python" else "1"}
    if plugin is not None:
        env.update(TORCH_FL_PLUGINS=plugin, TORCH_FL_DISABLE_ENTRY_POINTS="1")
    out = subprocess.run([sys.executable, __file__, CHILD, str(calls)], capture_output=True, text=True, env=env,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    if sys.argv[1:2] == [CHILD]:
        import torch
        torch.set_num_threads(1)
        import torch_fl  # noqa: F401
        from fl_runtime import bridge
        figures = {"cpu": measure("cpu", int(sys.argv[2])), "fl": measure("fl", int(sys.argv[2])),
                   "bridge": bridge.status().active}
        print(json.dumps(figures))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--json")
    parser.add_argument("--plugin", choices=("installed", "null"), default="installed")
    args = parser.parse_args()
    plugin = None
    if args.plugin == "null":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from null_plugin import build_null_plugin
        plugin = str(build_null_plugin())
    best: dict[str, dict[str, float]] = {"native CPU": {}, "fl bridge": {}, "fl Python route": {}}
    for _ in range(args.rounds):
        for route, column in (("bridge", "fl bridge"), ("python", "fl Python route")):
            figures = _child(route, args.calls, plugin)
            assert figures["bridge"] == (route == "bridge"), f"the {route} child ran on the other route"
            for name, us in figures["fl"].items():
                best[column][name] = min(us, best[column].get(name, float("inf")))
            for name, us in figures["cpu"].items():
                best["native CPU"][name] = min(us, best["native CPU"].get(name, float("inf")))
    rows = list(best["fl bridge"])
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; plugin: {args.plugin}; uptime: {os.popen('uptime').read().strip()}")
    print(f"{'row':36} {'native CPU':>11} {'fl bridge':>10} {'fl Python':>10} {'bridge/CPU':>11} {'Python/CPU':>11}")
    for name in rows:
        cpu = best["native CPU"].get(name.removesuffix(SECOND))
        fast, slow = best["fl bridge"][name], best["fl Python route"].get(name, float("nan"))
        ratio = (lambda v: f"{v / cpu:10.2f}x") if cpu else (lambda v: f"{'':>11}")
        print(f"{name:36} {cpu if cpu else float('nan'):11.2f} {fast:10.2f} {slow:10.2f} {ratio(fast)} {ratio(slow)}")
    print("two threads' throughput over one thread's (fl: each thread on its own device):")
    for name in ("x + 1", "x.add_(1)", "x.add_(1), TorchScript", "x = x + 1, TorchScript"):
        ratios = []
        for column in ("native CPU", "fl bridge", "fl Python route"):
            one, two = best[column].get(f"{name}, 1 thread"), best[column].get(f"{name}, 2 threads")
            ratios.append(f"{column} {one / two:.2f}x" if one and two else f"{column} -")
        print(f"  {name:24} " + ", ".join(ratios))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(best, handle, indent=1)


if __name__ == "__main__":
    main()
