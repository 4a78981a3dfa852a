"""Many private settings in one data pass: a whole privacy–accuracy curve for about the price of one fit.

Why it is cheap
---------------
* ``adam1`` (Mehta et al.: one full-batch DP-Adam step from zero weights, bias −10, sigmoid cross-entropy).
  At zero weights every example of class k has the same residual r_k, so the clipped gradient is
  ``Σ_k S_k r_kᵀ`` with ``S_k`` the per-class sum of clipped features.  The sums are computed in **one pass
  per clip norm**; each ε then only draws its own noise and takes one Adam step on a (D+1, K) matrix.
* ``sgd`` (DP-RandP: full-batch DP-SGD with momentum, zero init, no bias).  The S settings are stacked: each
  step multiplies the data once by all S weight matrices side by side (one GEMM of width S·K), so the data is
  read once per step for all settings.  Settings with fewer steps are frozen once they are done.

Why it is honest
----------------
Every setting draws **fresh noise from its own key** (``jax.random.split`` of one base key, then split into a
centering and a training key as :class:`privlin.estimator.DPLinearClassifier` does; the key of each setting is
in its record, so ``DPLinearClassifier(..., random_state=record["key"])`` or
``fit_setting(data, setting, key=record["key"])`` reproduces it alone).  Every
record states its own (ε, δ), noise multipliers, accountant and neighbouring relation: that is the guarantee
of releasing *that one model*.  Releasing several, or picking the best by looking at private data, costs more:
:attr:`SweepResult.total_epsilon` is the composition of every setting (what the ledger is charged, before any
data is read), :meth:`SweepResult.best` marks its pick ``private=False`` unless the evaluation split is public,
and :func:`privlin.selection.select_private` picks privately on a held-out validation split, with that cost
accounted too.

Neighbouring relation: add/remove one training example, the dataset size N public (as privlin.accounting).
Data-dependent inputs are public by construction: ``classes`` (pass them, or they are read from the labels
with a ``PrivacyLeakWarning``), ``clip`` and the feature normalization norm are constants.
"""
from __future__ import annotations

import csv
import io
import itertools
import math
import os
import warnings
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Iterable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from dp_accounting import dp_event as _ev

from . import accounting, train as _train
from .noise import make_key
from .preprocess import normalize_rows as _normalize_rows_core, private_mean

__all__ = ["sweep", "fit_setting", "SweepResult", "Setting", "PrivacyLeakWarning", "METHODS"]

METHODS = ("adam1", "sgd")
_BLOCK = 65536
_STACK_BYTES = 1 << 30  # centered copies of the rows, side by side, up to this size


from .report import PrivacyLeakWarning


# --------------------------------------------------------------------------- settings

@dataclass(frozen=True)
class Setting:
    """One private training plan.

    Attributes
    ----------
    method : {"adam1", "sgd"}
    epsilon : float or None
        Target ε; the noise multiplier is calibrated to it.  ``None`` with ``noise_multiplier`` given: use that σ
        (a paper's stated σ) and report the ε it gives.  ``math.inf``: non-private reference (no noise, no clip
        change), reported ``private=False``.
    delta : float
    learning_rate : float or None
        None: DPLinearClassifier's default rule, 1e-3 for ``adam1`` and ``LR_NOISE_RATIO · N / σ`` for ``sgd``
        (DP-RandP's tuned lr·σ/N, a public rule; resolved when N is known).
    steps : int
        1 for ``adam1``.
    clip : float
        Per-example gradient clip norm C (public).
    momentum : float
        ``sgd`` only.
    normalize : float or None
        Scale every feature row to this L2 norm first (free: a per-row map with a public constant).
    center_share : float
        Share of the GDP budget μ² spent on private centering of the normalized rows (DP-RandP);
        0 = no centering.  Needs ``normalize``.
    noise_multiplier, center_noise_multiplier : float or None
        Explicit σ (training) and σ₁ (centering) instead of calibrating from ``epsilon``.
    bias_init : float
        ``adam1``: initial bias (−10 as Mehta et al.).
    fit_intercept : bool
        ``adam1``: train the bias too (its gradient is clipped and noised with the weights); default False, as
        ``privlin.train``.
    """

    method: str = "adam1"
    epsilon: float | None = 1.0
    delta: float = 1e-5
    learning_rate: float | None = 1e-3
    steps: int = 1
    clip: float = 1.0
    momentum: float = 0.9
    normalize: float | None = None
    center_share: float = 0.0
    noise_multiplier: float | None = None
    center_noise_multiplier: float | None = None
    bias_init: float = -10.0
    fit_intercept: bool = False

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.method == "adam1" and self.steps != 1:
            raise ValueError("adam1 is one full-batch step; use method='sgd' for several steps")
        if int(self.steps) < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if not (self.clip > 0 and math.isfinite(self.clip)):
            raise ValueError(f"clip must be a positive number, got {self.clip}")
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0 (or None for the default rule), got {self.learning_rate}")
        if not 0.0 < self.delta < 1.0:
            raise ValueError(f"delta must be in (0, 1), got {self.delta}")
        if self.epsilon is None and self.noise_multiplier is None:
            raise ValueError("give epsilon or noise_multiplier")
        if self.epsilon is not None and not self.epsilon > 0:
            raise ValueError(f"epsilon must be > 0, got {self.epsilon}")
        if self.normalize is not None and not self.normalize > 0:
            raise ValueError(f"normalize must be > 0, got {self.normalize}")
        if (self.center_share or self.center_noise_multiplier is not None) and self.normalize is None:
            raise ValueError("private centering needs normalize=C (the mean's sensitivity)")

    @property
    def private(self) -> bool:
        return self.noise_multiplier is not None or not math.isinf(self.epsilon)

    @property
    def centered(self) -> bool:
        return bool(self.center_share) or self.center_noise_multiplier is not None

    def noise(self) -> tuple[float, float]:
        """(σ_train, σ_center) of this plan; σ_center = inf without centering, (0, inf) when non-private."""
        if not self.private:
            return 0.0, math.inf
        if self.noise_multiplier is not None:
            return float(self.noise_multiplier), (float(self.center_noise_multiplier)
                                                  if self.center_noise_multiplier is not None else math.inf)
        return accounting.split_noise(self.epsilon, self.delta, steps=self.steps, center_share=self.center_share)

    def dp_event(self) -> _ev.DpEvent:
        """The dp-accounting event of this plan (full-batch Gaussians: centering, then ``steps`` steps)."""
        if not self.private:
            return _ev.NonPrivateDpEvent()
        sigma, sigma_c = self.noise()
        return accounting.dp_event(sigma, steps=self.steps, extra_noise_multipliers=[sigma_c] if self.centered else [])

    def achieved_epsilon(self) -> float:
        """ε at ``delta`` of this plan by exact GDP composition (inf when non-private)."""
        if not self.private:
            return math.inf
        return accounting.event_epsilon(self.dp_event(), self.delta, accountant="gdp")


def _grid(eps, **grid) -> list[Setting]:
    """Cartesian product of every list-valued argument (ε first), scalars shared."""
    axes = {"epsilon": list(eps) if isinstance(eps, Iterable) and not isinstance(eps, str) else [eps]}
    for name, value in grid.items():
        axes[name] = list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value]
    names = list(axes)
    return [Setting(**dict(zip(names, combo))) for combo in itertools.product(*(axes[n] for n in names))]


# --------------------------------------------------------------------------- data

def _is_split(data) -> bool:
    return hasattr(data, "blocks") and hasattr(data, "dim")


def _resolve(data, split: str | None):
    """A stores.Split or an (X, y) pair, from a store, a store path/URL, a split or arrays."""
    if isinstance(data, (str, os.PathLike)):
        import stores
        data = stores.open(data)
    if hasattr(data, "splits") and not _is_split(data):
        if split is None:
            raise ValueError(f"which split? the store has {list(data.splits)}")
        return data[split]
    if _is_split(data):
        return data
    if isinstance(data, (tuple, list)) and len(data) == 2:
        X, y = np.asarray(data[0]), np.asarray(data[1])
        if X.ndim != 2 or y.shape != (X.shape[0],):
            raise ValueError(f"X must be (n, D) and y (n,), got {X.shape} and {y.shape}")
        if not np.isfinite(X).all():
            raise ValueError("features contain NaN or inf")
        return X, y
    raise TypeError(f"expected a store, a store path, a stores.Split or an (X, y) pair, got {type(data).__name__}")


def _blocks(data, rows: int = _BLOCK):
    if _is_split(data):
        yield from data.blocks(rows=rows, dtype=np.float32)
        return
    X, y = data
    for a in range(0, len(y), rows):
        yield np.asarray(X[a:a + rows], dtype=np.float32), y[a:a + rows]


def _n_dim(data) -> tuple[int, int]:
    return (len(data), int(data.dim)) if _is_split(data) else (len(data[1]), int(data[0].shape[1]))


def _class_index(classes: np.ndarray, y: np.ndarray) -> np.ndarray:
    idx = np.searchsorted(classes, y)
    idx = np.clip(idx, 0, len(classes) - 1)
    bad = classes[idx] != y
    if bad.any():
        raise ValueError(f"labels {np.unique(y[bad])[:5].tolist()} are not in classes (public class list)")
    return idx


def _normalize_rows(X: jax.Array, norm) -> jax.Array:
    return _normalize_rows_core(X, norm)


# --------------------------------------------------------------------------- adam1 (privlin.train's two stages)

@partial(jax.jit, static_argnames=("fit_intercept", "normalize", "centered"))
def _adam1_block(acc, X, yi, K, mean, clip, bias_init, fit_intercept, normalize, centered):
    """Stage 1 on one block: rows as trained (:func:`_prep`), then privlin.train.class_sums_update."""
    X = _prep(X, normalize, mean if centered else None)
    Y = jax.nn.one_hot(yi, K.shape[0], dtype=jnp.float32)
    return _train.class_sums_update(acc, X, Y, jnp.ones(X.shape[0], jnp.float32), clip, loss="sigmoid",
                                    bias_init=bias_init, fit_intercept=fit_intercept)


def _adam1_sums(data, classes, setting: "Setting", progress, mean=None):
    """One pass over the data: privlin.train.ClassSums for this (clip, normalize, bias, intercept[, mean])."""
    _, D = _n_dim(data)
    acc = _train.class_sums_init(D, len(classes))
    K = jnp.zeros(len(classes))
    m = jnp.zeros(D, jnp.float32) if mean is None else mean
    for X, y in _blocks(data):
        acc = _adam1_block(acc, jnp.asarray(X), jnp.asarray(_class_index(classes, np.asarray(y))), K, m,
                           float(setting.clip), float(setting.bias_init), bool(setting.fit_intercept),
                           float(setting.normalize or 0.0), mean is not None)
        if progress is not None:
            progress.update(len(y))
    return acc


@partial(jax.jit, static_argnames=("fit_intercept",))
def _adam1_release(sums, keys, sigmas, lrs, clip, bias_init, fit_intercept):
    """Stage 2 for S settings sharing ``sums``: privlin.train.adam1_step vmapped over (key, σ, lr)."""
    step = lambda k, s, lr: _train.adam1_step(sums, k, s, lr, clip=clip, loss="sigmoid",  # noqa: E731
                                              bias_init=bias_init, fit_intercept=fit_intercept)
    p = jax.vmap(step)(keys, sigmas, lrs)
    return p.W, p.b


def _adam1_noisy_grads(sums, keys, sigmas, clip, fit_intercept=False):
    """The noisy clipped gradient sums (S, D, K) that stage 2 feeds to Adam (for checking the noise)."""
    g = _train.adam1_gradient(sums)
    return jax.vmap(lambda k, s: _train.privatize(g, k, s, clip, fit_intercept=fit_intercept).W)(keys, sigmas)


# --------------------------------------------------------------------------- sgd: privlin.train.fit_full_batch, vmapped

@partial(jax.jit, static_argnames=("steps", "clip", "momentum"))
def _sgd_vmapped(X, Y, keys, sigmas, lrs, steps, clip, momentum):
    """S settings of full-batch DP-SGD with momentum in one vmapped run: each step multiplies X once by the S
    weight matrices side by side (X is not batched), so the data is read once per step for all settings."""
    mask = jnp.ones(X.shape[0], jnp.float32)
    fit = lambda k, s, lr: _train.fit_full_batch(X, Y, mask, k, s, lr, steps=steps, clip=clip,  # noqa: E731
                                                 loss="softmax", optimizer="sgd", momentum=momentum)
    return jax.vmap(fit)(keys, sigmas, lrs).W


def _stage_keys(keys):
    """(center keys, train keys), each (S,): ``noise.split_named(key, "center", "train")`` of every setting's key,
    the derivation DPLinearClassifier uses, so a setting equals the estimator fitted alone with its key."""
    both = jax.vmap(lambda k: jax.random.split(k, 2))(keys)
    return both[:, 0], both[:, 1]


def _sgd_centered(X, Y, key, setting: "Setting", n: int):
    """One DP-RandP setting with private centering: its own centered copy of X, then fit_full_batch."""
    sigma, sigma_c = setting.noise()
    (k_center,), (k_train,) = _stage_keys(key[None])
    norm = float(setting.normalize)
    mean = private_mean(jnp.sum(X, axis=0), n, k_center, sigma_c, norm)
    Xc = _normalize_rows(X - mean, norm)
    W = _sgd_vmapped(Xc, Y, k_train[None], jnp.asarray([sigma], jnp.float32),
                     jnp.asarray([setting.learning_rate], jnp.float32), int(setting.steps), float(setting.clip),
                     float(setting.momentum))[0]
    return W, mean


@partial(jax.jit, static_argnames=("steps", "clip", "momentum"))
def _sgd_vmapped_rows(Xs, Y, keys, sigmas, lrs, steps, clip, momentum):
    """Like :func:`_sgd_vmapped` with one row matrix per setting, Xs (S, n, D)."""
    mask = jnp.ones(Xs.shape[1], jnp.float32)
    fit = lambda X, k, s, lr: _train.fit_full_batch(X, Y, mask, k, s, lr, steps=steps, clip=clip,  # noqa: E731
                                                    loss="softmax", optimizer="sgd", momentum=momentum)
    return jax.vmap(fit)(Xs, keys, sigmas, lrs).W


def _sgd_centered_stacked(X, Y, keys, group: list["Setting"], n: int):
    """Privately centered sgd settings of one group, trained together on their stacked centered rows."""
    k_center, k_train = _stage_keys(keys)
    norm = float(group[0].normalize)
    total = jnp.sum(X, axis=0)
    means = [private_mean(total, n, k_center[i], s.noise()[1], norm) for i, s in enumerate(group)]
    Xs = jnp.stack([_normalize_rows(X - m, norm) for m in means])
    W = _sgd_vmapped_rows(Xs, Y, k_train, jnp.asarray([s.noise()[0] for s in group], jnp.float32),
                          jnp.asarray([s.learning_rate for s in group], jnp.float32), int(group[0].steps),
                          float(group[0].clip), float(group[0].momentum))
    return np.asarray(W), [np.asarray(m) for m in means]


def _prep(X, norm, mean):
    """Rows as a model was trained on them: normalized to ``norm``, then centered by its released ``mean`` and
    normalized again (DP-RandP); ``mean`` None: no centering."""
    if norm:
        X = _normalize_rows(X, norm)
    if mean is not None:
        X = _normalize_rows(X - mean, norm)
    return X


# --------------------------------------------------------------------------- results

@dataclass
class SweepResult:
    """The outcome of :func:`sweep`: one record per setting, plus the models.

    Attributes
    ----------
    records : list of dict
        Per setting: method, epsilon (target), achieved_epsilon, delta, noise_multiplier,
        center_noise_multiplier, learning_rate, steps, clip, normalize, accountant ("gdp", exact for full batch),
        neighbouring ("add_remove"), private, seeded, key (the setting's PRNG key data), accuracy on
        ``eval_split`` (None without evaluation data), eval_split.
    coef : ndarray (S, D, K)
    intercept : ndarray (S, K)
    classes : ndarray (K,)
    means : list of (ndarray (D,) or None)
        The released noisy mean of each privately centered setting (public: part of its model).
    total_epsilon : float
        ε at ``total_delta`` of releasing **every** setting (exact GDP composition): what was charged.
    total_delta : float
    eval_public : bool
        Whether the evaluation split was declared public (then picking by its accuracy is free).
    """

    records: list[dict]
    coef: np.ndarray = field(repr=False)
    intercept: np.ndarray = field(repr=False)
    classes: np.ndarray = field(repr=False)
    total_epsilon: float = math.nan
    total_delta: float = math.nan
    eval_public: bool = False
    means: list = field(default=None, repr=False)

    def __post_init__(self):
        if self.means is None:
            self.means = [None] * len(self.records)

    COLUMNS = ("method", "epsilon", "achieved_epsilon", "delta", "noise_multiplier", "center_noise_multiplier",
               "learning_rate", "steps", "clip", "normalize", "accuracy", "eval_split", "private", "seeded",
               "accountant", "neighbouring")

    def __len__(self) -> int:
        return len(self.records)

    def predict(self, i: int, X: np.ndarray) -> np.ndarray:
        """Labels (n,) predicted by setting ``i`` on features X (n, D) (normalized as in training)."""
        X = np.asarray(_prep(jnp.asarray(X, jnp.float32), self.records[i]["normalize"], self.means[i]))
        return self.classes[np.argmax(X @ self.coef[i] + self.intercept[i], axis=1)]

    def to_csv(self, path: str | os.PathLike | None = None, extra: Mapping[str, Any] | None = None) -> str:
        """CSV of the records (columns :attr:`COLUMNS`, then ``extra`` constants); written to ``path`` if given."""
        extra = dict(extra or {})
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=[*extra, *self.COLUMNS], extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for r in self.records:
            w.writerow({**extra, **r})
        text = buf.getvalue()
        if path is not None:
            with open(path, "w", newline="") as f:
                f.write(text)
        return text

    def table(self) -> str:
        """Plain-text table for a terminal."""
        head = f"{'method':7} {'eps':>6} {'eps got':>8} {'sigma':>9} {'lr':>8} {'steps':>5} {'clip':>5} {'acc':>7}"
        lines = [head, "-" * len(head)]
        for r in self.records:
            acc = "-" if r["accuracy"] is None else f"{100 * r['accuracy']:.2f}%"
            eps = "inf" if r["epsilon"] is None or math.isinf(r["epsilon"] or 0) else f"{r['epsilon']:g}"
            got = "inf" if math.isinf(r["achieved_epsilon"]) else f"{r['achieved_epsilon']:.3f}"
            lines.append(f"{r['method']:7} {eps:>6} {got:>8} {r['noise_multiplier']:>9.4g} {r['learning_rate']:>8.2g} "
                         f"{r['steps']:>5} {r['clip']:>5.3g} {acc:>7}")
        lines.append(f"releasing all {len(self.records)} settings: ε = {self.total_epsilon:.3f} at δ = "
                     f"{self.total_delta:g} (composition)")
        return "\n".join(lines)

    def best(self) -> dict:
        """The record with the highest evaluation accuracy.

        Choosing by accuracy on a *private* split leaks that split: the returned record then carries
        ``private=False`` and a :class:`PrivacyLeakWarning` is emitted.  Use
        :func:`privlin.selection.select_private` for a private choice.
        """
        scored = [i for i, r in enumerate(self.records) if r["accuracy"] is not None]
        if not scored:
            raise ValueError("no setting was evaluated")
        i = max(scored, key=lambda j: self.records[j]["accuracy"])
        rec = dict(self.records[i], index=i)
        if not self.eval_public:
            warnings.warn("best() chose by accuracy on a private evaluation split: the chosen number is tuned on "
                          "that split and is not a private result; use privlin.selection.select_private",
                          PrivacyLeakWarning, stacklevel=2)
            rec["private"] = False
            rec["selected_on"] = f"{rec['eval_split']} (not private)"
        return rec


# --------------------------------------------------------------------------- the sweep

def _evaluate(data, classes, coef, intercept, normalizes, means) -> np.ndarray:
    """Accuracy (S,) of S linear models on ``data``, one pass over it."""
    correct = np.zeros(coef.shape[0], dtype=np.int64)
    n = 0
    for X, y in _blocks(data):
        X = jnp.asarray(X)
        for s in range(coef.shape[0]):
            Xs = _prep(X, normalizes[s], means[s])
            pred = classes[np.asarray(jnp.argmax(Xs @ coef[s] + intercept[s], axis=1))]
            correct[s] += int((pred == np.asarray(y)).sum())
        n += len(y)
    if n == 0:
        raise ValueError("the evaluation split has no rows")
    return correct / n


def _public_classes(data, classes, root_attrs=None) -> np.ndarray:
    if classes is not None:
        c = np.unique(np.asarray(classes))
        if len(c) < 2:
            raise ValueError("need at least 2 classes")
        return c
    attrs_classes = None
    if _is_split(data):  # featurize records the dataset's class names; labels index them
        attrs_classes = (data.attrs or {}).get("classes") or (root_attrs or {}).get("classes")
    if attrs_classes is not None:  # the dataset's published class list (provenance), not read from labels
        return np.arange(len(attrs_classes))
    warnings.warn("classes were read from the private labels (their set is revealed); pass classes=... to avoid it",
                  PrivacyLeakWarning, stacklevel=3)
    ys = [np.unique(y) for _, y in _blocks(data)]
    c = np.unique(np.concatenate(ys))
    if len(c) < 2:
        raise ValueError("need at least 2 classes")
    return c


def _progress(total: int, enabled: bool, desc: str):
    if not enabled:
        return None
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=desc, unit="row", leave=False)


def sweep(data, eps: float | Sequence[float] = (0.5, 1.0, 2.0, 4.0, 8.0), *, settings: Sequence[Setting] | None = None,
          split: str = "train", eval_data=None, eval_split: str | None = "test", eval_public: bool = False,
          classes=None, random_state=None, ledger=None, charge: bool = True, progress: bool = False,
          **grid) -> SweepResult:
    """Train every setting of a grid privately, sharing data passes, and evaluate each.

    Parameters
    ----------
    data : stores.FeatureStore, store path/URL, stores.Split or (X (n, D), y (n,))
        The private training data.  ``adam1`` streams it in blocks; ``sgd`` holds it in memory (float32).
    eps : float or sequence of float
        Target ε values (one axis of the grid).  ``math.inf`` adds a non-private reference setting.
    settings : sequence of Setting, optional
        Explicit settings instead of a grid (e.g. a paper's per-ε σ and learning rate).
    split : str
        Training split when ``data`` is a store.
    eval_data : like ``data``, optional
        Evaluation rows; default: split ``eval_split`` of the same store (None: no evaluation).
    eval_public : bool
        Declare the evaluation split public (then :meth:`SweepResult.best` is free).  Test splits are usually
        private: leave it False.
    classes : array-like, optional
        The public class list.  Default: the store's ``classes`` attribute, else read from the labels with a
        ``PrivacyLeakWarning``.
    random_state : None, int or jax key
        Base key; setting s uses ``jax.random.split(key, S)[s]``.  None: OS entropy.
    ledger : privlin.ledger.PrivacyLedger, optional
        Charged with the composition of every setting before any row is read (default: the ledger beside a
        store split, an in-memory one for arrays; ``charge=False`` skips it).
    progress : bool
        tqdm progress bar over the data passes.
    **grid
        Setting fields, each a scalar or a list (Cartesian product): ``method``, ``delta``, ``learning_rate``,
        ``steps``, ``clip``, ``momentum``, ``normalize``, ``center_share``, ``bias_init``.

    Returns
    -------
    SweepResult
    """
    if settings is None:
        settings = _grid(eps, **grid)
    else:
        if grid:
            raise ValueError(f"give either settings or grid arguments, not both ({sorted(grid)})")
        settings = [s if isinstance(s, Setting) else Setting(**s) for s in settings]
    if not settings:
        raise ValueError("no settings to train")
    train = _resolve(data, split)
    evaluation = None
    if eval_data is not None:
        evaluation = _resolve(eval_data, eval_split)
    elif eval_split is not None and hasattr(_store_of(data), "splits"):
        st = _store_of(data)
        if eval_split not in st.splits:
            raise ValueError(f"eval_split {eval_split!r} is not in the store; it has {list(st.splits)}")
        evaluation = st[eval_split]
    classes = _public_classes(train, classes, getattr(_store_of(data), "attrs", None))
    settings = [_resolve_lr(s, _n_dim(train)[0]) for s in settings]

    # privacy first: the plan's total, charged before any data is read
    deltas = {s.delta for s in settings}
    total_delta = max(deltas)
    private = [s for s in settings if s.private]
    events = [s.dp_event() for s in private]
    total_eps = (accounting.event_epsilon(_ev.ComposedDpEvent(events), total_delta, accountant="gdp")
                 if events else 0.0)
    if len(private) < len(settings):
        total_eps = math.inf
    if charge:
        from .ledger import ledger_for
        led = ledger_for(train if isinstance(data, (tuple, list)) else data, split, ledger=ledger)
        led.charge(_ev.ComposedDpEvent([s.dp_event() for s in settings]),
                   mechanism=f"privlin.sweep/{'+'.join(sorted({s.method for s in settings}))}",
                   epsilon=total_eps, delta=total_delta,
                   params={"settings": len(settings),
                           "epsilons": [None if s.epsilon is None else str(s.epsilon) for s in settings]})

    info = make_key(random_state)
    keys = jax.random.split(info.key, len(settings))
    n, D = _n_dim(train)
    K = len(classes)
    coef = np.zeros((len(settings), D, K), np.float32)
    means: list = [None] * len(settings)
    intercept = np.zeros((len(settings), K), np.float32)

    # adam1: one pass per (clip, normalize, bias, intercept) group; every ε and lr of the group shares the sums
    groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(settings):
        if s.method == "adam1":
            groups.setdefault((s.clip, s.normalize, s.bias_init, s.fit_intercept, s.centered), []).append(i)
    bar = _progress(n * len(groups), progress and bool(groups), "adam1 class sums")
    for idx in groups.values():
        coef[idx], intercept[idx], group_means = _adam1_group(train, classes, [settings[i] for i in idx],
                                                              keys[jnp.asarray(idx)], bar)
        for i, m in zip(idx, group_means):
            means[i] = m
    if bar is not None:
        bar.close()

    # sgd: settings with the same (normalize, steps, clip, momentum) run vmapped, one data read per step for all;
    # privately centered settings each get their own centered copy of the rows
    sgd_groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(settings):
        if s.method == "sgd":
            sgd_groups.setdefault((s.normalize, s.steps, s.clip, s.momentum, s.centered), []).append(i)
    if sgd_groups:
        X_all, y_all = _load(train)
        Y = jnp.asarray(np.eye(K, dtype=np.float32)[_class_index(classes, y_all)])
        for (norm, *_), idx in sgd_groups.items():
            X = _normalize_rows(jnp.asarray(X_all), norm) if norm else jnp.asarray(X_all)
            coef[idx], group_means = _sgd_group(X, Y, [settings[i] for i in idx], keys[jnp.asarray(idx)], n)
            for i, m in zip(idx, group_means):
                means[i] = m

    acc = (_evaluate(evaluation, classes, coef, intercept, [s.normalize for s in settings], means)
           if evaluation else None)
    key_data = np.asarray(jax.random.key_data(keys))
    records = []
    for i, s in enumerate(settings):
        sigma, sigma_c = s.noise()
        records.append({
            "method": s.method, "epsilon": s.epsilon, "achieved_epsilon": s.achieved_epsilon(), "delta": s.delta,
            "noise_multiplier": sigma, "center_noise_multiplier": sigma_c if s.centered else None,
            "learning_rate": s.learning_rate, "steps": s.steps, "clip": s.clip, "normalize": s.normalize,
            "momentum": s.momentum if s.method == "sgd" else None, "bias_init": s.bias_init if s.method == "adam1"
            else None, "accountant": "gdp", "neighbouring": "add_remove", "private": s.private,
            "seeded": info.seeded, "key": key_data[i].tolist(),
            "accuracy": None if acc is None else float(acc[i]),
            "eval_split": None if evaluation is None else (eval_split or "eval"), "setting": s,
        })
    return SweepResult(records, coef, intercept, classes, total_eps, total_delta, eval_public, means)


def _resolve_lr(s: Setting, n: int) -> Setting:
    """Fill a ``learning_rate=None`` with DPLinearClassifier's public default rule."""
    if s.learning_rate is not None:
        return s
    if s.method == "adam1":
        return replace(s, learning_rate=1e-3)
    sigma = s.noise()[0]
    if sigma == 0:
        raise ValueError("learning_rate=None scales with 1/σ; give a learning rate for a non-private sgd setting")
    from .estimator import LR_NOISE_RATIO
    return replace(s, learning_rate=LR_NOISE_RATIO * n / sigma)


def _store_of(data):
    if isinstance(data, (str, os.PathLike)):
        import stores
        return stores.open(data)
    return data


def _load(train) -> tuple[np.ndarray, np.ndarray]:
    if _is_split(train):
        return train.to_numpy(dtype=np.float32)
    return np.asarray(train[0], np.float32), np.asarray(train[1])


def _adam1_group(train, classes, group: list[Setting], keys, bar):
    """adam1 settings sharing (clip, normalize, bias, intercept): one class-sum pass for all of them, or, when
    privately centered, one pass for the row sum plus one class-sum pass per setting (rows depend on its mean).
    Returns (W (S, D, K), b (S, K), means)."""
    first = group[0]
    k_center, k_train = _stage_keys(keys)
    sig = jnp.asarray([s.noise()[0] for s in group], jnp.float32)
    lrs = jnp.asarray([s.learning_rate for s in group], jnp.float32)
    args = (float(first.clip), float(first.bias_init), bool(first.fit_intercept))
    if not first.centered:
        W, b = _adam1_release(_adam1_sums(train, classes, first, bar), k_train, sig, lrs, *args)
        return np.asarray(W), np.asarray(b), [None] * len(group)
    n, D = _n_dim(train)
    total = jnp.zeros(D, jnp.float32)
    for X, _ in _blocks(train):
        total = total + jnp.sum(_normalize_rows(jnp.asarray(X), first.normalize), axis=0)
    Ws, bs, means = [], [], []
    for i, s in enumerate(group):
        mean = private_mean(total, n, k_center[i], s.noise()[1], float(s.normalize))
        W, b = _adam1_release(_adam1_sums(train, classes, s, bar, mean), k_train[i:i + 1], sig[i:i + 1],
                              lrs[i:i + 1], *args)
        Ws.append(np.asarray(W[0]))
        bs.append(np.asarray(b[0]))
        means.append(np.asarray(mean))
    return np.stack(Ws), np.stack(bs), means


def _sgd_group(X, Y, group: list[Setting], keys, n: int) -> np.ndarray:
    first = group[0]
    if first.centered:
        if len(group) * X.size * 4 <= _STACK_BYTES:  # small data: centered copies side by side, one vmapped run
            return _sgd_centered_stacked(X, Y, keys, group, n)
        fits = [_sgd_centered(X, Y, keys[i], s, n) for i, s in enumerate(group)]
        return np.stack([np.asarray(W) for W, _ in fits]), [np.asarray(m) for _, m in fits]
    W = _sgd_vmapped(X, Y, _stage_keys(keys)[1], jnp.asarray([s.noise()[0] for s in group], jnp.float32),
                     jnp.asarray([s.learning_rate for s in group], jnp.float32), int(first.steps),
                     float(first.clip), float(first.momentum))
    return np.asarray(W), [None] * len(group)


def fit_setting(data, setting: Setting, *, key, split: str = "train", classes=None) -> tuple[np.ndarray, np.ndarray]:
    """Train one setting alone (no shared pass, nothing charged): ``(coef (D, K), intercept (K,))``.

    ``key`` is a record's ``key`` (or any JAX key): the same setting and key give the sweep's model.
    Meant for checking a sweep and for re-deriving one released model; it charges no ledger.
    """
    train = _resolve(data, split)
    classes = _public_classes(train, classes, getattr(_store_of(data), "attrs", None))
    setting = _resolve_lr(setting, _n_dim(train)[0])
    key = key if isinstance(key, jax.Array) else jnp.asarray(np.asarray(key, np.uint32))
    keys = make_key(key).key[None]
    n, D = _n_dim(train)
    if setting.method == "adam1":
        W, b, _ = _adam1_group(train, classes, [setting], keys, None)
        return W[0], b[0]
    X, y = _load(train)
    Y = jnp.asarray(np.eye(len(classes), dtype=np.float32)[_class_index(classes, y)])
    X = _normalize_rows(jnp.asarray(X), setting.normalize) if setting.normalize else jnp.asarray(X)
    return _sgd_group(X, Y, [setting], keys, n)[0][0], np.zeros(len(classes), np.float32)
