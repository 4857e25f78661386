"""The stack a process runs: versions of torch, Torch-FL, Python, the OS, the ABI and
every plugin (its version, library file and the driver its devices report).

Two uses (docs/operators/locks-and-upgrades.md):
- a **lock**: `torch-fl lock` writes the running stack to a small JSON file;
  `torch-fl check FILE` and the config's `require_lock: FILE` compare it with
  the running one and name every difference (field, locked value, running value);
- a **certified stack**: `fl-sdk certify` records the stack the `cert` profile ran
  on in the certificate; `stack_coverage` says whether the running stack is that one.

Everything here is read from package metadata, the plugin objects and the files on
disk: nothing starts PyTorch's backend.  Driver versions come from the plugin's
devices (`Plugin.driver_versions`, filled when devices.registry probes them).
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fl_runtime import abi
from fl_runtime.errors import LockFileError, LockMismatchError
from fl_runtime.plugins.certification import installed_torch_version, sha256_of
from fl_runtime.version import __version__

if TYPE_CHECKING:
    from fl_runtime.plugins.loader import Plugin

LOCK_FORMAT = "torch-fl-lock/1"
DEFAULT_LOCK_FILE = "torch-fl.lock"
ABSENT = "(absent)"

# Coverage of the running stack by a plugin's certificate.
COVERED, NOT_COVERED, STACK_UNKNOWN, NOT_CERTIFIED = "covered", "not_covered", "stack_unknown", "not_certified"


@dataclass(frozen=True)
class Difference:
    """One field where two stacks disagree; None stands for a field one side lacks."""
    field: str
    expected: Any          # the locked (or certified) value
    running: Any

    def describe(self, expected_word: str = "locked") -> str:
        return f"{self.field}: {expected_word} {_show(self.expected)}, running {_show(self.running)}"

    def as_dict(self, expected_word: str = "locked") -> dict[str, Any]:
        return {"field": self.field, expected_word: self.expected, "running": self.running}


def _show(value: Any) -> str:
    if value is None:
        return ABSENT
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True)
    return repr(str(value))


# -- what runs -----------------------------------------------------------------
def platform_facts() -> dict[str, str]:
    return {"python": platform.python_version(), "os": platform.system(), "arch": platform.machine()}


def plugin_stack(plugin: Plugin) -> dict[str, Any]:
    """One plugin's part of the lock: what identifies the build and the driver under it."""
    library = os.path.abspath(plugin.source.path)
    return {"version": plugin.version, "abi": _abi(plugin), "library": library,
            "sha256": sha256_of(library), "drivers": dict(plugin.driver_versions)}


def _abi(plugin: Plugin) -> str:
    major, minor = plugin.abi_version      # what the plugin negotiated
    return f"{major}.{minor}"


def running_stack(plugins: Iterable[Plugin]) -> dict[str, Any]:
    """The stack this process runs (the `stack` of a lock file)."""
    return {"torch": installed_torch_version(), "torch_fl": __version__, **platform_facts(),
            "abi": f"{abi.ABI_MAJOR}.{abi.ABI_MINOR}",
            "plugins": _by_name(plugins)}


def _by_name(plugins: Iterable[Plugin]) -> dict[str, dict[str, Any]]:
    # Keyed by plugin name (stable across machines); two libraries claiming one name
    # must not hide each other, so the second is keyed with its path too.
    entries: dict[str, dict[str, Any]] = {}
    for plugin in plugins:
        key = plugin.name if plugin.name not in entries else f"{plugin.name} ({plugin.source.path})"
        entries[key] = plugin_stack(plugin)
    return entries


def certificate_stack(plugin: Plugin) -> dict[str, Any]:
    """What a certificate records of the stack its cert run used (fl_sdk.certify), and what
    `stack_coverage` compares: one function, so both sides have the same fields."""
    facts = platform_facts()
    return {"torch": installed_torch_version(), "torch_fl": __version__,
            "abi": _abi(plugin), "plugin_version": plugin.version,
            "drivers": dict(plugin.driver_versions), "os": facts["os"], "arch": facts["arch"]}


# -- comparing -----------------------------------------------------------------
def differences(expected: Mapping[str, Any], running: Mapping[str, Any], prefix: str = "") -> list[Difference]:
    """Every field where the two stacks differ, dotted (`plugins.reference.sha256`).

    A sub-mapping one side lacks entirely (a plugin not installed) is one difference,
    not one per field."""
    found = []
    for key in _ordered_keys(expected, running):
        want, have = expected.get(key), running.get(key)
        name = f"{prefix}{key}"
        if isinstance(want, Mapping) and isinstance(have, Mapping):
            found += differences(want, have, name + ".")
        elif want != have:
            found.append(Difference(name, want, have))
    return found


def _ordered_keys(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    # The expected side's order first (the order a reader sees in the file), then extras.
    return list(a) + sorted(k for k in b if k not in a)


@dataclass(frozen=True)
class StackCoverage:
    """Whether a plugin's certificate covers the running stack, and where it does not."""
    state: str                              # covered / not_covered / stack_unknown / not_certified
    differences: tuple[Difference, ...] = ()
    certified_stack: Mapping[str, Any] | None = None

    @property
    def text(self) -> str:
        if self.state == COVERED:
            return "covered: the running stack is the one the certificate was issued on"
        if self.state == STACK_UNKNOWN:
            return ("stack unknown: the certificate predates stack recording; certify again with this "
                    "Torch-FL to record it")
        if self.state == NOT_CERTIFIED:
            return "not certified, so no certified stack"
        return "not covered: " + "; ".join(d.describe("certified") for d in self.differences)

    def as_dict(self) -> dict[str, Any]:
        return {"state": self.state, "text": self.text,
                "differences": [d.as_dict("certified") for d in self.differences]}


def stack_coverage(plugin: Plugin) -> StackCoverage:
    """Compare the certificate's recorded stack with what runs (after the devices were probed).

    An uncertified plugin has no stack to trust; a valid certificate without a stack
    (issued before stacks were recorded) is "stack unknown", not invalid."""
    status = getattr(plugin, "certification", None)
    if status is None or not status.certified:
        return StackCoverage(NOT_CERTIFIED)
    recorded = status.stack
    if not isinstance(recorded, Mapping):
        return StackCoverage(STACK_UNKNOWN)
    found = tuple(differences(recorded, certificate_stack(plugin)))
    return StackCoverage(NOT_COVERED if found else COVERED, found, recorded)


# -- lock files ----------------------------------------------------------------
def lock_document(stack: Mapping[str, Any]) -> dict[str, Any]:
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return {"format": LOCK_FORMAT, "created_at": now, "stack": dict(stack)}


def write_lock(path: str | Path, stack: Mapping[str, Any]) -> Path:
    """Write atomically, so a reader (a starting runtime) never sees half a lock."""
    path = Path(path).resolve()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(lock_document(stack), handle, indent=2)
        handle.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def read_lock(path: str | Path) -> dict[str, Any]:
    """The `stack` of a lock file; LockFileError names the file and what is wrong."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise LockFileError(str(path), "does not exist; write it with `torch-fl lock FILE` on the "
                            "verified machine") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LockFileError(str(path), f"cannot be read: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != LOCK_FORMAT or not isinstance(doc.get("stack"), dict):
        raise LockFileError(str(path), f"is not a {LOCK_FORMAT} file (written by `torch-fl lock`)")
    return doc["stack"]


def check_lock(path: str | Path, running: Mapping[str, Any]) -> list[Difference]:
    """Every difference between the lock file at `path` and the running stack."""
    return differences(read_lock(path), running)


def enforce_lock(path: str | Path, plugins: Iterable[Plugin]) -> None:
    """The config's `require_lock`: raise LockMismatchError naming every difference
    rather than run a stack nobody verified."""
    found = check_lock(path, running_stack(plugins))
    if found:
        raise LockMismatchError(str(path), [d.describe() for d in found])
