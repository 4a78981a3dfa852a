"""experiments: reproduction scripts on tiny synthetic stores (tables beside the papers'), their build hints
without data, the ε-sweep CLI and the quickstart's pieces (no featurization: that runs in CI's install step)."""
import csv
import functools
import os
import statistics
import subprocess
import sys

import numpy as np
import pytest

from experiments import eps_sweep, quickstart, reproduce_mehta, reproduce_randp
from experiments.plotting import plot_privacy_curves
import privlin
from privlin.ledger import PrivacyLedger


@pytest.fixture
def store(make_store, blobs):
    """A tiny store of well-separated blobs with the dataset's published class list, like featurize writes."""
    def make(splits=("train", "test"), k=3, n=(120, 60), d=8):
        data = {name: blobs(m, d=d, k=k, seed=i, centers_seed=7, scale=3.0) for i, (name, m) in enumerate(zip(splits, n))}
        return make_store(data, attrs={"classes": [str(c) for c in range(k)], "backbone": "toy", "dataset": "blobs"}).url
    return make


def test_reproduce_mehta_prints_ours_beside_the_paper(tmp_path, capsys, store):
    path = store()
    assert reproduce_mehta.main(["--cifar10", path, "--store-dir", str(tmp_path / "none"), "--seed", "0"]) == 0
    out = capsys.readouterr()
    lines = [ln for ln in out.out.splitlines() if ln.startswith("| cifar10")]
    assert len(lines) == 6  # 5 ε + non-private
    assert "| 8 | 8.000 | 1e-06 | 95.20 |" in out.out and "non-private" in out.out
    ours = [float(ln.split("|")[-2]) for ln in lines]
    assert min(ours) > 50 and ours[-1] > 80  # separable blobs: every ε well above chance (33%)
    assert "featurize --backbone vit_b16_in21k --head cls --dataset imagenet" in out.err


def test_reproduce_randp_uses_the_papers_sigmas_and_our_accountant_agrees(tmp_path, capsys, store):
    path = store(splits=("train", "val"))
    assert reproduce_randp.main(["--imagenet", path, "--store-dir", str(tmp_path / "none"), "--seed", "0"]) == 0
    out = capsys.readouterr().out
    rows = {ln.split("|")[2].strip(): ln for ln in out.splitlines() if ln.startswith("| imagenet")}
    # Table 23's σ1, σ2, T land on the ε the paper states (GDP composition, δ = 7.8e-7)
    assert float(rows["1"].split("|")[3]) == pytest.approx(1.0, abs=0.05)
    assert float(rows["8"].split("|")[3]) == pytest.approx(8.0, abs=0.3)
    assert "26.54" in rows["1"] and "39.39" in rows["8"]


def test_reproduction_scripts_say_which_store_to_build_without_data(tmp_path, capsys):
    assert reproduce_randp.main(["--store-dir", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert "featurize --backbone syn_vip_base --head blocks --dataset imagenet" in out
    assert "WRN-16-4" in out
    assert reproduce_mehta.main(["--store-dir", str(tmp_path)]) == 2
    assert "--dataset cifar100" in capsys.readouterr().out


def test_randp_cifar10_recipe_lands_on_table22_epsilons():
    from privlin.plan import make_plan

    for s, eps in zip(reproduce_randp.cifar10_settings(), reproduce_randp.CIFAR10_TABLE22):
        # Table 22's σ are integers rounded up: exact GDP never finds more than the stated ε, and at most
        # 20% less (σ=7 for ε=8 gives 6.65: the rounding matters most where σ is small)
        achieved = make_plan(s, n=50000, dim=8, n_classes=10).epsilon
        assert 0.8 * eps <= achieved <= eps


@pytest.fixture
def figures(monkeypatch):
    """Every matplotlib figure saved during the test (to look at what was drawn, not only that a PNG exists)."""
    from matplotlib.figure import Figure

    saved, original = [], Figure.savefig

    def keep(self, *a, **kw):
        saved.append(self)
        return original(self, *a, **kw)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def _curves(fig):
    """{legend label: (x, y, yerr or None)} of the error-bar lines of a privacy curve figure."""
    from matplotlib.container import ErrorbarContainer

    ax = fig.axes[0]
    out = {}
    for c in ax.containers:
        if isinstance(c, ErrorbarContainer):
            line, _, bars = c.lines
            x, y = (np.asarray(v, float) for v in line.get_data())
            err = None
            if bars:
                segs = bars[0].get_segments()
                err = np.asarray([(s[1][1] - s[0][1]) / 2 for s in segs])
            out[c.get_label()] = (x, y, err)
    return out


def test_eps_sweep_cli_with_private_selection_writes_csv_and_png(tmp_path, capsys, store, figures):
    path = store(splits=("train", "test", "val"), n=(120, 60, 40))
    out = tmp_path / "out"
    assert eps_sweep.main([path, "--eps", "1", "8", "--method", "adam1", "sgd", "--steps", "5", "--lr", "0.5",
                           "--val-split", "val", "--seed", "0", "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "privately selected on 'val'" in text and "Releasing all 4 fits:" in text
    assert (out / "sweep.csv").read_text().count("\n") == 5 and (out / "sweep.png").stat().st_size > 10_000
    # what it cost, from the ledgers: training split (the sweep) and validation split (the selection)
    led = PrivacyLedger.for_split(path, "train")
    eps, delta = led.spent()
    assert f"ledger total ε={eps:.4g} at δ={delta:g} over 1 entries" in text
    assert "[val]: this run ε=0.5" in text


def test_eps_sweep_cli_runs_the_library_defaults_unless_told(tmp_path):
    """The command line is privlin.sweep's defaults (private centering, scaling where the plan buys it): one plan."""
    from privlin.plan import make_plan

    args = eps_sweep.build_parser().parse_args(["s.zarr", "--eps", "0.5", "8", "--method", "adam1", "sgd"])
    for setting in eps_sweep.settings(args):
        library = {k: setting[k] for k in ("method", "epsilon", "delta")}
        ours, theirs = (make_plan(p, n=5000, dim=64, n_classes=10) for p in
                        (privlin.DPLinearClassifier(**setting).get_params(),
                         privlin.DPLinearClassifier(**library).get_params()))
        assert ours == theirs and ours.centered
    off = eps_sweep.settings(eps_sweep.build_parser().parse_args(["s.zarr", "--center-share", "0"]))
    assert all(make_plan(privlin.DPLinearClassifier(**s).get_params(), n=5000, dim=64, n_classes=10).center_share
               == 0 for s in off)
    share = eps_sweep.settings(eps_sweep.build_parser().parse_args(["s.zarr", "--center-share", "0.1"]))
    assert all(s["center_share"] == 0.1 for s in share)


def test_eps_sweep_plot_connects_each_method_and_csv_is_in_percent(tmp_path, capsys, store, figures):
    """The learning-rate rule gives every ε its own lr: still one curve per method, and the CSV in the table's %."""
    path = store()
    out = tmp_path / "out"
    assert eps_sweep.main([path, "--eps", "0.5", "2", "8", "--method", "adam1", "sgd", "--steps", "5",
                           "--draws", "3", "--seed", "1", "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    curves = _curves(figures[-1])
    assert sorted(curves) == ["adam1", "sgd"]
    for x, y, err in curves.values():
        assert list(x) == [0.5, 2, 8] and err is not None and err.shape == (3,)  # connected, with error bars
    # the printed table: one row per setting (2 methods x 3 ε), mean ± sd over its 3 draws, not a row per draw
    table = [ln.split() for ln in text.splitlines() if ln.startswith(("adam1 ", "sgd "))]
    assert len(table) == 6 and all(t[-3] == "±" and t[-1] == "3" for t in table)
    assert "Releasing all 18 fits (6 settings × 3 draws)" in text
    rows = list(csv.DictReader(open(out / "sweep.csv")))
    assert len(rows) == 6 and {r["draws"] for r in rows} == {"3"}
    for r in rows:  # the table, the CSV and the plot show the same mean and sd, in %
        t, = [t for t in table if t[0] == r["method"] and float(t[1]) == float(r["epsilon"])]
        assert float(t[-4]) == pytest.approx(float(r["accuracy_pct"]), abs=0.006)
        assert float(t[-2]) == pytest.approx(float(r["sd_pct"]), abs=0.006)
        x, y, err = curves[r["method"]]
        i = list(x).index(float(r["epsilon"]))
        assert y[i] == pytest.approx(float(r["accuracy_pct"])) and err[i] == pytest.approx(float(r["sd_pct"]))


def test_eps_sweep_table_is_mean_and_sd_of_the_draws():
    """The table's numbers are each setting's draws aggregated (the sample sd), computed here independently."""
    args = eps_sweep.build_parser().parse_args(["s.zarr", "--eps", "1", "inf", "--method", "sgd", "--draws", "3"])
    records = [dict(method="sgd", epsilon=e, achieved_epsilon=e, delta=1e-5, noise_multiplier=s, learning_rate=lr,
                    steps=100, clip=1.0, center_share=0.05, accuracy=a)
               for e, s, lr, a in [(1, 2.5, 0.3, 0.50), (1, 2.5, 0.4, 0.60), (1, 2.5, 0.3, 0.70),
                                   (float("inf"), 0.0, 1.0, 0.9), (float("inf"), 0.0, 1.0, 0.9),
                                   (float("inf"), 0.0, 1.0, 0.9)]]
    summary = eps_sweep.summarize(records, args)
    text = eps_sweep.format_table(summary, 12.5, 1e-5, n_settings=2, draws=3)
    lines = text.splitlines()
    assert len(lines) == 5  # header, rule, 2 settings, the cost
    assert lines[2].split() == ["sgd", "1", "1.000", "2.5", "0.3–0.4", "100", "1", "60.00", "±",
                                f"{statistics.stdev([50, 60, 70]):.2f}", "3"]
    assert lines[3].split()[:2] == ["sgd", "inf"] and lines[3].split()[-4:] == ["90.00", "±", "0.00", "3"]
    assert lines[4].endswith("Releasing all 6 fits (2 settings × 3 draws): ε = 12.500 at δ = 1e-05 (composition)")


def test_experiment_help_answers_before_importing_jax_or_torch():
    """--help parses arguments only: no privlin, JAX, torch or matplotlib loaded (a fresh interpreter)."""
    code = """
import runpy, sys
for name in ("eps_sweep", "quickstart", "reproduce_mehta", "reproduce_randp"):
    sys.argv = [name, "--help"]
    try:
        runpy.run_module("experiments." + name, run_name="__main__")
    except SystemExit as e:
        assert e.code == 0, (name, e.code)
print("LOADED", sorted(m for m in ("privlin", "jax", "torch", "timm", "sklearn", "matplotlib") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))})
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("usage: python -m experiments.") == 4 and "--no-progress" in out.stdout
    assert out.stdout.strip().endswith("LOADED []")


@pytest.fixture
def every_status_shown(monkeypatch):
    """Show every progress line at once (not after 2 s), so that a fast test sees what a slow run shows."""
    from stores import cli

    monkeypatch.setattr(cli, "status", functools.partial(cli.status, after=0.0))


def test_eps_sweep_progress_by_default_and_silent_with_no_progress(store, capsys, every_status_shown):
    argv = ["--eps", "8", "--method", "adam1", "--seed", "0"]
    assert eps_sweep.main([store()] + argv) == 0
    err = capsys.readouterr().err
    for stage in ("loading privlin (JAX)", "opening ", "sweeping 1 private fits on [train]",
                  "composing the ledger of "):
        assert f"{stage}" in err and err.count(stage) == 2  # "... " when shown, then its time when done
    assert eps_sweep.main([store(), "--no-progress"] + argv) == 0
    out = capsys.readouterr()
    assert out.err == "" and "Releasing all 1 fits" in out.out


def test_quickstart_pieces_on_a_tiny_store(tmp_path, store, capsys, figures):
    path = store(k=10, n=(200, 60))
    assert quickstart.earlier_entries(path, "train") == 0
    run = quickstart.run_store(path, "toy", seeds=2, progress=False)
    assert capsys.readouterr().err == ""  # progress=False: silent
    assert len(run.rows) == 2 * 2 * len(quickstart.EPSILONS) and run.knn > 0.9  # separable blobs
    # what the run says it spent is what the ledger was charged: the sweep's composition, then the k-NN release
    entries = PrivacyLedger.for_split(path, "train").entries
    assert [e.mechanism for e in entries] == ["privlin.sweep/adam1+sgd", "privlin.knn/accuracy"]
    assert run.epsilon == entries[0].epsilon and run.fits == 20
    assert quickstart.earlier_entries(path, "train") == 2 and "already have 2 ledger entries" in capsys.readouterr().err
    summary = quickstart.summarize(run.rows)
    assert {s["draws"] for s in summary} == {2} and len(summary) == 10
    for s in summary:
        accs = [100 * r["accuracy"] for r in run.rows if (r["method"], r["epsilon"]) == (s["method"], s["epsilon"])]
        assert s["accuracy_pct"] == pytest.approx(statistics.mean(accs))
        assert s["sd_pct"] == pytest.approx(statistics.stdev(accs))
    table = quickstart.format_table(summary, {"toy": run.knn})
    assert table.count("\n") == 3 and "| toy / sgd |" in table and " ± " in table
    png = plot_privacy_curves(summary, tmp_path / "q.png", references={"toy k-NN (non-private)": 100 * run.knn},
                              delta=1e-5, note="cost")
    assert os.path.getsize(png) > 10_000
    curves = _curves(figures[-1])
    assert sorted(curves) == ["toy / adam1", "toy / sgd"]
    assert all(len(x) == len(quickstart.EPSILONS) and err is not None for x, _, err in curves.values())
    for s in quickstart.fixed_settings():  # fixed in advance: the settings do not depend on data
        assert s["epsilon"] in quickstart.EPSILONS and s["delta"] == quickstart.DELTA
        assert set(s) == {"method", "epsilon", "delta"}  # everything else: the plan's defaults


def test_eps_sweep_refused_budget_is_one_line(store, capsys):
    """A split whose ledger cap the sweep would pass: one line naming the refusal, exit 2, nothing charged."""
    path = store()
    PrivacyLedger.for_split(path, "train").set_cap(1.0, 1e-5, note="test")
    assert eps_sweep.main([path, "--eps", "8", "--method", "adam1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m experiments.eps_sweep: error: ") and "\n" not in err and "cap" in err
    assert len(PrivacyLedger.for_split(path, "train")) == 0
