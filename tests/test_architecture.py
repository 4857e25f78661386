"""The layer rule of fl_runtime (docs/contributors/layers.md), checked on the source.

Each folder of fl_runtime is a layer; a module may import its own layer and the
layers below it, never above, and the runtime never imports the SDK or the
conformance suite (they sit on top of it).  There are no import cycles, and
`import torch_fl` pulls in none of the SDK's or the suite's dependencies.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "fl_runtime"

# Lowest first.  A module's layer is the longest prefix listed here.
LAYERS = [
    ("core", ("fl_runtime.version", "fl_runtime.errors", "fl_runtime.tracebacks", "fl_runtime.config",
              "fl_runtime.logs", "fl_runtime.torch_compat", "fl_runtime.compiled", "fl_runtime.abi")),
    ("plugins", ("fl_runtime.plugins",)),
    ("devices", ("fl_runtime.devices",)),
    ("ops", ("fl_runtime.ops",)),
    ("runtime", ("fl_runtime.runtime",)),
    ("bridge", ("fl_runtime.bridge",)),
    ("integration", ("fl_runtime.integration",)),
    ("tools", ("fl_runtime.tools",)),
    ("root", ("fl_runtime",)),
]
FORBIDDEN = ("conformance", "fl_sdk", "reference_vendor", "vendor_template", "torch_fl")
SDK_AND_TEST_DEPENDENCIES = ("pytest", "hypothesis", "copier", "jsonschema", "xmlschema", "expecttest",
                             "jinja2", "conformance", "fl_sdk")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int:
    best, best_len = None, -1
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = rank, len(prefix)
    assert best is not None, f"{module} is in no layer: add it to LAYERS and docs/contributors/layers.md"
    return best


def imports(path: Path, module_level_only: bool = False) -> list[tuple[str, int]]:
    """(imported module, line) for every import in the file (also inside functions)."""
    tree = ast.parse(path.read_text())
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module
            # `from fl_runtime.ops import accounting` imports the submodule; other names come from target
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                is_module = any((ROOT / sub.replace(".", "/")).with_suffix(suffix).exists() for suffix in (".py",)) \
                    or (ROOT / sub.replace(".", "/") / "__init__.py").exists()
                found.append((sub if is_module else target, node.lineno))
    return found


SOURCES = sorted(RUNTIME.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_go_down_the_layers(path):
    here = module_name(path)
    mine = layer_of(here)
    for target, line in imports(path):
        top = target.split(".")[0]
        assert top not in FORBIDDEN, f"{here}:{line} imports {target}: the runtime sits below the SDK and suite"
        if top == "fl_runtime":
            assert layer_of(target) <= mine, (
                f"{here}:{line} ({LAYERS[mine][0]}) imports {target} ({LAYERS[layer_of(target)][0]}), "
                "a layer above it (docs/contributors/layers.md)")


def _module_graph(paths) -> dict[str, set[str]]:
    names = {module_name(p) for p in paths}
    graph = {}
    for path in paths:
        targets = set()
        for target, _ in imports(path, module_level_only=True):
            while target and target not in names:       # an imported name, not a module
                target = target.rpartition(".")[0]
            if target and target != module_name(path):
                targets.add(target)
        graph[module_name(path)] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))
    for v in graph:
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize("package", ["fl_runtime", "conformance", "fl_sdk"])
def test_no_import_cycles(package):
    paths = [p for p in (ROOT / package).rglob("*.py")]
    graph = _module_graph(paths)
    # a package's __init__ importing its own submodules is how packages re-export; not a cycle
    for name in list(graph):
        graph[name] = {t for t in graph[name] if not name.startswith(t + ".") and t != package}
    assert _cycles(graph) == []


def test_importing_torch_fl_pulls_in_no_sdk_or_test_dependency(python):
    result = python("""
        import sys, torch, torch_fl
        assert torch_fl.list_devices(), torch_fl.why_no_devices()
        print(sorted(m for m in sys.modules if m.split('.')[0] in %r))
    """ % (SDK_AND_TEST_DEPENDENCIES,))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_importing_runtime_modules_starts_nothing(python):
    """The conformance suite imports fl_runtime.abi and the loader without starting a runtime."""
    result = python("""
        import fl_runtime.abi, fl_runtime.plugins.loader
        from fl_runtime.integration import process
        print(process.started())
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "None"
