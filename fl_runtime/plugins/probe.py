"""Probe a plugin in a child process before it is loaded into the user's
(docs/operators/plugins.md "Isolated probing").

A plugin that calls abort() or segfaults in its library constructor or in
fl_plugin_get_api would take `import torch` down with it: no Python check runs
before that code.  So the exact bytes the loader will load (the descriptor of a
PinnedLibrary, the certificate check's guarantee) are first loaded in a minimal
child (probe_child.py: no torch, only cffi), which calls the entry point, runs
the loader's table checks and the device and kernel-table calls a start-up makes.
A crash, a hang or a refusal there becomes an error here, naming the library and
the signal; the plugin is never loaded and the others keep working.

The verdict is cached per (sha256 of the bytes, whether they load under their real
path, runtime version, ABI version) in
$XDG_CACHE_HOME/torch_fl/probe/ (~/.cache/torch_fl/probe/), so only the first
start-up after a plugin changes pays for a child.  A hang is not cached: on a
loaded machine a slow start is not a verdict on the bytes.  Switch: the config's
`probe_plugins` key, overridden by $TORCH_FL_PROBE_PLUGINS (0 or 1).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from fl_runtime import abi
from fl_runtime.errors import PluginProbeError
from fl_runtime.logs import logger
from fl_runtime.plugins.pinned import PinnedLibrary, real_path_or_reason
from fl_runtime.version import __version__

PROBE_ENV = "TORCH_FL_PROBE_PLUGINS"
TIMEOUT_ENV = "TORCH_FL_PROBE_TIMEOUT"
DEFAULT_TIMEOUT_S = 60.0
_CHILD = Path(__file__).with_name("probe_child.py")
_MARKER = "@@torch-fl-probe@@"       # probe_child.MARKER (the child is never imported here)
_CACHE_FORMAT = 1
# Run the child script without its own folder (or the cwd) on sys.path: this folder's
# module names must never shadow a standard-library module the child imports.
_BOOTSTRAP = ("import sys; del sys.path[0]; import runpy; sys.argv = sys.argv[1:]; "
              "runpy.run_path(sys.argv[0], run_name='__main__')")
_STDERR_TAIL = 600

OK, REFUSED, UNLOADABLE, CRASHED, HUNG, UNPROBED = "ok", "refused", "unloadable", "crashed", "hung", "unprobed"
_CACHED = (OK, REFUSED, CRASHED)     # verdicts about the bytes themselves


@dataclass(frozen=True)
class Verdict:
    """What one probe found: outcome, and the refusal kind/message or the signal."""
    outcome: str
    kind: str = ""           # a refusal's kind (table_checks.ABI_REFUSAL / LOAD_REFUSAL)
    message: str = ""        # a refusal's message, or the child's last stderr lines
    signal: str = ""         # SIGABRT, SIGSEGV ... for a crash by a signal ("" for an exit)


def probing_enabled(config_value: bool = True) -> bool:
    """$TORCH_FL_PROBE_PLUGINS (0/1) when set, else the config's `probe_plugins`."""
    value = os.environ.get(PROBE_ENV, "").strip().lower()
    if value in ("0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    return config_value


def probe_timeout() -> float:
    try:
        return float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_S)
    except ValueError:
        logger.warning("%s=%r is not a number of seconds; using %g", TIMEOUT_ENV,
                       os.environ[TIMEOUT_ENV], DEFAULT_TIMEOUT_S)
        return DEFAULT_TIMEOUT_S


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torch_fl" / "probe"


def cache_path(key: str) -> Path:
    return cache_dir() / f"{key}-{__version__}-abi{abi.ABI_MAJOR}.{abi.ABI_MINOR}.json"


def cache_key(pinned: PinnedLibrary) -> str:
    """The bytes, and whether they load under their real path or not: a plugin that finds its
    files beside itself behaves differently (docs/vendors/plugin-location.md), so a verdict
    given through /proc/self/fd must not stand once the install's permissions allow the path."""
    real, _ = real_path_or_reason(pinned)
    return f"{pinned.sha256}-{'path' if real else 'fd'}"


def verdict_for(pinned: PinnedLibrary) -> Verdict:
    """The cached verdict for these bytes, or a fresh probe's (cached when it is about the bytes)."""
    key = cache_key(pinned)
    cached = _read_cache(key)
    if cached is not None:
        logger.debug("probe verdict for %s from the cache: %s", pinned.path, cached.outcome)
        return cached
    verdict = run_probe(pinned, probe_timeout())
    if verdict.outcome in _CACHED:
        _write_cache(key, verdict)
    return verdict


def check_isolated(plugin: str, pinned: PinnedLibrary) -> Verdict:
    """PluginProbeError for a crash or hang; otherwise the verdict (a refusal is the
    caller's to raise, with the class its in-process checks would have used)."""
    verdict = verdict_for(pinned)
    if verdict.outcome in (CRASHED, HUNG):
        raise PluginProbeError(plugin, _describe(pinned.path, verdict), verdict.outcome, verdict.signal)
    return verdict


def _describe(path: str, verdict: Verdict) -> str:
    if verdict.outcome == CRASHED and verdict.signal:
        what = f"{path} crashed with {verdict.signal} during its isolated probe"
    elif verdict.outcome == CRASHED:       # exit() in a constructor ends a user's process as surely
        what = f"{path} ended its isolated probe's process without a verdict"
    else:
        what = f"{path} did not finish its isolated probe within {probe_timeout():g} s (hang?)"
    said = f"; it said: {verdict.message.strip()}" if verdict.message.strip() else ""
    return (f"{what} (loading it, calling {abi.ENTRY_SYMBOL} and asking for its devices in a child "
            f"process), so it was not loaded and the other plugins run without it{said}. Fix the plugin "
            f"(`fl-sdk test {path}` reports where it fails); {PROBE_ENV}=0 skips the probe")


def run_probe(pinned: PinnedLibrary, timeout: float) -> Verdict:
    """Run probe_child.py on the descriptor of `pinned` and read its verdict."""
    command = [sys.executable, "-c", _BOOTSTRAP, str(_CHILD), str(abi.HEADER_PATH), abi.ENTRY_SYMBOL, str(pinned.fd),
               pinned.path, pinned.sha256, str(pinned.size)]
    started = time.monotonic()
    try:
        done = subprocess.run(command, check=False, pass_fds=(pinned.fd,), stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=timeout, env=_child_env())
    except subprocess.TimeoutExpired as exc:
        return Verdict(HUNG, message=_tail(exc.stderr))
    except OSError as exc:
        # No interpreter to start (an embedding application's sys.executable is not Python):
        # load unprobed, as with the probe switched off, and say so.
        logger.warning("cannot start the isolated probe for %s (%s): loading it unprobed; set %s=0 to "
                       "silence this", pinned.path, exc, PROBE_ENV)
        return Verdict(UNPROBED, message=str(exc))
    logger.debug("probed %s in a child process in %.2f s (exit %s)", pinned.path,
                 time.monotonic() - started, done.returncode)
    if done.returncode < 0:
        return Verdict(CRASHED, message=_tail(done.stderr), signal=_signal_name(-done.returncode))
    return _parse(done)


def _child_env() -> dict[str, str]:
    # The child must not start a runtime of its own (it imports no torch, but a
    # sitecustomize might): PyTorch's autoload off.
    return {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}


def _parse(done: subprocess.CompletedProcess) -> Verdict:
    out = done.stdout.decode(errors="replace")
    line = next((line for line in reversed(out.splitlines()) if line.startswith(_MARKER)), None)
    if line is None:
        # Exited (exit() in a constructor, a Python error in the child) without a verdict:
        # as fatal to a user's process as a crash.
        return Verdict(CRASHED, message=f"(exit status {done.returncode}) {_tail(done.stderr)}")
    result = json.loads(line[len(_MARKER):])
    return Verdict(result["outcome"], result.get("kind", ""), result.get("message", ""))


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _tail(stderr: bytes | None) -> str:
    return (stderr or b"").decode(errors="replace")[-_STDERR_TAIL:]


def _read_cache(key: str) -> Verdict | None:
    try:
        doc = json.loads(cache_path(key).read_text())
        if doc.get("format") != _CACHE_FORMAT or doc.get("outcome") not in _CACHED:
            return None
        return Verdict(doc["outcome"], doc.get("kind", ""), doc.get("message", ""), doc.get("signal", ""))
    except (OSError, ValueError, AttributeError, KeyError):
        return None       # absent, unreadable or damaged: probe again


def _write_cache(key: str, verdict: Verdict) -> None:
    """Atomically (a temporary file renamed), so a concurrent start-up never reads half a verdict;
    a cache that cannot be written only costs the next start-up a probe."""
    path = cache_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as handle:
            json.dump({"format": _CACHE_FORMAT, **asdict(verdict)}, handle)
        os.replace(tmp, path)
    except OSError as exc:
        logger.debug("cannot cache the probe verdict in %s: %s", path.parent, exc)
