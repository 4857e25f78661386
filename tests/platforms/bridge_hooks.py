"""The hooks only the native bridge serves, as a user's script calls them (tests/platforms/README.md):
run by the platform checks in a fresh system after `pip install`, with no step in between."""
import torch

import torch_fl  # noqa: F401  (the explicit ask; autoload has started the runtime already)

g = torch.Generator(device="fl:0")
g.manual_seed(7)
first = torch.randn(64, device="fl:0", generator=g).cpu()
g.manual_seed(7)
assert torch.equal(first, torch.randn(64, device="fl:0", generator=g).cpu()), "a reseeded generator repeats"
print("generator: reseeded fl:0 generator repeats its draws; state", g.get_state()[:8].tolist())

pinned = torch.empty(1 << 20, pin_memory=True)
assert pinned.is_pinned(), "torch.empty(pin_memory=True) is pinned"
pinned.fill_(3)
on_device = pinned.to("fl:0", non_blocking=True)
torch.fl.synchronize()
assert float(on_device.sum()) == 3 * (1 << 20)
assert torch.arange(8.).pin_memory().is_pinned()
print("pinned memory: empty(pin_memory=True), pin_memory() and a non_blocking upload")

storage = torch.arange(16., device="fl:0").untyped_storage()
storage.resize_(0)
storage.resize_(64)
assert storage.nbytes() == 64
print("storage resize: 64 bytes -> 0 -> 64 in place")

assert torch.accelerator.current_accelerator().type == "fl"
print("torch.accelerator:", torch.accelerator.current_accelerator(), torch.accelerator.device_count(), "devices")
