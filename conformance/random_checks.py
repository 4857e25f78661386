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
  seed bits     flipping any one of the seed's 63 low bits gives another, uncorrelated stream
                (bit 63 never reaches a plugin: the runtime passes seeds as non-negative int64)
  offsets       windows far apart (2**32, 2**62 counters) and adjacent ones are distinct
                and uncorrelated (a counter cut to 32 bits repeats)
  resolution    uniform_ on [0, 1) in float32 / float64 carries PyTorch's 24 / 53 random
                bits: distinct values as many as the birthday bound allows, every one of
                those bits (the low mantissa bits included) set half the time, a chi-square
                on the top 8 bits, a runs test on the lowest bit and no lag-1 correlation

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


def replayable_values(op: str, dtype: str) -> list | None:
    """Schema values of one call of random kernel `op` whose result is fixed (None for
    other ops): a target, the first law's parameters and a fixed {seed, offset} (fl_abi.h:
    same arguments, same bits); native_dropout with p = 0 (conformance.dropout_checks)."""
    if op in dropout_checks.OPS:
        return dropout_checks.replayable_values(dtype)
    if op not in LAWS:
        return None
    plan = compile_plan(op)
    values = [_target(dtype, [4099]), *LAWS[op][0].params]
    return values + [[_SEEDS[0], 0] if spec.tag == TAG_GENERATOR else spec.default for spec in plan.args[len(values):]]


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


SEED_BASE = 0x0123456789ABCDEF        # both bit values occur; bit 63 is 0 as every seed the runtime sends
SEED_BITS = 63
SEED_BIT_SAMPLES = 2048
FAR_OFFSETS = (1 << 32, (1 << 32) + 3, 1 << 62)
RESOLUTION_BITS = {"float32": 24, "float64": 53}   # PyTorch CPU's uniform_ (and the ABI's reference plugin)
QUALITY_CALLS = 1 + 1 + SEED_BITS + 1 + len(FAR_OFFSETS)  # first, seed base, flipped bits, adjacent, far windows


def _uncorrelated(a: torch.Tensor, b: torch.Tensor) -> float:
    """|correlation| * sqrt(n): about a standard normal for independent streams."""
    corr = float(torch.corrcoef(torch.stack([a.double().reshape(-1), b.double().reshape(-1)]))[0, 1])
    return abs(corr) * math.sqrt(a.numel()) if math.isfinite(corr) else math.inf


def _check_seed_bits(run: _Runner, dtype: str, law: Law) -> tuple[list[str], float]:
    """Every seed bit matters: seed ^ (1 << k) gives a stream that differs and does not correlate."""
    base, _ = run(_target(dtype, [SEED_BIT_SAMPLES]), law, SEED_BASE, 0)
    ignored, correlated, worst = [], [], 0.0
    for bit in range(SEED_BITS):
        other, _ = run(_target(dtype, [SEED_BIT_SAMPLES]), law, SEED_BASE ^ (1 << bit), 0)
        if torch.equal(_bits(other), _bits(base)):
            ignored.append(bit)
            continue
        z = _uncorrelated(base, other)
        worst = max(worst, z)
        if z > Z_BOUND:
            correlated.append(f"{bit} ({z:.1f} standard errors)")
    problems = []
    if ignored:
        problems.append(f"{law.describe()}: flipping seed bit(s) {_ranges(ignored)} of {SEED_BASE:#x} gives the same "
                        "stream: the generator ignores them (fl_abi.h: the whole seed is the generator's key)")
    if correlated:
        problems.append(f"{law.describe()}: flipping seed bit(s) {', '.join(correlated)} gives a correlated stream")
    return problems, worst


def _ranges(bits: list[int]) -> str:
    return f"{bits[0]}..{bits[-1]}" if len(bits) > 2 and bits == list(range(bits[0], bits[-1] + 1)) else \
        ", ".join(map(str, bits))


def _check_offsets(run: _Runner, dtype: str, law: Law, first: torch.Tensor) -> tuple[list[str], float]:
    """Windows of the stream at offset 0, the adjacent window and far offsets: pairwise distinct
    and uncorrelated (a counter kept in 32 bits makes offset 2**32 repeat offset 0)."""
    n = first.numel()
    windows = {0: first}
    for offset in (n, *FAR_OFFSETS):
        windows[offset], _ = run(_target(dtype, [n]), law, _SEEDS[0], offset)
    problems, worst, names = [], 0.0, list(windows)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if torch.equal(_bits(windows[a]), _bits(windows[b])):
                problems.append(f"{law.describe()}: offsets {a} and {b} give the same {n} values "
                                "(fl_abi.h: element i draws the 64-bit counter offset + i)")
            elif law.variance > 0:
                z = _uncorrelated(windows[a], windows[b])
                worst = max(worst, z)
                if z > Z_BOUND:
                    problems.append(f"{law.describe()}: the windows at offsets {a} and {b} correlate "
                                    f"({z:.1f} standard errors)")
    return problems, worst


def _check_resolution(x: torch.Tensor, dtype: str, law: Law) -> tuple[list[str], float]:
    """uniform_ on [0, 1): the integer k = floor(x * 2**B) must look like B fair random bits."""
    bits = RESOLUTION_BITS[dtype]
    n = x.numel()
    k = torch.floor(x.double().reshape(-1) * 2.0 ** bits).to(torch.int64)
    stats: list[tuple[str, float]] = []
    # Distinct values: with 2**B equally likely values, n draws collide n**2 / 2**(B+1) times on average.
    collisions = n - int(torch.unique(k).numel())
    expected = n * n / 2.0 ** (bits + 1)
    stats.append((f"collisions ({collisions} among {n} draws; {expected:.0f} expected with {bits} random bits)",
                  max(0.0, collisions - expected) / math.sqrt(expected + 1.0)))
    ones = [(int(((k >> b) & 1).sum()), b) for b in range(bits)]
    stats += [(f"bit {b} of the {bits}-bit fraction (set {count} of {n} times)",
               abs(count - n / 2) / (math.sqrt(n) / 2)) for count, b in ones]
    top = torch.bincount((k >> (bits - 8)).clamp(0, 255), minlength=256).double()
    chi2 = float(((top - n / 256) ** 2 / (n / 256)).sum())
    stats.append((f"chi-square of the top 8 bits ({chi2:.0f}, 255 degrees of freedom)", _chi2_z(chi2, 255)))
    low = (k & 1).to(torch.int8)
    n1 = int(low.sum())
    n0 = n - n1
    runs = 1 + int((low[1:] != low[:-1]).sum())
    mu = 2.0 * n1 * n0 / n + 1
    var = (mu - 1) * (mu - 2) / (n - 1)
    stats.append((f"runs of the lowest bit ({runs}; {mu:.0f} expected)", _z(runs, mu, math.sqrt(max(var, 0.0)))))
    v = x.double().reshape(-1)
    stats.append(("lag-1 correlation of consecutive elements", _uncorrelated(v[1:], v[:-1])))
    worst = max(z for _, z in stats)
    return [f"uniform_ {law.describe()} on {dtype}: {name} is {z:.1f} standard errors off (bound {Z_BOUND:g}): "
            f"fewer than the {bits} random bits PyTorch CPU gives {dtype}, or biased bits"
            for name, z in stats if z > Z_BOUND], worst


def _chi2_z(chi2: float, df: int) -> float:
    """Wilson-Hilferty: the chi-square statistic as a standard normal deviate (one-sided, too large)."""
    scale = 2.0 / (9 * df)
    return max(0.0, ((chi2 / df) ** (1 / 3) - (1 - scale)) / math.sqrt(scale))


def _check_quality(run: _Runner, dtype: str, law: Law) -> tuple[list[str], float]:
    """Seed bits, offsets and (uniform_ on [0, 1) in float32/float64) the bits' resolution."""
    first, _ = run(_target(dtype, [SAMPLES]), law, _SEEDS[0], 0)
    problems, worst = _check_seed_bits(run, dtype, law)
    found, z = _check_offsets(run, dtype, law, first)
    problems, worst = problems + found, max(worst, z)
    if run.entry.op == "uniform_" and law.params == (0.0, 1.0) and dtype in RESOLUTION_BITS:
        found, z = _check_resolution(first, dtype, law)
        problems, worst = problems + found, max(worst, z)
    return problems, worst


def check(dev: Device, stream, entry: KernelEntry, dtype: str) -> tuple[list[str], float, int]:
    """(problems, worst z-score, calls made) for one random kernel on one dtype."""
    if entry.op in dropout_checks.OPS:   # no generator argument: checked by what dropout means
        return dropout_checks.check(dev, stream, entry, dtype)
    run = _Runner(dev, stream, entry)
    problems, worst = [], 0.0
    for law in LAWS[entry.op]:
        try:
            found, z = _check_law(run, dtype, law)
            if law is LAWS[entry.op][0]:
                found += _check_layouts(run, dtype, law)
                quality, quality_z = _check_quality(run, dtype, law)
                found, z = found + quality, max(z, quality_z)
        except CallFailed as exc:
            found, z = [f"{law.describe()}: {exc}"], math.inf
        problems += found
        worst = max(worst, z)
    return problems, worst, len(LAWS[entry.op]) * (4 + 2 * len(_LAYOUTS)) + QUALITY_CALLS


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
