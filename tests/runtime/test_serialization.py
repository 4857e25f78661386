"""torch.save / torch.load of fl tensors, modules and optimizer state (docs/users/devices.md)."""
import io

import pytest
import torch


def _round_trip(obj, **load_kwargs):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)


@pytest.fixture(scope="module")
def checkpoint(fl):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("fl:1")
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(3, 4, device="fl:1")).sum().backward()
    opt.step()
    return {"model": model.state_dict(), "optim": opt.state_dict(),
            "t": torch.arange(10.0, device="fl:0")[2:7], "step": 1}


def _cpu_tensors(obj):
    if isinstance(obj, torch.Tensor):
        return [obj.cpu()]
    if isinstance(obj, dict):
        return [t for key in sorted(obj, key=str) for t in _cpu_tensors(obj[key])]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in _cpu_tensors(item)]
    return []


def _devices(obj):
    return {t.device for t in _flat(obj)}


def _flat(obj):
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _flat(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _flat(v)]
    return []


@pytest.mark.parametrize("map_location, expected", [
    (None, None),
    ("cpu", {torch.device("cpu")}),
    ("fl:1", {torch.device("fl", 1)}),
    (torch.device("fl", 0), {torch.device("fl", 0)}),
    ({"fl:1": "fl:0", "fl:0": "cpu"}, {torch.device("fl", 0), torch.device("cpu")}),
    (lambda storage, location: storage, {torch.device("cpu")}),
    (lambda storage, location: storage.to(device="fl:0"), {torch.device("fl", 0)}),
    (lambda storage, location: storage.fl(1), {torch.device("fl", 1)}),
])
@pytest.mark.parametrize("weights_only", [True, False])
def test_round_trip_is_exact_for_every_map_location(checkpoint, map_location, expected, weights_only):
    loaded = _round_trip(checkpoint, map_location=map_location, weights_only=weights_only)
    assert _devices(loaded) == (expected or _devices(checkpoint))
    original, restored = _cpu_tensors(checkpoint), _cpu_tensors(loaded)
    assert len(original) == len(restored)
    assert all(torch.equal(a, b) for a, b in zip(original, restored))
    t = loaded["t"]
    assert t.shape == (5,) and t.storage_offset() == 2      # views keep their storage layout


def test_whole_module_and_loading_into_a_fresh_model(checkpoint):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("fl:1")
    model.load_state_dict(_round_trip(checkpoint["model"], weights_only=True))
    whole = _round_trip(model, weights_only=False)
    x = torch.randn(2, 4)
    assert torch.equal(whole(x.to("fl:1")).cpu(), model(x.to("fl:1")).cpu())
    opt = torch.optim.Adam(model.parameters())
    opt.load_state_dict(_round_trip(checkpoint["optim"], map_location="fl:1"))
    assert opt.state_dict()["state"][0]["exp_avg"].device == torch.device("fl", 1)


def test_missing_device_is_an_error_not_a_crash(checkpoint, fl):
    with pytest.raises(fl.DeviceNotFoundError, match="fl:5 does not exist"):
        _round_trip(checkpoint["t"], map_location="fl:5")
    with pytest.raises(fl.DeviceNotFoundError):
        torch.UntypedStorage(4).to(device="fl:5")
