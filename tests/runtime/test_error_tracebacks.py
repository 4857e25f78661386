"""A kept exception keeps no fl memory (docs/users/errors-and-memory.md, fl_runtime/tracebacks.py).

Device memory runs out in each kind of op (a vendor kernel, a copy host->device,
device->host and device->device, a factory, a CPU fallback, a graph replay, a collective
on two ranks), and a few other errors the runtime raises are provoked.  The exception is
kept, as a REPL's `sys.last_value` or a retry loop keeps it; walking its traceback, no
frame of the runtime holds a tensor, while the user's own frames keep their locals.  Then
a user-shaped script catches OOM, halves its size and retries, keeping every exception:
once its tensors are dropped, memory_allocated is back at the baseline.
"""
from __future__ import annotations

import json

from rank_runner import assert_all_ok, run_ranks

# 64 MiB devices (the reference plugin's FL_REFERENCE_MEMORY_MB); fl:0 and fl:1.
MEMORY = {"FL_REFERENCE_MEMORY_MB": "64", "PYTHONWARNINGS": "ignore"}

WALK = r"""
import gc, json, os, sys, traceback, torch, torch_fl
import fl_runtime
RUNTIME = tuple(os.path.dirname(m.__file__) + os.sep for m in (fl_runtime, torch_fl))

def tensors_in(value, depth=0):
    if isinstance(value, torch.Tensor):
        return True
    if depth < 3 and isinstance(value, (list, tuple, set, frozenset)):
        return any(tensors_in(v, depth + 1) for v in value)
    if depth < 3 and isinstance(value, dict):
        return any(tensors_in(v, depth + 1) for v in value.values())
    return False

def frames_of(error, depth=0):
    # every frame of the error's traceback and of the exceptions it chains
    if error is None or depth > 8:
        return
    yield from (frame for frame, _ in traceback.walk_tb(error.__traceback__))
    yield from frames_of(error.__cause__, depth + 1)
    yield from frames_of(error.__context__, depth + 1)

def holding(error):
    # "file:function: names" for each runtime frame that still holds a tensor
    return [f"{f.f_code.co_filename}:{f.f_code.co_name}: "
            f"{sorted(k for k, v in f.f_locals.items() if tensors_in(v))}"
            for f in frames_of(error)
            if f.f_code.co_filename.startswith(RUNTIME) and any(tensors_in(v) for v in f.f_locals.values())]

def user_frame_kept(error):
    # the user's function below keeps its local `canary`
    return any(f.f_code.co_name == "attempt" and "canary" in f.f_locals for f in frames_of(error))
"""

SINGLE = WALK + r"""
import warnings
warnings.simplefilter("ignore")
report = {}

def fill(index, leave):
    # tensors that leave `leave` bytes free on fl:index
    free = 64 * 2**20 - torch.fl.memory_allocated(index)
    return torch.empty(free - leave, dtype=torch.uint8, device=f"fl:{index}")

def attempt(run):
    canary = torch.ones(3)          # a user local: the runtime must not clear it
    return run()

def check(kind, run, filler=None, expect=torch.OutOfMemoryError):
    try:
        attempt(run)
    except expect as exc:
        eager = holding(exc)                  # straight after it reached the user
        del filler
        torch.fl.memory_allocated(0)          # a memory query: errors that left elsewhere are swept
        report[kind] = {"class": type(exc).__name__, "eager": eager, "after_query": holding(exc),
                        "user_frame_kept": user_frame_kept(exc)}
        errors[kind] = exc                    # kept, as sys.last_value would keep it
    else:
        report[kind] = {"class": None}

errors = {}
a = torch.randn(2 << 20, device="fl:0")                                  # 8 MiB
check("kernel", lambda: a * 2, fill(0, 4 << 20))
del a
check("factory", lambda: torch.empty(100 << 20, dtype=torch.uint8, device="fl:0"))
check("copy h2d", lambda: torch.ones(100 << 20, dtype=torch.uint8).to("fl:0"))
x = torch.ones(2048, 2048, device="fl:0")                                # 16 MiB, read transposed
check("copy d2h", lambda: x.t().cpu(), fill(0, 8 << 20))
del x
src = torch.ones(8 << 20, dtype=torch.uint8, device="fl:0")
check("copy d2d", lambda: src.to("fl:1"), fill(1, 4 << 20))
del src
x = torch.ones(4 << 20, device="fl:0")                                   # nonzero: 32 MiB of indices
check("fallback", lambda: torch.nonzero(x), fill(0, 8 << 20))
del x
g = torch.compile(lambda t: (t * 2 + 1).sum(0), backend="fl")
a = torch.randn(1024, 1024, device="fl:0")
g(a); g(a)                                                               # recorded, then replayed
check("graph replay", lambda: g(a), fill(0, 4 << 20))
del a
check("device not found", lambda: torch.empty(3, device="fl:9"), expect=Exception)
b = torch.ones(4, device="fl:0")
check("mixed devices", lambda: b + torch.ones(4), expect=Exception)
del b
# The compiled function's own frame is the user's: it keeps its argument `t` (as on CUDA).
del errors["graph replay"]
gc.collect()
torch.fl.empty_cache()
report["left"] = [torch.fl.memory_allocated(i) for i in range(2)]
print("@@@" + json.dumps(report))
"""

KINDS = ["kernel", "factory", "copy h2d", "copy d2h", "copy d2d", "fallback", "graph replay"]


def test_no_runtime_frame_of_a_kept_error_holds_a_tensor(python):
    result = python(SINGLE, MEMORY, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.split("@@@", 1)[1])
    for kind in KINDS:
        assert report[kind]["class"] == "FLOutOfMemoryError", (kind, report[kind])
    for kind in [*KINDS, "device not found", "mixed devices"]:
        assert report[kind]["eager"] == [], (kind, report[kind])
        assert report[kind]["after_query"] == [], (kind, report[kind])
        assert report[kind]["user_frame_kept"], (kind, report[kind])
    assert report["device not found"]["class"] == "DeviceNotFoundError"
    assert report["left"] == [0, 0], report


COLLECTIVE = WALK + r"""
import datetime, torch.distributed as dist
rank = int(os.environ["RANK"])
dev = torch.device("fl", rank)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
base = torch.fl.memory_allocated(rank)
src = torch.ones(4 << 20, dtype=torch.uint8, device=dev)              # the list-form all_gather's
outs = [torch.empty_like(src) for _ in range(2)]                      # vendor scratch: 8 MiB more
filler = torch.empty(64 * 2**20 - torch.fl.memory_allocated(rank) - (4 << 20), dtype=torch.uint8, device=dev)

def attempt():
    canary = torch.ones(3)
    dist.all_gather(outs, src)

try:
    attempt()
    print("NO-OOM")
except torch.OutOfMemoryError as exc:
    error = exc
del filler
print("HELD", torch.fl.memory_allocated(rank) - base)     # the memory query sweeps the kept error
print("HOLDING", json.dumps(holding(error)))
print("USER", user_frame_kept(error))
dist.destroy_process_group()
"""


def test_a_collective_that_runs_out_of_memory_leaves_no_tensor_in_runtime_frames():
    results = run_ranks(COLLECTIVE, env=MEMORY, timeout=180)
    assert_all_ok(results)
    for r in results:
        assert r.lines("NO-OOM") == [], r.output[-3000:]
        assert json.loads(r.lines("HOLDING")[0]) == [], r.output[-3000:]
        assert r.lines("USER") == ["True"], r.output[-3000:]


RETRY = r"""
import gc, torch, torch_fl, warnings
warnings.simplefilter("ignore")
base = [torch.fl.memory_allocated(i) for i in range(2)]
kept = []           # every OOM, as a log or sys.last_value would keep them
big = [torch.empty(40 << 20, dtype=torch.uint8, device="fl:1")]      # someone else's memory on fl:1

n = 32 << 20
while True:
    try:
        src = torch.ones(n, dtype=torch.uint8, device="fl:0")        # factory and fill kernel
        dst = src.to("fl:1")                                          # device -> device copy
        doubled = torch.cat([src, src])                               # vendor kernel
        picked = torch.nonzero(src[: n // 4])                         # CPU fallback, copied back
        host = doubled.cpu()                                          # device -> host
        break
    except torch.OutOfMemoryError as exc:
        kept.append(exc)
        src = dst = doubled = picked = None
        n //= 2
print("SIZE", n, "OOMS", len(kept))
src = dst = doubled = picked = host = big = None
gc.collect()
torch.fl.empty_cache()
print("LEFT", [torch.fl.memory_allocated(i) - base[i] for i in range(2)], len(kept))
"""


def test_catch_oom_halve_and_retry_gets_all_memory_back(python):
    result = python(RETRY, MEMORY, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert int(lines["SIZE"].split()[2]) >= 2, lines          # it did run out, more than once
    assert lines["LEFT"].startswith("[0, 0]"), lines
