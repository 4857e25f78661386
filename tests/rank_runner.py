"""Run one script as N ranks of a torch.distributed job on loopback, each in its own process.

Multi-process tests (test_distributed, test_ddp, test_lightning) share this: every
rank gets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT as torchrun
would set them, a timeout, and its own output, so a failing rank is reported
with what it printed.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RankResult:
    rank: int
    returncode: int
    output: str

    def lines(self, prefix: str) -> list[str]:
        """The printed lines starting with `prefix`, prefix removed."""
        return [line[len(prefix):].strip() for line in self.output.splitlines() if line.startswith(prefix)]


def run_ranks(code: str, world_size: int = 2, timeout: float = 120, env: dict | None = None) -> list[RankResult]:
    """Start `code` once per rank, wait for all (killing stragglers at `timeout`)."""
    port = free_port()
    procs = []
    for rank in range(world_size):
        rank_env = {**os.environ, "PYTHONPATH": str(ROOT), "RANK": str(rank), "LOCAL_RANK": str(rank),
                    "WORLD_SIZE": str(world_size), "LOCAL_WORLD_SIZE": str(world_size),
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), **(env or {})}
        procs.append(subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=rank_env, cwd=ROOT,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    results = []
    for rank, proc in enumerate(procs):
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            out, _ = proc.communicate()
            out += f"\n[rank_runner] rank {rank} killed after {timeout} s"
        results.append(RankResult(rank, proc.returncode, out))
    return results


def assert_all_ok(results: list[RankResult]) -> None:
    for r in results:
        assert r.returncode == 0, f"rank {r.rank} exited with {r.returncode}:\n{r.output[-6000:]}"
