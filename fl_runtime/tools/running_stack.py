"""The stack this machine runs, for `torch-fl lock`, `torch-fl check` and doctor.

Read without starting the runtime (no PyTorch backend registration, no device
streams, and the config's `require_lock` is not enforced, so a mismatching
machine can still be inspected): plugins are discovered and loaded as the
runtime would (same certification policy), and their devices probed for the
driver versions (fl_runtime.plugins.stack).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fl_runtime.config import Config, load_config
from fl_runtime.devices.registry import probe_plugin, record_driver_versions
from fl_runtime.plugins.certification import CertificationPolicy
from fl_runtime.plugins.loader import Plugin, discover_sources, load_all
from fl_runtime.plugins.stack import running_stack


@dataclass
class RunningStack:
    stack: dict[str, Any]
    plugins: list[Plugin]
    notes: list[str] = field(default_factory=list)     # plugins that did not load or probe, and why


def collect(config: Config | None = None) -> RunningStack:
    """Load and probe every plugin the config and environment offer; raises ConfigError
    for a bad config (the caller reports it)."""
    config = config or load_config()
    plugins, failures = load_all(discover_sources(config.plugins),
                                 CertificationPolicy.from_config(config.certification), config.probe_plugins)
    notes = [f"plugin '{f.source.name}' ({f.source.path}) not loaded: {f.error}" for f in failures]
    for plugin in plugins:
        try:
            record_driver_versions(plugin, probe_plugin(plugin))
        except Exception as exc:  # noqa: BLE001 - a failed probe leaves the drivers unknown, noted
            notes.append(f"plugin '{plugin.name}': device probe failed, driver versions unknown: {exc}")
    return RunningStack(running_stack(plugins), plugins, notes)
