"""~/.torch_fl/config.yaml: read once, validated, every error names its key.

The file is optional; a missing file means the defaults below.  Its path can
be overridden with TORCH_FL_CONFIG.
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError

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


@dataclass(frozen=True)
class LoggingConfig:
    level: str = "warning"
    path: str | None = None


@dataclass(frozen=True)
class Config:
    devices: tuple[DeviceRule, ...] = ()          # empty: every device of every plugin
    fallback: FallbackConfig = field(default_factory=FallbackConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    plugins: tuple[str, ...] = ()                  # extra plugin library paths
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
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError("<file>", f"not valid YAML: {exc}", str(path)) from exc
    return parse_config(raw, str(path))


def parse_config(raw: Any, path: str | None = None) -> Config:
    """Validate a config mapping (as YAML gives it) into a Config."""
    _expect(raw, dict, "<top level>", "a mapping", path)
    _reject_unknown(raw, ("devices", "fallback", "logging", "plugins"), "", path)
    devices = tuple(_device_rule(item, f"devices[{i}]", path)
                    for i, item in enumerate(_expect(raw.get("devices", []), list, "devices", "a list", path)))
    seen = [rule.type for rule in devices]
    for dup in {t for t in seen if seen.count(t) > 1}:
        raise ConfigError("devices", f"type '{dup}' is listed more than once", path)
    plugins = _expect(raw.get("plugins", []), list, "plugins", "a list of library paths", path)
    for i, item in enumerate(plugins):
        _expect(item, str, f"plugins[{i}]", "a path string", path)
    return Config(devices=devices, fallback=_fallback(raw.get("fallback", {}), path),
                  logging=_logging(raw.get("logging", {}), path),
                  plugins=tuple(os.path.expanduser(p) for p in plugins), path=path)


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
