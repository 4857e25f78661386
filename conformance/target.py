"""The plugin under test: resolve the command line's PLUGIN and load it.

Loading goes through the runtime's own loader (fl_runtime.loader), so the
suite negotiates exactly as the runtime will; the suite adds only the device
facts its reports and checks need.
"""
from __future__ import annotations

import os
from pathlib import Path

import yaml

from fl_runtime import abi
from fl_runtime.abi import ffi
from fl_runtime.plugins.loader import Plugin, PluginSource, discover_sources, load_plugin


class TargetError(RuntimeError):
    """PLUGIN names no library, or the library cannot be loaded."""


def resolve(plugin: str) -> PluginSource:
    """A library path, a plugin project directory (its plugin.yaml's library), or the name of
    an installed plugin (entry point / TORCH_FL_PLUGINS)."""
    path = Path(plugin)
    if path.is_dir():
        return _project_library(path)
    if path.suffix == ".so" or os.sep in plugin or path.exists():
        if not path.is_file():
            raise TargetError(f"{plugin}: no such library file")
        return PluginSource(path.stem, str(path.resolve()), "command line")
    sources = discover_sources()
    for source in sources:
        if source.name == plugin:
            if not Path(source.path).is_file():   # installed, but its library was never built (or removed)
                raise TargetError(f"plugin '{plugin}' ({source.origin}) points at {source.path}, which does not "
                                  "exist; build it first (fl-sdk build DIRECTORY)")
            return source
    known = ", ".join(s.name for s in sources) or "none"
    raise TargetError(f"no installed plugin named '{plugin}' (installed: {known}); "
                      "pass a library path instead")


def _project_library(directory: Path) -> PluginSource:
    """A plugin project directory stands for the library its plugin.yaml builds."""
    spec_file = directory / "plugin.yaml"
    if not spec_file.is_file():
        raise TargetError(f"{directory} is a directory without plugin.yaml: pass a plugin library (.so), a plugin "
                          "project directory (the one `fl-sdk new` made) or an installed plugin's name")
    library = (yaml.safe_load(spec_file.read_text()) or {}).get("library")
    if not isinstance(library, str):
        raise TargetError(f"{spec_file} names no library (key `library:`)")
    path = (directory / library).resolve()
    if not path.is_file():
        raise TargetError(f"{path} (the library of plugin project {directory}) is not built yet: "
                          f"run `fl-sdk build {directory}` first")
    return PluginSource(path.stem, str(path), "plugin project")


def device_properties(plugin: Plugin, index: int) -> dict:
    """Every fl_device_properties field the plugin filled, by the header's names, raw
    (unlike the runtime's probe, which substitutes defaults for missing values)."""
    props = ffi.new("fl_device_properties*", {"struct_size": ffi.sizeof("fl_device_properties")})
    plugin.check(plugin.api.device_properties(index, props), f"device_properties({index})")
    facts = {"index": index}
    for name, field in ffi.typeof("fl_device_properties").fields:
        if name != "struct_size" and props.struct_size >= field.offset + ffi.sizeof(field.type):
            value = getattr(props, name)
            facts[name] = ffi.string(value).decode(errors="replace") if field.type.kind == "array" else int(value)
    return facts


def device_count(plugin: Plugin) -> int:
    count = ffi.new("int32_t*")
    plugin.check(plugin.api.device_count(count), "device_count")
    return count[0]


def load(plugin: str) -> Plugin:
    """Resolve and load; TargetError with the loader's reason on failure."""
    source = resolve(plugin)
    try:
        return load_plugin(source)
    except Exception as exc:  # the loader's errors already say what to do
        raise TargetError(str(exc)) from exc


def describe(plugin: Plugin) -> dict:
    """The report's header about the plugin and its devices."""
    devices = [device_properties(plugin, i) for i in range(device_count(plugin))]
    for facts in devices:
        facts["supported_dtypes"] = abi.dtype_mask_names(facts.get("supported_dtypes", 0))
    return {"name": plugin.name, "vendor": plugin.vendor, "version": plugin.version,
            "path": plugin.source.path, "abi_version": "%d.%d" % plugin.abi_version,
            "devices": devices}
