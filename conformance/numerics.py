"""One kernel case end to end: build inputs, compute references, launch, judge.

Besides each output against its tolerance, a case fails when the kernel
changed an input it does not own, wrote outside a storage (guard bytes), or,
for in-place ops, changed storage the mutated view does not cover.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from fl_runtime.ops.schema import OpPlan, compile_plan

from . import opinfo_cases
from . import fp8_specs, overlap
from .attention_specs import CPU_REFERENCES as ATTENTION_REFERENCES
from .compare import Reference, judge
from .cpu_loops import loop_answers
from .harness import CallFailed, Declined, Device, KernelEntry, call_kernel, storage_bytes, tensor_over
from .recipes import materialize
from .tolerances import Tolerance, side_effect_tolerance, tolerance_for, uses_magnitude

# The sum a kernel accumulates for a mean (same schema): its overflow decides, not the mean's.
_ACCUMULATES = {"mean": "sum", "mean.dim": "sum.dim_IntList"}

# Ops whose PyTorch CPU kernel reads some tensor arguments as if they were contiguous,
# whatever their strides, so called directly on a strided view it returns values for the
# wrong elements (PyTorch 2.x, aten/src/ATen/native/group_norm.cpp and its CPU kernel:
# native_group_norm reads weight and bias by data pointer, and refuses a non-contiguous
# input; native_group_norm_backward does so for grad_out, input, mean, rstd and weight;
# native_layer_norm_backward reads a strided mean/rstd by data pointer too.  Only the
# composites at::group_norm / at::layer_norm and autograd call them, and all pass
# contiguous tensors).  The ABI hands a kernel strides, and a kernel must honour them; so for these
# ops the expected values come from contiguous copies of the inputs (same values, the
# layout PyTorch's own callers give).  tests/abi/test_conformance_units.py checks that
# PyTorch still behaves so.
CPU_READS_AS_CONTIGUOUS = frozenset({"native_group_norm", "native_group_norm_backward",
                                     "native_layer_norm_backward"})


# Ops whose reference is a function of the suite's rather than the ATen op itself (the ATen
# op cannot run on the float64 copies a wide reference makes).
_CPU_REFERENCES = {**ATTENTION_REFERENCES, **fp8_specs.CPU_REFERENCES}


class RejectCase(Exception):
    """PyTorch CPU refuses these inputs, so there is nothing to compare with."""


@dataclass
class CaseResult:
    ok: bool
    max_error: float = 0.0
    ratio: float = 0.0          # worst error / allowed (<= 1 passes)
    tolerance: str = ""
    message: str = ""


def schema_values(plan: OpPlan, case: dict) -> list:
    if "source" in case:   # an OpInfo sample's call (conformance.opinfo_cases)
        return opinfo_cases.schema_values(plan.name, case)
    args = [materialize(v) for v in case["args"]]
    kwargs = {k: materialize(v) for k, v in case["kwargs"].items()}
    return plan.normalize(args, kwargs)


def _run_torch(plan: OpPlan, values: list) -> list:
    if plan.name in CPU_READS_AS_CONTIGUOUS:
        values = [v.contiguous() if isinstance(v, torch.Tensor) else v for v in values]
    args = [v for spec, v in zip(plan.args, values) if not spec.kwarg_only]
    kwargs = {spec.name: v for spec, v in zip(plan.args, values) if spec.kwarg_only}
    result = _CPU_REFERENCES.get(plan.name, plan.op)(*args, **kwargs)
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _copy(value, wide: bool = False, absolute: bool = False):
    """A private copy for a reference run (same layout, so in-place holes are comparable)."""
    if isinstance(value, torch.Tensor):
        t = tensor_over(storage_bytes(value), value)
        # Only floating tensors: integer ones are indices (nll_loss targets, pooling indices)
        # whose dtype and sign the op depends on.
        if wide and t.is_floating_point():
            t = t.double()
        if absolute and t.is_floating_point():   # the error scale of finite terms; specials judged apart
            t = torch.nan_to_num(t.abs(), nan=0.0, posinf=0.0)
        return t
    if isinstance(value, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in value):
        # a tensor list: copied too, or an in-place list op (_foreach_mul_) would change the inputs
        return [_copy(t, wide, absolute) for t in value]
    if absolute and isinstance(value, float):   # coefficients (alpha, beta); ints are dims and sizes
        return abs(value)
    return value


def cpu_reference(plan: OpPlan, values: list, inputs_after: list | None = None) -> list:
    """PyTorch CPU in the kernel's own dtypes; RejectCase when PyTorch refuses the inputs.
    `inputs_after` receives the inputs as PyTorch left them."""
    copies = [_copy(v) for v in values]
    if inputs_after is not None:
        inputs_after[:] = copies
    try:
        return _run_torch(plan, copies)
    except (RuntimeError, ValueError, TypeError, IndexError, NotImplementedError) as exc:
        raise RejectCase(str(exc).splitlines()[0]) from None


def wide_reference(plan: OpPlan, values: list, absolute: bool = False) -> list:
    """The op in float64 (on absolute finite values: the magnitude a sum's error scales with)."""
    return _run_torch(plan, [_copy(v, wide=True, absolute=absolute) for v in values])


def references(plan: OpPlan, values: list, inputs_after: list | None = None) -> list[Reference | None]:
    """Per output: PyTorch CPU, and for floating outputs the float64 result (and, for
    sums and products, the magnitudes their error and overflow scale with)."""
    cpu = cpu_reference(plan, values, inputs_after)
    if not any(o is not None and o.is_floating_point() for o in cpu):
        refs = [None if o is None else Reference(o) for o in cpu]
    else:
        wide = wide_reference(plan, values)
        size = summed = [None] * len(cpu)
        if uses_magnitude(plan.name):
            size = wide_reference(plan, values, absolute=True)
            summed = (wide_reference(compile_plan(_ACCUMULATES[plan.name]), values, absolute=True)
                      if plan.name in _ACCUMULATES else size)
        refs = [None if o is None else Reference(o, *((w, s, a) if o.is_floating_point() else ()))
                for o, w, s, a in zip(cpu, wide, size, summed)]
    also = loop_answers(plan.name, values)
    if also and refs and refs[0] is not None:
        refs[0].also = also
    return refs


def _holes_changed(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Did bytes of the storage outside the view change? (both tensors share one layout)"""
    size = got.element_size()
    numel = got.untyped_storage().nbytes() // size
    inside = torch.arange(numel).as_strided(got.shape, got.stride(), got.storage_offset()).reshape(-1)
    outside = torch.ones(numel * size, dtype=torch.bool)
    for byte in range(size):
        outside[inside * size + byte] = False
    as_bytes = [torch.frombuffer(bytearray(storage_bytes(t)), dtype=torch.uint8) if numel else
                torch.empty(0, dtype=torch.uint8) for t in (got, want)]
    return not torch.equal(as_bytes[0][outside], as_bytes[1][outside])


def side_effect_reference(plan: OpPlan, values: list, index: int, cpu_after: torch.Tensor) -> Reference:
    """What input `index`, which the op updates in place as a side effect, is judged
    against: PyTorch CPU, the float64 update, and as the error scale |old| + |new - old|
    (the update blends the old value with a new term; see tolerances.side_effect_tolerance)."""
    before = values[index]
    if not before.is_floating_point():
        return Reference(cpu_after)
    wide_inputs = [_copy(v, wide=True) for v in values]
    _run_torch(plan, wide_inputs)
    wide_after, old = wide_inputs[index], before.double()
    return Reference(cpu_after, wide_after, old.abs() + (wide_after - old).abs())


def _undeclared_write(plan: OpPlan, values: list, index: int, after: torch.Tensor,
                      cpu_after: torch.Tensor) -> list[str]:
    """A kernel changed an input its schema does not let it change: a fault, unless PyTorch
    CPU changes it too (native_batch_norm's running statistics), and then to the same values."""
    name = plan.args[index].name
    if storage_bytes(cpu_after) == storage_bytes(values[index]):
        return [f"the kernel modified input '{name}'"]
    rule = side_effect_tolerance(after.dtype)
    verdict = judge(after, rule, side_effect_reference(plan, values, index, cpu_after))
    return [] if verdict.ok else [f"input '{name}', which PyTorch CPU updates too, is out of tolerance "
                                  f"({rule.describe()}); {verdict.detail}"]


def _list_problems(plan: OpPlan, values: list, args_after: list, cpu_after: list, op: str,
                   fast: bool) -> tuple[list[str], list[tuple]]:
    """Tensor lists: those the schema lets the op write (`Tensor(a!)[]`: _foreach_mul_'s self,
    _fused_adamw_'s params and moments) judged entry by entry against PyTorch CPU's, as an
    output would be -- those ops return nothing, so this is all there is to check -- and
    any other list must come back unchanged.  Returns the problems and each judged entry's
    (verdict, rule), which count towards the case's worst error like outputs do."""
    problems: list[str] = []
    judged: list[tuple] = []
    for i, (arg, before) in enumerate(zip(plan.op._schema.arguments, values)):
        if not (isinstance(before, list) and any(isinstance(t, torch.Tensor) for t in before)):
            continue
        written = arg.alias_info is not None and arg.alias_info.is_write
        for k, (old, got, want) in enumerate(zip(before, args_after[i], cpu_after[i])):
            if not isinstance(old, torch.Tensor):
                continue
            if not written:
                if storage_bytes(old) != storage_bytes(got):
                    problems.append(f"the kernel modified input '{arg.name}[{k}]'")
                continue
            rule = tolerance_for(op, want.dtype, fast)
            verdict = judge(got, rule, Reference(want))
            judged.append((verdict, rule))
            if not verdict.ok:
                problems.append(f"'{arg.name}[{k}]': {verdict.bad} element(s) out of tolerance "
                                f"({rule.describe()}); {verdict.detail}")
            if _holes_changed(got, want):
                problems.append(f"the in-place kernel changed storage of '{arg.name}[{k}]' outside its view")
    return problems, judged


def _written(plan: OpPlan) -> set[int]:
    return {a for a in plan.returns_alias if a is not None} | set(plan.written_arg_indices)


def _shares_a_written_storage(plan: OpPlan, values: list, index: int) -> bool:
    return index not in _written(plan) and any(overlap.shares_storage(values[index], values[w])
                                               for w in _written(plan))


def unshared(plan: OpPlan, values: list) -> list:
    """The values PyTorch CPU gets for the reference: an input that shares storage with a
    tensor the op writes is cloned first (fl_abi.h, "ARGUMENTS THAT SHARE MEMORY": a kernel
    answers as if it read its inputs before writing; PyTorch's CPU refuses most such calls)."""
    return [v.clone() if isinstance(v, torch.Tensor) and _shares_a_written_storage(plan, values, i) else v
            for i, v in enumerate(values)]


def check_case(dev: Device, stream, entry: KernelEntry, case: dict, fast: bool = False) -> CaseResult:
    """Run one case; RejectCase when PyTorch itself refuses it, Declined when the plugin does."""
    plan = compile_plan(entry.op)
    values = schema_values(plan, case)
    if "overlap" in case:     # conformance.overlap: an output and an input in one storage
        values = overlap.rewire(values, case["overlap"])
    cpu_inputs: list = []
    refs = references(plan, unshared(plan, values), cpu_inputs)
    rules: list[Tolerance | None] = [None if r is None else tolerance_for(entry.op, r.cpu.dtype, fast)
                                     for r in refs]
    try:
        run = call_kernel(dev, stream, entry, plan, values, case.get("shift", 0), case.get("out_shift", 0))
    except Declined:
        raise
    except CallFailed as exc:
        return CaseResult(False, float("inf"), float("inf"), "", str(exc))
    problems = list(run.problems)
    mutated = {a for a in plan.returns_alias if a is not None}
    for i, (before, after) in enumerate(zip(values, run.args_after)):
        if isinstance(before, torch.Tensor) and i not in mutated and storage_bytes(before) != storage_bytes(after) \
                and not _shares_a_written_storage(plan, values, i):   # its bytes are the output's, judged there
            problems += _undeclared_write(plan, values, i, after, cpu_inputs[i])
    list_problems, judged = _list_problems(plan, values, run.args_after, cpu_inputs, entry.op, fast)
    problems += list_problems
    worst = CaseResult(True)
    for verdict, rule in judged:
        if verdict.ratio >= worst.ratio:
            worst = CaseResult(worst.ok, verdict.max_error, verdict.ratio, rule.describe(), worst.message)
    for j, (rule, got, ref) in enumerate(zip(rules, run.outputs, refs)):
        if rule is None:
            continue
        if got is None:
            # PyTorch's meta function (the layout the runtime allocates) leaves this output
            # undefined, so the kernel gets no buffer for it; CPU may still return one that
            # nobody asked for (1-d convolution_backward's grad_weight with output_mask [F, F, T]).
            continue
        if got.shape != ref.cpu.shape:
            # Meta (the layout the runtime allocates) and CPU may disagree where CPU returns
            # an empty placeholder (native_batch_norm's saved statistics in eval mode).
            if ref.cpu.numel():
                problems.append(f"output {j}: shape {list(got.shape)} where PyTorch CPU gives {list(ref.cpu.shape)}")
            continue
        verdict = judge(got, rule, ref)
        if verdict.ratio >= worst.ratio:
            worst = CaseResult(worst.ok, verdict.max_error, verdict.ratio, rule.describe(), worst.message)
        if not verdict.ok:
            problems.append(f"output {j}: {verdict.bad} element(s) out of tolerance ({rule.describe()}); "
                            f"{verdict.detail}")
        alias = plan.returns_alias[j]
        if alias is not None and _holes_changed(got, ref.cpu):
            problems.append(f"the in-place kernel changed storage of '{plan.args[alias].name}' outside its view")
    worst.ok = not problems
    worst.message = "; ".join(problems)
    return worst
