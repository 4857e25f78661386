"""torch.compile(model, mode="reduce-overhead") on fl: Inductor's graphs, captured and replayed
(docs/users/graph-capture.md).

Inductor wraps a CUDA graph's code in its cudagraph trees, which are CUDA's alone (they
refuse any other device: "skipping cudagraphs due to multiple devices").  For an fl graph,
`ReplayedGraph` takes their place, as Inductor's plain `cudagraphify_impl` does for CUDA:
- the first call runs Inductor's code eagerly (a warm-up: the runtime builds its
  per-signature programs);
- the second captures it with torch.accelerator.Graph (ops/graph/graph_capture.py) on a side
  stream, reading its inputs from static copies, then replays it;
- each later call copies the inputs into those copies and replays: one C loop over the
  vendor launches, no dispatcher, no Python per op.
Inputs Inductor calls static (parameters, buffers) are read where they are; if one of them
moves (a new tensor), it is copied like the others from then on and the graph is captured
again, once.  Inputs the graph mutates are copied back
after the replay.  The outputs live in the graph's memory pool and the next replay
overwrites them, so each call returns copies: a result the user keeps is never changed
behind their back (cudagraph trees check this instead; a copy is simpler and always right).
A graph whose capture fails (a CPU fallback, a host copy, a random op: FLGraphCaptureError)
runs eagerly from then on; the reason is logged and kept in `why_eager`.  So does every graph
on the Python route (no native bridge: no torch.accelerator.Graph on fl).

Installed per compile: inductor_backend.py's pass, which runs on fl graphs, sets Inductor's
`cudagraph_policy` to `FLGraphPolicy` when reduce-overhead asked for graphs; its
`wrap_output` wraps the compiled graph and gives the setting back.
"""
from __future__ import annotations

import weakref

import torch
from torch._inductor.cudagraph_utils import CUDAGraphPolicy

from fl_runtime import bridge
from fl_runtime.devices.registry import DEVICE_TYPE
from fl_runtime.errors import FLGraphCaptureError
from fl_runtime.logs import logger

_runners: weakref.WeakSet = weakref.WeakSet()


class ReplayedGraph:
    """A boxed callable (Inductor's convention: it takes the input list and empties it)
    replaying `model` on fl (module docstring)."""

    def __init__(self, model, static_input_idxs, mutated_input_idxs) -> None:
        self.model = model
        self.static_idxs = set(static_input_idxs)
        self.mutated_idxs = tuple(mutated_input_idxs)
        self.calls = 0
        self.captures = 0
        self.replays = 0
        self.why_eager: str | None = None
        self._graph = None
        self._static_inputs: list = []
        self._static_ptrs: dict = {}
        self._outputs = None
        _runners.add(self)

    def __call__(self, inputs: list):
        self.calls += 1
        if self.why_eager is not None or self.calls == 1:
            return self.model(inputs)
        if self._graph is None or self._static_moved(inputs):
            return self._capture(inputs)
        return self._replay(inputs)

    def _static_moved(self, inputs: list) -> bool:
        """Whether a static input is a new tensor: it is copied like the others from then on
        (Inductor calls a backward graph's saved activations static; here they are new per step)."""
        moved = {i for i, ptr in self._static_ptrs.items() if inputs[i].data_ptr() != ptr}
        self.static_idxs -= moved
        return bool(moved)

    def _capture(self, inputs: list):
        state = bridge.status()
        if not state.active:      # graphs on fl are the bridge's (docs/users/native-bridge.md)
            return self._run_eagerly(inputs, f"graph capture needs the native bridge, which is {state.detail}")
        tensors = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
        self._static_ptrs = {i: inputs[i].data_ptr() for i in tensors if i in self.static_idxs}
        self._static_inputs = [x if not isinstance(x, torch.Tensor) or i in self.static_idxs
                               else torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
                               for i, x in enumerate(inputs)]
        graph = torch.accelerator.Graph()
        side = torch.Stream(device=inputs[tensors[0]].device if tensors else DEVICE_TYPE)
        torch.accelerator.synchronize()
        try:
            with side, graph:
                outputs = self.model(list(self._static_inputs))
        except FLGraphCaptureError as exc:
            return self._run_eagerly(inputs, str(exc))
        self._graph, self._outputs = graph, outputs
        self.captures += 1
        return self._replay(inputs)

    def _run_eagerly(self, inputs: list, why: str):
        self.why_eager = why
        self._graph = self._outputs = None
        logger.info("torch_fl: a reduce-overhead graph runs eagerly: %s", why)
        return self.model(inputs)

    def _replay(self, inputs: list):
        static = self._static_inputs
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor) and i not in self.static_idxs:
                static[i].copy_(x)
        self._graph.replay()
        self.replays += 1
        for i in self.mutated_idxs:
            if i not in self.static_idxs:
                inputs[i].copy_(static[i])
        inputs.clear()
        return _copied(self._outputs)


def _copied(outputs):
    if isinstance(outputs, (list, tuple)):
        return type(outputs)(_copied(x) for x in outputs)
    return outputs.clone() if isinstance(outputs, torch.Tensor) else outputs


def runners() -> list[dict]:
    """What each reduce-overhead graph on fl did: calls, captures, replays, why it runs eagerly."""
    return [{"calls": r.calls, "captures": r.captures, "replays": r.replays, "why_eager": r.why_eager}
            for r in list(_runners)]


def is_fl_graph(output_code) -> bool:
    return set(getattr(output_code, "device_types", ())) == {DEVICE_TYPE}


class FLGraphPolicy(CUDAGraphPolicy):
    """Inductor's cudagraph policy while an fl graph compiles under reduce-overhead: the
    graph is not given to cudagraph trees (`should_wrap`); `wrap_output` replays it on fl."""

    def __init__(self, restore) -> None:
        self._restore = restore

    def should_wrap(self, compiled_graph) -> bool:
        return not is_fl_graph(compiled_graph)

    def wrap_output(self, output_code):
        self._restore()
        callable_ = getattr(output_code, "current_callable", None)
        if callable_ is not None and is_fl_graph(output_code):
            static = output_code.fx_kwargs.get("static_input_idxs") or ()
            output_code.current_callable = ReplayedGraph(callable_, static,
                                                         getattr(output_code, "mutated_input_idxs", ()))
        return output_code
