"""A plugin's metadata file: what the plugin states about itself outside the ABI.

`fl-sdk build` writes `<library>.meta.json` beside the library from plugin.yaml
(today: the `driver:` requirement, see fl_runtime.plugins.drivers).  The runtime
reads it before it uses any of the plugin's devices.  A plugin without the file
states nothing (every driver is accepted); a file that cannot be read is an error
naming the file, because silently ignoring a vendor's requirement would run
devices on a driver the vendor says does not work.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from fl_runtime.plugins.drivers import METADATA_FORMAT, DriverRequirement, DriverRequirementError

FORMAT = METADATA_FORMAT
SUFFIX = ".meta.json"


class PluginMetadataError(ValueError):
    """A plugin metadata file that exists but is not well formed."""


@dataclass(frozen=True)
class PluginMetadata:
    driver: DriverRequirement = field(default_factory=DriverRequirement)
    path: str | None = None            # the file it came from; None when there is none

    def as_dict(self) -> dict:
        return {"format": FORMAT, "driver": self.driver.as_dict()}


def metadata_path(library_path: str | Path) -> Path:
    """Where the convention puts a library's metadata: `<library>.meta.json` beside it."""
    library = Path(library_path)
    return library.with_name(library.name + SUFFIX)


def read_metadata(library_path: str | Path) -> PluginMetadata:
    """The metadata of the library at `library_path` (empty when it has no file)."""
    path = metadata_path(library_path)
    if not path.is_file():
        return PluginMetadata()
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PluginMetadataError(f"cannot read plugin metadata {path}: {exc}; rebuild the plugin "
                                  "(fl-sdk build DIR) or reinstall it") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise PluginMetadataError(f"{path} is not a {FORMAT} file; rebuild the plugin with this SDK")
    try:
        return PluginMetadata(DriverRequirement.from_mapping(doc.get("driver"), str(path)), str(path))
    except DriverRequirementError as exc:
        raise PluginMetadataError(str(exc)) from exc
