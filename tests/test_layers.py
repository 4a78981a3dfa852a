"""privlin's layering: each module imports only its own layer and those below it (lazy imports included, so no
import cycle), and the accounting layer loads neither JAX nor scikit-learn (DP-MAE's torch trainer imports it)."""
import ast
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "privlin")


def _modules():
    out = {}
    for folder, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                out[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return out


def _imports(name, path, known):
    """privlin modules ``name`` imports anywhere in its file (top level, functions, ``TYPE_CHECKING`` blocks)."""
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
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name and t != "privlin":
                found.add(t)
    return found


def _graph():
    known = _modules()
    return {name: _imports(name, path, known) for name, path in known.items()}


def _cycle(graph):
    state, stack = {}, []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state and (c := visit(w)):
                return c
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state and (c := visit(v)):
            return c
    return None


def test_the_checker_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


#: The layers, bottom up (../shared/DESIGN.md, "privlin"): a module may import its own layer and those below.
#: ``report`` and ``ledger`` sit under the fit workflow, which writes a fit's report and charges its ledger.
LAYERS = (
    ("primitives", ("defaults", "sensitivity", "noise", "secure_noise", "accounting", "events", "compilation",
                    "progress")),
    ("releases", ("releases", "preprocess", "scaling", "radius", "train")),
    ("policy", ("plan",)),
    ("execution", ("data", "report", "ledger", "evaluation", "runner", "workflow")),
    ("surfaces", ("estimator", "sweep", "model_selection", "selection", "knn", "audit")),
)


def _layer(module):
    for level, (_, names) in enumerate(LAYERS):
        for name in names:
            if module == f"privlin.{name}" or module.startswith(f"privlin.{name}."):
                return level
    return None


def test_every_module_has_a_layer_and_imports_none_above_it():
    graph = _graph()
    unplaced = sorted(m for m in graph if m != "privlin" and _layer(m) is None)
    assert not unplaced, f"modules with no layer in LAYERS: {unplaced}"
    upward = [f"{m} ({LAYERS[_layer(m)][0]}) imports {d} ({LAYERS[_layer(d)][0]})"
              for m, deps in sorted(graph.items()) if m != "privlin" for d in sorted(deps) if _layer(d) > _layer(m)]
    assert not upward, upward


def test_the_layer_check_sees_an_upward_import():
    assert _layer("privlin.releases.center") == 1 and _layer("privlin.estimator") == 4
    assert _layer("privlin.plan") > _layer("privlin.train")


def test_privlin_has_no_import_cycle():
    graph = _graph()
    assert "privlin.plan" in graph and "privlin.estimator" not in graph["privlin.plan"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_accounting_loads_neither_jax_nor_sklearn():
    code = ("import sys, privlin.accounting, privlin.events, privlin.report, privlin.defaults, privlin; "
            "print(sorted(m for m in ('jax', 'sklearn', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
