"""The library's import graph (read from the source, nothing imported): no module imports
one that imports it back, and no subpackage imports one that imports it back."""

import ast
import collections
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "pyro_pidkl"


def _graph():
    def name(f):
        parts = f.with_suffix("").relative_to(ROOT.parent).parts
        return ".".join(parts[:-1] if f.name == "__init__.py" else parts)
    files = {name(f): f for f in ROOT.rglob("*.py")}
    graph = collections.defaultdict(set)
    for m, f in files.items():
        pkg = m if f.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                graph[m] |= {target + "." + a.name for a in node.names
                             if target + "." + a.name in files}
                if target in files:
                    graph[m].add(target)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "pyro_pidkl"):
                graph[m].add(node.module)
        graph[m].discard(m)
    return files, graph


def _cycles(graph, nodes):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in nodes:
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_one_that_imports_it_back():
    files, graph = _graph()
    assert graph["pyro_pidkl.infer.svi"]                  # the graph is read at all
    assert _cycles(graph, list(files)) == []


def test_no_subpackage_imports_one_that_imports_it_back():
    files, graph = _graph()
    top = lambda m: ".".join(m.split(".")[:2])              # noqa: E731
    packages = collections.defaultdict(set)
    for m, targets in graph.items():
        for t in targets:
            if top(t) != top(m) and top(t) != "pyro_pidkl":
                packages[top(m)].add(top(t))
    assert "pyro_pidkl.physics" in packages["pyro_pidkl.models"]
    assert _cycles(packages, list(packages)) == []


def _layers():
    """``{subpackage or top-level module: layer}`` read from docs/layout.md's picture."""
    import re
    text = (ROOT.parent / "docs" / "layout.md").read_text()
    out = {}
    for m in re.finditer(r"^layer (\d+)  (.*?)(?:  {2,}.*)?$", text, re.M):
        for name in m.group(2).split():
            out["pyro_pidkl." + name] = int(m.group(1))
    return out


def test_every_import_points_down_the_layers_of_the_documented_picture():
    """docs/layout.md draws the subpackages in layers; each imports only from layers below
    its own, and the picture names every subpackage and top-level module."""
    files, graph = _graph()
    layers = _layers()
    top = lambda m: ".".join(m.split(".")[:2])              # noqa: E731
    assert set(layers) == {top(m) for m in files if m != "pyro_pidkl"}
    upward = sorted((m, t) for m, targets in graph.items() for t in targets
                    if top(t) != top(m) and top(t) != "pyro_pidkl"
                    and layers[top(t)] >= layers[top(m)])
    assert upward == []


def _model_layers():
    """``{models' subpackage or module: layer}`` from docs/layout.md's ``models N`` rows."""
    import re
    text = (ROOT.parent / "docs" / "layout.md").read_text()
    return {"pyro_pidkl.models." + name: int(m.group(1))
            for m in re.finditer(r"^\s+models (\d+)  (.*)$", text, re.M)
            for name in m.group(2).split()}


def test_the_models_layers_point_down_as_drawn():
    """Inside ``models/``, each subpackage (or module) imports only from the rows below its
    own in docs/layout.md, and the picture names every one of them."""
    files, graph = _graph()
    layers = _model_layers()
    part = lambda m: ".".join(m.split(".")[:3])             # noqa: E731
    inside = {part(m) for m in files if m.startswith("pyro_pidkl.models.")}
    assert {"pyro_pidkl.models.single", "pyro_pidkl.models.pidkl"} <= inside
    assert set(layers) == inside
    upward = sorted((m, t) for m, targets in graph.items() for t in targets
                    if m.startswith("pyro_pidkl.models.") and t.startswith("pyro_pidkl.models.")
                    and part(t) != part(m) and layers[part(t)] >= layers[part(m)])
    assert upward == []
