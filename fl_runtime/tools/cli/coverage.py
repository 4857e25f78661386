"""`torch-fl coverage TARGET`: which ATen ops a model uses, and where each runs per fl device.

TARGET names a function that returns (model, example_inputs): `package.module:fn`
(importable) or `path/to/file.py:fn`.  example_inputs is a tensor or a tuple of
the model's positional inputs; they stay on the CPU (tracing uses fake tensors).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path


class TargetError(ValueError):
    """TARGET does not name a function returning (model, example_inputs)."""


def register(subparsers) -> None:
    parser = subparsers.add_parser("coverage", help="list a model's ATen ops and where each runs on fl",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", help="module:function or file.py:function returning (model, example_inputs)")
    parser.add_argument("--device", type=int, action="append", help="fl device index (repeatable; default all)")
    parser.add_argument("--forward-only", action="store_true", help="trace the forward pass only")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(handler=run)


def load_factory(target: str):
    """The function TARGET names ('pkg.mod:fn' or 'file.py:fn')."""
    module_name, sep, function = target.rpartition(":")
    if not sep or not module_name or not function:
        raise TargetError(f"'{target}' is not MODULE:FUNCTION or FILE.py:FUNCTION (e.g. mymodels.py:build)")
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_file():
            raise TargetError(f"'{module_name}' does not exist")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(path.resolve().parent))    # so the file can import its neighbours
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    factory = getattr(module, function, None)
    if not callable(factory):
        raise TargetError(f"'{module_name}' has no function '{function}'")
    return factory


def _model_and_inputs(target: str):
    built = load_factory(target)()
    if not (isinstance(built, (tuple, list)) and len(built) == 2):
        raise TargetError(f"'{target}' must return (model, example_inputs), got {type(built).__name__}")
    return built


def run(args) -> int:
    from fl_runtime.integration import process
    from fl_runtime.tools.coverage import coverage
    process.start()      # raises what a broken start-up raised, as import torch_fl would
    try:
        model, inputs = _model_and_inputs(args.target)
    except TargetError as exc:
        print(f"torch-fl coverage: {exc}", file=sys.stderr)
        return 2
    report = coverage(model, inputs, devices=args.device, backward=not args.forward_only)
    print(report.to_json() if args.json else report.to_text())
    return 0
