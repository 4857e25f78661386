"""Several "hosts" on one machine: network namespaces on a private bridge, for multi-host jobs.

Host i is a network namespace with one interface, `fl0`, at 10.77.0.<i+1>/24,
joined to the others by a bridge in a namespace of its own (the "switch").
Every process of host i runs in that network namespace and in a private mount
and UTS namespace made for it: hostname `flhost<i>`, its own tmpfs on /dev/shm
(as each real host has its own), and an /etc/hosts naming every host, so that
names resolve as on a cluster with DNS.  The namespaces are private to one
`NetnsHosts`, so every run uses the same addresses without meeting another run;
their names carry a per-run tag, so concurrent runs never collide.  Nothing
here talks to any address but those it made.

`remove()` (also `__exit__`) kills every process left in the namespaces and
deletes them: the veth pairs and the bridge go with their namespaces, and the
mounts with the processes' mount namespaces.  Used by tests/e2e/test_multihost.py
and benchmarks/multihost.py:

    with NetnsHosts(2, workdir) as hosts:
        job = hosts.torchrun("train.py", ["--out", out], nproc_per_node=2)
        results = job.wait(timeout=120)
        hosts.set_link(1, up=False)          # host 1's network goes down
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUBNET = "10.77.0"
RDZV_PORT = 29400
_IP_TIMEOUT = 20


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=_IP_TIMEOUT, check=check)


def why_unavailable() -> str | None:
    """Why this machine cannot hold namespace hosts (None: it can).  Tries the real thing once."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "network namespaces, veth pairs and mounts need root"
    missing = [tool for tool in ("ip", "unshare", "sh") if shutil.which(tool) is None]
    if missing:
        return f"missing tools: {', '.join(missing)}"
    try:
        with NetnsHosts(1, Path("/tmp")) as hosts:
            probe = hosts.run(0, ["sh", "-c", "test \"$(hostname)\" = flhost0 && grep -q flhost0 /etc/hosts"])
            if probe.wait(timeout=_IP_TIMEOUT) != 0:
                return "a namespace host could not set its hostname or mounts"
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or exc
        return f"this machine forbids network namespaces or mounts here: {str(detail).strip()}"
    return None


@dataclass
class HostResult:
    host: int
    returncode: int | None         # None: killed at the timeout
    output: str


class Job:
    """One process per host (torchrun), each writing to its own log."""

    def __init__(self, procs: list[subprocess.Popen], logs: list[Path]) -> None:
        self.procs, self.logs = procs, logs

    def wait(self, timeout: float) -> list[HostResult]:
        """Wait for every host's process; kill them all at `timeout` seconds (returncode None)."""
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                break
        timed_out = any(p.poll() is None for p in self.procs)
        if timed_out:
            self.kill()
        return [HostResult(i, None if timed_out else p.returncode, self.logs[i].read_text(errors="replace"))
                for i, p in enumerate(self.procs)]

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


class NetnsHosts:
    """`count` hosts on a private bridge (see the module docstring)."""

    def __init__(self, count: int, workdir: Path) -> None:
        self.count = count
        self.tag = f"fl{os.getpid():x}{secrets.token_hex(2)}"
        self.workdir = Path(workdir)
        self._made: list[str] = []
        self._jobs: list[Job] = []

    # ---- naming -----------------------------------------------------------------------------------
    def netns(self, i: int) -> str:
        return f"{self.tag}-h{i}"

    @property
    def switch(self) -> str:
        return f"{self.tag}-sw"

    @staticmethod
    def address(i: int) -> str:
        return f"{SUBNET}.{i + 1}"

    @staticmethod
    def hostname(i: int) -> str:
        return f"flhost{i}"

    # ---- lifetime ---------------------------------------------------------------------------------
    def __enter__(self) -> NetnsHosts:
        try:
            self.create()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def create(self) -> None:
        self._namespace(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i in range(self.count):
            ns = self.netns(i)
            self._namespace(ns)
            _ip("-n", self.switch, "link", "add", f"h{i}", "type", "veth", "peer", "name", "fl0", "netns", ns)
            _ip("-n", self.switch, "link", "set", f"h{i}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", "fl0")
            _ip("-n", ns, "link", "set", "fl0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._hosts_file = self.workdir / f"{self.tag}.hosts"
        self._hosts_file.write_text("127.0.0.1 localhost\n" + "".join(
            f"{self.address(i)} {self.hostname(i)}\n" for i in range(self.count)))

    def _namespace(self, name: str) -> None:
        _ip("netns", "add", name)
        self._made.append(name)

    def remove(self) -> None:
        """Kill every process in the namespaces, delete them (and with them the links and mounts)."""
        for job in self._jobs:
            job.kill()
        for name in reversed(self._made):
            for _ in range(50):
                pids = _ip("netns", "pids", name, check=False).stdout.split()
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.1)
            _ip("netns", "del", name, check=False)
        self._made.clear()
        hosts_file = getattr(self, "_hosts_file", None)
        if hosts_file is not None:
            hosts_file.unlink(missing_ok=True)

    # ---- running things ---------------------------------------------------------------------------
    def run(self, i: int, argv: list[str], env: dict | None = None, log: Path | None = None) -> subprocess.Popen:
        """Start `argv` on host i (its network, hostname, /dev/shm and /etc/hosts), in a session of its own."""
        setup = (f"hostname {self.hostname(i)} && mount -t tmpfs -o size=256m flshm /dev/shm && "
                 f"mount --bind {self._hosts_file} /etc/hosts && exec \"$@\"")
        command = ["ip", "netns", "exec", self.netns(i), "unshare", "--mount", "--uts", "--propagation", "private",
                   "sh", "-c", setup, "sh", *argv]
        out = open(log, "w") if log is not None else subprocess.DEVNULL
        try:
            return subprocess.Popen(command, env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=self.workdir)
        finally:
            if log is not None:
                out.close()

    def torchrun(self, script: str | Path, args: list[str], nproc_per_node: int, env: dict | None = None,
                 max_restarts: int = 0, name: str = "job", nodes: int | None = None) -> Job:
        """torchrun --nnodes N --nproc-per-node M on hosts 0..N-1 (N: `nodes`, default every host),
        c10d rendezvous on host 0's address."""
        nodes = self.count if nodes is None else nodes
        procs, logs = [], []
        for i in range(nodes):
            argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes),
                    "--nproc-per-node", str(nproc_per_node), "--max-restarts", str(max_restarts),
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{self.address(0)}:{RDZV_PORT}",
                    "--rdzv-id", f"{self.tag}-{name}", "--rdzv-conf", "join_timeout=90",
                    "--monitor-interval", "0.2", str(script), *args]
            logs.append(self.workdir / f"{name}-host{i}.log")
            procs.append(self.run(i, argv, {"PYTHONPATH": str(ROOT), **(env or {})}, logs[-1]))
        job = Job(procs, logs)
        self._jobs.append(job)
        return job

    def set_link(self, i: int, up: bool) -> None:
        """Host i's network interface up or down (its veth, inside its namespace)."""
        _ip("-n", self.netns(i), "link", "set", "fl0", "up" if up else "down")
