"""Module.to keeps Parameter objects on fl, as it does on CUDA (integration/parameters.py).

Tied weights (a language model's head shares the embedding matrix, as GPT-2,
BERT and T5 do) must stay one matrix, and an optimizer built before `.to()`
must train the weights that moved.  Each training check runs the same model on
the CPU and compares losses step by step and the final weights.
"""
import copy

import warnings

import pytest
import torch
from torch import nn

torch.manual_seed(0)


class TinyLM(nn.Module):
    """Embedding -> LayerNorm -> head, the head's weight tied to the embedding."""

    def __init__(self, vocab: int = 11, width: int = 6) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.norm = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, tokens):
        return self.lm_head(self.norm(self.wte(tokens)))


def _tokens():
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 11, (3, 5), generator=g)
    return tokens, tokens.roll(-1, dims=1)


def _train(model, opt, device: str, steps: int = 4) -> list[float]:
    tokens, target = (t.to(device) for t in _tokens())
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        logits = model(tokens)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_tied_weights_stay_tied_on_fl(fl):
    model = TinyLM()
    weight = model.wte.weight
    model.to("fl:0")
    assert model.wte.weight is weight and model.lm_head.weight is weight
    assert weight.device == torch.device("fl:0")
    assert len(list(model.parameters())) == 3     # wte/lm_head counted once, norm weight and bias


def test_optimizer_built_before_to_trains_the_fl_weights(fl):
    cpu_model = TinyLM()
    fl_model = copy.deepcopy(cpu_model)
    cpu_losses = _train(cpu_model, torch.optim.Adam(cpu_model.parameters(), lr=0.05), "cpu")
    opt = torch.optim.Adam(fl_model.parameters(), lr=0.05)     # built while the weights are on the CPU
    fl_model.to("fl:0")
    fl_losses = _train(fl_model, opt, "fl:0")
    assert fl_losses == pytest.approx(cpu_losses, rel=1e-5, abs=1e-6)
    for (name, p_cpu), p_fl in zip(cpu_model.named_parameters(), fl_model.parameters()):
        assert p_fl.device.type == "fl", name
        torch.testing.assert_close(p_fl.cpu(), p_cpu, rtol=1e-5, atol=1e-6, msg=name)
    assert fl_model.lm_head.weight is fl_model.wte.weight


def test_optimizer_state_and_grads_move_with_the_parameters(fl):
    model = TinyLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _train(model, opt, "cpu", steps=1)                 # grads and momentum exist on the CPU
    weight = model.wte.weight
    model.to("fl:0")
    assert weight.grad is not None and weight.grad.device.type == "fl"
    assert opt.param_groups[0]["params"][0] is weight


def test_dtype_change_on_fl_keeps_identity(fl):
    model = TinyLM().to("fl:0")
    weight, bias = model.wte.weight, model.norm.bias
    model.to(torch.float64)
    assert model.wte.weight is weight and model.lm_head.weight is weight and model.norm.bias is bias
    assert weight.dtype == torch.float64 and weight.device.type == "fl"
    model.float()
    assert model.wte.weight is weight and weight.dtype == torch.float32


def test_back_to_cpu_and_between_devices_keeps_identity(fl):
    model = TinyLM()
    reference = copy.deepcopy(model)
    weight = model.wte.weight
    model.fl(1)
    assert weight.device == torch.device("fl:1") and model.lm_head.weight is weight
    model.to("fl:0")
    assert weight.device == torch.device("fl:0")
    model.cpu()
    assert model.lm_head.weight is weight and weight.device.type == "cpu"
    torch.testing.assert_close(weight, reference.wte.weight, rtol=0, atol=0)


def test_state_dict_round_trip(fl):
    source = TinyLM()
    with torch.no_grad():
        source.norm.weight.uniform_()
    target = TinyLM().to("fl:0")
    weight = target.wte.weight
    target.load_state_dict(source.state_dict())          # CPU state into an fl model
    assert target.wte.weight is weight and target.lm_head.weight is weight
    assert weight.device.type == "fl"
    for key, value in target.state_dict().items():       # fl state back into a CPU model
        torch.testing.assert_close(value.cpu(), source.state_dict()[key], rtol=0, atol=0, msg=key)
    back = TinyLM()
    back.load_state_dict(target.state_dict())
    assert back.lm_head.weight is back.wte.weight
    torch.testing.assert_close(back.norm.weight, source.norm.weight, rtol=0, atol=0)


def test_cpu_only_conversions_are_unchanged(fl):
    # PyTorch's own behaviour on the CPU: `.data =` keeps objects; with the overwrite
    # switch on, conversions build new Parameters.  Neither may change with Torch-FL.
    assert torch.__future__.get_swap_module_params_on_conversion() is False
    model = TinyLM()
    weight = model.wte.weight
    view = weight[0]      # a live view makes swap_tensors refuse: `.data =` must be the path taken
    model.to(torch.float64)
    assert model.wte.weight is weight and weight.dtype == torch.float64
    assert view.dtype == torch.float32
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        model = TinyLM()
        weight = model.wte.weight
        model.to(torch.float64)
        assert model.wte.weight is not weight
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(False)


def test_user_swap_switch_is_still_honoured(fl):
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        assert torch.__future__.get_swap_module_params_on_conversion() is True
        model = TinyLM()
        weight = model.wte.weight
        model.to(torch.float64)
        assert model.wte.weight is weight
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)
    assert torch.__future__.get_swap_module_params_on_conversion() is False


def test_after_backward_identity_is_kept(fl):
    model = TinyLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train(model, opt, "cpu", steps=1)         # AccumulateGrad nodes exist now
    weight = model.wte.weight
    model.to("fl:0")
    assert model.wte.weight is weight and weight.device.type == "fl"


def test_a_parameter_held_by_a_live_graph_moves_and_keeps_its_identity(fl):
    # fl tensors now have CPU's shallow-copy type (ops/owned/factories.py, as OpenReg), so
    # Module._apply sets .data as it does for CUDA: a graph holding the weight does not stop the
    # move, and no new Parameter object is made (optimizers built before .to() keep theirs).
    model = nn.Linear(3, 2)
    alive = model(torch.ones(1, 3, requires_grad=True)).sum()     # the graph saves the weight
    weight = model.weight
    expected = model.weight.detach().clone()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.to("fl:0")
    assert model.weight is weight and model.weight.device.type == "fl"
    torch.testing.assert_close(model.weight.cpu(), expected, rtol=0, atol=0)
    del alive


def test_meta_init_then_to_empty_on_fl_keeps_ties(fl):
    # The large-model recipe: build on meta, materialise on the device, load weights.
    with torch.device("meta"):
        model = TinyLM()
    weight = model.wte.weight
    model.to_empty(device="fl:0")
    assert model.wte.weight is weight and model.lm_head.weight is weight and weight.device.type == "fl"
    source = TinyLM()
    model.load_state_dict(source.state_dict())
    tokens, _ = _tokens()
    torch.testing.assert_close(model(tokens.to("fl:0")).cpu(), source(tokens), rtol=1e-5, atol=1e-5)


def test_cpu_only_apply_calls_fn_as_pytorch_does(fl, monkeypatch):
    # Same calls, same order, same results as PyTorch's own Module._apply.
    from fl_runtime.integration import parameters
    original_apply = parameters._installed[0][0]

    def run(apply):
        torch.manual_seed(0)
        model = nn.Sequential(TinyLM(), nn.Linear(11, 2), nn.MultiheadAttention(4, 2))   # own params + a child
        model[0].wte.weight.grad = torch.ones_like(model[0].wte.weight)
        seen = []

        def fn(t):
            seen.append((tuple(t.shape), t.dtype))
            return t.double()
        apply(model, fn)
        return seen, [(type(p), p.dtype) for p in model.parameters()], model[0].wte.weight.grad.dtype

    with_torch_fl = run(lambda m, fn: m._apply(fn))
    monkeypatch.setattr(nn.Module, "_apply", original_apply)      # PyTorch's, all the way down
    assert with_torch_fl == run(lambda m, fn: m._apply(fn))


class TinyGPT(nn.Module):
    """GPT-2's shape in miniature: token + position embeddings, a causal block, a head tied
    to the token embedding."""

    def __init__(self, vocab: int = 13, width: int = 8, context: int = 6) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.block = nn.TransformerEncoderLayer(width, 2, 16, dropout=0.0, batch_first=True, norm_first=True)
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, tokens):
        n = tokens.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(n, device=tokens.device)
        x = self.wte(tokens) + self.wpe(torch.arange(n, device=tokens.device))
        return self.lm_head(self.ln_f(self.block(x, src_mask=mask, is_causal=True)))


def test_tiny_gpt_trains_like_the_cpu_with_an_optimizer_built_first(fl):
    torch.manual_seed(3)
    cpu_model = TinyGPT()
    fl_model = copy.deepcopy(cpu_model)
    g = torch.Generator().manual_seed(4)
    tokens = torch.randint(0, 13, (2, 6), generator=g)

    def train(model, opt, device):
        x, y = tokens[:, :-1].to(device), tokens[:, 1:].to(device)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x).reshape(-1, 13), y.reshape(-1))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    want = train(cpu_model, torch.optim.AdamW(cpu_model.parameters(), lr=0.01), "cpu")
    opt = torch.optim.AdamW(fl_model.parameters(), lr=0.01)
    fl_model.to("fl:0")
    got = train(fl_model, opt, "fl:0")
    assert fl_model.lm_head.weight is fl_model.wte.weight
    assert got == pytest.approx(want, rel=1e-4, abs=1e-5)
    torch.testing.assert_close(fl_model.wte.weight.cpu(), cpu_model.wte.weight, rtol=1e-4, atol=1e-5)
