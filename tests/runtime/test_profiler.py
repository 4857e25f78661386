"""The profiler (docs/users/profiling.md): per op path, variant, calls, host and device time, bytes
copied by fallbacks; summary; fallback-share warning; Chrome trace; env and CLI."""
import json
import warnings

import pytest
import torch
from conftest import ROOT


@pytest.fixture
def profiled(fl):
    """A profile of a small mix: native add and mm, and bessel_j0 on the CPU fallback."""
    a = torch.randn(16, 16, device="fl:0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fl.profile() as prof:
            (a + a) @ a
            torch.special.bessel_j0(a)
    return prof, [str(w.message) for w in caught]


def _row(prof, op):
    return next(r for r in prof.table() if r["op"] == op)


def test_rows_carry_path_variant_times_and_bytes(profiled):
    prof, _ = profiled
    add, mm = _row(prof, "aten::add.Tensor"), _row(prof, "aten::mm")
    assert (add["path"], add["variant"], add["count"]) == ("native", "precise", 1)
    assert mm["host_us"] > 0 and mm["device_us"] > 0 and mm["bytes_copied"] == 0   # vendor events
    bessel = _row(prof, "aten::special_bessel_j0.out")
    assert bessel["path"] == "cpu" and bessel["variant"] is None
    assert bessel["bytes_copied"] == 2 * 16 * 16 * 4          # the input out, the result back
    assert prof.paths()["aten::special_bessel_j0.out"] == {"cpu"}


def test_summary_table_and_fallback_warning(profiled):
    prof, messages = profiled
    text = prof.summary()
    print(text)
    assert text.splitlines()[0].split()[:4] == ["op", "path", "variant", "calls"]
    assert "aten::mm" in text and "fallback share 33.3%" in text
    assert any("33% of op calls ran through fallbacks" in m and "10%" in m for m in messages)


def test_threshold_is_configurable(fl):
    a = torch.randn(4, device="fl:0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # a share warning would fail the test
        with fl.profile(warn_fallback_share=0.5):
            torch.special.bessel_j0(a) + a + a
    with pytest.raises(ValueError, match="warn_fallback_share"):
        fl.profile(warn_fallback_share=1.5)


def test_chrome_trace_has_host_and_device_tracks(profiled, tmp_path):
    prof, _ = profiled
    trace = json.loads(prof.export_chrome_trace(tmp_path / "trace.json").read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    host = {e["name"] for e in spans if e["pid"] == 0}
    device = [e for e in spans if e["pid"] == 1]
    assert {"aten::add.Tensor", "aten::mm", "aten::special_bessel_j0.out"} <= host
    assert {e["name"] for e in device} == {"aten::add.Tensor", "aten::mm"} and all(e["tid"] == 0 for e in device)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)


def test_counters_keep_running_outside_profiles(fl):
    a = torch.ones(3, device="fl:0")
    fl.op_stats.reset()
    a + a
    assert fl.op_stats.snapshot() == {"aten::add.Tensor": {"native": 1}}


SCRIPT = """
import torch
a = torch.randn(8, 8, device="fl:0")
print("script ran", (a @ a).shape)
"""


def test_env_variable_and_cli_profile_a_whole_script(python, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env_trace, cli_trace = tmp_path / "env.json", tmp_path / "cli.json"
    result = python(f"""
        import os, subprocess, sys
        env = dict(os.environ, TORCH_FL_PROFILE={str(env_trace)!r})
        done = subprocess.run([sys.executable, {str(script)!r}], env=env, capture_output=True, text=True)
        print(done.stdout, done.stderr)
        from fl_runtime.tools.cli import main
        sys.exit(main(["profile", "--trace", {str(cli_trace)!r}, {str(script)!r}]))
    """, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("script ran torch.Size([8, 8])") == 2
    assert result.stdout.count("aten::mm") == 2 and "profile trace written to" in result.stdout
    for path in (env_trace, cli_trace):
        names = {e["name"] for e in json.loads(path.read_text())["traceEvents"]}
        assert "aten::mm" in names
