"""README.md runs as written: every ``bash`` and ``python`` block, in order, in a fresh folder.

Blocks are marked in the README: none (runs in the default test run), ``<!-- readme-test: slow, ~T -->`` (runs
with ``-m slow``), ``<!-- readme-test: manual, ~T -->`` (hours: never run here); ``ci:install`` / ``ci:test`` are
the set-up lines ``.ci/run`` reads.  Python blocks share one namespace, as in one session; shell lines run as
written: in the default run in-process through the entry point's ``main`` (what the ``featurize`` script and
``python -m`` call), with ``-m slow`` in real processes.

A walk through a fresh clone, with each block's time (after the README's install line)::

    git clone REPO clone && cd clone && <the ci:install line> && .venv/bin/python tests/test_readme.py --walk
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import math
import os
import re
import shlex
import subprocess
import sys
import time

import closed_forms
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
INSTALL = 'python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && .venv/bin/python -m experiments.quickstart'
SUITE = ".venv/bin/python -m pytest -q -n 2 --dist loadfile"
#: The set-up commands of the install line: done before (the shims of the slow test, or by hand in a fresh clone).
ENV_SETUP = ("python3 -m venv", ".venv/bin/pip install")

_BLOCK = re.compile(r"(?:<!--\s*(?P<marker>[^>]*?)\s*-->\n)?^```(?P<lang>[a-z]*)\n(?P<code>.*?)^```\s*$", re.S | re.M)
_TIME = re.compile(r"~\s*[0-9][0-9.–-]*\s*(s|min|h)\b")


@dataclasses.dataclass
class Block:
    line: int
    lang: str
    code: str
    kind: str  #: "fast", "slow", "manual", "install", "suite" or "text"
    marker: str

    @property
    def name(self) -> str:
        return f"README.md:{self.line} ({self.kind})"


def readme_blocks(text: str | None = None) -> list[Block]:
    """The fenced blocks of the README, in order, with what the test does with each."""
    text = open(README, encoding="utf-8").read() if text is None else text
    out = []
    for m in _BLOCK.finditer(text):
        marker, lang = (m["marker"] or "").strip(), m["lang"]
        if marker == "ci:install":
            kind = "install"
        elif marker == "ci:test":
            kind = "suite"
        elif marker.startswith("readme-test:"):
            kind = marker.split(":", 1)[1].split(",")[0].strip()
        else:
            kind = "fast" if lang in ("bash", "python") else "text"
        out.append(Block(text.count("\n", 0, m.start("code")) + 1, lang, m["code"], kind, marker))
    return out


def commands(code: str) -> list[str]:
    """The shell commands of a bash block: one a line, comments dropped."""
    return [line for line in code.splitlines() if shlex.split(line, comments=True)]


class Walk:
    """Runs README blocks in ``workdir``: python blocks in one namespace, shell lines in-process or for real."""

    def __init__(self, workdir: str, *, real: bool, echo: bool = False):
        self.workdir, self.real, self.echo = workdir, real, echo
        self.namespace: dict = {"__name__": "__readme__"}
        self.output: dict[int, str] = {}
        self.times: list[tuple[str, float]] = []

    def run(self, block: Block) -> str:
        """Run one block; returns what it printed.  A failure raises AssertionError naming the block."""
        t0 = time.perf_counter()
        buf = io.StringIO()
        with _chdir(self.workdir), contextlib.redirect_stdout(buf if not self.echo else _Tee(buf, sys.stdout)):
            if block.lang == "python":
                exec(compile(block.code, block.name, "exec"), self.namespace)  # noqa: S102 - the README's own code
            else:
                for cmd in (commands(block.code) if block.kind != "install" else block.code.strip().split(" && ")):
                    if block.kind == "install" and cmd.startswith(ENV_SETUP):
                        continue
                    t1 = time.perf_counter()
                    self._shell(cmd, block)
                    self.times.append((f"  $ {cmd}", time.perf_counter() - t1))
        self.times.append((block.name, time.perf_counter() - t0))
        self.output[block.line] = buf.getvalue()
        return buf.getvalue()

    def _shell(self, cmd: str, block: Block) -> None:
        if self.real:
            sys.stdout.flush()
            r = subprocess.run(["bash", "-euo", "pipefail", "-c", cmd], cwd=self.workdir, text=True,
                               stdout=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
            print(r.stdout, end="")
            assert r.returncode == 0, f"{block.name}: `{cmd}` exited {r.returncode}"
            return
        argv = shlex.split(cmd, comments=True)
        if argv[0] == ".venv/bin/featurize":
            main, args = importlib.import_module("featurize.__main__").main, argv[1:]
        elif argv[:2] == [".venv/bin/python", "-m"]:
            module = importlib.import_module(argv[2])
            if hasattr(module, "__path__"):  # a package: python -m runs its __main__
                module = importlib.import_module(argv[2] + ".__main__")
            main, args = module.main, argv[3:]
        else:
            raise AssertionError(f"{block.name}: `{cmd}` is not an entry point this test can run in-process")
        try:
            code = main(args)
        except SystemExit as e:  # --help
            code = e.code
        assert code in (0, None), f"{block.name}: `{cmd}` exited {code}"


class _Tee(io.TextIOBase):
    def __init__(self, *streams):
        self.streams = streams

    def write(self, s):
        for st in self.streams:
            st.write(s)
        return len(s)


@contextlib.contextmanager
def _chdir(path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _shims(folder: str) -> None:
    """``.venv/bin/python`` and ``.venv/bin/featurize`` running this checkout with this interpreter."""
    bin_ = os.path.join(folder, ".venv", "bin")
    os.makedirs(bin_, exist_ok=True)
    for name, run in (("python", f'"{sys.executable}"'), ("featurize", f'"{sys.executable}" -m featurize')):
        path = os.path.join(bin_, name)
        with open(path, "w") as f:
            f.write(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec {run} "$@"\n')
        os.chmod(path, 0o755)


# ----------------------------------------------------------------------------- the tests


def test_every_block_is_runnable_or_marked_with_its_time():
    blocks = readme_blocks()
    kinds = [b.kind for b in blocks]
    assert kinds.count("install") == 1 and kinds.count("suite") == 1
    assert [b.code.strip() for b in blocks if b.kind == "install"] == [INSTALL]  # .ci/run reads these two lines
    assert [b.code.strip() for b in blocks if b.kind == "suite"] == [SUITE]
    for b in blocks:
        assert b.kind in ("fast", "slow", "manual", "install", "suite", "text"), f"{b.name}: unknown marker"
        if b.kind in ("slow", "manual"):
            assert _TIME.search(b.marker), f"{b.name}: a {b.kind} block states its time (~N s|min|h)"
            assert b.lang in ("bash", "python"), f"{b.name}: a marked block is code"
        if b.lang == "bash":  # the venv is never activated: every command names .venv/bin/
            for cmd in commands(b.code):
                assert cmd.startswith(".venv/bin/"), f"{b.name}: `{cmd}`"
    assert sum(k == "fast" for k in kinds) >= 6


def test_marker_parsing():
    text = ("x\n<!-- readme-test: slow, ~25 s -->\n```python\nprint(1)\n```\n\n```\ndiagram\n```\n"
            "<!-- readme-test: manual, ~5 h on a 2-core CPU -->\n```bash\n.venv/bin/python -m a  # c\n\n```\n")
    blocks = readme_blocks(text)
    assert [(b.kind, b.lang, b.line) for b in blocks] == [("slow", "python", 4), ("text", "", 8), ("manual", "bash", 12)]
    assert commands(blocks[2].code) == [".venv/bin/python -m a  # c"]


def _expectations(walk: Walk, blocks: list[Block]) -> None:
    """What the walk must have produced: real results, not only a zero exit."""
    out = "\n".join(walk.output.values())
    for name in ("model", "clf"):  # a NaN model predicts one class (10%): say so rather than only "low accuracy"
        coef = getattr(walk.namespace.get(name), "coef_transformed_", None)
        assert coef is None or np.isfinite(coef).all(), f"README's `{name}` has non-finite coefficients"
    accuracies = [float(a) for a in re.findall(r"test accuracy: ([0-9.]+)%", out)]
    assert len(accuracies) >= 2 and min(accuracies) > 60, out  # 10 classes: chance is 10%
    assert "N=1437" in out and "store runs/readme/digits.zarr, split 'train'" in out  # the report names its data
    assert "past the cap" in out and "Nothing was read." in out  # the budget refused the fit
    store = os.path.join(walk.workdir, "runs", "readme", "digits.zarr")
    assert sorted(os.listdir(store)) >= ["test", "train"]
    from privlin.ledger import PrivacyLedger

    entries = PrivacyLedger.for_split(store, "train").entries
    fits = [e for e in entries if e.mechanism.startswith("DPLinearClassifier")]
    assert len(fits) >= 2
    assert f" composition of {len(entries)} entries)" in out  # the CLI saw every charge, the refusal none


def test_readme_fast_blocks_run_in_order(tmp_path):
    """The default-run blocks (~30 s); the slow ones are skipped here and run by the slow test."""
    walk = Walk(str(tmp_path), real=False)
    blocks = readme_blocks()
    for b in blocks:
        if b.kind == "fast":
            walk.run(b)
    _expectations(walk, blocks)


@pytest.mark.slow  # every block but DP-MAE's, real processes: ~6 min on a 2-core CPU (quickstart ~90 s)
def test_readme_walk_in_real_processes(tmp_path):
    _shims(str(tmp_path))
    walk = Walk(str(tmp_path), real=True)
    blocks = readme_blocks()
    for b in blocks:
        if b.kind in ("fast", "slow", "install"):
            walk.run(b)
    _expectations(walk, blocks)
    assert os.path.exists(tmp_path / "runs" / "quickstart" / "quickstart.png")
    assert "GridSearchCV" in "".join(b.code for b in blocks if b.kind == "slow")


# ----------------------------------------------------------------------------- the README's tuning recipe


def _mu(report) -> float:
    """μ of one full-batch fit: each one-off release (re-centering rounds, centering, scaling) once, then ``steps``
    Gaussian steps (zero-out: each Gaussian's sensitivity is what its σ multiplies; the rounds and the centering's
    stages are listed at the one σ their Gaussians compose to, μ² adding as Σ 1/σ²)."""
    sig = report.noise_multipliers
    assert set(sig) <= {"recenter", "center", "scale", "whiten", "step"}  # every mechanism of the plan is a Gaussian
    once = [s for name, s in sig.items() if name != "step"]
    return math.sqrt(sum(1 / s**2 for s in once) + report.steps / sig["step"] ** 2)


def test_plain_grid_search_charges_every_fit_and_warns_that_its_scores_are_not(blobs):
    from sklearn.model_selection import GridSearchCV, cross_val_score

    from privlin import DPLinearClassifier, PrivacyLeakWarning
    from privlin.ledger import PrivacyLedger

    X, y = blobs(240, d=8, k=3)
    ledger = PrivacyLedger.in_memory()
    with pytest.warns(PrivacyLeakWarning, match="unaccounted release"):  # its exact validation scores
        search = GridSearchCV(DPLinearClassifier(epsilon=1.0, classes=range(3), steps=5, ledger=ledger),
                              {"learning_rate": [0.1, 1.0]}, cv=2, error_score="raise").fit(X, y)
    report = search.best_estimator_.privacy_
    assert closed_forms.gdp_epsilon(_mu(report), 1e-5) == pytest.approx(1.0, abs=1e-3)  # the oracle agrees on one fit
    assert report.epsilon == pytest.approx(1.0, abs=1e-3)  # what one model guarantees ...
    assert len(ledger) == 2 * 2 + 1  # ... while every fold of every candidate and the refit were charged
    eps, delta = report.ledger_spent  # and the report states their composition
    assert delta == pytest.approx(1e-5)  # no cap: the smallest of the entries' δ (never their sum)
    assert eps == pytest.approx(closed_forms.gdp_epsilon(math.sqrt(5) * _mu(report), delta), rel=1e-4) and eps > 2
    cv_ledger = PrivacyLedger.in_memory()
    cross_val_score(DPLinearClassifier(epsilon=1.0, classes=range(3), steps=5, ledger=cv_ledger), X, y, cv=2)
    assert len(cv_ledger) == 2
    two_fits = closed_forms.gdp_epsilon(math.sqrt(2) * _mu(report), 1e-5)
    assert cv_ledger.spent(1e-5)[0] == pytest.approx(two_fits, rel=1e-4)


def test_a_capped_ledger_stops_model_selection_at_the_fit_that_would_pass_it(blobs):
    from sklearn.model_selection import GridSearchCV

    from privlin import DPLinearClassifier
    from privlin.ledger import PrivacyBudgetExceeded, PrivacyLedger

    X, y = blobs(240, d=8, k=3)
    one = DPLinearClassifier(epsilon=1.0, classes=range(3), steps=5).fit(X, y).privacy_
    cap = 1.001 * closed_forms.gdp_epsilon(math.sqrt(3) * _mu(one), 1e-5)  # room for exactly three fits of the five
    ledger = PrivacyLedger.in_memory(cap=(cap, 1e-5))
    with pytest.raises(PrivacyBudgetExceeded, match="past the cap.*Nothing was read"):
        GridSearchCV(DPLinearClassifier(epsilon=1.0, classes=range(3), steps=5, ledger=ledger),
                     {"learning_rate": [0.1, 1.0]}, cv=2, error_score="raise").fit(X, y)
    assert len(ledger) == 3 and ledger.spent()[0] <= cap


# ----------------------------------------------------------------------------- a fresh clone, by hand


def main(argv=None) -> int:
    """``.venv/bin/python tests/test_readme.py --walk [--suite]`` from a fresh clone's root: run the README, time
    each step.

    Run the install line first (it made ``.venv``); the walk runs its quickstart again, as a second user session
    would, then every other block but DP-MAE's; ``--suite`` also runs the test command.
    """
    import argparse

    p = argparse.ArgumentParser(prog="tests/test_readme.py", description=main.__doc__.split("\n\n")[0])
    p.add_argument("--walk", action="store_true", required=True)
    p.add_argument("--suite", action="store_true", help="also run the ci:test line (the whole test suite)")
    args = p.parse_args(argv)
    cwd = os.getcwd()
    sys.path.insert(0, cwd)
    walk = Walk(cwd, real=True, echo=True)
    blocks = readme_blocks(open(os.path.join(cwd, "README.md"), encoding="utf-8").read())
    t0 = time.perf_counter()
    for b in blocks:
        if b.kind in ("fast", "slow", "install") or (b.kind == "suite" and args.suite):
            print(f"\n=== {b.name}", flush=True)
            walk.run(b)
    print("\nstep times (s):")
    for name, seconds in walk.times:
        print(f"{seconds:8.1f}  {name}")
    print(f"{time.perf_counter() - t0:8.1f}  total", flush=True)
    _expectations(walk, blocks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
