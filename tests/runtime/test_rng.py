"""Random numbers on fl: torch.manual_seed reaches fl, state save/restore,
per-device independence, reproducible dropout in training."""
import torch


def _draw(device="fl:0"):
    return torch.rand(1000, device=device).cpu()


def test_torch_manual_seed_seeds_every_fl_device(fl):
    torch.manual_seed(1234)
    first = [_draw("fl:0"), _draw("fl:1")]
    torch.manual_seed(1234)
    again = [_draw("fl:0"), _draw("fl:1")]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert torch.fl.initial_seed() == 1234
    torch.manual_seed(1235)
    assert not torch.equal(_draw("fl:0"), first[0])


def test_get_and_set_rng_state_replay_a_sequence(fl):
    torch.fl.manual_seed_all(7)
    _draw()
    state = torch.fl.get_rng_state(0)
    expected = _draw()
    torch.fl.set_rng_state(state, 0)
    assert torch.equal(_draw(), expected)
    states = torch.fl.get_rng_state_all()
    expected_both = [_draw("fl:0"), _draw("fl:1")]
    torch.fl.set_rng_state_all(states)
    assert all(torch.equal(a, b) for a, b in zip([_draw("fl:0"), _draw("fl:1")], expected_both))


def test_restoring_one_device_leaves_the_other_alone(fl):
    torch.fl.manual_seed_all(3)
    state1 = torch.fl.get_rng_state("fl:1")
    _draw("fl:1")
    before = torch.fl.get_rng_state(0)
    torch.fl.set_rng_state(state1, "fl:1")
    assert torch.equal(torch.fl.get_rng_state(0), before)


def test_dropout_in_training_is_reproducible_for_a_seed(fl):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Dropout(0.5), torch.nn.Linear(32, 1))

    def run(seed: int) -> list[float]:
        torch.manual_seed(seed)
        net = model.to("fl:0").train()
        for p, init in zip(net.parameters(), initial):
            p.data.copy_(init)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        x = torch.ones(8, 16, device="fl:0")
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = net(x).pow(2).mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses
    initial = [p.detach().clone().to("fl:0") for p in model.parameters()]
    assert run(11) == run(11)
    assert run(11) != run(12)


def test_dropout_scales_kept_elements_and_backpropagates_through_the_mask(fl):
    torch.manual_seed(5)
    x = torch.randn(2000, device="fl:0", requires_grad=True)
    y = torch.nn.functional.dropout(x, 0.3, training=True)
    y.sum().backward()
    kept = y.detach().cpu() != 0
    assert 0.65 < kept.float().mean().item() < 0.75
    assert torch.allclose(y.detach().cpu()[kept], x.detach().cpu()[kept] / 0.7)
    assert torch.allclose(x.grad.cpu(), kept.float() / 0.7)
    assert torch.equal(torch.nn.functional.dropout(x, 0.3, training=False).detach().cpu(), x.detach().cpu())
    assert torch.equal(torch.nn.functional.dropout(torch.ones(4, device="fl:0"), 1.0).cpu(), torch.zeros(4))
