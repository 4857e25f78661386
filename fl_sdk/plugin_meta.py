"""`fl-sdk build`'s second output: `<library>.meta.json` beside the library.

What a plugin states about itself outside the ABI (today the driver versions it
supports: plugin.yaml `driver: {minimum: "1.2", known_bad: ["1.4.0"]}`), in the file
the runtime reads before it uses the plugin's devices (fl_runtime.plugins.metadata).
A plugin.yaml without `driver:` gets no file (so projects that state nothing see
no new build output), and a stale one from an earlier build is removed: it must not
outlive the key.  A plugin that states a requirement ships the file next to its
library (package data) and keeps it out of git, like the library.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

import yaml

# The requirement is parsed by the runtime's own rules (fl_runtime/plugins/drivers.py), loaded
# as a standalone module: importing the fl_runtime package imports torch, which pip's isolated
# build environment (setup.py compiling a plugin) does not have, and which a build should not pay for.


SUFFIX = ".meta.json"      # fl_runtime.plugins.metadata.SUFFIX (a test checks they agree)


class PluginMetaError(ValueError):
    """plugin.yaml's metadata keys are not well formed (the message names the key)."""


def _driver_rules():
    """fl_runtime/plugins/drivers.py, loaded on its own (it imports only the standard
    library and packaging), found without importing the fl_runtime package."""
    module = sys.modules.get("fl_runtime.plugins.drivers") or sys.modules.get("_fl_sdk_driver_rules")
    if module is not None:
        return module
    package = importlib.util.find_spec("fl_runtime")
    if package is None or not package.submodule_search_locations:
        raise PluginMetaError("the Torch-FL runtime (fl_runtime) is not installed; reinstall torch-fl")
    path = Path(next(iter(package.submodule_search_locations))) / "plugins" / "drivers.py"
    spec = importlib.util.spec_from_file_location("_fl_sdk_driver_rules", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


def read_plugin_metadata(spec_file: Path) -> dict:
    """The metadata document plugin.yaml states, validated as the runtime will read it:
    {"format": ..., "driver": {"minimum": ..., "known_bad": [...]}}."""
    rules = _driver_rules()
    raw = _raw(spec_file)
    try:
        requirement = rules.DriverRequirement.from_mapping(raw.get("driver"), str(spec_file))
    except rules.DriverRequirementError as exc:
        raise PluginMetaError(str(exc)) from exc
    return {"format": rules.METADATA_FORMAT, "driver": requirement.as_dict()}


def _raw(spec_file: Path) -> dict:
    return yaml.safe_load(spec_file.read_text()) or {}


def write_metadata(spec_file: Path, library_path: Path) -> Path | None:
    """Write the library's metadata file atomically (a starting runtime may read it);
    None (and no file) when plugin.yaml states nothing."""
    target = Path(str(library_path) + SUFFIX)
    if "driver" not in _raw(spec_file):
        target.unlink(missing_ok=True)
        return None
    document = read_plugin_metadata(spec_file)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(document, handle, indent=1)
        handle.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, target)
    return target
