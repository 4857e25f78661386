"""The op table (see docs/users/profiling.md "Where an op runs"): built once
at start-up from every device's kernel table; per call, one dict lookup.

Variants: when a vendor offers a precise and a fast kernel for an op, the
config's `kernels:` policy picks one per op when the table is built; an op
whose pick is precise but has a fast kernel keeps that one aside for calls
made under torch.autocast("fl").
"""
from __future__ import annotations

from fl_runtime import abi
from fl_runtime.abi import ffi
from fl_runtime.config import KernelsConfig
from fl_runtime.devices.registry import DeviceInfo
from fl_runtime.errors import PluginLoadError
from fl_runtime.logs import logger
from fl_runtime.ops import accounting

_VARIANT_NAMES = abi.VARIANT_NAMES
# Far more than ATen's overloads times variants: a larger count is a corrupt answer.
MAX_KERNELS = 1 << 16


_epoch = 0
_epoch_listeners: list = []


def epoch() -> int:
    """How many times a device's kernel table changed since start-up (KernelMap)."""
    return _epoch


def on_epoch(listener) -> None:
    """Call `listener(epoch)` whenever a kernel table changes (the native bridge's programs
    check it: a recorded entry the table no longer offers must not run)."""
    _epoch_listeners.append(listener)


class KernelMap(dict):
    """A device's op -> KernelChoice map: a dict (get() stays the C lookup), whose changes
    (tests hide a kernel to force the fallbacks) advance the epoch."""

    def _changed(self) -> None:
        global _epoch
        _epoch += 1
        for listener in _epoch_listeners:
            listener(_epoch)

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self._changed()

    def __delitem__(self, key) -> None:
        super().__delitem__(key)
        self._changed()

    def pop(self, *args):
        try:
            return super().pop(*args)
        finally:
            self._changed()

    def popitem(self):
        try:
            return super().popitem()
        finally:
            self._changed()

    def clear(self) -> None:
        super().clear()
        self._changed()

    def update(self, *args, **kwargs) -> None:
        super().update(*args, **kwargs)
        self._changed()

    def setdefault(self, key, default=None):
        try:
            return super().setdefault(key, default)
        finally:
            self._changed()


class KernelChoice:
    """The vendor entry for one (device, op): the variant the policy picked, and
    the fast entry to use instead under autocast (None when there is no switch)."""
    __slots__ = ("autocast", "dtypes", "entry", "launch_fn", "variant", "variant_name")

    def __init__(self, entry, dtypes: int, variant: int, launch_fn) -> None:
        self.entry = entry
        self.dtypes = dtypes
        self.variant = variant
        self.launch_fn = launch_fn     # the plugin's launch_kernel, fetched once
        self.variant_name = _VARIANT_NAMES.get(variant, f"variant {variant}")
        self.autocast: KernelChoice | None = None


def build_op_table(devices: list[DeviceInfo], policy: KernelsConfig | None = None) -> set[str]:
    """Fill each device's `kernels` map; return the union of op names."""
    policy = policy or KernelsConfig()
    per_plugin: dict[int, dict[str, KernelChoice]] = {}
    for dev in devices:
        plugin = dev.plugin
        if id(plugin) not in per_plugin:
            try:
                per_plugin[id(plugin)] = _read_kernel_table(plugin, policy)
            except Exception as exc:  # noqa: BLE001 - its devices still work, through the fallbacks
                logger.warning("plugin '%s' gave no usable kernel table (%s); every op on its "
                               "devices will use the fallbacks", plugin.name, exc)
                per_plugin[id(plugin)] = KernelMap()
        dev.kernels = per_plugin[id(plugin)]
    return {name for table in per_plugin.values() for name in table}


def _read_kernel_table(plugin, policy: KernelsConfig) -> dict[str, KernelChoice]:
    entries = ffi.new("fl_kernel_entry**")
    count = ffi.new("uint32_t*")
    plugin.check(plugin.api.kernel_table(ffi.cast("const fl_kernel_entry**", entries), count), "kernel_table")
    _validate_kernel_table(plugin, entries[0], count[0])
    offered: dict[str, dict[str, KernelChoice]] = {}      # op -> variant name -> first entry
    for i in range(count[0]):
        entry = entries[0] + i
        choice = KernelChoice(entry, entry.dtypes, entry.variant, plugin.api.launch_kernel)
        offered.setdefault(ffi.string(entry.op, 256).decode(), {}).setdefault(choice.variant_name, choice)
    table = KernelMap({name: _pick_variant(name, variants, policy) for name, variants in offered.items()})
    logger.debug("plugin '%s' offers %d kernels for %d ops", plugin.name, count[0], len(table))
    return table


def _validate_kernel_table(plugin, entries, count: int) -> None:
    """Refuse a table the runtime would crash reading: too many entries, a NULL array,
    an entry without its `op` name."""
    if count > MAX_KERNELS:
        raise PluginLoadError(plugin.source.name, f"kernel_table reported {count} entries; at most "
                              f"{MAX_KERNELS} are accepted: fix the plugin's kernel_table")
    if count and entries == ffi.NULL:
        raise PluginLoadError(plugin.source.name, f"kernel_table reported {count} entries but a NULL array")
    for i in range(count):
        if entries[i].op == ffi.NULL:
            raise PluginLoadError(plugin.source.name, f"kernel_table entry {i} has op = NULL: fix the "
                                  "plugin's kernel table")


def _pick_variant(name: str, variants: dict[str, KernelChoice], policy: KernelsConfig) -> KernelChoice:
    """Per-op pin > global policy; an unpinned precise pick keeps the fast one for autocast."""
    pinned = policy.variant_for(name)
    wanted = pinned or policy.variant
    choice = variants.get(wanted) or next(iter(variants.values()))
    fast = variants.get(accounting.FAST)
    if pinned is None and policy.fast_under_autocast and fast is not None and fast is not choice:
        choice.autocast = fast
    return choice
