"""`FLWork`: the handle a collective returns, and the error a failed one raises.

PyTorch's `_create_work_from_future` gives a Work whose `wait()` returns True
even when its future holds an error (PyTorch 2.13): a dead peer would leave
the tensors untouched and the caller none the wiser.  `FLWork` is a
`dist.Work` subclass (PyTorch's trampoline forwards `wait` and `get_future`
from C++ callers such as DDP's reducer) whose `wait()` raises the error.
"""
from __future__ import annotations

import datetime
import threading
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class CallSite:
    """Who ran which collective: enough to name it in an error, without holding the group."""
    rank: int
    size: int
    op: str
    timeout: datetime.timedelta
    transport: str


class CollectiveError(RuntimeError):
    """A collective failed or timed out (a dead or stuck peer, a mismatched call, a host out of reach).

    `diagnosis`: for a group that spans hosts, which peers did not answer (reachability.py)."""

    def __init__(self, site: CallSite, cause: BaseException | str, diagnosis: str = "") -> None:
        found = f" Peers: {diagnosis}." if diagnosis else ""
        super().__init__(
            f"torch_fl process group: rank {site.rank} of {site.size}: {site.op} failed on {site.transport} "
            f"(timeout {site.timeout.total_seconds():g} s): {str(cause).rstrip('. ')}.{found} Another rank may "
            f"have died, be stuck, or called a different collective; check every rank's log, and raise "
            f"init_process_group(timeout=...) if a rank is merely slow")
        self.rank = site.rank
        self.op = site.op
        self.cause = str(cause).rstrip(". ")
        self.diagnosis = diagnosis


def completable_future() -> tuple[torch.futures.Future, torch.futures.Future]:
    """(source, future): complete `source` from Python (set_result or set_exception) and hand
    `future` to the Work.  `Future.set_exception` stores the exception as the future's value
    (Python's wait() raises it, but a C++ caller such as DDP's reducer reads it as a result
    and crashes); an exception raised in a `then` callback is an error C++ sees as one."""
    source: torch.futures.Future = torch.futures.Future()
    return source, source.then(lambda done: done.value())


class FLWork(dist.Work):
    """A collective in flight: done when its future is; wait() raises what the collective raised."""

    def __init__(self, future: torch.futures.Future, site: CallSite,
                 failures: list[CollectiveError] | None = None) -> None:
        super().__init__()
        self._future = future
        self._site = site
        self._failures = failures if failures is not None else []
        self._done = threading.Event()
        self._source: dist.Work | None = None
        future.add_done_callback(lambda _: self._done.set())

    def source_from(self, work: dist.Work) -> None:
        """recv from any rank: the wire's Work knows which rank sent."""
        self._source = work

    def _source_rank(self) -> int:
        if self._source is None:
            raise RuntimeError("torch_fl: source rank is only known for recv from any rank (dist.recv(src=None))")
        self.wait()
        return self._source._source_rank()

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        seconds = None if timeout is None else timeout.total_seconds()
        if seconds and not self._done.wait(seconds):
            raise CollectiveError(self._site, f"Work.wait(timeout={seconds:g} s) expired")
        try:
            self._future.wait()
        except Exception as exc:
            if self._failures:            # the CollectiveError itself, not the future's text of it
                raise self._failures[0] from exc
            raise
        return True

    def get_future(self) -> torch.futures.Future:
        return self._future

    def is_completed(self) -> bool:
        return self._future.done()

    def is_success(self) -> bool:
        return self.exception() is None if self._future.done() else False

    def exception(self):
        if not self._future.done():
            return None
        try:
            self._future.value()
        except Exception as exc:  # noqa: BLE001 (Work.exception() returns it, whatever it is)
            return exc
        return None

    def result(self) -> list:
        value = self.wait() and self._future.value()
        return value if isinstance(value, list) else []

    def synchronize(self) -> None:
        """The results are on their fl tensors once the future is done (host copies are synchronous)."""
        self.wait()
