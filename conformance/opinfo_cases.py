"""Cases for kernel-table ops without a hand recipe: PyTorch's OpInfo samples.

A vendor's kernel table may hold any ATen overload, and the suite cannot
carry a hand-written generator for each.  PyTorch's OpInfo database
(torch.testing._internal.common_methods_invocations.op_db) has sample inputs
for hundreds of Python-level ops; running a sample under a dispatch mode
shows the ATen calls it makes, with their exact arguments.  So for an
overload such as `native_layer_norm_backward` the suite finds OpInfos by
name (`nn.functional.layer_norm`), runs their samples (forward, and
backward with random output gradients for backward kernels) and keeps the
calls that reach the overload.

A case stores where its call came from (OpInfo, sample index, call index,
the seed that regenerates the sample's values) plus what hypothesis varied:
the storage layout of every tensor argument (order, steps, storage offset;
not for view ops) and, for pointwise ops only, special values planted in
floating inputs.  Rebuilding a case reruns
the sample, so a reproducer holds a few numbers, not tensors.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import json
import random
from dataclasses import dataclass

import torch
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from fl_runtime.ops.schema import compile_plan

from . import strategies as s
from .recipes import DTYPES, NAMES, plant, relayout, special_values

SAMPLES_SCANNED = 400     # samples generated per OpInfo (max_pool2d alone has 1440)
CALLS_KEPT = 48           # samples run, and calls kept: variety at a bounded cost
_SCAN_SEED = 0
# Python-level names whose OpInfo samples reach an overload that shares no name with them.
_ALIASES = {"convolution": ["nn.functional.conv2d", "nn.functional.conv1d", "nn.functional.conv3d",
                            "nn.functional.conv_transpose2d"],
            "index": ["__getitem__"], "pow": ["__rpow__"]}
_DROPPED_SUFFIXES = ("backward", "data", "forward", "with", "indices", "dense", "out", "self", "input")


class NoSource(LookupError):
    """No OpInfo sample reaches the overload: the op stays untested."""


def overload_name(func: torch._ops.OpOverload) -> str:
    """aten.add.Tensor -> 'add.Tensor'; aten.mm.default -> 'mm' (kernel-table spelling)."""
    name = func._schema.name.split("::")[-1]
    return name if func._overloadname == "default" else f"{name}.{func._overloadname}"


class _Capture(TorchDispatchMode):
    """Records (args, kwargs) of every call to one overload, as detached copies."""

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target
        self.calls: list[tuple[tuple, dict]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if overload_name(func) == self.target:
            self.calls.append(_detached((tuple(args), dict(kwargs))))
        # Calls made inside func (index_put_'s _index_put_impl_) are not seen: such ops stay untested.
        return func(*args, **kwargs)


def _detached(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_detached(v) for v in value)
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    return value


def base_names(op: str) -> list[str]:
    """'native_layer_norm_backward' -> ['native_layer_norm_backward', 'layer_norm_backward',
    'native_layer_norm', 'layer_norm', ...]: the names an OpInfo for it may have."""
    packet = op.split(".")[0].rstrip("_").lstrip("_")
    words = packet.split("_")
    names = []
    while words:
        for name in ("_".join(words), "_".join(words).removeprefix("native_")):
            if name and name not in names:
                names.append(name)
        if words[-1] not in _DROPPED_SUFFIXES:
            break
        words = words[:-1]
    return names


@functools.lru_cache(maxsize=1)
def op_db() -> tuple:
    """PyTorch's OpInfo database (slow to import, ~3 s: the fork server does it once)."""
    try:
        from torch.testing._internal.common_methods_invocations import op_db as database
    except ImportError as exc:   # torch.testing needs numpy and expecttest, which torch does not pull in
        # Not NoSource: a broken install must fail the run, not turn every kernel "untested".
        raise RuntimeError(f"the conformance suite cannot build kernel inputs: PyTorch's OpInfo database "
                           f"failed to import ({exc}); reinstall torch-fl so its dependencies (numpy, "
                           "expecttest) are present") from exc
    return tuple(database)


@functools.lru_cache(maxsize=1)
def _by_name() -> dict[str, list]:
    """Every OpInfo under its name, its last dotted part and its aten_name, in op_db order.
    Built once (the fork server does it before forking kernel workers): OpInfo's attribute
    access and its dataclass __eq__ made a scan of the database per lookup cost seconds."""
    index: dict[str, list] = {}
    for info in op_db():
        for key in dict.fromkeys((info.name, info.name.split(".")[-1], info.aten_name)):
            index.setdefault(key, []).append(info)
    return index


def index_op_db() -> None:
    """Build the by-name index now (the fork server, before it forks kernel workers)."""
    _by_name()


@functools.lru_cache(maxsize=None)
def candidates(op: str) -> list:
    """OpInfos whose samples may call `op`, best first (the first name that matches wins,
    then op_db order)."""
    names = base_names(op)
    wanted = [alias for name in names for alias in _ALIASES.get(name, [])] + names
    found, seen = [], set()
    for name in wanted:
        for info in _by_name().get(name, []):
            if id(info) not in seen:
                seen.add(id(info))
                found.append(info)
    return found


@dataclass(frozen=True)
class _Mode:
    grad: bool      # run with requires_grad and call backward (backward kernels are reached so)
    inplace: bool   # call the OpInfo's in-place variant
    out: bool = False   # call it with out= (for out= overloads such as where.self_out)


def _modes(op: str, dtype: torch.dtype, info) -> list[_Mode]:
    inplace = op.split(".")[0].endswith("_") and info.inplace_variant is not None
    writes = any(a is not None for a in compile_plan(op).returns_alias)
    if writes and not op.split(".")[0].endswith("_"):
        return [_Mode(False, False, out=True)] if info.supports_out else []
    differentiable = dtype.is_floating_point and info.supports_autograd and not inplace
    if "backward" in op:
        return [_Mode(True, False)] if differentiable else []
    return [_Mode(False, inplace)] + ([_Mode(True, False)] if differentiable and not inplace else [])


def _call(info, sample, mode: _Mode) -> None:
    """Run one sample (and its backward with random output gradients)."""
    if mode.inplace:
        info.inplace_variant(sample.input.clone(), *sample.args, **sample.kwargs)
        return
    if mode.out:
        result = info(sample.input, *sample.args, **sample.kwargs)
        if isinstance(result, torch.Tensor):
            info(sample.input, *sample.args, **sample.kwargs, out=torch.empty_like(result))
        return
    out = info(sample.input, *sample.args, **sample.kwargs)
    if not mode.grad:
        return
    outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])
            if isinstance(o, torch.Tensor) and o.requires_grad]
    if outs:
        torch.autograd.backward(outs, [torch.randn_like(o) for o in outs])


def _samples(info, dtype: torch.dtype, mode: _Mode):
    """The OpInfo's samples (a lazy generator: iterate it inside `_seeded(seed)`)."""
    # sample_inputs_func is what info.sample_inputs wraps; the wrapper only adds, outside a
    # unittest TestCase, two inspect.stack() calls (reading the source line of every frame
    # of hypothesis' deep stack) and the per-sample reseeding _reseeded does.
    samples = iter(info.sample_inputs_func(info, "cpu", dtype, mode.grad))
    return itertools.islice(_reseeded(samples), SAMPLES_SCANNED)


def _reseeded(samples):
    """The samples, each drawn from generators seeded as OpInfo's own iterator seeds them
    before every sample (common_utils.set_rng_seed(SEED): outside a unittest TestCase it
    uses SEED, so the values are the same as info.sample_inputs gives), but without
    torch.manual_seed: on a host without CUDA, XPU or MTIA it captures the Python stack
    three times for their lazy seeding (traceback.format_stack), which was about half the
    kernel workers' CPU time.  Samples are made on the CPU, whose generator is the one
    seeded here."""
    from torch.testing._internal import common_utils

    while True:
        torch.default_generator.manual_seed(common_utils.SEED)
        random.seed(common_utils.SEED)
        if common_utils.TEST_NUMPY:
            import numpy
            numpy.random.seed(common_utils.SEED)
        try:
            sample = next(samples)
        except StopIteration:
            return
        yield sample


@contextlib.contextmanager
def _seeded(seed: int):
    """Seed torch's CPU generator and Python's (sample_inputs draws from both) and put
    them back after, so hypothesis' own random state is left alone.  The CPU generator
    alone: torch.manual_seed would also queue lazy seeding for absent accelerators, each
    with a captured stack (see _reseeded)."""
    state = random.getstate()
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        random.seed(seed)
        try:
            yield
        finally:
            random.setstate(state)


def _calls_of(op: str, info, sample, mode: _Mode) -> list[tuple[tuple, dict]]:
    capture = _Capture(op)
    try:
        with capture:
            _call(info, sample, mode)
    except Exception:   # a sample PyTorch CPU itself refuses (dtype, shape): no reference
        return []
    return capture.calls


def _spread(items: list, count: int) -> list:
    """At most `count` items, evenly spaced over the list (first and last included)."""
    if len(items) <= count:
        return items
    return [items[round(i * (len(items) - 1) / (count - 1))] for i in range(count)]


@functools.lru_cache(maxsize=None)
def sources(op: str, dtype: torch.dtype) -> tuple[dict, ...]:
    """Where calls to `op` on `dtype` come from: OpInfo, mode, sample index, call index.
    Generating a sample is cheap, running one (with backward) is not: samples are
    generated up to SAMPLES_SCANNED but only an even spread of CALLS_KEPT is run."""
    if compile_plan(op).has_generator:
        return ()   # random kernels are checked statistically (conformance.random_checks)
    found = []
    for info in candidates(op):
        if dtype not in info.supported_dtypes("cpu"):
            continue
        for mode in _modes(op, dtype, info):
            with _seeded(_SCAN_SEED):
                samples = list(enumerate(_samples(info, dtype, mode)))
                for index, sample in _spread(samples, CALLS_KEPT):
                    found += [{"opinfo": info.name, "variant": info.variant_test_name, "grad": mode.grad,
                               "inplace": mode.inplace, "out": mode.out, "sample": index, "call": k}
                              for k in range(len(_calls_of(op, info, sample, mode)))]
        if found:
            break   # the best-named OpInfo that reaches the op is enough
    return tuple(_spread(found, CALLS_KEPT))


def _info(name: str, variant: str):
    return next(i for i in _by_name().get(name, ()) if i.name == name and i.variant_test_name == variant)


def captured_call(op: str, dtype: torch.dtype, source: dict) -> tuple[tuple, dict]:
    """Re-run the sample with the source's seed; the call's (args, kwargs).  NoSource when
    the values drawn from that seed change the sample's structure."""
    # A case is rebuilt twice (drawn, then checked): keep the last few calls.
    key = (op, dtype, json.dumps(source, sort_keys=True))
    if key not in _RECENT:
        if len(_RECENT) >= 8:
            _RECENT.pop(next(iter(_RECENT)))
        _RECENT[key] = _rerun(op, dtype, source)
    return _detached(_RECENT[key])


_RECENT: dict[tuple, tuple[tuple, dict]] = {}


def _rerun(op: str, dtype: torch.dtype, source: dict) -> tuple[tuple, dict]:
    info = _info(source["opinfo"], source["variant"])
    mode = _Mode(source["grad"], source["inplace"], source.get("out", False))
    with _seeded(source["seed"]):
        sample = next(itertools.islice(_samples(info, dtype, mode), source["sample"], None), None)
        calls = [] if sample is None else _calls_of(op, info, sample, mode)
    if source["call"] >= len(calls):
        raise NoSource(f"{source['opinfo']} sample {source['sample']} no longer calls {op} with seed "
                       f"{source['seed']}")
    return calls[source["call"]]


def _vary(value, tweak: dict, seed: int):
    """One schema value with its layout (and special values, for floating inputs) changed."""
    if isinstance(value, (list, tuple)):
        return [_vary(v, tweak, seed + i) for i, v in enumerate(value)]
    if not isinstance(value, torch.Tensor):
        return value
    if tweak.get("specials") and value.is_floating_point():
        value = plant(value, tweak["specials"])
    layout = tweak.get("layout")
    fits = layout is not None and all(len(layout.get(k) or [0] * value.dim()) == value.dim()
                                      for k in ("perm", "step"))
    return relayout(value, layout, seed) if fits else value   # a list's tensors may differ in rank


def schema_values(op: str, case: dict) -> list:
    """Schema-ordered values of an OpInfo case (conformance.numerics calls this)."""
    plan = compile_plan(op)
    args, kwargs = captured_call(op, DTYPES[case["dtype"]], case["source"])
    values = plan.normalize(tuple(args), kwargs)
    tweaks = case.get("tweaks", {})
    return [_vary(v, tweaks.get(str(i), {}), case["source"]["seed"] + i) for i, v in enumerate(values)]


@dataclass(frozen=True)
class _Safe:
    """Which perturbations keep an op's result comparable with PyTorch CPU's."""
    layouts: bool    # not for views: their result depends on the input's strides and storage
    specials: bool   # only pointwise ops: in a reduction or a normalisation, where an inf
                     # lands decides inf, -inf or NaN by summation order


def _safe(op: str) -> _Safe:
    overload = compile_plan(op).op
    is_view = any(r.alias_info is not None and not r.alias_info.is_write for r in overload._schema.returns)
    return _Safe(not is_view, torch.Tag.pointwise in overload.tags)


def _tweak(draw: s.Draw, value, safe: _Safe, mutated: bool) -> dict:
    tensor = value if isinstance(value, torch.Tensor) else next(
        (v for v in value if isinstance(v, torch.Tensor)), None) if isinstance(value, (list, tuple)) else None
    if tensor is None or not safe.layouts:
        return {}
    tweak = {"layout": s.layout(draw, list(tensor.shape), can_expand=False)}
    if safe.specials and tensor.is_floating_point() and not mutated and draw(st.integers(0, 3)) == 0:
        pool = len(special_values(tensor.dtype))
        tweak["specials"] = [list(p) for p in draw(st.lists(
            st.tuples(st.integers(0, 1 << 20), st.integers(0, pool - 1)), min_size=1, max_size=3))]
    return tweak


def cases(op: str, dtype: torch.dtype) -> st.SearchStrategy[dict]:
    """Hypothesis strategy of OpInfo cases for one overload and dtype; NoSource when no
    OpInfo sample reaches it."""
    found = sources(op, dtype)
    if not found:
        raise NoSource(f"no OpInfo sample calls {op} on {NAMES[dtype]} (and the suite has no hand recipe)")
    plan = compile_plan(op)
    mutated = {a for a in plan.returns_alias if a is not None}
    safe = _safe(op)

    @st.composite
    def case(draw: s.Draw) -> dict:
        source = {**draw(st.sampled_from(found)), "seed": draw(st.integers(0, 2 ** 31 - 1))}
        try:
            args, kwargs = captured_call(op, dtype, source)
        except NoSource:
            source["seed"] = _SCAN_SEED   # the scan's own values always reach the op
            args, kwargs = captured_call(op, dtype, source)
        values = plan.normalize(tuple(args), kwargs)
        tweaks = {str(i): t for i, v in enumerate(values) if (t := _tweak(draw, v, safe, i in mutated))}
        return {"op": op, "dtype": NAMES[dtype], "source": source, "tweaks": tweaks,
                "shift": s.byte_shift(draw), "out_shift": s.byte_shift(draw)}
    return case()
