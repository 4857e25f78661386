"""views, in-place ops and aliasing behave exactly as on the CPU."""
import torch


def both(fn):
    """Run fn on a CPU tensor and on its fl:0 copy; return (cpu result, fl result on CPU)."""
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    cpu_out = fn(base.clone())
    fl_out = fn(base.to("fl:0"))
    return cpu_out, fl_out.cpu() if isinstance(fl_out, torch.Tensor) else fl_out


def test_view_metadata_matches_cpu(fl):
    x = torch.zeros(4, 6, device="fl:0")
    for view in (x.t(), x[1:, 2:], x[:, ::2], x.view(2, 12), x.unsqueeze(0).expand(3, 4, 6), x.permute(1, 0),
                 x.narrow(1, 1, 3), x.flatten(), x.unfold(1, 2, 2)):
        assert view.device == x.device
        assert view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    cpu = torch.zeros(4, 6)
    assert x[1:, 2:].stride() == cpu[1:, 2:].stride() and x[1:, 2:].storage_offset() == 8
    assert x.t().is_contiguous() is False


def test_writes_through_views_are_seen_by_the_base(fl):
    def fn(x):
        x[1:3, 2:5].mul_(10)
        x.t()[0].add_(1)
        x.view(-1)[5] = 7
        return x
    cpu, ours = both(fn)
    assert torch.equal(cpu, ours)


def test_inplace_ops_return_self_and_keep_identity(fl):
    x = torch.ones(5, device="fl:0")
    y = x.add_(2)
    assert y is x and x.cpu().tolist() == [3.0] * 5
    assert x.mul_(2).data_ptr() == x.data_ptr()


def test_ops_on_non_contiguous_inputs(fl):
    cpu, ours = both(lambda x: (x.t() * 2 + x.t()[:, :1]).sum(0))
    assert torch.allclose(cpu, ours)


def test_contiguous_of_a_transposed_view(fl):
    cpu, ours = both(lambda x: x.t().contiguous())
    assert torch.equal(cpu, ours)


def test_reshape_of_non_contiguous_copies(fl):
    cpu, ours = both(lambda x: x.t().reshape(24))
    assert torch.equal(cpu, ours)
