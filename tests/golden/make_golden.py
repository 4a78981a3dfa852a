"""Record fixed-key fit results, so a restructuring of privlin can show it changed no number.

Run from the repository root (``PYTHONPATH=$PWD python tests/golden/make_golden.py``); it writes
``tests/golden/golden.npz`` beside this file.  ``tests/test_golden.py`` refits every case with the same
``random_state`` and compares.  The cases (:func:`cases`) are shared by both, so what is recorded is what is checked.
Secure mode is not recorded: it refuses a seed (its noise is from ``os.urandom``), so it has no fixed result.
"""
from __future__ import annotations

import os
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/: conftest sets the suite's JAX flags before JAX loads
import conftest  # noqa: E402,F401

import numpy as np  # noqa: E402

GOLDEN = os.path.join(HERE, "golden.npz")
SEED = 1234


def dataset(n=300, d=8, k=3, seed=0):
    """Small blobs with a common offset (so the radial and re-centering releases have something to find)."""
    X, y = conftest._blobs(n, d=d, k=k, seed=seed, scale=1.5)
    return (X + 3.0).astype(np.float32), y


def cases() -> dict:
    out = {}
    for method in ("adam1", "sgd", "minibatch"):
        for eps in (0.5, 2.0, 8.0):
            p = {"method": method, "epsilon": eps}
            if method == "minibatch":
                p.update(batch_size=64, steps=20)
            out[f"{method}_eps{eps:g}"] = p
    out["sgd_no_intercept"] = {"method": "sgd", "epsilon": 2.0, "fit_intercept": False}
    out["sgd_recenter"] = {"method": "sgd", "epsilon": 1.0, "recenter": True}
    out["sgd_no_center"] = {"method": "sgd", "epsilon": 2.0, "center": False}
    out["sgd_sigma_given"] = {"method": "sgd", "epsilon": None, "noise_multiplier": 3.0,
                              "center_noise_multiplier": 20.0, "steps": 30}
    out["sgd_streamed"] = {"method": "sgd", "epsilon": 2.0, "steps": 10, "memory_limit": 1, "block_rows": 128}
    out["adam1_streamed"] = {"method": "adam1", "epsilon": 2.0, "memory_limit": 1, "block_rows": 128}
    out["sgd_replace_one"] = {"method": "sgd", "epsilon": 4.0, "neighbouring": "replace_one"}
    return out


SWEEP = {"epsilon": [1.0, 4.0], "method": ["adam1", "sgd"]}
STORE_FIT = {"epsilon": 2.0, "method": "sgd", "classes": [0, 1, 2]}


def fit_case(params):
    from privlin import DPLinearClassifier

    X, y = dataset()
    est = DPLinearClassifier(**params, classes=[0, 1, 2], random_state=SEED)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    return est.coef_transformed_, est.intercept_transformed_


def sweep_case():
    import privlin.sweep

    X, y = dataset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = privlin.sweep.sweep((X, y), random_state=SEED, classes=[0, 1, 2], **SWEEP)
    return [(np.asarray(res.model(i).coef_transformed_), np.asarray(res.model(i).intercept_transformed_))
            for i in range(len(res))]


def store_case():
    import privlin

    X, y = dataset()
    with tempfile.TemporaryDirectory() as tmp:
        store = conftest._write_store(os.path.join(tmp, "g.zarr"), {"train": (X, y)})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = privlin.fit(store, random_state=SEED, **STORE_FIT)
    return model.coef_transformed_, model.intercept_transformed_


def compute() -> dict:
    arrays = {}
    for name, params in cases().items():
        arrays[f"{name}/coef"], arrays[f"{name}/intercept"] = fit_case(params)
    for i, (c, b) in enumerate(sweep_case()):
        arrays[f"sweep{i}/coef"], arrays[f"sweep{i}/intercept"] = c, b
    arrays["store/coef"], arrays["store/intercept"] = store_case()
    return arrays


if __name__ == "__main__":
    got = compute()
    np.savez_compressed(GOLDEN, **got)
    print(f"wrote {GOLDEN}: {len(got)} arrays")
