"""Which driver versions a plugin supports, and whether a device's driver is one of them.

A plugin states its requirement in its metadata file (fl_runtime.plugins.metadata,
written by `fl-sdk build` from plugin.yaml's `driver:` key), not through the ABI:
a minimum and, optionally, versions known to be broken.  Versions compare as PEP 440
(`packaging.version`), so "1.10" > "1.9" and "1.0" == "1.0.0".  A device whose
driver falls outside is left out at start-up unless the config's
`drivers.allow_unsupported` keeps it (docs/operators/config.md).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

# The format of `<library>.meta.json` (fl_runtime.plugins.metadata reads it).  Here, in the
# one runtime module that needs only the standard library and packaging, so that fl-sdk
# build can write the file where torch is not installed (pip's isolated build of a plugin).
METADATA_FORMAT = "torch-fl-plugin-meta/1"

# Verdict codes; `DriverVerdict.reason` says it in words.
SUPPORTED, NO_REQUIREMENT = "supported", "no_requirement"
BELOW_MINIMUM, KNOWN_BAD, UNPARSABLE = "below_minimum", "known_bad", "unparsable"


class DriverRequirementError(ValueError):
    """A driver requirement that is not well formed (names the key and the value)."""


@dataclass(frozen=True)
class DriverVerdict:
    """Whether one device's driver meets its plugin's requirement."""
    supported: bool
    code: str              # one of the constants above
    reason: str            # names the field (driver_version), the required and the running value


@dataclass(frozen=True)
class DriverRequirement:
    """`minimum` (inclusive) and `known_bad` driver versions; empty means no requirement."""
    minimum: str | None = None
    known_bad: tuple[str, ...] = ()

    @classmethod
    def from_mapping(cls, raw: Any, where: str) -> DriverRequirement:
        """From `{minimum: "1.2", known_bad: ["1.4.0"]}`; `where` names the source in errors."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise DriverRequirementError(f"{where}: 'driver' must be a mapping with 'minimum' and "
                                         f"'known_bad', got {raw!r}")
        unknown = sorted(set(raw) - {"minimum", "known_bad"})
        if unknown:
            raise DriverRequirementError(f"{where}: unknown key(s) driver.{', driver.'.join(unknown)} "
                                         "(known: minimum, known_bad)")
        minimum = raw.get("minimum")
        if minimum is not None:
            _parse(minimum, f"{where}: driver.minimum")
        bad = raw.get("known_bad") or []
        if not isinstance(bad, list):
            raise DriverRequirementError(f"{where}: driver.known_bad must be a list of versions, got {bad!r}")
        for i, version in enumerate(bad):
            _parse(version, f"{where}: driver.known_bad[{i}]")
        return cls(None if minimum is None else str(minimum), tuple(str(v) for v in bad))

    def as_dict(self) -> dict[str, Any]:
        return {"minimum": self.minimum, "known_bad": list(self.known_bad)}

    @property
    def empty(self) -> bool:
        return self.minimum is None and not self.known_bad

    def describe(self) -> str:
        parts = [f">= {self.minimum}"] if self.minimum else []
        parts += [f"not {v}" for v in self.known_bad]
        return ", ".join(parts) or "any"

    def assess(self, running: str, plugin: str) -> DriverVerdict:
        """The verdict for a device of `plugin` whose driver reports `running`."""
        if self.empty:
            return DriverVerdict(True, NO_REQUIREMENT, f"plugin '{plugin}' states no driver requirement")
        try:
            version = Version(running)
        except InvalidVersion:
            return DriverVerdict(False, UNPARSABLE, (
                f"driver_version {running!r} is not a PEP 440 version, so it cannot be checked against "
                f"plugin '{plugin}''s requirement (required {self.describe()}, running {running!r}): "
                "ask the vendor for a driver that reports a version like 1.2.3"))
        if self.minimum and version < Version(self.minimum):
            return DriverVerdict(False, BELOW_MINIMUM, (
                f"driver_version is below the minimum plugin '{plugin}' supports (required >= "
                f"{self.minimum}, running {running}): upgrade the driver"))
        for bad in self.known_bad:
            if version == Version(bad):
                return DriverVerdict(False, KNOWN_BAD, (
                    f"driver_version {running} is known to be broken for plugin '{plugin}' (required "
                    f"{self.describe()}, running {running}): install another driver version"))
        return DriverVerdict(True, SUPPORTED, f"driver_version {running} meets plugin '{plugin}''s "
                             f"requirement ({self.describe()})")


def _parse(value: Any, where: str) -> Version:
    try:
        return Version(str(value))
    except InvalidVersion:
        raise DriverRequirementError(f"{where} {value!r} is not a PEP 440 version (e.g. \"1.2\" or "
                                     "\"1.4.0\")") from None
