"""The vendor's known-failures file: tests it expects to fail, with reasons.

It lives next to the plugin library as `known_failures.yaml`:

    known_failures:
      - op: "div.Tensor"          # fields are globs; those left out match anything
        dtype: bfloat16
        variant: fast
        reason: "approximate reciprocal, tracked as VEND-123"
      - category: streams
        test: "test_elapsed*"
        reason: "timer resolution 1 ms"

Fields: category, op, dtype, variant, test (the test's name); reason is
required.  Entries that match no test are reported, so stale waivers show.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

import yaml

WAIVER_FILE = "known_failures.yaml"
FIELDS = ("category", "op", "dtype", "variant", "test")


class WaiverError(ValueError):
    """The waiver file is malformed (the message names the entry)."""


@dataclass
class Waiver:
    fields: dict[str, str]
    reason: str
    used: int = 0

    def matches(self, identity: dict[str, str]) -> bool:
        return all(fnmatch.fnmatchcase(str(identity.get(key) or ""), pattern)
                   for key, pattern in self.fields.items())

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.fields.items())


def waiver_file(library: str) -> Path:
    return Path(library).resolve().parent / WAIVER_FILE


def load(path: Path) -> list[Waiver]:
    if not path.is_file():
        return []
    raw = yaml.safe_load(path.read_text()) or {}
    entries = raw.get("known_failures", []) if isinstance(raw, dict) else None
    if not isinstance(entries, list):
        raise WaiverError(f"{path}: expected a 'known_failures:' list")
    waivers = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not str(entry.get("reason", "")).strip():
            raise WaiverError(f"{path}: entry {i + 1} needs a 'reason'")
        unknown = set(entry) - set(FIELDS) - {"reason"}
        fields = {k: str(v) for k, v in entry.items() if k in FIELDS}
        if unknown or not fields:
            raise WaiverError(f"{path}: entry {i + 1}: fields must be among {', '.join(FIELDS)}"
                              + (f" (unknown: {', '.join(sorted(unknown))})" if unknown else ""))
        waivers.append(Waiver(fields, str(entry["reason"])))
    return waivers


def find(waivers: list[Waiver], identity: dict[str, str]) -> Waiver | None:
    """The first waiver covering a test (and count its use)."""
    for waiver in waivers:
        if waiver.matches(identity):
            waiver.used += 1
            return waiver
    return None
