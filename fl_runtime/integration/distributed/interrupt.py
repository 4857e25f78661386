"""SIGTERM (or Ctrl-C) ends a rank that waits in a vendor collective.

A rank whose peer is stuck (alive, but never arriving) waits in the vendor's
collective until the communicator's timeout.  Meanwhile the main thread sits in C++
(DDP's reducer waits on the Work's future inside backward), where Python cannot run a
signal handler: a handler installed by Lightning (or Python's own for SIGINT) would
run only after the wait, minutes later, and the process ignores SIGTERM until then.

CPython's C-level handler writes each caught signal's number to the wakeup fd
(`signal.set_wakeup_fd`) at once.  When no one else uses that fd (asyncio does, in a
running loop), the first vendor process group sets it and a daemon thread reads it:
on SIGTERM or SIGINT with collectives pending, each pending Work fails with a
CollectiveError saying so, which unblocks the main thread (its handler runs, the error
propagates).  The vendor's collective itself cannot be abandoned (the ABI has no abort:
fl_abi.h "collectives"), and exiting waits for every stream (shutdown.py), so should
the process still run GRACE_S later, it exits with 128 + the signal number, as the
default action would have ended it.
"""
from __future__ import annotations

import os
import signal
import sys
import threading

import torch

from fl_runtime.integration.distributed.work import CallSite, CollectiveError
from fl_runtime.logs import logger

GRACE_S = 5.0
_ENDING = (signal.SIGTERM, signal.SIGINT)

_lock = threading.Lock()
_pending: dict[int, tuple[torch.futures.Future, CallSite, list]] = {}
_next_token = 0
_installed = False


def install() -> None:
    """Watch the wakeup fd (once per process; from the main thread, where Python allows it)."""
    global _installed
    with _lock:
        if _installed or threading.current_thread() is not threading.main_thread():
            return
        _installed = True
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    if previous != -1:                 # someone else's (asyncio): leave it theirs
        signal.set_wakeup_fd(previous)
        os.close(read_end)
        os.close(write_end)
        logger.info("the signal wakeup fd is in use: SIGTERM reaches a rank waiting in a vendor collective "
                    "only when the collective ends")
        return
    threading.Thread(target=_watch, args=(read_end,), name="torch-fl-signals", daemon=True).start()


def waiting(source: torch.futures.Future, site: CallSite, failures: list) -> int:
    """Register a collective whose Work is not complete yet; returns the token for `settled`."""
    global _next_token
    with _lock:
        _next_token += 1
        _pending[_next_token] = (source, site, failures)
        return _next_token


def settled(token: int) -> bool:
    """Unregister; False when a signal already failed the Work (its future is complete)."""
    with _lock:
        return _pending.pop(token, None) is not None


def _watch(fd: int) -> None:
    while True:
        try:
            received = os.read(fd, 64)
        except OSError:
            return
        for signum in received:
            if signum in _ENDING:
                _interrupt(signal.Signals(signum))


def _interrupt(signum: signal.Signals) -> None:
    with _lock:
        pending = list(_pending.values())
        _pending.clear()
    if not pending:
        return
    logger.error("%s while %d collective(s) wait for their peers: failing them", signum.name, len(pending))
    for source, site, failures in pending:
        failures.append(CollectiveError(site, f"interrupted by {signum.name} while waiting for the other ranks"))
        source.set_exception(failures[-1])
    timer = threading.Timer(GRACE_S, _exit_now, (signum,))
    timer.daemon = True
    timer.start()


def _exit_now(signum: signal.Signals) -> None:
    sys.stderr.write(f"torch_fl: {signum.name}: a vendor collective still waits for its peers {GRACE_S:g} s "
                     f"later and cannot be abandoned; exiting with status {128 + signum}\n")
    sys.stderr.flush()
    os._exit(128 + signum)
