"""torch.fl.memory's history and snapshots, read by PyTorch's own memory visualizer
(torch.cuda._memory_viz): docs/users/errors-and-memory.md "Memory snapshots"."""
import pickle
import subprocess
import sys

import pytest
import torch
from torch.cuda import _memory_viz

from conftest import PYTHON_ROUTE


def _recorded_workload():
    """Allocations and frees with a known Python stack (this function's name)."""
    kept = torch.ones(1 << 18, device="fl:0")                  # 1 MiB, alive at the snapshot
    for _ in range(3):
        temporary = torch.randn(256, 256, device="fl:0") @ torch.randn(256, 256, device="fl:0")
        del temporary
    return kept


def _names(frames):
    return {frame["name"] for frame in frames}


@pytest.fixture
def recording(fl):
    torch.fl.memory._record_memory_history(max_entries=100_000)
    yield
    torch.fl.memory._record_memory_history(enabled=None)


def test_snapshot_has_segments_blocks_and_events_with_stacks(recording):
    kept = _recorded_workload()
    snapshot = torch.fl.memory._snapshot()
    assert set(snapshot) >= {"segments", "device_traces"}
    live = [block for segment in snapshot["segments"] for block in segment["blocks"]
            if block["address"] == kept.data_ptr()]
    assert len(live) == 1 and live[0]["state"] == "active_allocated"
    assert live[0]["size"] >= kept.nbytes and live[0]["requested_size"] >= kept.nbytes
    assert "_recorded_workload" in _names(live[0]["frames"])
    trace = snapshot["device_traces"][0]
    actions = [event["action"] for event in trace]
    assert {"alloc", "free_requested", "free_completed"} <= set(actions)
    allocs = [event for event in trace if event["action"] == "alloc" and event["addr"] == kept.data_ptr()]
    assert allocs and "_recorded_workload" in _names(allocs[-1]["frames"])
    assert all(event["time_us"] > 0 for event in trace)
    # each temporary (256x256 floats) was allocated and, later, freed
    size = 256 * 256 * 4
    paired = 0
    for at, event in enumerate(trace):
        if event["action"] == "alloc" and event["size"] == size:
            paired += any(later["action"] == "free_completed" and later["addr"] == event["addr"]
                          for later in trace[at + 1:])
    assert paired >= 6          # two inputs and a product per round, the last product's free included
    torch.fl.empty_cache()
    after = torch.fl.memory._snapshot()
    assert any(event["action"] == "segment_free" for event in after["device_traces"][0])
    assert all(block["state"] == "active_allocated" for seg in after["segments"] for block in seg["blocks"]
               if seg["device"] == 0)          # the cache was given back; live blocks remain
    del kept


def test_pytorchs_memory_visualizer_reads_an_fl_snapshot(recording, tmp_path):
    kept = _recorded_workload()
    path = tmp_path / "snap.pickle"
    torch.fl.memory._dump_snapshot(str(path))
    with open(path, "rb") as file:
        snapshot = pickle.load(file)
    # PyTorch's own tooling, as a CUDA user runs it
    html = tmp_path / "out.html"
    result = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", str(path), "-o", str(html)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert html.stat().st_size > 1000 and "Active Memory Timeline" in html.read_text()
    flame = _memory_viz.segments(snapshot, format_flamegraph=lambda lines: lines)
    assert "active_allocated" in flame and "_recorded_workload" in flame
    assert "_recorded_workload" in _memory_viz.memory(snapshot, format_flamegraph=lambda lines: lines)
    assert "Summary of segments" in _memory_viz.segsum(snapshot)
    assert "alloc" in _memory_viz.trace(snapshot)
    assert "Active Cached Memory Timeline" in _memory_viz.trace_plot(snapshot, plot_segments=True)
    assert _memory_viz.segment_plot(snapshot)
    del kept


def test_recording_stops_and_forgets(fl):
    torch.fl.memory._record_memory_history()
    torch.ones(64, device="fl:0")
    torch.fl.memory._record_memory_history(enabled=None)
    torch.ones(64, device="fl:0")
    assert torch.fl.memory._snapshot()["device_traces"][0] == []
    free, total = torch.fl.mem_get_info(0)
    assert 0 < free <= total == torch.fl.get_device_properties(0).total_memory


def test_the_python_route_records_the_same_history(python):
    result = python("""
        import pickle, torch, torch_fl
        from fl_runtime import bridge
        torch.fl.memory._record_memory_history()
        def make_one():
            return torch.ones(1 << 16, device="fl:0")
        x = make_one(); y = x + 1; del y
        snap = torch.fl.memory._snapshot()
        actions = [e["action"] for e in snap["device_traces"][0]]
        block = [b for s in snap["segments"] for b in s["blocks"] if b["address"] == x.data_ptr()][0]
        print(bridge.status().active, sorted(set(actions)), block["state"],
              "make_one" in {f["name"] for f in block["frames"]})
    """, PYTHON_ROUTE)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == (
        "False ['alloc', 'free_completed', 'free_requested', 'segment_alloc'] active_allocated True")
