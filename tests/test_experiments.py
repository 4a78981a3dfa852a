"""experiments: reproduction scripts on tiny synthetic stores (tables beside the papers'), their build hints
without data, the ε-sweep CLI and the quickstart's pieces (no featurization: that runs in CI's install step)."""
import math
import os

import numpy as np
import pytest

import stores
from experiments import eps_sweep, quickstart, reproduce_mehta, reproduce_randp
from experiments.plotting import plot_privacy_curves


def _store(path, n_train=120, n_test=60, d=8, k=3, seed=0, splits=("train", "test")):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(k, d)) * 3
    for name, n in zip(splits, (n_train, n_test)):
        y = rng.integers(0, k, n)
        X = (centers[y] + rng.normal(size=(n, d))).astype(np.float32)
        w = stores.create_split(path, name, n_rows=n, dim=d, dtype="float32", shard_rows=64,
                                root_attrs={"classes": [str(c) for c in range(k)], "backbone": "toy",
                                            "dataset": "blobs"})
        for i in w.pending():
            a, b = w.shard_bounds(i)
            w.write_shard(i, X[a:b], y[a:b], np.array([f"{name}{j}" for j in range(a, b)]))
        w.finalize()
    return str(path)


def test_reproduce_mehta_prints_ours_beside_the_paper(tmp_path, capsys):
    path = _store(tmp_path / "c10.zarr")
    assert reproduce_mehta.main(["--cifar10", path, "--store-dir", str(tmp_path / "none"), "--seed", "0"]) == 0
    out = capsys.readouterr()
    lines = [ln for ln in out.out.splitlines() if ln.startswith("| cifar10")]
    assert len(lines) == 6  # 5 ε + non-private
    assert "| 8 | 8.000 | 1e-06 | 95.20 |" in out.out and "non-private" in out.out
    ours = [float(ln.split("|")[-2]) for ln in lines]
    assert all(0 <= a <= 100 for a in ours) and ours[-1] > 80  # separable blobs
    assert "featurize --backbone vit_b16_in21k --head cls --dataset imagenet" in out.err


def test_reproduce_randp_uses_the_papers_sigmas_and_our_accountant_agrees(tmp_path, capsys):
    path = _store(tmp_path / "inet.zarr", splits=("train", "val"))
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
    for s, eps in zip(reproduce_randp.cifar10_settings(), reproduce_randp.CIFAR10_TABLE22):
        # Table 22's σ are integers rounded up: exact GDP never finds more than the stated ε, and at most
        # 20% less (σ=7 for ε=8 gives 6.65: the rounding matters most where σ is small)
        assert 0.8 * eps <= s.achieved_epsilon() <= eps


def test_eps_sweep_cli_with_private_selection_writes_csv_and_png(tmp_path, capsys):
    path = _store(tmp_path / "s.zarr", splits=("train", "test"))
    _store(tmp_path / "s.zarr", n_train=40, seed=0, splits=("val",))
    out = tmp_path / "out"
    assert eps_sweep.main([path, "--eps", "1", "8", "--method", "adam1", "sgd", "--steps", "5", "--lr", "0.5",
                           "--val-split", "val", "--seed", "0", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "privately selected on 'val'" in text and "releasing all 4 settings" in text
    assert (out / "sweep.csv").read_text().count("\n") == 5 and (out / "sweep.png").stat().st_size > 10_000


def test_quickstart_pieces_on_a_tiny_store(tmp_path):
    path = _store(tmp_path / "q.zarr", k=10, n_train=200)
    rows, knn = quickstart.run_store(path, "toy", seeds=2)
    assert len(rows) == 2 * 2 * len(quickstart.EPSILONS) and 0 <= knn <= 1
    summary = quickstart.summarize(rows)
    assert {s["seeds"] for s in summary} == {2} and len(summary) == 10
    table = quickstart.format_table(summary, {"toy": knn})
    assert table.count("\n") == 3 and "| toy / sgd |" in table
    png = plot_privacy_curves([{**s, "label": f"{s['backbone']} / {s['method']}"} for s in summary],
                              tmp_path / "q.png", references={"toy k-NN (non-private)": knn}, delta=1e-5)
    assert os.path.getsize(png) > 10_000
    for s in quickstart.fixed_settings():  # fixed in advance: the settings do not depend on data
        assert s.epsilon in quickstart.EPSILONS and s.delta == quickstart.DELTA and not math.isinf(s.epsilon)
