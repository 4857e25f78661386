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

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from . import runtime_not_started

# fl_runtime is imported inside the functions, and only when plugin.yaml states a
# requirement: importing it imports torch, which a vendor's `pip install` build
# (vendor_template setup.py -> fl_sdk.build) should not pay for nothing.

if TYPE_CHECKING:
    from fl_runtime.plugins.metadata import PluginMetadata


SUFFIX = ".meta.json"      # fl_runtime.plugins.metadata.SUFFIX (a test checks they agree)


class PluginMetaError(ValueError):
    """plugin.yaml's metadata keys are not well formed (the message names the key)."""


def read_plugin_metadata(spec_file: Path) -> PluginMetadata:
    """The metadata plugin.yaml states (validated as the runtime will read it)."""
    with runtime_not_started():
        from fl_runtime.plugins.drivers import DriverRequirement, DriverRequirementError
        from fl_runtime.plugins.metadata import PluginMetadata
    raw = _raw(spec_file)
    try:
        return PluginMetadata(DriverRequirement.from_mapping(raw.get("driver"), str(spec_file)))
    except DriverRequirementError as exc:
        raise PluginMetaError(str(exc)) from exc


def _raw(spec_file: Path) -> dict:
    return yaml.safe_load(spec_file.read_text()) or {}


def write_metadata(spec_file: Path, library_path: Path) -> Path | None:
    """Write the library's metadata file atomically (a starting runtime may read it);
    None (and no file) when plugin.yaml states nothing."""
    target = Path(str(library_path) + SUFFIX)
    if "driver" not in _raw(spec_file):
        target.unlink(missing_ok=True)
        return None
    document = read_plugin_metadata(spec_file).as_dict()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(document, handle, indent=1)
        handle.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, target)
    return target
