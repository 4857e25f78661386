"""The runtime's host cost per op on real op mixes, beside native PyTorch, in one run.

    python benchmarks/host_cost.py [--rounds 3] [--json out.json] [--png docs/benchmarks/host_cost.png]

One process loads two plugins: the reference vendor and the null plugin (the
same sources with launches that return at once: benchmarks/null_plugin.py,
built here with fl-sdk).  For each mix (the example CNN's training step, a tiny
GPT-2 training step with AdamW, a tiny Llama greedy decode loop with its KV cache, the tiny-op set
of bench.py; a static-cache Llama decode and a chain of tiny ops) it measures, alternating rounds and
keeping each one's best:

- native PyTorch CPU: the whole cost of the mix (host and kernels);
- fl on the null plugin: the runtime's host cost, untimed, and in a separate
  round split into the launcher's phases (fl_runtime.ops.accounting.PHASE_NAMES:
  normalize, layout = meta/output layout, allocate, marshal, order, launch,
  fallback) plus "outside the launcher" (PyTorch's dispatcher and autograd,
  views, copies, factories, the model's own Python).  The timed round runs the
  launcher's full path on every call; untimed, a repeated call signature runs
  its recorded program (fl_runtime/ops/eager/fast_path.py), so the phases say where a
  signature's first call goes, and the untimed column what a steady loop costs;
- fl on the reference vendor: the end-to-end figure the targets name;
- for the mixes whose builder takes `graph`, the same on the graph path: the model's forward (and the
  loss) compiled with torch.compile(backend="fl") (docs/users/graph-path.md), the optimizer eager;
- the fl columns again on the Python route (TORCH_FL_BRIDGE=0: every op through the Python
  launcher), in a child process, since the route is fixed when torch_fl starts
  (docs/users/native-bridge.md).  The child runs right after this process's rounds of each mix,
  with its own native column interleaved with its fl ones, and its ratios are over that column.

Per-op figures divide a step's time by the aten ops one step dispatches on the
CPU (counted once with a TorchDispatchMode), the same denominator for every
column, so per-op ratios are step-time ratios.  PyTorch runs with one intra-op
thread throughout (the machine has 2 cores, and the reference's stream worker
needs one).  Also measures `import torch_fl` + device discovery against
`import torch`, in fresh interpreters.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "examples"))

from null_plugin import build_null_plugin  # noqa: E402

REFERENCE_LIB = ROOT / "reference_vendor" / "libfl_reference.so"
TINY_SHAPE = (4, 4)


# ---- import cost ---------------------------------------------------------------------------

_IMPORT_PROBE = """
import time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import torch_fl
n = len(torch_fl.list_devices())
t2 = time.perf_counter()
print(t1 - t0, t2 - t1, n)
"""


def import_cost(runs: int = 3) -> dict:
    """Best of `runs` fresh interpreters (installed plugins as a user has them): seconds to
    `import torch`, and then to `import torch_fl` and list the devices."""
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_FL_PLUGINS", "TORCH_FL_DISABLE_ENTRY_POINTS")}
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"    # import torch alone must not load torch_fl
    best_torch = best_fl = float("inf")
    devices = 0
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", _IMPORT_PROBE], env=env, capture_output=True, text=True,
                             check=True).stdout.split()
        best_torch, best_fl = min(best_torch, float(out[0])), min(best_fl, float(out[1]))
        devices = int(out[2])
    return {"import_torch_s": best_torch, "import_torch_fl_and_discovery_s": best_fl, "devices": devices}


# ---- the mixes -----------------------------------------------------------------------------
# Each builder takes a device string and returns a callable running one iteration
# (asynchronously on fl: the caller synchronizes).

def _graph(fn, graph: bool):
    """fn, or fn compiled for the graph path (torch.compile(backend="fl"); docs/users/graph-path.md)."""
    import torch
    return torch.compile(fn, backend="fl") if graph else fn


def cnn_mix(device: str, graph: bool = False):
    import torch
    from train_cnn import build_model
    from synthetic_digits import make_digits
    torch.manual_seed(0)
    model = build_model().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    images, labels = make_digits(64)
    x, y = images.to(device), labels.to(device)
    loss = _graph(lambda: torch.nn.functional.cross_entropy(model(x), y), graph)

    def step():
        optimizer.zero_grad()
        loss().backward()
        optimizer.step()
    return step


def gpt2_mix(device: str, graph: bool = False):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=1024, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 1024, (4, 64), generator=torch.Generator().manual_seed(1)).to(device)
    loss = _graph(lambda: model(input_ids=ids, labels=ids).loss, graph)

    def step():
        optimizer.zero_grad()
        loss().backward()
        optimizer.step()
    return step


def _tiny_llama(device: str):
    """(config, model in eval mode, an 8-token prompt) of the Llama mixes."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=1024, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64,
                         pad_token_id=0, eos_token_id=1, bos_token_id=2)
    model = LlamaForCausalLM(config).to(device).eval()
    prompt = torch.randint(3, 1024, (1, 8), generator=torch.Generator().manual_seed(1)).to(device)
    return config, model, prompt


def llama_generate_mix(device: str):
    """Greedy decoding with the KV cache, 16 tokens, written as the loop `generate` runs but
    without its data-dependent checks (attention-mask `.all()`, stopping criteria): on the
    null plugin those read arbitrary bytes and would change the path the model takes."""
    import torch
    _, model, prompt = _tiny_llama(device)

    def step():
        with torch.no_grad():
            out = model(input_ids=prompt, use_cache=True)
            for _ in range(15):
                token = out.logits[:, -1:].argmax(-1)
                out = model(input_ids=token, past_key_values=out.past_key_values, use_cache=True)
    return step


def llama_static_decode_mix(device: str, graph: bool = False):
    """Greedy decoding of 16 tokens with transformers' StaticCache: every decode step has the
    same shapes, so the decode call compiles to one graph (the dynamic cache above grows each
    step: a graph per length).  The prompt's prefill runs eagerly in every column."""
    import torch
    from transformers import StaticCache
    config, model, prompt = _tiny_llama(device)
    cache = StaticCache(config=config, max_batch_size=1, max_cache_len=32, device=device, dtype=torch.float32)
    positions = [torch.tensor([i], device=device) for i in range(8, 24)]
    prefill_positions = torch.arange(8, device=device)
    decode = _graph(model, graph)

    def step():
        cache.reset()
        with torch.no_grad():
            out = model(input_ids=prompt, past_key_values=cache, use_cache=True, cache_position=prefill_positions)
            for position in positions:
                token = out.logits[:, -1:].argmax(-1)
                out = decode(input_ids=token, past_key_values=cache, use_cache=True, cache_position=position)
    return step


def tiny_chain_mix(device: str, graph: bool = False):
    """bench.py's tiny ops as a chain, each result feeding the next (a graph drops results
    nobody reads, so the tiny-op set itself cannot be compiled as it runs eagerly)."""
    import torch
    a, b = torch.ones(TINY_SHAPE).to(device), torch.ones(TINY_SHAPE).to(device)

    def chain(x, b):
        for _ in range(50):
            x = (torch.relu(x + b) @ b).sum(0, keepdim=True) * 0.01 + x
        return x.view(16)
    run = _graph(chain, graph)
    return lambda: run(a, b)


def tiny_ops(device: str):
    """bench.py's tiny-op set, one call of each per iteration."""
    import torch
    a, b = torch.ones(TINY_SHAPE).to(device), torch.ones(TINY_SHAPE).to(device)
    return [("add (a + b)", lambda: a + b), ("mul_ in place", lambda: a.mul_(1.0)),
            ("relu", lambda: torch.relu(a)), ("mm 4x4", lambda: a @ b), ("sum", lambda: a.sum()),
            ("view (metadata only)", lambda: a.view(16))]


def tiny_mix(device: str):
    ops = [fn for _, fn in tiny_ops(device)]

    def step():
        for _ in range(50):
            for fn in ops:
                fn()
    return step


MIXES = {"CNN train step": (cnn_mix, 5), "GPT-2 train step": (gpt2_mix, 5),
         "Llama greedy decode (16 tokens)": (llama_generate_mix, 2), "tiny ops (x50)": (tiny_mix, 20),
         "Llama decode, static cache": (llama_static_decode_mix, 2), "tiny op chain (x50)": (tiny_chain_mix, 20)}


def has_graph_variant(builder) -> bool:
    """Whether a mix's builder takes graph=True: such mixes are measured on the graph path
    too (docs/users/graph-path.md)."""
    import inspect
    return "graph" in inspect.signature(builder).parameters


# ---- measuring -----------------------------------------------------------------------------

def count_ops(step) -> int:
    """Aten ops one iteration dispatches (a warm-up run first, so lazy state is built)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))
    step()
    with Count():
        step()
    return Count.n


CLOCKS = {"wall": time.perf_counter, "thread": time.thread_time, "process": time.process_time}


def time_step(step, iterations: int, sync) -> dict:
    """Seconds per iteration after a warm-up, by each of CLOCKS: wall; this thread's CPU
    time (immune to other processes on a shared machine; on the null plugin and on the
    CPU all the work is on this thread); the process's CPU time (adds the reference
    vendor's stream workers)."""
    step()
    sync()
    start = {k: clock() for k, clock in CLOCKS.items()}
    for _ in range(iterations):
        step()
    sync()
    return {k: (clock() - start[k]) / iterations for k, clock in CLOCKS.items()}


def timed_phases(step, iterations: int, sync) -> tuple[float, dict, int]:
    """(thread seconds per iteration, phase -> seconds per iteration, launcher calls per
    iteration) with the launcher's timed path installed."""
    from fl_runtime.ops import accounting
    times = accounting.PhaseTimes(time.thread_time_ns)     # the same clock as the totals
    step()
    sync()
    previous = accounting.set_phases(times)
    try:
        start = time.thread_time()
        for _ in range(iterations):
            step()
        sync()
        spent = (time.thread_time() - start) / iterations
    finally:
        accounting.set_phases(previous)
    return spent, {k: v / 1e9 / iterations for k, v in times.as_dict().items()}, times.calls // iterations


def _best(a: dict | None, b: dict) -> dict:
    return b if a is None else {k: min(a[k], b[k]) for k in b}


def mix_steps(builder, null_dev: str, ref_dev: str, sync) -> tuple[dict, dict]:
    """(column -> step, column -> its sync) of one mix: native, fl on the null plugin, fl on the
    reference vendor, and the two fl ones on the graph path where the builder offers it."""
    steps = {"native": builder("cpu"), "null": builder(null_dev), "ref": builder(ref_dev)}
    syncs = {"native": lambda: None, "null": lambda: sync(null_dev), "ref": lambda: sync(ref_dev)}
    if has_graph_variant(builder):
        steps.update(null_graph=builder(null_dev, graph=True), ref_graph=builder(ref_dev, graph=True))
        syncs.update(null_graph=syncs["null"], ref_graph=syncs["ref"])
    return steps, syncs


def best_times(steps: dict, syncs: dict, iterations: int, rounds: int, after_round=None) -> dict:
    """Column -> the best (per clock) of `rounds` alternating rounds: a neighbour's burst hits
    every column alike."""
    best: dict = {k: None for k in steps}
    for _ in range(rounds):
        for key, step in steps.items():
            best[key] = _best(best[key], time_step(step, iterations, syncs[key]))
        if after_round is not None:
            after_round()
    return best


def measure_mix(name: str, builder, iterations: int, rounds: int, null_dev: str, ref_dev: str, sync) -> dict:
    steps, syncs = mix_steps(builder, null_dev, ref_dev, sync)
    ops = count_ops(steps["native"])
    timings = []

    def timed_round():
        timings.append(timed_phases(steps["null"], iterations, syncs["null"]))
    best = best_times(steps, syncs, iterations, rounds, timed_round)
    spent_timed, phases, calls = min(timings, key=lambda timed: timed[0])
    us = 1e6 / ops
    row = {"mix": name, "aten_ops_per_iter": ops, "launcher_calls_per_iter": calls, "iterations": iterations,
           "seconds_per_iter": best,
           # host cost per op: this thread's CPU time (see time_step)
           "native_us_per_op": best["native"]["thread"] * us, "null_us_per_op": best["null"]["thread"] * us,
           "timed_null_us_per_op": spent_timed * us,
           "phases_us_per_op": {k: v * us for k, v in phases.items()}}
    row["phases_us_per_op"]["outside launcher"] = max(0.0, (spent_timed - sum(phases.values())) * us)
    row["null_over_native"] = best["null"]["thread"] / best["native"]["thread"]
    row["ref_over_native_wall"] = best["ref"]["wall"] / best["native"]["wall"]
    row["ref_over_native_process_cpu"] = best["ref"]["process"] / best["native"]["process"]
    if "null_graph" in best:
        row["graph_null_us_per_op"] = best["null_graph"]["thread"] * us
        row["graph_null_over_native"] = best["null_graph"]["thread"] / best["native"]["thread"]
        row["graph_ref_over_native_wall"] = best["ref_graph"]["wall"] / best["native"]["wall"]
    return row


def add_python_route(row: dict, seconds: dict) -> None:
    """Join the Python route's best seconds per iteration (python_route_child) into a mix's row:
    each ratio over the child's own native column."""
    us = 1e6 / row["aten_ops_per_iter"]
    native = seconds["native"]
    row["python_route"] = {"seconds_per_iter": seconds,
                           "null_us_per_op": seconds["null"]["thread"] * us,
                           "null_over_native": seconds["null"]["thread"] / native["thread"],
                           "ref_over_native_wall": seconds["ref"]["wall"] / native["wall"]}
    if "null_graph" in seconds:
        row["python_route"].update(graph_null_us_per_op=seconds["null_graph"]["thread"] * us,
                                   graph_null_over_native=seconds["null_graph"]["thread"] / native["thread"],
                                   graph_ref_over_native_wall=seconds["ref_graph"]["wall"] / native["wall"])


def tiny_op_rows(null_dev: str, repeats: int, rounds: int, sync) -> list[dict]:
    """Per tiny op: native and null-plugin thread-CPU us per call (best of `rounds`)."""
    rows = []
    for (name, native), (_, ours) in zip(tiny_ops("cpu"), tiny_ops(null_dev)):
        best_native = best_null = float("inf")
        for _ in range(rounds):
            best_native = min(best_native, time_step(lambda: [native() for _ in range(repeats)], 1,
                                                     lambda: None)["thread"])
            best_null = min(best_null, time_step(lambda: [ours() for _ in range(repeats)], 1,
                                                 lambda: sync(null_dev))["thread"])
        rows.append({"op": name, "native_us": best_native / repeats * 1e6, "null_us": best_null / repeats * 1e6,
                     "added_us": (best_null - best_native) / repeats * 1e6})
    return rows


# ---- report --------------------------------------------------------------------------------

def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from fl_runtime.ops.accounting import PHASE_NAMES
    parts = [*PHASE_NAMES, "outside launcher"]
    import textwrap
    fig, ax = plt.subplots(figsize=(12, 5.2))
    names = [textwrap.fill(r["mix"], 16) for r in rows]
    bottom = [0.0] * len(rows)
    colors = plt.get_cmap("tab10").colors
    for i, part in enumerate(parts):
        heights = [r["phases_us_per_op"][part] for r in rows]
        ax.bar(names, heights, bottom=bottom, label=part, color=colors[i % len(colors)])
        bottom = [b + h for b, h in zip(bottom, heights)]
    # The axis fits the fl bars; a native figure above it (the CNN's large kernels) is
    # drawn at the top with its value written beside it.
    top = max(bottom) * 1.35
    native = [r["native_us_per_op"] for r in rows]
    ax.scatter(names, [min(v, top * 0.97) for v in native], marker="_", s=900, color="black", zorder=3,
               label="native PyTorch CPU, whole cost")
    for i, v in enumerate(native):
        if v > top * 0.97:
            ax.annotate(f"native {v:.0f} µs ↑", (i, top * 0.97), textcoords="offset points", xytext=(0, -14),
                        ha="center", fontsize=8)
    # What users pay: the steady state, where repeated call signatures replay their programs
    # (ops/eager/fast_path.py) and the phases above mostly do not run.
    steady = [r["null_us_per_op"] for r in rows]
    ax.scatter(names, steady, marker="D", s=60, color="crimson", zorder=4,
               label="fl, steady state (replayed programs), whole cost")
    graph = [(i, r["graph_null_us_per_op"]) for i, r in enumerate(rows) if "graph_null_us_per_op" in r]
    if graph:
        ax.scatter([names[i] for i, _ in graph], [v for _, v in graph], marker="*", s=140, color="gold",
                   edgecolors="black", zorder=5, label="fl, graph path (torch.compile backend=\"fl\"), whole cost")
    ax.set_ylim(0, top)
    ax.set_ylabel("host µs per aten op (thread CPU time)")
    ax.set_title("Torch-FL host cost per op on the null plugin: full path by phase, steady state, graph path",
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)


ROUTE_CHILD = "--python-route-child"
DECODE_MIX, DECODE_TOKENS = "Llama decode, static cache", 16


def start_runtime():
    """Both plugins in this process (the reference vendor and the null plugin), PyTorch with one
    intra-op thread.  Returns (torch_fl, reference device, null device, sync(device))."""
    null_lib = build_null_plugin()
    os.environ["TORCH_FL_DISABLE_ENTRY_POINTS"] = "1"
    os.environ["TORCH_FL_PLUGINS"] = os.pathsep.join([str(REFERENCE_LIB), str(null_lib)])
    import torch
    torch.set_num_threads(1)
    import torch_fl
    by_path = {d["plugin_path"]: d["device"] for d in reversed(torch_fl.list_devices())}

    def sync(device: str) -> None:
        torch_fl.synchronize(int(device.split(":")[1]))
    return torch_fl, by_path[str(REFERENCE_LIB)], by_path[str(null_lib)], sync


def python_route_child(request: dict) -> dict:
    """The child's side of on_python_route: the requested mix (or, for none, the tiny ops)
    measured as the parent measures them, times only."""
    _, ref_dev, null_dev, sync = start_runtime()
    from fl_runtime import bridge
    if bridge.status().active:
        raise SystemExit("the Python-route child runs with the bridge: is TORCH_FL_BRIDGE=0 ignored?")
    if request["mix"] is None:
        return {"tiny_ops": tiny_op_rows(null_dev, request["repeats"], request["rounds"], sync)}
    builder, iterations = MIXES[request["mix"]]
    steps, syncs = mix_steps(builder, null_dev, ref_dev, sync)
    return {"seconds_per_iter": best_times(steps, syncs, iterations, request["rounds"])}


def on_python_route(mix: str | None, rounds: int, repeats: int) -> dict:
    """python_route_child's answer from a child process on the Python route."""
    request = json.dumps({"mix": mix, "rounds": rounds, "repeats": repeats})
    result = subprocess.run([sys.executable, __file__, ROUTE_CHILD, request], capture_output=True, text=True,
                            env={**os.environ, "TORCH_FL_BRIDGE": "0"})
    if result.returncode != 0:
        raise RuntimeError(f"the Python-route child failed for {mix or 'the tiny ops'}:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _ratio(value: float | None) -> str:
    return f"{value:6.2f}x" if value is not None else f"{'':7s}"


def _host_table(rows: list[dict], title: str, unit: str, routes: tuple[str, str], prefix: str) -> None:
    """Native, this process's route and the Python route's host cost per op, with ratios over
    each process's own native column; `prefix` picks the graph path's keys."""
    if not rows:
        return
    here, python = routes
    print(f"\n{title:28s} {'native':>7s} {here:>7s} {'ratio':>7s} {python:>7s} {'ratio':>7s}   ({unit})")
    for r in rows:
        p = r.get("python_route", {})
        print(f"{r['mix']:28s} {r['native_us_per_op']:7.2f} {r[prefix + 'null_us_per_op']:7.2f} "
              f"{_ratio(r[prefix + 'null_over_native'])} {p.get(prefix + 'null_us_per_op', float('nan')):7.2f} "
              f"{_ratio(p.get(prefix + 'null_over_native'))}")


def report(rows: list[dict], tiny: list[dict], routes: tuple[str, str]) -> None:
    here, python = routes
    print(f"\n{'tiny op (4x4 float32)':24s} {'native':>8s} {here:>8s} {python:>8s}   (thread-CPU us per call, null plugin)")
    for r in tiny:
        print(f"{r['op']:24s} {r['native_us']:8.2f} {r['null_us']:8.2f} {r.get('python_route_us', float('nan')):8.2f}")
    _host_table(rows, "mix", "eager, thread-CPU us per aten op on the null plugin", routes, "")
    _host_table([r for r in rows if "graph_null_us_per_op" in r], "graph path (backend=fl)",
                "thread-CPU us per aten op of the eager mix, null plugin", routes, "graph_")
    from fl_runtime.ops.accounting import PHASE_NAMES
    parts = [*PHASE_NAMES, "outside launcher"]
    print(f"\nnull plugin, timed full path (no programs), thread-CPU us per aten op: {'  '.join(p for p in parts)}")
    for r in rows:
        print(f"{r['mix']:28s} " + " ".join(f"{r['phases_us_per_op'][p]:6.2f}" for p in parts)
              + f"   launcher calls/iter {r['launcher_calls_per_iter']}")
    print("\nms per iteration (wall / process CPU): native CPU, fl null plugin, fl reference vendor; "
          f"reference/native wall, {here} and {python}")
    for r in rows:
        s = r["seconds_per_iter"]
        cols = "   ".join(f"{k} {s[k]['wall'] * 1e3:8.2f} / {s[k]['process'] * 1e3:8.2f}" for k in ("native", "null", "ref"))
        print(f"{r['mix']:28s} {cols}   {_ratio(r['ref_over_native_wall'])} "
              f"{_ratio(r.get('python_route', {}).get('ref_over_native_wall'))}")
    decode = [r for r in rows if r["mix"] == DECODE_MIX]
    if decode:
        print(f"\n{DECODE_MIX}: tokens/s (wall; {DECODE_TOKENS} tokens per iteration, the prefill included)")
        for label, seconds in ((here, decode[0]["seconds_per_iter"]),
                               (python, decode[0].get("python_route", {}).get("seconds_per_iter"))):
            if seconds:
                print(f"  {label:12s} " + "  ".join(f"{k} {DECODE_TOKENS / v['wall']:7.0f}" for k, v in seconds.items()))


def main() -> None:
    if sys.argv[1:2] == [ROUTE_CHILD]:
        print(json.dumps(python_route_child(json.loads(sys.argv[2]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; each column keeps its best")
    parser.add_argument("--repeats", type=int, default=2000, help="calls per tiny-op timing")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--png", default=str(ROOT / "docs" / "benchmarks" / "host_cost.png"),
                        help="the plot (default: %(default)s)")
    parser.add_argument("--mixes", nargs="*", help="only these mixes (names as printed)")
    parser.add_argument("--no-python-route", action="store_true", help="skip the TORCH_FL_BRIDGE=0 column")
    parser.add_argument("--replot", metavar="JSON", help="only redraw the plot from a --json file")
    args = parser.parse_args()
    if args.replot:
        plot(json.loads(Path(args.replot).read_text())["mixes"], Path(args.png))
        return

    print("import cost ...", flush=True)
    imports = import_cost()
    torch_fl, ref_dev, null_dev, sync = start_runtime()
    import torch
    from fl_runtime import bridge, compiled
    here = "bridge" if bridge.status().active else "Python"
    routes = (here, "Py route") if not args.no_python_route else (here, "-")
    load = os.getloadavg()
    helpers_compiled = not compiled.pure_python_asked() and not compiled.missing()
    helpers = "compiled" if helpers_compiled else "Python versions (or some not built; torch-fl doctor says)"
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; torch {torch.__version__} (1 thread), "
          f"Torch-FL {torch_fl.__version__}; reference {ref_dev}, null plugin {null_dev}; this process on the "
          f"{here} route; helpers {helpers}; load average {load[0]:.1f}\n")
    print(f"import torch {imports['import_torch_s']:.2f} s; then import torch_fl + discovery "
          f"{imports['import_torch_fl_and_discovery_s']:.3f} s ({imports['devices']} devices)\n")
    tiny = tiny_op_rows(null_dev, args.repeats, args.rounds, sync)
    if not args.no_python_route:
        for r, theirs in zip(tiny, on_python_route(None, args.rounds, args.repeats)["tiny_ops"]):
            r["python_route_us"], r["python_route_native_us"] = theirs["null_us"], theirs["native_us"]
    rows = []
    for name, (builder, iterations) in MIXES.items():
        if args.mixes and name not in args.mixes:
            continue
        print(f"measuring {name} ...", flush=True)
        rows.append(measure_mix(name, builder, iterations, args.rounds, null_dev, ref_dev, sync))
        if not args.no_python_route:
            add_python_route(rows[-1], on_python_route(name, args.rounds, args.repeats)["seconds_per_iter"])
    report(rows, tiny, routes)
    load = os.getloadavg()
    print(f"\nload average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    if rows and args.png:
        try:
            plot(rows, Path(args.png))
            print(f"plot: {args.png}")
        except ImportError as exc:          # matplotlib comes with the `bench` extra
            print(f"no plot ({exc}): pip install -e '.[bench]', then --replot the --json file")
    if args.json:
        Path(args.json).write_text(json.dumps({"imports": imports, "tiny_ops": tiny, "mixes": rows,
                                               "compiled_helpers": helpers_compiled, "route": here,
                                               "loadavg": load}, indent=1))


if __name__ == "__main__":
    main()
