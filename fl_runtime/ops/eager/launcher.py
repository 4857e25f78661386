"""The hot path: torch op -> vendor kernel on the current stream.

Each op any plugin implements gets one PyTorch kernel for PrivateUse1; per
call it finds the device, picks the vendor entry from the op table
(op_table.py) with one dict lookup, takes output layouts from the meta cache,
allocates outputs, orders the launch after pending writes on other streams,
marshals and launches.  A call signature that repeats runs the program the
first such call recorded (fast_path.py) instead.  Calls the vendor cannot take (no kernel on this
device, dtype not declared, a declined launch) go to the fallback chain.
While a profile is active, launches are timed and bracketed by vendor events.
"""
from __future__ import annotations

import functools
from time import perf_counter_ns
from typing import NoReturn

import torch

from fl_runtime import abi
from fl_runtime.abi import ffi
from fl_runtime.devices.registry import DeviceInfo
from fl_runtime.devices.storage import held_past_unwinding as _held_inputs
from fl_runtime.devices.storage import release_held, wrap_block
from fl_runtime.devices.streams import Event
from fl_runtime.errors import FLOutOfMemoryError, VendorError
from fl_runtime.ops import accounting, boundary, op_table
from fl_runtime.ops.eager import fast_path
from fl_runtime.ops.boundary import leave_runtime
from fl_runtime.ops.owned.copies import resolve_conj_on_device
from fl_runtime.ops.fallback.chain import FallbackChain, cross_device_error, mixed_devices_error
from fl_runtime.ops.eager.marshal import MarshalError, marshal, replay
from fl_runtime.ops.eager.meta_cache import OutputSpecCache
from fl_runtime.ops.op_table import KernelChoice
from fl_runtime.ops.schema import OpPlan, aten_op_exists, compile_plan

_FL_DTYPE = abi.DTYPE_TO_FL
_NATIVE = accounting.NATIVE
_pending_counts = accounting.pending
_FOLD_AT = accounting.FOLD_AT
_DECLINED = abi.ERROR_NOT_SUPPORTED   # launch_kernel's "not these arguments" (see fl_abi.h)
# The native bridge's switches (bridge/csrc/fast_path_switches.h)
NATIVE_HOOKED, NATIVE_CROSS_STREAM, NATIVE_HELD_INPUTS, NATIVE_DISABLED, NATIVE_CAPTURING = 1, 2, 4, 8, 16
_COMPLEX_FL_MASK = sum(1 << _FL_DTYPE[d] for d in (torch.complex32, torch.complex64, torch.complex128)
                       if d in _FL_DTYPE)


def resize_output(out: torch.Tensor, shape: tuple) -> None:
    """PyTorch's resize_output for an out= tensor of the wrong shape: resized in place,
    so the caller's tensor gets the result.  The deprecation warning for resizing a
    tensor that held elements comes from PyTorch itself, when the meta kernel ran
    resize_output on the meta copy (once per call signature: the meta result is memoized)."""
    out.resize_(shape)


def _lists_to_device(plan: OpPlan, values: list, device_index: int) -> bool:
    """CPU tensors in list arguments would reach the vendor as host addresses. As on CUDA,
    index lists (Tensor?[], e.g. x[cpu_index]) are copied to the device; any other tensor
    list (cat, stack) with a CPU tensor is the same-device error.  Returns whether it
    copied any (such a call gets no program: fast_path.py)."""
    moved = False
    for i in plan.list_tensor_arg_indices:
        items = values[i]
        if not items or not any(isinstance(t, torch.Tensor) and t.is_cpu for t in items):
            continue
        if str(plan.op._schema.arguments[i].type) != "List[Optional[Tensor]]":   # Tensor?[]
            raise mixed_devices_error(plan.qualified_name, device_index)
        values[i] = [t.to(f"fl:{device_index}") if isinstance(t, torch.Tensor) and t.is_cpu else t
                     for t in items]
        moved = True
    return moved


def _resolve_conjugates(plan: OpPlan, values: list) -> tuple[bool, str | None]:
    """fl_abi.h's fl_tensor ("kernel calling convention") is physical values with no
    conjugate bit, but PyTorch's Conjugate key lets mm, addmm, bmm, dot, vdot, their
    in-place and out= forms ... through to this kernel with the bit still set on complex
    tensors (the fallthrough list of ATen's ConjugateFallback.cpp).  Marshaled as is, a
    vendor would compute with `a` for `a.conj()`: silently wrong.  So a conjugate input
    is replaced in `values` by its resolved copy (made on the device:
    copies.resolve_conj_on_device), and a conjugate argument the op writes gets a
    reason to run the call on the CPU instead (a kernel would store un-conjugated
    values into it).
    Returns (whether an input was replaced, the reason or None).  Callers run it only
    for a kernel that declares a complex dtype (an int test; is_conj() per tensor costs
    ~0.1-0.2 us each): real tensors never have the bit (conjugating one is a no-op, and
    PyTorch resolves the negative bit before us), and the ops the Conjugate key lets
    through (matmul family, dot) require one dtype for all operands, which the vendor's
    mask covers as the main tensor's."""
    replaced = False
    for i in plan.tensor_arg_indices:
        t = values[i]
        if isinstance(t, torch.Tensor) and t.is_conj():
            if i in plan.written_arg_indices:
                return replaced, _conjugate_written(plan, i)
            values[i] = resolve_conj_on_device(t)
            replaced = True
    for i in plan.list_tensor_arg_indices:
        items = values[i]
        if items and any(isinstance(t, torch.Tensor) and t.is_conj() for t in items):
            if i in plan.written_arg_indices:
                return replaced, _conjugate_written(plan, i)
            values[i] = [resolve_conj_on_device(t) if isinstance(t, torch.Tensor) and t.is_conj() else t
                         for t in items]
            replaced = True
    return replaced, None


def _conjugate_written(plan: OpPlan, index: int) -> str:
    return (f"its argument '{plan.args[index].name}' is a conjugate view (.conj()) the op writes, and "
            "vendor kernels take physical values only (fl_abi.h, fl_tensor); pass a tensor without the "
            "conjugate bit (.resolve_conj()) to keep the call on the device")


def _declined_reason(device: DeviceInfo) -> str:
    raw = device.plugin.api.last_error_message()
    message = ffi.string(raw).decode(errors="replace") if raw != ffi.NULL else ""
    return f"launch_kernel returned FL_ERROR_NOT_SUPPORTED: {message or 'no message'}"
_is_autocast_enabled = torch.is_autocast_enabled


class Launcher:
    """Runs ops on vendor kernels; one per runtime."""

    def __init__(self, runtime) -> None:
        self.rt = runtime
        self.op_names: set[str] = runtime.op_names
        self._plans: dict[str, tuple[OpPlan, OutputSpecCache]] = {}
        self._programs: dict[str, dict] = {}    # op name -> its kernel's program cache (fast_path.py)
        switches = runtime.config.fallback
        self.chain = FallbackChain(self, switches.enable_generic_kernel, switches.enable_cpu_fallback)
        self.native = None        # the native bridge's module, where it serves the steady state (use_native)

    def use_native(self, native) -> None:
        """Let the native bridge serve every call whose signature has a program, in C++
        (bridge/csrc/eager_kernel.h; docs/users/native-bridge.md "Eager ops"): its kernels
        replace this launcher's Python ones at register(), which stay behind them for first
        calls, fallbacks and whatever a program cannot know - told to C++ as switches."""
        self.native = native
        native.configure_eager(self._native_launch_failure, tuple(s.key for s in self.rt.streams.default))
        accounting.on_hooked(lambda hooked: native.set_switch(NATIVE_HOOKED, hooked))
        accounting.also_count(native.take_counts)
        boundary.on_hold(lambda: native.set_switch(NATIVE_HELD_INPUTS, True))
        op_table.on_epoch(native.set_kernel_epoch)
        native.set_kernel_epoch(op_table.epoch())
        native.set_switch(NATIVE_HOOKED, accounting.HOOKED)
        native.set_switch(NATIVE_CROSS_STREAM, self.rt._cross_stream)

    def note_capturing(self, on: bool) -> None:
        """A graph capture records each launch through the kernel choices' launch_fn
        (ops/graph/graph_capture.py), which a C++-served call would bypass: while one is active,
        every call takes its Python kernel."""
        if self.native is not None:
            self.native.set_switch(NATIVE_CAPTURING, on)

    def note_cross_stream(self) -> None:
        """Writes are tracked per stream from now on (runtime.order_after_writers): the
        C++ kernels do the same for the calls they serve (bridge/csrc/stream_order.h)."""
        if self.native is not None:
            self.native.set_switch(NATIVE_CROSS_STREAM, True)

    def register_view(self, name: str) -> bool:
        """Give a metadata-only view PyTorch's CPU kernel in C++ (no Python on the call);
        False on the Python route, whose caller registers its own."""
        if self.native is None:
            return False
        self.native.register_view(name)
        return True

    def register_owned(self, library, name: str, kernel, program_of=None,
                       sizes: tuple[tuple[int, int, int], ...] = ()) -> None:
        """The PrivateUse1 kernel of an op the runtime owns whose device part is this launcher's
        launch() (the in-place foreach ops, copy_).  With the bridge, a C++ kernel serves each call
        signature whose launch recorded a program (so the owner's checks passed for it: they
        read only what the call key holds) and sends the rest to `kernel`.  `program_of(args,
        kwargs)`, for an owner whose launch() takes other arguments than it was called with,
        names the program `kernel` launched for such a call, or None (the default: the program
        of launch(name, args, kwargs)).  `sizes`: the op's int returns, which a launch leaves
        empty and `kernel` fills with an argument's size, as (output, argument, dim) triples in
        output order, so that C++ fills them alike (the overrideable attention's max_q, max_k)."""
        if self.native is None:
            library.impl(name, kernel, "PrivateUse1")
        else:
            self.native.register_eager_op(name, boundary.leaves_runtime(kernel),
                                          program_of or functools.partial(self.native_program, name), sizes)

    def native_program(self, name: str, args: tuple, kwargs: dict) -> tuple | None:
        """The program this call's signature recorded, as the C++ kernel replays it
        (fast_path.native_spec), or None; asked by that kernel after a call it sent here."""
        program = self.program_for(name, args, kwargs)
        if program is None:
            return None
        epoch = op_table.epoch()
        cached = program.native
        if cached is None or cached[0] != epoch:
            cached = program.native = (epoch, fast_path.native_spec(program, name, epoch))
        return cached[1]

    def _native_launch_failure(self, name: str, device_index: int, status: int) -> NoReturn:
        _raise_launch_failure(self.rt.device(device_index), status, name)

    def register(self, library: torch.library.Library, op_names: set[str], skip: set[str]) -> list[str]:
        """Give PyTorch a PrivateUse1 kernel for each op not in `skip` (ops the runtime
        implements itself, e.g. copy_, which call launch() for their device part).
        Returns the names PyTorch does not know.  An op's plan is compiled at its first
        call, not here: most of a program's ~230 ops never run, and compiling them all
        cost every start-up ~6 ms (docs/benchmarks/index.md "Start-up")."""
        unknown = []
        native = self.native
        for name in sorted(op_names - skip):
            if not aten_op_exists(name):
                unknown.append(name)
            elif native is not None:
                native.register_eager_op(name, self._make_kernel(name), functools.partial(self.native_program, name))
            else:
                library.impl(name, self._make_kernel(name), "PrivateUse1")
        return unknown

    def _plan(self, name: str) -> tuple[OpPlan, OutputSpecCache]:
        found = self._plans.get(name)
        if found is None:
            plan = compile_plan(name)      # threads: compiled outside a lock, first insert wins
            found = self._plans.setdefault(name, (plan, OutputSpecCache(plan)))
        return found

    def plan(self, name: str) -> OpPlan:
        """Op `name`'s plan (its schema read once, compiled at first use and shared with launch())."""
        return self._plan(name)[0]

    def programs(self, name: str) -> dict:
        """The per-signature programs op `name` has recorded so far (call key -> Program;
        empty for an op that never gets them); for diagnostics and tests."""
        return dict(self._programs.get(name, {}))

    def program_for(self, name: str, args: tuple, kwargs: dict):
        """The per-signature program a call of `name` with these arguments (as its kernel
        receives them) runs, or None (fast_path.py); the graph path reads it
        (launch_list.py)."""
        programs = self._programs.get(name)
        if not programs:
            return None
        try:
            return programs.get(fast_path.call_key(args, kwargs))
        except TypeError:
            return None

    def has_kernel(self, device_index: int, name: str, dtype: torch.dtype) -> bool:
        choice = self.rt.device(device_index).kernels.get(name)
        return choice is not None and bool((choice.dtypes >> abi.DTYPE_TO_FL[dtype]) & 1)

    def native_accepts(self, device_index: int, name: str, args: tuple, kwargs: dict) -> bool:
        """Whether the vendor kernel for `name` on this device takes these arguments'
        dtypes (the test launch() makes; used to decide fallbacks without running)."""
        choice = self.rt.device(device_index).kernels.get(name)
        if choice is None:
            return False
        plan, _ = self._plan(name)
        values = plan.normalize(args, kwargs)
        main = values[plan.tensor_arg_indices[0]] if plan.tensor_arg_indices else None
        return not isinstance(main, torch.Tensor) or bool((choice.dtypes >> _FL_DTYPE[main.dtype]) & 1)

    def _make_kernel(self, name: str):
        launch = self._launch_planned
        run = self._run_program
        call_key = fast_path.call_key
        positional_key = fast_path.positional_key
        # Bound at the first call (see register) and then read from the closure: a call pays
        # no lookup for them.  `plan` is stored last, so a thread that sees it set also sees
        # the other two (a racing first call compiles the same plan; _plan keeps one).
        plan = spec_cache = programs = None

        def kernel(*args, **kwargs):
            nonlocal plan, spec_cache, programs
            try:
                if plan is None:
                    compiled, cache = self._plan(name)
                    spec_cache = cache
                    # call key -> fast_path.Program, for ops whose calls can have programs
                    programs = self._programs.setdefault(name, {}) if fast_path.eligible(compiled) else None
                    plan = compiled
                if programs is None or accounting.HOOKED:   # a profile or phase timing: the full path reports
                    return launch(name, plan, spec_cache, args, kwargs)
                try:
                    key = call_key(args, kwargs) if kwargs else positional_key(args)
                    program = programs.get(key)
                except TypeError:              # an unhashable argument: no program
                    return launch(name, plan, spec_cache, args, kwargs)
                if program is not None:
                    return run(name, plan, spec_cache, program, args, kwargs)
                return launch(name, plan, spec_cache, args, kwargs, programs, key)
            except BaseException as exc:      # ops.boundary, inline: this is the hot path
                leave_runtime(exc, (args, kwargs))
                del args, kwargs, exc
                raise
        kernel.__name__ = f"fl_{name.replace('.', '_')}"
        return kernel

    def _run_program(self, name: str, plan: OpPlan, spec_cache: OutputSpecCache, program, args: tuple,
                     kwargs: dict):
        """A call whose signature has a program (fast_path.py): what _launch_planned would do
        for it, less the decisions the program holds."""
        if _held_inputs:
            release_held()
        choice = program.choice
        device = program.device
        if device.kernels.get(name) is not choice or (choice.autocast is not None and _is_autocast_enabled("fl")):
            return self._launch_planned(name, plan, spec_cache, args, kwargs)
        values = plan.normalize(args, kwargs) if kwargs else [*args, *program.tail]
        rt = self.rt
        index = program.device_index
        streams = rt.streams
        stream = streams.current(index) if streams.any_current else streams.default[index]
        single = program.single_new
        if single is not None:
            allocator = program.allocator
            outputs = [wrap_block(allocator.allocate_rounded(single.size, stream), allocator.release, index,
                                  single.shape, single.stride, single.dtype)]
        else:
            outputs = self._program_outputs(program, values, stream)
        try:
            try:
                c_args, count = replay(plan, values, outputs, program.entry)
            except MarshalError as exc:
                outputs.clear()
                return self.chain.run_on_cpu(plan.op, args, kwargs, index, str(exc))
            if rt._cross_stream:
                rt.order_after_writers(index, stream, values, outputs)
            status = choice.launch_fn(stream.handle, choice.entry, c_args, count)
            if status != abi.SUCCESS:
                if status == _DECLINED:
                    outputs.clear()
                    return self.chain.run_on_cpu(plan.op, args, kwargs, index, _declined_reason(device))
                _raise_launch_failure(device, status, name)
        except BaseException:
            _drop(outputs)
            raise
        _pending_counts.append(program.count_key)       # accounting.record_key, inlined
        if len(_pending_counts) > _FOLD_AT:
            accounting.fold()
        return outputs[0] if len(outputs) == 1 else _result(outputs)

    def _program_outputs(self, program, values: list, stream) -> list:
        outputs = []
        try:
            for out in program.outputs:
                if out.alias is not None:
                    outputs.append(values[out.alias])
                elif out.shape is None:
                    outputs.append(None)
                else:
                    allocator = program.allocator
                    outputs.append(wrap_block(allocator.allocate_rounded(out.size, stream), allocator.release,
                                              program.device_index, out.shape, out.stride, out.dtype))
        except BaseException:      # e.g. out of memory at the second output: free the first
            _drop(outputs)
            raise
        return outputs

    def launch(self, name: str, args: tuple, kwargs: dict):
        """Run op `name` (a kernel-table name) on the vendor, or through the fallback chain
        (the runtime-owned ops' device part: copy_, fused attention, foreach)."""
        plan, spec_cache = self._plan(name)
        if accounting.HOOKED or not fast_path.eligible(plan):
            return self._launch_planned(name, plan, spec_cache, args, kwargs)
        programs = self._programs.setdefault(name, {})
        try:
            key = fast_path.call_key(args, kwargs)
            program = programs.get(key)
        except TypeError:              # an unhashable argument: no program
            return self._launch_planned(name, plan, spec_cache, args, kwargs)
        if program is not None:
            return self._run_program(name, plan, spec_cache, program, args, kwargs)
        return self._launch_planned(name, plan, spec_cache, args, kwargs, programs, key)

    def _launch_planned(self, name: str, plan: OpPlan, spec_cache: OutputSpecCache, args: tuple, kwargs: dict,
                        programs: dict | None = None, key=None):
        """The full path.  With `programs`, a call launched natively records its program
        under `key` (fast_path.py), so the next call of the signature skips this.  While
        phases are timed (accounting.PhaseTimes: benchmarks/host_cost.py), each phase's end
        is reported to them: the same path, with a clock read at each boundary."""
        if _held_inputs:
            release_held()
        times = accounting.PHASES
        if times is None:
            return self._full_path(name, plan, spec_cache, args, kwargs, programs, key, None)
        times.enter()
        try:
            return self._full_path(name, plan, spec_cache, args, kwargs, None, None, times)
        finally:
            times.leave()

    def _full_path(self, name: str, plan: OpPlan, spec_cache: OutputSpecCache, args: tuple, kwargs: dict,
                   programs: dict | None, key, times: accounting.PhaseTimes | None):
        prof = accounting.ACTIVE
        start = perf_counter_ns() if prof is not None else 0
        values = plan.normalize(args, kwargs)
        device = self._device_of(plan, values)
        choice = device.kernels.get(name)
        if choice is not None and choice.autocast is not None and _is_autocast_enabled("fl"):
            choice = choice.autocast
        main = values[plan.tensor_arg_indices[0]] if plan.tensor_arg_indices else None
        if times is not None:
            times.lap(accounting.NORMALIZE)
        if choice is None or (isinstance(main, torch.Tensor) and not (choice.dtypes >> _FL_DTYPE[main.dtype]) & 1):
            return _fall_back(times, self.chain.run, plan.op, args, kwargs, device.index)
        if plan.list_tensor_arg_indices and _lists_to_device(plan, values, device.index):
            programs = None        # the copies are this call's: a program would not make them
        if choice.dtypes & _COMPLEX_FL_MASK:     # conjugate views: see _resolve_conjugates
            resolved, refusal = _resolve_conjugates(plan, values)
            if refusal is not None:
                return _fall_back(times, self.chain.run_on_cpu, plan.op, args, kwargs, device.index, refusal)
            if resolved:
                programs = None    # as for the list copies above
        try:
            entry = spec_cache.lookup(values)
        except (NotImplementedError, RuntimeError) as exc:
            return _fall_back(times, self.chain.run_on_cpu, plan.op, args, kwargs, device.index,
                              f"its meta kernel failed ({exc})")
        rt = self.rt
        stream = rt.streams.current(device.index)
        if programs is not None and _resizes_an_out(plan, values, entry.specs):
            programs = None        # the key holds the out= tensor's shape before this resize
        if times is not None:
            times.lap(accounting.LAYOUT)
        outputs = self._outputs(plan, values, entry.specs, device, stream)
        if times is not None:
            times.lap(accounting.ALLOCATE)
        try:
            try:
                c_args, count = marshal(plan, values, outputs,
                                        rt.rng.taker(device.index) if plan.has_generator else None, entry)
            except MarshalError as exc:
                outputs.clear()        # the CPU run makes its own
                return _fall_back(times, self.chain.run_on_cpu, plan.op, args, kwargs, device.index, str(exc))
            if times is not None:
                times.lap(accounting.MARSHAL)
            rt.order_after_writers(device.index, stream, values, outputs)
            if times is not None:
                times.lap(accounting.ORDER)
            if prof is None:
                status = choice.launch_fn(stream.handle, choice.entry, c_args, count)
            else:
                status = self._profiled_launch(prof, start, plan.qualified_name, choice, device, stream,
                                               c_args, count)
            if status != abi.SUCCESS:
                if status == _DECLINED:    # nothing was enqueued; the outputs are simply dropped
                    outputs.clear()
                    return _fall_back(times, self.chain.run_on_cpu, plan.op, args, kwargs, device.index,
                                      _declined_reason(device))
                _raise_launch_failure(device, status, name)
        except BaseException:
            _drop(outputs)
            raise
        if prof is None:
            accounting.record(plan.qualified_name, _NATIVE)
            # Only for the table's own entry: a call under autocast that took the fast variant
            # would record a program every later call has to turn away.
            if programs is not None and choice is device.kernels.get(name) and len(programs) < fast_path.MAX_PROGRAMS:
                program = fast_path.build(plan, choice, device, rt.allocators[device.index], args, kwargs,
                                          values, entry.specs, entry, outputs)
                if program is not None:
                    programs.setdefault(key, program)
        if times is not None:
            times.lap(accounting.LAUNCH)
        return _result(outputs)

    @staticmethod
    def _profiled_launch(prof, start: int, name: str, choice: KernelChoice, device: DeviceInfo,
                         stream, c_args, count: int) -> int:
        """launch_kernel between two vendor events, timed on the host (profiles only)."""
        begin, end = prof.device_events(device, stream, Event)
        status = choice.launch_fn(stream.handle, choice.entry, c_args, count)
        if status == abi.SUCCESS:
            row = prof.add(name, _NATIVE, choice.variant_name, start)
            prof.end_device_span(row, device.index, begin, end, stream)
            accounting.record(name, _NATIVE)
        return status

    def _device_of(self, plan: OpPlan, values: list) -> DeviceInfo:
        found = -1
        cpu_operand = False
        for i in plan.tensor_arg_indices:
            t = values[i]
            if isinstance(t, torch.Tensor):
                index = t.get_device()       # -1 for CPU tensors (wrapped scalars)
                if index < 0:
                    cpu_operand = cpu_operand or t.dim() != 0
                elif found < 0:
                    found = index
                elif index != found:
                    raise cross_device_error(plan.qualified_name, found, index)
        if cpu_operand and found >= 0:   # as CUDA: only 0-dim CPU tensors mix with device tensors
            raise mixed_devices_error(plan.qualified_name, found)
        if found < 0:
            for i in plan.list_tensor_arg_indices:
                for t in values[i] or ():
                    if t is not None and t.get_device() >= 0:
                        found = t.get_device()
                        break
        return self.rt.devices[found] if found >= 0 else self.rt.device(0)

    def _outputs(self, plan: OpPlan, values: list, specs, device: DeviceInfo, stream) -> list:
        outputs = []
        try:
            for alias_index, spec, is_out in zip(plan.returns_alias, specs, plan.out_returns):
                if alias_index is not None:
                    if is_out and spec is not None and values[alias_index].shape != spec[0]:
                        resize_output(values[alias_index], spec[0])
                    outputs.append(values[alias_index])
                elif spec is None:
                    outputs.append(None)
                else:
                    outputs.append(self.rt.new_tensor_from_spec(device.index, spec, stream))
        except BaseException:      # e.g. out of memory at the second output: free the first
            _drop(outputs)
            raise
        return outputs


def _fall_back(times: accounting.PhaseTimes | None, run, *call):
    """A call the fallback chain runs; under phase timing, its time (less the launches it
    made itself, which report their own phases) is the "fallback" phase."""
    if times is None:
        return run(*call)
    try:
        return run(*call)
    finally:
        times.lap(accounting.FALLBACK)


def _resizes_an_out(plan: OpPlan, values: list, specs) -> bool:
    """Whether _outputs will resize an out= argument for this call (a call a program must
    not replay: it would pass the unresized tensor)."""
    return any(is_out and spec is not None and values[alias].shape != spec[0]
               for alias, spec, is_out in zip(plan.returns_alias, specs, plan.out_returns))


def _result(outputs: list):
    """What the PyTorch kernel returns: the output, a tuple of them, or None for an op
    that returns nothing (`-> ()`: the in-place tensor-list ops such as _fused_adamw_
    and _foreach_add_), which PyTorch requires to be None, not an empty tuple."""
    if len(outputs) == 1:
        return outputs[0]
    return tuple(outputs) if outputs else None


def _drop(outputs: list) -> None:
    """Let go of the outputs a failed launch allocated, now, while the exception is being
    handled.  Otherwise the traceback's frames would keep them - for as long as the caller
    keeps the exception (a REPL keeps the last one) - and if they died later while Python
    was unwinding, their deleter would run with an exception pending (docs/users/limits.md
    "Errors and memory")."""
    outputs.clear()


def _raise_launch_failure(device: DeviceInfo, status: int, name: str) -> NoReturn:
    """Raise for a failed launch_kernel: out of memory is FLOutOfMemoryError (a
    torch.OutOfMemoryError, so code that catches it to retry smaller still can),
    anything else the plugin's VendorError."""
    call = f"launch_kernel({name}) on fl:{device.index}"
    if status == abi.ERROR_OUT_OF_MEMORY:
        raw = device.plugin.api.last_error_message()
        message = ffi.string(raw).decode(errors="replace") if raw != ffi.NULL else "no message"
        raise FLOutOfMemoryError(f"{call}: the kernel ran out of device memory ({message}); free tensors, "
                                 "call torch.fl.empty_cache() or use smaller inputs")
    device.plugin.check(status, call)
    raise VendorError(call, status, abi.STATUS_NAMES.get(status, f"status {status}"),
                      "launch_kernel reported a failure that check() accepted", device.plugin.name)
