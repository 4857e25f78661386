"""PyTorch's OpInfo database (op_db) on fl:0 against the CPU, float32.

    python benchmarks/opinfo_report.py [--every N] [--samples K] [--json out.json]

For each OpInfo that supports float32 on the CPU, runs its sample inputs on the
CPU and on fl:0 and compares the results (torch.testing.assert_close, rtol 1e-4,
atol 1e-5, NaNs equal).  Prints the pass rate with the fallbacks on (the
default config), then sweeps again with both fallbacks off (the chain switched
as `enable_generic_kernel: false` + `enable_cpu_fallback: false` would) and
prints that pass rate: the native rate.  The first sweep also counts samples
whose every op ran on a vendor kernel, which should agree.
Failures are grouped by reason.  Samples whose CPU result is itself random
(two seeded CPU runs differ) or raises on the CPU are not counted.
tests/runtime/test_opinfo.py runs a deterministic subset of this.
"""
from __future__ import annotations

import argparse
import json
import re
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

import torch_fl

RTOL, ATOL = 1e-4, 1e-5
DEVICE = "fl:0"


@dataclass
class SweepResult:
    passed: int = 0
    native: int = 0
    failed: int = 0
    skipped: int = 0
    ops: int = 0
    failures: Counter = field(default_factory=Counter)     # reason -> samples
    examples: dict = field(default_factory=dict)            # reason -> the first few ops failing so

    @property
    def counted(self) -> int:
        return self.passed + self.failed

    def rate(self) -> float:
        return self.passed / self.counted if self.counted else 0.0

    def native_rate(self) -> float:
        return self.native / self.counted if self.counted else 0.0

    def as_dict(self) -> dict:
        return {"ops": self.ops, "samples": self.counted, "passed": self.passed, "native": self.native,
                "failed": self.failed, "skipped": self.skipped, "pass_rate": self.rate(),
                "native_rate": self.native_rate(), "failures": dict(self.failures.most_common()),
                "examples": self.examples}


def float32_opinfos() -> list:
    from torch.testing._internal.common_methods_invocations import op_db
    return sorted((o for o in op_db if o.supports_dtype(torch.float32, "cpu")),
                  key=lambda o: (o.name, o.variant_test_name))


def subset(opinfos: list, every: int, offset: int = 0) -> list:
    """Every `every`-th OpInfo (sorted by name): deterministic and spread over the alphabet."""
    return opinfos[offset::every]


def _to(value, device: str):
    """The tensor on `device` with the same storage layout (offset, strides, the bytes
    around the view): samples such as as_strided.partial_views read outside the view."""
    if not isinstance(value, torch.Tensor) or value.device.type == device.split(":")[0]:
        return value
    if value.is_contiguous() and value.storage_offset() == 0 or value.layout != torch.strided:
        return value.to(device)
    storage = torch.empty(0, dtype=value.dtype).set_(value.untyped_storage())
    return storage.to(device).as_strided(value.shape, value.stride(), value.storage_offset())


def _call(opinfo, sample, device: str):
    args = tree_map(lambda v: _to(v, device), (sample.input, sample.args, sample.kwargs))
    kwargs = args[2]
    if "device" in kwargs:          # factory-like samples name the device they were made for
        kwargs = {**kwargs, "device": device}
    return opinfo(args[0], *args[1], **kwargs)


def _has_tensor_input(sample) -> bool:
    """Factory samples (no tensor input) make CPU tensors whatever runs; not an fl test."""
    leaves = tree_flatten((sample.input, sample.args, sample.kwargs))[0]
    return any(isinstance(v, torch.Tensor) for v in leaves)


class _RandomDetector(TorchDispatchMode):
    """Notes whether any op called is tagged nondeterministic_seeded (draws random numbers)."""

    def __init__(self) -> None:
        super().__init__()
        self.random = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.random = self.random or torch.Tag.nondeterministic_seeded in func.tags
        return func(*args, **(kwargs or {}))


def _cpu_reference(opinfo, sample):
    """The CPU result, or None when the op is random: fl:0 draws from its own random
    stream, so only the distribution could be compared.  Random means an op PyTorch
    tags nondeterministic_seeded ran, or two runs with different seeds differ."""
    torch.manual_seed(0)
    with _RandomDetector() as detector:
        first = _call(opinfo, sample, "cpu")
    if detector.random:
        return None
    torch.manual_seed(1)
    second = _call(opinfo, sample, "cpu")
    try:
        torch.testing.assert_close(first, second, equal_nan=True, rtol=0, atol=0)
    except AssertionError:
        return None
    return first


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", text)[:110]
    return f"{type(exc).__name__}: {text}"


def _compare(expected, actual) -> None:
    exp_leaves, exp_spec = tree_flatten(expected)
    act_leaves, act_spec = tree_flatten(actual)
    if exp_spec != act_spec:
        raise AssertionError(f"result structure differs: {exp_spec} vs {act_spec}")
    for e, a in zip(exp_leaves, act_leaves):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor) or a.device.type != DEVICE.split(":")[0]:
                raise AssertionError("result is not an fl tensor")
            torch.testing.assert_close(a.cpu(), e, rtol=RTOL, atol=ATOL, equal_nan=True)
        elif isinstance(e, float):
            torch.testing.assert_close(a, e, rtol=RTOL, atol=ATOL, equal_nan=True)
        elif e != a:
            raise AssertionError(f"scalar result differs: {e!r} vs {a!r}")


def run_sample(opinfo, sample, result: SweepResult) -> None:
    if not _has_tensor_input(sample):
        result.skipped += 1
        return
    try:
        expected = _cpu_reference(opinfo, sample)
    except Exception:  # noqa: BLE001 - a sample the CPU itself rejects is not counted
        result.skipped += 1
        return
    if expected is None:
        result.skipped += 1
        return
    torch_fl.op_stats.reset()
    try:
        actual = _call(opinfo, sample, DEVICE)
        _compare(expected, actual)
    except Exception as exc:  # noqa: BLE001 - every failure is data for the report
        reason = _reason(exc)
        result.failed += 1
        result.failures[reason] += 1
        ops = result.examples.setdefault(reason, [])
        name = f"{opinfo.name}.{opinfo.variant_test_name}".rstrip(".")
        if name not in ops and len(ops) < 8:
            ops.append(name)
        return
    result.passed += 1
    result.native += not torch_fl.op_stats.fallback_ops()


def sweep(opinfos: list, samples_per_op: int) -> SweepResult:
    result = SweepResult()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for opinfo in opinfos:
            result.ops += 1
            try:
                samples = list(opinfo.sample_inputs("cpu", torch.float32, requires_grad=False))
            except Exception:  # noqa: BLE001, S112 - an OpInfo without CPU samples has nothing to compare
                continue
            for sample in samples[:samples_per_op]:
                run_sample(opinfo, sample, result)
    return result


def sweep_with_fallbacks_off(opinfos: list, samples_per_op: int) -> SweepResult:
    """The sweep with the generic kernel and the CPU fallback switched off."""
    chain = torch_fl.runtime().launcher.chain
    saved = (chain.enable_generic, chain.enable_cpu)
    chain.configure(enable_generic_kernel=False, enable_cpu_fallback=False)
    try:
        return sweep(opinfos, samples_per_op)
    finally:
        chain.configure(*saved)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=int, default=1, help="run every N-th OpInfo (1: all)")
    parser.add_argument("--samples", type=int, default=1000, help="sample inputs per OpInfo at most")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    picked = subset(float32_opinfos(), args.every)
    start = time.perf_counter()
    result = sweep(picked, args.samples)
    elapsed = time.perf_counter() - start
    off = sweep_with_fallbacks_off(picked, args.samples)
    print(f"OpInfos: {result.ops}   float32 samples counted: {result.counted}   skipped (random, "
          f"factory or failing on CPU): {result.skipped}   wall: {elapsed:.0f} s")
    print(f"pass rate, fallbacks on: {result.rate():.1%} ({result.passed}/{result.counted})")
    print(f"samples whose every op ran on a vendor kernel: {result.native_rate():.1%} ({result.native}/{result.counted})")
    print(f"native rate, fallbacks off: {off.rate():.1%} ({off.passed}/{off.counted})")
    print("failures by reason (samples, first ops):")
    for reason, count in result.failures.most_common():
        print(f"  {count:5d}  {reason}   [{', '.join(result.examples[reason])}]")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({**result.as_dict(), "wall_s": elapsed, "fallbacks_off": off.as_dict()}, fh, indent=2)


if __name__ == "__main__":
    main()
