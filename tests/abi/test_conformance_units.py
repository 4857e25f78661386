"""The conformance suite's own parts: tolerances, comparisons, recipes, reproducers,
profiles, waivers, the CLI's refusals and the worker timeout."""
from __future__ import annotations

import io
import json
import math

import pytest
import torch

from conformance import compare, opspecs, recipes, repro, waivers
from conformance.profiles import PROFILES, Profile, ProfileError, choose
from conformance.tolerances import EXACT, FAST_VARIANT_FACTOR, Tolerance, family, tolerance_for

F32 = torch.float32


def test_tolerance_table_lookups():
    assert tolerance_for("add.Tensor", F32) == EXACT
    assert tolerance_for("exp", torch.int32) == EXACT            # integer results are always exact
    assert tolerance_for("exp_", F32) == Tolerance("ulp", ulp=3)   # Khronos fp32 exp
    assert tolerance_for("div.Tensor", F32).ulp == 2.5
    assert tolerance_for("pow.Tensor_Scalar", F32).ulp == 16
    assert tolerance_for("exp", F32, fast=True).ulp == 3 * FAST_VARIANT_FACTOR
    assert tolerance_for("sum.dim_IntList", F32).kind == "magnitude"
    assert tolerance_for("lerp_.Scalar", torch.float16).kind == "close"
    assert family("_softmax") == "close" and family("convolution") == "matmul"
    assert family("native_layer_norm") == "close"   # ops known only through OpInfo: assert_close defaults


def test_ulp_spacing():
    x = torch.tensor([1.0, 2.0, 0.0, 1e-40], dtype=torch.float64)
    assert compare.ulp_of(x, F32).tolist() == [2 ** -23, 2 ** -22, 2 ** -149, 2 ** -149]
    assert compare.ulp_of(torch.tensor([1.0], dtype=torch.float64), torch.float16).item() == 2 ** -10


def _wide(values: list[float]) -> compare.Reference:
    wide = torch.tensor(values, dtype=torch.float64)
    return compare.Reference(wide.to(F32), wide, wide.abs(), None)


def _ulp_verdict(got: list[float], ref: list[float], ulp: float = 3):
    return compare.ulp(torch.tensor(got, dtype=F32), _wide(ref), Tolerance("ulp", ulp=ulp))


def test_ulp_rule():
    one_up = 1.0 + 2 ** -23
    assert _ulp_verdict([one_up], [1.0]).ok
    assert not _ulp_verdict([1.0 + 4 * 2 ** -23], [1.0]).ok
    assert _ulp_verdict([math.nan], [math.nan]).ok                      # any NaN for a NaN reference
    assert not _ulp_verdict([math.nan], [1.0]).ok and not _ulp_verdict([1.0], [math.nan]).ok
    assert _ulp_verdict([0.0], [1e-40]).ok                              # subnormal flushed to zero
    assert _ulp_verdict([math.inf], [math.inf]).ok and not _ulp_verdict([-math.inf], [math.inf]).ok
    assert not _ulp_verdict([3e38], [math.inf]).ok


def test_exact_rule_sees_sign_of_zero_and_bool_poison():
    assert compare.exact(torch.tensor([0.0, math.nan]), compare.Reference(torch.tensor([0.0, math.nan]))).ok
    assert not compare.exact(torch.tensor([-0.0]), compare.Reference(torch.tensor([0.0]))).ok
    poisoned = torch.tensor([0xFF], dtype=torch.uint8).view(torch.bool)
    assert not compare.exact(poisoned, compare.Reference(torch.tensor([True]))).ok


def test_exact_and_close_rules_accept_the_correctly_rounded_result():
    """PyTorch CPU rounds some float16 intermediates; the exact answer must pass too."""
    cpu, truth = torch.tensor([-0.00039053], dtype=torch.float16), -0.00039067864418029785
    correct = torch.tensor([truth], dtype=torch.float16)
    assert correct != cpu
    reference = compare.Reference(cpu, torch.tensor([truth], dtype=torch.float64))
    assert compare.exact(correct, reference).ok and compare.exact(cpu, reference).ok
    assert not compare.exact(torch.tensor([-0.0004], dtype=torch.float16), reference).ok
    overflowed = compare.Reference(torch.tensor([-math.inf], dtype=torch.float16),
                                   torch.tensor([-1068.2], dtype=torch.float64))
    assert compare.close(torch.tensor([-1068.0], dtype=torch.float16), overflowed, tolerance_for("lerp", F32)).ok


def test_magnitude_rule_allows_cancellation_and_order_dependent_overflow():
    rule = Tolerance("magnitude", rtol=1e-5, atol=0.0)

    def verdict(got: float, wide: float, size: float, accumulated: float | None = None):
        as64 = lambda v: torch.tensor([v], dtype=torch.float64)   # noqa: E731
        reference = compare.Reference(as64(wide).to(F32), as64(wide), as64(size),
                                      None if accumulated is None else as64(accumulated))
        return compare.magnitude(torch.tensor([got], dtype=F32), reference, rule)

    assert verdict(0.0, 1.0, 2e8 + 1).ok            # 1e8 + 1 - 1e8: error 1 against a magnitude 2e8
    assert not verdict(0.0, 1.0, 1.0).ok
    assert verdict(math.inf, 3e38, 1e39).ok          # partial sums overflow float32: order-dependent
    assert not verdict(math.inf, 3e30, 3e30).ok
    assert verdict(math.nan, -7e35, 7e35, accumulated=3e39).ok   # a mean whose sum overflows


def test_recipes_rebuild_identical_strided_tensors():
    recipe = {"shape": [3, 4], "dtype": "float32", "seed": 7, "scale": 1.0, "specials": [[5, 15]],
              "perm": [1, 0], "step": [2, 1], "offset": 3, "expand": []}
    a, b = recipes.build(recipe), recipes.build(recipe)
    assert torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
    assert a.storage_offset() == 3 and not a.is_contiguous() and a.isnan().sum() == 1
    expanded = recipes.build({**recipe, "perm": None, "step": None, "expand": [0]})
    assert expanded.stride()[0] == 0
    every = recipes.build({"bits": "all", "dtype": "bfloat16", "shape": [65536]})
    assert every.view(torch.int16).unique().numel() == 65536


def test_reproducer_literal_is_python():
    case = {"op": "add.Scalar", "args": [{"tensor": {"shape": [2], "seed": 1}}, math.inf, math.nan, -0.0],
            "kwargs": {}}
    rebuilt = eval(repro.literal(case))   # noqa: S307 - our own literal
    assert rebuilt["args"][1] == math.inf and math.isnan(rebuilt["args"][2])
    assert math.copysign(1, rebuilt["args"][3]) == -1
    script = repro.kernel_script("/x/lib.so", "add.Scalar", "precise", "float32", case, "exact", 0, "why")
    compile(script, "repro.py", "exec")


def test_profiles():
    assert choose("ci", None, None, False) == (PROFILES["ci"], 0)
    assert choose("ci", 5, "exp", True)[1] == 5
    assert choose("ci", None, None, False, 5.0)[0].unit_timeout_s == 5.0
    for options in [(1, None, False, None), (None, "exp", False, None), (None, None, True, None),
                    (None, None, False, 5.0)]:
        with pytest.raises(ProfileError, match="fixed settings"):
            choose("cert", *options)
    with pytest.raises(ProfileError, match="positive"):
        choose("ci", None, None, False, 0.0)
    with pytest.raises(ProfileError):
        choose("fast", None, None, False)
    assert PROFILES["cert"].kernel_examples > PROFILES["ci"].kernel_examples


def test_waivers(tmp_path):
    path = tmp_path / "known_failures.yaml"
    path.write_text("known_failures:\n  - op: 'div*'\n    dtype: float16\n    reason: vendor bug 12\n")
    [waiver] = waivers.load(path)
    assert waivers.find([waiver], {"op": "div.Tensor", "dtype": "float16"}) is waiver and waiver.used == 1
    assert waivers.find([waiver], {"op": "div.Tensor", "dtype": "float32"}) is None
    path.write_text("known_failures:\n  - op: exp\n")
    with pytest.raises(waivers.WaiverError, match="reason"):
        waivers.load(path)
    path.write_text("known_failures:\n  - opp: exp\n    reason: typo\n")
    with pytest.raises(waivers.WaiverError, match="unknown: opp"):
        waivers.load(path)


def test_cli_build_still_works_and_test_refuses_bad_profile(capsys):
    from fl_sdk.cli import main
    assert main(["test", "reference", "--profile", "nightly"]) == 2
    assert "unknown profile" in capsys.readouterr().err
    assert main(["build", "/nonexistent"]) == 1


def test_a_hanging_kernel_fails_with_its_name_and_case():
    """A worker silent past the unit timeout is killed; its unit fails with the last case."""
    from conformance.isolation import Job, KernelWorkers
    from conformance.target import resolve
    from conformance.harness import kernel_entries
    from conformance.target import load

    library = resolve("reference").path
    entry = next(e for e in kernel_entries(load(library)) if e.op == "mm")
    endless = Profile("test", kernel_examples=10 ** 7, property_examples=1, stateful_examples=1,
                      stateful_steps=1, unit_timeout_s=8, fixed=False)
    workers = KernelWorkers(library, endless, 0)
    try:
        workers.submit([Job(entry.index, "mm", "precise", [("numerics", "float32"), ("robustness", None)])])
        outcome = workers.outcome(entry.index, ("numerics", "float32"))
        assert outcome["status"] == "fail" and "did not finish within 8 s" in outcome["message"]
        assert "kernel mm (precise) on float32" in outcome["message"]
        assert "replay(" in outcome["reproducer"]
        assert workers.outcome(entry.index, ("robustness", None))["status"] == "pass"   # a fresh worker
    finally:
        workers.close()


def test_bit_identical_to_pytorch_cpu_always_passes():
    """PyTorch's float16 pow(-inf, 0.5) is +inf while float64 says NaN: parity wins."""
    cpu = torch.tensor([math.inf], dtype=torch.float16)
    reference = compare.Reference(cpu, torch.tensor([math.nan], dtype=torch.float64))
    assert compare.ulp(cpu.clone(), reference, tolerance_for("pow.Tensor_Scalar", torch.float16)).ok
    assert not compare.ulp(torch.tensor([-math.inf], dtype=torch.float16), reference,
                           tolerance_for("pow.Tensor_Scalar", torch.float16)).ok


# ---- OpInfo cases, RNG checks, stream probes, human report, progress bar ---------------

def test_opinfo_names_and_candidates():
    from conformance import opinfo_cases
    assert opinfo_cases.base_names("native_layer_norm_backward")[:4] == [
        "native_layer_norm_backward", "layer_norm_backward", "native_layer_norm", "layer_norm"]
    assert opinfo_cases.base_names("max_pool2d_with_indices_backward")[-1] == "max_pool2d"
    assert opinfo_cases.base_names("add_.Tensor") == ["add"]
    assert "nn.functional.conv2d" in [i.name for i in opinfo_cases.candidates("convolution_backward")]


def test_opinfo_case_rebuilds_the_same_call_with_varied_layout():
    """A drawn case is a few numbers; rebuilding it gives the same values (bit for bit),
    in the drawn layout, and the backward overload is reached through autograd."""
    from hypothesis import given, settings

    from conformance import opinfo_cases
    op, dtype = "_softmax_backward_data", torch.float32
    assert opinfo_cases.sources(op, dtype), "softmax's OpInfo samples reach its backward kernel"
    seen = []

    @settings(max_examples=6, database=None, deadline=None)
    @given(opinfo_cases.cases(op, dtype))
    def check(case):
        first, again = opinfo_cases.schema_values(op, case), opinfo_cases.schema_values(op, case)
        tensors = [(a, b) for a, b in zip(first, again) if isinstance(a, torch.Tensor)]
        assert tensors and all(torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0)) and a.stride() == b.stride()
                               for a, b in tensors)
        seen.extend(a.is_contiguous() for a, _ in tensors)
        assert json.loads(json.dumps(case)) == case   # JSON-able: reports and reproducers hold it
    check()
    assert False in seen, "no case changed a tensor's layout"


def test_ops_without_any_source_are_untested_not_passed():
    from conformance import opinfo_cases
    with pytest.raises(opinfo_cases.NoSource, match="no OpInfo sample calls"):
        opinfo_cases.cases("_fused_moving_avg_obs_fq_helper", F32)
    assert opinfo_cases.sources("normal_", F32) == ()   # random kernels go to conformance.random_checks


def test_random_statistics_catch_a_wrong_distribution():
    from conformance import random_checks
    law = random_checks.LAWS["uniform_"][0]
    gen = torch.Generator().manual_seed(3)
    good = torch.rand(random_checks.SAMPLES, generator=gen)
    assert max(z for _, z in random_checks._moments(good, law)) < random_checks.Z_BOUND
    squashed = good ** 1.1                      # still in [0, 1), but not uniform
    assert max(z for _, z in random_checks._moments(squashed, law)) > random_checks.Z_BOUND
    normal = random_checks.LAWS["normal_"][1]   # mean 3, std 0.5
    assert max(z for _, z in random_checks._moments(torch.randn(random_checks.SAMPLES, generator=gen), normal)) \
        > random_checks.Z_BOUND


def _document(**record) -> dict:
    base = {"nodeid": "suite_kernels.py::test_numerics[add.Tensor-float32-precise]", "category": "kernels",
            "op": "add.Tensor", "dtype": "float32", "variant": "precise", "test": "test_numerics",
            "status": "pass", "duration_s": 0.1, "max_error": 0.0, "error_ratio": 0.25, "tolerance": "exact",
            "examples": 10, "message": "", "reproducer": None}
    summary = {"total": 1, "pass": 1, "fail": 0, "not_supported": 0, "known_failure": 0, "untested": 0,
               "categories": {"kernels": {"pass": 1}}, "untested_ops": []}
    return {"suite_version": "0.1.0", "generated_at": "2026-11-30T05:00:00+00:00", "duration_s": 1.0,
            "plugin": {"name": "acme", "vendor": "Acme", "version": "1.2", "path": "/x/libfl_acme.so",
                       "abi_version": "1.0", "devices": [{"index": 0, "alignment": 64}]},
            "profile": {"name": "ci", "kernel_examples": 10, "property_examples": 25, "stateful_examples": 25,
                        "stateful_steps": 50, "unit_timeout_s": 60, "fixed": False},
            "seed": 0, "run_known_failures": False, "known_failures_file": None, "unused_waivers": [],
            "exit_status": 0, "summary": summary, "tests": [{**base, **record}]}


def test_report_schema_accepts_reports_and_rejects_what_ci_tools_cannot_read():
    import jsonschema
    from test_conformance_reference import REPORT_SCHEMA
    validator = jsonschema.Draft202012Validator(json.loads(REPORT_SCHEMA.read_text()))
    validator.validate(_document())
    validator.validate(_document(max_error="inf", error_ratio="nan"))
    for broken in (_document(status="passed"), _document(status="fail", reproducer=None, message="x"),
                   _document(max_error="huge"), _document(op=None)):
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(broken)


def test_human_report_table_and_progress_line():
    from conformance import human_report
    from conformance.progress import ProgressBar
    document = _document()
    document["tests"].append({**document["tests"][0], "dtype": "int8", "status": "not_supported",
                              "error_ratio": None, "nodeid": "n2"})
    table = human_report.markdown(document)
    assert "| kernel | variant | float32 | int8 |" in table and "| add.Tensor | precise | ok 0.25 | - |" in table
    page = human_report.html_page(document)
    assert "<th>float32</th>" in page and "ok 0.25" in page and "No failures." in page
    bar = ProgressBar(io.StringIO(), width=10)
    bar.total, bar.done, bar.failed = 40, 10, 2
    assert bar.line("add.Tensor-float32") == "[##--------] 10/40, 2 failed  add.Tensor-float32"
    assert not bar.enabled   # never draws into a log


def test_special_grid_pairs_every_special_value():
    from conformance import opspecs
    case = opspecs.grid_case("maximum", F32)
    rows, columns = (recipes.build(a["tensor"]) for a in case["args"])
    pool = recipes.special_values(F32)
    pairs = {(a.item(), b.item()) for a, b in zip(*torch.broadcast_tensors(rows, columns))
             for a, b in zip(a.reshape(-1), b.reshape(-1))}
    assert len(rows) == len(pool) and len(pairs) >= len(pool) ** 2 - 2 * len(pool)   # NaN != NaN in a set
    assert any(math.isnan(b) and not math.isnan(a) for a, b in pairs)   # NaN in the second operand too
    assert opspecs.grid_case("exp", F32) is None and opspecs.grid_case("add.Scalar", F32) is None


# ---- reference values PyTorch CPU gets wrong, running statistics, declined calls --------

def test_group_norm_reference_uses_contiguous_copies_where_cpu_ignores_strides():
    """PyTorch CPU's native_group_norm reads a strided bias as if contiguous (so does its
    backward with grad_out / input): the suite's expected values come from contiguous copies."""
    from conformance.numerics import CPU_READS_AS_CONTIGUOUS, cpu_reference
    from fl_runtime.ops.schema import compile_plan

    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 6, 3, generator=gen, dtype=torch.float64), torch.randn(6, generator=gen, dtype=torch.float64)
    bias = torch.randn(12, generator=gen, dtype=torch.float64)[::2]
    args = (2, 6, 3, 2, 0.5)
    direct = torch.native_group_norm(x, w, bias, *args)[0]
    fixed = torch.native_group_norm(x, w, bias.contiguous(), *args)[0]
    assert not torch.allclose(direct, fixed), "PyTorch now honours the bias strides: drop the rule"
    groups = x.reshape(2, 2, 9)
    first_principles = ((groups - groups.mean(-1, keepdim=True))
                        / (groups.var(-1, unbiased=False, keepdim=True) + 0.5).sqrt()).reshape(2, 6, 3)
    first_principles = first_principles * w[:, None] + bias[:, None]
    assert torch.allclose(fixed, first_principles, rtol=1e-12, atol=1e-12)
    got = cpu_reference(compile_plan("native_group_norm"), [x, w, bias, *args])[0]
    assert torch.equal(got, fixed)
    assert CPU_READS_AS_CONTIGUOUS == {"native_group_norm", "native_group_norm_backward",
                                       "native_layer_norm_backward"}


def test_layer_norm_backward_cpu_reads_a_strided_rstd_as_contiguous():
    """Why native_layer_norm_backward is in CPU_READS_AS_CONTIGUOUS (found by the cert profile):
    PyTorch CPU reads rstd by data pointer, so a strided rstd gives values of the wrong elements."""
    gen = torch.Generator().manual_seed(0)
    x, grad = (torch.randn(2, 3, 4, generator=gen, dtype=torch.float64) for _ in range(2))
    w, b = (torch.randn(4, generator=gen, dtype=torch.float64) for _ in range(2))
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [4], w, b, 1e-5)
    padded = torch.full((2, 3, 2), float("nan"), dtype=torch.float64)
    padded[..., 0] = rstd[..., 0]
    strided = padded[..., ::2]                       # same values as rstd, stride 2 in the last dim
    assert torch.equal(strided, rstd)
    direct = torch.ops.aten.native_layer_norm_backward(grad, x, [4], mean, strided, w, b, [True, True, True])
    fixed = torch.ops.aten.native_layer_norm_backward(grad, x, [4], mean, rstd, w, b, [True, True, True])
    assert not torch.equal(direct[0], fixed[0]), "PyTorch now honours rstd's strides: drop the rule"


def test_running_statistics_are_judged_relative_to_the_terms_of_their_update():
    """native_batch_norm's float16 running_mean: PyTorch CPU rounds the batch mean to float16
    first on a strided input, not on a contiguous one; both are right within the rule."""
    from conformance.compare import judge
    from conformance.numerics import side_effect_reference
    from conformance.tolerances import side_effect_tolerance
    from fl_runtime.ops.schema import compile_plan

    plan = compile_plan("native_batch_norm")
    half = torch.float16
    x = torch.tensor([[-7.94921875, 0.0], [3.611328125, 0.0]], dtype=half)[:, :1]   # strided input
    stats = [torch.tensor([2.337890625], dtype=half), torch.tensor([3.298828125], dtype=half)]
    values = [x, None, None, *stats, True, 0.5, 1e-5]
    cpu_after = [s.clone() for s in stats]
    torch.ops.aten.native_batch_norm(x, None, None, *cpu_after, True, 0.5, 1e-5)
    float32_blend = torch.tensor([0.08447265625], dtype=half)   # the contiguous path's (and float64's) answer
    assert cpu_after[0].item() != float32_blend.item(), "PyTorch CPU no longer rounds the batch mean first"
    reference = side_effect_reference(plan, values, 3, cpu_after[0])
    rule = side_effect_tolerance(half)
    assert rule.kind == "magnitude"
    assert judge(float32_blend, rule, reference).ok and judge(cpu_after[0], rule, reference).ok
    assert not judge(torch.tensor([0.0947], dtype=half), rule, reference).ok
    assert side_effect_tolerance(torch.int64) == EXACT


class _DecliningApi:
    """The reference plugin's table, but launch_kernel declines calls of `entry`: every one,
    or every other one when `every` is 2."""

    def __init__(self, api, entry) -> None:
        from fl_runtime.abi import ffi
        self._api, self._entry, self.every, self.calls = api, entry, 1, 0
        self._message = ffi.new("char[]", b"launch_kernel: these arguments are not supported")

    def launch_kernel(self, stream, entry, args, nargs):
        from fl_runtime import abi
        if entry == self._entry:
            self.calls += 1
            if self.calls % self.every == 0:
                return abi.ERROR_NOT_SUPPORTED
        return self._api.launch_kernel(stream, entry, args, nargs)

    def last_error_message(self):
        return self._message

    def __getattr__(self, name):
        return getattr(self._api, name)


def _declining_device(op: str):
    """A device of the reference plugin whose launch_kernel declines every call of `op`,
    and that kernel's entry."""
    from conformance.harness import Device, kernel_entries
    from conformance.target import load, resolve

    plugin = load(resolve("reference").path)
    entry = next(e for e in kernel_entries(plugin) if e.op == op and e.variant_name == "precise")
    dev = Device(plugin, 0)
    dev.api = _DecliningApi(dev.api, entry.pointer)
    return dev, entry


@pytest.fixture
def declining():
    """(device whose plugin declines every launch of `mm`, stream, the mm entry)."""
    dev, entry = _declining_device("mm")
    stream = dev.new_stream()
    yield dev, stream, entry
    dev.destroy_stream(stream)


def test_a_declined_launch_is_not_supported_with_the_plugins_message(declining):
    """FL_ERROR_NOT_SUPPORTED from launch_kernel is the ABI's way to decline arguments:
    numerics and robustness report not_supported (with the message), not fail."""
    from conformance import kernel_checks, statuses
    from conformance.harness import Declined, call_kernel
    from conformance.profiles import PROFILES
    from fl_runtime.ops.schema import compile_plan

    dev, stream, entry = declining
    a = torch.ones(2, 3)
    with pytest.raises(Declined, match="not supported"):
        call_kernel(dev, stream, entry, compile_plan("mm"), [a, a.t()])
    outcome = kernel_checks.numerics(dev, stream, entry, "float32", PROFILES["ci"], 0, lambda case: None)
    assert outcome["status"] == statuses.NOT_SUPPORTED
    assert "declined every mm case on float32" in outcome["message"] and "not supported" in outcome["message"]
    robust = kernel_checks.robustness(dev, stream, entry)
    assert robust["status"] == statuses.NOT_SUPPORTED and "FL_ERROR_NOT_SUPPORTED" in robust["message"]
    dev.api.every = 2   # declines some cases: the others are checked, and the record says so
    outcome = kernel_checks.numerics(dev, stream, entry, "float32", PROFILES["ci"], 0, lambda case: None)
    assert outcome["status"] == statuses.PASS and outcome["examples"] > 0
    assert "mm case(s) on float32 with FL_ERROR_NOT_SUPPORTED" in outcome["message"]


def test_the_plugins_real_decline_is_seen_at_launch():
    """The reference chip declines a 3-d convolution at launch (nothing enqueued)."""
    from conformance.harness import Declined, Device, call_kernel, kernel_entries
    from conformance.target import load, resolve
    from fl_runtime.ops.schema import compile_plan

    plugin = load(resolve("reference").path)
    entry = next(e for e in kernel_entries(plugin) if e.op == "convolution" and e.variant_name == "precise")
    dev = Device(plugin, 0)
    stream = dev.new_stream()
    try:
        x, w = torch.ones(1, 1, 2, 2, 2), torch.ones(1, 1, 1, 1, 1)
        with pytest.raises(Declined):
            call_kernel(dev, stream, entry, compile_plan("convolution"),
                        [x, w, None, [1, 1, 1], [0, 0, 0], [1, 1, 1], False, [0, 0, 0], 1])
    finally:
        dev.destroy_stream(stream)


def test_the_stream_model_skips_a_kernel_whose_call_the_plugin_declines():
    from conformance.suites.suite_streams import _kernel_for_streams

    dev, _ = _declining_device("add_.Scalar")
    kernel, declined = _kernel_for_streams(dev)
    assert kernel is not None and kernel.op == "fill_.Scalar"
    assert declined == ["add_.Scalar: launch_kernel: these arguments are not supported"]


@pytest.mark.parametrize("op, swept", [("gelu", True), ("sin", True), ("isnan", True), ("relu_", True),
                                       ("exp", True), ("sum", False), ("add.Tensor", False), ("clamp", False)])
def test_every_elementwise_unary_kernel_gets_the_16_bit_sweep(op, swept):
    for dtype in (torch.float16, torch.bfloat16):
        case = opspecs.sweep_case(op, dtype)
        assert (case is not None) == swept
        if swept:
            assert recipes.materialize(case["args"][0]).numel() == 1 << 16
    assert opspecs.sweep_case(op, torch.float32) is None


def test_index_recipes_can_ask_for_distinct_values():
    index = recipes.build({"shape": [7], "dtype": "int64", "seed": 3, "scale": 1.0, "perm": None, "step": [2],
                           "offset": 1, "index": {"low": -2, "high": 5, "unique": True}})
    assert sorted(index.tolist()) == list(range(-2, 5))
    targets = recipes.build({"shape": [500], "dtype": "int64", "seed": 3, "scale": 1.0,
                             "index": {"low": 0, "high": 3}})
    assert set(targets.tolist()) == {0, 1, 2}
    assert recipes.materialize([None, {"tensor": {"shape": [2], "dtype": "int64", "seed": 1, "scale": 2.0}}])[0] is None


def test_an_installed_plugin_whose_library_is_missing_is_a_clear_error(monkeypatch, tmp_path):
    from conformance.target import TargetError, resolve

    missing = tmp_path / "libfl_ghost.so"
    monkeypatch.setenv("TORCH_FL_DISABLE_ENTRY_POINTS", "1")
    monkeypatch.setenv("TORCH_FL_PLUGINS", str(missing))
    with pytest.raises(TargetError, match=r"plugin 'libfl_ghost' \(TORCH_FL_PLUGINS\) points at .*does not exist; build"):
        resolve("libfl_ghost")


def test_derived_inputs_are_what_the_op_gives_for_the_case_inputs():
    x = {"tensor": {"shape": [1, 4, 4], "dtype": "float32", "seed": 5, "scale": 1.0}}
    derived = {"derived": {"op": "max_pool2d_with_indices", "args": [x, [2, 2], [], [0, 0], [1, 1], False],
                           "output": 1}}
    want = torch.ops.aten.max_pool2d_with_indices(recipes.materialize(x), [2, 2])[1]
    assert torch.equal(recipes.materialize(derived), want)


def _flat(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value.detach()]
    if isinstance(value, (list, tuple)):
        return [x for item in value for x in _flat(item)]
    if isinstance(value, dict):
        return [x for key in sorted(value) for x in _flat(value[key])]
    return [repr(value)]


@pytest.mark.parametrize("name", ["logit", "nn.functional.max_pool2d", "gather", "nn.functional.layer_norm"])
def test_opinfo_samples_are_the_ones_sample_inputs_gives(name):
    """opinfo_cases draws samples without info.sample_inputs' stack inspection and
    torch.manual_seed's stack capture; the values must stay what sample_inputs gives."""
    import itertools

    from conformance import opinfo_cases

    info = next(i for i in opinfo_cases.op_db() if i.name == name)
    for grad in (False, True):
        with opinfo_cases._seeded(3):
            expected = _flat([(s.input, s.args, s.kwargs) for s in
                              itertools.islice(info.sample_inputs("cpu", F32, requires_grad=grad), 30)])
            after_expected = torch.rand(4)
        with opinfo_cases._seeded(3):
            got = _flat([(s.input, s.args, s.kwargs) for s in
                         itertools.islice(opinfo_cases._samples(info, F32, opinfo_cases._Mode(grad, False)), 30)])
            after_got = torch.rand(4)
        assert len(got) == len(expected) > 0
        for g, e in zip(got, expected):
            assert torch.equal(g, e) if isinstance(e, torch.Tensor) else g == e
        assert torch.equal(after_got, after_expected)   # the generator is left where sample_inputs left it


def test_opinfo_candidates_index_matches_a_scan_of_op_db():
    from conformance import opinfo_cases

    for op in ("add.Tensor", "convolution", "max_pool2d_with_indices_backward", "index.Tensor", "pow.Tensor_Scalar",
               "native_layer_norm_backward", "_foreach_addcdiv_.Scalar", "where.self"):
        names = opinfo_cases.base_names(op)
        wanted = [a for n in names for a in opinfo_cases._ALIASES.get(n, [])] + names
        scanned = []
        for n in wanted:
            for info in opinfo_cases.op_db():
                if (info.name == n or info.name.split(".")[-1] == n or info.aten_name == n) and \
                        all(info is not s for s in scanned):
                    scanned.append(info)
        assert [id(i) for i in opinfo_cases.candidates(op)] == [id(i) for i in scanned], op


def test_fork_server_warm_up_loads_no_plugin_and_starts_no_thread(python):
    """What the fork server prepares before forking kernel workers (conformance.isolation's
    worker modules, hypothesis' state, cffi types) must not load a plugin (its device memory
    mapping would be shared by every worker) nor leave a thread that fork would not copy."""
    result = python("""
        import threading
        from conformance import forkserver, isolation
        forkserver._warm_up()
        isolation.prepare_workers()
        maps = open('/proc/self/maps').read()
        assert 'libfl_' not in maps, [l for l in maps.splitlines() if 'libfl_' in l][:3]
        assert threading.active_count() == 1, threading.enumerate()
        import sys
        assert 'conformance.kernel_checks' in sys.modules and 'fl_runtime.plugins.loader' in sys.modules
        import os, gc
        pid = forkserver._fork()
        if pid == 0:
            from conformance.opinfo_cases import candidates
            os._exit(0 if candidates('convolution') else 1)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        print('ok')
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_fork_server_client_reads_replies_that_arrive_in_one_chunk(python):
    """A worker's exit and the next worker's pid can reach the client in one read; the
    client must then not wait on the (empty) pipe for the pid it already holds (it did,
    for ever: select() on a buffered file, a conformance run that hung)."""
    result = python("""
        import subprocess, sys
        from conformance.forkserver import ForkServer, _LineReader
        fake = ('import sys, os\\n'
                'sys.stdin.readline()\\n'
                'os.write(1, b\\'{"id": 7, "exit": -11}\\\\n{"id": 1, "pid": 4242}\\\\n\\')\\n'
                'sys.stdin.readline()\\n')
        server = ForkServer.__new__(ForkServer)
        server.target, server.pids, server._exits, server._spawned, server._next = "m:f", {7: 1}, [], set(), 0
        server.process = subprocess.Popen([sys.executable, "-c", fake], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, text=True, bufsize=1)
        server._replies = _LineReader(server.process.stdout.fileno())
        assert server.spawn([]) == 1 and server.pids == {1: 4242}
        assert server.exits(timeout=0) == [(7, -11)]
        server.process.stdin.close()
        assert server.process.wait(timeout=10) == 0
        try:
            server.exits(timeout=5)
        except RuntimeError as exc:
            assert "fork server died" in str(exc), exc
        else:
            raise AssertionError("a closed reply pipe went unnoticed")
        print("ok")
    """, timeout=60)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_a_worker_that_raises_leaves_its_traceback_on_stderr(python):
    """A worker that dies of an exception (not SystemExit) reports exit status 1; the
    exception itself must reach stderr (the server's os._exit would drop it unprinted),
    so a report that says 'exit status 1' has its cause beside it."""
    result = python("""
        from conformance.forkserver import ForkServer
        server = ForkServer("json:loads")          # json.loads(42): a TypeError in the worker
        worker = server.spawn([42], light=True)
        exits = []
        while not exits:
            exits = server.exits(timeout=5)
        server.close()
        print("exits", exits == [(worker, 1)])
    """, timeout=120)
    assert result.returncode == 0 and "exits True" in result.stdout, result.stdout + result.stderr[-3000:]
    assert "Traceback" in result.stderr and "TypeError" in result.stderr, result.stderr[-3000:]


def test_hardtanh_backward_cpu_loops_disagree_on_nan_and_either_answer_passes():
    """PyTorch CPU's hardtanh_backward passes grad through at a NaN input in its scalar
    tail and gives 0 in its vector body (conformance.cpu_loops): the suite's reference
    depends on the element's position, so either answer passes there, and nothing else."""
    from conformance.compare import Reference, exact
    from conformance.cpu_loops import loop_answers

    x = torch.randn(4094)
    x[0] = x[-1] = float("nan")
    grad = torch.full((4094,), 1.5)
    cpu = torch.ops.aten.hardtanh_backward(grad, x, -1.0, 1.0)
    assert cpu[0].item() == 0.0 and cpu[-1].item() == 1.5      # PyTorch still disagrees with itself
    ref = Reference(cpu, also=loop_answers("hardtanh_backward", [grad, x, -1.0, 1.0]))
    for at_nan in (0.0, 1.5):
        got = cpu.clone()
        got[0] = got[-1] = at_nan
        assert exact(got, ref).ok, at_nan
    wrong = cpu.clone()
    wrong[0] = 0.75
    assert not exact(wrong, ref).ok
    inside = torch.nonzero((x > -1) & (x < 1))[0].item()
    wrong = cpu.clone()
    wrong[inside] = 0.0                     # zeroing a gradient that must pass still fails
    assert not exact(wrong, ref).ok


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_float8_abs_cpu_loops_disagree_on_negative_zero_and_nan_and_either_answer_passes(dtype):
    """PyTorch CPU's abs on float8 keeps the sign bit of -0 and NaN in its 64-element vector
    body and clears it in its scalar body (conformance.cpu_loops): either answer passes for
    those two patterns, and a wrong magnitude still fails."""
    from conformance.compare import Reference, exact
    from conformance.cpu_loops import loop_answers

    bits = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    x = bits.view(dtype)
    vector = torch.abs(x).view(torch.uint8)                                  # 256 elements: the vector body
    scalar = torch.abs(bits[0x80:0x88].clone().view(dtype)).view(torch.uint8)   # 8 elements: the scalar body
    assert vector[0x80].item() == 0x80 and scalar[0].item() == 0x00         # PyTorch still disagrees
    ref = Reference(torch.abs(x), also=loop_answers("abs", [x]))
    either = x.float().abs().to(dtype)                 # the scalar body everywhere
    assert exact(either, ref).ok and exact(torch.abs(x), ref).ok
    wrong = either.clone().view(torch.uint8)
    wrong[0x81] = 0x02                                 # abs of the smallest negative subnormal, off by one step
    assert not exact(wrong.view(dtype), ref).ok


def test_scaled_mm_on_the_cpu_divides_by_scale_result_only_with_a_bias():
    """conformance.fp8_specs.scaled_mm_reference copies PyTorch CPU's _scaled_mm: scale_result
    ignored without a bias, divided by with one (float8 output).  The wide reference must agree."""
    from conformance.fp8_specs import scaled_mm_reference

    a = torch.full((16, 16), 1.0).to(torch.float8_e4m3fn)
    b = torch.full((16, 16), 1.0).to(torch.float8_e4m3fn).t()
    one, four, bias = torch.tensor(1.0), torch.tensor(4.0), torch.full((16,), 1.0)
    assert torch._scaled_mm(a, b, scale_a=one, scale_b=one, scale_result=four)[0, 0].item() == 16.0
    assert torch._scaled_mm(a, b, scale_a=one, scale_b=one, bias=bias, scale_result=four,
                            out_dtype=torch.float8_e4m3fn)[0, 0].float().item() == 4.0     # 17 / 4, rounded
    for kwargs, wide in ((dict(scale_result=four), 16.0), (dict(bias=bias, scale_result=four), 4.25)):
        assert scaled_mm_reference(a.double(), b.double(), one, one, **kwargs)[0, 0].item() == wide


class _CappedDevice:
    """A stand-in device for suite_memory's out-of-memory check: `total` bytes, one allocation
    at most `cap` bytes (OpenCL's CL_DEVICE_MAX_MEM_ALLOC_SIZE), as fl_abi.h's statuses say."""
    alignment, index = 256, 0

    def __init__(self, total: int, cap: int, oom_status: str = "FL_ERROR_OUT_OF_MEMORY") -> None:
        from conformance.harness import STATUS
        self.total, self.cap, self.used, self.live, self.last, self.next = total, cap, 0, {}, "", 4096
        self.status, self.oom_status = STATUS, oom_status
        self.api = self

    def memory_info(self) -> tuple[int, int]:
        return self.total - self.used, self.total

    def fl_malloc(self, index: int, size: int, flags: int, out) -> int:
        if size > self.cap:
            self.last = f"{size} bytes is more than one buffer may hold"
            return self.status["FL_ERROR_INVALID_SIZE"]
        if size > self.total - self.used:
            self.last = f"out of memory: {size} bytes asked, {self.total - self.used} free"
            return self.status[self.oom_status]
        self.used += size
        out[0], self.next = self.next, self.next + size
        self.live[out[0]] = size
        return self.status["FL_SUCCESS"]

    def free(self, ptr: int) -> None:
        self.used -= self.live.pop(ptr)

    def message(self) -> str:
        return self.last


@pytest.mark.parametrize("cap", [10 << 20, 3 << 20, 100 << 10])
def test_the_out_of_memory_check_fills_a_device_that_caps_one_allocation(cap):
    from conformance.suites.suite_memory import test_out_of_memory_is_a_status_not_a_crash as check
    device = _CappedDevice(10 << 20, cap)
    check(device)
    assert device.used == 0 and not device.live


def test_the_out_of_memory_check_fails_a_device_that_never_says_out_of_memory():
    from conformance.suites.suite_memory import test_out_of_memory_is_a_status_not_a_crash as check
    device = _CappedDevice(10 << 20, 3 << 20, oom_status="FL_ERROR_DRIVER")
    with pytest.raises(AssertionError, match="returned FL_ERROR_DRIVER, expected FL_ERROR_OUT_OF_MEMORY"):
        check(device)
    assert device.used == 0 and not device.live


def test_special_rows_put_every_pattern_in_a_row_and_in_a_column():
    """conformance.special_rows: in the rows case row r holds pattern r, in the columns case
    column r holds pattern r + 3; every pattern appears, and an empty dimension is offered."""
    import math

    import torch

    from conformance import special_rows
    from conformance.recipes import build

    def kind(values: list) -> str:
        if all(v == -math.inf for v in values):
            return "all -inf"
        if all(v == math.inf for v in values):
            return "all +inf"
        if all(math.isnan(v) for v in values):
            return "all NaN"
        if sum(math.isnan(v) for v in values) == 1:
            return "one NaN"
        if {v for v in values} == {math.inf, -math.inf}:
            return "+inf with -inf"
        return "finite" if all(math.isfinite(v) for v in values) else "?"

    rows, columns, empty = special_rows.cases("amax", torch.float32)
    x = build(rows["args"][0]["tensor"])
    assert rows["args"][1] == [1] and [kind(r.tolist()) for r in x] == list(special_rows.PATTERNS)
    y = build(columns["args"][0]["tensor"])
    assert columns["args"][1] == [0]
    assert [kind(y[:, r].tolist()) for r in range(y.shape[1])] == [special_rows.PATTERNS[(r + 3) % 6] for r in range(6)]
    assert build(empty["args"][0]["tensor"]).shape == (6, 0)
    assert all("special rows" in case["matrix"] for case in (rows, columns, empty))
    assert special_rows.cases("amax", torch.int32) == [] and special_rows.cases("add.Tensor", torch.float32) == []
    assert len(special_rows.cases("sum", torch.float16)) == len(special_rows.PATTERNS) + 1   # no dim: one per pattern


def test_special_rows_cover_the_ops_that_reduce_along_a_dimension():
    from conformance import special_rows

    for op in ("_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data", "logsumexp",
               "max", "min", "amax", "amin", "argmax", "argmin", "max.dim", "min.dim", "sum", "sum.dim_IntList",
               "mean", "mean.dim", "var.correction", "std.correction", "linalg_vector_norm", "cumsum", "cumprod",
               "sort", "topk", "native_layer_norm", "native_group_norm", "native_batch_norm",
               "native_layer_norm_backward", "native_group_norm_backward", "native_batch_norm_backward"):
        assert special_rows.applies(op), op


def test_a_value_variant_rotates_each_storage_once_and_keeps_views_of_one_storage_shared():
    """conformance.concurrency.rotated: same shapes and layouts, other values at each
    position; two views of one storage stay two views of one (rotated) storage."""
    import torch

    from conformance.concurrency import rotated

    base = torch.arange(12.0)
    a, b = base[:6].view(2, 3), base[3:].as_strided((3, 2), (1, 3), 3)
    c = torch.tensor([5, 1, 3])
    ra, rb, rc, scalar = rotated([a, b, [c], 2.5], 1)
    assert ra.untyped_storage().data_ptr() == rb.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()
    assert (ra.shape, ra.stride(), rb.stride(), rb.storage_offset()) == (a.shape, a.stride(), b.stride(), 3)
    assert ra.flatten().tolist() == [11.0, 0.0, 1.0, 2.0, 3.0, 4.0] and rc[0].tolist() == [3, 5, 1] and scalar == 2.5
    assert rotated([a], 0)[0] is a
