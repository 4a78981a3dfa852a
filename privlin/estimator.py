"""``DPLinearClassifier``: a scikit-learn estimator whose ``fit`` is (ε, δ)-differentially private.

The thin public layer: settings stored by ``__init__`` (defaults: :data:`privlin.defaults.PARAMS`), validated
once in ``fit``, then the one fit workflow (:mod:`privlin.workflow`: public checks → plan → charge → run → a
fitted record, unpacked here).  ``privlin.fit`` and ``privlin.evaluate`` are the same estimator on a store.
"""
from __future__ import annotations

import math
import warnings
from numbers import Integral, Real

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_consistent_length, check_is_fitted, validate_data

from . import accounting, data, evaluation, noise, prediction, public, train, workflow
from .defaults import DEFAULT_EPSILON, METHODS, PARAMS
from .report import PrivacyLeakWarning
from .workflow import coef_of, plans_for, report_for  # noqa: F401 - their home is workflow; kept importable here

__all__ = ["DPLinearClassifier", "fit", "evaluate", "check_labels"]


def _check_secure_mode(est) -> None:
    """secure_mode's preconditions: a secret seed (no random_state) and noise to secure."""
    if not est.secure_mode:
        return
    if est.random_state is not None:
        raise ValueError("secure_mode=True draws all randomness from os.urandom: leave random_state=None")
    if est.epsilon is not None and math.isinf(est.epsilon):
        raise ValueError("secure_mode=True with epsilon=inf: there is no noise to secure")


class DPLinearClassifier(ClassifierMixin, BaseEstimator):
    """Differentially private linear classifier (multinomial or one-vs-rest logistic).

    Parameters
    ----------
    epsilon : float or None, default=1.0
        Privacy budget ε > 0 of the whole fit (every release: row norm, centering, scaling, curvature, training);
        ``inf`` is the labelled non-private
        baseline.  None only with ``noise_multiplier`` (then the report gives the ε it achieves).
    delta : float, default=1e-5
        δ in (0, 1); choose δ ≪ 1/N.
    method : {"sgd", "adam1", "minibatch"}, default="sgd"
        ``"sgd"``: full-batch DP-SGD with momentum, zero init (DP-RandP).
        ``"adam1"``: one full-batch DP-Adam step from zero init, sigmoid CE, bias −10 (Mehta et al.);
        one pass over the data.  ``"minibatch"``: Poisson-subsampled DP-SGD/Adam/LAMB.
    steps : int or None, default=None
        Training steps; None: 1 (adam1), 100 (sgd), 200 (minibatch).
    learning_rate : float or None, default=None
        None: the plan's rule (:func:`privlin.plan.default_learning_rate`).
    clip : float, default=1.0
        Per-example gradient norm bound C.
    normalize : bool, default=True
        Scale every row to norm ``clip`` first (free: a per-row map with a public constant).
    center : bool, default=True
        Privately center rows (DP-RandP); costs ``center_share`` of the budget, released in one stage or, where
        the plan says so from public facts, two (:func:`privlin.releases.preprocess.center_stages`).  Needs
        ``normalize``.
    recenter : bool or None, default=None
        Re-centering rounds before the centering (:func:`privlin.releases.preprocess.recenter_rounds`): each
        releases the mean of the current rows, subtracts it and normalizes again, which zooms in on a tight cloud
        (backbone features) that one noisy mean cannot find; costs 5% of μ² (:data:`privlin.plan.RECENTER_SHARE`).
        None: with the scaling stage, where the centering's expected error is at least a tenth of the row norm (few
        rows, small ε; decided from N, d, ε, δ).  Not in secure mode.
    center_share : float or None, default=None
        Fraction of the GDP budget μ² spent on centering; None: 5% (:data:`privlin.plan.DEFAULT_CENTER_SHARE`;
        DP-RandP's ImageNet runs, N = 1.28M, spent 0.2–0.4%; smaller N needs more).
    scale : bool or None, default=None
        Privately standardize, then whiten, the centered rows (:mod:`privlin.releases.scaling`); costs ``scale_share``.
        None: on for ``sgd`` and ``minibatch`` when rows are centered and ε is given (each release only where it
        can be told from its own noise, decided from N, d, ε, δ), off for ``adam1``.  Needs ``center``.
    scale_share : float or None, default=None
        Fraction of the GDP budget μ² spent on the scaling stage; None: 15%
        (:data:`privlin.plan.DEFAULT_SCALE_SHARE`).  The report lists every mechanism's σ and share.
    radial : bool or None, default=None
        Give each row its log-norm, relative to a privately released typical norm, as one more coordinate
        (:mod:`privlin.releases.norms`; normalizing the rows discards it); costs 3% of μ²
        (:data:`privlin.plan.RADIUS_SHARE`).  None: with the scaling stage, where the release can find the
        typical norm (decided from N, ε, δ).  Needs the scaling stage.
    noise_multiplier, center_noise_multiplier : float or None, default=None
        Explicit σ of the training steps and of the centering (a paper's stated σ) instead of calibrating
        to ``epsilon`` (then ``epsilon=None``).
    classes : array-like or None, default=None
        The public class list.  None: a store's published ``classes`` attribute (then ``classes_`` are its names),
        else read from the private labels (PrivacyLeakWarning).  Rows whose label is not in it are null rows: they
        contribute nothing, silently (the guarantee needs it); :func:`privlin.check_labels` counts them, without
        privacy, for a check on your own data.
    class_weight : dict or None, default=None
        Public weights per class, ``{class: weight}`` (a class not named: 1), each in (0, 1]: every row's
        contribution to the training sums is scaled by its class's weight before the clip bound is applied, so
        the guarantee is unchanged.  ``"balanced"`` is refused (it reads the private class counts), and so is a
        weight above 1 (divide by the largest).  The preprocessing's statistics are not weighted.
    loss : {"softmax", "sigmoid"} or None, default=None
        None: sigmoid for adam1 (Mehta et al.), softmax otherwise.
    fit_intercept : bool or None, default=None
        Train an intercept (its gradient shares the clip norm).  Otherwise it stays at its init
        (−10 for sigmoid, 0 for softmax), which never changes predictions.  None: True for ``sgd`` and
        ``minibatch`` (centered rows have no constant direction: unequal class frequencies need the intercept),
        False for ``adam1`` (Mehta et al.'s frozen bias −10).
    optimizer : {"sgd", "adam", "lamb"}, default="sgd"
        Optimizer of ``"minibatch"`` (``"sgd"`` uses ``momentum``).
    momentum : float, default=0.9
    batch_size : int, default=256
        Expected batch size of ``"minibatch"`` (sample rate q = batch_size / N).
    accountant : {"gdp", "pld", "rdp"} or None, default=None
        None: "gdp" (exact) for full-batch methods, "pld" for minibatch.
    neighbouring : {"replace_special", "replace_one"}, default="replace_special"
        dp-accounting's relation: zero-out (one example replaced by a null one; N public) or substitution.
    random_state : int ≥ 0, numpy Generator or RandomState, JAX key or None, default=None
        None draws the noise seed from the OS CSPRNG; a seed makes the noise reproducible
        (and so known to whoever knows the seed; ``privacy_.seeded`` says so).
    block_rows : int, default=65536
        Rows per block when streaming.
    memory_limit : int, default=2**30
        Bytes the in-memory path may hold (the rows as read on host and device, their float32 and preprocessed
        copies, the labels: :func:`privlin.runner.in_memory_bytes`); larger inputs are streamed every pass.
    verbose : bool, default=False
        Show progress on stages that run more than a few seconds (:mod:`privlin.progress`; ``privlin.fit`` turns
        it on by default).
    budget : (float, float) or None, default=None
        Cap ``(ε, δ)`` on the total spent on the data's ledger: set (or lowered) in the ledger, which then
        refuses any mechanism past it before reading a row (``PrivacyBudgetExceeded``).
    ledger : privlin.ledger.PrivacyLedger or None, default=None
        Ledger to charge for arrays (a store split always charges the ledger beside it).
    secure_mode : bool, default=False
        Release every noisy statistic with the discrete Gaussian from ``os.urandom`` (``privlin.secure_noise``),
        on the host, once per step.  Needs ``random_state=None``.
    public : None, array (m, d), (X_pub, y_pub), str, store, (store, split), stores.Split or privlin.data.Source, default=None
        Rows you may publish, of the same features (labels needed only for ``public_start``): the plan's
        preprocessing statistics are computed from them without noise or charge and its budget goes to training
        (:mod:`privlin.public`).  A string names another split of the training store, else a store path.  Refused where it shares an item
        with the training rows; arrays carry no content identity (warned).
    public_audit : bool or float, default=False
        With ``public``: run the near-duplicate audit (:func:`privlin.knn.overlap_audit`, at this cosine
        threshold) first, a non-private release about the training rows, charged as such; a twin refuses the fit.
    public_rank : int or None, default=0
        With ``public``: project the rows onto the top ``public_rank`` principal directions of the public rows
        after their centre (:mod:`privlin.releases.project`), so the scaling stage and the training's noise live
        in that many dimensions; given, not charged.  None: the smallest rank whose directions hold 99.5% of the
        public rows' energy, at most their count; 0: no projection (it cost accuracy on digits, BENCHMARKS.md,
        "Public statistics").
    public_start : bool, default=False
        With labelled public rows (``public=(X_pub, y_pub)``, or a store split: its labels are read): start the DP
        steps (``sgd``, ``minibatch``) from a non-private L2 logistic regression fitted on the public rows only, in
        the model's coordinates (:func:`privlin.chain.public_start`), instead of zero; not charged, σ and ε
        unchanged.  Needs a public class list (``classes``, or the store's).
    public_check : bool, default=True
        With ``public``, on full-batch fits: first pay 0.5% of the budget (μ²) for a noisy count of the training rows
        within the public rows' radius (:mod:`privlin.releases.public_check`), and use the public statistics only
        where it says the rows look drawn like the public ones, else the private defaults' plan.  False: use the
        public statistics unchecked (the whole budget trains; a public source of another distribution can then
        ruin the fit, BENCHMARKS.md "The public check").
    public_clip : bool, default=True
        With ``public_start``: multiply every training row's gradient, before the clip at ``clip``, by ``clip``
        over the public rows' mean held-out gradient norm at the start (:func:`privlin.chain.clip_gain`): from a
        start that gets most rows right, the clip then binds at a fresh row's typical gradient norm instead of far
        above it, and the same noise weighs less; σ, the clip and ε unchanged (BENCHMARKS.md, "Clipping at the
        start's gradient norm").  False: the start alone.
    average : float in [0, 1] or "ema", default=0.0
        ``sgd`` and ``minibatch``: return the mean of the DP steps' iterates over the last ``average`` share of the
        steps, or ``"ema"`` an exponential moving average of them (:func:`privlin.train.average_weights`), instead
        of the last iterate: post-processing of the noisy steps, σ and ε unchanged; the report says so.  0: the
        last iterate (measured: a little better with ``public_start``, worse from zero at small ε; BENCHMARKS.md,
        "Averaging the DP steps' iterates").

    Attributes
    ----------
    classes_ : ndarray (k,)
        The public class list: ``classes`` as given; else, for a store fit, the class names the store publishes
        (its labels are indices into them: ``predict`` returns the names); else the labels read from the data.
    coef_ : ndarray (1, d) for two classes, else (k, d); only with ``normalize=False, center=False``
        The decision function as an exact map of the input rows: ``decision_function(X) == X @ coef_.T +
        intercept_`` (raveled for two classes, the margin of ``classes_[1]``), up to float rounding, so
        ``zip(feature_names_in_, coef_[0])`` pairs each input feature with its weight.  With ``normalize=True``
        (the default) each row is scaled to norm ``clip`` — not an affine map of X — and the later stages act on
        those rows: no input-space weights exist, and reading ``coef_`` raises AttributeError saying so (use
        ``coef_transformed_``).
    intercept_ : ndarray (1,) for two classes, else (k,); only with ``normalize=False, center=False``
    coef_transformed_ : ndarray (k, d')
        The weights as trained, one row per class (two for two classes), on the *transformed* rows (normalized,
        centered by ``mean_``, normalized, scaled by ``scaling_``; with ``radius_``, the radial coordinate last);
        d' = ``plan_.model_dim``.  ``predict``, ``decision_function`` and ``predict_proba`` use these.
    intercept_transformed_ : ndarray (k,)
    transformed_feature_names_ : ndarray of str (d',)
        What each column of ``coef_transformed_`` weighs: ``transformed0, ...`` (and ``log_norm``) after
        normalization, the input features' names without it.
    mean_ : ndarray (d,) or (d + 1,), or (R, d) / (R, d + 1) with re-centering rounds, or None
        Released noisy mean of the normalized rows (public output of the centering mechanism, shrunk toward 0 by
        James–Stein: :func:`privlin.releases.preprocess.private_mean`; with two stages, the first estimate plus the
        refining stage's shrunk correction, :func:`privlin.releases.preprocess.refined_mean`).  With re-centering
        rounds, the chain of released means (each round's, then the centering's, last), subtracted in turn, each
        followed by a re-normalization (:func:`privlin.releases.preprocess.apply`).
    radius_ : float or None
        log₂ of the released typical row norm R (:mod:`privlin.releases.norms`), where the plan buys it.
    scaling_ : privlin.releases.scaling.Scaling or None
        Released map of the scaling stage (shift, scale, whitening rotation), public.
    curvature_ : float or None
        Released upper bound on the top eigenvalue of the training rows' second moment, where the plan buys it
        (:func:`privlin.releases.scaling.release_curvature`); it set the learning rates in ``privacy_``.
    plan_ : privlin.plan.Plan
        What ran: every default resolved, every σ.
    privacy_ : PrivacyReport
    ledger_ : privlin.ledger.PrivacyLedger or None
        The ledger this fit was charged on.
    n_features_in_ : int

    Notes
    -----
    Not supported, each refused in one line that says why: per-row ``sample_weight`` (``fit`` raises TypeError: the
    noise is calibrated to every row contributing at most ``clip``, and privlin has no weighted path; a row weighted
    0 is a row labelled outside ``classes``, a null row), ``partial_fit`` and warm starts (each fit is one charged
    release of the whole chain on the whole split; continuing one would be another release on the same rows, which
    only a new fit — charged again on the same ledger — accounts for), ``class_weight="balanced"`` (it reads the
    private class counts; public weights ≤ 1 are supported).
    """

    _parameter_constraints = {
        "epsilon": [Interval(Real, 0, float("inf"), closed="right"), None],  # inf: the non-private baseline
        "delta": [Interval(Real, 0, 1, closed="neither")],
        "method": [StrOptions(set(METHODS))],
        "steps": [Interval(Integral, 1, None, closed="left"), None],
        "learning_rate": [Interval(Real, 0, None, closed="neither"), None],
        "clip": [Interval(Real, 0, None, closed="neither")],
        "normalize": ["boolean"],
        "center": ["boolean"],
        "recenter": ["boolean", None],
        "center_share": [Interval(Real, 0, 1, closed="neither"), None],
        "scale": ["boolean", None],
        "scale_share": [Interval(Real, 0, 1, closed="neither"), None],
        "radial": ["boolean", None],
        "noise_multiplier": [Interval(Real, 0, None, closed="neither"), None],
        "center_noise_multiplier": [Interval(Real, 0, None, closed="neither"), None],
        "classes": ["array-like", None],
        "class_weight": [dict, "array-like", StrOptions({"balanced"}), None],
        "loss": [StrOptions(set(train.LOSSES)), None],
        "fit_intercept": ["boolean", None],
        "optimizer": [StrOptions(set(train.OPTIMIZERS))],
        "momentum": [Interval(Real, 0, 1, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "accountant": [StrOptions(set(accounting.ACCOUNTANTS)), None],
        "neighbouring": [StrOptions({"replace_special", "replace_one"})],
        "random_state": ["random_state", Interval(Integral, 0, None, closed="left"), np.random.Generator, jax.Array],
        "block_rows": [Interval(Integral, 1, None, closed="left")],
        "memory_limit": [Interval(Integral, 0, None, closed="left")],
        "verbose": ["boolean"],
        "secure_mode": ["boolean"],
        "budget": "no_validation",
        "ledger": "no_validation",
        "public": "no_validation",
        "public_audit": ["boolean", Interval(Real, -1, 1, closed="right")],
        "public_rank": [None, Interval(Integral, 0, None, closed="left")],
        "public_start": ["boolean"],
        "public_check": ["boolean"],
        "public_clip": ["boolean"],
        "average": [Interval(Real, 0, 1, closed="both"), StrOptions({"ema"})],
    }

    def __init__(self, *, epsilon=PARAMS["epsilon"], delta=PARAMS["delta"], method=PARAMS["method"],
                 steps=PARAMS["steps"], learning_rate=PARAMS["learning_rate"], clip=PARAMS["clip"],
                 normalize=PARAMS["normalize"], center=PARAMS["center"], recenter=PARAMS["recenter"],
                 center_share=PARAMS["center_share"], scale=PARAMS["scale"], scale_share=PARAMS["scale_share"],
                 radial=PARAMS["radial"], noise_multiplier=PARAMS["noise_multiplier"],
                 center_noise_multiplier=PARAMS["center_noise_multiplier"], classes=PARAMS["classes"],
                 class_weight=PARAMS["class_weight"], loss=PARAMS["loss"], fit_intercept=PARAMS["fit_intercept"],
                 optimizer=PARAMS["optimizer"],
                 momentum=PARAMS["momentum"], batch_size=PARAMS["batch_size"], accountant=PARAMS["accountant"],
                 neighbouring=PARAMS["neighbouring"], random_state=PARAMS["random_state"],
                 block_rows=PARAMS["block_rows"], memory_limit=PARAMS["memory_limit"], verbose=PARAMS["verbose"],
                 budget=PARAMS["budget"], ledger=PARAMS["ledger"], secure_mode=PARAMS["secure_mode"],
                 public=PARAMS["public"], public_audit=PARAMS["public_audit"], public_rank=PARAMS["public_rank"],
                 public_start=PARAMS["public_start"], public_check=PARAMS["public_check"],
                 public_clip=PARAMS["public_clip"], average=PARAMS["average"]):
        self.epsilon = epsilon
        self.delta = delta
        self.method = method
        self.steps = steps
        self.learning_rate = learning_rate
        self.clip = clip
        self.normalize = normalize
        self.center = center
        self.recenter = recenter
        self.center_share = center_share
        self.scale = scale
        self.scale_share = scale_share
        self.radial = radial
        self.noise_multiplier = noise_multiplier
        self.center_noise_multiplier = center_noise_multiplier
        self.classes = classes
        self.class_weight = class_weight
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
        self.public = public
        self.public_audit = public_audit
        self.public_rank = public_rank
        self.public_start = public_start
        self.public_check = public_check
        self.public_clip = public_clip
        self.average = average

    # ------------------------------------------------------------------ sklearn surface

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, **fit_params):
        """Fit privately on ``X`` (n, d) and labels ``y`` (n,), or on a store split passed as ``X`` alone.

        With a public class list (``classes``, or a store's published one), a row whose label is not in it is a
        *null row*: it contributes nothing, and no error or warning says so — the guarantee needs that (an error
        about one row's label would release that label).  To catch a label mix-up on your own data, run the
        labelled non-private check :func:`privlin.check_labels` first.

        Parameters
        ----------
        X : array (n, d), or a ``stores.Split`` / ``privlin.data.Source`` / store path (split ``"train"``)
        y : array (n,) or None
            None only when ``X`` is a store split or source.
        **fit_params
            None accepted: ``sample_weight`` and any other raise TypeError (see Notes of the class).

        Raises
        ------
        TypeError
            A fit parameter (``sample_weight=``, ...): refused, naming why.
        ValueError
            Bad settings (ε ≤ 0, δ ∉ (0, 1), ...), NaN/inf features or mismatched lengths in arrays,
            fewer than two classes.
        privlin.ledger.PrivacyBudgetExceeded
            The data's ledger would pass its cap (no row was read).
        """
        if fit_params:
            raise TypeError(_refused_fit_params(fit_params))
        if y is None and data.is_store_like(X):
            source = data.as_source(X, "train")
            self.n_features_in_ = source.dim
        elif self.classes is None:  # the labels make the class list (a warned leak): scikit-learn's target checks
            X, y = validate_data(self, X, y, dtype=[np.float32, np.float64], ensure_min_samples=1)
            check_classification_targets(y)
            source = data.ArraySource(X, y)
        else:  # a public class list: any other label, whatever its type, is a null row; only shapes may raise
            X = validate_data(self, X, dtype=[np.float32, np.float64], ensure_min_samples=1)
            y = data.row_labels(y)
            check_consistent_length(X, y)
            source = data.ArraySource(X, y)
        return self._fit(source)

    def score(self, X, y, sample_weight=None):
        """Exact accuracy on ``(X, y)`` (scikit-learn's), a number about those rows released without noise and
        charged to no ledger: always a PrivacyLeakWarning, since privlin cannot tell whether the rows are private
        (scikit-learn's ``GridSearchCV`` and ``cross_val_score`` score private validation folds this way)."""
        warnings.warn(_SCORE_WARNING[getattr(self, "ledger_", None) is not None], PrivacyLeakWarning, stacklevel=2)
        from sklearn.metrics import accuracy_score

        return float(accuracy_score(y, self.classes_[self._predicted_index(X)], sample_weight=sample_weight))

    def decision_function(self, X):
        """Logits (n, k); for two classes the margin of ``classes_[1]`` (n,).  Per-row outputs: see :meth:`predict`."""
        Z = np.asarray(self._logits(self._per_row(X, "decision_function")))
        return Z[:, 1] - Z[:, 0] if Z.shape[1] == 2 else Z

    def predict_proba(self, X):
        """Class probabilities (n, k): softmax, or normalized sigmoids (one-vs-rest) for the sigmoid loss.  Per-row
        outputs: see :meth:`predict`."""
        check_is_fitted(self)
        Z = self._logits(self._per_row(X, "predict_proba"))
        if self.plan_.loss == "softmax":
            P = jax.nn.softmax(Z, axis=1)
        else:
            P = jax.nn.sigmoid(Z)
            P = P / jnp.maximum(jnp.sum(P, axis=1, keepdims=True), 1e-30)
        return np.asarray(P, dtype=np.float64)

    def predict(self, X):
        """Most likely class of each row, (n,).

        ``X``: arrays (n, d), or a store split (``store["test"]``, a ``privlin.data.Source``): its rows that have
        features, in order.  One output per row, without noise and charged to no ledger: where the rows are known
        private (a store split, or this model's data is on a ledger, ``ledger_``) a PrivacyLeakWarning says so."""
        check_is_fitted(self)
        return self.classes_[self._predicted_index(self._per_row(X, "predict"))]

    def _per_row(self, X, what: str):
        """The rows of a per-row output as an array, warning where they are known private (see :meth:`predict`)."""
        check_is_fitted(self)
        store = data.is_store_like(X)
        if store:
            source = data.as_source(X, None)  # a store or path without a split: one line naming its splits
            blocks = [np.asarray(b, np.float32) for b, _ in source.blocks(int(self.block_rows))]
            X = np.concatenate(blocks) if blocks else np.zeros((0, source.dim), np.float32)
        if store or getattr(self, "ledger_", None) is not None:
            warnings.warn(f"{what}() returns one exact output per row, without noise and charged to no ledger: on "
                          f"private rows ({'a store split' if store else 'this model was fitted on a ledger'}) it is "
                          "an unaccounted release about each row; publish privlin.evaluate's charged accuracy instead",
                          PrivacyLeakWarning, stacklevel=3)
        return X

    def _predicted_index(self, X) -> np.ndarray:
        """Index into ``classes_`` of each row's most likely class, (n,), on checked rows (see :meth:`_logits`)."""
        return self._predict_rows(self._checked(X))

    def _logits(self, X):
        """Logits (n, k) of checked rows (scikit-learn's checks: NaN/inf or a wrong width raise)."""
        return self._predict_rows(self._checked(X), prediction.logits)

    def _checked(self, X):
        check_is_fitted(self)
        return validate_data(self, X, reset=False, dtype=[np.float32, np.float64])

    def _predict_rows(self, X, how=prediction.predicted_index):
        """``how`` (:func:`privlin.prediction.logits` or ``predicted_index``) of this model on rows X as given."""
        return how(self.plan_, self.coef_transformed_, self.intercept_transformed_, X, values=self.released_)

    @property
    def coef_(self):
        """Input-space weights where they are exact (``normalize=False, center=False``), else AttributeError naming
        ``coef_transformed_`` (:func:`privlin.workflow.input_space_weights`)."""
        check_is_fitted(self)
        return workflow.input_space_weights(self.plan_, self.coef_transformed_, self.intercept_transformed_,
                                            getattr(self, "released_", None))[0]

    @property
    def intercept_(self):
        """The intercept that goes with ``coef_`` (same condition)."""
        check_is_fitted(self)
        return workflow.input_space_weights(self.plan_, self.coef_transformed_, self.intercept_transformed_,
                                            getattr(self, "released_", None))[1]

    @property
    def transformed_feature_names_(self):
        """What each column of ``coef_transformed_`` weighs (:func:`privlin.workflow.transformed_feature_names`)."""
        check_is_fitted(self)
        return workflow.transformed_feature_names(self.plan_, getattr(self, "feature_names_in_", None))

    @property
    def partial_fit(self):
        """Not supported (AttributeError, so scikit-learn sees no incremental fit): see the class's Notes."""
        raise AttributeError("DPLinearClassifier has no partial_fit: each fit is one charged DP release of the whole "
                             "chain on the whole split; fit again (charged again on the same ledger) instead")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = self.random_state is None
        return tags

    # ------------------------------------------------------------------ the private core

    def _fit(self, source: data.Source) -> "DPLinearClassifier":
        """Public checks, then the one fit workflow (:func:`privlin.workflow.fit_plans`), unpacked."""
        _check_secure_mode(self)
        key, seeded = noise.make_key(self.random_state)
        pub = public.resolve(self.public, source, audit=self.public_audit, budget=self.budget, ledger=self.ledger)
        (fitted,) = workflow.fit_plans(source, [self.get_params()], [key], seeded=seeded, classes=self.classes,
                                       budget=self.budget, ledger=self.ledger,
                                       charge=workflow.estimator_charge(seeded), block_rows=self.block_rows,
                                       memory_limit=self.memory_limit, verbose=self.verbose, public=pub)
        return workflow.unpack(fitted, self)


#: score()'s PrivacyLeakWarning, without and with a ledger on the model (``ledger_``).
_SCORE_WARNING = {
    False: "score() is exact accuracy on the rows given, released without noise and charged to no ledger: privlin "
           "cannot tell whether they are private; if they are (a GridSearchCV or cross_val_score validation fold, a "
           "private test split) it is an unaccounted release. Tune with privlin.model_selection.PrivateGridSearchCV; evaluate "
           "with privlin.evaluate (charged to that split's ledger, or declared public)",
    True: "score() is exact accuracy on the rows given, released without noise and charged to no ledger: on private "
          "rows (a validation fold, a private test split) it is an unaccounted release. Tune with "
          "privlin.model_selection.PrivateGridSearchCV; evaluate a split with privlin.evaluate (charged to that "
          "split's ledger, or declared public)",
}


def _refused_fit_params(fit_params: dict) -> str:
    """The one-line refusal of ``fit(**fit_params)``."""
    if "sample_weight" in fit_params:
        return ("fit() takes no sample_weight: the DP noise is calibrated to every row contributing at most `clip`, "
                "equally, and privlin has no weighted path (a row weighted 0 is one labelled outside `classes`)")
    return (f"fit() takes no {', '.join(sorted(fit_params))}: DPLinearClassifier.fit(X, y) has no fit parameters "
            "(its settings are constructor parameters, each part of the charged plan)")


# ----------------------------------------------------------------------------- privlin.fit / privlin.evaluate

def fit(data_, y=None, *, epsilon=DEFAULT_EPSILON, split: str = "train", eps=None, progress: bool = True,
        **params) -> DPLinearClassifier:
    """Fit a :class:`DPLinearClassifier` on a store split (streamed, bounded memory) or on arrays: ``fit(store,
    epsilon=1)``, ``fit(X, y, epsilon=1)`` (scikit-learn's order) or ``fit((X, y), epsilon=1)``.

    Parameters
    ----------
    data_ : stores.FeatureStore, stores.Split, str/path/URL, tuple (X, y), or an array X (n, d) with ``y``
    y : array (n,) or None
        The labels of an array ``data_``; None for a store or a pair.
    epsilon : float or None, default=privlin.plan.DEFAULT_EPSILON
        ε of the whole fit (the estimator's keyword and default; ``eps=`` is an alias that replaces it).  Keyword
        only: ``fit(data, 1.0)`` is refused in one line that shows the call.
    split : str, default="train"
        Split to fit on when ``data_`` is a store or a path.
    progress : bool, default=True
        Show progress on stages that run more than a few seconds (stderr: compiling, passes over the store,
        steps; :mod:`privlin.progress`); the estimator's ``verbose``, which overrides it where given.
    **params
        Any :class:`DPLinearClassifier` parameter (``classes=``, ``method=``, ``budget=``, ...).

    Returns
    -------
    DPLinearClassifier
        Fitted; ``model.privacy_`` holds the guarantee.
    """
    if y is not None and np.ndim(y) == 0:
        raise TypeError(f"privlin.fit takes epsilon by keyword: privlin.fit(data, epsilon={y!r}) (or privlin.fit(X, "
                        f"y, epsilon={y!r}) for arrays)")
    params.setdefault("verbose", bool(progress))
    model = DPLinearClassifier(epsilon=epsilon if eps is None else eps, **params)
    if y is not None:
        return model.fit(data_, y)
    if isinstance(data_, tuple) and len(data_) == 2:
        return model.fit(*data_)
    return model.fit(data.as_source(data_, split))


def evaluate(model: DPLinearClassifier, data_, split: str = "test", *, block_rows: int = 65536, public: bool = False,
             ledger=None) -> float:
    """Accuracy of ``model`` on a store split (streamed) or on arrays ``(X, y)``.

    The accuracy is exact (no noise): a non-private release about the split's rows, charged before any is read as
    a ``NonPrivateDpEvent`` on the split's ledger (a store split's own; arrays only on a ``ledger`` passed), so a
    capped split refuses it — unless ``public=True`` declares the split public (recorded on its ledger as such;
    :mod:`privlin.evaluation`).  The accuracy is over the rows that have features: a store's rows skipped at
    extraction (images that did not decode) have no prediction and are left out of both counts.  It is
    :func:`privlin.prediction.correct_counts`, the one scoring rule of privlin: a label is matched as a fit
    matches it (one outside ``classes_`` is never correct, never an error); a store's labels index its published
    class names, and where those are the model's ``classes_`` (a fit on such a store without ``classes=``) each
    label is compared as its name; a row with a NaN or inf feature is never correct and never an error (it counts
    in the denominator).
    """
    check_is_fitted(model)
    source = data.as_source(data_, split)
    if source.n_valid == 0:
        raise ValueError(f"split {split!r} has no rows with features")
    if source.dim != model.n_features_in_:  # a public fact: refused before the charge
        raise ValueError(f"the rows have {source.dim} features; the model was fitted on {model.n_features_in_}")
    evaluation.charge_exact(source, public=public, mechanism="privlin.evaluate/accuracy", ledger=ledger)
    # the one scoring rule (privlin.prediction): labels as a fit matches them, a store's as the names it publishes
    # where those are classes_, a non-finite row never correct and never an error (the split is charged by now)
    (right,) = prediction.correct_counts([model._predict_rows], model.classes_, source, block_rows)
    return int(right) / source.n_valid


def check_labels(y, classes=None, *, split: str = "train", ledger=None) -> int:
    """NON-PRIVATE check: how many labels are outside the public class list, counted exactly from private labels.

    A private fit makes such a row a null row silently (the guarantee needs it: see ``DPLinearClassifier.fit``);
    this count is for catching a label mix-up on your own data, and it is a release without noise about every label
    it reads.  So it is charged like an exact accuracy (:mod:`privlin.evaluation`), before any label is read: a
    ``NonPrivateDpEvent`` on a store split's own ledger (a capped one refuses), or on ``ledger`` for arrays;
    arrays without a ledger are charged nothing.

    Parameters
    ----------
    y : array (n,) of labels, or a store / ``stores.Split`` / path (its ``split``'s labels, class indices)
    classes : array-like or None
        The public class list; None: a store's published one (required for arrays).
    split : str, default="train"
    ledger : privlin.ledger.PrivacyLedger or None

    Returns
    -------
    int
        The labels not in ``classes`` (rows a fit would make null rows).

    Raises
    ------
    ValueError
        No class list (arrays without ``classes``), or a list of another kind than the labels (names against the
        class indices of a store): public facts, checked before the charge.
    privlin.ledger.PrivacyBudgetExceeded
        The ledger has a cap (a non-private release passes none): no label was read.
    """
    if data.is_store_like(y):
        source = data.as_source(y, split)
    else:
        labels = data.row_labels(y)
        source = data.ArraySource(np.empty((labels.shape[0], 0), np.float32), labels)
    if classes is None and source.published_classes() is None:
        raise ValueError("check_labels needs the public class list: pass classes=[...]")
    cls_, _ = data.public_classes(source, classes)
    evaluation.charge_exact(source, public=False, mechanism="privlin.check_labels (non-private)", ledger=ledger)
    _, known = data.label_index(cls_, source.labels())
    return int(np.size(known) - np.count_nonzero(known))
