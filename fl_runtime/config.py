"""~/.torch_fl/config.yaml: read once, validated, every error names its key.

The file is optional; a missing file means the defaults below.  Its path can
be overridden with TORCH_FL_CONFIG.  PyYAML is imported only when there is a file
to read: most processes have none, and every start-up pays for what `import
torch` loads (docs/benchmarks/index.md "Start-up").
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fl_runtime.errors import ConfigError

DEFAULT_PATH = Path("~/.torch_fl/config.yaml")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


@dataclass(frozen=True)
class DeviceRule:
    """How many devices of one vendor type to use, and how much of their memory."""
    type: str
    count: int | None = None          # None: all of them
    memory_fraction: float = 1.0


@dataclass(frozen=True)
class FallbackConfig:
    enable_cpu_fallback: bool = True
    enable_generic_kernel: bool = True


VARIANTS = ("precise", "fast")


@dataclass(frozen=True)
class KernelsConfig:
    """Which vendor kernel variant runs when a vendor offers both (docs/users/profiling.md)."""
    variant: str = "precise"                       # the global policy
    per_op: tuple[tuple[str, str], ...] = ()       # (kernel-table op name, variant); beats the rest
    fast_under_autocast: bool = True               # inside torch.autocast("fl"), prefer fast

    def variant_for(self, op: str) -> str | None:
        """The variant pinned for `op` ('mm', 'add.Tensor'), or None."""
        return next((v for name, v in self.per_op if name == op), None)


@dataclass(frozen=True)
class ProfilerConfig:
    fallback_warning_share: float = 0.10           # warn when more op calls than this fall back


@dataclass(frozen=True)
class LoggingConfig:
    level: str = "warning"
    path: str | None = None


@dataclass(frozen=True)
class CertificationConfig:
    """Which plugins may load: see fl_runtime.certification."""
    require_certified: bool = False           # refuse plugins without a valid certificate
    trusted_keys: tuple[str, ...] = ()        # Ed25519 public key files (PEM or raw 32 bytes)
    certificates: tuple[tuple[str, str], ...] = ()   # (plugin name, certificate path) overrides


@dataclass(frozen=True)
class DriversConfig:
    """Devices whose driver is outside their plugin's stated requirement (fl_runtime.plugins.drivers)."""
    allow_unsupported: bool = False           # true: keep every such device (with a warning)
    allow_unsupported_types: tuple[str, ...] = ()   # or only these device types

    def allows(self, device_type: str) -> bool:
        return self.allow_unsupported or device_type in self.allow_unsupported_types


@dataclass(frozen=True)
class Config:
    devices: tuple[DeviceRule, ...] = ()          # empty: every device of every plugin
    fallback: FallbackConfig = field(default_factory=FallbackConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    plugins: tuple[str, ...] = ()                  # extra plugin library paths
    certification: CertificationConfig = field(default_factory=CertificationConfig)
    kernels: KernelsConfig = field(default_factory=KernelsConfig)
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)
    drivers: DriversConfig = field(default_factory=DriversConfig)
    require_lock: str | None = None                # a `torch-fl lock` file the running stack must match
    probe_plugins: bool = True                     # probe each plugin in a child before loading it
    path: str | None = None                        # where it was read from, if anywhere

    def rule_for(self, device_type: str) -> DeviceRule | None:
        """The devices: entry for a vendor type; None when the list does not name it."""
        return next((rule for rule in self.devices if rule.type == device_type), None)


def config_path() -> Path:
    """The config file in effect: $TORCH_FL_CONFIG or ~/.torch_fl/config.yaml."""
    return Path(os.environ.get("TORCH_FL_CONFIG") or DEFAULT_PATH).expanduser()


def load_config(path: Path | None = None) -> Config:
    """Read and validate the config file; a missing file gives the defaults."""
    path = path or config_path()
    if not path.exists():
        if os.environ.get("TORCH_FL_CONFIG"):
            raise ConfigError("TORCH_FL_CONFIG", f"file {path} does not exist", None)
        return Config()
    text = _read_text(path)
    import yaml
    loader = _yaml_loader()
    try:
        # A hostile file nested thousands of levels deep: libyaml refuses beyond 1000 levels
        # (a YAMLError); PyYAML's pure-Python composer recurses per level (RecursionError),
        # and so may repr() of a deep value in an error message.
        raw = yaml.load(text, Loader=loader) or {}
        return parse_config(raw, str(path))
    except yaml.YAMLError as exc:
        raise ConfigError("<file>", f"not valid YAML: {exc}", str(path)) from exc
    except RecursionError:
        raise ConfigError("<file>", "is nested too deeply to read; a Torch-FL config is a few levels "
                          "deep", str(path)) from None


def _yaml_loader() -> type:
    """libyaml's C loader when PyYAML was built with it (much faster on big files; same
    result), else PyYAML's own; resolved on first use, kept as the module's `_SafeLoader`."""
    loader = globals().get("_SafeLoader")
    if loader is None:
        import yaml
        loader = globals()["_SafeLoader"] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return loader


def __getattr__(name: str) -> Any:
    if name == "_SafeLoader":       # read before any config file was: resolve it now
        return _yaml_loader()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _read_text(path: Path) -> str:
    """The file's text; what is wrong with it as a ConfigError naming the file."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("<file>", f"is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                          f"{exc.start}); save it as UTF-8", str(path)) from exc
    except IsADirectoryError as exc:
        raise ConfigError("<file>", "is a directory, not a file; point TORCH_FL_CONFIG at the YAML file "
                          "itself", str(path)) from exc
    except OSError as exc:
        raise ConfigError("<file>", f"cannot be read: {exc.strerror or exc}", str(path)) from exc


def parse_config(raw: Any, path: str | None = None) -> Config:
    """Validate a config mapping (as YAML gives it) into a Config."""
    _expect(raw, dict, "<top level>", "a mapping", path)
    _reject_unknown(raw, ("devices", "fallback", "logging", "plugins", "certification", "kernels",
                           "profiler", "drivers", "require_lock", "probe_plugins"), "", path)
    devices = tuple(_device_rule(item, f"devices[{i}]", path)
                    for i, item in enumerate(_expect(raw.get("devices", []), list, "devices", "a list", path)))
    seen: set[str] = set()       # a set: a list's count() per entry was quadratic in the list
    for rule in devices:
        if rule.type in seen:
            raise ConfigError("devices", f"type '{rule.type}' is listed more than once", path)
        seen.add(rule.type)
    plugins = _expect(raw.get("plugins", []), list, "plugins", "a list of library paths", path)
    for i, item in enumerate(plugins):
        _expect(item, str, f"plugins[{i}]", "a path string", path)
    return Config(devices=devices, fallback=_fallback(raw.get("fallback", {}), path),
                  logging=_logging(raw.get("logging", {}), path),
                  plugins=tuple(os.path.expanduser(p) for p in plugins),
                  certification=_certification(raw.get("certification", {}), path),
                  kernels=_kernels(raw.get("kernels", {}), path),
                  profiler=_profiler(raw.get("profiler", {}), path),
                  drivers=_drivers(raw.get("drivers", {}), path),
                  require_lock=_require_lock(raw.get("require_lock"), path),
                  probe_plugins=_expect(raw.get("probe_plugins", True), bool, "probe_plugins", "true or false",
                                        path),
                  path=path)


def _device_rule(item: Any, key: str, path: str | None) -> DeviceRule:
    _expect(item, dict, key, "a mapping with 'type', 'count', 'memory_fraction'", path)
    _reject_unknown(item, ("type", "count", "memory_fraction"), key + ".", path)
    if "type" not in item:
        raise ConfigError(f"{key}.type", "missing: name the vendor's device type, e.g. 'reference'", path)
    dev_type = _expect(item["type"], str, f"{key}.type", "a string", path)
    count = item.get("count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise ConfigError(f"{key}.count", f"must be a whole number >= 0, got {count!r}", path)
    fraction = item.get("memory_fraction", 1.0)
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ConfigError(f"{key}.memory_fraction", f"must be a number in (0, 1], got {fraction!r}", path)
    return DeviceRule(type=dev_type, count=count, memory_fraction=float(fraction))


def _fallback(raw: Any, path: str | None) -> FallbackConfig:
    _expect(raw, dict, "fallback", "a mapping", path)
    _reject_unknown(raw, ("enable_cpu_fallback", "enable_generic_kernel"), "fallback.", path)
    values = {name: _expect(raw.get(name, True), bool, f"fallback.{name}", "true or false", path)
              for name in ("enable_cpu_fallback", "enable_generic_kernel")}
    return FallbackConfig(**values)


def _logging(raw: Any, path: str | None) -> LoggingConfig:
    _expect(raw, dict, "logging", "a mapping", path)
    _reject_unknown(raw, ("level", "path"), "logging.", path)
    level = str(raw.get("level", "warning")).lower()
    if level not in LOG_LEVELS:
        raise ConfigError("logging.level", f"must be one of {', '.join(LOG_LEVELS)}, got {raw['level']!r}", path)
    log_path = raw.get("path")
    if log_path is not None:
        log_path = os.path.expanduser(_expect(log_path, str, "logging.path", "a file path", path))
    return LoggingConfig(level=level, path=log_path)


def _certification(raw: Any, path: str | None) -> CertificationConfig:
    _expect(raw, dict, "certification", "a mapping", path)
    _reject_unknown(raw, ("require_certified", "trusted_keys", "certificates"), "certification.", path)
    require = _expect(raw.get("require_certified", False), bool, "certification.require_certified",
                      "true or false", path)
    keys = _expect(raw.get("trusted_keys", []), list, "certification.trusted_keys",
                   "a list of public key file paths", path)
    for i, item in enumerate(keys):
        _expect(item, str, f"certification.trusted_keys[{i}]", "a path string", path)
    if require and not keys:
        raise ConfigError("certification.trusted_keys", "is empty while require_certified is true, so no "
                          "plugin could load: list the certifier's public key file(s)", path)
    certs = _expect(raw.get("certificates", {}), dict, "certification.certificates",
                    "a mapping of plugin name to certificate path", path)
    for name, cert in certs.items():
        _expect(cert, str, f"certification.certificates.{name}", "a path string", path)
    return CertificationConfig(require, tuple(os.path.expanduser(k) for k in keys),
                               tuple((str(n), os.path.expanduser(c)) for n, c in certs.items()))


def _kernels(raw: Any, path: str | None) -> KernelsConfig:
    _expect(raw, dict, "kernels", "a mapping", path)
    _reject_unknown(raw, ("variant", "per_op", "fast_under_autocast"), "kernels.", path)
    variant = _variant(raw.get("variant", "precise"), "kernels.variant", path)
    per_op = _expect(raw.get("per_op", {}), dict, "kernels.per_op", "a mapping of op name to variant", path)
    pinned = tuple((_op_name(op, path), _variant(v, f"kernels.per_op.{op}", path)) for op, v in per_op.items())
    autocast = _expect(raw.get("fast_under_autocast", True), bool, "kernels.fast_under_autocast",
                       "true or false", path)
    return KernelsConfig(variant, pinned, autocast)


def _variant(value: Any, key: str, path: str | None) -> str:
    if value not in VARIANTS:
        raise ConfigError(key, f"must be one of {', '.join(VARIANTS)}, got {value!r}", path)
    return value


def _op_name(op: Any, path: str | None) -> str:
    """'aten::mm' / 'mm' / 'aten::add.Tensor' -> the kernel-table name ('mm', 'add.Tensor')."""
    name = str(op).removeprefix("aten::")
    if not _is_aten_overload(name):
        raise ConfigError(f"kernels.per_op.{op}", "is not an ATen operator; name it as PyTorch does, "
                          "e.g. 'aten::mm' or 'aten::add.Tensor'", path)
    return name


def _is_aten_overload(name: str) -> bool:
    """'mm', 'add.Tensor' name an overload of torch.ops.aten ('mm.__doc__' does not)."""
    import torch  # only needed when per_op is used
    packet, _, overload = name.partition(".")
    try:
        found = getattr(getattr(torch.ops.aten, packet), overload or "default")
    except (AttributeError, RuntimeError):
        return False
    return isinstance(found, torch._ops.OpOverload)


def _profiler(raw: Any, path: str | None) -> ProfilerConfig:
    _expect(raw, dict, "profiler", "a mapping", path)
    _reject_unknown(raw, ("fallback_warning_share",), "profiler.", path)
    share = raw.get("fallback_warning_share", 0.10)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise ConfigError("profiler.fallback_warning_share", f"must be a number in [0, 1], got {share!r}", path)
    return ProfilerConfig(float(share))


def _drivers(raw: Any, path: str | None) -> DriversConfig:
    """`drivers: {allow_unsupported: true | false | [device type, ...]}`."""
    _expect(raw, dict, "drivers", "a mapping", path)
    _reject_unknown(raw, ("allow_unsupported",), "drivers.", path)
    allow = raw.get("allow_unsupported", False)
    if isinstance(allow, bool):
        return DriversConfig(allow_unsupported=allow)
    if not isinstance(allow, list) or not all(isinstance(t, str) and t for t in allow):
        raise ConfigError("drivers.allow_unsupported", "must be true, false or a list of device type "
                          f"strings (e.g. [reference]), got {allow!r}", path)
    return DriversConfig(allow_unsupported_types=tuple(allow))


def _require_lock(raw: Any, path: str | None) -> str | None:
    """`require_lock: FILE` (a `torch-fl lock` file); relative paths are relative to the config file."""
    if raw is None:
        return None
    lock = _expect(raw, str, "require_lock", "the path of a `torch-fl lock` file", path)
    if not lock:
        raise ConfigError("require_lock", "is empty: name the lock file `torch-fl lock` wrote", path)
    lock = os.path.expanduser(lock)
    if path and not os.path.isabs(lock):
        lock = os.path.join(os.path.dirname(os.path.abspath(path)), lock)
    return lock


def _expect(value: Any, kind: type, key: str, what: str, path: str | None) -> Any:
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool) and kind is not object):
        raise ConfigError(key, f"must be {what}, got {value!r}", path)
    return value


def _reject_unknown(raw: dict, known: tuple[str, ...], prefix: str, path: str | None) -> None:
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"; did you mean '{prefix}{close[0]}'?" if close else f"; known keys: {', '.join(known)}"
            raise ConfigError(f"{prefix}{key}", "unknown key" + hint, path)
