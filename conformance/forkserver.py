"""A minimal fork server for kernel workers (`python -m conformance.forkserver`).

Importing torch takes seconds; forking a process that already has takes
milliseconds.  The server imports torch, hypothesis and the worker's modules once (but
never loads a plugin: a plugin loaded before fork would share its device
memory mapping with every worker) and forks one worker per request.
multiprocessing's own fork server would do, but it re-imports the caller's
__main__ script, which a vendor's unguarded script cannot survive.

Protocol, one JSON object per line: the client writes {"id": n, "target":
"module:function", "args": [...]} (the function a worker runs, and its
arguments; the server imports it by name, so it depends on no caller); the server answers
{"id": n, "pid": p} at once and {"id": n, "exit": code} when the worker ends
(code < 0: killed by that signal).

Both ends read the pipes through _LineReader, never `select` + `readline` on a
buffered file: readline may pull two lines into the file's buffer, `select` then
sees an empty descriptor and waits for ever for the line already read (the
client, waiting for a worker's pid while it sat in that buffer, hung a
conformance run).
"""
from __future__ import annotations

import gc
import importlib
import json
import os
import select
import subprocess
import sys
import time
import traceback


class _LineReader:
    """Whole lines from a pipe's descriptor, with its own buffer, so that "is a line
    ready?" asks the buffer first and the descriptor only when the buffer has none."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = b""
        self.closed = False

    def read_line(self, timeout: float | None) -> str | None:
        """The next line (without its newline); None when none came within timeout
        (None: wait as long as it takes) or the writer closed the pipe (then `closed`)."""
        while b"\n" not in self._buffer:
            if self.closed:
                return None
            ready, _, _ = select.select([self.fd], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                self.closed = True
                continue
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()


class ForkServer:
    """Client side: start the server, spawn workers, collect their exits.  `prepare`
    ("module:function", optional) runs once in the server before the first worker that is
    not `light`: what every such worker would otherwise redo (imports, caches)."""

    def __init__(self, target: str, prepare: str = "") -> None:
        self.target = target              # "module:function" every worker runs
        env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
               "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.process = subprocess.Popen([sys.executable, "-m", "conformance.forkserver", *([prepare] if prepare else [])],
                                        env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self._replies = _LineReader(self.process.stdout.fileno())
        self.pids: dict[int, int] = {}          # worker id -> pid, while the worker runs
        self._exits: list[tuple[int, int]] = []
        self._spawned: set[int] = set()
        self._next = 0

    def spawn(self, args: list, target: str | None = None, light: bool = False) -> int:
        """Fork a worker running `target` (default: the server's) with `args`; returns its id.
        `light`: the worker draws no OpInfo samples, so it need not wait for their import."""
        self._next += 1
        request = {"id": self._next, "target": target or self.target, "args": args, "light": light}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        while self._next not in self._spawned:
            self._read_line(timeout=None)
        return self._next

    def exits(self, timeout: float) -> list[tuple[int, int]]:
        """Workers that ended since the last call: (id, exit code); waits up to timeout for one."""
        if not self._exits:
            self._read_line(timeout)
        while self._read_line(timeout=0):
            pass
        found, self._exits = self._exits, []
        return found

    def kill(self, worker: int) -> None:
        """SIGKILL a running worker (never a pid whose exit was reported: it may be reused)."""
        if worker in self.pids:
            try:
                os.kill(self.pids[worker], 9)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        for worker in list(self.pids):
            self.kill(worker)
        self.process.stdin.close()
        self.process.wait(timeout=30)

    def _read_line(self, timeout: float | None) -> bool:
        line = self._replies.read_line(timeout)
        if line is None and self._replies.closed:
            raise RuntimeError(f"the conformance fork server died (exit status {self.process.wait()})")
        if line is None:
            return False
        message = json.loads(line)
        if "pid" in message:
            self.pids[message["id"]] = message["pid"]
            self._spawned.add(message["id"])
        else:
            self.pids.pop(message["id"], None)
            self._exits.append((message["id"], message["exit"]))
        return True


def _warm_up() -> None:
    """Import once what every worker needs: torch, hypothesis, and the modules torch
    loads lazily on its first meta-kernel call (over a second otherwise, per worker)."""
    import hypothesis  # noqa: F401
    import torch

    meta = torch.empty(2, 2, device="meta")
    for op in (torch.add, torch.mm, torch.sum, torch.exp, torch.eq):
        op(meta) if op in (torch.sum, torch.exp) else op(meta, meta)


def _fork() -> int:
    """fork() with the server's objects frozen first: a worker's garbage collections then
    skip the imported torch/OpInfo heap (and leave its pages shared, not copied)."""
    gc.freeze()
    return os.fork()


def _call(target: str, args: list) -> None:
    module, _, function = target.partition(":")
    getattr(importlib.import_module(module), function)(*args)


def _serve(prepare: str) -> None:
    _warm_up()
    out = sys.stdout
    children: dict[int, int] = {}   # pid -> request id
    requests = _LineReader(sys.stdin.fileno())
    workers_ready = False
    while not requests.closed or children:
        line = requests.read_line(timeout=0.02)
        if line is not None:
            request = json.loads(line)
            if not request.get("light") and not workers_ready:
                if prepare:
                    _call(prepare, [])
                workers_ready = True
            pid = _fork()
            if pid == 0:
                _child(request["target"], request["args"])
            children[pid] = request["id"]
            _reply(out, {"id": request["id"], "pid": pid})
        elif requests.closed:
            time.sleep(0.02)            # the client left: only reap the last workers
        _reap(out, children)


def _reply(out, message: dict) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def _reap(out, children: dict[int, int]) -> None:
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        _reply(out, {"id": children.pop(pid), "exit": os.waitstatus_to_exitcode(status)})


def _child(target: str, args: list) -> None:
    """In the forked worker: never return into the server loop."""
    code = 1
    try:
        os.dup2(2, 1)            # the worker's prints must not mix with the protocol
        _call(target, args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:   # noqa: BLE001 - os._exit below would drop it unprinted
        traceback.print_exc()
        sys.stderr.flush()
    finally:
        try:   # _exit skips gcov's exit handler: write the counters of a --coverage build first
            from conformance.branch_coverage import flush
            flush()
        finally:
            os._exit(code)


if __name__ == "__main__":
    _serve(sys.argv[1] if len(sys.argv) > 1 else "")
