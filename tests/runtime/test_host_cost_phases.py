"""The launcher's timed path (accounting.PhaseTimes, used by benchmarks/host_cost.py) is
launch() step for step: same values, every phase counted.  No timing is asserted."""
import torch

from fl_runtime.ops import accounting

FP32 = dict(rtol=1.3e-6, atol=1e-5)


def _ops(a: torch.Tensor, b: torch.Tensor) -> list:
    out = torch.empty(0, device=a.device)
    torch.add(a, b, out=out)                          # out= resized to fit
    c = a.clone()
    c.mul_(b)                                         # in place
    values, indices = a.max(dim=1)                    # two outputs
    return [a + b, a @ b, torch.relu(a - b), a.sum(), out, c, values, indices,
            torch.nn.functional.gelu(a), a[a > 0]]    # index by mask: a data-dependent shape


def test_timed_path_gives_the_untimed_values(fl):
    a = torch.randn(5, 5, generator=torch.Generator().manual_seed(0))
    b = torch.randn(5, 5, generator=torch.Generator().manual_seed(1))
    untimed = [t.cpu() for t in _ops(a.to("fl:0"), b.to("fl:0"))]
    times = accounting.PhaseTimes()
    previous = accounting.set_phases(times)
    try:
        timed = [t.cpu() for t in _ops(a.to("fl:0"), b.to("fl:0"))]
    finally:
        accounting.set_phases(previous)
    assert accounting.PHASES is previous
    expected = _ops(a, b)
    for u, t, e in zip(untimed, timed, expected):
        torch.testing.assert_close(t, u, rtol=0, atol=0)
        torch.testing.assert_close(t, e, **FP32)
    assert times.calls >= 10
    phases = times.as_dict()
    assert set(phases) == set(accounting.PHASE_NAMES)
    assert all(ns >= 0 for ns in phases.values())
    for phase in ("normalize", "layout", "allocate", "marshal", "order", "launch"):
        assert phases[phase] > 0, phases
    assert times.inside_ns() == sum(phases.values())


def test_timed_path_reports_a_vendor_failure_as_launch_does(fl):
    """An error inside the timed path propagates unchanged (the mixed-device check)."""
    times = accounting.PhaseTimes()
    previous = accounting.set_phases(times)
    try:
        x, y = torch.ones(3, device="fl:0"), torch.ones(3, device="fl:1")
        try:
            x + y
        except RuntimeError as exc:
            assert "same device" in str(exc)
        else:
            raise AssertionError("adding tensors on fl:0 and fl:1 did not raise")
    finally:
        accounting.set_phases(previous)
