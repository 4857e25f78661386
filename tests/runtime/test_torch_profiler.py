"""PyTorch's own profilers with fl (tools/torch_profiler.py): host times are real
(never the negative totals PyTorch's PrivateUse1 profiler state gives a Python
backend), and each vendor launch's device time appears under the op that made it."""
import pytest
import torch
from torch.profiler import ProfilerActivity

WORK = 3


def _work():
    x = torch.arange(64 * 64, dtype=torch.float32, device="fl:0").reshape(64, 64) / 4096
    for _ in range(WORK):
        y = x + x
        x = y @ y
    torch.fl.synchronize()
    return x


def _check(averages, table: str):
    for evt in averages:
        for value in (evt.cpu_time_total, evt.self_cpu_time_total, evt.device_time_total, evt.self_device_time_total):
            assert 0 <= value < 60e6, (evt.key, value)      # under a minute: no garbage start times
    by_key = {evt.key: evt for evt in averages}
    assert by_key["aten::mm"].count == WORK and by_key["aten::mm"].self_device_time_total > 0
    assert by_key["fl: aten::mm"].count == WORK
    assert by_key["fl: aten::mm"].self_device_time_total == pytest.approx(by_key["aten::mm"].self_device_time_total)
    assert "Self FL" in table and "-" not in table.split("Self FL time total:")[1].split()[0]


def test_autograd_profiler_use_device_fl(fl):
    _work()                                            # warm: meta caches, first allocations
    with torch.autograd.profiler.profile(use_device="fl") as prof:
        _work()
    averages = prof.key_averages()
    _check(averages, averages.table(sort_by="self_cpu_time_total"))


def test_torch_profiler_with_the_fl_activity(fl):
    assert ProfilerActivity.PrivateUse1 in torch.profiler.supported_activities()
    _work()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        _work()
    averages = prof.key_averages()
    _check(averages, averages.table(sort_by="self_cpu_time_total"))


def test_cpu_only_profile_is_untouched(fl):
    with torch.autograd.profiler.profile() as prof:
        _work()
    keys = {evt.key for evt in prof.key_averages()}
    assert "aten::mm" in keys and not any(k.startswith("fl: ") for k in keys)
