"""Threads soak: many host threads share the runtime; every value is checked against the CPU.

    python benchmarks/soak_threads.py [--seconds 60] [--threads 6] [--json]

Each thread owns one torch.fl.Stream on fl:0 and one on fl:1, makes its "home"
device current with `torch.fl.device`, and loops over random steps: host-to-device
copies, ops on its own stream, cross-device copies ordered by events recorded on
one stream and waited for on the other, device factories (`device="fl"` must
follow the thread's own current device), and tensors kept alive across steps
and re-read later (a block handed to two live tensors shows up there); now and
then the cache is emptied while the other threads work.  Every
result is compared with the same computation on the CPU.

The first step of every thread runs with empty caches, all threads at once; the
clock (--seconds, ops/s) starts when every thread has finished its first step.

Prints one line per run: wrong values, failed checks, exceptions, steps and ops/s
(with --json, one JSON object).  Exit status 1 when anything was wrong.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import threading
import time
import traceback

import torch

import torch_fl  # noqa: F401 (starts the runtime, registers torch.fl)

_UNARY = {
    "relu": torch.relu, "neg": torch.neg, "abs": torch.abs, "exp_small": lambda t: torch.exp(t * 0.01),
    "mul2": lambda t: t * 2, "add1": lambda t: t + 1, "sum0": lambda t: t.sum(0),
}


class Tally:
    """What one thread found; merged at the end."""

    def __init__(self) -> None:
        self.steps = 0
        self.ops = 0
        self.wrong_values = 0
        self.failed_checks = 0
        self.errors: list[str] = []

    def check(self, got: torch.Tensor, want: torch.Tensor, what: str, tol: float = 1e-5) -> None:
        if got.shape != want.shape:
            self.failed_checks += 1
            self.errors.append(f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}")
            return
        bad = int((~torch.isclose(got, want, rtol=tol, atol=tol)).sum())
        if bad:
            self.wrong_values += bad
            self.failed_checks += 1
            if len(self.errors) < 20:
                self.errors.append(f"{what}: {bad} wrong value(s)")


def _worker(index: int, clock: dict, tally: Tally, start: threading.Barrier, warm: threading.Barrier,
            empty_cache_rate: float) -> None:
    rng = random.Random(1234 + index)
    home, away = index % 2, 1 - index % 2
    streams = {home: torch.fl.Stream(f"fl:{home}"), away: torch.fl.Stream(f"fl:{away}")}
    kept: list[tuple] = []      # (fl tensor, its CPU twin, tolerance), re-read later
    start.wait()
    with torch.fl.device(home):
        first = True
        while first or time.monotonic() < clock["deadline"]:
            try:
                _step(rng, home, away, streams, kept, tally, empty_cache_rate)
            except Exception:   # noqa: BLE001 - counted and reported, the soak goes on
                tally.errors.append(traceback.format_exc(limit=4))
            tally.steps += 1
            if first:           # the cold first steps (empty caches) run concurrently too,
                first = False   # but the clock starts once every thread is past its own
                warm.wait()
            if len(tally.errors) > 50:
                return


def _step(rng: random.Random, home: int, away: int, streams: dict, kept: list, tally: Tally,
          empty_cache_rate: float) -> None:
    n = rng.choice((1, 7, 64, 1000, 4096, 33_000))
    host = torch.randn(n, 4)
    if torch.fl.current_device() != home:
        tally.failed_checks += 1
        tally.errors.append(f"current_device {torch.fl.current_device()} != {home} inside torch.fl.device({home})")
    with torch.fl.stream(streams[home]):
        # Tensor.to("fl") without an index cannot follow the thread's device (PyTorch asks its
        # Python device guard, which always says 0: docs/users/devices.md "Threads"); factories can.
        x = host.to(f"fl:{home}")
        ones = torch.ones(n, 4, device="fl")     # "fl": this thread's current device
        if ones.device.index != home:
            tally.failed_checks += 1
            tally.errors.append(f"device='fl' made a tensor on {ones.device}, expected fl:{home}")
            ones = ones.to(f"fl:{home}")
        name = rng.choice(sorted(_UNARY))
        y = _UNARY[name](x)
        z = ones * 3 + y if name != "sum0" else y + 3
        tally.ops += 5
        done = torch.fl.Event()                  # on this thread's current device (home)
        if done.device.index != home:
            tally.failed_checks += 1
            tally.errors.append(f"torch.fl.Event() is on {done.device}, expected fl:{home}")
        done.record(streams[done.device.index])
    want = _UNARY[name](host)
    want = torch.ones(n, 4) * 3 + want if name != "sum0" else want + 3
    with torch.fl.stream(streams[away]):
        done.wait()                              # away's stream waits for home's work
        moved = z.to(f"fl:{away}", non_blocking=rng.random() < 0.5)
        w = moved * 2 - 1
        tally.ops += 3
    want = want * 2 - 1
    with torch.fl.stream(streams[home]):
        back = w.to(f"fl:{home}")
        tally.ops += 1
    # sum0 adds n values in another order than the CPU: a rounding tolerance, still far
    # below what a value from another tensor (aliasing) or a stale read would differ by.
    tol = 1e-3 if name == "sum0" else 1e-5
    tally.check(back.cpu(), want, f"{name} x{n} fl:{home}->fl:{away}->fl:{home}", tol)
    if rng.random() < 0.3:
        kept.append((w, want, tol))
    if len(kept) > 8 or (kept and rng.random() < 0.2):
        t, twin, t_tol = kept.pop(rng.randrange(len(kept)))
        tally.check(t.cpu(), twin, "a tensor kept alive across steps", t_tol)
    if rng.random() < 0.05:
        torch.fl.synchronize(home)
    if rng.random() < empty_cache_rate:   # blocks other threads freed go back to the vendor meanwhile
        torch.fl.empty_cache()


def run(seconds: float, threads: int, empty_cache_rate: float = 0.01) -> dict:
    """Run the soak; returns the merged figures."""
    tallies = [Tally() for _ in range(threads)]
    clock: dict = {}
    start = threading.Barrier(threads + 1)
    warm = threading.Barrier(threads, action=lambda: clock.update(began=time.monotonic(),
                                                                   deadline=time.monotonic() + seconds))
    workers = [threading.Thread(target=_worker, args=(i, clock, tallies[i], start, warm, empty_cache_rate),
                                daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    start.wait()
    for w in workers:
        w.join(seconds + 300)
    elapsed = time.monotonic() - clock.get("began", time.monotonic())
    for i in range(torch.fl.device_count()):
        torch.fl.synchronize(i)
    ops = sum(t.ops for t in tallies)
    return {
        "threads": threads, "seconds": round(elapsed, 1),
        "steps": sum(t.steps for t in tallies), "ops": ops, "ops_per_s": round(ops / elapsed, 1),
        "wrong_values": sum(t.wrong_values for t in tallies),
        "failed_checks": sum(t.failed_checks for t in tallies),
        "exceptions_and_failures": [e for t in tallies for e in t.errors][:20],
        "hung_threads": sum(w.is_alive() for w in workers),
        "load_average": [round(v, 2) for v in os.getloadavg()],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--threads", type=int, default=6)
    parser.add_argument("--empty-cache-rate", type=float, default=0.01,
                        help="chance per step that a thread empties the cache while the others work")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    opts = parser.parse_args()
    if torch.fl.device_count() < 2:
        raise SystemExit("soak_threads needs two fl devices (FL_REFERENCE_DEVICES=2, the default)")
    # One worker queue per fl device is not available to PyTorch's autograd engine
    # (docs/users/limits.md "Autograd and threads"); this soak does no backward, but keep it single-threaded anyway.
    torch.autograd.set_multithreading_enabled(False)
    report = run(opts.seconds, opts.threads, opts.empty_cache_rate)
    if opts.json:
        print(json.dumps(report))
    else:
        print(f"{report['threads']} threads, {report['seconds']} s: {report['steps']} steps, "
              f"{report['ops']} ops ({report['ops_per_s']} ops/s); wrong values {report['wrong_values']}, "
              f"failed checks {report['failed_checks']}, exceptions {len(report['exceptions_and_failures'])}, "
              f"hung threads {report['hung_threads']}; load average {report['load_average']}")
        for line in report["exceptions_and_failures"][:5]:
            print("  ", line.strip().replace("\n", "\n   "))
    bad = report["wrong_values"] or report["failed_checks"] or report["exceptions_and_failures"] or report["hung_threads"]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
