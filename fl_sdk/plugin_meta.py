"""`fl-sdk build`'s second output: `<library>.meta.json` beside the library.

What a plugin states about itself outside the ABI (today the driver versions it
supports: plugin.yaml `driver: {minimum: "1.2", known_bad: ["1.4.0"]}`), in the file
the runtime reads before it uses the plugin's devices (fl_runtime.plugins.metadata).
A plugin.yaml without `driver:` gets a file stating no requirement, so a stale one
from an earlier build never outlives the key.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import yaml

from fl_runtime.plugins.drivers import DriverRequirement, DriverRequirementError
from fl_runtime.plugins.metadata import PluginMetadata, metadata_path


class PluginMetaError(ValueError):
    """plugin.yaml's metadata keys are not well formed (the message names the key)."""


def read_plugin_metadata(spec_file: Path) -> PluginMetadata:
    """The metadata plugin.yaml states (validated as the runtime will read it)."""
    raw = yaml.safe_load(spec_file.read_text()) or {}
    try:
        return PluginMetadata(DriverRequirement.from_mapping(raw.get("driver"), str(spec_file)))
    except DriverRequirementError as exc:
        raise PluginMetaError(str(exc)) from exc


def write_metadata(spec_file: Path, library_path: Path) -> Path:
    """Write the library's metadata file atomically (a starting runtime may read it)."""
    target = metadata_path(library_path)
    document = read_plugin_metadata(spec_file).as_dict()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(document, handle, indent=1)
        handle.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, target)
    return target
