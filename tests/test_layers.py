"""privlin's layering: each module imports only its own layer and those below it (lazy imports included, so no
import cycle), and the accounting layer loads neither JAX nor scikit-learn (DP-MAE's torch trainer imports it)."""
import os
import subprocess
import sys

import pytest
from test_import_graph import cycle, graph

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _graph():
    """privlin's import graph (:mod:`test_import_graph`), the package's lazy ``__init__`` left out."""
    return {m: deps - {"privlin"} for m, deps in graph(("privlin",)).items()}


#: The layers, bottom up, stated here only (privlin/__init__.py and DESIGN.md point here): a module may import its
#: own layer and those below.
#: ``report`` and ``ledger`` sit under the fit workflow, which writes a fit's report and charges its ledger.
LAYERS = (
    ("primitives", ("defaults", "spelling", "sensitivity", "noise", "secure_noise", "accounting", "events",
                    "compilation", "progress")),
    ("releases", ("releases", "train")),
    ("policy", ("plan",)),
    ("execution", ("data", "report", "ledger", "evaluation", "steps", "chain", "in_memory", "rows", "streamed",
                   "fit_groups", "runner", "public_fallback", "workflow", "prediction")),
    ("surfaces", ("estimator", "sweep", "model_selection", "selection", "knn", "audit", "public")),
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
    assert cycle(graph) is None, " -> ".join(cycle(graph))


def test_accounting_loads_neither_jax_nor_sklearn():
    code = ("import sys, privlin.accounting, privlin.events, privlin.report, privlin.defaults, privlin; "
            "print(sorted(m for m in ('jax', 'sklearn', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
