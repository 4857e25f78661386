"""The layer rule of fl_runtime (docs/contributors/layers.md), checked on the source.

Each folder of fl_runtime is a layer; a module may import its own layer and the
layers below it, never above, and the runtime never imports the SDK or the
conformance suite (they sit on top of it).  There are no import cycles in
fl_runtime, conformance or fl_sdk, in-function (deferred) imports counted: a
module that needs the runtime is handed it when it is installed.  `import
torch_fl` pulls in none of the SDK's or the suite's dependencies.

The house drawing of docs/contributors/architecture.md (house.svg) is drawn
from the same scan: `python tests/house/test_architecture.py` rewrites it, and
test_the_house_drawing_is_drawn_from_the_code fails when it is stale.
"""
from __future__ import annotations

import ast
import re
import sys
from html import escape
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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


def _module_graph(paths, module_level_only: bool = True) -> dict[str, set[str]]:
    names = {module_name(p) for p in paths}
    graph = {}
    for path in paths:
        targets = set()
        for target, _ in imports(path, module_level_only=module_level_only):
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


def package_cycles(package: str, module_level_only: bool = True) -> list[list[str]]:
    graph = _module_graph(sorted((ROOT / package).rglob("*.py")), module_level_only)
    # a package's __init__ importing its own submodules is how packages re-export; not a cycle
    for name in list(graph):
        graph[name] = {t for t in graph[name] if not name.startswith(t + ".") and t != package}
    return sorted(_cycles(graph))


PACKAGES = ("fl_runtime", "conformance", "fl_sdk")


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycles(package):
    """No circle, counting in-function imports: a deferred import that closes one only hides it."""
    circles = package_cycles(package, module_level_only=False)
    assert circles == [], (f"import circles in {package} (counting in-function imports): {circles}. Pass what a "
                           "module needs in (the runtime, a callback) instead of importing the module that has it "
                           "(docs/contributors/architecture.md)")


# ---- the house drawing ----------------------------------------------------------------

DRAWING = ROOT / "docs" / "contributors" / "house.svg"
# The C side: each plugin tree and the SDK libraries its plugin.yaml compiles in.
PLUGIN_TREES = {"reference_vendor": ROOT / "reference_vendor" / "plugin.yaml",
                "plugins/opencl": ROOT / "plugins" / "opencl" / "plugin.yaml",
                "vendor_template": ROOT / "vendor_template" / "template" / "plugin.yaml.jinja"}
SDK_LIBRARY_DIRS = {"driver": "fl_sdk/driver_lib (fl_driver.h)", "kernel": "fl_sdk/kernel_lib (fl_kernel.h)"}


def layer_edges() -> dict[tuple[int, int], bool]:
    """(importing layer, imported layer) -> whether a module-level import makes the edge
    (else only in-function ones do), over fl_runtime's layers, own layer left out."""
    edges: dict[tuple[int, int], bool] = {}
    for path in SOURCES:
        mine = layer_of(module_name(path))
        top_level = {line for _, line in imports(path, module_level_only=True)}
        for target, line in imports(path):
            if target.split(".")[0] == "fl_runtime" and layer_of(target) != mine:
                key = (mine, layer_of(target))
                edges[key] = edges.get(key, False) or line in top_level
    return edges


def sdk_libraries_of(spec: Path) -> list[str]:
    found = re.search(r"^sdk_libraries:\s*\[([^\]]*)\]", spec.read_text(), re.MULTILINE)
    return [name.strip() for name in found.group(1).split(",")] if found else []


def _box(x: int, y: int, w: int, h: int, title: str, note: str = "", fill: str = "#eef3fb") -> str:
    text = f'<text x="{x + 8}" y="{y + 17}" font-weight="bold">{escape(title)}</text>'
    if note:
        text += f'<text x="{x + 8}" y="{y + 33}" font-size="11">{escape(note)}</text>'
    return f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="4" fill="{fill}" stroke="#445"/>{text}'


def _arrow(points: list[tuple[int, int]], dashed: bool = False, colour: str = "#445") -> str:
    path = " ".join(f"{x},{y}" for x, y in points)
    dash = ' stroke-dasharray="4 3"' if dashed else ""
    return (f'<polyline points="{path}" fill="none" stroke="{colour}"{dash} marker-end="url(#head)"/>')


def _wrapped(text: str, width: int) -> list[str]:
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = "    " + word
        else:
            line = f"{line} {word}" if line else word
    return lines + [line]


def house_svg() -> str:
    """The tree's layers and their import directions, drawn from the source: fl_runtime's
    layers top floor first, one lane per importing layer with an arrowhead into each layer
    it imports; the plugin trees, the SDK libraries their plugin.yaml compiles in, and the
    ABI header they and the runtime meet at."""
    rows = [name for name, _ in reversed(LAYERS)]             # top floor first
    notes_of = {name: ", ".join(p.removeprefix("fl_runtime.").replace(".", "/") for p in prefixes)
                for name, prefixes in LAYERS}
    top, height, gap, left, width = 90, 40, 14, 20, 330
    y_of = {name: top + i * (height + gap) for i, name in enumerate(rows)}
    parts = [_box(left, 20, 155, 44, "fl_sdk", "CLI: build, test, certify", "#f6efe3"),
             _box(left + 175, 20, 155, 44, "conformance", "the suite", "#f6efe3")]
    parts += [_arrow([(left + 78, 64), (left + 78, top)]), _arrow([(left + 252, 64), (left + 252, top)])]
    for name in rows:
        if name == "root":
            label, note = "fl_runtime (root), torch_fl", "the package root"
        elif name == "core":
            label, note = "fl_runtime: core", notes_of[name]
        else:
            label, note = f"fl_runtime/{notes_of[name]}/", ""
        parts.append(_box(left, y_of[name], width, height, label, note[:50] + ("..." if len(note) > 50 else "")))
    edges = layer_edges()
    sources = sorted({src for src, _ in edges}, reverse=True)            # the top floor's lane first
    for lane, src in enumerate(sources):
        x = left + width + 14 + lane * 14
        y_src = y_of[LAYERS[src][0]] + 8 + lane * 3
        targets = sorted(dst for s_, dst in edges if s_ == src)
        y_low = y_of[LAYERS[targets[0]][0]] + 8 + lane * 3
        parts.append(f'<polyline points="{left + width},{y_src} {x},{y_src} {x},{y_low}" fill="none" '
                     'stroke="#445"/>')
        for dst in targets:
            y = y_of[LAYERS[dst][0]] + 8 + lane * 3
            parts.append(_arrow([(x, y), (left + width + 1, y)], dashed=not edges[(src, dst)]))
    # the C side: plugin trees -> the SDK libraries their plugin.yaml names -> the ABI header
    cx = left + width + 30 + len(sources) * 14
    libraries = sorted(SDK_LIBRARY_DIRS)
    lib_x = {name: cx + i * 240 for i, name in enumerate(libraries)}
    lib_y, abi_y = y_of["ops"], y_of["core"]
    for i, (tree, spec) in enumerate(PLUGIN_TREES.items()):
        y = y_of["root"] + i * (height + gap)
        parts.append(_box(cx, y, 210, height, tree, "a plugin in C, built by fl-sdk", "#e7f4e4"))
        for name in sdk_libraries_of(spec):
            x = lib_x[name] + 40 + i * 60
            parts.append(_arrow([(cx + 210, y + 20), (cx + 222 + i * 8, y + 20), (cx + 222 + i * 8, lib_y - 14 - i * 8),
                                 (x, lib_y - 14 - i * 8), (x, lib_y)]))
    for name in libraries:
        parts.append(_box(lib_x[name], lib_y, 225, height, SDK_LIBRARY_DIRS[name], "compiled into each plugin",
                          "#e7f4e4"))
        parts.append(_arrow([(lib_x[name] + 112, lib_y + height), (lib_x[name] + 112, abi_y)]))
    parts.append(_box(cx, abi_y, 465, height, "fl_sdk/include/fl_abi.h", "the ABI: one C header", "#e7f4e4"))
    parts.append(_arrow([(left + width // 2, abi_y + height), (left + width // 2, abi_y + height + 22),
                         (cx + 232, abi_y + height + 22), (cx + 232, abi_y + height + 2)], colour="#2a7"))
    notes = ["Every arrow points down: solid, a module-level import; dashed, only in-function imports.",
             "Green: the runtime reads fl_abi.h (cffi); plugins and the runtime meet only there."]
    circles = [circle for package in PACKAGES for circle in package_cycles(package, module_level_only=False)]
    if not circles:
        notes.append(f"No import circle in {', '.join(PACKAGES)}, in-function imports included "
                     "(tests/house/test_architecture.py).")
    for circle in circles:
        notes += _wrapped("An import circle (the test fails until it is broken): " + ", ".join(circle) + ".", 120)
    bottom = abi_y + height + 48
    for i, note in enumerate(notes):
        parts.append(f'<text x="{left}" y="{bottom + 16 * i}" font-size="12">{escape(note)}</text>')
    w, h = cx + 480, bottom + 16 * len(notes) + 6
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
            'font-family="sans-serif" font-size="13">\n'
            '<defs><marker id="head" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
            '<path d="M0,0 L8,4 L0,8 z" fill="#445"/></marker></defs>\n'
            f'<rect width="{w}" height="{h}" fill="white"/>\n' + "\n".join(parts) + "\n</svg>\n")


def test_the_house_drawing_is_drawn_from_the_code():
    assert DRAWING.read_text() == house_svg(), (
        f"{DRAWING.relative_to(ROOT)} is stale: run `python tests/house/test_architecture.py` to redraw it")


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


if __name__ == "__main__":
    DRAWING.write_text(house_svg())
    print(f"wrote {DRAWING.relative_to(ROOT)}", file=sys.stderr)
