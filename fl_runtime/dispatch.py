"""Op table and the hot path: torch op -> vendor kernel on the current stream.

The op table is built once at start-up from every device's kernel table (F7).
Each op any plugin implements gets one PyTorch kernel for PrivateUse1; per
call it finds the device, picks the vendor entry with one dict lookup, takes
output layouts from the meta cache, allocates outputs, orders the launch after
pending writes on other streams, marshals and launches.  Calls the vendor
cannot take (no kernel on this device, dtype not declared) go to the CPU
fallback.
"""
from __future__ import annotations

import torch

from . import abi, op_stats
from .abi import ffi
from .devices import DeviceInfo
from .fallback import run_on_cpu
from .logs import logger
from .marshal import MarshalError, marshal
from .schema import OpPlan, compile_plan
from .shapes import OutputSpecCache

_FL_DTYPE = abi.DTYPE_TO_FL


class KernelChoice:
    """The vendor entry for one (device, op): the variant the policy picked."""
    __slots__ = ("entry", "dtypes", "variant", "launch_fn")

    def __init__(self, entry, dtypes: int, variant: int, launch_fn) -> None:
        self.entry = entry
        self.dtypes = dtypes
        self.variant = variant
        self.launch_fn = launch_fn     # the plugin's launch_kernel, fetched once


def build_op_table(devices: list[DeviceInfo], variant_policy: str = "precise") -> set[str]:
    """Fill each device's `kernels` map; return the union of op names."""
    per_plugin: dict[int, dict[str, KernelChoice]] = {}
    for dev in devices:
        plugin = dev.plugin
        if id(plugin) not in per_plugin:
            try:
                per_plugin[id(plugin)] = _read_kernel_table(plugin, variant_policy)
            except Exception as exc:   # its devices still work, through the fallbacks
                logger.warning("plugin '%s' gave no usable kernel table (%s); every op on its "
                               "devices will use the fallbacks", plugin.name, exc)
                per_plugin[id(plugin)] = {}
        dev.kernels = per_plugin[id(plugin)]
    return {name for table in per_plugin.values() for name in table}


def _read_kernel_table(plugin, variant_policy: str) -> dict[str, KernelChoice]:
    entries = ffi.new("fl_kernel_entry**")
    count = ffi.new("uint32_t*")
    plugin.check(plugin.api.kernel_table(ffi.cast("const fl_kernel_entry**", entries), count), "kernel_table")
    wanted = 1 if variant_policy == "fast" else 0
    table: dict[str, KernelChoice] = {}
    for i in range(count[0]):
        entry = entries[0] + i
        name = ffi.string(entry.op).decode()
        known = table.get(name)
        if known is None or (entry.variant == wanted and known.variant != wanted):
            table[name] = KernelChoice(entry, entry.dtypes, entry.variant, plugin.api.launch_kernel)
    logger.debug("plugin '%s' offers %d kernels for %d ops", plugin.name, count[0], len(table))
    return table


class Launcher:
    """Runs ops on vendor kernels; one per runtime."""

    def __init__(self, runtime) -> None:
        self.rt = runtime
        self._plans: dict[str, tuple[OpPlan, OutputSpecCache]] = {}

    def register(self, library: torch.library.Library, op_names: set[str], skip: set[str]) -> list[str]:
        """Give PyTorch a PrivateUse1 kernel for each op not in `skip` (ops the runtime
        implements itself, e.g. copy_, which call launch() for their device part).
        Returns the names PyTorch does not know."""
        unknown = []
        for name in sorted(op_names - skip):
            try:
                self._plan(name)
            except AttributeError:
                unknown.append(name)
                continue
            library.impl(name, self._make_kernel(name), "PrivateUse1")
        return unknown

    def _plan(self, name: str) -> tuple[OpPlan, OutputSpecCache]:
        found = self._plans.get(name)
        if found is None:
            plan = compile_plan(name)
            found = self._plans[name] = (plan, OutputSpecCache(plan))
        return found

    def has_kernel(self, device_index: int, name: str, dtype: torch.dtype) -> bool:
        choice = self.rt.device(device_index).kernels.get(name)
        return choice is not None and bool((choice.dtypes >> abi.DTYPE_TO_FL[dtype]) & 1)

    def _make_kernel(self, name: str):
        launch = self.launch

        def kernel(*args, **kwargs):
            return launch(name, args, kwargs)
        kernel.__name__ = f"fl_{name.replace('.', '_')}"
        return kernel

    def launch(self, name: str, args: tuple, kwargs: dict):
        plan, spec_cache = self._plan(name)
        values = plan.normalize(args, kwargs)
        device = self._device_of(plan, values)
        choice = device.kernels.get(name)
        main = values[plan.tensor_arg_indices[0]] if plan.tensor_arg_indices else None
        if choice is None or (isinstance(main, torch.Tensor) and not (choice.dtypes >> _FL_DTYPE[main.dtype]) & 1):
            return run_on_cpu(plan.op, args, kwargs, device.index)
        try:
            entry = spec_cache.lookup(values)
        except (NotImplementedError, RuntimeError) as exc:
            logger.debug("%s: meta kernel failed (%s); using the CPU fallback", name, exc)
            return run_on_cpu(plan.op, args, kwargs, device.index)
        rt = self.rt
        stream = rt.streams.current(device.index)
        outputs = self._outputs(plan, values, entry.specs, device, stream)
        try:
            c_args, count = marshal(plan, values, outputs,
                                    rt.rng.taker(device.index) if plan.has_generator else None, entry)
        except MarshalError as exc:
            logger.debug("%s: %s; using the CPU fallback", name, exc)
            return run_on_cpu(plan.op, args, kwargs, device.index)
        rt.order_after_writers(device.index, stream, values, outputs)
        status = choice.launch_fn(stream.handle, choice.entry, c_args, count)
        if status != abi.SUCCESS:
            device.plugin.check(status, f"launch_kernel({name}) on fl:{device.index}")
        op_stats.record(plan.qualified_name, op_stats.NATIVE)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _device_of(self, plan: OpPlan, values: list) -> DeviceInfo:
        found = -1
        for i in plan.tensor_arg_indices:
            t = values[i]
            if isinstance(t, torch.Tensor):
                index = t.get_device()       # -1 for CPU tensors (wrapped scalars)
                if found < 0:
                    found = index
                elif 0 <= index != found:
                    raise RuntimeError(f"{plan.name}: expected all tensors on the same device, "
                                       f"found fl:{found} and fl:{index}")
        if found < 0:
            for i in plan.list_tensor_arg_indices:
                for t in values[i] or ():
                    if t is not None and t.get_device() >= 0:
                        found = t.get_device()
                        break
        return self.rt.devices[found] if found >= 0 else self.rt.device(0)

    def _outputs(self, plan: OpPlan, values: list, specs, device: DeviceInfo, stream) -> list:
        outputs = []
        for alias_index, spec in zip(plan.returns_alias, specs):
            if alias_index is not None:
                outputs.append(values[alias_index])
            elif spec is None:
                outputs.append(None)
            else:
                outputs.append(self.rt.new_tensor_from_spec(device.index, spec, stream))
        return outputs

