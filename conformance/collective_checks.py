"""The `collectives` category's checks (fl_abi.h, "collectives", ABI 1.1), run in rank processes.

A group of N ranks is N processes of this module (`python -m
conformance.collective_checks LIBRARY RANK SIZE UNIQUE_ID`), each loading the
plugin, making a communicator on device RANK % device_count from the unique id
the suite's process asked the plugin for, and running every check family in
the same order on every rank.  Inputs are rebuilt from (family, rank) seeds,
so each rank computes the expected result of the whole group on the CPU
(PyTorch, float64 accumulation for floats) and compares its own output:
integers exactly, floats within a tolerance of their dtype.  Each rank prints
one JSON line {family: verdict}; a family passes when it passes on every rank.

The error-status checks need no peers (a one-rank communicator, and a
two-rank one nobody joins) and run in the suite's own process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import torch

from fl_runtime import abi
from fl_runtime.abi import ffi
from fl_runtime.plugins.extensions import Collectives, collectives_of

from conformance.harness import STATUS, CallFailed, Device, status_name, text

FAMILIES = ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all", "send_recv", "stream_order")
PASS = "pass"
COUNT = 1000                        # elements per rank in most checks
LARGE = 1_200_000                   # one float32 all_reduce past a 4 MiB staging buffer (the reference's)
BUSY_BYTES = 32 << 20
# float dtypes: (rtol, atol) against a float64 reduction; the halves are rounded once at the end
_TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-12, 1e-12), torch.float16: (2e-3, 2e-3),
              torch.bfloat16: (1.6e-2, 1.6e-2)}
_NO_REDUCE = (torch.bool, torch.complex64)     # data movement only


def _args(type_name: str, **fields):
    return ffi.new(f"{type_name}*", {"struct_size": ffi.sizeof(type_name), **fields})


def declared_dtypes(ext: Collectives) -> list[torch.dtype]:
    return [dt for dt, code in abi.DTYPE_TO_FL.items() if (ext.dtypes >> code) & 1]


def declared_ops(ext: Collectives, dtype: torch.dtype) -> list[str]:
    return [name for name, code in abi.REDUCE_OPS.items() if (ext.reduce_ops >> code) & 1
            and (name != "avg" or dtype.is_floating_point)]


def make_input(family: str, rank: int, count: int, dtype: torch.dtype, op: str = "sum") -> torch.Tensor:
    """Rank `rank`'s input for one check: values small enough that no integer reduction overflows."""
    # crc32, not hash(): every rank process must derive the same seeds
    g = torch.Generator().manual_seed(zlib.crc32(f"{family}/{rank}/{dtype}/{op}".encode()))
    if dtype == torch.bool:
        return torch.rand(count, generator=g) > 0.5
    if dtype == torch.complex64:
        return torch.complex(torch.randn(count, generator=g), torch.randn(count, generator=g))
    if dtype.is_floating_point:
        low, high = (0.5, 1.5) if op == "prod" else (-2.0, 2.0)
        return (torch.rand(count, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)
    return torch.randint(1, 4, (count,), generator=g, dtype=torch.int64).to(dtype)


def cpu_reduce(inputs: list[torch.Tensor], op: str, dtype: torch.dtype) -> torch.Tensor:
    """The reduction over ranks on the CPU: float64 for floats, int64 for integers."""
    wide = torch.stack([t.to(torch.float64 if dtype.is_floating_point else torch.int64) for t in inputs])
    reduced = {"sum": lambda w: w.sum(0), "prod": lambda w: w.prod(0), "min": lambda w: w.min(0).values,
               "max": lambda w: w.max(0).values, "avg": lambda w: w.sum(0) / len(inputs)}[op](wide)
    return reduced.to(dtype)


def _same(name: str, got: torch.Tensor, expected: torch.Tensor) -> None:
    if expected.dtype in _TOLERANCE:
        rtol, atol = _TOLERANCE[expected.dtype]
        if not torch.allclose(got.to(torch.float64), expected.to(torch.float64), rtol=rtol, atol=atol):
            worst = (got.to(torch.float64) - expected.to(torch.float64)).abs().max().item()
            raise AssertionError(f"{name}: off by up to {worst:g} (rtol {rtol:g}, atol {atol:g})")
    elif not torch.equal(got, expected):
        where = (got != expected).nonzero()[0].item()
        raise AssertionError(f"{name}: element {where} is {got[where].item()}, expected {expected[where].item()}")


class Rank:
    """One rank of the group: its device, stream and communicator, and checked calls."""

    def __init__(self, device: Device, ext: Collectives, uid: bytes, rank: int, size: int, timeout_ms: int) -> None:
        self.dev, self.ext, self.rank, self.size = device, ext, rank, size
        self.stream = device.new_stream()
        id_struct = ffi.new("fl_comm_unique_id*")
        ffi.memmove(id_struct, uid, len(uid))
        args = _args("fl_comm_create_args", device=device.index, rank=rank, size=size, timeout_ms=timeout_ms,
                     unique_id=id_struct)
        device.check(ext.table.comm_create(args), f"comm_create(rank {rank} of {size})")
        self.comm = args.comm
        self._buffers: list[int] = []

    def call(self, name: str, type_name: str, **fields) -> None:
        args = _args(type_name, comm=self.comm, stream=self.stream, **fields)
        self.dev.check(getattr(self.ext.table, name)(args), name)

    def put(self, t: torch.Tensor) -> int:
        ptr = self.dev.malloc(max(t.numel() * t.element_size(), 1))
        self._buffers.append(ptr)
        if t.numel():
            self.dev.h2d(self.stream, ptr, 0, t.contiguous().view(torch.uint8).numpy().tobytes())
        return ptr

    def empty(self, count: int, dtype: torch.dtype) -> int:
        ptr = self.dev.malloc(max(count * torch.empty(0, dtype=dtype).element_size(), 1))
        self._buffers.append(ptr)
        self.dev.memset(self.stream, ptr, 0, 0xA5, count * torch.empty(0, dtype=dtype).element_size())
        return ptr

    def get(self, ptr: int, count: int, dtype: torch.dtype) -> torch.Tensor:
        nbytes = count * torch.empty(0, dtype=dtype).element_size()
        data = bytearray(self.dev.read(self.stream, ptr, 0, nbytes))      # synchronizes the stream
        return torch.frombuffer(data, dtype=torch.uint8).view(dtype).clone() if nbytes else torch.empty(0, dtype=dtype)

    def release(self) -> None:
        self.dev.synchronize(self.stream)
        for ptr in self._buffers:
            self.dev.free(ptr)
        self._buffers.clear()

    def everyone(self, family: str, count: int, dtype: torch.dtype, op: str = "sum") -> list[torch.Tensor]:
        return [make_input(family, r, count, dtype, op) for r in range(self.size)]


# ---- the families: each raises AssertionError / CallFailed on a wrong result --------------------

def check_all_reduce(g: Rank) -> None:
    for dtype in declared_dtypes(g.ext):
        if dtype in _NO_REDUCE:
            continue
        for op in declared_ops(g.ext, dtype):
            inputs = g.everyone(f"all_reduce/{op}", COUNT, dtype, op)
            send, recv = g.put(inputs[g.rank]), g.empty(COUNT, dtype)
            g.call("all_reduce", "fl_all_reduce_args", send_base=send, recv_base=recv, count=COUNT,
                   dtype=abi.DTYPE_TO_FL[dtype], op=abi.REDUCE_OPS[op])
            _same(f"all_reduce {op} {dtype}", g.get(recv, COUNT, dtype), cpu_reduce(inputs, op, dtype))
            in_place = g.put(inputs[g.rank])
            g.call("all_reduce", "fl_all_reduce_args", send_base=in_place, recv_base=in_place, count=COUNT,
                   dtype=abi.DTYPE_TO_FL[dtype], op=abi.REDUCE_OPS[op])
            _same(f"all_reduce {op} {dtype} in place", g.get(in_place, COUNT, dtype), cpu_reduce(inputs, op, dtype))
            g.release()
    if torch.float32 in declared_dtypes(g.ext):
        inputs = g.everyone("all_reduce/large", LARGE, torch.float32)
        send, recv = g.put(inputs[g.rank]), g.empty(LARGE, torch.float32)
        g.call("all_reduce", "fl_all_reduce_args", send_base=send, recv_base=recv, count=LARGE,
               dtype=abi.DTYPE_TO_FL[torch.float32], op=abi.REDUCE_OPS["sum"])
        _same(f"all_reduce sum float32 x{LARGE}", g.get(recv, LARGE, torch.float32),
              cpu_reduce(inputs, "sum", torch.float32))
        g.release()


def check_broadcast(g: Rank) -> None:
    for dtype in declared_dtypes(g.ext):
        for root in range(g.size):
            inputs = g.everyone(f"broadcast/{root}", COUNT, dtype)
            send, recv = g.put(inputs[g.rank]), g.empty(COUNT, dtype)
            g.call("broadcast", "fl_broadcast_args", send_base=send, recv_base=recv, count=COUNT,
                   dtype=abi.DTYPE_TO_FL[dtype], root=root)
            _same(f"broadcast root={root} {dtype}", g.get(recv, COUNT, dtype), inputs[root])
            g.release()


def check_all_gather(g: Rank) -> None:
    for dtype in declared_dtypes(g.ext):
        inputs = g.everyone("all_gather", COUNT, dtype)
        send, recv = g.put(inputs[g.rank]), g.empty(COUNT * g.size, dtype)
        g.call("all_gather", "fl_all_gather_args", send_base=send, recv_base=recv, send_count=COUNT,
               dtype=abi.DTYPE_TO_FL[dtype])
        _same(f"all_gather {dtype}", g.get(recv, COUNT * g.size, dtype), torch.cat(inputs))
        g.release()


def check_reduce_scatter(g: Rank) -> None:
    for dtype in declared_dtypes(g.ext):
        if dtype in _NO_REDUCE:
            continue
        for op in declared_ops(g.ext, dtype):
            inputs = g.everyone(f"reduce_scatter/{op}", COUNT * g.size, dtype, op)
            send, recv = g.put(inputs[g.rank]), g.empty(COUNT, dtype)
            g.call("reduce_scatter", "fl_reduce_scatter_args", send_base=send, recv_base=recv, recv_count=COUNT,
                   dtype=abi.DTYPE_TO_FL[dtype], op=abi.REDUCE_OPS[op])
            expected = cpu_reduce(inputs, op, dtype)[g.rank * COUNT:(g.rank + 1) * COUNT]
            _same(f"reduce_scatter {op} {dtype}", g.get(recv, COUNT, dtype), expected)
            g.release()


def check_all_to_all(g: Rank) -> None:
    for dtype in declared_dtypes(g.ext):
        inputs = g.everyone("all_to_all", COUNT * g.size, dtype)
        send, recv = g.put(inputs[g.rank]), g.empty(COUNT * g.size, dtype)
        g.call("all_to_all", "fl_all_to_all_args", send_base=send, recv_base=recv, count=COUNT,
               dtype=abi.DTYPE_TO_FL[dtype])
        expected = torch.cat([inputs[r][g.rank * COUNT:(g.rank + 1) * COUNT] for r in range(g.size)])
        _same(f"all_to_all {dtype}", g.get(recv, COUNT * g.size, dtype), expected)
        g.release()


def check_send_recv(g: Rank) -> None:
    """A ring: rank r sends to r+1 and receives from r-1 (even ranks send first, so no cycle waits)."""
    for dtype in declared_dtypes(g.ext):
        inputs = g.everyone("send_recv", COUNT, dtype)
        send, recv = g.put(inputs[g.rank]), g.empty(COUNT, dtype)
        to, frm = (g.rank + 1) % g.size, (g.rank - 1) % g.size
        steps = [("send", "fl_send_args", dict(send_base=send, peer=to)),
                 ("recv", "fl_recv_args", dict(recv_base=recv, peer=frm))]
        for name, type_name, fields in (steps if g.rank % 2 == 0 else steps[::-1]):
            g.call(name, type_name, count=COUNT, dtype=abi.DTYPE_TO_FL[dtype], **fields)
        _same(f"recv from rank {frm} {dtype}", g.get(recv, COUNT, dtype), inputs[frm])
        g.release()


def check_stream_order(g: Rank) -> None:
    """A collective queued behind busy work on its stream reads what that work wrote."""
    dtype = torch.float32 if torch.float32 in declared_dtypes(g.ext) else declared_dtypes(g.ext)[0]
    op = "sum" if dtype not in _NO_REDUCE else None
    inputs = g.everyone("stream_order", COUNT, dtype)
    staged = g.put(inputs[g.rank])
    send, recv = g.empty(COUNT, dtype), g.empty(COUNT, dtype)
    g.dev.synchronize(g.stream)          # send holds a poison pattern until the queued copy below
    busy = [g.dev.malloc(BUSY_BYTES), g.dev.malloc(BUSY_BYTES)]
    g._buffers += busy
    for _ in range(4):
        g.dev.d2d(g.stream, busy[1], 0, busy[0], 0, BUSY_BYTES)
    g.dev.d2d(g.stream, send, 0, staged, 0, COUNT * inputs[0].element_size())
    if op is None:
        g.call("broadcast", "fl_broadcast_args", send_base=send, recv_base=recv, count=COUNT,
               dtype=abi.DTYPE_TO_FL[dtype], root=0)
        expected = inputs[0]
    else:
        g.call("all_reduce", "fl_all_reduce_args", send_base=send, recv_base=recv, count=COUNT,
               dtype=abi.DTYPE_TO_FL[dtype], op=abi.REDUCE_OPS[op])
        expected = cpu_reduce(inputs, op, dtype)
    _same("a collective queued behind busy copies", g.get(recv, COUNT, dtype), expected)
    g.release()


CHECKS: dict[str, Callable[[Rank], None]] = {
    "all_reduce": check_all_reduce, "broadcast": check_broadcast, "all_gather": check_all_gather,
    "reduce_scatter": check_reduce_scatter, "all_to_all": check_all_to_all, "send_recv": check_send_recv,
    "stream_order": check_stream_order,
}
# The extension function each family needs (stream_order uses all_reduce, or broadcast for bool-only).
NEEDS = {"all_reduce": ("all_reduce",), "broadcast": ("broadcast",), "all_gather": ("all_gather",),
         "reduce_scatter": ("reduce_scatter",), "all_to_all": ("all_to_all",), "send_recv": ("send", "recv"),
         "stream_order": ("all_reduce",)}


def missing_calls(ext: Collectives, family: str) -> list[str]:
    return [name for name in NEEDS[family] if name not in ext.offered]


# ---- the group: N worker processes ---------------------------------------------------------------

def run_group(library: str, ext: Collectives, device: Device, size: int, timeout_s: float) -> dict[str, str]:
    """Every family on a group of `size` ranks; {family: "pass" or why not}."""
    uid = _unique_id(ext, device)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent),
                                                                       os.environ.get("PYTHONPATH", "")]))}
    procs = [subprocess.Popen([sys.executable, "-m", "conformance.collective_checks", library, str(rank), str(size),
                               uid.hex(), str(int(timeout_s * 1000 / 4))],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for rank in range(size)]
    verdicts: dict[str, str] = {}
    for rank, proc in enumerate(procs):
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            out = (proc.communicate()[0] or "") + f"\n(rank {rank} killed after {timeout_s:g} s)"
        mine = _verdicts(out)
        for family in FAMILIES:
            verdict = mine.get(family, f"rank {rank} gave no verdict (exit {proc.returncode}): {out[-1500:]}")
            if verdicts.get(family, PASS) == PASS and verdict != PASS:
                verdicts[family] = f"rank {rank} of {size}: {verdict}"
            verdicts.setdefault(family, verdict)
    return verdicts


def _verdicts(output: str) -> dict[str, str]:
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    return {}


def _unique_id(ext: Collectives, device: Device) -> bytes:
    out = ffi.new("fl_comm_unique_id*")
    device.check(ext.table.comm_get_unique_id(_args("fl_comm_get_unique_id_args", device=device.index,
                                                    unique_id=out)), "comm_get_unique_id")
    return bytes(ffi.buffer(out))


def worker(library: str, rank: int, size: int, uid: bytes, timeout_ms: int) -> dict[str, str]:
    from conformance.target import device_count, load
    plugin = load(library)
    ext = collectives_of(plugin)
    device = Device(plugin, rank % device_count(plugin))
    group = Rank(device, ext, uid, rank, size, timeout_ms)
    verdicts = {}
    for family in FAMILIES:
        missing = missing_calls(ext, family)
        if missing:
            verdicts[family] = f"not_supported: the extension has no {', '.join(missing)}"
            continue
        try:
            CHECKS[family](group)
            verdicts[family] = PASS
        except (AssertionError, CallFailed) as exc:
            verdicts[family] = str(exc)
            try:
                group.release()
            except CallFailed:
                pass             # the sticky error of the failed collective: already reported
    return verdicts


# ---- error statuses: one process, no peers ----------------------------------------------------------

def error_status_checks(ext: Collectives, device: Device) -> list[str]:
    """Each bad call must return the exact status fl_abi.h names, with a message; returns the problems."""
    problems: list[str] = []

    def expect(call: str, status: int, expected: str) -> None:
        if status != STATUS[expected]:
            problems.append(f"{call} returned {status_name(status)}, expected {expected}")
        elif not text(device.api.last_error_message()).strip():
            problems.append(f"{call} failed with {expected} but last_error_message() is empty")

    uid = ffi.new("fl_comm_unique_id*")
    device.check(ext.table.comm_get_unique_id(_args("fl_comm_get_unique_id_args", device=device.index,
                                                    unique_id=uid)), "comm_get_unique_id")
    create = ext.table.comm_create
    expect("comm_create(NULL)", create(ffi.NULL), "FL_ERROR_INVALID_POINTER")
    expect("comm_create(rank=1, size=1)",
           create(_args("fl_comm_create_args", device=device.index, rank=1, size=1, unique_id=uid)),
           "FL_ERROR_INVALID_VALUE")
    expect("comm_create(device=-1)",
           create(_args("fl_comm_create_args", device=-1, rank=0, size=1, unique_id=uid)), "FL_ERROR_INVALID_DEVICE")
    expect("comm_create(a unique id the plugin did not make)",
           create(_args("fl_comm_create_args", device=device.index, rank=0, size=1,
                        unique_id=ffi.new("fl_comm_unique_id*"))), "FL_ERROR_INVALID_VALUE")
    if ext.max_ranks >= 2:
        expect("comm_create(rank 0 of 2, nobody else joins, timeout 300 ms)",
               create(_args("fl_comm_create_args", device=device.index, rank=0, size=2, timeout_ms=300,
                            unique_id=_fresh_id(ext, device))), "FL_ERROR_TIMEOUT")
    args = _args("fl_comm_create_args", device=device.index, rank=0, size=1, unique_id=_fresh_id(ext, device))
    device.check(create(args), "comm_create(rank 0 of 1)")
    comm, stream = args.comm, device.new_stream()
    buf = device.malloc(4096)
    try:
        _bad_collective_calls(ext, device, comm, stream, buf, expect)
    finally:
        device.synchronize(stream)
        device.free(buf)
        device.check(ext.table.comm_destroy(_args("fl_comm_destroy_args", comm=comm)), "comm_destroy")
    return problems


def _fresh_id(ext: Collectives, device: Device):
    uid = ffi.new("fl_comm_unique_id*")
    device.check(ext.table.comm_get_unique_id(_args("fl_comm_get_unique_id_args", device=device.index,
                                                    unique_id=uid)), "comm_get_unique_id")
    return uid


def _bad_collective_calls(ext, device, comm, stream, buf, expect) -> None:
    f32, total = abi.DTYPE_TO_FL[torch.float32], 1024
    good = dict(comm=comm, stream=stream, send_base=buf, recv_base=buf, count=16, dtype=f32, op=abi.REDUCE_OPS["sum"])
    if "all_reduce" in ext.offered:
        ar = ext.table.all_reduce
        expect("all_reduce(NULL)", ar(ffi.NULL), "FL_ERROR_INVALID_POINTER")
        expect("all_reduce(comm=NULL)", ar(_args("fl_all_reduce_args", **{**good, "comm": ffi.NULL})),
               "FL_ERROR_INVALID_HANDLE")
        expect("all_reduce(stream=NULL)", ar(_args("fl_all_reduce_args", **{**good, "stream": ffi.NULL})),
               "FL_ERROR_INVALID_HANDLE")
        expect("all_reduce(dtype=99)", ar(_args("fl_all_reduce_args", **{**good, "dtype": 99})),
               "FL_ERROR_INVALID_VALUE")
        expect("all_reduce(op=99)", ar(_args("fl_all_reduce_args", **{**good, "op": 99})), "FL_ERROR_INVALID_VALUE")
        expect("all_reduce(a recv address outside every allocation)",
               ar(_args("fl_all_reduce_args", **{**good, "recv_base": 0x10})), "FL_ERROR_INVALID_POINTER")
        expect(f"all_reduce(count={total}, overrunning a 4096-byte allocation)",
               ar(_args("fl_all_reduce_args", **{**good, "count": total + 1})), "FL_ERROR_INVALID_VALUE")
        _other_device_stream(ext, device, good, expect)
    if "broadcast" in ext.offered:
        fields = {k: v for k, v in good.items() if k != "op"}
        expect("broadcast(root=size)", ext.table.broadcast(_args("fl_broadcast_args", **fields, root=1)),
               "FL_ERROR_INVALID_VALUE")
    if "send" in ext.offered:
        expect("send(peer=self)", ext.table.send(_args("fl_send_args", comm=comm, stream=stream, send_base=buf,
                                                       count=4, dtype=f32, peer=0)), "FL_ERROR_INVALID_VALUE")


def _other_device_stream(ext, device, good, expect) -> None:
    from conformance.target import device_count
    if device_count(device.plugin) < 2:
        return
    other = Device(device.plugin, 1 if device.index == 0 else 0)
    stream = other.new_stream()
    try:
        expect("all_reduce(a stream of another device)",
               ext.table.all_reduce(_args("fl_all_reduce_args", **{**good, "stream": stream})), "FL_ERROR_INVALID_VALUE")
    finally:
        other.destroy_stream(stream)


if __name__ == "__main__":
    lib, rank_text, size_text, uid_hex, timeout_text = sys.argv[1:6]
    print(json.dumps(worker(lib, int(rank_text), int(size_text), bytes.fromhex(uid_hex), int(timeout_text))),
          flush=True)
