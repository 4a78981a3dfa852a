"""Public statistics: digits with 20% of train as a public split, private fits with the preprocessing
statistics from it vs the private defaults vs non-private, and with public sources from another distribution.

    PYTHONPATH=$PWD python benchmarks/bench_public.py --seeds 5 --out /tmp/bench_public   # BENCHMARKS.md: its time

Stores: scikit-learn's digits featurized with ``pixels`` (3072-d) and ``vip_toy`` (128-d) by ``featurize``
(as the quickstart builds them), re-split with seed 0: ``train`` (80% of train, the private rows), ``public``
(the other 20%, its own items), ``test``.  Public sources compared (the private rows are always the same):

* ``public split`` — the store's ``public`` split (same distribution, content identity checked);
* ``other digits`` — the public split's rows of digits 0-4 only (another distribution: half the classes);
* ``synthetic`` — features of 288 synthetic images (smoothed noise, no digit), a store of their own;
* ``shifted`` — the public split's rows plus a fixed offset of the typical row norm along a random direction
  (another distribution: a public centre far from the private one), given as an array;
* ``public split + start``, ``other digits + start`` — the same rows with their labels (the store split; the
  array as ``(X, y)``) and ``public_start=True``: the DP steps start from a non-private fit on them
  (:func:`privlin.chain.public_start`);
* ``start alone`` — the start of ``public split + start`` itself: learning rate 1e-20, so the DP steps move no
  weight (a non-private fit on the 288 public rows, the same at every ε);
* ``public split + start + clip``, ``other digits + start + clip`` — as the ``+ start`` rows with ``public_clip``
  (the default since it was measured; the ``+ start`` rows set it False): every private gradient multiplied before
  the clip by C over the public rows' held-out gradient norm at the start (:func:`privlin.chain.clip_gain`).

Every fit is ``DPLinearClassifier(method="sgd")`` with its defaults, δ = 1e-5, each seed its own noise; accuracy
on ``test``.  ``--average`` sets every fit's ``average`` (iterate averaging, private defaults included);
``--rate-scale`` multiplies the rate rule's ρ (:data:`privlin.defaults.LOGIT_NOISE`, patched in
:mod:`privlin.releases.rates`, which reads it: so every default rate) for a
scan; ``--steps`` sets every fit's step count.  Prints a markdown table (mean ± sd over seeds, %; with a public source, ``(k/n)``: the seeds whose
public check passed, :mod:`privlin.releases.public_check`) and writes it with the raw rows to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import math
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
    def text(a):
        return np.asarray(a, dtype=object).astype("U")

    ids, items = text(tr.ids[:]), text(tr.items[:])
    priv, pub = train_test_split(np.arange(len(y)), test_size=fraction, stratify=y, random_state=seed)
    te = src["test"]
    parts = {"train": (X[priv], y[priv], ids[priv], items[priv]), "public": (X[pub], y[pub], ids[pub], items[pub]),
             "test": (np.asarray(te.features[:]), np.asarray(te.labels[:]), text(te.ids[:]), text(te.items[:]))}
    for name, (Xs, ys, ids_s, items_s) in parts.items():
        w = stores.create_split(out, name, n_rows=len(ys), dim=Xs.shape[1], dtype=str(Xs.dtype), shard_rows=512,
                                attrs=dict(tr.attrs.get("provenance", {}) or {"backbone": tr.attrs.get("backbone")}),
                                root_attrs=dict(src.attrs))
        for i in w.pending():
            a, b = w.shard_bounds(i)
            w.write_shard(i, Xs[a:b], ys[a:b], ids_s[a:b], items=items_s[a:b])
        assert w.finalize()
    return out


def synthetic_store(backbone: str, cache: str, n: int = 288, seed: int = 0) -> str:
    """``n`` synthetic 8×8 images (smoothed Gaussian noise: blobs on a dark ground, no digit) featurized with
    ``backbone``: public rows of another distribution, a store of their own."""
    import featurize
    from PIL import Image
    from scipy.ndimage import gaussian_filter

    root = os.path.join(cache, "synth")
    folder = os.path.join(root, "train", "0")
    if not os.path.isdir(folder):
        os.makedirs(folder)
        rng = np.random.default_rng(seed)
        for i in range(n):
            z = gaussian_filter(rng.normal(size=(8, 8)), 1.0)
            img = np.clip((z - z.mean()) / (z.std() + 1e-9) * 160 + 40, 0, 255).astype(np.uint8)
            Image.fromarray(img, "L").save(os.path.join(folder, f"s{i:03d}.png"))
    path = os.path.join(cache, f"{backbone}_synth.zarr")
    featurize.extract(backbone, f"imagefolder:{root}", out=path, device="cpu", num_workers=0, batch_size=256,
                      progress=False)
    return path


def public_sources(path: str, synthetic: str, seed: int = 0) -> dict:
    """The public sources compared: ``{name: what DPLinearClassifier(public=...) takes}``."""
    import stores

    st = stores.open(path)
    pub = st["public"]
    X, y = np.asarray(pub.features[:], np.float32), np.asarray(pub.labels[:])
    norms = np.linalg.norm(X, axis=1)
    u = np.random.default_rng(seed).normal(size=X.shape[1])
    shift = (u / np.linalg.norm(u) * np.median(norms)).astype(np.float32)
    return {"public split": "public", "other digits": X[y < 5], "synthetic": synthetic, "shifted": X + shift,
            "public split + start": "public", "other digits + start": (X[y < 5], y[y < 5]), "start alone": "public",
            "public split + start + clip": "public", "other digits + start + clip": (X[y < 5], y[y < 5])}


#: The sources whose fits start from the public rows' fit (``public_start=True``), with their own settings.
STARTED = {"public split + start": {"public_clip": False}, "other digits + start": {"public_clip": False},
           "start alone": {"learning_rate": 1e-20, "public_clip": False},
           "public split + start + clip": {"public_clip": True}, "other digits + start + clip": {"public_clip": True}}


def accuracies(path: str, public, seeds: int, epsilons=EPSILONS, **params) -> tuple[dict, int]:
    """``({ε: [accuracy of each seed]}, d')`` of ``DPLinearClassifier(method="sgd", **params)`` defaults on the
    store's ``train`` split (one sweep: every (ε, seed) its own noise, from base key 0 so that a rerun repeats it),
    with ``public`` (None: the private defaults); d': the model's inputs (a public subspace's rank)."""
    from privlin.sweep import sweep

    settings = [dict(method="sgd", epsilon=e, delta=DELTA, **params) for e in epsilons] * seeds
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # arrays carry no content identity: warned, and known here
        res = sweep(path, settings=settings, eval_public=True, progress=False, public=public, random_state=0)
    out: dict = {}
    for r in res.records:
        out.setdefault(r["epsilon"], []).append(r["accuracy"])
        check = r["values"].get("public_check")  # the public check's outcome (privlin.releases.public_check)
        if check is not None:
            out.setdefault(("passed", r["epsilon"]), []).append(float(check[2]))
    return out, res.records[0]["plan"].model_dim


def run(backbones, seeds: int, cache: str, only=None, every=None, **params) -> list[dict]:
    """One row per (backbone, ε, source): accuracy mean and sd over seeds (%), the model's inputs d' and the
    seconds it took; ``params``: settings every fit with a public source takes (e.g. ``public_rank``), ``every``:
    settings every fit takes (e.g. ``average``)."""
    every = dict(every or {})
    rows = []
    for backbone in backbones:
        path = with_public_split(featurized(backbone, cache), os.path.join(cache, f"{backbone}_public_split.zarr"))
        sources = {"private defaults": None, **public_sources(path, synthetic_store(backbone, cache))}
        sources = {k: v for k, v in sources.items() if only is None or k in only}
        exact = accuracies(path, None, 1, (math.inf,))[0][math.inf][0]
        for name, source in sources.items():
            t = time.perf_counter()
            extra = {**params, **({"public_start": True, **STARTED[name]} if name in STARTED else {})}
            acc, dim = accuracies(path, source, seeds, **every, **(extra if source is not None else {}))
            took = time.perf_counter() - t
            for e in EPSILONS:
                a = 100 * np.asarray(acc[e])
                rows.append(dict(backbone=backbone, source=name, epsilon=e, mean=float(a.mean()),
                                 sd=float(a.std(ddof=1)) if len(a) > 1 else 0.0, seeds=len(a),
                                 non_private=100 * exact, seconds=took, model_dim=int(dim),
                                 checks_passed=None if ("passed", e) not in acc else int(sum(acc["passed", e]))))
            print(f"{backbone:8} {name:16} d'={dim:<5} " + " ".join(f"{r['mean']:5.1f}" for r in rows[-len(EPSILONS):])
                  + f"   ({took:.0f} s)", flush=True)
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: one row per (backbone, source), one column per ε (mean ± sd over seeds, %), non-private last."""
    head = ("| features | statistics from | d' | " + " | ".join(f"ε={e:g}" for e in EPSILONS) + " | non-private |\n"
            "|---|---|---:|" + "---:|" * (len(EPSILONS) + 1))
    lines = [head]
    by = {}
    for r in rows:
        by.setdefault((r["backbone"], r["source"]), {})[r["epsilon"]] = r
    for (backbone, source), cells in by.items():
        dim = next(iter(cells.values())).get("model_dim", "")
        lines.append(f"| {backbone} | {source} | {dim} | " + " | ".join(f"{cells[e]['mean']:.1f} ± {cells[e]['sd']:.1f}"
                                                           + _passed(cells[e]) for e in EPSILONS)
                     + f" | {next(iter(cells.values()))['non_private']:.1f} |")
    return "\n".join(lines)


def _passed(row: dict) -> str:
    """`` (k/n)``: of the row's n seeds, k whose public check passed (privlin.releases.public_check); empty
    where the fits took no check."""
    k = row.get("checks_passed")
    return "" if k is None else f" ({k}/{row['seeds']})"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--backbones", default=",".join(BACKBONES))
    p.add_argument("--cache", default=os.path.join("runs", "bench_public"), help="stores (reused)")
    p.add_argument("--out", default=None, help="folder for table.md and rows.json")
    p.add_argument("--sources", default=None, help="comma-separated names of the sources to compare (default: all)")
    p.add_argument("--public-rank", default=None,
                   help="public_rank of every fit with a public source: a rank, or 'rule' (privlin.releases.project's "
                        "rule); default: the estimator's (no subspace)")
    p.add_argument("--average", default=None, help="every fit's average: a share of the steps, or 'ema'")
    p.add_argument("--rate-scale", type=float, default=None, help="the rate rule's ρ times this (a scan)")
    p.add_argument("--steps", type=int, default=None, help="every fit's steps (default: the method's)")
    args = p.parse_args(argv)
    if args.rate_scale is not None:
        from privlin.releases import rates

        rates.LOGIT_NOISE *= args.rate_scale
    every = {} if args.average is None else {"average": args.average if args.average == "ema" else
                                             float(args.average)}
    if args.steps is not None:
        every["steps"] = args.steps
    os.makedirs(args.cache, exist_ok=True)
    os.environ.setdefault("PRIVLIN_LEDGER_HOME", os.path.join(args.cache, "ledger-home"))  # not the user's home
    t = time.perf_counter()
    rows = run(args.backbones.split(","), args.seeds, args.cache,
               None if args.sources is None else args.sources.split(","), every,
               **({} if args.public_rank is None else
                  {"public_rank": None if args.public_rank == "rule" else int(args.public_rank)}))
    text = table(rows)
    print(text + f"\n\n({time.perf_counter() - t:.0f} s)")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "table.md"), "w") as f:
            f.write(text + "\n")
        with open(os.path.join(args.out, "rows.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
