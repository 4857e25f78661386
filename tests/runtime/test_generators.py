"""Explicit generators with random ops on fl (docs/users/native-bridge.md).

With the native bridge `torch.Generator(device="fl:N")` is a device generator: a (seed, offset)
pair random kernels draw from at counter offset + i, the same kind as each device's default
generator, so a generator seeded s draws what the default generator draws after
torch.fl.manual_seed(s).  A random op without a vendor kernel runs on the CPU with a CPU
generator seeded from counters the fl generator reserves (the device's default one when none
is passed, on both routes): reproducible, it advances, and the CPU's own stream is untouched.
diffusers hands every pipeline a list of such generators, one per sample.

An explicit CPU generator passed to a random op on fl is honoured on both routes: the op runs
on the CPU fallback with it, so its values equal the CPU's for the same seed and the generator
advances as on the CPU.  On the Python route PyTorch cannot make an fl generator at all.
"""
import json
import threading

import pytest
import torch

from fl_runtime.errors import UnsupportedOpError
from conftest import PYTHON_ROUTE


# torch.Generator(device="fl") needs the native bridge: on the Python route it raises
# NativeBridgeOffError (docs/users/native-bridge.md, docs/users/limits.md), which
# test_fl_generator_cannot_be_created_on_the_python_route checks.
_needs_fl_generators = pytest.mark.skipif(
    "not __import__('fl_runtime.bridge', fromlist=['x']).status().active",
    reason="the Python route: torch.Generator(device='fl') raises NativeBridgeOffError (docs/users/native-bridge.md)")


def _pair(seed: int = 5):
    return torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("draw", [
    lambda g, d: torch.randn(4, 3, generator=g, device=d),
    lambda g, d: torch.rand(5, generator=g, device=d),
    lambda g, d: torch.randint(0, 10, (6,), generator=g, device=d),
    lambda g, d: torch.randperm(7, generator=g, device=d),
    lambda g, d: torch.empty(5, device=d).uniform_(-1, 1, generator=g),
    lambda g, d: torch.empty(5, device=d).normal_(2.0, 0.5, generator=g),
    lambda g, d: torch.empty(8, device=d).bernoulli_(0.3, generator=g),
    lambda g, d: torch.multinomial(torch.tensor([0.1, 0.2, 0.7], device=d), 5, True, generator=g),
])
def test_explicit_cpu_generator_gives_the_cpu_values(fl, draw):
    g_cpu, g_fl = _pair()
    want = [draw(g_cpu, "cpu") for _ in range(2)]        # twice: the generator must advance
    got = [draw(g_fl, "fl:0") for _ in range(2)]
    for g, w in zip(got, want):
        assert g.device == torch.device("fl:0")
        torch.testing.assert_close(g.cpu(), w, rtol=0, atol=0)
    assert g_fl.get_state().equal(g_cpu.get_state())


def test_fl_generator_cannot_be_created_on_the_python_route(python):
    """Without the native bridge PyTorch can make no fl generator (docs/users/native-bridge.md):
    our error, naming why the bridge is off and the fix, not PyTorch's internal one."""
    result = python("""
        import torch, torch_fl
        from fl_runtime.errors import NativeBridgeOffError
        try:
            torch.Generator(device="fl:1")
        except NativeBridgeOffError as exc:
            print("refused:", "TORCH_FL_BRIDGE=0" in str(exc) and "PrivateUse1Hooks" not in str(exc))
    """, env=PYTHON_ROUTE)
    assert result.returncode == 0 and "refused: True" in result.stdout, result.stderr


def test_strict_mode_refuses_the_explicit_generator(fl, monkeypatch):
    monkeypatch.setenv("TORCH_FL_STRICT", "1")
    with pytest.raises(UnsupportedOpError, match="explicit cpu torch.Generator"):
        torch.empty(3, device="fl").uniform_(generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("shape", [(5,), (2, 3)])
def test_explicit_generator_after_a_generator_less_call_of_the_same_signature(fl, shape):
    # The first call records a launch template for the signature; the second must not
    # replay it (that would draw from the device's stream and ignore the seed).
    x = torch.empty(shape, device="fl:0")
    x.uniform_()
    x.uniform_(generator=torch.Generator().manual_seed(11))
    want = torch.empty(shape).uniform_(generator=torch.Generator().manual_seed(11))
    torch.testing.assert_close(x.cpu(), want, rtol=0, atol=0)
    x.uniform_()          # and the device stream still serves calls without a generator
    assert not torch.equal(x.cpu(), want)


# Random ops that run on the reference vendor's kernels (they draw at offset + i) ...
ON_KERNELS = {
    "randn": lambda g, d: torch.randn(4, 3, generator=g, device=d),
    "rand": lambda g, d: torch.rand(5, generator=g, device=d),
    "uniform_": lambda g, d: torch.empty(5, device=d).uniform_(-1, 1, generator=g),
    "normal_": lambda g, d: torch.empty(5, device=d).normal_(2.0, 0.5, generator=g),
    "bernoulli_": lambda g, d: torch.empty(64, device=d).bernoulli_(0.3, generator=g),
}
# ... and ones it has no kernel for, which the CPU fallback runs with a stand-in CPU generator.
ON_THE_CPU = {
    "randint": lambda g, d: torch.randint(0, 10, (6,), generator=g, device=d),
    "randperm": lambda g, d: torch.randperm(7, generator=g, device=d),
    "multinomial": lambda g, d: torch.multinomial(torch.tensor([0.1, 0.2, 0.7], device=d), 32, True, generator=g),
    "exponential_": lambda g, d: torch.empty(5, device=d).exponential_(generator=g),
    "normal(Tensor)": lambda g, d: torch.normal(torch.zeros(5, device=d), 1.0, generator=g),
}


def _fl_generator(seed: int, device: str = "fl:0") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


@_needs_fl_generators
@pytest.mark.parametrize("name", [*ON_KERNELS, *ON_THE_CPU])
@pytest.mark.parametrize("device", ["fl:0", "fl:1"])
def test_fl_generator_draws_are_reproducible_and_advance(fl, name, device):
    draw = {**ON_KERNELS, **ON_THE_CPU}[name]
    first, second = _fl_generator(11, device), _fl_generator(11, device)
    a = [draw(first, device).cpu() for _ in range(3)]
    b = [draw(second, device).cpu() for _ in range(3)]
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert first.get_offset() == second.get_offset() > 0
    assert not torch.equal(a[0], a[1])                              # the generator advanced
    other_seed = draw(_fl_generator(12, device), device)
    assert other_seed.device == torch.device(device) and not torch.equal(other_seed.cpu(), a[0])


@_needs_fl_generators
@pytest.mark.parametrize("name", ON_KERNELS)
def test_an_fl_generator_draws_what_the_default_generator_draws_for_its_seed(fl, name):
    draw = ON_KERNELS[name]
    explicit = _fl_generator(21, "fl:1")
    torch.fl.manual_seed_all(21)
    for _ in range(2):
        assert torch.equal(draw(explicit, "fl:1").cpu(), draw(None, "fl:1").cpu())
    assert torch.equal(explicit.get_state(), torch.fl.get_rng_state(1))


@_needs_fl_generators
def test_get_state_and_set_state_replay_a_sequence(fl):
    generator = _fl_generator(5, "fl:1")
    torch.randn(10, generator=generator, device="fl:1")
    state = generator.get_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    expected = [torch.randn(7, generator=generator, device="fl:1").cpu(),
                torch.randint(0, 100, (5,), generator=generator, device="fl:1").cpu()]
    generator.set_state(state)
    again = [torch.randn(7, generator=generator, device="fl:1").cpu(),
             torch.randint(0, 100, (5,), generator=generator, device="fl:1").cpu()]
    assert all(torch.equal(x, y) for x, y in zip(expected, again))
    other = torch.Generator(device="fl:1")
    other.set_state(state)                     # the state moves to another generator
    assert torch.equal(torch.randn(7, generator=other, device="fl:1").cpu(), expected[0])
    with pytest.raises(RuntimeError, match="16 bytes"):
        other.set_state(torch.zeros(8, dtype=torch.uint8))


@_needs_fl_generators
def test_an_fl_generator_after_a_generator_less_call_of_the_same_signature(fl):
    """The generator-less call records a launch template; the next call must draw from the
    explicit generator, not replay the device default's stream."""
    x = torch.empty(6, device="fl:0")
    x.uniform_()
    x.uniform_(generator=_fl_generator(3))
    assert torch.equal(x.cpu(), torch.empty(6, device="fl:0").uniform_(generator=_fl_generator(3)).cpu())


def _default_draws(name: str, device: str, cpu_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two draws after torch.manual_seed(cpu_seed) then torch.fl.manual_seed_all(21) (the latter
    overrides what the former gave fl); also checks the CPU's generator was left alone."""
    torch.manual_seed(cpu_seed)
    torch.fl.manual_seed_all(21)
    cpu_state = torch.get_rng_state()
    draws = tuple(ON_THE_CPU[name](None, device).cpu() for _ in range(2))
    assert torch.equal(torch.get_rng_state(), cpu_state), f"{name} on {device} drew from the CPU's generator"
    return draws


@pytest.mark.parametrize("name", ON_THE_CPU)
@pytest.mark.parametrize("device", ["fl:0", "fl:1"])
def test_a_random_op_without_a_kernel_draws_from_the_device_generator(fl, name, device):
    """As with a CUDA device: torch.fl.manual_seed(_all) governs every random op on fl, also one the
    CPU fallback runs, whatever the CPU's generator was seeded with, and leaves the CPU's stream
    to the CPU's own code (a DataLoader's shuffle)."""
    first = _default_draws(name, device, cpu_seed=0)
    again = _default_draws(name, device, cpu_seed=99)
    assert all(torch.equal(x, y) for x, y in zip(first, again))
    assert not torch.equal(first[0], first[1])                     # the device's stream advanced


@pytest.mark.parametrize("name", ON_THE_CPU)
def test_set_rng_state_replays_a_random_op_without_a_kernel(fl, name):
    """Resuming from a checkpoint that saved torch.fl.get_rng_state() draws the same values."""
    torch.fl.manual_seed(3)
    ON_THE_CPU[name](None, "fl:1")
    state = torch.fl.get_rng_state(1)
    expected = ON_THE_CPU[name](None, "fl:1").cpu()
    torch.manual_seed(1234)                                       # the CPU's stream moves on meanwhile
    torch.fl.set_rng_state(state, 1)
    assert torch.equal(ON_THE_CPU[name](None, "fl:1").cpu(), expected)


def test_a_random_op_without_a_kernel_draws_from_the_device_generator_on_the_python_route(python):
    result = python("""
        import warnings
        import torch, torch_fl
        warnings.simplefilter("ignore")
        draws = []
        for cpu_seed in (0, 99):
            torch.manual_seed(cpu_seed)
            torch.fl.manual_seed_all(21)
            cpu_state = torch.get_rng_state()
            draws.append(torch.randperm(50, device="fl:1").cpu())
            assert torch.equal(torch.get_rng_state(), cpu_state)
        state = torch.fl.get_rng_state(1)
        expected = torch.randint(0, 1000, (20,), device="fl:1").cpu()
        torch.fl.set_rng_state(state, 1)
        print("governed:", torch.equal(*draws), "replayed:",
              torch.equal(torch.randint(0, 1000, (20,), device="fl:1").cpu(), expected))
    """, env=PYTHON_ROUTE)
    assert result.returncode == 0 and "governed: True replayed: True" in result.stdout, result.stderr


@_needs_fl_generators
def test_two_threads_drawing_from_one_generator_never_draw_the_same_counters(fl):
    """Each draw reserves its counters under the generator's lock: the blocks two threads get
    are exactly the blocks one thread drawing them all in turn gets, none twice."""
    shared, draws = _fl_generator(99), 40
    got: list[list[float]] = []
    barrier = threading.Barrier(2)

    def worker() -> None:
        barrier.wait()
        mine = [torch.randn(8, generator=shared, device="fl:0").cpu().tolist() for _ in range(draws)]
        got.extend(mine)
    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    alone = _fl_generator(99)
    serial = [torch.randn(8, generator=alone, device="fl:0").cpu().tolist() for _ in range(2 * draws)]
    assert sorted(got) == sorted(serial)
    assert len({tuple(block) for block in got}) == 2 * draws
    assert shared.get_offset() == alone.get_offset() == 2 * draws * 8


DIFFUSERS_PIPELINE = """
    import json, torch, torch_fl
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel
    from diffusers.utils.torch_utils import randn_tensor

    def generators(*seeds):
        return [torch.Generator(device="fl:0").manual_seed(s) for s in seeds]

    device = torch.device("fl:0")
    noise = randn_tensor((3, 2, 4, 4), generator=generators(1, 2, 3), device=device)
    alone = [randn_tensor((1, 2, 4, 4), generator=generators(s), device=device) for s in (1, 2, 3)]
    torch.fl.manual_seed(2)
    default = randn_tensor((1, 2, 4, 4), device=device)

    torch.manual_seed(0)
    unet = UNet2DModel(sample_size=8, in_channels=1, out_channels=1, block_out_channels=(8, 8),
                       layers_per_block=1, down_block_types=("DownBlock2D", "DownBlock2D"),
                       up_block_types=("UpBlock2D", "UpBlock2D"), norm_num_groups=4)
    pipe = DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=20)).to(device)
    pipe.set_progress_bar_config(disable=True)
    def run(batch, gens):           # images come back as numpy arrays on the host
        return torch.from_numpy(pipe(batch_size=batch, generator=gens, num_inference_steps=3,
                                     output_type="np").images)
    batch = run(2, generators(1, 2))
    print(json.dumps({
        "noise_device": str(noise.device),
        "per_sample": [torch.equal(noise[i:i + 1].cpu(), alone[i].cpu()) for i in range(3)],
        "default_is_explicit": torch.equal(default.cpu(), alone[1].cpu()),
        "samples_differ": not torch.equal(noise[0].cpu(), noise[1].cpu()),
        "rerun_equal": torch.equal(batch, run(2, generators(1, 2))),
        "batch_of_one_gap": float((batch[1:] - run(1, generators(2))).abs().max()),
        "other_seed_gap": float((batch - run(2, generators(1, 5))).abs().max()),
        "finite": bool(torch.isfinite(batch).all()),
    }))
"""


@_needs_fl_generators
def test_diffusers_pipeline_with_per_sample_fl_generators(python):
    """diffusers' randn_tensor and a DDPM pipeline (tiny UNet, random weights) with a list of
    fl generators, as every diffusers pipeline takes them: each sample's noise is its own
    generator's (the same in a batch or alone), the default generator seeded the same draws the
    same, and a rerun with the same seeds gives the same images."""
    result = python(DIFFUSERS_PIPELINE, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["noise_device"] == "fl:0" and report["per_sample"] == [True, True, True]
    assert report["default_is_explicit"] and report["samples_differ"] and report["rerun_equal"]
    assert report["finite"]
    assert report["batch_of_one_gap"] < 1e-5          # the UNet's batch-size rounding, as on the CPU
    assert report["other_seed_gap"] > 1e-2            # the second sample's seed changed its image
