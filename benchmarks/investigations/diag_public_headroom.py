"""How much can the DP steps add to a public start on `pixels` at ε = 1? (issue 48, goal 1; BENCHMARKS.md, "What the
DP steps can add to a public start").  A diagnosis read on the test split; nothing was set from it.

    python benchmarks/investigations/diag_public_headroom.py [--store PATH] [--seeds 3] [--parts snr,stack,newton,gep]

The store is ``bench_public.py``'s ``pixels_public_split.zarr`` (digits re-split: 1149 private rows, 288 public, 360
test).  Everything here is a NumPy prototype outside privlin, so that the private steps' form can change freely: rows
standardized by the public rows' per-dimension moments and scaled to the public median norm; a public model (L2
logistic regression on the public rows, C by 5-fold log-loss); the private model on ``[U'z, L(z)/10, 1]``, U the top
r principal directions of the public rows and L the public model's logits (cross-fitted for the public rows), so
that ``W0 = [0; 10·I; 0]`` is the public model exactly and the private steps fit only (r + k + 1)·k weights.  Every
private release is a sum of per-row gradients clipped at C = 1 plus N(0, σ²C²) per coordinate; T such releases
compose to one Gaussian mechanism of μ = √T/σ, and σ is set so that its exact (ε, δ) curve (Balle & Wang 2018)
meets (ε, 1e-5) — checked against dp-accounting's PLD once per run.  Parts:

* ``snr``: the exact clipped gradient sum over the private rows at the start against the noise that all of ε = 1
  spent in one release puts in the same coordinates;
* ``stack``: full-batch DP-GD, T = 100, from ``W0`` (ranks, rates, a gain on the gradients before the clip as
  ``public_clip`` does), the mean of the last half of the iterates;
* ``newton``: rounds of one noisy gradient preconditioned by the public rows' Hessian at the current weights (+ λI);
* ``gep``: as ``newton``, with the gradient projected on the top m directions of the public rows' per-row gradients
  (gradient embedding perturbation, Yu et al. 2021), so the noise is m-dimensional.
"""
from __future__ import annotations

import argparse
import functools
import os
import sys

import numpy as np
from scipy import optimize, stats

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
K, DELTA, CLIP = 10, 1e-5, 1.0


def gaussian_delta(eps: float, mu: float) -> float:
    """δ(ε) of one Gaussian mechanism of sensitivity 1 and noise 1/μ (Balle & Wang 2018, Theorem 8)."""
    return stats.norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)


@functools.lru_cache(None)
def mu_for(eps: float) -> float:
    """The μ whose Gaussian mechanism meets (ε, DELTA) exactly; ∞ at ε = ∞."""
    if not np.isfinite(eps):
        return np.inf
    return optimize.brentq(lambda mu: gaussian_delta(eps, mu) - DELTA, 1e-3, 50.0, xtol=1e-12)


def check_accounting(eps: float = 1.0, steps: int = 100) -> float:
    """ε of ``steps`` Gaussian releases at σ = √steps/μ by dp-accounting's PLD (independent of the closed form)."""
    from dp_accounting import dp_event, pld

    acc = pld.PLDAccountant()
    acc.compose(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(np.sqrt(steps) / mu_for(eps)), steps))
    return acc.get_epsilon(DELTA)


def softmax(a):
    a = a - a.max(1, keepdims=True)
    p = np.exp(a)
    return p / p.sum(1, keepdims=True)


class Problem:
    """The stores' rows in the private model's coordinates for a public subspace of rank ``r``."""

    def __init__(self, path: str, r: int):
        import stores
        from sklearn.linear_model import LogisticRegression
        from sklearn.model_selection import GridSearchCV, StratifiedKFold

        st = stores.open(path)
        get = lambda s: (np.asarray(st[s].features[:], np.float64), np.asarray(st[s].labels[:]))  # noqa: E731
        (Xtr, self.ytr), (Xp, self.yp), (Xte, self.yte) = get("train"), get("public"), get("test")
        c, sd = Xp.mean(0), Xp.std(0)
        sd = np.maximum(sd, 0.1 * np.median(sd))
        scale = np.median(np.linalg.norm((Xp - c) / sd, axis=1))
        Ztr, Zp, Zte = ((X - c) / sd / scale for X in (Xtr, Xp, Xte))
        grid = GridSearchCV(LogisticRegression(max_iter=3000), {"C": [0.01, 0.1, 1, 10, 100]}, cv=5,
                            scoring="neg_log_loss").fit(Zp, self.yp)
        pub = grid.best_estimator_
        logits = lambda m, Z: Z @ m.coef_.T + m.intercept_  # noqa: E731
        held = np.zeros((len(Zp), K))  # each public row's logits from the fold model that left it out
        for tr, te in StratifiedKFold(5, shuffle=True, random_state=0).split(Zp, self.yp):
            held[te] = logits(LogisticRegression(C=pub.C, max_iter=3000).fit(Zp[tr], self.yp[tr]), Zp[te])
        U = np.linalg.svd(Zp, full_matrices=False)[2][:r].T
        feat = lambda Z, L: np.hstack([Z @ U, L / 10, np.ones((len(Z), 1))])  # noqa: E731
        self.F, self.Fp, self.Ft = feat(Ztr, logits(pub, Ztr)), feat(Zp, held), feat(Zte, logits(pub, Zte))
        self.W0 = np.zeros((self.F.shape[1], K))
        self.W0[r:r + K] = 10 * np.eye(K)
        self.public_accuracy, self.public_C, self.r = pub.score(Zte, self.yte), pub.C, r
        self.ceiling = LogisticRegression(C=10, max_iter=5000).fit(self.F[:, :-1], self.ytr).score(
            self.Ft[:, :-1], self.yte)

    def accuracy(self, W) -> float:
        return float((np.argmax(self.Ft @ W, 1) == self.yte).mean())

    def clipped(self, W, gain=1.0):
        """(Σ clipped per-row gradients, per-row gradient norms): each row's (p − y) ⊗ f times ``gain``, clipped
        at CLIP, divided by ``gain`` (so the sum's sensitivity is CLIP/gain)."""
        G = softmax(self.F @ W) - np.eye(K)[self.ytr]
        norms = np.linalg.norm(self.F, axis=1) * np.linalg.norm(G, axis=1)
        s = np.minimum(1.0, CLIP / np.maximum(gain * norms, 1e-12))
        return self.F.T @ (G * s[:, None]), norms

    def hessian(self, W, lam):
        """The public rows' mean softmax Hessian at W (row-major (D, k) order) + λI."""
        P = softmax(self.Fp @ W)
        D = self.Fp.shape[1]
        H = np.zeros((D * K, D * K))
        for f, p in zip(self.Fp, P):
            H += np.kron(np.outer(f, f), np.diag(p) - np.outer(p, p))
        return H / len(self.Fp) + lam * np.eye(D * K)


def dp_gd(pb: Problem, eps, lr, gain, seed, steps=100):
    rng = np.random.default_rng(seed)
    sigma, n = np.sqrt(steps) / mu_for(eps), len(pb.F)
    W, tail = pb.W0.copy(), np.zeros_like(pb.W0)
    for t in range(steps):
        g = pb.clipped(W, gain)[0] + sigma * CLIP / gain * rng.normal(size=W.shape)
        W = W - lr * g / n
        if t >= steps // 2:
            tail += W / (steps - steps // 2)
    return pb.accuracy(tail)


def newton(pb: Problem, eps, rounds, lam, seed, m=0):
    rng = np.random.default_rng(seed)
    sigma, n = np.sqrt(rounds) / mu_for(eps), len(pb.F)
    W = pb.W0.copy()
    for _ in range(rounds):
        H = pb.hessian(W, lam)
        g = pb.clipped(W)[0].reshape(-1)
        if m:
            Gp = softmax(pb.Fp @ W) - np.eye(K)[pb.yp]
            B = np.linalg.svd(np.einsum("nd,nk->ndk", pb.Fp, Gp).reshape(len(pb.Fp), -1),
                              full_matrices=False)[2][:m].T
            gm = (g @ B + sigma * CLIP * rng.normal(size=m)) / n
            step = B @ np.linalg.solve(B.T @ H @ B, gm)
        else:
            step = np.linalg.solve(H, (g + sigma * CLIP * rng.normal(size=g.shape)) / n)
        W = W - step.reshape(W.shape)
    return pb.accuracy(W)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", default="/tmp/avg_cache/pixels_public_split.zarr")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--parts", default="snr,stack,newton,gep")
    a = ap.parse_args(argv)
    parts = a.parts.split(",")
    seeds = range(a.seeds)
    print(f"mu(eps=1) = {mu_for(1.0):.4f}; dp-accounting PLD of 100 steps at sigma = 10/mu: eps = "
          f"{check_accounting():.4f}", flush=True)
    mean = lambda xs: f"{100 * np.mean(xs):.1f} ± {100 * np.std(xs, ddof=1):.1f}"  # noqa: E731
    for r in ([0, 16, 32, 64] if "stack" in parts else [16]):
        pb = Problem(a.store, r)
        print(f"r = {r}: D = {pb.F.shape[1]}, public model (C = {pb.public_C}) {100 * pb.public_accuracy:.1f}, "
              f"start {100 * pb.accuracy(pb.W0):.1f}, non-private ceiling on the private rows "
              f"{100 * pb.ceiling:.1f}", flush=True)
        if "snr" in parts and r == 16:
            g, norms = pb.clipped(pb.W0)
            wrong = np.argmax(pb.F @ pb.W0, 1) != pb.ytr
            print(f"  snr: {wrong.sum()} of {len(wrong)} private rows misclassified by the start; per-row gradient "
                  f"norm median {np.median(norms):.3f}; exact clipped sum |g| = {np.linalg.norm(g):.1f}; eps = 1 "
                  f"in one release: noise {1 / mu_for(1.0):.2f} a coordinate, {np.sqrt(g.size) / mu_for(1.0):.1f} "
                  f"in norm over {g.size} coordinates (the full 3073-d model: "
                  f"{np.sqrt(3074 * K) / mu_for(1.0):.0f})", flush=True)
        if "stack" in parts:
            for eps in (np.inf, 1.0):
                for lr in (1, 3, 10, 30):
                    for gain in (1, 5):
                        acc = [dp_gd(pb, eps, lr, gain, s) for s in seeds]
                        print(f"  stack r={r} eps={eps} lr={lr} gain={gain}: {mean(acc)}", flush=True)
        if r == 16 and "newton" in parts:
            for eps in (np.inf, 1.0):
                for rounds in (1, 3, 10):
                    for lam in (1e-4, 1e-3, 1e-2):
                        acc = [newton(pb, eps, rounds, lam, s) for s in seeds]
                        print(f"  newton eps={eps} rounds={rounds} lam={lam}: {mean(acc)}", flush=True)
        if r == 16 and "gep" in parts:
            for eps in (np.inf, 1.0):
                for m in (5, 20, 50, 100):
                    for lam in (1e-3, 3e-3):
                        acc = [newton(pb, eps, 1, lam, s, m) for s in seeds]
                        print(f"  gep eps={eps} m={m} lam={lam}: {mean(acc)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
