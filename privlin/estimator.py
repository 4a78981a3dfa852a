"""``DPLinearClassifier``: a scikit-learn estimator whose ``fit`` is (ε, δ)-differentially private.

The thin public layer: settings stored by ``__init__``, validated once in
``fit``, clean arrays handed to the pure jitted trainers of :mod:`privlin.train`.
The pipeline of one fit:

1. rows scaled to norm ``clip`` (free) — :mod:`privlin.preprocess`;
2. optional private centering (Gaussian noise on the sum, its own σ);
3. training: ``"sgd"`` (full-batch DP-SGD with momentum, DP-RandP, default),
   ``"adam1"`` (single full-batch DP-Adam step, Mehta et al.) or
   ``"minibatch"`` (Poisson-subsampled DP-SGD/Adam/LAMB);
4. the privacy report ``privacy_`` from :mod:`privlin.accounting`.

Default hyperparameters are fixed in advance, not tuned on any evaluation set:
``sgd`` runs T=100 steps (DP-RandP Tables 22–23) with learning rate
``0.008 · N / σ``: DP-RandP's CIFAR-10 learning rates (Table 22) all satisfy
lr·σ/N ≈ 0.008 across ε ∈ [0.1, 8], i.e. the noise moves each weight by the
same amount per step whatever the budget.
"""
from __future__ import annotations

import functools
import math
import warnings
from numbers import Integral, Real

import jax
import jax.numpy as jnp
import numpy as np
from dp_accounting import dp_event as _ev
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data
from tqdm.auto import tqdm

from . import accounting, noise, preprocess, secure_noise, train
from .report import PrivacyLeakWarning, PrivacyReport
from .sources import ArraySource

__all__ = ["DPLinearClassifier", "LR_NOISE_RATIO", "DEFAULT_STEPS"]

#: lr · σ / N of DP-RandP's tuned CIFAR-10 linear probes (seed 004, Table 22): ≈ 0.008 at every ε.
LR_NOISE_RATIO = 0.008
#: Default steps per method: adam1 is one step by definition; sgd follows DP-RandP (T=100).
DEFAULT_STEPS = {"adam1": 1, "sgd": 100, "minibatch": 200}
_METHODS = ("adam1", "sgd", "minibatch")


# ----------------------------------------------------------------------------- jitted cores (compiled once per shape)

@functools.partial(jax.jit, static_argnames=("norm",))
def _row_sum(X, mask, norm):
    return preprocess.row_sum(X, mask, norm)


@functools.partial(jax.jit, static_argnames=("norm",))
def _prep(X, mean, norm):
    return preprocess.apply(X, preprocess.Preprocessing(norm, mean))


@functools.partial(jax.jit, static_argnames=("k", "norm", "loss", "fit_intercept"))
def _class_sums_block(acc, X, y, mask, mean, clip, bias_init, *, k, norm, loss, fit_intercept):
    Xp = preprocess.apply(X, preprocess.Preprocessing(norm, mean))
    return train.class_sums_update(acc, Xp, jax.nn.one_hot(y, k), mask, clip, loss=loss, bias_init=bias_init,
                                   fit_intercept=fit_intercept)


@functools.partial(jax.jit, static_argnames=("k", "norm", "loss", "fit_intercept"))
def _grad_block(params, X, y, mask, mean, clip, *, k, norm, loss, fit_intercept):
    Xp = preprocess.apply(X, preprocess.Preprocessing(norm, mean))
    return train.clipped_grad_sum(params, Xp, jax.nn.one_hot(y, k), mask, clip, loss=loss, fit_intercept=fit_intercept)


_adam1_step = jax.jit(train.adam1_step, static_argnames=("loss", "fit_intercept"))
_fit_full_batch = jax.jit(train.fit_full_batch, static_argnames=("steps", "loss", "optimizer", "fit_intercept"))
_fit_minibatch = jax.jit(train.fit_minibatch, static_argnames=("steps", "loss", "optimizer", "fit_intercept"))


@functools.partial(jax.jit, static_argnames=("optimizer", "fit_intercept"))
def _stream_update(state, grad_sum, key, sigma, denom, lr, momentum, clip, *, optimizer, fit_intercept):
    opt = train.make_optimizer(optimizer, lr, momentum=momentum)
    return train.noisy_update(state, grad_sum, key, sigma, denom, opt, clip=clip, fit_intercept=fit_intercept)


# ----------------------------------------------------------------------------- row sharding across devices

def _row_sharding():
    """NamedSharding splitting rows over all devices, or None on a single device."""
    devices = jax.devices()
    if len(devices) == 1:
        return None
    mesh = jax.sharding.Mesh(np.array(devices), ("rows",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("rows"))


def _pad_rows(X, y, to: int):
    """Pad a block to ``to`` rows with zero rows of mask 0 (fixed shapes: one compilation)."""
    n = X.shape[0]
    mask = np.zeros(to, np.float32)
    mask[:n] = 1.0
    if n < to:
        X = np.concatenate([X, np.zeros((to - n, X.shape[1]), X.dtype)])
        y = np.concatenate([y, np.zeros(to - n, y.dtype)])
    return X, y, mask


def _put_rows(*arrays):
    """Device arrays with rows sharded over ``jax.devices()`` (one data-parallel jit; GSPMD inserts the psum).

    Uses ``make_array_from_process_local_data``, so under ``jax.distributed`` each
    process passes its own rows and the global array spans all hosts.
    """
    sharding = _row_sharding()
    if sharding is None:
        return tuple(jnp.asarray(a) for a in arrays)
    return tuple(jax.make_array_from_process_local_data(sharding, np.asarray(a)) for a in arrays)


def _padded_len(n: int) -> int:
    nd = jax.device_count()
    return -(-n // nd) * nd


def _check_secure_mode(est) -> None:
    """secure_mode's preconditions: a secret seed (no random_state) and a finite ε (noise to secure)."""
    if est.random_state is not None:
        raise ValueError("secure_mode=True draws all randomness from os.urandom: leave random_state=None")
    if math.isinf(est.epsilon):
        raise ValueError("secure_mode=True with epsilon=inf: there is no noise to secure")


def _secure_release(g, sigma, clip, fit_intercept):
    """A clipped gradient sum released with the discrete Gaussian (W and b as one vector when b is trained)."""
    W, b = np.asarray(g.W, np.float64), np.asarray(g.b, np.float64)
    flat = np.concatenate([W.ravel(), b]) if fit_intercept else W.ravel()
    noisy = secure_noise.secure_gaussian_release(flat, sigma * clip, clip)
    return train.LinearParams(jnp.asarray(noisy[:W.size].reshape(W.shape), jnp.float32),
                              jnp.asarray(noisy[W.size:], jnp.float32) if fit_intercept else g.b)


def _secure_adam1_step(acc, sigma, lr, *, clip, loss, bias_init, fit_intercept):
    """``adam1`` stage 2 with the gradient sum released by :func:`_secure_release`."""
    released = _secure_release(train.adam1_gradient(acc, loss=loss, bias_init=bias_init), sigma, clip, fit_intercept)
    return train.adam1_update(released, acc.n, lr, bias_init=bias_init, fit_intercept=fit_intercept)


#: Default learning rate of full-batch SGD at epsilon=inf (DP-RandP's rule lr = 0.008·N/σ needs σ > 0).
NON_PRIVATE_SGD_LR = 1.0


def _public_setting_leaks(epsilon: float, delta: float, n: int) -> list[str]:
    """Warn about settings that void the guarantee: ε = ∞ (the non-private baseline) and δ ≥ 1/N."""
    leaks = []
    if math.isinf(epsilon):
        warnings.warn("epsilon=inf is the NON-PRIVATE baseline: no noise, no privacy guarantee",
                      PrivacyLeakWarning, stacklevel=4)
        leaks.append("everything (epsilon=inf, non-private baseline)")
    elif delta >= 1.0 / n:
        warnings.warn(f"delta={delta:g} >= 1/N = {1.0 / n:.3g}: a mechanism that publishes one random row outright "
                      f"meets such a guarantee; choose delta << 1/N", PrivacyLeakWarning, stacklevel=4)
        leaks.append(f"delta={delta:g} >= 1/N (guarantee meaningless)")
    return leaks


#: A short last block is padded to a multiple of this many rows (not to a full block): a few compiled shapes
#: instead of up to one block of zero rows computed for nothing.
TAIL_ROWS = 8192


def _double_buffered(results):
    """Drive an accumulation of device results, keeping at most two in flight.

    While the device works on block i, the host reads block i+1 (JAX dispatch is asynchronous); waiting on the
    previous result bounds memory to two blocks.  Returns the last result.
    """
    prev = last = None
    for last in results:
        if prev is not None:
            jax.block_until_ready(prev)
        prev = last
    return last


# ----------------------------------------------------------------------------- the estimator

class DPLinearClassifier(ClassifierMixin, BaseEstimator):
    """Differentially private linear classifier (multinomial or one-vs-rest logistic).

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy budget ε > 0 of the whole fit (centering + training).
    delta : float, default=1e-5
        δ in (0, 1); choose δ ≪ 1/N.
    method : {"sgd", "adam1", "minibatch"}, default="sgd"
        ``"sgd"``: full-batch DP-SGD with momentum, zero init (DP-RandP).
        ``"adam1"``: one full-batch DP-Adam step from zero init, sigmoid CE, bias −10 (Mehta et al.);
        one pass over the data.  ``"minibatch"``: Poisson-subsampled DP-SGD/Adam/LAMB.
    steps : int or None, default=None
        Training steps; None: 1 (adam1), 100 (sgd), 200 (minibatch).
    learning_rate : float or None, default=None
        None: ``LR_NOISE_RATIO · B / σ`` with B the (expected) batch size (sgd, minibatch, with
        optimizer "sgd"), 1e-3 for adam1 and for Adam/LAMB.
    clip : float, default=1.0
        Per-example gradient norm bound C; rows are also normalized to norm C.
    center : bool, default=True
        Privately center rows (DP-RandP); costs ``center_share`` of the budget.
    center_share : float, default=0.01
        Fraction of the GDP budget μ² spent on centering (DP-RandP's ImageNet runs spent 0.2–0.4%).
    classes : array-like or None, default=None
        The public class list.  None infers it from the private labels (PrivacyLeakWarning).
    loss : {"softmax", "sigmoid"} or None, default=None
        None: sigmoid for adam1 (Mehta et al.), softmax otherwise.
    fit_intercept : bool, default=False
        Train an intercept (its gradient shares the clip norm).  Otherwise it stays at its init
        (−10 for sigmoid, 0 for softmax), which never changes predictions.
    optimizer : {"sgd", "adam", "lamb"}, default="sgd"
        Optimizer of ``"minibatch"`` (``"sgd"`` uses ``momentum``); ``"sgd"`` method uses SGD.
    momentum : float, default=0.9
    batch_size : int, default=256
        Expected batch size of ``"minibatch"`` (sample rate q = batch_size / N).
    accountant : {"gdp", "pld", "rdp"} or None, default=None
        None: "gdp" (exact) for full-batch methods, "pld" for minibatch.
    neighbouring : {"add_remove", "substitute"}, default="add_remove"
    random_state : int, numpy Generator, JAX key or None, default=None
        None draws the noise seed from the OS CSPRNG; a seed makes the noise reproducible
        (and so known to whoever knows the seed; ``privacy_.seeded`` says so).
    block_rows : int, default=65536
        Rows per block when streaming.
    memory_limit : int, default=2**30
        Bytes of preprocessed float32 rows kept on device; larger splits are streamed every pass.
    verbose : bool, default=False
        Progress bars.
    budget : (float, float) or None, default=None
        Cap ``(ε, δ)`` on the total spent on the data's ledger; a fit past it raises
        ``PrivacyBudgetExceeded`` before reading any row.
    ledger : privlin.ledger.PrivacyLedger or None, default=None
        Ledger to charge (default: the one beside a store split; none for arrays without ``budget``).
    secure_mode : bool, default=False
        Resist floating-point attacks on the noise (Mironov 2012): the released statistics (the ``adam1`` gradient
        sum, every step's gradient sum and the centering sum) get discrete Gaussian noise on a power-of-two grid
        drawn from ``os.urandom`` (``privlin.secure_noise``; σ inflated by ~1e-6 to cover the rounding), released
        on the host once per step.  Needs ``random_state=None``.  Multi-step methods then run the per-step
        (streaming) loop, slower than the compiled in-memory trainer.

    Attributes
    ----------
    classes_ : ndarray (k,)
    coef_ : ndarray (k, d)
        Weights on the *preprocessed* rows (normalized, centered by ``mean_``, normalized).
    intercept_ : ndarray (k,)
    mean_ : ndarray (d,) or None
        Released noisy mean of the normalized rows (public output of the centering mechanism).
    privacy_ : PrivacyReport
    ledger_ : privlin.ledger.PrivacyLedger
        The ledger this fit was charged on (store splits always; arrays with ``budget``/``ledger``).
    n_features_in_ : int
    """

    _parameter_constraints = {
        "epsilon": [Interval(Real, 0, float("inf"), closed="right")],  # inf: the non-private baseline (warned)
        "delta": [Interval(Real, 0, 1, closed="neither")],
        "method": [StrOptions(set(_METHODS))],
        "steps": [Interval(Integral, 1, None, closed="left"), None],
        "learning_rate": [Interval(Real, 0, None, closed="neither"), None],
        "clip": [Interval(Real, 0, None, closed="neither")],
        "center": ["boolean"],
        "center_share": [Interval(Real, 0, 1, closed="neither")],
        "classes": ["array-like", None],
        "loss": [StrOptions(set(train.LOSSES)), None],
        "fit_intercept": ["boolean"],
        "optimizer": [StrOptions(set(train.OPTIMIZERS))],
        "momentum": [Interval(Real, 0, 1, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "accountant": [StrOptions(set(accounting.ACCOUNTANTS)), None],
        "neighbouring": [StrOptions(set(accounting.NEIGHBOURING))],
        "random_state": ["random_state", jax.Array],
        "block_rows": [Interval(Integral, 1, None, closed="left")],
        "memory_limit": [Interval(Integral, 0, None, closed="left")],
        "verbose": ["boolean"],
        "secure_mode": ["boolean"],
        "budget": "no_validation",
        "ledger": "no_validation",
    }

    def __init__(self, *, epsilon=1.0, delta=1e-5, method="sgd", steps=None, learning_rate=None, clip=1.0,
                 center=True, center_share=0.01, classes=None, loss=None, fit_intercept=False, optimizer="sgd",
                 momentum=0.9, batch_size=256, accountant=None, neighbouring="add_remove", random_state=None,
                 block_rows=65536, memory_limit=2**30, verbose=False, budget=None, ledger=None, secure_mode=False):
        self.epsilon = epsilon
        self.delta = delta
        self.method = method
        self.steps = steps
        self.learning_rate = learning_rate
        self.clip = clip
        self.center = center
        self.center_share = center_share
        self.classes = classes
        self.loss = loss
        self.fit_intercept = fit_intercept
        self.optimizer = optimizer
        self.momentum = momentum
        self.batch_size = batch_size
        self.accountant = accountant
        self.neighbouring = neighbouring
        self.random_state = random_state
        self.block_rows = block_rows
        self.memory_limit = memory_limit
        self.verbose = verbose
        self.budget = budget
        self.ledger = ledger
        self.secure_mode = secure_mode

    # ------------------------------------------------------------------ sklearn surface

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit privately on ``X`` (n, d) and labels ``y`` (n,).

        Raises
        ------
        ValueError
            Bad settings (ε ≤ 0, δ ∉ (0, 1), ...), NaN/inf features, mismatched lengths,
            fewer than two classes, labels outside ``classes``.
        """
        X, y = validate_data(self, X, y, dtype=[np.float32, np.float64], ensure_min_samples=1)
        check_classification_targets(y)
        self._fit_source(ArraySource(X, y))
        return self

    def decision_function(self, X):
        """Logits (n, k); for two classes the margin of ``classes_[1]`` (n,)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=[np.float32, np.float64])
        Z = np.asarray(self._logits(X))
        return Z[:, 1] - Z[:, 0] if Z.shape[1] == 2 else Z

    def predict_proba(self, X):
        """Class probabilities (n, k): softmax, or normalized sigmoids (one-vs-rest) for the sigmoid loss."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=[np.float32, np.float64])
        Z = self._logits(X)
        if self._loss == "softmax":
            P = jax.nn.softmax(Z, axis=1)
        else:
            P = jax.nn.sigmoid(Z)
            P = P / jnp.maximum(jnp.sum(P, axis=1, keepdims=True), 1e-30)
        return np.asarray(P, dtype=np.float64)

    def predict(self, X):
        """Most likely class of each row, (n,)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=[np.float32, np.float64])
        return self.classes_[np.asarray(jnp.argmax(self._logits(X), axis=1))]

    def _logits(self, X):
        mean = None if self.mean_ is None else jnp.asarray(self.mean_)
        Xp = _prep(jnp.asarray(X, jnp.float32), mean, float(self.clip))
        return Xp @ jnp.asarray(self.coef_.T) + jnp.asarray(self.intercept_)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = self.random_state is None
        return tags

    # ------------------------------------------------------------------ the private core

    def _plan(self, n: int) -> dict:
        """Steps, sample rate, noise multipliers, learning rate and accountant: public, before any data."""
        method = self.method
        steps = int(self.steps or DEFAULT_STEPS[method])
        if method == "adam1" and steps != 1:
            raise ValueError(f"method='adam1' is a single step; got steps={steps} (use method='sgd' or 'minibatch')")
        q = 1.0 if method != "minibatch" else min(1.0, self.batch_size / n)
        acct = self.accountant or ("gdp" if q >= 1.0 else "pld")
        if acct == "gdp" and q < 1.0:
            raise ValueError("accountant='gdp' is exact only for full-batch methods; use 'pld' or 'rdp' for minibatch")
        share = self.center_share if self.center else 0.0
        if q >= 1.0 and acct == "gdp":
            sigma, sigma_c = accounting.split_noise(self.epsilon, self.delta, steps=steps, center_share=share,
                                                    neighbouring=self.neighbouring)
        else:
            # Centering gets the share of μ² it would get if the T sampled steps were
            # Gaussian with μ² ≈ q²T/σ² (CLT, Bu et al.); the accountant then verifies exactly.
            ratios = [math.sqrt((1 - share) / (share * steps * q * q))] if share > 0 else []
            sigma = accounting.calibrate_noise(self.epsilon, self.delta, steps=steps, sample_rate=q, accountant=acct,
                                               neighbouring=self.neighbouring, extra_ratios=ratios)
            sigma_c = ratios[0] * sigma if ratios else math.inf
        lr = self.learning_rate
        if lr is None:
            if method == "adam1" or self.optimizer != "sgd":
                lr = 1e-3
            elif sigma == 0.0:
                lr = NON_PRIVATE_SGD_LR
            else:
                lr = LR_NOISE_RATIO * q * n / sigma
        if math.isinf(self.epsilon):
            acct, event = "none", _ev.NonPrivateDpEvent()
        else:
            event = accounting.dp_event(sigma, steps=steps, sample_rate=q,
                                        extra_noise_multipliers=[sigma_c] if math.isfinite(sigma_c) else [])
        return dict(method=method, steps=steps, sample_rate=q, accountant=acct, sigma=sigma, sigma_center=sigma_c,
                    learning_rate=float(lr), event=event)

    def _classes_from(self, source) -> tuple[np.ndarray, list]:
        leaks = []
        if self.classes is None:
            labels = source.labels()
            classes = np.unique(labels)
            warnings.warn("classes inferred from the private labels: the class list is not covered by the "
                          "privacy guarantee; pass classes=... to avoid this", PrivacyLeakWarning, stacklevel=4)
            leaks.append("classes")
        else:
            classes = np.unique(np.asarray(self.classes))
            if classes.size != np.asarray(self.classes).size:
                raise ValueError("classes contains duplicates")
        if classes.size < 2:
            raise ValueError(f"DPLinearClassifier needs at least 2 classes; got {classes.size} class: {classes}")
        return classes, leaks

    def _fit_source(self, source) -> "DPLinearClassifier":
        """Fit on any row source (arrays or a store split); bounded memory when streaming."""
        n, d = source.n, source.dim
        if n < 1:
            raise ValueError("no rows to fit on")
        plan = self._plan(n)
        if self.secure_mode:
            _check_secure_mode(self)
        key, seeded = noise.make_key(self.random_state)
        self._charge(source, plan, seeded)  # before any private row (labels included) is read
        classes, leaks = self._classes_from(source)
        leaks += _public_setting_leaks(self.epsilon, self.delta, n)
        k = classes.size
        loss = self.loss or ("sigmoid" if plan["method"] == "adam1" else "softmax")
        bias_init = -10.0 if loss == "sigmoid" else 0.0
        keys = noise.split_named(key, "center", "train")
        norm, clip = float(self.clip), float(self.clip)
        rows = int(self.block_rows)

        def index_blocks():
            for Xb, yb in source.blocks(rows):
                idx = np.searchsorted(classes, yb)
                idx = np.minimum(idx, k - 1)
                bad = classes[idx] != yb
                if np.any(bad):
                    raise ValueError(f"labels {np.unique(yb[bad])[:10].tolist()} are not in classes={classes.tolist()}")
                if Xb.dtype not in (np.float16, np.float32):
                    Xb = np.asarray(Xb, np.float32)
                yield Xb, idx.astype(np.int32)  # float16 stays float16 until the device: half the copy

        def padded_blocks(desc):
            size = None
            for Xb, yb in tqdm(index_blocks(), desc=desc, disable=not self.verbose, leave=False):
                size = size or _padded_len(Xb.shape[0])
                m = Xb.shape[0]
                to = size if m >= size else min(size, -(-m // TAIL_ROWS) * TAIL_ROWS)
                yield _put_rows(*_pad_rows(Xb, yb, _padded_len(to)))

        # 1. private centering: Gaussian mechanism on the sum of normalized rows
        mean = None
        if math.isfinite(plan["sigma_center"]):
            total = jnp.zeros(d, jnp.float32)

            def row_sums():
                nonlocal total
                for Xb, _, mb in padded_blocks("centering"):
                    total = total + _row_sum(Xb, mb, norm)
                    yield total

            _double_buffered(row_sums())
            if self.secure_mode:
                mean = jnp.asarray(secure_noise.secure_gaussian_release(total, plan["sigma_center"] * norm, norm) / n,
                                   jnp.float32)
            else:
                mean = preprocess.private_mean(total, n, keys["center"], plan["sigma_center"], norm)

        # 2. training
        # secure_mode releases every step's gradient sum on the host: the per-step (streaming) loop does that
        in_memory = (source.in_memory or n * d * 4 <= self.memory_limit) and not self.secure_mode
        method = plan["method"]
        sigma, lr = plan["sigma"], plan["learning_rate"]
        if method == "adam1":
            acc = train.class_sums_init(d, k)

            def class_sums():
                nonlocal acc
                for Xb, yb, mb in padded_blocks("adam1 pass"):
                    acc = _class_sums_block(acc, Xb, yb, mb, mean, clip, bias_init, k=k, norm=norm, loss=loss,
                                            fit_intercept=self.fit_intercept)
                    yield acc

            _double_buffered(class_sums())
            if self.secure_mode:
                params = _secure_adam1_step(acc, sigma, lr, clip=clip, loss=loss, bias_init=bias_init,
                                            fit_intercept=self.fit_intercept)
            else:
                params = _adam1_step(acc, keys["train"], sigma, lr, clip=clip, loss=loss, bias_init=bias_init,
                                     fit_intercept=self.fit_intercept)
        elif in_memory:
            Xs, ys = [], []
            for Xb, yb in index_blocks():
                Xs.append(np.asarray(_prep(jnp.asarray(Xb), mean, norm), np.float32))
                ys.append(yb)
            Xp, yp, mp = _pad_rows(np.concatenate(Xs), np.concatenate(ys), _padded_len(n))
            Xp, Yp, mp = _put_rows(Xp, np.asarray(jax.nn.one_hot(yp, k)), mp)
            common = dict(steps=plan["steps"], clip=clip, loss=loss, fit_intercept=self.fit_intercept,
                          bias_init=bias_init, momentum=float(self.momentum))
            if method == "sgd":
                params = _fit_full_batch(Xp, Yp, mp, keys["train"], sigma, lr, optimizer="sgd", **common)
            else:
                params = _fit_minibatch(Xp, Yp, mp, keys["train"], sigma, lr, sample_rate=plan["sample_rate"],
                                        optimizer=self.optimizer, **common)
        else:
            params = self._fit_streaming(padded_blocks, plan, keys["train"], mean, n, d, k, loss, bias_init)

        self.classes_ = classes
        self.coef_ = np.asarray(params.W, dtype=np.float64).T.copy()
        self.intercept_ = np.asarray(params.b, dtype=np.float64).copy()
        self.mean_ = None if mean is None else np.asarray(mean, dtype=np.float64)
        self._loss = loss
        sig = {"step": plan["sigma"]}
        if math.isfinite(plan["sigma_center"]):
            sig = {"center": plan["sigma_center"], **sig}
        if plan["accountant"] == "none":
            eps = math.inf
        else:
            eps = accounting.event_epsilon(plan["event"], self.delta, accountant=plan["accountant"],
                                           neighbouring=self.neighbouring)
        self.privacy_ = PrivacyReport(
            epsilon=eps, delta=float(self.delta), noise_multipliers=sig, steps=plan["steps"],
            sample_rate=plan["sample_rate"], accountant=plan["accountant"],
            neighbouring=accounting._relation(self.neighbouring), seeded=seeded, dp_event=plan["event"],
            clip=clip, method=method, n_rows=n, leaks=tuple(leaks), learning_rate=lr,
            secure_mode=bool(self.secure_mode))
        return self

    def _charge(self, source, plan, seeded) -> None:
        """Record this fit on the split's ledger (raises PrivacyBudgetExceeded past ``budget``).

        A store split is charged on the ledger beside it; arrays only when ``ledger`` or ``budget`` is given.
        """
        from .ledger import ledger_for

        split = getattr(source, "split", None)
        if split is None and self.ledger is None and self.budget is None:
            return
        led = ledger_for(split if split is not None else (), cap=self.budget, ledger=self.ledger)
        led.charge(plan["event"], mechanism=f"DPLinearClassifier/{plan['method']}", epsilon=float(self.epsilon),
                   delta=float(self.delta), params={"steps": plan["steps"], "sample_rate": plan["sample_rate"],
                                                    "sigma": plan["sigma"], "accountant": plan["accountant"],
                                                    "seeded": bool(seeded)})
        self.ledger_ = led

    def _fit_streaming(self, padded_blocks, plan, key, mean, n, d, k, loss, bias_init):
        """sgd / minibatch when the split exceeds ``memory_limit``: one pass over the store per step."""
        q = plan["sample_rate"]
        optimizer = "sgd" if plan["method"] == "sgd" else self.optimizer
        opt = train.make_optimizer(optimizer, plan["learning_rate"], momentum=float(self.momentum))
        state = train.init_state(d, k, opt, bias_init)
        denom = q * n  # public: expected (q<1) or exact (q=1) batch size
        for step_key in (tqdm(jax.random.split(key, plan["steps"]), desc=f"{plan['method']} steps",
                                             disable=not self.verbose)):
            # full batch: the step key is the noise key, exactly as in train.fit_full_batch
            k_sample, k_noise = jax.random.split(step_key) if q < 1.0 else (None, step_key)
            g = train.LinearParams(jnp.zeros((d, k), jnp.float32), jnp.zeros((k,), jnp.float32))

            def grad_sums():
                nonlocal g
                for b, (Xb, yb, mb) in enumerate(padded_blocks(None)):
                    if q < 1.0:
                        mb = mb * jax.random.bernoulli(jax.random.fold_in(k_sample, b), q, mb.shape).astype(mb.dtype)
                    gb = _grad_block(state.params, Xb, yb, mb, mean, float(self.clip), k=k, norm=float(self.clip),
                                     loss=loss, fit_intercept=self.fit_intercept)
                    g = jax.tree.map(jnp.add, g, gb)
                    yield g

            _double_buffered(grad_sums())
            sigma = plan["sigma"]
            if self.secure_mode:  # released here with the discrete Gaussian; nothing more to add in the update
                g, sigma = _secure_release(g, sigma, float(self.clip), self.fit_intercept), 0.0
            state = _stream_update(state, g, k_noise, sigma, denom, plan["learning_rate"],
                                   float(self.momentum), float(self.clip), optimizer=optimizer,
                                   fit_intercept=self.fit_intercept)
        return state.params
