"""The flat, stable list of logical devices fl:0 ... fl:N across all plugins.

Order is by (device type, uuid), never by plugin load order, so the same
physical device gets the same index on every start of the same machine; a config
`devices:` list orders the types it names as it lists them (docs/operators/plugins.md
"Device numbering").
"""
from __future__ import annotations

from dataclasses import dataclass, field

from fl_runtime import abi
from fl_runtime.abi import ffi
from fl_runtime.config import Config
from fl_runtime.errors import PluginLoadError
from fl_runtime.logs import logger
from fl_runtime.plugins.drivers import DriverVerdict
from fl_runtime.plugins import table_checks
from fl_runtime.plugins.loader import Plugin

# The device type PyTorch sees (PrivateUse1 renamed): "fl:0", torch.autocast("fl").
DEVICE_TYPE = "fl"
# More devices than any machine holds: a larger device_count is a corrupt answer (one
# constant, shared with the isolated probe, which stops enumerating there too).
MAX_DEVICES_PER_PLUGIN = table_checks.MAX_DEVICES_PER_PLUGIN


@dataclass
class DeviceInfo:
    """What a vendor reports about one device, plus Torch-FL's view of it."""
    index: int                 # the N of fl:N
    plugin: Plugin
    local_index: int           # the device index inside its plugin
    name: str
    vendor: str
    uuid: str
    driver_version: str
    total_memory: int
    alignment: int
    supported_dtypes: list[str]
    memory_fraction: float = 1.0
    kernels: dict = field(default_factory=dict, repr=False)   # filled by the op table

    @property
    def device_type(self) -> str:
        return self.plugin.device_type

    @property
    def memory_limit(self) -> int:
        """Bytes Torch-FL may take on this device (total * memory_fraction)."""
        return int(self.total_memory * self.memory_fraction)

    def as_dict(self) -> dict:
        return {"device": f"fl:{self.index}", "name": self.name, "vendor": self.vendor,
                "type": self.device_type, "uuid": self.uuid, "driver_version": self.driver_version,
                "total_memory": self.total_memory, "memory_fraction": self.memory_fraction,
                "alignment": self.alignment, "dtypes": self.supported_dtypes,
                "plugin": self.plugin.name, "plugin_path": self.plugin.source.path,
                "abi": "%d.%d" % self.plugin.abi_version}


def probe_plugin(plugin: Plugin) -> list[DeviceInfo]:
    """Ask one plugin for its devices (driver probe + properties)."""
    count = ffi.new("int32_t*")
    plugin.check(plugin.api.device_count(count), "device_count")
    if not 0 <= count[0] <= MAX_DEVICES_PER_PLUGIN:
        # A corrupt count would hang start-up probing 2^31 devices (docs/operators/plugins.md).
        raise PluginLoadError(plugin.source.name, f"device_count reported {count[0]} devices; a plugin may "
                              f"report 0 to {MAX_DEVICES_PER_PLUGIN}: fix the plugin's device_count")
    logger.debug("plugin '%s' reports %d device(s)", plugin.name, count[0])
    devices = []
    for local in range(count[0]):
        props = ffi.new("fl_device_properties*", {"struct_size": ffi.sizeof("fl_device_properties")})
        plugin.check(plugin.api.device_properties(local, props), f"device_properties(device={local})")
        devices.append(DeviceInfo(
            index=-1, plugin=plugin, local_index=local, name=_text(props.name),
            vendor=_text(props.vendor), uuid=_text(props.uuid) or f"{plugin.name}-{local}",
            driver_version=_text(props.driver_version), total_memory=props.total_memory,
            alignment=props.alignment or 1, supported_dtypes=abi.dtype_mask_names(props.supported_dtypes)))
        logger.debug("  %s device %d: %s, uuid %s, %d MiB, alignment %d", plugin.name, local,
                     devices[-1].name, devices[-1].uuid, props.total_memory >> 20, props.alignment)
    return devices


def _text(char_array) -> str:
    return ffi.string(char_array).decode(errors="replace")


def record_driver_versions(plugin: Plugin, devices: list[DeviceInfo]) -> None:
    """Keep on the plugin the driver version(s) its devices report, per device type (the stack)."""
    versions = sorted({dev.driver_version for dev in devices})
    plugin.driver_versions = {plugin.device_type: ", ".join(versions)} if versions else {}


def driver_verdict(dev: DeviceInfo) -> DriverVerdict:
    """Does this device's driver meet its plugin's stated requirement (plugin metadata)?"""
    return dev.plugin.metadata.driver.assess(dev.driver_version, dev.plugin.name)


def _driver_gate(dev: DeviceInfo, config: Config, reasons: list[str]) -> bool:
    """Keep a device only if its driver is supported or the config's drivers.allow_unsupported
    says to keep it anyway; either way an unsupported driver is noted with the reason."""
    verdict = driver_verdict(dev)
    if verdict.supported:
        return True
    if config.drivers.allows(dev.device_type):
        reasons.append(f"{dev.device_type} device {dev.uuid} kept although unsupported (config "
                       f"drivers.allow_unsupported): {verdict.reason}")
        logger.warning(reasons[-1])
        return True
    reasons.append(f"{dev.device_type} device {dev.uuid} left out: {verdict.reason} (or set "
                   f"drivers.allow_unsupported in the config to use it anyway)")
    logger.warning(reasons[-1])
    return False


def build_device_list(plugins: list[Plugin], config: Config) -> tuple[list[DeviceInfo], list[str]]:
    """Probe every plugin, apply the config's device rules, number the result.

    A device whose driver is outside its plugin's requirement is left out here,
    before anything uses it, unless the config's `drivers.allow_unsupported` keeps it.
    Returns the devices and, for each thing left out, a reason (for logs and doctor).
    """
    found, reasons, offered = [], [], set()
    for plugin in plugins:
        try:
            probed = probe_plugin(plugin)
        except Exception as exc:
            reasons.append(f"plugin '{plugin.name}' failed its device probe: {exc}")
            logger.warning(reasons[-1])
            continue
        record_driver_versions(plugin, probed)
        offered.update(dev.device_type for dev in probed)
        found.extend(dev for dev in probed if _driver_gate(dev, config, reasons))
    found.sort(key=lambda d: (_listed_position(config, d.device_type), d.device_type, d.uuid))
    chosen = []
    taken_per_type: dict[str, int] = {}
    for dev in found:
        rule = config.rule_for(dev.device_type)
        if config.devices and rule is None:
            reasons.append(f"{dev.device_type} device {dev.uuid} skipped: config 'devices' does not list "
                           f"type '{dev.device_type}'")
            continue
        taken = taken_per_type.get(dev.device_type, 0)
        if rule is not None and rule.count is not None and taken >= rule.count:
            reasons.append(f"{dev.device_type} device {dev.uuid} skipped: config count is {rule.count}")
            continue
        taken_per_type[dev.device_type] = taken + 1
        dev.memory_fraction = rule.memory_fraction if rule else 1.0
        dev.index = len(chosen)
        chosen.append(dev)
    for rule in config.devices:
        if rule.type not in offered:
            reasons.append(f"config names device type '{rule.type}' but no loaded plugin offers it")
    for reason in reasons:
        logger.info(reason)
    return chosen, reasons


def _listed_position(config: Config, device_type: str) -> int:
    """Where the config's `devices:` list names a type (pins the order of types); types it
    does not name come after, by name."""
    types = [rule.type for rule in config.devices]
    return types.index(device_type) if device_type in types else len(types)
