"""What a kernel worker checks, one unit at a time (run inside conformance.isolation).

A unit is ("numerics", dtype) or ("robustness", None) for one kernel-table
entry; its outcome is a JSON-able dict: status, message, max_error,
error_ratio, tolerance, examples, reproducer.
"""
from __future__ import annotations

import math
import traceback
from typing import Callable

import torch
from hypothesis import HealthCheck, Phase, Verbosity, given, reject, seed, settings
from hypothesis.errors import Unsatisfiable, UnsatisfiedAssumption

from fl_runtime import abi
from fl_runtime.abi import ffi
from fl_runtime.ops.schema import compile_plan

from . import concurrency, fp8_specs, layout_matrix, overlap, random_checks, special_rows, statuses
from .harness import STATUS, CallFailed, Declined, Device, KernelEntry, kernel_entries, status_name
from .numerics import CaseResult, RejectCase, check_case, schema_values
from .opinfo_cases import NoSource
from .opspecs import cases, elementwise_unary, grid_case, sweep_case
from .profiles import Profile
from .recipes import DTYPES
from .repro import kernel_script

Progress = Callable[[dict], None]


# Cases that passed numerics in this worker, per (entry index, dtype name): the concurrency
# check (run after the entry's numerics, in the same worker) launches one of them.
PASSED_CASES: dict[tuple[int, str], list[dict]] = {}


class _Mismatch(AssertionError):
    """A case failed (hypothesis shrinks it, then we report the smallest)."""


def _outcome(status: str, message: str = "", result: CaseResult | None = None, **extra) -> dict:
    result = result or CaseResult(True)
    return {"status": status, "message": message, "max_error": result.max_error,
            "error_ratio": result.ratio, "tolerance": result.tolerance, **extra}


class _NotACase(Exception):
    """A drawn or explicit case with nothing to compare (PyTorch refuses it, or the kernel
    declines it): hypothesis rejects a drawn one; an explicit one is passed over."""


def _rejecting(check):
    """`check` for hypothesis: a case that is not one is rejected there (hypothesis deprecates
    reject() outside a property test, where the explicit cases run)."""
    def property_check(case: dict) -> None:
        try:
            check(case)
        except _NotACase:
            reject()
    return property_check


def numerics(dev: Device, stream, entry: KernelEntry, dtype_name: str, profile: Profile, run_seed: int,
             progress: Progress) -> dict:
    """Hypothesis examples (plus the 16-bit and 8-bit sweeps, the special-value grid, rows of
    special values (conformance.special_rows) and the layout matrix, and for kernels that
    write a tensor they also read from, overlap cases: conformance.overlap) of one kernel
    on one dtype against PyTorch CPU.  The cases that pass are kept for the entry's
    concurrency check (PASSED_CASES)."""
    dtype = DTYPES[dtype_name]
    fast = entry.variant_name == "fast"
    state = {"examples": 0, "rejected": 0, "worst": CaseResult(True), "failure": None, "declined": []}

    def check(case: dict) -> None:
        progress(case)
        try:
            result = check_case(dev, stream, entry, case, fast)
        except RejectCase:
            state["rejected"] += 1
            raise _NotACase from None
        except Declined as exc:   # nothing to compare: the runtime would run this case elsewhere
            state["declined"].append(exc.message)
            raise _NotACase from None
        except Exception:   # a harness error on this case still names the case
            result = CaseResult(False, math.inf, math.inf, "", "error while checking the case:\n"
                                + traceback.format_exc(limit=4))
        state["examples"] += 1
        if result.ratio >= state["worst"].ratio:
            state["worst"] = result
        if not result.ok:
            if case.get("matrix"):   # say which deterministic case, not a drawn one, found it
                result.message = f"{case['matrix']}: {result.message}"
            state["failure"] = (case, result)   # the last one is hypothesis' shrunk example
            raise _Mismatch(result.message)
        PASSED_CASES.setdefault((entry.index, dtype_name), []).append(case)

    try:
        strategy = cases(entry.op, dtype, entry.dtypes)
    except NoSource as exc:
        return _outcome(statuses.UNTESTED, str(exc))
    try:
        matrix = [*layout_matrix.cases(entry.op, dtype, profile.full_layout_matrix),
                  layout_matrix.empty_inner_dimension(entry.op, dtype), layout_matrix.transposed_copy(entry.op, dtype)]
        sweeps = [sweep_case(entry.op, dtype), *fp8_specs.sweep_cases(entry.op, dtype, entry.dtypes,
                                                                      profile.exhaustive_8bit,
                                                                      elementwise_unary(entry.op))]
        for explicit in (*sweeps, grid_case(entry.op, dtype), *special_rows.cases(entry.op, dtype), *matrix):
            try:
                if explicit is not None:
                    check(explicit)
            except (UnsatisfiedAssumption, _NotACase):
                pass   # PyTorch refuses these inputs; the generated cases still run
        run = settings(max_examples=profile.kernel_examples, database=None, deadline=None,
                       derandomize=False, suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
                       report_multiple_bugs=False, print_blob=False,
                       phases=(Phase.explicit, Phase.generate, Phase.shrink))
        seed(run_seed)(run(given(strategy)(_rejecting(check))))()
        if overlap.applies(entry.op):   # an output and an input in one allocation
            seed(run_seed)(run(given(overlap.cases(entry.op, dtype, entry.dtypes, schema_values))(_rejecting(check))))()
    except _Mismatch:
        case, result = state["failure"]
        script = kernel_script(dev.plugin.source.path, entry.op, entry.variant_name, dtype_name, case,
                               result.tolerance, run_seed, result.message.split(";")[0])
        return _outcome(statuses.FAIL, result.message, result, reproducer=script, examples=state["examples"])
    except Unsatisfiable:
        if state["declined"]:
            return _outcome(statuses.NOT_SUPPORTED, _declined_note(entry.op, dtype_name, state["declined"], True))
        return _outcome(statuses.UNTESTED, f"PyTorch CPU refuses every generated {entry.op} case on "
                        f"{dtype_name} ({state['rejected']} tried), so there is no reference")
    if state["examples"] == 0 and state["declined"]:
        return _outcome(statuses.NOT_SUPPORTED, _declined_note(entry.op, dtype_name, state["declined"], True))
    note = _declined_note(entry.op, dtype_name, state["declined"], False) if state["declined"] else ""
    return _outcome(statuses.PASS, note, state["worst"], examples=state["examples"])


def _declined_note(op: str, dtype_name: str, messages: list[str], every: bool) -> str:
    """What the report says about cases the plugin declined (FL_ERROR_NOT_SUPPORTED at launch)."""
    which = f"every {op} case" if every else f"{len(messages)} {op} case(s)"
    return (f"the plugin declined {which} on {dtype_name} with FL_ERROR_NOT_SUPPORTED "
            f"(the runtime falls back for those): {messages[0] or '(no message)'}")


# ---- robustness ------------------------------------------------------------------

def _launch_outcome(dev: Device, stream, entry_pointer, args, nargs: int) -> tuple[int, str, bool]:
    """Status of a launch: from launch_kernel (synchronous: True), or the stream's sticky
    error at synchronize."""
    status = dev.api.launch_kernel(stream, entry_pointer, args, nargs)
    if status != abi.SUCCESS:
        return status, dev.message(), True
    status = dev.api.stream_synchronize(stream)
    return status, dev.message() if status != abi.SUCCESS else "", False


def _probe_problem(what: str, status: int, message: str, expected: set[int]) -> str | None:
    if status not in expected:
        return (f"{what}: got {status_name(status)}, expected one of "
                f"{', '.join(sorted(status_name(s) for s in expected))}")
    if not message.strip():
        return f"{what}: {status_name(status)} but last_error_message() is empty"
    return None


def robustness(dev: Device, stream, entry: KernelEntry) -> dict:
    """Malformed launches must come back as error statuses with a message, and leave
    the stream usable: no crash, no hang, no silent success.  A plugin may decline a call's
    arguments at launch (FL_ERROR_NOT_SUPPORTED, the ABI's "run it elsewhere"): a declined
    argument probe is recorded, not failed; all of them declined is not_supported."""
    bad_argument = {STATUS[n] for n in ("FL_ERROR_INVALID_VALUE", "FL_ERROR_INVALID_POINTER",
                                        "FL_ERROR_KERNEL_FAILED")}
    try:
        plan = compile_plan(entry.op)
        nargs = len(plan.args) + len(plan.returns_alias)
    except AttributeError:   # an op PyTorch does not know: any count is wrong for it
        nargs = 4
    none_args = ffi.new("fl_arg[]", nargs)   # zeroed: every argument FL_ARG_NONE
    foreign = ffi.new("fl_kernel_entry*", {"struct_size": ffi.sizeof("fl_kernel_entry"), "op": entry.pointer.op,
                                           "dtypes": entry.dtypes, "variant": entry.variant})
    probes = [
        ("a copy of the entry (not the table's own pointer)", foreign, none_args, nargs,
         {STATUS["FL_ERROR_INVALID_HANDLE"]}),
        ("args=NULL with nargs=0", entry.pointer, ffi.NULL, 0, bad_argument),
        (f"all {nargs} arguments FL_ARG_NONE", entry.pointer, none_args, nargs, bad_argument),
        ("one argument too few", entry.pointer, none_args, max(nargs - 1, 0), bad_argument),
    ]
    problems, declined = [], []
    for what, pointer, args, count, expected in probes:
        status, message, synchronous = _launch_outcome(dev, stream, pointer, args, count)
        if synchronous and status == abi.ERROR_NOT_SUPPORTED and pointer is entry.pointer:
            declined.append(f"{what}: {message or '(no message)'}")
            expected = {status}   # a decline still needs its message
        problem = _probe_problem(what, status, message, expected)
        if problem:
            problems.append(problem)
    try:   # the error was reported once; the stream must work again
        dev.synchronize(stream)
        ptr = dev.malloc(64)
        dev.h2d(stream, ptr, 0, bytes(range(64)))
        if dev.read(stream, ptr, 0, 64) != bytes(range(64)):
            problems.append("after the failed launches a copy round trip on the stream returned wrong bytes")
        dev.free(ptr)
    except CallFailed as exc:
        problems.append(f"the stream is unusable after the failed launches: {exc}")
    if problems:
        return _outcome(statuses.FAIL, "; ".join(problems))
    note = f"declined with FL_ERROR_NOT_SUPPORTED: {'; '.join(declined)}" if declined else ""
    if len(declined) == len(probes) - 1:   # every probe but the foreign entry's
        return _outcome(statuses.NOT_SUPPORTED, f"the plugin declined every malformed launch of {entry.op}; {note}")
    return _outcome(statuses.PASS, note, examples=len(probes))


def concurrency_check(dev: Device, stream, entry: KernelEntry, run_seed: int) -> dict:
    """The entry launched at once with itself and its neighbour in the table
    (conformance.concurrency), as an outcome."""
    found = concurrency.check(dev, stream, entry, kernel_entries(dev.plugin), run_seed, schema_values, cases,
                              PASSED_CASES)
    extra = {"examples": found["examples"]} if "examples" in found else {}
    if found["status"] == statuses.FAIL:
        extra["reproducer"] = concurrency.script(dev.plugin.source.path, found["call"], found["mixer"])
        return _outcome(statuses.FAIL, found["message"], CaseResult(False, tolerance="bit-identical to the call "
                                                                                        "run alone"), **extra)
    return _outcome(found["status"], found["message"], **extra)


def run_unit(dev: Device, stream, entry: KernelEntry, unit: tuple[str, str | None], profile: Profile,
             run_seed: int, progress: Progress) -> dict:
    kind, dtype_name = unit
    if kind == "robustness":
        return robustness(dev, stream, entry)
    if kind == "concurrency":
        return concurrency_check(dev, stream, entry, run_seed)
    torch.manual_seed(run_seed)
    if random_checks.is_random(entry.op):
        return random_numerics(dev, stream, entry, dtype_name)
    return numerics(dev, stream, entry, dtype_name, profile, run_seed, progress)


def random_numerics(dev: Device, stream, entry: KernelEntry, dtype_name: str) -> dict:
    """A random kernel on one dtype: the RNG contract and its distribution (fixed seeds)."""
    problems, worst_z, calls = random_checks.check(dev, stream, entry, dtype_name)
    tolerance = f"RNG contract of fl_abi.h; statistics within {random_checks.Z_BOUND:g} standard errors"
    result = CaseResult(not problems, worst_z, worst_z / random_checks.Z_BOUND, tolerance, "; ".join(problems))
    if not problems:
        return _outcome(statuses.PASS, "", result, examples=calls)
    return _outcome(statuses.FAIL, result.message, result, examples=calls,
                    reproducer=random_checks.script(dev.plugin.source.path, entry, dtype_name))
