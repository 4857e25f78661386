"""Reproducers: a short script per failing kernel case, and what it runs.

A script holds the case as a literal (recipes: seed, scale, shape, layout and
special values; conformance.recipes.build turns them back into the exact
tensors with torch.Generator), the op, variant, dtype and tolerance, and calls
replay(), which launches the one kernel through the harness and prints inputs,
expected and got values.  It needs only the installed torch-fl package and the
plugin library.
"""
from __future__ import annotations

import math
import shlex
import sys

from .profiles import DEFAULT_SEED

REPRODUCER_HEADING = "Reproducer (save as repro.py, run with python):"


def literal(value, indent: int = 0) -> str:
    """Python source for a case value (floats stay exact; inf and nan spelled out)."""
    pad = " " * (indent + 4)
    if isinstance(value, float) and not math.isfinite(value):
        return f"float('{value}')"
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f"{pad}{k!r}: {literal(v, indent + 4)}," for k, v in value.items()]
        return "{\n" + "\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(value, list):
        flat = "[" + ", ".join(literal(v, indent) for v in value) + "]"
        if len(flat) <= 80 and "\n" not in flat:
            return flat
        return "[\n" + "\n".join(f"{pad}{literal(v, indent + 4)}," for v in value) + "\n" + " " * indent + "]"
    return repr(value)


def kernel_script(library: str, op: str, variant: str, dtype: str, case: dict, tolerance: str,
                  seed: int, what: str) -> str:
    return (f"# Torch-FL conformance reproducer: kernel {op} ({variant}), dtype {dtype}, seed {seed}\n"
            f"# {what}\n"
            f"# tolerance: {tolerance or 'see conformance/tolerances.py'}\n"
            "from conformance.repro import replay\n\n"
            f"CASE = {literal(case)}\n\n"
            f"replay({library!r}, CASE, variant={variant!r})\n")


def rerun_command(library: str, profile: str, seed: int, test_name: str) -> str:
    """The command that runs one non-kernel test again with the same examples."""
    seed_flag = "" if seed == DEFAULT_SEED else f" --seed {seed}"
    return f"fl-sdk test {shlex.quote(library)} --profile {profile}{seed_flag} -k {shlex.quote(test_name)}"


def replay(library: str, case: dict, variant: str = "precise", device: int = 0) -> bool:
    """Run one case on the plugin and print what happened; exits 1 when it fails."""
    import torch

    from .harness import Declined, Device, kernel_entries
    from .numerics import check_case, schema_values
    from .target import load
    from fl_runtime.ops.schema import compile_plan

    plugin = load(library)
    entry = next((e for e in kernel_entries(plugin) if e.op == case["op"] and e.variant_name == variant), None)
    if entry is None:
        sys.exit(f"{library} has no {variant} kernel for {case['op']}")
    torch.set_printoptions(precision=10, threshold=64)
    for spec, value in zip(compile_plan(entry.op).args, schema_values(compile_plan(entry.op), case)):
        print(f"{spec.name} = {value!r}")
    dev = Device(plugin, device)
    stream = dev.new_stream()
    try:
        result = check_case(dev, stream, entry, case, fast=variant == "fast")
    except Declined as exc:   # the ABI's way to refuse arguments: not a failure
        print(f"NOT SUPPORTED: the plugin declined the call with FL_ERROR_NOT_SUPPORTED: {exc.message}")
        return False
    print("PASS" if result.ok else f"FAIL: {result.message}")
    print(f"worst error {result.max_error:.6g} ({result.ratio:.3g} x the tolerance: {result.tolerance})")
    if not result.ok:
        sys.exit(1)
    return True
