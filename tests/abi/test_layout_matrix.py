"""The conformance suite's deterministic layout matrix (conformance/layout_matrix.py): which
cases ci and cert run, and that every case is a valid PyTorch call."""
from __future__ import annotations

import pytest
import torch

from conformance import layout_matrix
from conformance.numerics import cpu_reference, schema_values
from conformance.recipes import materialize
from fl_runtime.ops.schema import compile_plan


def _layouts(case: dict) -> list[str]:
    return case["matrix"].split("inputs ")[1].split(", large")[0].split(", ")


@pytest.mark.parametrize("op,inputs", [("neg", 1), ("add.Tensor", 2), ("mm", 2), ("_softmax", 1), ("sum", 1)])
def test_ci_subset_gives_every_input_every_layout_and_both_alignments(op, inputs):
    cases = layout_matrix.cases(op, torch.float32, full=False)
    for j in range(inputs):
        assert {_layouts(c)[j] for c in cases} == set(layout_matrix.LAYOUTS)
    assert {c["shift"] for c in cases} == set(layout_matrix.SHIFTS.values())
    if inputs == 2:   # a transposed (column-major) second operand meets an aligned, contiguous first one
        assert any(_layouts(c) == ["contiguous", "transposed"] and c["shift"] == 0 for c in cases)


def test_cert_runs_the_full_matrix():
    full = layout_matrix.cases("add.Tensor", torch.float32, full=True)
    combos = {(tuple(_layouts(c)), c["shift"], c["args"][0]["tensor"]["shape"][1]) for c in full}
    assert len(combos) == len(full) == len(layout_matrix.LAYOUTS) ** 2 * 2 * len(layout_matrix.SIZES_FULL)
    assert len(layout_matrix.cases("mm", torch.float64, full=True)) == \
        len(layout_matrix.LAYOUTS) ** 2 * 2 * len(layout_matrix.MATMUL_SIZES_FULL)


def test_softmax_gets_large_magnitudes_on_float32_and_float64_only():
    for dtype, scale in ((torch.float32, 1e4), (torch.float64, 1e6)):
        loud = [c for c in layout_matrix.cases("_log_softmax", dtype, full=False) if "large magnitude" in c["matrix"]]
        assert loud and all(c["args"][0]["tensor"]["scale"] == scale for c in loud)
        assert float(materialize(loud[0]["args"][0]).abs().max()) > 1000   # exp overflows without the max
    assert not any("large" in c["matrix"] for c in layout_matrix.cases("_softmax", torch.float16, full=False))


def test_in_place_targets_never_get_stride_0_and_uncovered_ops_get_nothing():
    for case in layout_matrix.cases("add_.Tensor", torch.float32, full=True):
        assert "expand" not in case["args"][0]["tensor"]
    assert layout_matrix.cases("where.self", torch.float32, full=False) == []
    assert layout_matrix.cases("add.Tensor", torch.complex64, full=False) == []


@pytest.mark.parametrize("op", ["add.Tensor", "mul_.Tensor", "mm", "bmm", "_softmax", "sum.dim_IntList", "gelu"])
def test_every_ci_case_is_a_call_pytorch_cpu_accepts(op):
    plan = compile_plan(op)
    for case in layout_matrix.cases(op, torch.float32, full=False):
        values = schema_values(plan, case)
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        assert tensors and all(t.dtype == torch.float32 for t in tensors)
        outputs = cpu_reference(plan, values)
        assert outputs and all(o.numel() > 0 for o in outputs if isinstance(o, torch.Tensor))


@pytest.mark.parametrize("op", ["mm", "bmm"])
def test_matmul_gets_an_empty_inner_dimension_whose_product_is_zeros(op):
    case = layout_matrix.empty_inner_dimension(op, torch.float32)
    plan = compile_plan(op)
    values = schema_values(plan, case)
    assert [t.shape[-1] for t in values[:1]] == [0]
    (out,) = cpu_reference(plan, values)
    assert out.numel() > 0 and not out.any()
    assert layout_matrix.empty_inner_dimension("add.Tensor", torch.float32) is None


def test_copy_gets_a_transposed_source_larger_than_a_tile():
    case = layout_matrix.transposed_copy("copy_", torch.float32)
    plan = compile_plan("copy_")
    target, source = schema_values(plan, case)[:2]
    assert source.shape == target.shape == (19, 21) and source.stride() == (1, 19) and target.is_contiguous()
    (out,) = cpu_reference(plan, schema_values(plan, case))
    assert torch.equal(out, source)
    assert layout_matrix.transposed_copy("add.Tensor", torch.float32) is None
