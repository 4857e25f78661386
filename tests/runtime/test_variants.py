"""Precise and fast kernel variants (docs/users/profiling.md): the config's policy picks one, globally,
per op, and fast under autocast; the profile shows which ran.

The policy tests load tests/fixtures/plugin_variants.c: the reference vendor
with a FAST copy of its "mm" and "add.Tensor" entries whose launches it counts
(fl_variants_fast_launches).  The reference vendor's own fast kernel (gelu:
float32 erf / tanh approximations) is checked against the conformance suite's
fast-variant tolerance.
"""
import json

import pytest
from conftest import ROOT

from fl_runtime.config import parse_config
from fl_runtime.errors import ConfigError

REFERENCE_LIB = ROOT / "reference_vendor" / "libfl_reference.so"

SCRIPT = """
    import ctypes, json, os, torch, torch_fl
    lib = ctypes.CDLL(os.environ["TORCH_FL_PLUGINS"])
    lib.fl_variants_fast_launches.restype = ctypes.c_uint64
    a = torch.randn(8, 8, device="fl:0")
    with torch_fl.profile() as prof:
        mm, add = a @ a, a + a
        with torch.autocast("fl", dtype=torch.bfloat16):
            add_autocast = a + a
    assert torch.allclose(mm.cpu(), a.cpu() @ a.cpu(), atol=1e-5)
    assert torch.equal(add_autocast.cpu(), (a + a).cpu())
    # which variant ran each op, outside and inside autocast
    rows = sorted(prof.table(), key=lambda r: (r["op"], r["variant"]))
    print(json.dumps({"variants": [[r["op"], r["variant"], r["count"]] for r in rows],
                      "fast_launches": lib.fl_variants_fast_launches()}))
"""


@pytest.fixture(scope="module")
def variants_plugin(build_plugin):
    return build_plugin(ROOT / "tests" / "fixtures" / "plugin_variants.c")


def _run(python, lib, tmp_path, kernels_yaml: str) -> dict:
    config = tmp_path / "config.yaml"
    config.write_text("devices:\n  - type: variants\n" + kernels_yaml)
    result = python(SCRIPT, {"TORCH_FL_CONFIG": str(config), "TORCH_FL_PLUGINS": str(lib),
                             "FL_VARIANTS_INNER": str(REFERENCE_LIB)})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_per_op_pin_and_autocast_pick_the_fast_kernel(python, variants_plugin, tmp_path):
    got = _run(python, variants_plugin, tmp_path, "kernels:\n  per_op:\n    aten::mm: fast\n")
    # mm pinned fast; add precise (global default) outside autocast, fast inside it
    assert got["variants"] == [["aten::add.Tensor", "fast", 1], ["aten::add.Tensor", "precise", 1],
                               ["aten::mm", "fast", 1]]
    assert got["fast_launches"] == 2          # the plugin itself saw two fast launches


class _Entry:
    """Stands in for a cffi fl_kernel_entry in the policy's unit tests."""
    def __init__(self, variant: int) -> None:
        self.variant = variant


def _offered() -> dict:
    from fl_runtime.ops.op_table import KernelChoice
    return {name: KernelChoice(_Entry(v), 1, v, None) for name, v in (("precise", 0), ("fast", 1))}


@pytest.mark.parametrize("kernels, picked, autocast", [
    ({}, "precise", "fast"),                                            # default: fast under autocast only
    ({"variant": "fast"}, "fast", None),
    ({"per_op": {"aten::mm": "precise"}}, "precise", None),             # a pin beats autocast
    ({"variant": "fast", "per_op": {"mm": "precise"}}, "precise", None),
    ({"fast_under_autocast": False}, "precise", None),
])
def test_policy_picks_variant(kernels, picked, autocast):
    from fl_runtime.ops.op_table import _pick_variant
    choice = _pick_variant("mm", _offered(), parse_config({"kernels": kernels}).kernels)
    assert choice.variant_name == picked
    assert (choice.autocast.variant_name if choice.autocast else None) == autocast


def test_policy_falls_back_to_the_only_variant_offered():
    from fl_runtime.ops.op_table import _pick_variant
    only_precise = {"precise": _offered()["precise"]}
    choice = _pick_variant("mm", only_precise, parse_config({"kernels": {"variant": "fast"}}).kernels)
    assert choice.variant_name == "precise" and choice.autocast is None


@pytest.mark.parametrize("raw, key, words", [
    ({"kernels": {"variant": "quick"}}, "kernels.variant", "precise, fast"),
    ({"kernels": {"per_op": {"aten::mmm": "fast"}}}, "kernels.per_op.aten::mmm", "not an ATen operator"),
    ({"kernels": {"per_op": {"aten::mm": "turbo"}}}, "kernels.per_op.aten::mm", "precise, fast"),
    ({"kernels": {"varient": "fast"}}, "kernels.varient", "did you mean 'kernels.variant'"),
    ({"profiler": {"fallback_warning_share": 2}}, "profiler.fallback_warning_share", "[0, 1]"),
])
def test_kernels_config_errors_name_the_key(raw, key, words):
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert info.value.key == key and words in str(info.value)


def test_kernels_config_normalises_op_names():
    config = parse_config({"kernels": {"variant": "fast", "per_op": {"aten::mm": "precise", "add.Tensor": "fast"}}})
    assert config.kernels.variant == "fast"
    assert config.kernels.variant_for("mm") == "precise" and config.kernels.variant_for("add.Tensor") == "fast"
    assert config.kernels.variant_for("bmm") is None


GELU_FAST_SCRIPT = """
    import json, torch, torch_fl
    from conformance.tolerances import tolerance_for
    x = torch.linspace(-12, 12, 20001)
    with torch_fl.profile() as prof:
        got = {a: torch.nn.functional.gelu(x.to("fl:0"), approximate=a).cpu() for a in ("none", "tanh")}
    bound = tolerance_for("gelu", torch.float32, fast=True)     # the declared allowance
    excess = {}
    for a, y in got.items():
        want = torch.nn.functional.gelu(x, approximate=a)
        excess[a] = ((y - want).abs() / (bound.atol + bound.rtol * want.abs())).max().item()
    print(json.dumps({"variants": sorted({(r["op"], r["path"], r["variant"]) for r in prof.table()}),
                      "excess": excess}))
"""


@pytest.mark.parametrize("kernels_yaml", ["kernels:\n  variant: fast\n",
                                          "kernels:\n  per_op:\n    aten::gelu: fast\n"])
def test_reference_fast_gelu_runs_and_stays_within_the_fast_bound(python, tmp_path, kernels_yaml):
    config = tmp_path / "config.yaml"
    config.write_text("devices:\n  - type: reference\n" + kernels_yaml)
    result = python(GELU_FAST_SCRIPT, {"TORCH_FL_CONFIG": str(config)})
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["variants"] == [["aten::gelu", "native", "fast"]]
    assert all(0 <= e <= 1 for e in got["excess"].values()), got["excess"]
