"""Kernel checks in worker processes, so a crash or hang fails a kernel, not the run.

One worker process per kernel-table entry runs that entry's units (numerics
per dtype, then robustness) and appends one JSON line per event to a log; it
also writes the case it is about to launch to a progress file.  The parent
runs a few workers at once, in the order the tests will ask for them.  When
a worker dies (a signal, a non-zero exit) or stays silent longer than the
profile's unit timeout, the unit it was in fails with the last case as the
reproducer, and the entry's remaining units go to a fresh worker.

Before anything else, loading the plugin (its constructors, fl_plugin_get_api,
reading its table, devices and kernel entries: the ABI probes every test needs)
runs once in a worker too (`KernelWorkers.check_loading`), so a plugin that
aborts or segfaults there fails the run with a report naming the signal
instead of killing `fl-sdk test`.

Workers are forked from conformance.forkserver, which imports torch once (and runs
prepare_workers before the first kernel worker).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
import traceback
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import statuses
from .forkserver import ForkServer
from .profiles import Profile
from .repro import kernel_script

Unit = tuple   # ("numerics", dtype name), ("robustness", None) or ("concurrency", None)


@dataclass
class Job:
    entry_index: int
    op: str
    variant: str
    units: list[Unit]


@dataclass
class _Running:
    job: Job
    worker: int              # fork server id
    log: Path
    progress: Path
    offset: int = 0
    current: Unit | None = None
    last_event: float = field(default_factory=time.monotonic)
    done: set = field(default_factory=set)
    fatal: str = ""
    killed: str = ""         # why the parent killed it, if it did


@dataclass(frozen=True)
class LoadCrash:
    """Loading the plugin killed (or hung) the worker that tried: how, for the report."""
    message: str
    signal: str = ""          # SIGABRT, SIGSEGV ...; "" for a hang or a plain exit


def load_worker(library: str, result_path: str) -> None:
    """Worker process body: the loading and table reads every test relies on, in a
    process a crash may take down.  Errors the loader raises (a refused table) are
    written as a result; the parent's in-process load reports them as before."""
    try:
        from fl_runtime.plugins.loader import PluginSource, load_plugin

        from .harness import kernel_entries
        from .target import describe

        # probe_plugins off: this worker is the isolation, a nested probe would only cost time.
        plugin = load_plugin(PluginSource("under test", library, "conformance worker"), probe_plugins=False)
        describe(plugin)
        kernel_entries(plugin)
        result = {"loaded": True}
    except Exception as exc:  # noqa: BLE001 - reported by the in-process load, with its class
        result = {"loaded": False, "error": f"{type(exc).__name__}: {exc}"}
    _write_atomically(Path(result_path), json.dumps(result))


def worker(library: str, job: dict, profile: dict, run_seed: int, log_path: str, progress_path: str) -> None:
    """Worker process body: load the plugin, run the job's units, log each outcome."""
    job, profile = Job(**job), Profile(**profile)
    with open(log_path, "a") as log:
        def emit(event: dict) -> None:
            log.write(json.dumps(event) + "\n")
            log.flush()
        try:
            import torch

            from fl_runtime.plugins.loader import PluginSource, load_plugin

            from .harness import Device, kernel_entries
            from .kernel_checks import run_unit

            torch.set_num_threads(1)   # workers run side by side; one core each
            # check_loading already probed this library in a worker of its own.
            plugin = load_plugin(PluginSource("under test", library, "conformance worker"), probe_plugins=False)
            dev = Device(plugin, 0)
            stream = dev.new_stream()
            entry = kernel_entries(plugin)[job.entry_index]
            if entry.op != job.op:
                raise RuntimeError(f"kernel table entry {job.entry_index} is {entry.op}, expected {job.op}: "
                                   "the table changed between loads")
            progress = Path(progress_path)
            for unit in job.units:
                unit = tuple(unit)
                emit({"begin": list(unit)})
                started = time.monotonic()
                outcome = run_unit(dev, stream, entry, unit, profile, run_seed,
                                   lambda case: _write_atomically(progress, json.dumps(case)))
                emit({"unit": list(unit), "outcome": {**outcome, "seconds": time.monotonic() - started}})
        except Exception:
            emit({"fatal": traceback.format_exc(limit=6)})
            raise SystemExit(3)


# The cffi types a kernel worker creates while checking cases (conformance.harness,
# kernel_checks and fl_runtime's marshalling): cffi parses each C type string on its
# first use, per process, unless the server parsed it before the fork.
WORKER_CTYPES = ("char*", "char[]", "unsigned char[]", "void*", "uintptr_t", "float*", "int32_t*", "uint32_t*",
                 "uint64_t*", "fl_status", "fl_devptr*", "fl_stream*", "fl_event*", "fl_arg", "fl_arg[]",
                 "const fl_arg*", "fl_tensor", "fl_kernel_entry", "fl_kernel_entry*", "const fl_kernel_entry**")


def prepare_workers() -> None:
    """Run once in the fork server (conformance.forkserver) before the first kernel worker:
    what every worker would otherwise redo on its first case, inherited through fork (about
    0.4 CPU s per worker, one worker per kernel-table entry).  OpInfo's database (seconds;
    the light plugin-load worker is forked before it, so a plugin that crashes on load is
    reported without waiting for it) and its index by name; the worker's modules (importing
    fl_runtime starts nothing while PyTorch's autoload is off, see fl_runtime/__init__.py;
    no plugin is loaded here); hypothesis' scan of local modules for constants to draw and
    its one-off registration of its own PRNG (a full gc.collect over torch's heap); cffi's
    parse of each C type."""
    try:   # kernels without a hand recipe draw OpInfo samples: import the database once, not per worker
        from torch.testing._internal.common_methods_invocations import op_db  # noqa: F401
    except ImportError:
        pass   # those kernels report it as untested (conformance.opinfo_cases)
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from fl_runtime.abi import ffi
    from fl_runtime.plugins import loader  # noqa: F401

    from . import harness, kernel_checks, opinfo_cases  # noqa: F401

    opinfo_cases.index_op_db()

    for name in WORKER_CTYPES:
        try:
            ffi.typeof(name)
        except Exception:   # noqa: BLE001 - a type this header lacks is parsed (and refused) in the worker
            pass

    @settings(max_examples=1, database=None, deadline=None)
    @given(st.integers())
    def first_run(_: int) -> None:
        pass
    first_run()
    try:   # the constants hypothesis mixes into draws: the same set, only gathered before the fork
        from hypothesis.internal.conjecture.providers import _get_local_constants
        _get_local_constants()
    except (ImportError, AttributeError):
        pass   # another hypothesis version: each worker gathers them itself, as before


def _write_atomically(path: Path, text: str) -> None:
    """A worker killed mid-write must leave the previous case whole, not an empty file."""
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)


def _last_case(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}   # died before its first case


class KernelWorkers:
    """Runs Jobs in worker processes and hands out each unit's outcome."""

    def __init__(self, library: str, profile: Profile, run_seed: int, concurrency: int | None = None) -> None:
        self.library = library
        self.profile = profile
        self.seed = run_seed
        self.concurrency = concurrency or max(1, min(4, os.cpu_count() or 1))
        self.results: dict[tuple[int, Unit], dict] = {}
        self.pending: deque[Job] = deque()
        self.running: list[_Running] = []
        self.workdir = Path(tempfile.mkdtemp(prefix="fl-conformance-"))
        self._server: ForkServer | None = None   # started with the first job
        self._started = 0

    def submit(self, jobs: list[Job]) -> None:
        self.pending.extend(jobs)

    def outcome(self, entry_index: int, unit: Unit) -> dict:
        """Blocks until the unit has run (submitting nothing: the caller planned it)."""
        key = (entry_index, tuple(unit))
        while key not in self.results:
            if not self.pending and not self.running:
                raise KeyError(f"no job was planned for kernel entry {entry_index} unit {unit}")
            self._pump(timeout=0.2)
        return self.results[key]

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.running.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def check_loading(self, timeout: float) -> LoadCrash | None:
        """Load the plugin and read its table in a worker first; None when the worker
        survived it, else how it died (before any kernel job is started)."""
        server = self._ensure_server()
        result = self.workdir / "load.json"
        worker_id = server.spawn([self.library, str(result)], target=f"{__name__}:load_worker", light=True)
        deadline, killed = time.monotonic() + timeout, False
        while True:
            exits = dict(server.exits(timeout=0.2))
            if worker_id in exits:
                break
            if not killed and time.monotonic() > deadline:
                server.kill(worker_id)
                killed = True
        where = f"loading {self.library} (its constructors, fl_plugin_get_api and reading its table)"
        if killed:
            return LoadCrash(f"{where} did not finish within {timeout:g} s (hang?); the worker was killed")
        code = exits[worker_id]
        if code < 0:
            name = signal.Signals(-code).name
            return LoadCrash(f"{where} crashed the worker process with {name}", name)
        if code != 0 or not result.exists():   # the worker's traceback went to this run's stderr
            return LoadCrash(f"{where} {self._death(code)} (its traceback, if it raised, is on stderr)")
        return None

    # -- process management -------------------------------------------------------
    def _ensure_server(self) -> ForkServer:
        if self._server is None:
            self._server = ForkServer(f"{__name__}:worker", prepare=f"{__name__}:prepare_workers")
        return self._server

    def _start(self, job: Job) -> None:
        self._ensure_server()
        self._started += 1
        log = self.workdir / f"{self._started}.log"
        progress = log.with_suffix(".case")
        worker_id = self._server.spawn([self.library, asdict(job), asdict(self.profile), self.seed, str(log),
                                        str(progress)])
        self.running.append(_Running(job, worker_id, log, progress))

    def _pump(self, timeout: float) -> None:
        while self.pending and len(self.running) < self.concurrency:
            self._start(self.pending.popleft())
        exits = dict(self._server.exits(timeout))
        for run in list(self.running):
            self._read(run)
            if run.worker in exits:
                self._finish(run, run.killed or self._death(exits[run.worker]))
            elif not run.killed and time.monotonic() - run.last_event > self.profile.unit_timeout_s:
                run.killed = (f"did not finish within {self.profile.unit_timeout_s:g} s (hang?); "
                              "the worker was killed")
                self._server.kill(run.worker)

    def _read(self, run: _Running) -> None:
        if not run.log.exists():
            return
        with open(run.log) as log:
            log.seek(run.offset)
            lines = log.readlines()
        for line in lines:
            if not line.endswith("\n"):
                break
            run.offset += len(line)
            run.last_event = time.monotonic()
            event = json.loads(line)
            if "begin" in event:
                run.current = tuple(event["begin"])
            elif "unit" in event:
                unit = tuple(event["unit"])
                self.results[(run.job.entry_index, unit)] = event["outcome"]
                run.done.add(unit)
                run.current = None
            elif "fatal" in event:
                run.fatal = event["fatal"]

    @staticmethod
    def _death(exitcode: int) -> str:
        if exitcode < 0:
            return f"crashed the worker process with {signal.Signals(-exitcode).name}"
        return f"ended the worker process with exit status {exitcode}"

    def _finish(self, run: _Running, how: str) -> None:
        self.running.remove(run)
        left = [u for u in run.job.units if u not in run.done]
        if not left:
            return
        failed = run.current or left[0]
        self.results[(run.job.entry_index, failed)] = self._crash_outcome(run, failed, how)
        rest = [u for u in left if u != failed]
        if rest:
            self.pending.appendleft(Job(run.job.entry_index, run.job.op, run.job.variant, rest))

    def _crash_outcome(self, run: _Running, unit: Unit, how: str) -> dict:
        kind, dtype = unit
        where = f"kernel {run.job.op} ({run.job.variant})" + (f" on {dtype}" if dtype else f" ({kind} probes)")
        message = f"{where} {how}" + (f":\n{run.fatal}" if run.fatal else "")
        outcome = {"status": statuses.FAIL, "message": message, "max_error": None, "error_ratio": None,
                   "tolerance": ""}
        case = _last_case(run.progress)
        if kind == "numerics" and run.current == unit and case.get("dtype") == dtype:
            outcome["reproducer"] = kernel_script(self.library, run.job.op, run.job.variant, dtype, case, "",
                                                  self.seed, f"{where} {how} on this case")
        return outcome
