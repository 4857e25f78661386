"""Kernels launched at once: every kernel-table entry, beside itself and another kernel.

A kernel that keeps scratch memory, a library handle or a cache in one global (grown
as needed, reused by the next call) is right one call at a time and silently wrong
when two streams of a device, or two devices, run it together: the reference vendor
runs each stream on a worker thread of its own, as a chip with several queues, or a
host library (BLAS, a convolution library) does.  fl_abi.h ("THREADS"): every entry
point may be called from several threads at once, and launches on different streams
may run at the same time.

For one entry the check takes a case from the suite's own generators: the largest that
passed the entry's numerics in this worker (hand recipes, OpInfo samples, the layout
matrix: conformance.kernel_checks), else a few drawn from conformance.opspecs; for random
kernels a call whose bits are fixed (conformance.random_checks.replayable_values).  The
kernel mixed in is the next entry of the table that runs (a family that shares a
workspace sits together).  Launches that share a workspace corrupt each other only when
their data differ, so the entry's call comes in VARIANTS: the case itself, and the same
case with every tensor's storage rotated by one element (same shapes, layouts, value
kinds and index ranges; other values at each position).  Lane i (a stream, a thread)
launches variant i % VARIANTS.  Each variant runs alone twice, then in two pairings:

  streams   COPIES launches of the case (more for a small one, up to MAX_COPIES, so that
            the lanes' work overlaps) on each of STREAMS streams of device 0, the
            mixed-in kernel among them, all queued behind one event (a gate
            stream's busy copies) so that the streams' queues then run side by side;
  devices   one thread per device (two on a one-device plugin), each with its own
            stream, all released together by a barrier, launching the same mix.

Every launch has its own buffers; each of the entry's results must be bit-identical to
its variant's result alone (a kernel whose two lone runs already differ, say by float atomics, is
held to the numerics tolerance instead).  A failure names the pairing, the launch, the
mixed-in kernel and the first differing element, and carries a reproducer script.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

import torch
from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings
from hypothesis.errors import Unsatisfiable

from fl_runtime.ops.schema import OpPlan, compile_plan

from . import random_checks, statuses
from .compare import Reference, judge
from .harness import (CallFailed, Declined, Device, KernelEntry, KernelRun, Staged, call_kernel, collect,
                      launch_staged, release, stage, storage_bytes)
from .recipes import DTYPES
from .repro import literal
from .stream_probes import CHUNK, Busy, Events
from .target import device_count
from .tolerances import between_runs

STREAMS = 2          # streams of device 0 in the `streams` pairing
COPIES = 6           # launches of the case per stream (and per thread), each with its own buffers ...
MAX_COPIES = 24      # ... more for a small case, so that a lane's work lasts: up to LANE_ELEMENTS in all
LANE_ELEMENTS = 1 << 15
MIX_EVERY = 3        # the mixed-in kernel after every third launch of the case
VARIANTS = 2         # value variants of the entry's case (lane i launches variant i % VARIANTS)
DRAWS = 2            # cases drawn when numerics passed none in this worker (a mixed-in entry's)
GATE_COPIES = 4      # busy copies (of stream_probes.CHUNK) that hold the streams' launches back
MAX_ELEMENTS = 1 << 16   # the largest case that fits, so that a launch is long enough to overlap another
# dtypes to draw cases in, first declared wins: float32 runs the most code in most kernels
_PREFERRED = ("float32", "float64", "int64", "int32", "bfloat16", "float16", "bool", "uint8", "int8", "int16",
              "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")


class NoCase(Exception):
    """No case of the entry could be run alone (every one declined, refused or failed);
    `declined`: the plugin declined every one (FL_ERROR_NOT_SUPPORTED at launch)."""

    def __init__(self, message: str, declined: bool) -> None:
        super().__init__(message)
        self.declined = declined


@dataclass
class Call:
    """One kernel call the check launches: which entry, on which values."""
    entry: KernelEntry
    plan: OpPlan
    case: dict | None        # the suite's case (None for a random kernel's own call)
    values: list
    dtype: str
    variants: tuple = ()     # values of each variant (variant 0: `values`)
    alone: tuple = ()        # each variant's lone run
    deterministic: bool = True

    def run_alone(self, dev: Device, stream, variants: int) -> None:
        """Run each of `variants` value variants alone twice (CallFailed, Declined ...
        propagate): the results launches at once are compared with."""
        self.variants = tuple(rotated(self.values, k) for k in range(variants))
        runs = [[call_kernel(dev, stream, self.entry, self.plan, v, *_shifts(self.case)) for _ in range(2)]
                for v in self.variants]
        problems = [p for first, _ in runs for p in first.problems]
        if problems:   # guard damage: numerics reports it; concurrency needs a clean run
            raise CallFailed(f"launch_kernel({self.entry.op})", 0, "; ".join(problems))
        self.alone = tuple(first for first, _ in runs)
        self.deterministic = all(_same_bits(first, second) for first, second in runs)

    def describe(self) -> str:
        shapes = [list(v.shape) for v in self.values if isinstance(v, torch.Tensor)]
        return f"{self.entry.op} ({self.entry.variant_name}) on {self.dtype}, tensor shapes {shapes}"


def _dtype_of(entry: KernelEntry, device_mask: int) -> str | None:
    from fl_runtime import abi
    for name in _PREFERRED:
        code = abi.DTYPE_TO_FL[DTYPES[name]]
        if entry.dtypes >> code & 1 and device_mask >> code & 1:
            return name
    return None


def rotated(values: list, k: int) -> list:
    """`values` with every tensor's storage rotated by k elements (views of one storage
    stay views of one storage; layouts, shapes and the set of values stay the same)."""
    if k == 0:
        return values
    done: dict[int, torch.Tensor] = {}

    def rotate(v):
        if isinstance(v, list):
            return [rotate(t) for t in v]
        if not isinstance(v, torch.Tensor) or not v.untyped_storage().nbytes():
            return v
        key = v.untyped_storage().data_ptr()
        if key not in done:
            flat = torch.empty(0, dtype=v.dtype).set_(v.untyped_storage())
            done[key] = flat.roll(k)
        return torch.empty(0, dtype=v.dtype).set_(done[key].untyped_storage(), v.storage_offset(), v.shape, v.stride())
    return [rotate(v) for v in values]


def _size(values: list) -> int:
    return sum(v.numel() for v in values if isinstance(v, torch.Tensor))


def _drawn_cases(entry: KernelEntry, dtype: str, run_seed: int, schema_values: Callable,
                 strategy: Callable) -> list[tuple[dict, list]]:
    """Up to DRAWS cases of the suite's generators (seeded), as (case, schema values)."""
    plan = compile_plan(entry.op)
    found: list[tuple[dict, list]] = []

    def keep(case: dict) -> None:
        if len(found) < DRAWS:
            try:
                found.append((case, schema_values(plan, case)))
            except Exception:   # noqa: BLE001 - a case whose inputs cannot be built is skipped
                pass

    run = settings(max_examples=DRAWS, database=None, deadline=None, derandomize=False,
                   suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
                   phases=(Phase.explicit, Phase.generate))
    try:
        seed(run_seed)(run(given(strategy(entry.op, DTYPES[dtype], entry.dtypes))(keep)))()
    except Unsatisfiable:
        pass
    return found


def _passed(entry: KernelEntry, dtype: str, passed: dict, schema_values: Callable) -> list[tuple[dict, list]]:
    """The cases that passed the entry's numerics on `dtype` in this worker, as (case, values)."""
    plan = compile_plan(entry.op)
    return [(case, schema_values(plan, case)) for case in passed.get((entry.index, dtype), [])]


def prepare(dev: Device, stream, entry: KernelEntry, dtype: str, run_seed: int, schema_values: Callable,
            strategy: Callable, passed: dict, variants: int = VARIANTS) -> Call:
    """The entry's call for the check, its variants run alone twice: the largest case (up to
    MAX_ELEMENTS) that passed its numerics, else of a few drawn ones, that the plugin runs
    (NoCase when there is none)."""
    plan = compile_plan(entry.op)
    random_values = random_checks.replayable_values(entry.op, dtype)
    found = ([(None, random_values)] if random_values is not None else
             _passed(entry, dtype, passed, schema_values) or
             _drawn_cases(entry, dtype, run_seed, schema_values, strategy))
    fitting = [cv for cv in found if _size(cv[1]) <= MAX_ELEMENTS] or found
    reasons, declined = [], 0
    # A case declined for its byte shifts (misaligned data is numerics' business) runs aligned.
    aligned = [({**case, "shift": 0, "out_shift": 0}, values) for case, values in fitting if any(_shifts(case))]
    for case, values in sorted(fitting, key=lambda cv: -_size(cv[1])) + aligned:
        call = Call(entry, plan, case, values, dtype)
        try:
            call.run_alone(dev, stream, variants)
        except (CallFailed, RuntimeError, ValueError, TypeError, IndexError, NotImplementedError) as exc:
            reasons.append(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            declined += isinstance(exc, Declined)
            continue
        return call
    raise NoCase(f"no case of {entry.op} on {dtype} ran alone ({len(found)} tried)"
                 + (f": {'; '.join(dict.fromkeys(reasons))}" if reasons else ""), bool(reasons) and declined == len(reasons))


def _shifts(case: dict | None) -> tuple[int, int]:
    return (case.get("shift", 0), case.get("out_shift", 0)) if case else (0, 0)


def _tensors(run: KernelRun) -> list[torch.Tensor]:
    """What a launch left behind: every output, and every argument (in-place ones change)."""
    flat = []
    for v in [*run.outputs, *run.args_after]:
        for t in (v if isinstance(v, list) else [v]):
            if isinstance(t, torch.Tensor):
                flat.append(t)
    return flat


def _same_bits(a: KernelRun, b: KernelRun) -> bool:
    return all(storage_bytes(x) == storage_bytes(y) for x, y in zip(_tensors(a), _tensors(b)))


def difference(call: Call, variant: int, got: KernelRun) -> str | None:
    """None when `got` matches the variant's lone run (bit for bit, or within the numerics
    tolerance for a kernel that is not deterministic alone), else the first difference."""
    if got.problems:
        return "; ".join(got.problems)
    alone = call.alone[variant]
    names = [f"output {j}" for j in range(len(alone.outputs))] + \
            [f"argument '{spec.name}'" for spec in call.plan.args]
    pairs = list(zip(_tensors(alone), _tensors(got)))
    labels = [n for n, v in zip(names, [*alone.outputs, *alone.args_after])
              for t in (v if isinstance(v, list) else [v]) if isinstance(t, torch.Tensor)]
    for label, (want, have) in zip(labels, pairs):
        if storage_bytes(want) == storage_bytes(have):
            continue
        if not call.deterministic and want.is_floating_point():
            verdict = judge(have, between_runs(call.entry.op, want.dtype), Reference(want))
            if verdict.ok:
                continue
            return f"{label}: {verdict.bad} element(s) beyond the numerics tolerance of its lone run; {verdict.detail}"
        return f"{label} is not bit-identical to its lone run; {_first_difference(want, have)}"
    return None


def _first_difference(want: torch.Tensor, have: torch.Tensor) -> str:
    if want.shape != have.shape or not want.numel():
        return "the storage around the view differs"
    w, h = want.contiguous().reshape(-1), have.contiguous().reshape(-1)
    bits = (lambda t: t.view(torch.uint8).reshape(t.numel(), -1)) if want.dtype != torch.bool else (lambda t: t)
    differs = (bits(w) != bits(h)).reshape(w.numel(), -1).any(dim=1)
    if not differs.any():
        return "the storage around the view differs"
    i = int(differs.nonzero()[0])
    index = tuple(int(v) for v in torch.unravel_index(torch.tensor(i), want.shape)) if want.dim() else ()
    count = int(differs.sum())
    return f"{count} element(s) differ, first at index {index}: got {h[i].item()!r}, alone {w[i].item()!r}"


# ---- the pairings ----------------------------------------------------------------

@dataclass
class _Slot:
    call: Call
    variant: int
    where: str
    staged: Staged
    judged: bool = True      # the mixed-in call's launches are its own entry's to judge


def _mix(calls: tuple[Call, Call], dev: Device, stream, lane: int, where: str) -> list[_Slot]:
    """The lane's launches, staged on `stream`, each with its own buffers: copies_of(case)
    launches of the case (the lane's variant), the mixed-in call now and then."""
    main, mixed = calls
    variant = lane % len(main.variants)
    launches, copies = [], copies_of(main)
    for k in range(copies):
        staged = stage(dev, stream, main.entry, main.plan, main.variants[variant], *_shifts(main.case))
        launches.append(_Slot(main, variant, f"{where}, launch {k + 1} of {copies} (value variant {variant})", staged))
        if k % MIX_EVERY == lane % MIX_EVERY:
            launches.append(_Slot(mixed, 0, where, stage(dev, stream, mixed.entry, mixed.plan, mixed.variants[0],
                                                         *_shifts(mixed.case)), judged=False))
    return launches


def copies_of(call: Call) -> int:
    """Launches of `call` per lane: COPIES, more for a small case (up to MAX_COPIES)."""
    return max(COPIES, min(MAX_COPIES, LANE_ELEMENTS // max(_size(call.values), 1)))


def _run_slots(lanes: list[list[_Slot]]) -> list[tuple[_Slot, KernelRun | str]]:
    """Launch the lanes side by side (the k-th launch of each, then the k+1-th ...), then
    collect each judged launch; a launch error is that launch's result."""
    results: list[tuple[_Slot, KernelRun | str]] = []
    errors: dict[int, str] = {}
    unique = list({id(slot): slot for lane in lanes for slot in lane}.values())
    try:
        for row in range(max(len(lane) for lane in lanes)):
            for lane in lanes:
                if row < len(lane) and id(lane[row]) not in errors:
                    try:
                        launch_staged(lane[row].staged)
                    except CallFailed as exc:
                        errors[id(lane[row])] = str(exc)
        for slot in unique:
            try:
                outcome = errors.get(id(slot)) or collect(slot.staged)
            except CallFailed as exc:
                outcome = str(exc)
            if slot.judged:
                results.append((slot, outcome))
    finally:
        for slot in unique:
            release(slot.staged)
    return results


def _gate(dev: Device, streams: list) -> Callable[[], None]:
    """Hold `streams` behind an event recorded after GATE_COPIES busy copies on a stream of
    their own, so that the launches that follow are queued (not run at enqueue, as an idle
    stream may) and start together when it completes; returns the clean-up."""
    scratch = dev.malloc(2 * CHUNK)
    gate, events = dev.new_stream(), Events(dev)
    Busy(dev, scratch, GATE_COPIES).enqueue(gate)
    opened = events.record(gate)
    for stream in streams:
        dev.check(dev.api.stream_wait_event(stream, opened), "stream_wait_event")

    def close() -> None:
        dev.destroy_stream(gate)
        for stream in streams:
            dev.synchronize(stream)
        events.destroy()
        dev.free(scratch)
    return close


def streams_pairing(dev: Device, calls: tuple[Call, Call]) -> list[tuple[_Slot, KernelRun | str]]:
    """STREAMS streams of one device, launched from one thread, interleaved, held behind
    one gate so that their queues run side by side."""
    streams = [dev.new_stream() for _ in range(STREAMS)]
    try:
        lanes = [_mix(calls, dev, s, i, f"fl:{dev.index} stream {i + 1} of {STREAMS}") for i, s in enumerate(streams)]
        close = _gate(dev, streams)
        try:
            return _run_slots(lanes)
        finally:
            close()
    finally:
        for s in streams:
            dev.destroy_stream(s)


def devices_pairing(devices: list[Device], calls: tuple[Call, Call]) -> list[tuple[_Slot, KernelRun | str]]:
    """One thread per device (two threads on device 0 of a one-device plugin), each with a
    stream of its own, released together."""
    targets = devices if len(devices) > 1 else devices * 2
    barrier = threading.Barrier(len(targets))
    out: list[list] = [[] for _ in targets]
    failures: list[BaseException] = []

    def drive(i: int, dev: Device) -> None:
        stream = dev.new_stream()
        try:
            lane = _mix(calls, dev, stream, i, f"thread {i + 1} of {len(targets)} on fl:{dev.index}")
            barrier.wait(timeout=60)
            out[i] = _run_slots([lane])
        except BaseException as exc:   # noqa: BLE001 - re-raised in the calling thread
            failures.append(exc)
            barrier.abort()
        finally:
            dev.destroy_stream(stream)

    threads = [threading.Thread(target=drive, args=(i, Device(d.plugin, d.index)), name=f"fl-conformance-{i}")
               for i, d in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:   # the thread that broke the barrier, not those it left waiting
        raise next((f for f in failures if not isinstance(f, threading.BrokenBarrierError)), failures[0])
    return [r for lane in out for r in lane]


def mixer_index(entry: KernelEntry, count: int) -> int:
    """The entry mixed in: the next one in the table (its family's neighbour)."""
    return (entry.index + 1) % count if count > 1 else entry.index


def check(dev: Device, stream, entry: KernelEntry, entries: list[KernelEntry], run_seed: int,
          schema_values: Callable, strategy: Callable, passed: dict) -> dict:
    """The concurrency check of one entry: status, message, examples (launches made), and
    for a failure the two calls (conformance.kernel_checks makes the outcome and script)."""
    dtype = _dtype_of(entry, dev.facts.get("supported_dtypes", 0))
    if dtype is None:
        return {"status": statuses.NOT_SUPPORTED, "message": f"{entry.op} declares no dtype device 0 can store"}
    try:
        call = prepare(dev, stream, entry, dtype, run_seed, schema_values, strategy, passed)
    except NoCase as exc:
        return {"status": statuses.NOT_SUPPORTED if exc.declined else statuses.UNTESTED, "message": str(exc)}
    mixer = _mixed_in(dev, stream, entry, entries, run_seed, schema_values, strategy, passed) or call
    devices = [Device(dev.plugin, i) for i in range(device_count(dev.plugin))]
    alongside = f"alongside {mixer.describe()}" if mixer is not call else "alongside itself only"
    launches = 0
    for pairing, run in (("streams", lambda: streams_pairing(dev, (call, mixer))),
                         ("devices", lambda: devices_pairing(devices, (call, mixer)))):
        results = run()
        launches += len(results)
        for slot, got in results:
            problem = got if isinstance(got, str) else difference(call, slot.variant, got)
            if problem:
                return {"status": statuses.FAIL, "call": call, "mixer": mixer, "examples": launches,
                        "message": f"{call.describe()}: {slot.where} ({pairing} pairing, {alongside}) "
                                   f"differs from the same call run alone: {problem}"}
    note = "" if call.deterministic else \
        f"{entry.op} is not deterministic alone (two lone runs differ): held to its numerics tolerance"
    return {"status": statuses.PASS, "message": note, "examples": launches}


def _mixed_in(dev: Device, stream, entry: KernelEntry, entries: list[KernelEntry], run_seed: int,
              schema_values: Callable, strategy: Callable, passed: dict) -> Call | None:
    """The call mixed in: the first entry after this one in the table that runs."""
    for step in range(1, len(entries)):
        other = entries[(entry.index + step) % len(entries)]
        other_dtype = _dtype_of(other, dev.facts.get("supported_dtypes", 0))
        if other_dtype is None:
            continue
        try:
            return prepare(dev, stream, other, other_dtype, run_seed, schema_values, strategy, passed, variants=1)
        except NoCase:
            continue
    return None


def replay(library: str, op: str, variant: str, mixer_op: str, mixer_variant: str, dtype: str,
           mixer_dtype: str, case: dict | None, mixer_case: dict | None, rounds: int = 20) -> None:
    """Reproducer: the two calls alone, then `rounds` times in both pairings; prints each
    difference and exits 1 when there is one (a race may need several rounds)."""
    import sys

    from .harness import kernel_entries
    from .numerics import schema_values
    from .target import load

    plugin = load(library)
    table = kernel_entries(plugin)
    dev = Device(plugin, 0)
    stream = dev.new_stream()

    def make(name: str, variant_name: str, dtype_name: str, recipe: dict | None, variants: int) -> Call:
        entry = next(e for e in table if e.op == name and e.variant_name == variant_name)
        plan = compile_plan(name)
        values = (schema_values(plan, recipe) if recipe is not None
                  else random_checks.replayable_values(entry.op, dtype_name))
        call = Call(entry, plan, recipe, values, dtype_name)
        call.run_alone(dev, stream, variants)
        return call

    call = make(op, variant, dtype, case, VARIANTS)
    mixer = make(mixer_op, mixer_variant, mixer_dtype, mixer_case, 1)
    devices = [Device(plugin, i) for i in range(device_count(plugin))]
    bad = 0
    for round_ in range(rounds):
        for pairing, results in (("streams", streams_pairing(dev, (call, mixer))),
                                 ("devices", devices_pairing(devices, (call, mixer)))):
            for slot, got in results:
                problem = got if isinstance(got, str) else difference(slot.call, slot.variant, got)
                if problem:
                    bad += 1
                    print(f"round {round_ + 1}, {pairing}: {slot.call.entry.op} {slot.where}: {problem}")
    print(f"{bad} launch(es) differed from their lone run" if bad else "PASS")
    if bad:
        sys.exit(1)


def script(library: str, call: Call, mixer: Call) -> str:
    """A standalone reproducer of a concurrency failure."""
    return (f"# Torch-FL conformance reproducer: {call.entry.op} ({call.entry.variant_name}) launched at once "
            f"with itself and {mixer.entry.op}\n"
            "from conformance.concurrency import replay\n\n"
            f"CASE = {literal(call.case)}\n"
            f"MIXED_IN = {literal(mixer.case)}\n\n"
            f"replay({library!r}, {call.entry.op!r}, {call.entry.variant_name!r}, {mixer.entry.op!r}, "
            f"{mixer.entry.variant_name!r}, {call.dtype!r}, {mixer.dtype!r}, CASE, MIXED_IN)\n")

