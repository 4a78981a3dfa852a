"""Public statistics (issue 48): digits with 20% of train as a public split, private fits with the preprocessing
statistics from it vs the private defaults vs non-private, and with public sources from another distribution.

    PYTHONPATH=$PWD python benchmarks/bench_public.py --seeds 5 --out /tmp/bench_public   # a few minutes, 2 CPUs

Stores: scikit-learn's digits featurized with ``pixels`` (3072-d) and ``vip_toy`` (128-d) by ``featurize``
(as the quickstart builds them), re-split with seed 0: ``train`` (80% of train, the private rows), ``public``
(the other 20%, its own items), ``test``.  Public sources compared (the private rows are always the same):

* ``public split`` — the store's ``public`` split (same distribution, content identity checked);
* ``other digits`` — the public split's rows of digits 0-4 only (another distribution: half the classes);
* ``shifted`` — the public split's rows plus a fixed offset of the typical row norm along a random direction
  (another distribution: a public centre far from the private one), given as an array.

Every fit is ``DPLinearClassifier(method="sgd")`` with its defaults, δ = 1e-5, each seed its own noise; accuracy
on ``test``.  Prints a markdown table (mean ± sd over seeds, %) and writes it with the raw rows to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

EPSILONS = (0.25, 0.5, 1.0, 2.0, 8.0)
DELTA = 1e-5
BACKBONES = ("pixels", "vip_toy")
PUBLIC_FRACTION = 0.2


def featurized(backbone: str, cache: str) -> str:
    """digits featurized with ``backbone`` (resumes, skips when done)."""
    import featurize

    path = os.path.join(cache, f"{backbone}_digits.zarr")
    featurize.extract(backbone, "digits", out=path, device="cpu", num_workers=0, batch_size=256, progress=False)
    return path


def with_public_split(path: str, out: str, fraction: float = PUBLIC_FRACTION, seed: int = 0) -> str:
    """A copy of the store at ``path`` whose train split is cut (stratified, ``seed``) into ``train`` and
    ``public``; ``test`` copied; every row keeps its item, id and label."""
    import stores
    from sklearn.model_selection import train_test_split

    if os.path.exists(out):
        return out
    src = stores.open(path)
    tr = src["train"]
    X, y = np.asarray(tr.features[:]), np.asarray(tr.labels[:])
    ids, items = np.asarray(tr.ids[:], dtype=object).astype("U"), np.asarray(tr.items[:], dtype=object).astype("U")
    priv, pub = train_test_split(np.arange(len(y)), test_size=fraction, stratify=y, random_state=seed)
    te = src["test"]
    parts = {"train": (X[priv], y[priv], ids[priv], items[priv]), "public": (X[pub], y[pub], ids[pub], items[pub]),
             "test": (np.asarray(te.features[:]), np.asarray(te.labels[:]), np.asarray(te.ids[:], dtype=object).astype("U"),
                      np.asarray(te.items[:], dtype=object).astype("U"))}
    for name, (Xs, ys, ids_s, items_s) in parts.items():
        w = stores.create_split(out, name, n_rows=len(ys), dim=Xs.shape[1], dtype=str(Xs.dtype), shard_rows=512,
                                attrs=dict(tr.attrs.get("provenance", {}) or {"backbone": tr.attrs.get("backbone")}),
                                root_attrs=dict(src.attrs))
        for i in w.pending():
            a, b = w.shard_bounds(i)
            w.write_shard(i, Xs[a:b], ys[a:b], ids_s[a:b], items=items_s[a:b])
        assert w.finalize()
    return out


def public_sources(path: str, seed: int = 0) -> dict:
    """The public sources compared: ``{name: what DPLinearClassifier(public=...) takes}``."""
    import stores

    st = stores.open(path)
    pub = st["public"]
    X, y = np.asarray(pub.features[:], np.float32), np.asarray(pub.labels[:])
    norms = np.linalg.norm(X, axis=1)
    u = np.random.default_rng(seed).normal(size=X.shape[1])
    shift = (u / np.linalg.norm(u) * np.median(norms)).astype(np.float32)
    return {"public split": "public", "other digits": X[y < 5], "shifted": X + shift}
