"""Where a tiny op's host time goes on the steady-state path (a replayed program, ops/eager/fast_path.py).

    python benchmarks/program_path_parts.py [--repeats 20000]

Times, on the null plugin (benchmarks/null_plugin.py: launches return at once), each part of
`torch.add(a, b)` on 4x4 fl tensors alone in a loop, and the whole call beside native
PyTorch's.  Thread-CPU µs per call, best of 7 rounds.  The parts are those
Launcher._run_program runs; their sum falls short of the whole by the Python glue between
them (argument lists, checks, accounting), which the last line reports.  docs/benchmarks/index.md
"Where a tiny op's time goes" quotes it.

The compiled helpers (fl_runtime/compiled.py) run where built; TORCH_FL_PURE_PYTHON=1 times
their Python versions instead, and the first line says which ran.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from null_plugin import build_null_plugin  # noqa: E402


def best_us(call, repeats: int, rounds: int = 7) -> float:
    for _ in range(repeats // 10):
        call()
    best = float("inf")
    for _ in range(rounds):
        start = time.thread_time_ns()
        for _ in range(repeats):
            call()
        best = min(best, (time.thread_time_ns() - start) / repeats / 1000)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20000)
    args = parser.parse_args()
    os.environ["TORCH_FL_DISABLE_ENTRY_POINTS"] = "1"
    os.environ["TORCH_FL_PLUGINS"] = str(build_null_plugin())
    import torch
    torch.set_num_threads(1)
    import torch_fl
    from fl_runtime.devices.storage import wrap_block
    from fl_runtime.ops.eager import fast_path
    from fl_runtime.ops.eager.marshal import replay

    a, b = torch.randn(4, 4), torch.randn(4, 4)
    fa, fb = a.to("fl:0"), b.to("fl:0")
    torch.add(fa, fb)                                   # records the program
    rt = torch_fl.runtime()
    allocator, stream = rt.allocators[0], rt.streams.default[0]
    program = next(iter(rt.launcher.programs("add.Tensor").values()))
    plan, _ = rt.launcher._plan("add.Tensor")
    out = torch.empty(4, 4, device="fl:0")
    c_args, count = replay(plan, [fa, fb, 1], [out], program.entry)
    library = torch.library.Library("fl_bench", "DEF")  # a Python kernel that does nothing
    library.define("noop(Tensor x) -> Tensor")
    library.impl("noop", lambda x: x, "PrivateUse1")

    def new_output():
        block = allocator.allocate_rounded(program.single_new.size, stream)
        return wrap_block(block, allocator.release, 0, (4, 4), (4, 1), torch.float32)

    n = args.repeats
    rows = [
        ("native torch.add (CPU)", best_us(lambda: torch.add(a, b), n)),
        ("fl torch.add (whole call)", best_us(lambda: torch.add(fa, fb), n)),
        ("entering a Python kernel (noop)", best_us(lambda: torch.ops.fl_bench.noop(fa), n)),
        ("call key", best_us(lambda: fast_path.positional_key((fa, fb)), n)),
        ("allocate + release", best_us(lambda: allocator.release(allocator.allocate_rounded(512, stream)), n)),
        ("allocate + DLPack wrap + free", best_us(new_output, n)),
        ("marshal replay", best_us(lambda: replay(plan, [fa, fb, 1], [out], program.entry), n)),
        ("launch (cffi call)", best_us(lambda: program.choice.launch_fn(stream.handle, program.choice.entry,
                                                                          c_args, count), n)),
    ]
    from fl_runtime import bridge
    from fl_runtime.devices import storage
    if bridge.status().active:     # the C++ pool alone: two C calls, the GIL never released or taken
        native = allocator.bridge
        rows.append(("C++ pool alloc + free (bridge)", best_us(lambda: native.free(0, native.alloc(0, 512, 512, 0)), n)))
    print(f"compiled helpers: {'in use' if storage.IMPLEMENTATION == 'compiled' else 'not in use (Python versions)'}"
          f"; allocator: {type(allocator).__name__} (native bridge {'on' if bridge.status().active else 'off'})")
    width = max(len(name) for name, _ in rows)
    for name, us in rows:
        print(f"{name:{width}s} {us:7.2f} us")
    whole, parts = rows[1][1], sum(rows[i][1] for i in (2, 3, 5, 6, 7))
    print(f"{'glue (whole - the parts above)':{width}s} {whole - parts:7.2f} us   load average "
          f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
