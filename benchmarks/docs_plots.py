"""Redraws the plots of the benchmarks page (docs/benchmarks/*.png) from the JSON the benchmarks wrote.

    python benchmarks/docs_plots.py            # needs matplotlib: pip install -e ".[bench]"

- host_cost.png: host cost per op by phase, from docs/benchmarks/host_cost.json
  (`python benchmarks/host_cost.py --json docs/benchmarks/host_cost.json` draws it too);
- gpt2_step.png: the tiny GPT-2 training step of the same run: wall time per step on the
  reference vendor, and host cost per aten op on the null plugin, each against native PyTorch;
- ddp_scaling.png: docs/benchmarks/ddp_scaling.json
  (`python benchmarks/ddp_scaling.py --rounds 2 --json > docs/benchmarks/ddp_scaling.json`).

A plot whose JSON is missing is skipped with a line on stderr.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAGE = HERE.parent / "docs" / "benchmarks"
sys.path.insert(0, str(HERE))


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _bars(ax, labels: list[str], values: list[float], fmt: str, colors: list[str]) -> None:
    bars = ax.bar(labels, values, color=colors)
    for bar, value in zip(bars, values):
        ax.annotate(fmt.format(value), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8)
    ax.set_ylim(0, max(values) * 1.2)


def plot_gpt2(host_cost: dict, path: Path) -> None:
    """The GPT-2 training step: native eager, fl eager, fl graph path."""
    row = next(r for r in host_cost["mixes"] if r["mix"].startswith("GPT-2"))
    wall = row["seconds_per_iter"]
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    labels = ["native PyTorch\nCPU, 1 thread", "fl eager", "fl graph path\n(backend=\"fl\")"]
    colors = ["#555555", "#1f77b4", "#e6a817"]
    _bars(left, labels, [1000 * wall[k]["wall"] for k in ("native", "ref", "ref_graph")], "{:.1f} ms", colors)
    left.set_title("wall time per step, reference vendor", fontsize=10)
    left.set_ylabel("ms per training step")
    _bars(right, labels, [row["native_us_per_op"], row["null_us_per_op"], row["graph_null_us_per_op"]], "{:.1f} µs",
          colors)
    right.set_title("host cost per aten op, null plugin (thread CPU)", fontsize=10)
    right.set_ylabel(f"µs per aten op ({row['aten_ops_per_iter']} per step)")
    fig.suptitle("Tiny GPT-2 training step (2 layers, d=64, batch 4x64, AdamW)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_ddp(results: dict, path: Path) -> None:
    """DDP samples/s per configuration, and all_reduce time by size on fl and CPU tensors.

    The slowed configurations are labelled with ddp_scaling.py's default --slowdown (4)."""
    plt = _pyplot()
    from matplotlib.ticker import NullFormatter, ScalarFormatter
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4))
    configs = [("ddp1", "1 process\nfl:0"), ("ddp2", "2 DDP ranks\nfl:0 + fl:1"),
               ("nocomm", "2 processes\nno all-reduce"), ("equal", "fl:1 4x slower\nequal split"),
               ("mixed", "fl:1 4x slower\nThroughputSplit")]
    values = [results[key]["samples_per_s"] for key, _ in configs]
    _bars(left, [label for _, label in configs], values, "{:.0f}", ["#555555", "#1f77b4", "#aec7e8", "#d62728", "#2ca02c"])
    left.set_ylabel("samples per second (global batch 256)")
    left.set_title("DDP training of an MLP 256-1024-1024-10", fontsize=10)
    left.tick_params(axis="x", labelsize=8)
    rows = results["allreduce"]["rows"]
    sizes = [r["bytes"] for r in rows]
    right.plot(sizes, [r["fl_ms"] for r in rows], "o-", label="fl tensors (the plugin's collectives)")
    right.plot(sizes, [r["cpu_ms"] for r in rows], "s--", color="#555555", label="CPU tensors (Gloo)")
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.set_yticks([1, 2, 5, 10, 20, 50, 100])
    right.yaxis.set_major_formatter(ScalarFormatter())
    right.yaxis.set_minor_formatter(NullFormatter())
    right.set_xticks(sizes, [f"{s >> 20} MB" if s >= 1 << 20 else f"{s >> 10} KB" for s in sizes])
    right.set_ylabel("ms per all_reduce (float32, 2 ranks)")
    right.set_title("all_reduce", fontsize=10)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    import host_cost
    sources = {"host_cost.json": [("host_cost.png", lambda d, p: host_cost.plot(d["mixes"], p)),
                                  ("gpt2_step.png", plot_gpt2)],
               "ddp_scaling.json": [("ddp_scaling.png", plot_ddp)]}
    for name, plots in sources.items():
        data_path = PAGE / name
        if not data_path.exists():
            print(f"docs_plots: {data_path} is missing; its plots are skipped", file=sys.stderr)
            continue
        data = json.loads(data_path.read_text())
        for png, draw in plots:
            draw(data, PAGE / png)
            print(f"plot: {PAGE / png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
