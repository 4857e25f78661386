"""A process that used fl exits 0, silently, however it ends holding fl tensors.

Each scenario is a script that ends with fl tensors still reachable (module
globals, containers, reference cycles, thread-locals, pending side-stream work,
CPU-fallback results, two plugins' devices) and must exit 0 with nothing on
stderr; the combined script holds all of them at once and runs 20 times in a
row, each scenario alone 3 times, and the OpInfo loop from the original report
(which died with SIGSEGV/SIGILL at exit, see fl_runtime/integration/shutdown.py)
5 times.  The only stderr lines a scenario could produce on purpose, Torch-FL's
own CPU-fallback UserWarning, are filtered inside the script, so stderr must be
empty.  An atexit handler registered before Torch-FL's (hence run after it)
checks that every cached block went back to the vendor.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from conftest import ROOT

from fl_sdk.build import build, read_spec

REFERENCE = ROOT / "reference_vendor"
PARALLEL = 3     # runs at once: a CI box has a few cores; timing differences vary the teardown order

# Registered before torch_fl is imported, so it runs after Torch-FL's exit handler.
PROLOGUE = """
import atexit, os, warnings

def _exit_report():
    import torch
    for index in range(torch.fl.device_count()):
        stats = torch.fl.memory_stats(index)
        cached = stats["reserved_bytes.all.current"] - stats["allocated_bytes.all.current"]
        print(f"EXIT fl:{index} cached={cached}", flush=True)

atexit.register(_exit_report)
warnings.filterwarnings("ignore", message=r"torch_fl: .*(running it on the CPU|ran through fallbacks)")
import torch, torch_fl
"""

SCENARIOS = {
    "globals": """
        g_x = torch.randn(64, 64, device="fl:0")
        g_y = g_x @ g_x
        g_view = g_y.t()[1:, ::2]
        g_nine_dims = torch.zeros(2, 1, 2, 1, 2, 1, 2, 1, 2, device="fl:0")   # a slot-less descriptor
        g_param = torch.nn.Parameter(torch.ones(3, device="fl:1"))
        (g_param * 2).sum().backward()
    """,
    "containers": """
        c_cache = {"a": [torch.ones(8, device="fl:0") * i for i in range(3)],
                   "b": (torch.arange(5, device="fl:1"),), "c": {"deep": [[torch.zeros(2, device="fl:0")]]}}
        c_model = torch.nn.Linear(16, 4).to("fl:0")
        c_opt = torch.optim.SGD(c_model.parameters(), lr=0.1, momentum=0.9)
        c_model(torch.randn(2, 16, device="fl:0")).sum().backward()
        c_opt.step()
        import collections
        c_deque = collections.deque([torch.ones(2, device="fl:1")])
    """,
    "cycles": """
        class Node:
            def __init__(self, t):
                self.t, self.other = t, None
        cy_a, cy_b = Node(torch.ones(4, device="fl:0")), Node(torch.ones(4, device="fl:1"))
        cy_a.other, cy_b.other = cy_b, cy_a
        cy_self = [torch.ones(3, device="fl:0")]
        cy_self.append(cy_self)
        cy_lost = [torch.ones(3, device="fl:0")]
        cy_lost.append(cy_lost)
        del cy_lost                                    # unreachable garbage at exit
        def cy_make():
            t = torch.ones(2, device="fl:0")
            def f():
                return t
            f.me = f
            return f
        cy_closure = cy_make()
        cy_graph = (torch.ones(3, device="fl:0", requires_grad=True) * 2).exp()   # grad_fn saves tensors
    """,
    "thread_local": """
        import threading
        tl = threading.local()
        tl.t = torch.ones(4, device="fl:0")
        tl_kept = []
        def tl_worker():
            tl.t = torch.ones(8, device="fl:1")
            tl_kept.append(tl.t * 2)
        tl_thread = threading.Thread(target=tl_worker)
        tl_thread.start()
        tl_thread.join()
        tl_started, tl_stop = threading.Event(), threading.Event()
        def tl_daemon():                               # still alive, holding tensors, at exit
            mine = threading.local()
            mine.t = torch.ones(16, device="fl:0")
            held = mine.t + 1
            tl_started.set()
            tl_stop.wait()
        threading.Thread(target=tl_daemon, daemon=True).start()
        tl_started.wait()
    """,
    "side_stream": """
        ss_stream = torch.fl.Stream("fl:0")
        ss_a = torch.randn(384, 384, device="fl:0")
        with torch.fl.stream(ss_stream):
            ss_pending = [ss_a @ ss_a for _ in range(6)]    # not waited for
        ss_a.record_stream(ss_stream)
        ss_stream1 = torch.fl.Stream("fl:1")
        with torch.fl.stream(ss_stream1):
            ss_pending1 = torch.randn(256, 256, device="fl:1").exp()
    """,
    "cpu_fallback": """
        fb_v = torch.randn(100, device="fl:0")
        fb_sorted, fb_index = torch.sort(fb_v)             # no reference kernel: the CPU fallback
        fb_nonzero = torch.nonzero(fb_v > 0)
        fb_top = torch.topk(fb_v, 5)
    """,
    "two_plugins": """
        tp_count = torch.fl.device_count()
        assert tp_count == 4, tp_count
        tp_a = torch.arange(6.).reshape(2, 3).to("fl:0")
        tp_b = (tp_a * 2).to("fl:3") + 1                   # reference -> second vendor
        tp_c = torch.randn(32, 32, device="fl:2") @ torch.randn(32, 32, device="fl:2")
        tp_both = [tp_a, tp_b, tp_c]
    """,
}

OPINFO_LOOP = """
import torch, torch_fl
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_map

def to_fl(x):
    return x.to("fl:0") if isinstance(x, torch.Tensor) else x

names = [o.name for o in op_db]
failures = 0
for op in op_db[names.index("masked.softmax"):]:
    if torch.float32 not in op.supported_dtypes("cpu"):
        continue
    for s in list(op.sample_inputs("cpu", torch.float32))[:2]:
        expected = op(s.input, *s.args, **s.kwargs)
        fi, fa, fk = tree_map(to_fl, (s.input, s.args, s.kwargs))
        got = op(fi, *fa, **fk)
        try:
            torch.testing.assert_close(tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, got),
                                       expected, rtol=1e-4, atol=1e-5)
        except AssertionError:
            failures += 1
    print(op.name, flush=True)
print("READY", failures)
"""


def _script(names) -> str:
    body = "\n".join(textwrap.dedent(SCENARIOS[name]) for name in names)
    return PROLOGUE + body + '\nprint("READY", flush=True)\n'


def _run(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, cwd=ROOT)


def _run_repeatedly(code: str, env: dict, times: int) -> list[subprocess.CompletedProcess]:
    with ThreadPoolExecutor(PARALLEL) as pool:
        return list(pool.map(lambda _: _run(code, env), range(times)))


def _assert_clean(results: list[subprocess.CompletedProcess], devices: int) -> None:
    for i, result in enumerate(results):
        where = f"run {i + 1} of {len(results)}"
        assert result.returncode == 0, f"{where}: exit status {result.returncode}\n{result.stderr[-3000:]}"
        assert result.stderr == "", f"{where}: stderr not empty:\n{result.stderr[-3000:]}"
        assert "READY" in result.stdout, f"{where}: {result.stdout[-2000:]}"
        # every cached block went back to the vendor before the process ended
        reports = [line for line in result.stdout.splitlines() if line.startswith("EXIT ")]
        assert reports == [f"EXIT fl:{d} cached=0" for d in range(devices)], f"{where}: {reports}"


@pytest.fixture(scope="module")
def two_plugins(tmp_path_factory) -> dict:
    """TORCH_FL_PLUGINS for the reference vendor plus a rebuild of it posing as vendor
    'reference2' (tests/second_vendor/, as in test_stable_ids.py): fl:0-1 and fl:2-3."""
    directory = tmp_path_factory.mktemp("second_vendor")
    (directory / "src").symlink_to(REFERENCE / "src")
    shutil.copy(ROOT / "tests" / "second_vendor" / "second_vendor.c", directory / "second_vendor.c")
    spec = read_spec(REFERENCE)
    cflags = [*spec.cflags, "-O0", "-Dfl_plugin_get_api=ref_inner_get_api", '-DFL_REFERENCE_UUID_PREFIX="ref2"']
    (directory / "plugin.yaml").write_text(yaml.safe_dump({
        "library": "libfl_reference2.so", "sources": [*spec.sources, "second_vendor.c"],
        "cflags": cflags, "link": spec.links}))
    second = build(directory)
    return {"TORCH_FL_DISABLE_ENTRY_POINTS": "1", "FL_REFERENCE_DEVICES": "2",
            "TORCH_FL_PLUGINS": f"{build(REFERENCE)}:{second}"}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_scenario_exits_cleanly(name, two_plugins):
    _assert_clean(_run_repeatedly(_script([name]), two_plugins, 3), devices=4)


def test_all_scenarios_at_once_exit_cleanly_20_times_in_a_row(two_plugins):
    _assert_clean(_run_repeatedly(_script(sorted(SCENARIOS)), two_plugins, 20), devices=4)


def test_opinfo_loop_from_the_report_exits_cleanly():
    env = {"FL_REFERENCE_DEVICES": "2"}
    results = _run_repeatedly(PROLOGUE + OPINFO_LOOP, env, 5)
    _assert_clean(results, devices=2)
    assert all(r.stdout.count("\n") > 5 for r in results)     # the ops ran before the exit
