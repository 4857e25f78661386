"""Random kernels (normal_, uniform_, bernoulli_): the RNG contract and statistics
(native_dropout, which takes no generator: conformance.dropout_checks).

A vendor's generator cannot match PyTorch CPU's bits, so these kernels are
checked against what the ABI promises (fl_abi.h: a `Generator?` argument
arrives as {seed, offset}; element i draws from counter offset + i, so the
result depends only on seed, offset and the logical index) and against
their distribution:

  determinism   the same {seed, offset} twice gives the same bits
  streams       offset o + k gives offset o's stream shifted by k elements;
                another seed gives another stream (uncorrelated)
  layout        a transposed / stepped / offset target holds exactly what a
                contiguous one does, and storage outside the view is untouched
  support       uniform_ within [from, to], bernoulli_ in {0, 1}, normal_ finite
  moments       mean, variance and histogram within 6 standard errors

Every draw uses fixed seeds, so a run is deterministic: a kernel passes or
fails the same way each time, and 6 standard errors keep a correct kernel
far from the bounds (a false failure has probability ~1e-9 per statistic).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from fl_runtime.abi.convention import TAG_GENERATOR
from fl_runtime.ops.schema import compile_plan

from . import dropout_checks
from .harness import CallFailed, Device, KernelEntry, call_kernel, storage_bytes
from .recipes import build

SAMPLES = 1 << 16
Z_BOUND = 6.0
_SEEDS = (12345, 2 ** 40 + 7)


@dataclass(frozen=True)
class Law:
    """One parameter setting of a random op and the distribution it must give."""
    params: tuple            # the op's schema arguments between self and the generator
    mean: float
    variance: float
    support: Callable[[torch.Tensor], torch.Tensor]   # elementwise: inside the support?
    cdf: Callable[[float], float] | None              # continuous laws: for the histogram test

    def describe(self) -> str:
        return f"params {self.params}"


def _normal_cdf(mean: float, std: float) -> Callable[[float], float]:
    return lambda x: 0.5 * (1 + math.erf((x - mean) / (std * math.sqrt(2))))


def _uniform(low: float, high: float) -> Law:
    return Law((low, high), (low + high) / 2, (high - low) ** 2 / 12,
               lambda t: (t >= low) & (t <= high), lambda x: min(1.0, max(0.0, (x - low) / (high - low))))


def _normal(mean: float, std: float) -> Law:
    return Law((mean, std), mean, std ** 2, torch.isfinite, _normal_cdf(mean, std))


def _bernoulli(p: float) -> Law:   # two values: the mean says it all
    return Law((p,), p, p * (1 - p), lambda t: (t == 0) | (t == 1), None)


LAWS: dict[str, list[Law]] = {
    "normal_": [_normal(0.0, 1.0), _normal(3.0, 0.5)],
    "uniform_": [_uniform(0.0, 1.0), _uniform(-2.0, 5.0)],
    "bernoulli_.float": [_bernoulli(0.5), _bernoulli(0.1)],
}


def is_random(op: str) -> bool:
    return op in LAWS or op in dropout_checks.OPS


class RandomMismatch(AssertionError):
    """A random kernel broke the RNG contract or its distribution."""


class _Runner:
    """Launches one random kernel on a target tensor with a given {seed, offset}."""

    def __init__(self, dev: Device, stream, entry: KernelEntry) -> None:
        self.dev, self.stream, self.entry = dev, stream, entry
        self.plan = compile_plan(entry.op)

    def __call__(self, target: torch.Tensor, law: Law, seed: int, offset: int) -> tuple[torch.Tensor, list[str]]:
        values = [target, *law.params]
        values += [[seed, offset] if spec.tag == TAG_GENERATOR else spec.default
                   for spec in self.plan.args[len(values):]]
        run = call_kernel(self.dev, self.stream, self.entry, self.plan, values)
        return run.outputs[0], run.problems


def _target(dtype: str, shape: list[int], **layout) -> torch.Tensor:
    return build({"shape": shape, "dtype": dtype, "seed": 7, "scale": 1.0, **layout})


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The elements' bytes in logical order (NaN payloads and -0 included)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def _z(observed: float, expected: float, standard_error: float) -> float:
    if standard_error == 0:
        return 0.0 if observed == expected else math.inf
    return abs(observed - expected) / standard_error


def _moments(x: torch.Tensor, law: Law) -> list[tuple[str, float]]:
    """(statistic, z-score) for the mean, the variance and a 16-bin histogram."""
    n = x.numel()
    v = x.double().reshape(-1)
    squares = (v - law.mean) ** 2
    # The variance estimate's standard error from the sample's own fourth moment.
    variance_se = math.sqrt(max(float((squares ** 2).mean()) - law.variance ** 2, 0.0) / n)
    stats = [("mean", _z(float(v.mean()), law.mean, math.sqrt(law.variance / n))),
             ("variance", _z(float(squares.mean()), law.variance, variance_se))]
    if law.cdf is not None:
        for edge in torch.linspace(float(v.min()), float(v.max()), 17, dtype=torch.float64)[1:-1].tolist():
            p = law.cdf(edge)
            stats.append((f"P(x <= {edge:.4g})", _z(float((v <= edge).double().mean()), p,
                                                     math.sqrt(max(p * (1 - p), 1e-12) / n))))
    return stats


def _check_law(run: _Runner, dtype: str, law: Law) -> tuple[list[str], float]:
    """Problems with one parameter setting, and its worst z-score."""
    problems: list[str] = []
    first, damage = run(_target(dtype, [SAMPLES]), law, _SEEDS[0], 0)
    again, _ = run(_target(dtype, [SAMPLES]), law, _SEEDS[0], 0)
    problems += damage
    if storage_bytes(first) != storage_bytes(again):
        problems.append(f"{law.describe()}: the same seed and offset gave different results")
    shifted, _ = run(_target(dtype, [SAMPLES - 5]), law, _SEEDS[0], 5)
    if not torch.equal(_bits(shifted), _bits(first[5:])):
        problems.append(f"{law.describe()}: offset 5 is not offset 0's stream shifted by 5 elements "
                        "(fl_abi.h: element i draws counter offset + i)")
    other, _ = run(_target(dtype, [SAMPLES]), law, _SEEDS[1], 0)
    if torch.equal(other, first):
        problems.append(f"{law.describe()}: seeds {_SEEDS[0]} and {_SEEDS[1]} gave the same stream")
    elif law.variance > 0:
        corr = float(torch.corrcoef(torch.stack([first.double(), other.double()]))[0, 1])
        if abs(corr) * math.sqrt(SAMPLES) > Z_BOUND:
            problems.append(f"{law.describe()}: streams of two seeds correlate ({corr:.4f})")
    outside = int((~law.support(first.double())).sum())
    if outside:
        problems.append(f"{law.describe()}: {outside} value(s) outside the support, e.g. "
                        f"{first[~law.support(first.double())][0].item()!r}")
    stats = _moments(first, law)
    worst = max(z for _, z in stats)
    problems += [f"{law.describe()}: {name} is {z:.1f} standard errors off (bound {Z_BOUND:g})"
                 for name, z in stats if z > Z_BOUND]
    return problems, worst


_LAYOUTS = [   # (what, shape, layout): each must equal the contiguous result element for element
    ("transposed", [64, 48], {"perm": [1, 0]}),
    ("stepped, storage offset 3", [40, 30], {"step": [2, 1], "offset": 3}),
    ("0-d", [], {"offset": 1}),
    ("empty", [0, 5], {}),
]


def _check_layouts(run: _Runner, dtype: str, law: Law) -> list[str]:
    problems = []
    for what, shape, layout in _LAYOUTS:
        target = _target(dtype, shape, **layout)
        got, damage = run(target, law, _SEEDS[0], 11)
        want, _ = run(_target(dtype, shape), law, _SEEDS[0], 11)
        problems += [f"{what} target: {d}" for d in damage]
        if not torch.equal(_bits(got), _bits(want)):
            problems.append(f"{what} target (strides {list(target.stride())}, storage offset "
                            f"{target.storage_offset()}): elements differ from a contiguous target's")
        holes_before, holes_after = _holes(target), _holes(got)
        if not torch.equal(holes_before, holes_after):
            problems.append(f"{what} target: storage outside the view changed")
    return problems


def _holes(t: torch.Tensor) -> torch.Tensor:
    """The storage elements a view does not cover."""
    flat = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage())
    covered = torch.zeros(flat.numel(), dtype=torch.bool)
    covered.as_strided(t.shape, t.stride(), t.storage_offset()).fill_(True)
    return flat[~covered].view(torch.uint8) if flat.numel() else flat.view(torch.uint8)


def check(dev: Device, stream, entry: KernelEntry, dtype: str) -> tuple[list[str], float, int]:
    """(problems, worst z-score, calls made) for one random kernel on one dtype."""
    if entry.op in dropout_checks.OPS:   # no generator argument: checked by what dropout means
        return dropout_checks.check(dev, stream, entry, dtype)
    run = _Runner(dev, stream, entry)
    problems, worst = [], 0.0
    for law in LAWS[entry.op]:
        try:
            found, z = _check_law(run, dtype, law)
            found += _check_layouts(run, dtype, law) if law is LAWS[entry.op][0] else []
        except CallFailed as exc:
            found, z = [f"{law.describe()}: {exc}"], math.inf
        problems += found
        worst = max(worst, z)
    return problems, worst, len(LAWS[entry.op]) * (4 + 2 * len(_LAYOUTS))


def script(library: str, entry: KernelEntry, dtype: str) -> str:
    """A standalone reproducer: reruns these checks and prints each problem."""
    return (f"# Torch-FL conformance reproducer: random kernel {entry.op} ({entry.variant_name}), dtype {dtype}\n"
            "from conformance.random_checks import replay\n\n"
            f"replay({library!r}, {entry.op!r}, {entry.variant_name!r}, {dtype!r})\n")


def replay(library: str, op: str, variant: str, dtype: str, device: int = 0) -> None:
    """Run the checks of one random kernel and print what is wrong; exits 1 when something is."""
    import sys

    from .harness import kernel_entries
    from .target import load

    plugin = load(library)
    entry = next((e for e in kernel_entries(plugin) if e.op == op and e.variant_name == variant), None)
    if entry is None:
        sys.exit(f"{library} has no {variant} kernel for {op}")
    dev = Device(plugin, device)
    problems, worst, _ = check(dev, dev.new_stream(), entry, dtype)
    print("\n".join(problems) or f"PASS (worst statistic {worst:.2f} standard errors)")
    if problems:
        sys.exit(1)
