"""The checks behind `torch-fl doctor` (docs/users/devices.md), in the order one troubleshoots.

1. plugins found      (entry points, TORCH_FL_PLUGINS, config `plugins:`)
2. plugins load       (the library opens and exports fl_plugin_get_api)
3. ABI compatible     (version negotiation)
4. driver             (each plugin reports >= 1 device and a driver version that
                      meets the plugin's stated requirement: plugins/drivers.py)
5. certified stack    (per certified plugin: the running stack is the certified one)
6. device nodes       (the ABI declares none: "not applicable" until it does)
7. config             (valid, and every devices[].type is offered by a plugin)
8. lock               (the config's require_lock file matches the running stack)
8b. autoload         (whether `import torch` starts fl here, or stands aside beside a GPU)
9. runtime start      (fl_runtime's own start-up, kept in startup_error)
9b. compiled helpers  (fl_runtime/compiled.py: built, or why the Python versions run)
9c. native bridge     (fl_runtime/bridge: in use and from where, or why the Python route runs)
10. logs              (warnings and errors the runtime's start logged, those
                      logged while the checks ran, and the recent ones in the
                      config's logging.path file)

The walk re-does discovery and loading itself, so it works when the runtime
failed to start.  Each check has a status, what was found, and the next step.
"""
from __future__ import annotations

import collections
import logging
from dataclasses import asdict, dataclass, field

from fl_runtime.config import Config, DriversConfig, load_config
from fl_runtime.errors import ConfigError, IncompatibleABIError
from fl_runtime.integration import process
from fl_runtime.plugins.certification import CertificationPolicy
from fl_runtime.plugins.loader import (
    LoadFailure,
    Plugin,
    discover_sources,
    entry_points_disabled,
    load_all,
)

SCHEMA = "torch-fl.doctor/1"
OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "not applicable"


@dataclass
class Check:
    """One step of the walk: `status` is ok / warn / fail / not applicable."""
    name: str
    status: str
    detail: str
    next_step: str = ""


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return all(c.status != FAIL for c in self.checks)

    def as_dict(self) -> dict:
        return {"schema": SCHEMA, "verdict": "healthy" if self.healthy else "problems",
                "checks": [asdict(c) for c in self.checks]}


class _Captured(logging.Handler):
    """Keeps the torch_fl warnings and errors logged while it is attached (the last `keep`)."""

    def __init__(self, keep: int | None = None) -> None:
        super().__init__(logging.WARNING)
        self.records: collections.deque[str] = collections.deque(maxlen=keep)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.levelname}: {record.getMessage()}")


_recent = _Captured(keep=20)     # the process's latest warnings/errors, start-up included


def remember_recent_log() -> None:
    """Keep the latest torch_fl warnings/errors of this process for doctor (fl_runtime calls
    this before it starts, so what the start-up logged is shown)."""
    from fl_runtime.logs import logger
    if _recent not in logger.handlers:
        logger.addHandler(_recent)


def check_plugins_found(config: Config | None) -> tuple[Check, list]:
    sources = discover_sources(config.plugins if config else ())
    if not sources:
        where = "TORCH_FL_PLUGINS, config 'plugins:'" + ("" if entry_points_disabled() else
                                                         ", installed packages (entry points)")
        return Check("plugins found", FAIL, f"no plugin library found (looked at {where})",
                     "install a vendor plugin package, or point TORCH_FL_PLUGINS or the config's "
                     "'plugins:' at a plugin library (.so)"), sources
    listed = ", ".join(f"{s.name} ({s.origin}: {s.path})" for s in sources)
    return Check("plugins found", OK, f"{len(sources)} found: {listed}"), sources


def check_loading(failures: list[LoadFailure], plugins: list[Plugin]) -> list[Check]:
    """Two checks: the libraries load, and they speak our ABI."""
    abi_failures = [f for f in failures if isinstance(f.error, IncompatibleABIError)]
    other = [f for f in failures if f not in abi_failures]
    loaded = ", ".join(f"{p.name} (ABI {p.abi_version[0]}.{p.abi_version[1]})" for p in plugins) or "none"
    loads = (Check("plugins load", FAIL, "; ".join(str(f.error) for f in other),
                   "rebuild or reinstall the named plugin (fl-sdk build <dir>), or remove it from "
                   "TORCH_FL_PLUGINS / the config")
             if other else Check("plugins load", OK if plugins else SKIP, f"loaded: {loaded}"))
    abi = (Check("ABI compatible", FAIL, "; ".join(str(f.error) for f in abi_failures),
                 "install the plugin release built for this Torch-FL's ABI, or a Torch-FL that "
                 "accepts the plugin's ABI")
           if abi_failures else Check("ABI compatible", OK if plugins else SKIP, f"loaded: {loaded}"))
    return [loads, abi]


def check_driver(plugins: list[Plugin], config: Config | None = None) -> Check:
    """Each plugin reports devices and driver versions, and the versions meet the plugin's
    stated requirement (plugin metadata); a device outside it is named with the reason."""
    if not plugins:
        return Check("driver", SKIP, "no plugin loaded")
    found, problems, kept = [], [], []
    for plugin in plugins:
        _driver_findings(plugin, config.drivers if config else None, found, problems, kept)
    if problems:
        return Check("driver", FAIL, "; ".join(problems + kept + found),
                     "install a driver version the plugin supports (see the requirement above), or "
                     "set drivers.allow_unsupported in the config to use the device anyway; then "
                     "rerun torch-fl doctor")
    if kept:
        return Check("driver", WARN, "; ".join(kept + found),
                     "these devices run on a driver their vendor does not support: upgrade the driver "
                     "and remove drivers.allow_unsupported")
    return Check("driver", OK, "; ".join(found))


def _driver_findings(plugin: Plugin, allowed: DriversConfig | None, found: list[str], problems: list[str],
                     kept: list[str]) -> None:
    """Probe one plugin (recording its driver versions for the stack) and sort what it says
    into found / problems / kept-by-config, as the runtime's driver gate would decide."""
    from fl_runtime.devices.registry import (
        driver_verdict,
        probe_plugin,
        record_driver_versions,
    )
    try:
        devices = probe_plugin(plugin)
    except Exception as exc:  # noqa: BLE001 - doctor reports a failed probe, whatever it raised
        problems.append(f"plugin '{plugin.name}': {exc}")
        return
    record_driver_versions(plugin, devices)
    if not devices:
        problems.append(f"plugin '{plugin.name}' reports 0 devices")
        return
    if not all(d.driver_version for d in devices):
        problems.append(f"plugin '{plugin.name}' reports no driver version")
        return
    for dev in devices:
        verdict = driver_verdict(dev)
        if verdict.supported:
            continue
        if allowed is not None and allowed.allows(dev.device_type):
            kept.append(f"{dev.device_type} device {dev.uuid} kept by drivers.allow_unsupported: {verdict.reason}")
        else:
            problems.append(f"{dev.device_type} device {dev.uuid} left out: {verdict.reason}")
    found.append(f"{plugin.name}: {len(devices)} device(s), driver "
                 f"{', '.join(sorted({d.driver_version for d in devices}))} (requires "
                 f"{plugin.metadata.driver.describe()})")


def check_certified_stack(plugins: list[Plugin]) -> Check:
    """Per certified plugin: is the running stack the one its certificate was issued on?"""
    from fl_runtime.plugins.stack import COVERED, NOT_CERTIFIED, stack_coverage
    verdicts = [(plugin, stack_coverage(plugin)) for plugin in plugins]
    certified = [(p, c) for p, c in verdicts if c.state != NOT_CERTIFIED]
    if not certified:
        return Check("certified stack", SKIP, "no loaded plugin has a valid certificate")
    detail = "; ".join(f"{p.name}: {c.text}" for p, c in certified)
    if all(c.state == COVERED for _, c in certified):
        return Check("certified stack", OK, detail)
    return Check("certified stack", WARN, detail,
                 "run the versions the certificate names (field, certified value), or have the plugin "
                 "certified on this stack (fl-sdk certify)")


def check_lock(config: Config | None, plugins: list[Plugin]) -> Check:
    """The config's require_lock: the running stack must match the lock file."""
    from fl_runtime.errors import StackLockError
    from fl_runtime.plugins.stack import check_lock as compare
    from fl_runtime.plugins.stack import running_stack
    if config is None or not config.require_lock:
        return Check("lock", SKIP, "the config sets no require_lock")
    try:
        found = compare(config.require_lock, running_stack(plugins))
    except StackLockError as exc:
        return Check("lock", FAIL, str(exc), "fix require_lock in the config or write the lock (torch-fl lock)")
    if not found:
        return Check("lock", OK, f"the running stack matches {config.require_lock}")
    return Check("lock", FAIL, f"the running stack differs from {config.require_lock} (require_lock): "
                 + "; ".join(d.describe() for d in found),
                 "reinstall the locked versions (docs/operators/locks-and-upgrades.md), or re-lock with "
                 "`torch-fl lock` once this stack is verified")


def check_device_nodes() -> Check:
    # fl_abi.h 1.x has no way for a plugin to declare its device files (/dev/...),
    # so there is nothing the runtime could check; a future ABI field would go here.
    return Check("device node permissions", SKIP,
                 "the plugin ABI declares no device nodes; vendor plugins report access problems "
                 "through their driver check")


def check_config(config: Config | None, error: Exception | None, plugins: list[Plugin]) -> Check:
    if error is not None:
        return Check("config", FAIL, str(error), "fix the named key in the config file "
                     "(TORCH_FL_CONFIG or ~/.torch_fl/config.yaml)")
    assert config is not None
    where = config.path or "defaults (no config file)"
    offered = {p.device_type for p in plugins}
    unknown = [rule.type for rule in config.devices if rule.type not in offered]
    if unknown:
        return Check("config", FAIL, f"{where}: devices[] names type(s) {', '.join(unknown)} but the loaded "
                     f"plugins offer {', '.join(sorted(offered)) or 'none'}",
                     "correct 'type' in the config's devices: list (torch-fl devices shows the types), "
                     "or install the plugin for that type")
    return Check("config", OK, f"{where}: valid and matching the loaded plugins")


def check_runtime() -> Check:
    try:
        rt = process.start()
    except Exception as exc:  # noqa: BLE001 - the doctor reports start-up failures, never raises them
        return Check("runtime start", FAIL, f"{type(exc).__name__}: {exc}",
                     "fix the error above; import torch_fl shows it in full")
    count = len(rt.devices)
    if count == 0:
        return Check("runtime start", FAIL, f"started with no fl devices: {rt.empty_reason()}",
                     "follow the failed checks above")
    return Check("runtime start", OK, f"{count} fl device(s)")


def check_autoload() -> Check:
    """docs/users/do-no-harm.md: whether `import torch` alone starts fl in this environment."""
    import os

    from fl_runtime.integration import autoload
    if os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD") == "0":
        return Check("autoload", OK, "off (TORCH_DEVICE_BACKEND_AUTOLOAD=0): import torch_fl starts fl")
    if autoload.stood_aside:
        return Check("autoload", WARN, f"import torch does not start fl: {autoload.stood_aside}",
                     f"import torch_fl in scripts that use fl, or set {autoload.FORCE_ENV}=1")
    return Check("autoload", OK, "import torch starts fl (fl is PyTorch's current accelerator)")


def check_native_bridge() -> Check:
    """docs/users/native-bridge.md: the C++ hooks, or the Python route and why."""
    from fl_runtime import bridge
    state = bridge.status()
    if state.active:
        return Check("native bridge", OK, f"in use: {state.detail}")
    if state.detail.startswith(f"off: {bridge.SWITCH_ENV}=0"):
        return Check("native bridge", OK, f"{state.detail}; the Python route runs")
    from fl_runtime.integration import process
    if process.started() is None and process.startup_error is not None:
        return Check("native bridge", WARN, f"not loaded: the runtime did not start "
                     f"({type(process.startup_error).__name__}, see 'runtime start'){_cached_bridge()}",
                     "fix what stops the runtime from starting; the bridge loads when it starts")
    from fl_runtime.bridge import off
    reason, fix = off.reason_and_fix(state.detail)
    return Check("native bridge", WARN, f"off, the Python route runs ({off.SERVED_ONLY_BY_IT} raise "
                 f"NativeBridgeOffError or work only partly): {reason}", fix)


def _cached_bridge() -> str:
    """'; built for this PyTorch: <path>' when a verified build is cached, else ''."""
    from fl_runtime.bridge import build
    try:
        found = build.find_built()
    except Exception:  # noqa: BLE001 - an unreadable cache: nothing to say here
        return ""
    return f"; built for this PyTorch: {found}" if found else ""


def check_compiled_helpers() -> Check:
    """The optional C helpers (docs/contributors/compiled-helpers.md): a missing one costs speed, not results."""
    from fl_runtime import compiled
    absent = compiled.missing()
    if absent:
        return Check("compiled helpers", WARN, f"not built: {', '.join(absent)}; their Python versions run "
                     "(same results, ~1.5x the host time per small op)",
                     "reinstall torch-fl where a C compiler and Python's headers are available "
                     "(pip install --force-reinstall --no-deps torch-fl)")
    if compiled.pure_python_asked():
        return Check("compiled helpers", OK, f"built; their Python versions run, as {compiled.PURE_PYTHON_ENV} asks")
    return Check("compiled helpers", OK, f"in use: {', '.join(compiled.HELPERS)}")


_LOG_LEVELS = (" WARNING ", " ERROR ", " CRITICAL ")
_LOG_TAIL = 10


def recent_log_problems(path: str | None, tail: int = _LOG_TAIL) -> list[str]:
    """The last warnings/errors in the config's log file (logging.path), e.g. from training runs."""
    if not path:
        return []
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.readlines()[-2000:]
    except OSError:
        return []
    return [line.rstrip() for line in lines if any(level in line for level in _LOG_LEVELS)][-tail:]


def check_logs(captured: list[str], from_file: list[str] = (), path: str | None = None,
               at_start: list[str] = ()) -> Check:
    """Warnings/errors logged by the runtime's start, during the walk, and in the log file."""
    messages = ([f"at start-up: {m}" for m in at_start] + list(captured)[-_LOG_TAIL:]
                + [f"{path}: {line}" for line in from_file])
    if not messages:
        return Check("logs", OK, "no warnings or errors" + (f" (also none in {path})" if path else ""))
    return Check("logs", WARN, " | ".join(messages),
                 "read the messages; TORCH_FL_LOG_LEVEL=debug shows every probe step")


def run_checks() -> Report:
    """Walk every check and return the report (never raises for a broken install)."""
    from fl_runtime.logs import logger
    at_start = list(_recent.records)
    handler = _Captured()
    logger.addHandler(handler)
    try:
        config, config_error = None, None
        try:
            config = load_config()
        except ConfigError as exc:
            config_error = exc
        found, sources = check_plugins_found(config)
        policy = CertificationPolicy.from_config(config.certification) if config else CertificationPolicy()
        probe_plugins = config.probe_plugins if config else True     # a bad config: probe (the safe side)
        plugins, failures = load_all(sources, policy, probe_plugins) if sources else ([], [])
        report = Report([found, *check_loading(failures, plugins), check_driver(plugins, config),
                         check_certified_stack(plugins), check_device_nodes(),
                         check_config(config, config_error, plugins), check_lock(config, plugins),
                         check_autoload(), check_runtime(), check_compiled_helpers(),
                         check_native_bridge()])
    finally:
        logger.removeHandler(handler)
    log_path = config.logging.path if config else None
    report.checks.append(check_logs(list(handler.records), recent_log_problems(log_path), log_path, at_start))
    return report
