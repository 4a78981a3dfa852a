"""What every private release of a fit is: one value, described once (:class:`Release`), and what it reads: a
:class:`Driver` (exact sums over the rows, secure mode's noise) and a :class:`Context` (the values released before
it, and the row map they define); the one key split of a fit (:func:`stage_keys`, :func:`release_key`).

The plan holds its chain of ``(release, σ)`` and derives the event, the ε, the secure-mode table, the ledger entry
and the report's notes from it (:mod:`privlin.plan`); the runner walks it once, whatever the driver
(:func:`privlin.chain.fit_chain`).  Why: a new release is then one module and one entry in the chain.
"""
from __future__ import annotations

import dataclasses
import math
import zlib
from typing import Any, Callable, ClassVar, NamedTuple, Optional, Protocol

import jax
import jax.numpy as jnp

from .. import accounting, noise
from . import preprocess, scaling

__all__ = ["Release", "Facts", "planned_sigma", "Driver", "Context", "RowMap", "row_map", "model_rows", "projected",
           "rows_and_center", "stage_keys", "release_key", "recenter_keys"]


# ----------------------------------------------------------------------------- the one key split of a fit

def stage_keys(key) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(centering key, scaling key, training key) of a fit's key: the one key split of privlin."""
    keys = noise.split_named(key, "center", "train", "scale")
    return keys["center"], keys["scale"], keys["train"]


_KEYED = ("center", "train", "scale", "curvature", "radius", "center-refine", "recenter", "added")


def release_key(key, name: str) -> jax.Array:
    """The key of a later release (``"curvature"``, ``"radius"``, ``"center-refine"``, ``"recenter"``) of a fit's
    key: the 4th to 7th of the same split (JAX's partitionable threefry makes a split's first keys independent of
    how many follow, so :func:`stage_keys` and the earlier releases' keys are unchanged by them).  An added
    release's key is its name's CRC-32 folded into the 8th."""
    if name in _KEYED:
        return noise.split_named(key, *_KEYED)[name]
    return noise.fold_in(noise.split_named(key, *_KEYED)["added"], zlib.crc32(name.encode()) & 0x7FFFFFFF)


def recenter_keys(key, rounds: int) -> jax.Array:
    """One key per re-centering round (:func:`.preprocess.round_means`), from the fit's key."""
    return noise.split(release_key(key, "recenter"), rounds)


# ----------------------------------------------------------------------------- what a release reads

class Driver(Protocol):
    """How a release reads the rows (two: :mod:`privlin.in_memory`, traced; :mod:`privlin.streamed`, block by block).

    A release sees the rows only through these three calls, so the same :meth:`Release.compute` runs in memory
    (vmapped over plans), streamed (two blocks in flight, identical sums shared across plans), sharded and in
    secure mode.
    """

    def total(self, what: str, init, block_fn: Callable, *args, labels: bool = False, sample=None, **static):
        """The exact sum over all rows: ``block_fn(acc, x, mask, *args, **static)`` (with ``labels``:
        ``block_fn(acc, x, y, mask, ...)``, ``y`` one-hot) over chunks of rows as given, from ``init``.
        ``block_fn`` must be a module-level function or a method of a hashable release (the streamed driver
        compiles it once per (function, ``static``)); ``static``: hashable settings; ``what``: a progress label.
        ``sample``: ``(key, q)``: only the rows of that Poisson sample (:func:`privlin.train.poisson_mask`).
        A driver may reuse an identical total (same function, settings and arguments) within a run."""

    def mapped(self, rows: "RowMap", norm: float, normalize: bool) -> "Driver":
        """This driver over the rows as the released values ``rows`` map them (:func:`model_rows` at ``norm``):
        its block functions see mapped rows.  In memory the mapped rows are computed once per map (training and
        the curvature release read the same ones); streamed, block by block."""

    def noisy(self, name: str, value):
        """Secure mode's release of ``value`` (an exact sum, or a function returning it) by mechanism ``name``:
        the discrete Gaussian drawn on the host (:meth:`privlin.plan.Plan.secure_table`); None elsewhere, where
        the release draws its own Gaussian noise from its key."""


class RowMap(NamedTuple):
    """The released values that map rows as given to rows as a later release (or the model) sees them: the
    mean or chain of means (:func:`.preprocess.apply`), the scaling map (:class:`.scaling.Scaling`),
    log₂ of the typical row norm (:mod:`.norms`), the basis of a given public subspace (:mod:`.project`); each
    None where not (yet) released.  A pytree: the
    streamed driver passes it to its compiled block functions as an argument."""

    mean: Optional[jax.Array] = None
    scaling: Optional[scaling.Scaling] = None
    log_scale: Optional[jax.Array] = None
    project: Optional[jax.Array] = None  # (d', r) orthonormal basis of a public subspace (:mod:`.project`)
    skip: Optional[jax.Array] = None  # leading means of ``mean`` passed over (:class:`.preprocess.RowMap`)


def model_rows(X, rows: RowMap, norm: float, normalize: bool):
    """Rows mapped by the released values: normalized to ``norm`` (with a released ``log_scale``: with their
    radial coordinate, :func:`.norms.embed`), centered by the released mean and normalized again, (with a given
    public subspace) projected onto it and normalized again, then (with a released scaling) standardized and
    whitened, at norm ``norm``; without ``normalize``, as given (float32), projected onto a given subspace."""
    if not normalize:
        return projected(jnp.asarray(X, jnp.float32), rows.project, None)
    if rows.project is not None:
        Z = projected(preprocess.apply(X, preprocess.RowMap(1.0, rows.mean, rows.log_scale, rows.skip)),
                      rows.project, 1.0)
        return Z * norm if rows.scaling is None else scaling.apply(Z, rows.scaling, norm)
    if rows.scaling is None:
        return preprocess.apply(X, preprocess.RowMap(norm, rows.mean, rows.log_scale, rows.skip))
    return scaling.apply(preprocess.apply(X, preprocess.RowMap(1.0, rows.mean, rows.log_scale, rows.skip)),
                         rows.scaling, norm)


def projected(X, basis, norm):
    """Rows ``X @ basis`` (float32), normalized to ``norm`` (None: as projected); ``X`` itself where ``basis`` is
    None."""
    if basis is None:
        return X
    Z = X @ jnp.asarray(basis, jnp.float32)
    return Z if norm is None else preprocess.normalize_rows(Z, norm)


def rows_and_center(X, rows: RowMap, norm: float, normalize: bool):
    """``(U, c)`` such that :func:`model_rows` is ``U − c`` re-normalized to ``norm``: the rows as the released values
    map them up to their last centering, and that centering's mean; ``c`` None where the rows are already the
    model's (no centering, a scaling map, a projection, or rows as given).  What a sum over offsets from a center reads
    (:func:`privlin.sensitivity.offsets_sum`)."""
    if not normalize or rows.scaling is not None or rows.mean is None or rows.project is not None:
        return model_rows(X, rows, norm, normalize), None
    if rows.mean.ndim == 1:
        return preprocess.apply(X, preprocess.RowMap(norm, None, rows.log_scale)), rows.mean
    return preprocess.apply(X, preprocess.RowMap(norm, rows.mean[:-1], rows.log_scale, rows.skip)), rows.mean[-1]


class Context(NamedTuple):
    """What a release reads besides the rows: the plan's public settings (N, the rows' dimension ``dim``, the
    model's inputs ``model_dim``, the clip norm, whether rows are normalized), ``values``: the values released (or
    given) before it, by release name, and ``rows``: the row map they define, each release's contribution added by
    the release itself (:meth:`Release.map_rows`)."""

    n: Any
    dim: int
    model_dim: int
    clip: float
    normalize: bool
    values: dict = {}
    rows: RowMap = RowMap()
    center_stages: Any = None  # this plan's centering stages where one program runs plans of 1 and 2 (traced)
    recenter: Any = None  # this plan's re-centering σ ratio where one program runs plans with and without (traced)

    def row_map(self) -> RowMap:
        """How later rows use what was released so far (:func:`model_rows`)."""
        return self.rows

    @property
    def scaling(self):
        """The scaling map released so far (None: none)."""
        return self.rows.scaling

    @property
    def curvature(self):
        """The released curvature bound, which lifts W's learning rate in training (None: not released)."""
        return self.values.get("curvature")


def row_map(releases, values) -> RowMap:
    """The row map the released ``values`` (by name) of ``releases`` (in the order they ran) define: what
    :attr:`Context.rows` holds after them, and what prediction maps rows with."""
    rows = RowMap()
    for r in releases:
        if r.name in values:
            rows = r.map_rows(rows, values[r.name])
    return rows


def planned_sigma(share: float, mu: float, relation) -> float:
    """σ of a Gaussian release spending ``share`` of the GDP budget μ² (1/σ² = share·μ², sensitivity doubled under
    ``replace_one``): the view in which the plan decides, before calibration, which releases to make."""
    return accounting.sensitivity_factor(relation) / (math.sqrt(share) * mu)


@dataclasses.dataclass(frozen=True)
class Facts:
    """The public facts and settings a release decides from before calibration (:meth:`Release.share`): N, the
    rows' dimension, the clip norm, the GDP budget μ (inf: the non-private baseline; nan: σ was given, there is no
    budget to split), the relation's sensitivity factor, secure mode; ε and δ as asked (ε None: σ given), the
    relation's name, the parameters that ask for a release or refuse it (``center``, ``scale``, ``radial``,
    ``recenter``: None lets the release decide) and the shares they are given, the training settings, and,
    as the plan decides release by release, ``model_dim`` (d plus the coordinates the releases chosen so far
    add) and ``chosen`` (``(name, share)`` of those releases, in the order decided); ``projected``: the rank of a
    given public subspace (:mod:`.project`; 0: none), in which the releases after it and the model work."""

    n: int
    dim: int
    clip: float
    mu: float
    sensitivity_factor: float
    secure_mode: bool
    epsilon: Optional[float] = None
    delta: float = 0.0
    relation: str = "replace_special"
    center: bool = False
    center_share: float = 0.0
    scale: bool = False
    scale_share: float = 0.0
    radial: Optional[bool] = None
    recenter: Optional[bool] = None
    sigma_given: bool = False
    steps: int = 1
    q: float = 1.0
    momentum: float = 0.0
    fit_intercept: bool = False
    optimizer: str = "sgd"
    learning_rate_given: bool = False
    model_dim: int = 0
    chosen: tuple = ()
    projected: int = 0

    @property
    def shares(self) -> dict:
        """``{name: share of μ²}`` of the releases chosen so far, in the order decided."""
        return dict(self.chosen)


@dataclasses.dataclass(frozen=True)
class Release:
    """One private release of a fit (a frozen, hashable value: it is part of what a compiled fit specializes on).

    Subclasses set :attr:`name` and override what they need; the defaults describe one Gaussian release of a sum
    of L2 sensitivity 1 (under zero-out neighbours; the accountant's relation doubles it under ``replace_one``).

    The contract, each from public facts only (the plan's settings and N, d, k), never a row:

    * :meth:`events` — the Gaussian noise multipliers as the release runs them (stages compose to one at σ).
    * :meth:`secure` — ``(noise std, L2 sensitivity, public bound on every entry)``: secure mode's table.
    * :meth:`note` — the report's sentence about the release, given its released value.
    * :attr:`ledger_key` — the ledger entry's parameter holding σ.
    * :attr:`adds_dims` — model inputs the release gives the rows (the radial coordinate: 1).

    Run (:func:`privlin.chain.fit_chain`, one loop over the chain for every driver):

    * :meth:`compute` — the released value from the rows, through a :class:`Driver` (its exact sums) and the
      :class:`Context` (the values released before it).  The default reads the rows as given: the exact sum
      ``init``/``block_sum``, released by :meth:`release`; a release that reads the rows as the earlier releases
      left them overrides it (``driver.total`` of a block function of :func:`model_rows`).
    * :meth:`use` — how later rows (and the report) use the value: the context field it fills.

    Chosen and placed (:func:`privlin.releases.register`, one registry for built-in and added releases):

    * :meth:`share` — the share of the GDP budget μ² it asks for, from public facts (0: not made).
    * :meth:`build` — the release as it runs at its calibrated σ (the centering picks its stages there).
    * :attr:`after` — the release it runs right after (None: first); :attr:`sigma_param` — the parameter that
      gives its σ where the noise multiplier is given rather than calibrated; :attr:`folded_into` — the release
      whose value carries this one's once both ran (the centering's chain of means carries the rounds').
    """

    name: ClassVar[str] = ""
    adds_dims: ClassVar[int] = 0
    after: ClassVar[Optional[str]] = "radius"
    sigma_param: ClassVar[Optional[str]] = None
    folded_into: ClassVar[Optional[str]] = None

    @property
    def ledger_key(self) -> str:
        return f"sigma_{self.name}"

    def events(self, sigma: float) -> tuple[float, ...]:
        """σ of each Gaussian release as it runs (one: σ itself)."""
        return (sigma,)

    def secure(self, plan, sigma: float) -> tuple[float, float, float]:
        """Secure mode's ``(std, sensitivity, bound)``: a count-like sum (one row moves it by 1, every entry ≤ N)."""
        return sigma, 1.0, float(plan.n)

    def note(self, plan, sigma: float, value: Any) -> str | None:
        """The report's note on this release (None: nothing beyond its σ and share)."""
        return None

    # ---- running it
    def compute(self, driver: Driver, ctx: Context, key, sigma):
        """The released value (traced in memory): the exact sum of :meth:`block_sum` over the rows as given,
        released by :meth:`release` with this release's key (:func:`release_key`) and σ."""
        total = driver.total(self.name, self.init(ctx.dim), self.block_sum, ctx.n)
        return self.release(total, ctx.n, release_key(key, self.name), sigma, driver.noisy(self.name, total))

    def use(self, ctx: Context, value) -> Context:
        """The context later releases and training see: the value kept by name, and the row map as
        :meth:`map_rows` changes it."""
        return ctx._replace(values={**ctx.values, self.name: value}, rows=self.map_rows(ctx.rows, value))

    def map_rows(self, rows: RowMap, value) -> RowMap:
        """How later rows use the value: the row map after it (default: unchanged)."""
        return rows

    # ---- whether it is made
    def share(self, facts: Facts) -> float:
        """Share of the GDP budget μ² this release asks for, from public facts (0: not made).  Raises
        ValueError where a parameter asks for it and the facts cannot have it."""
        return 0.0

    def build(self, facts: Facts, sigma: float) -> "Release":
        """The release as it runs at its calibrated ``sigma`` (the facts final): itself by default."""
        return self

    def given_as(self, facts: Facts) -> "Release":
        """The release as it runs where its value is given (:attr:`privlin.plan.Plan.given`): itself by default;
        one whose shape is a public setting takes it from ``facts``."""
        return self

    def model_dim_after(self, dim: int) -> int:
        """The model's inputs after this release, from those before it: ``dim`` plus :attr:`adds_dims`."""
        return dim + self.adds_dims

    def init(self, dim: int):
        """The zero accumulator of the exact block sum over rows of dimension ``dim`` (default :meth:`compute`)."""
        raise NotImplementedError

    def block_sum(self, total, X, mask, n):
        """``total`` plus the exact sum over one chunk of rows as given (``mask`` 0: a null row); traced."""
        raise NotImplementedError

    def release(self, total, n, key, sigma, noisy=None):
        """The released value from the exact sum: Gaussian noise of std σ·sensitivity from ``key``, or ``noisy``
        (secure mode's discrete-Gaussian release of ``total``, drawn on the host) in its place; traced."""
        raise NotImplementedError
