"""The repository's import graph has no cycle: every .py under the packages below is parsed (imports at top level,
inside functions and under ``TYPE_CHECKING`` alike), so a lazy import cannot hide a circle. This file builds the
graph; ``test_layers.py`` checks privlin's layers on the same graph."""
import ast
import os

import pytest

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("privlin", "stores", "featurize", "backbones", "experiments")

#: Cycles allowed, each only as exactly these modules; none: a cycle is broken, not listed.
KNOWN_CYCLES: tuple = ()


def modules(packages=PACKAGES):
    """{dotted module name: file path} of every .py under ``packages`` (a package is named by its folder)."""
    out = {}
    for package in packages:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for f in sorted(files):
                if f.endswith(".py"):
                    path = os.path.join(folder, f)
                    rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    out[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return out


def _known(target, known):
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target


def imports(name, path, known):
    """The modules of ``known`` that ``name`` imports anywhere in its file.

    ``from pkg import sub`` is an edge to ``pkg.sub`` when that is a module, else to ``pkg``; importing ``a.b`` is
    not counted as importing the package ``a`` (its ``__init__`` runs first, but that is not a dependency of ours).
    """
    is_pkg = path.endswith("__init__.py")
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        found.update(t for t in (_known(t, known) for t in targets) if t and t != name)
    return found


def graph(packages=PACKAGES):
    known = modules(packages)
    return {name: imports(name, path, known) for name, path in known.items()}


def cycle(g):
    """One import cycle of ``g`` as a path ``[a, b, ..., a]``, or None."""
    state, stack = {}, []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(g.get(v, ())):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state and (c := visit(w)):
                return c
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(g):
        if v not in state and (c := visit(v)):
            return c
    return None


def cycles(g):
    """The sets of modules that import each other round a cycle (strongly connected components of over one module)."""
    reach = {}
    for v in g:
        seen, todo = set(), [v]
        while todo:
            for w in g.get(todo.pop(), ()):
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        reach[v] = seen
    return {frozenset({v} | {w for w in reach[v] if v in reach.get(w, ())}) for v in g if v in reach[v]}


def test_the_checker_finds_a_cycle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None
    assert cycles({"a": {"b"}, "b": {"c", "a"}, "c": {"a"}, "d": {"a"}}) == {frozenset("abc")}
    assert cycles({"a": {"b"}, "b": set()}) == set()


def test_the_graph_sees_lazy_and_relative_imports(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("def f():\n    from .b import g\n    from . import c\n")
    known = {"pkg": None, "pkg.a": None, "pkg.b": None, "pkg.c": None}
    assert imports("pkg.a", str(tmp_path / "pkg" / "a.py"), known) == {"pkg.b", "pkg.c"}


def test_the_repository_has_no_import_cycle_but_the_known_ones():
    g = graph()
    assert "backbones.mae.ghost" in g and "featurize" in g and "experiments.quickstart" in g
    new = [set(c) for c in cycles(g) if c not in KNOWN_CYCLES]
    assert not new, f"import cycles: {new}; one of them: {' -> '.join(cycle({v: g[v] & new[0] for v in new[0]}))}"
