"""native_dropout: a random mask, checked against what dropout means.

native_dropout(input, p, train) -> (output, mask) takes no generator (PyTorch
draws from the device's default one), so unlike normal_ / uniform_ /
bernoulli_ its bits cannot be replayed from a {seed, offset}.  What is checked,
with fixed inputs so that a run is deterministic in all but the kernel's draws:

  mask      bool bytes (0 or 1); the kept fraction within 6 standard errors of 1 - p
  output    PyTorch CPU's arithmetic on the kernel's own mask, input * mask * 1/(1-p),
            to PyTorch's assert_close tolerance (a dropped NaN stays NaN, as on CPU)
  fresh     a second call draws another mask
  edges     p = 0 keeps everything unscaled, p = 1 drops everything, train=False is
            the identity with an all-true mask
  layout    a transposed or offset input: the same relation holds element for element
"""
from __future__ import annotations

import math

import torch

from fl_runtime.ops.schema import compile_plan

from .compare import Reference, judge
from .harness import CallFailed, Device, KernelEntry, call_kernel, storage_bytes
from .recipes import build
from .tolerances import tolerance_for

OPS = frozenset({"native_dropout"})
SAMPLES = 1 << 16
Z_BOUND = 6.0
_PROBABILITIES = (0.5, 0.1)
_SPECIALS = [[i * 4099, i] for i in range(16)]   # NaN, +-inf, +-0, subnormals ... among the inputs
_LAYOUTS = [("transposed", [64, 48], {"perm": [1, 0]}), ("stepped, storage offset 3", [40, 30],
                                                           {"step": [2, 1], "offset": 3})]


def _input(dtype: str, shape: list[int], **layout) -> torch.Tensor:
    return build({"shape": shape, "dtype": dtype, "seed": 7, "scale": 1.0, "specials": _SPECIALS, **layout})


def replayable_values(dtype: str) -> list:
    """A call whose result does not depend on the kernel's draws: p = 0 in training keeps
    every element unscaled (conformance.concurrency compares such calls bit for bit)."""
    return [_input(dtype, [4099]), 0.0, True]


class _Runner:
    def __init__(self, dev: Device, stream, entry: KernelEntry) -> None:
        self.dev, self.stream, self.entry = dev, stream, entry
        self.plan = compile_plan(entry.op)
        self.problems: list[str] = []

    def __call__(self, x: torch.Tensor, p: float, train: bool | None = True) -> tuple[torch.Tensor, torch.Tensor]:
        run = call_kernel(self.dev, self.stream, self.entry, self.plan, [x, p, train])
        self.problems += run.problems
        return run.outputs[0], run.outputs[1]


def _mask_problems(what: str, mask: torch.Tensor) -> list[str]:
    if mask.dtype != torch.bool:
        return [f"{what}: the mask is {mask.dtype}, not bool"]
    raw = torch.frombuffer(bytearray(storage_bytes(mask)), dtype=torch.uint8) if mask.numel() else None
    if raw is not None and bool((raw > 1).any()):
        return [f"{what}: mask bytes other than 0 and 1 (e.g. {int(raw[raw > 1][0])})"]
    return []


def _output_problems(what: str, x: torch.Tensor, p: float, y: torch.Tensor, mask: torch.Tensor) -> list[str]:
    """y against PyTorch CPU's input.mul(mask).mul_(scale) for the kernel's own mask."""
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    want = Reference(x.mul(mask).mul_(scale), x.double().mul(mask).mul_(scale))
    rule = tolerance_for("native_dropout", x.dtype)
    verdict = judge(y, rule, want)
    if verdict.ok:
        return []
    return [(f"{what}: output {verdict.bad} element(s) out of tolerance ({rule.describe()}) "
             f"for input * mask * {scale:g}; {verdict.detail}")]


def _kept_fraction(what: str, mask: torch.Tensor, p: float) -> tuple[list[str], float]:
    n = mask.numel()
    kept = float(mask.double().mean())
    z = abs(kept - (1 - p)) / math.sqrt(p * (1 - p) / n)
    if z <= Z_BOUND:
        return [], z
    return [f"{what}: kept fraction {kept:.4f}, {z:.1f} standard errors from {1 - p:g} (bound {Z_BOUND:g})"], z


def _check_probability(run: _Runner, dtype: str, p: float) -> tuple[list[str], float]:
    what = f"p={p:g}"
    x = _input(dtype, [SAMPLES])
    y, mask = run(x, p)
    problems = _mask_problems(what, mask)
    if problems:
        return problems, math.inf
    found, z = _kept_fraction(what, mask, p)
    problems += found
    problems += _output_problems(what, x, p, y, mask)
    _, again = run(x, p)
    if torch.equal(again, mask):
        problems.append(f"{what}: two calls drew the same mask (the generator does not advance)")
    return problems, z


def _check_edges(run: _Runner, dtype: str) -> list[str]:
    problems = []
    x = _input(dtype, [1000])
    for what, p, train, all_kept in (("p=0", 0.0, True, True), ("p=1", 1.0, True, False),
                                     ("train=False", 0.5, False, True)):
        y, mask = run(x, p, train)
        problems += _mask_problems(what, mask)
        if mask.dtype == torch.bool and not bool((mask == all_kept).all()):
            problems.append(f"{what}: the mask should be all {all_kept}")
        effective_p = p if train else 0.0   # evaluation: the identity, unscaled
        problems += _output_problems(what, x, effective_p, y, torch.full_like(mask, all_kept, dtype=torch.bool))
    return problems


def _check_layouts(run: _Runner, dtype: str) -> list[str]:
    problems = []
    for what, shape, layout in _LAYOUTS:
        x = _input(dtype, shape, **layout)
        y, mask = run(x, 0.5)
        problems += _mask_problems(f"{what} input", mask) or _output_problems(f"{what} input", x, 0.5, y, mask)
    return problems


def check(dev: Device, stream, entry: KernelEntry, dtype: str) -> tuple[list[str], float, int]:
    """(problems, worst z-score of the kept fraction, calls made) for native_dropout on one dtype."""
    run = _Runner(dev, stream, entry)
    problems, worst = [], 0.0
    try:
        for p in _PROBABILITIES:
            found, z = _check_probability(run, dtype, p)
            problems += found
            worst = max(worst, z)
        problems += _check_edges(run, dtype) + _check_layouts(run, dtype)
    except CallFailed as exc:
        problems.append(str(exc))
        worst = math.inf
    problems += run.problems
    return problems, worst, 2 * len(_PROBABILITIES) + 3 + len(_LAYOUTS)

