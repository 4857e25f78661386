"""Find vendor plugin libraries, load them with cffi, negotiate the ABI.

Sources, in order: installed packages (entry-point group 'torch_fl.plugins',
each entry a callable returning the library path), the TORCH_FL_PLUGINS path
list, and the config's `plugins:` list.  A plugin that fails to load is logged
and recorded in `load_failures`; it never stops the others.  Each library's
certification status is settled before it is loaded (fl_runtime.certification):
with `certification.require_certified` on, an uncertified one is never dlopened.
Then the same open bytes are probed in a child process (fl_runtime.plugins.probe),
so a plugin that crashes while loading is refused instead of killing this process.
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
from fl_runtime.plugins import probe, table_checks
from fl_runtime.plugins.certification import CertificationPolicy, CertificationStatus
from fl_runtime.plugins.extensions import HostMemory, host_memory_of
from fl_runtime.plugins.metadata import (
    PluginMetadata,
    PluginMetadataError,
    read_metadata,
)
from fl_runtime.plugins.pinned import PinnedLibrary, load_pinned, open_pinned
from fl_runtime.plugins.table_checks import TableRefusal

ENTRY_POINT_GROUP = "torch_fl.plugins"
DISABLE_ENTRY_POINTS_ENV = "TORCH_FL_DISABLE_ENTRY_POINTS"

_LEVELS = table_checks.AbiLevels(abi.ABI_MAJOR, abi.ABI_MINOR, abi.ABI_MIN_SUPPORTED_MINOR, abi.SUCCESS,
                                 abi.ERROR_INCOMPATIBLE_ABI, abi.STATUS_NAMES, abi.ENTRY_SYMBOL)


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
        # Why it is not mapped under its real path ("" when it is; plugins.pinned, load_pinned)
        self.location_note = ""
        self.api = api
        info = api.info
        self.name = _string(info.plugin_name) or source.name
        self.vendor = _string(info.vendor)
        self.device_type = _string(info.device_type) or self.name
        self.version = _string(info.plugin_version)
        self.abi_version = (api.abi_version.major, api.abi_version.minor)

    @property
    def host_memory(self) -> HostMemory | None:
        """The plugin's pinned host memory (plugins.extensions.HostMemory: alloc(device, size) ->
        address, free(address)), or None when it offers none (fl_host_memory.h, ABI 1.2)."""
        return host_memory_of(self)

    def teardown(self) -> None:
        """Pair the loader's plugin_initialize (fl_abi.h "LIFECYCLE"): for a client done with the
        plugin, which then makes no other call into it.  Not called at process exit: tensors may
        still be alive then, and the process takes the plugin's memory with it."""
        status = table_checks.teardown(ffi, self.api)
        if status is not None:
            self.check(status, "plugin_teardown")

    def check(self, status: int, call: str) -> None:
        """Raise VendorError for a non-success status, with the plugin's own message."""
        if status != abi.SUCCESS:
            message = _string(self.api.last_error_message())
            raise VendorError(call, status, abi.STATUS_NAMES.get(status, f"status {status}"),
                              message, self.name)

    def __repr__(self) -> str:
        return f"Plugin({self.name!r}, {self.source.path!r}, abi={self.abi_version})"


def _string(cdata) -> str:
    return table_checks.read_string(ffi, cdata)


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


def load_plugin(source: PluginSource, policy: CertificationPolicy | None = None,
                probe_plugins: bool | None = None) -> Plugin:
    """Check certification, probe the library in a child process (fl_runtime.plugins.probe;
    `probe_plugins` None: the config and environment decide), dlopen it and negotiate;
    raises PluginLoadError (PluginProbeError: it crashed or hung in the probe),
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
        if probe.probing_enabled(probe_plugins) if probe_plugins is not None else _probe_in_effect():
            _probe(source, pinned)
        try:
            # The bytes hashed (and probed) above, never the path again (docs/operators/certificates.md).
            lib = load_pinned(pinned, ffi.dlopen)
        except OSError as exc:
            raise PluginLoadError(source.name, f"cannot load {source.path}: {exc}") from exc
    except BaseException:
        pinned.close()      # refused before loading: nothing holds the descriptor
        raise
    try:
        get_api = getattr(lib, abi.ENTRY_SYMBOL)
    except abi.MISSING_SYMBOL:
        raise PluginLoadError(source.name, f"{source.path} does not export '{abi.ENTRY_SYMBOL}': "
                              "it is not a Torch-FL plugin") from None
    if pinned.location_note:
        logger.info("plugin '%s' is loaded as %s, not under its real path: %s", source.name, pinned.loaded_as,
                    pinned.location_note)
    plugin = Plugin(source, lib, _negotiate(source, get_api, pinned), certification, metadata)
    plugin.dependencies = pinned.dependencies
    plugin.location_note = pinned.location_note
    return plugin


def _probe(source: PluginSource, pinned: PinnedLibrary) -> None:
    """A crash in the plugin's constructor or entry point must not kill this process:
    the same bytes run first in a child (docs/operators/plugins.md "Isolated probing")."""
    verdict = probe.check_isolated(source.name, pinned)
    if verdict.outcome == probe.REFUSED:
        raise refusal_error(source.name, verdict.kind, verdict.message)


def _certify_before_load(source: PluginSource, policy: CertificationPolicy,
                         pinned: PinnedLibrary) -> CertificationStatus:
    """The certification status of the bytes behind `pinned`'s descriptor: the ones
    load_pinned will load, whatever the path points at by then."""
    status = policy.assess(source.name, source.path, pinned.sha256)
    logger.debug("plugin '%s' certification: %s", source.name, status.reason)
    if policy.require_certified and not status.certified:
        raise UncertifiedPluginError(source.name, status)
    return status


def _negotiate(source: PluginSource, get_api, pinned: PinnedLibrary):
    """The negotiated table, initialised (ABI 1.2 plugins: plugin_initialize, once per load)."""
    try:
        api = table_checks.negotiate(ffi, _LEVELS, get_api)
        table_checks.initialize(ffi, _LEVELS, api)
        return api
    except TableRefusal as refusal:
        raise refusal_error(source.name, refusal.kind, pinned.explain(refusal.message)) from None


def refusal_error(plugin: str, kind: str, message: str) -> PluginLoadError:
    """The loader's error class for a table refusal (here or in the isolated probe)."""
    return (IncompatibleABIError if kind == table_checks.ABI_REFUSAL else PluginLoadError)(plugin, message)


def load_all(sources: list[PluginSource], policy: CertificationPolicy | None = None,
             probe_plugins: bool | None = None) -> tuple[list[Plugin], list[LoadFailure]]:
    """Load every source; failures are logged and returned, never raised.

    `policy` defaults to the config file's `certification:` section, `probe_plugins`
    to its `probe_plugins` key ($TORCH_FL_PROBE_PLUGINS wins over either)."""
    policy = policy or _policy_in_effect()
    if probe_plugins is None:
        probe_plugins = _probe_in_effect()
    plugins, failures = [], []
    for source in sources:
        try:
            plugins.append(load_plugin(source, policy, probe_plugins))
            logger.info("loaded plugin '%s' from %s", source.name, source.path)
        except Exception as exc:
            logger.warning("skipping plugin '%s': %s", source.name, exc)
            failures.append(LoadFailure(source, exc))
    return plugins, failures


def _probe_in_effect() -> bool:
    # The environment decides alone when set; otherwise the config file's `probe_plugins`.
    if os.environ.get(probe.PROBE_ENV, "").strip():
        return probe.probing_enabled()
    from fl_runtime.config import load_config
    return load_config().probe_plugins


def _policy_in_effect() -> CertificationPolicy:
    # The runtime hands its Config's section in; a caller that does not gets the file's.
    from fl_runtime.config import load_config
    return CertificationPolicy.from_config(load_config().certification)
