"""Arguments that share memory (fl_abi.h, "ARGUMENTS THAT SHARE MEMORY") through PyTorch.

The runtime hands a vendor kernel calls whose output overlaps an input, as users write
them: `x.copy_(x.t())`, `a[1:].copy_(a[:-1])`, an in-place op whose other input is a view
of its output, `out=` overlapping an input, index_put_/index_add_ with values taken from
the tensor they write.  PyTorch's CPU refuses most of these; on fl the kernel must answer
as if it read its inputs first, which is PyTorch's CPU result for the same call with the
input cloned.  In a fresh process, every call runs natively on the reference vendor and
equals that result.  (The conformance suite's overlap cases, conformance/overlap.py,
check every vendor's kernels the same way with drawn layouts.)
"""
from __future__ import annotations

SCRIPT = r"""
import torch, torch_fl

def calls(c):     # c(t) is t on fl as is, and a clone of t on the CPU reference
    return {
        "copy_ from its transpose": lambda x: x.copy_(c(x.t())),
        "copy_ one element on": lambda x: x.view(-1)[1:].copy_(c(x.view(-1)[:-1])),
        "copy_ one element back": lambda x: x.view(-1)[:-1].copy_(c(x.view(-1)[1:])),
        "copy_ of another dtype's bytes": lambda x: x.view(-1)[2:10].copy_(c(x.view(-1)[:8].view(torch.int32))),
        "add_ of a shifted view": lambda x: x.view(-1)[1:].add_(c(x.view(-1)[:-1])),
        "mul_ by its transpose": lambda x: x.mul_(c(x.t())),
        "addcmul_ with its rows": lambda x: x.addcmul_(c(x[0]), c(x[:, :1]), value=0.5),
        "where out= over its inputs": lambda x: torch.where(x[1:] > 0, c(x[1:]), c(x[:-1]), out=x[:-1]),
        "index_add_ of its own rows": lambda x: x.index_add_(0, torch.tensor([2, 0, 2], device=x.device), c(x[1:4])),
        "index_put_ of its own columns": lambda x: x.index_put_((torch.tensor([0, 3], device=x.device),), c(x[1:3]),
                                                               accumulate=True),
        "sum out= into its first row": lambda x: torch.sum(c(x), 0, out=x[0]),
    }

base = torch.randn(6, 6)
with torch_fl.profile() as prof:
    for name, call in calls(lambda t: t).items():
        on_fl = base.to("fl:0")
        call(on_fl)
        want = base.clone()
        calls(lambda t: t.clone())[name](want)
        torch.testing.assert_close(on_fl.cpu(), want, rtol=1e-6, atol=1e-6, msg=name)
paths = prof.paths()
ran = {op: how for op, how in paths.items() if op in ("aten::copy_", "aten::add_", "aten::mul_", "aten::addcmul_",
                                                       "aten::where", "aten::index_add_", "aten::_index_put_impl_",
                                                       "aten::sum")}
assert all(how == {"native"} for how in ran.values()), paths
print("OK")
"""


def test_calls_whose_output_overlaps_an_input_equal_the_clone_first_result(python):
    result = python(SCRIPT)
    assert result.returncode == 0 and result.stdout.strip().endswith("OK"), result.stderr[-4000:]
