"""The fallback chain (docs/users/profiling.md): where an op with no usable vendor kernel runs.

    vendor kernel -> generic kernel (decomposition) -> CPU fallback -> UnsupportedOpError

The decision is made once per (device, op, dtypes of the tensor arguments) and
cached (docs/users/profiling.md): the first call pays for tracing the decomposition on meta
tensors, later calls pay one dict lookup.  The config switches
(`fallback.enable_generic_kernel`, `fallback.enable_cpu_fallback`) are read
when deciding; TORCH_FL_STRICT=1 is read on every fallback call, so a
debugging session can flip it without restarting, and makes any fallback
(generic or CPU) an error.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils._pytree import tree_leaves

from fl_runtime.abi import DTYPE_TO_FL
from fl_runtime.errors import UnsupportedOpError
from fl_runtime.logs import logger
from fl_runtime.ops import accounting
from fl_runtime.ops.fallback import generic
from fl_runtime.ops.fallback.cpu import cpu_fallback, has_cpu_kernel, is_view_op
from fl_runtime.ops.owned.rng import stand_ins_for_cpu
from fl_runtime.ops.schema import numbers_as_tensors, tensor_slots

UNSUPPORTED = "unsupported"
# Ops PyTorch writes for CUDA only (e.g. _thnn_fused_lstm_cell): copying them to the
# CPU would only trade our error for PyTorch's raw NotImplementedError.
_NO_CPU_KERNEL = "no CPU fallback (PyTorch has no CPU kernel for it)"
_MAX_DEPTH = 8      # decompositions nest a few levels; deeper means a cycle we did not see
_UNKNOWN = object()   # not yet in the feasibility cache (None there means "feasible")


@dataclass(frozen=True)
class Decision:
    """Where one (device, op, dtypes) runs, and why when it cannot run at all."""
    path: str                              # accounting.GENERIC, accounting.CPU or UNSUPPORTED
    decomposition: Callable | None = None
    reason: str = ""


def kernel_name(op: torch._ops.OpOverload) -> str:
    """'aten::add.Tensor' -> 'add.Tensor', 'aten::mm' -> 'mm' (as kernel tables name ops)."""
    base = op._schema.name.split("::", 1)[-1]
    return base if op._overloadname == "default" else f"{base}.{op._overloadname}"


def dtype_signature(args, kwargs) -> tuple:
    """The dtypes of a call's tensors, in argument order (lists' entries in place).  An aten
    call's arguments nest at most a list deep; a plain walk, as pytree's took ~10 us a call."""
    dtypes = []
    for value in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(value, torch.Tensor):
            dtypes.append(value.dtype)
        elif isinstance(value, (list, tuple)):
            dtypes.extend(t.dtype for t in value if isinstance(t, torch.Tensor))
    return tuple(dtypes)


def mixed_devices_error(op_name: str, device_index: int) -> RuntimeError:
    """The error CUDA raises when a CPU tensor (not a 0-dim scalar) meets a device tensor."""
    return RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                        f"fl:{device_index} and cpu! (in {op_name}: move the CPU tensor with .to('fl:"
                        f"{device_index}'); only 0-dim CPU tensors may be mixed with fl tensors)")


def cross_device_error(op_name: str, first: int, other: int) -> RuntimeError:
    """The error CUDA raises for tensors of two devices in one op, with the way out."""
    return RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                        f"fl:{first} and fl:{other}! (in {op_name}: move one with .to('fl:{first}') or "
                        f".to('fl:{other}'); copies between fl devices are explicit, as between GPUs)")


def check_no_cpu_operands(op: torch._ops.OpOverload, args: tuple, kwargs: dict, device_index: int) -> None:
    """Refuse a CPU tensor with dimensions among an op's Tensor / Tensor[] arguments, and fl
    tensors of two devices, as CUDA does: the fallbacks would otherwise compute with them
    (on the CPU, two devices' tensors meet silently). 0-dim CPU tensors (PyTorch's wrapped
    numbers) and index lists (Tensor?[], which CUDA lets live on the CPU) are allowed."""
    seen = -1
    for index, name, kwarg_only, is_list in tensor_slots(op):
        value = kwargs.get(name) if kwarg_only or index >= len(args) else args[index]
        for t in (value or ()) if is_list else (value,):
            if not isinstance(t, torch.Tensor):
                continue
            if t.device.type == "cpu":
                if t.dim() != 0:
                    raise mixed_devices_error(op.name(), device_index)
                continue
            index = t.get_device()
            if seen < 0:
                seen = index
            elif 0 <= index != seen:
                raise cross_device_error(op.name(), seen, index)


def strict() -> bool:
    return os.environ.get("TORCH_FL_STRICT", "") not in ("", "0")


class _Running(threading.local):
    """Per thread: the (device, op) pairs whose generic kernel is running now, and the
    decisions being traced now (a cycle is a cycle only within one thread's tracing:
    another thread deciding the same op at the same time is not one)."""

    def __init__(self) -> None:
        self.keys: set[tuple] = set()
        self.in_progress: set[tuple] = set()


class FallbackChain:
    """Decides and runs the fallback path of ops on one runtime's devices."""

    def __init__(self, launcher, enable_generic_kernel: bool = True, enable_cpu_fallback: bool = True) -> None:
        self.launcher = launcher
        self._decisions: dict[tuple, Decision] = {}
        # Threads: both caches are filled with setdefault after deciding outside any lock,
        # so a decision made by two threads at once is the same and the first one stays.
        self._feasible: dict[tuple, str | None] = {}   # key -> None (feasible) or the problem
        self._running = _Running()
        # Ops whose PrivateUse1 kernel is the native bridge's C++ run of their generic kernel
        # (bridge/csrc/fallback_decompositions.h): not native, though PyTorch lists a kernel.
        self.cpp_generic: set[torch._ops.OpOverload] = set()
        self._on_configure: list[Callable[[], None]] = []
        self.configure(enable_generic_kernel, enable_cpu_fallback)

    def on_configure(self, listener: Callable[[], None]) -> None:
        """Call `listener()` whenever configure() forgets the decisions (the bridge's copy of them)."""
        self._on_configure.append(listener)

    def configure(self, enable_generic_kernel: bool, enable_cpu_fallback: bool) -> None:
        """Set the two switches; forgets earlier decisions (and what it knew of the
        vendor's kernel tables, so a changed table is seen too)."""
        self.enable_generic = enable_generic_kernel
        self.enable_cpu = enable_cpu_fallback
        self._decisions.clear()
        self._feasible.clear()
        for listener in self._on_configure:
            listener()

    # -- running -----------------------------------------------------------------
    def run(self, op: torch._ops.OpOverload, args: tuple, kwargs: dict, device_index: int):
        """Run `op` through its fallback path on fl:device_index (or raise UnsupportedOpError)."""
        check_no_cpu_operands(op, args, kwargs, device_index)
        args, kwargs = numbers_as_tensors(op, args, kwargs)
        decision = self.decide(op, args, kwargs, device_index)
        if decision.path == UNSUPPORTED:
            raise UnsupportedOpError(op.name(), f"fl:{device_index}", decision.reason)
        if strict():
            raise UnsupportedOpError(op.name(), f"fl:{device_index}",
                                     f"TORCH_FL_STRICT is set and the op would run through the "
                                     f"{decision.path} fallback; unset it to allow fallbacks, or ask the "
                                     "plugin's vendor for a kernel")
        if decision.path == accounting.GENERIC:
            return self._run_generic(op, decision.decomposition, args, kwargs, device_index)
        return self._cpu(op, args, kwargs, device_index)

    def _run_generic(self, op, decomposition, args: tuple, kwargs: dict, device_index: int):
        key = (device_index, op)
        if key in self._running.keys:      # a decomposition calling its own op would never end
            return self.run_on_cpu(op, args, kwargs, device_index, "its generic kernel calls itself")
        start = time.perf_counter_ns()
        self._running.keys.add(key)
        try:
            result = generic.run(decomposition, args, kwargs)
        except Exception as exc:
            if not self.enable_cpu:
                raise
            failure = f"its generic kernel failed: {type(exc).__name__}: {exc}"
        else:
            self._account(op.name(), accounting.GENERIC, start, 0)
            return result
        finally:
            self._running.keys.discard(key)
        return self.run_on_cpu(op, args, kwargs, device_index, failure)

    def run_on_cpu(self, op: torch._ops.OpOverload, args: tuple, kwargs: dict, device_index: int, why: str):
        """The CPU fallback for a call the vendor kernel cannot take after all (`why`:
        its meta kernel failed, an argument the ABI cannot carry), when allowed."""
        check_no_cpu_operands(op, args, kwargs, device_index)
        self.check_cpu_allowed(op.name(), device_index, f"the vendor kernel cannot take this call ({why})")
        if not has_cpu_kernel(op):
            raise UnsupportedOpError(op.name(), f"fl:{device_index}", f"the vendor kernel cannot take this call "
                                     f"({why}) and {_NO_CPU_KERNEL}; ask the plugin's vendor for a kernel")
        logger.debug("%s: %s; using the CPU fallback", op.name(), why)
        return self._cpu(op, *numbers_as_tensors(op, args, kwargs), device_index, why)

    def check_cpu_allowed(self, name: str, device_index: int, why: str) -> None:
        """Raise UnsupportedOpError when TORCH_FL_STRICT or the config forbids the CPU fallback."""
        if strict() or not self.enable_cpu:
            switch = ("TORCH_FL_STRICT is set" if strict() else
                      "the CPU fallback is off (fallback.enable_cpu_fallback: false)")
            raise UnsupportedOpError(name, f"fl:{device_index}", f"{why} and {switch}; turn the fallback on, "
                                     "move this step to the CPU yourself, or ask the plugin's vendor for a kernel")

    def _cpu(self, op, args: tuple, kwargs: dict, device_index: int, why: str | None = None):
        start = time.perf_counter_ns()
        args, kwargs = stand_ins_for_cpu(op, args, kwargs, self.launcher.rt.rng.taker(device_index))
        result, nbytes = cpu_fallback(op, args, kwargs, device_index, why)
        self._account(op.name(), accounting.CPU, start, nbytes)
        return result

    @staticmethod
    def _account(name: str, path: str, start_ns: int, nbytes: int) -> None:
        accounting.record(name, path)
        active = accounting.ACTIVE
        if active is not None:
            active.add(name, path, None, start_ns, nbytes)

    # -- deciding ----------------------------------------------------------------
    def decide(self, op: torch._ops.OpOverload, args: tuple, kwargs: dict, device_index: int) -> Decision:
        """The cached fallback decision for this call's (device, op, dtypes)."""
        key = (device_index, op, dtype_signature(args, kwargs))
        found = self._decisions.get(key)
        if found is None:
            found = self._decisions.setdefault(key, self._decide(op, args, kwargs, device_index))
            logger.debug("%s on fl:%d with %s: %s %s", op.name(), device_index, key[2], found.path, found.reason)
        return found

    def classify(self, op: torch._ops.OpOverload, args: tuple, kwargs: dict, device_index: int) -> str:
        """native / generic / cpu / unsupported for one call, without running it
        (views and runtime-implemented ops count as native)."""
        if self._runs_natively(op, args, kwargs, device_index):
            return accounting.NATIVE
        return self.decide(op, args, kwargs, device_index).path

    def _decide(self, op, args, kwargs, device_index: int) -> Decision:
        reasons = []
        if not self.enable_generic:
            reasons.append("the generic kernel is off (fallback.enable_generic_kernel: false)")
        else:
            decomposition = generic.decomposition_of(op)
            problem = ("PyTorch has no decomposition of it" if decomposition is None else
                       self._generic_problem(op, decomposition, args, kwargs, device_index, 0))
            if problem is None:
                return Decision(accounting.GENERIC, decomposition)
            reasons.append(f"no generic kernel ({problem})")
        if self.enable_cpu and has_cpu_kernel(op):
            return Decision(accounting.CPU, reason="; ".join(reasons))
        reasons.append(_NO_CPU_KERNEL if self.enable_cpu else
                       "the CPU fallback is off (fallback.enable_cpu_fallback: false)")
        dtypes = ", ".join(sorted({str(d).removeprefix("torch.") for d in dtype_signature(args, kwargs)}))
        remedy = ("turn a fallback on in the config, move this step to the CPU yourself, or ask the plugin's "
                  "vendor for a kernel" if not (self.enable_cpu and self.enable_generic) else
                  "move this step to the CPU yourself or ask the plugin's vendor for a kernel")
        return Decision(UNSUPPORTED, reason=f"the vendor has no kernel for it{f' for {dtypes}' if dtypes else ''}; "
                        + "; ".join(reasons) + "; " + remedy)

    def _generic_problem(self, op, decomposition, args, kwargs, device_index: int, depth: int) -> str | None:
        """None when every leaf of the decomposition runs on fl; else what does not."""
        key = (device_index, op, dtype_signature(args, kwargs))
        known = self._feasible.get(key, _UNKNOWN)
        if known is not _UNKNOWN:
            return known
        in_progress = self._running.in_progress
        if key in in_progress or depth > _MAX_DEPTH:
            return f"'{op.name()}' decomposes into itself"
        in_progress.add(key)
        try:
            problem = self._leaves_problem(decomposition, args, kwargs, device_index, depth)
        finally:
            in_progress.discard(key)
        return self._feasible.setdefault(key, problem)

    def _leaves_problem(self, decomposition, args, kwargs, device_index: int, depth: int) -> str | None:
        try:
            leaves = generic.trace_leaves(decomposition, args, kwargs)
        except generic.InfeasibleDecomposition as exc:
            return f"its decomposition cannot be traced: {exc}"
        for leaf in leaves:
            foreign = _foreign_dtype(leaf)
            if foreign is not None:      # e.g. eye's decomposition counts in uint16
                return f"it makes {foreign} tensors, which the Torch-FL ABI cannot hold"
            if generic.routes_to_out(leaf[0]):      # on fl it lands on its out= overload: judge that
                routed = generic.out_call(*leaf)
                if routed is None:
                    return f"it needs '{leaf[0].name()}', whose out= call cannot be checked"
                leaf = routed
            func, leaf_args, leaf_kwargs, _ = leaf
            if self._runs_natively(func, leaf_args, leaf_kwargs, device_index):
                continue
            inner = generic.implicit_or_table_decomposition(func)
            if inner is None:
                return f"it needs '{func.name()}', which has neither a vendor kernel nor a decomposition"
            problem = self._generic_problem(func, inner, leaf_args, leaf_kwargs, device_index, depth + 1)
            if problem is not None:
                return f"it needs '{func.name()}': {problem}"
        return None

    def _runs_natively(self, func, args, kwargs, device_index: int) -> bool:
        """A vendor kernel takes these dtypes, or it is a view or an op the runtime implements."""
        if not isinstance(func, torch._ops.OpOverload):
            return False
        if is_view_op(func):
            return True
        name = kernel_name(func)
        if func.namespace == "aten" and name in self.launcher.op_names:
            return self.launcher.native_accepts(device_index, name, args, kwargs)
        # An op with its own PrivateUse1 kernel is implemented by the runtime (copies,
        # allocation).  An aten op with a CompositeExplicitAutograd kernel (clone,
        # full_like ...) never reaches the chain: PyTorch runs that composite on fl and its
        # inner calls take their own paths.  CompositeExplicitAutogradNonFunctional
        # kernels (gelu, erfcx ...) call the op's out= overload, which does reach the chain,
        # and prims call back into aten: neither counts as native.
        if func in self.cpp_generic:
            return False
        qualified = func.name()
        if torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "PrivateUse1"):
            return True
        return (func.namespace == "aten" and not generic.routes_to_out(func)
                and torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "CompositeExplicitAutograd"))


def _foreign_dtype(leaf) -> torch.dtype | None:
    """A dtype of the leaf's tensors (arguments or results) that fl tensors cannot have."""
    _, args, kwargs, result = leaf
    for value in tree_leaves((args, kwargs, result)):
        if isinstance(value, torch.Tensor) and value.dtype not in DTYPE_TO_FL:
            return value.dtype
    return None
