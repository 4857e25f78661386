"""Find vendor plugin libraries, load them with cffi, negotiate the ABI.

Sources, in order: installed packages (entry-point group 'torch_fl.plugins',
each entry a callable returning the library path), the TORCH_FL_PLUGINS path
list, and the config's `plugins:` list.  A plugin that fails to load is logged
and recorded in `load_failures`; it never stops the others.  Each library's
certification status is settled before it is loaded (fl_runtime.certification):
with `certification.require_certified` on, an uncertified one is never dlopened.
"""
from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path

from fl_runtime import abi
from fl_runtime.abi import ffi
from fl_runtime.errors import (
    IncompatibleABIError,
    PluginLoadError,
    UncertifiedPluginError,
    VendorError,
)
from fl_runtime.logs import logger
from fl_runtime.plugins.certification import CertificationPolicy, CertificationStatus
from fl_runtime.plugins.metadata import (
    PluginMetadata,
    PluginMetadataError,
    read_metadata,
)
from fl_runtime.plugins.pinned import PinnedLibrary, load_pinned, open_pinned

ENTRY_POINT_GROUP = "torch_fl.plugins"
DISABLE_ENTRY_POINTS_ENV = "TORCH_FL_DISABLE_ENTRY_POINTS"

# The fl_api fields ABI 1.0 defines; a table shorter than this is refused.
_REQUIRED_FIELD = "launch_kernel"


@dataclass(frozen=True)
class PluginSource:
    """Where a plugin library was found (for messages, `devices` and doctor)."""
    name: str
    path: str
    origin: str          # 'entry point', 'TORCH_FL_PLUGINS' or 'config'


@dataclass
class LoadFailure:
    source: PluginSource
    error: Exception


class Plugin:
    """One loaded vendor library and its negotiated function table."""

    def __init__(self, source: PluginSource, lib, api, certification: CertificationStatus,
                 metadata: PluginMetadata | None = None) -> None:
        self.source = source
        self.certification = certification    # .certified, .reason: shown by `torch-fl devices`
        self.metadata = metadata or PluginMetadata()    # the driver requirement, read before any device is used
        # device type -> driver version(s) its devices report; filled when they are probed
        # (devices.registry), read by the stack (fl_runtime.plugins.stack)
        self.driver_versions: dict[str, str] = {}
        self.lib = lib          # keeps the library mapped for the process lifetime
        self.dependencies: list = []    # $ORIGIN dependencies preloaded for it (plugins.pinned)
        self.api = api
        info = api.info
        self.name = _string(info.plugin_name) or source.name
        self.vendor = _string(info.vendor)
        self.device_type = _string(info.device_type) or self.name
        self.version = _string(info.plugin_version)
        self.abi_version = (api.abi_version.major, api.abi_version.minor)

    def check(self, status: int, call: str) -> None:
        """Raise VendorError for a non-success status, with the plugin's own message."""
        if status != abi.SUCCESS:
            message = _string(self.api.last_error_message())
            raise VendorError(call, status, abi.STATUS_NAMES.get(status, f"status {status}"),
                              message, self.name)

    def __repr__(self) -> str:
        return f"Plugin({self.name!r}, {self.source.path!r}, abi={self.abi_version})"


# A plugin's strings are names and messages; reading stops here even if one is unterminated.
_MAX_STRING = 4096


def _string(cdata) -> str:
    return ffi.string(cdata, _MAX_STRING).decode(errors="replace") if cdata != ffi.NULL else ""


def discover_sources(config_plugins: tuple[str, ...] = ()) -> list[PluginSource]:
    """Every plugin library the machine offers, without loading any of them.

    TORCH_FL_DISABLE_ENTRY_POINTS=1 ignores installed packages, so that only
    TORCH_FL_PLUGINS and the config count (tests, doctor, pinning one build)."""
    sources: list[PluginSource] = []
    for entry in entry_point_plugins():
        try:
            path = entry.load()()
            sources.append(PluginSource(entry.name, str(path), "entry point"))
        except Exception as exc:  # a broken package must not hide the others
            logger.warning("plugin entry point '%s' failed: %s", entry.name, exc)
    for path in filter(None, os.environ.get("TORCH_FL_PLUGINS", "").split(os.pathsep)):
        sources.append(PluginSource(Path(path).stem, path, "TORCH_FL_PLUGINS"))
    for path in config_plugins:
        sources.append(PluginSource(Path(path).stem, path, "config"))
    return _dedupe(sources)


def entry_points_disabled() -> bool:
    return os.environ.get(DISABLE_ENTRY_POINTS_ENV, "") not in ("", "0")


def entry_point_plugins() -> list:
    """The installed packages' plugin entry points (none when disabled by the environment)."""
    if entry_points_disabled():
        logger.debug("%s is set: plugin entry points are ignored", DISABLE_ENTRY_POINTS_ENV)
        return []
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def _dedupe(sources: list[PluginSource]) -> list[PluginSource]:
    seen: set[str] = set()
    unique = []
    for source in sources:
        key = os.path.realpath(source.path)
        if key not in seen:
            seen.add(key)
            unique.append(source)
    return unique


def load_plugin(source: PluginSource, policy: CertificationPolicy | None = None) -> Plugin:
    """Check certification, dlopen one library and negotiate; raises PluginLoadError,
    UncertifiedPluginError (policy requires a certificate) or IncompatibleABIError."""
    logger.debug("loading plugin '%s' from %s (%s)", source.name, source.path, source.origin)
    if not os.path.isfile(source.path):
        raise PluginLoadError(source.name, f"library {source.path} does not exist "
                              f"(found via {source.origin}); build or reinstall the plugin")
    try:
        pinned = open_pinned(source.path)
    except OSError as exc:
        raise PluginLoadError(source.name, f"cannot open {source.path}: {exc}") from exc
    try:
        certification = _certify_before_load(source, policy or CertificationPolicy(), pinned)
        try:
            metadata = read_metadata(source.path)
        except PluginMetadataError as exc:
            raise PluginLoadError(source.name, str(exc)) from exc
        try:
            # The bytes hashed above, never the path again (README "Certifying a plugin").
            lib = load_pinned(pinned, ffi.dlopen)
        except OSError as exc:
            raise PluginLoadError(source.name, f"cannot load {source.path}: {exc}") from exc
    except BaseException:
        pinned.close()      # refused before loading: nothing holds the descriptor
        raise
    try:
        get_api = getattr(lib, abi.ENTRY_SYMBOL)
    except AttributeError:
        raise PluginLoadError(source.name, f"{source.path} does not export '{abi.ENTRY_SYMBOL}': "
                              "it is not a Torch-FL plugin") from None
    plugin = Plugin(source, lib, _negotiate(source, get_api), certification, metadata)
    plugin.dependencies = pinned.dependencies
    return plugin


def _certify_before_load(source: PluginSource, policy: CertificationPolicy,
                         pinned: PinnedLibrary) -> CertificationStatus:
    """The certification status of the bytes behind `pinned`'s descriptor: the ones
    load_pinned will load, whatever the path points at by then."""
    status = policy.assess(source.name, source.path, pinned.sha256)
    logger.debug("plugin '%s' certification: %s", source.name, status.reason)
    if policy.require_certified and not status.certified:
        raise UncertifiedPluginError(source.name, status)
    return status


def _negotiate(source: PluginSource, get_api):
    requested = ffi.new("fl_abi_version*", {"struct_size": ffi.sizeof("fl_abi_version"),
                                            "major": abi.ABI_MAJOR, "minor": abi.ABI_MINOR})
    out = ffi.new("const fl_api**")
    status = get_api(requested, out)
    ours = f"{abi.ABI_MAJOR}.{abi.ABI_MINOR}"
    if status == abi.ERROR_INCOMPATIBLE_ABI:
        raise IncompatibleABIError(source.name, f"refuses ABI {ours}; it needs another Torch-FL "
                                   "release (see `torch-fl doctor`)")
    if status != abi.SUCCESS or out[0] == ffi.NULL:
        raise PluginLoadError(source.name, f"{abi.ENTRY_SYMBOL} failed with "
                              f"{abi.STATUS_NAMES.get(status, status)}")
    api = out[0]
    major, minor = api.abi_version.major, api.abi_version.minor
    if major != abi.ABI_MAJOR or minor < abi.ABI_MIN_SUPPORTED_MINOR:
        raise IncompatibleABIError(
            source.name, f"speaks ABI {major}.{minor}, this runtime accepts "
            f"{abi.ABI_MAJOR}.{abi.ABI_MIN_SUPPORTED_MINOR} to {ours}: rebuild the plugin against "
            "this Torch-FL SDK or install a matching Torch-FL")
    if not abi.struct_covers(api, "fl_api", _REQUIRED_FIELD):
        raise IncompatibleABIError(source.name, f"its function table is {api.struct_size} bytes, "
                                   f"too short for ABI {major}.{minor}")
    _validate_table(source, api)
    return api


def _validate_table(source: PluginSource, api) -> None:
    """Refuse a table the runtime would crash on: a NULL `info` or a NULL function
    pointer among the fields the plugin's struct_size covers (fl_abi.h: every
    function of the negotiated minor is required).  A wild non-NULL pointer cannot
    be detected from here; those faults are the plugin's own."""
    if api.info == ffi.NULL:
        raise PluginLoadError(source.name, "its fl_api table has info = NULL (fl_abi.h requires the "
                              "plugin_name/vendor/device_type record): fix the plugin's fl_plugin_get_api")
    if api.info.struct_size < ffi.offsetof("fl_plugin_info", "vendor"):
        raise PluginLoadError(source.name, f"its fl_plugin_info.struct_size is {api.info.struct_size}, "
                              "too small to hold plugin_name: fix the plugin's info record")
    for name in _function_fields():
        if abi.struct_covers(api, "fl_api", name) and getattr(api, name) == ffi.NULL:
            raise PluginLoadError(source.name, f"its fl_api table has {name} = NULL; every function of "
                                  "the ABI minor it speaks is required (fl_abi.h): fix the plugin")


def _function_fields() -> list[str]:
    return [name for name, field in ffi.typeof("fl_api").fields
            if field.type.kind == "function"]    # cffi: a function pointer's kind


def load_all(sources: list[PluginSource], policy: CertificationPolicy | None = None,
             ) -> tuple[list[Plugin], list[LoadFailure]]:
    """Load every source; failures are logged and returned, never raised.

    `policy` defaults to the config file's `certification:` section."""
    policy = policy or _policy_in_effect()
    plugins, failures = [], []
    for source in sources:
        try:
            plugins.append(load_plugin(source, policy))
            logger.info("loaded plugin '%s' from %s", source.name, source.path)
        except Exception as exc:
            logger.warning("skipping plugin '%s': %s", source.name, exc)
            failures.append(LoadFailure(source, exc))
    return plugins, failures


def _policy_in_effect() -> CertificationPolicy:
    # The runtime hands its Config's section in; a caller that does not gets the file's.
    from fl_runtime.config import load_config
    return CertificationPolicy.from_config(load_config().certification)
