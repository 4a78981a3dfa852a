"""experiments: reproduction scripts on tiny synthetic stores (tables beside the papers'), their build hints
without data, the ε-sweep CLI and the quickstart's pieces (no featurization: that runs in CI's install step)."""
import os

import pytest

from experiments import eps_sweep, quickstart, reproduce_mehta, reproduce_randp
from experiments.plotting import plot_privacy_curves


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


def test_eps_sweep_cli_with_private_selection_writes_csv_and_png(tmp_path, capsys, store):
    path = store(splits=("train", "test", "val"), n=(120, 60, 40))
    out = tmp_path / "out"
    assert eps_sweep.main([path, "--eps", "1", "8", "--method", "adam1", "sgd", "--steps", "5", "--lr", "0.5",
                           "--val-split", "val", "--seed", "0", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "privately selected on 'val'" in text and "releasing all 4 settings" in text
    assert (out / "sweep.csv").read_text().count("\n") == 5 and (out / "sweep.png").stat().st_size > 10_000


def test_quickstart_pieces_on_a_tiny_store(tmp_path, store):
    path = store(k=10, n=(200, 60))
    rows, knn = quickstart.run_store(path, "toy", seeds=2)
    assert len(rows) == 2 * 2 * len(quickstart.EPSILONS) and knn > 0.9  # separable blobs
    summary = quickstart.summarize(rows)
    assert {s["seeds"] for s in summary} == {2} and len(summary) == 10
    table = quickstart.format_table(summary, {"toy": knn})
    assert table.count("\n") == 3 and "| toy / sgd |" in table
    png = plot_privacy_curves([{**s, "label": f"{s['backbone']} / {s['method']}"} for s in summary],
                              tmp_path / "q.png", references={"toy k-NN (non-private)": knn}, delta=1e-5)
    assert os.path.getsize(png) > 10_000
    for s in quickstart.fixed_settings():  # fixed in advance: the settings do not depend on data
        assert s["epsilon"] in quickstart.EPSILONS and s["delta"] == quickstart.DELTA
        assert set(s) == {"method", "epsilon", "delta", "center_share"}  # everything else: the plan's defaults
