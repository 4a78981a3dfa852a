"""Every default of a private fit, in one place: the estimator's signature reads :data:`PARAMS`, the plan fills a
missing parameter from it, and the thresholds that decide what the plan buys are named here with their reason.

No import of JAX or the estimator: :mod:`privlin.plan` and ``DPLinearClassifier`` both read this module, so neither
imports the other for a default.  Measurements behind the numbers are in BENCHMARKS.md (section named per entry).
"""
from __future__ import annotations

from types import MappingProxyType

__all__ = ["METHODS", "DEFAULT_EPSILON", "DEFAULT_DELTA", "DEFAULT_NEIGHBOURING", "DEFAULT_STEPS", "LOGIT_NOISE",
           "DEFAULT_CENTER_SHARE", "DEFAULT_SCALE_SHARE", "CURVATURE_SHARE", "RADIUS_SHARE", "RECENTER_SHARE",
           "ADAM_LR", "ADAM1_BIAS_INIT", "CURVATURE_GAIN", "CURVATURE_FLATNESS", "MAX_STEPS", "QUICK_COMPILE_ELEMENTS",
           "PUBLIC_START_C", "PUBLIC_START_FOLDS", "PUBLIC_START_ITERATIONS", "PUBLIC_CLIP_MAX_GAIN",
           "PARAMS"]

#: The training methods a plan can run (:mod:`privlin.train`): ``adam1`` one DP-Adam step, ``sgd`` full-batch
#: DP-SGD, ``minibatch`` Poisson-sampled DP-SGD/Adam/LAMB.
METHODS = ("adam1", "sgd", "minibatch")
#: ε when none is given: the estimator, ``privlin.fit`` and the sweep share it.
DEFAULT_EPSILON = 1.0
DEFAULT_DELTA = 1e-5
#: Zero-out neighbours: N is published (every sum is divided by it), so add/remove-one is refused.
DEFAULT_NEIGHBOURING = "replace_special"
#: Steps per method: adam1 is one step by definition; sgd follows DP-RandP (T=100, Tables 22-23); see
#: :func:`privlin.plan.default_learning_rate` for why more steps buy nothing at a fixed noise per logit.
DEFAULT_STEPS = MappingProxyType({"adam1": 1, "sgd": 100, "minibatch": 200})
#: ρ: standard deviation, in logits of a row at norm C, of the training noise accumulated in the weights by the end
#: of training (:func:`privlin.plan.default_learning_rate`): DP-RandP's tuned CIFAR-10 probes sit at 0.8.
LOGIT_NOISE = 0.8
#: Shares of the GDP budget μ² of the private centering and of the scaling stage (:mod:`privlin.releases.scaling`).
DEFAULT_CENTER_SHARE = 0.05
DEFAULT_SCALE_SHARE = 0.15
#: Share of μ² of the curvature release (:mod:`privlin.releases.curvature`), made only where the stability cap,
#: not the noise, would set the learning rate.
CURVATURE_SHARE = 0.01
#: Share of μ² of the row-norm release (:mod:`privlin.releases.radius`).
RADIUS_SHARE = 0.03
#: Share of μ² of the re-centering rounds (:mod:`privlin.releases.recenter`), on top of the centering's.
RECENTER_SHARE = 0.05
#: Learning rate of adam1 (Mehta et al. App. F.1) and of Adam/LAMB.
ADAM_LR = 1e-3
#: adam1's frozen bias under the sigmoid loss (Mehta et al.): a row starts far from every class.
ADAM1_BIAS_INIT = -10.0
#: The curvature release is bought only where the noise term of the learning rate is at least this many times the
#: worst-case stability cap (a flatter curvature can then lift the rate that much; BENCHMARKS.md, "curvature").
CURVATURE_GAIN = 1.5
#: ... and only where the release can show a top eigenvalue at least this many times below the worst case (1).
CURVATURE_FLATNESS = 1.5
#: Most training steps a plan runs: every step's key is drawn up front (16 bytes each), so this bounds what the
#: parameters can make a fit allocate.  Refused in the plan, before the charge, naming the limit; DP-RandP's
#: schedules use 100-2500.
MAX_STEPS = 10**6
#: A fit program whose array arguments hold at most this many elements (padded N × d and its labels: public)
#: compiles with XLA's quick options (:data:`privlin.compilation.QUICK_OPTIONS`): less compile time for a slower
#: program, a gain only while a run takes a fraction of a second (BENCHMARKS.md, "XLA's quick compile options for
#: small fits").
QUICK_COMPILE_ELEMENTS = 2**19
#: The warm start from labelled public rows (``public_start``, :func:`privlin.train.public_fit`): the inverse L2
#: strengths C it chooses from (scikit-learn's convention: mean loss + ‖W‖²/(2·C·m) on m rows) by cross-validated
#: log-loss on the public rows, in that many folds, each fit that many accelerated gradient steps (a fixed count:
#: one traced program; the CV scores the fits as run, so the choice never assumes a convergence not reached).
PUBLIC_START_C = (0.01, 0.1, 1.0, 10.0, 100.0)
PUBLIC_START_FOLDS = 5
PUBLIC_START_ITERATIONS = 300
#: ``public_clip``: the most the DP steps' gradients are multiplied by before the clip (:func:`privlin.chain.clip_gain`:
#: C over the public rows' mean held-out gradient norm at the start): a public set the start separates with room to
#: spare would otherwise give a gain without bound (every row clipped: normalized gradients already at 100).
PUBLIC_CLIP_MAX_GAIN = 100.0

#: The estimator's parameters and their defaults (``DPLinearClassifier.__init__`` reads its signature from here).
PARAMS = MappingProxyType(dict(
    epsilon=DEFAULT_EPSILON, delta=DEFAULT_DELTA, method="sgd", steps=None, learning_rate=None, clip=1.0,
    normalize=True, center=True, recenter=None, center_share=None, scale=None, scale_share=None, radial=None,
    noise_multiplier=None, center_noise_multiplier=None, classes=None, class_weight=None, loss=None, fit_intercept=None,
    optimizer="sgd", momentum=0.9, batch_size=256, accountant=None, neighbouring=DEFAULT_NEIGHBOURING,
    random_state=None, block_rows=65536, memory_limit=2**30, verbose=False, budget=None, ledger=None,
    secure_mode=False, public=None, public_audit=False, public_rank=0, public_start=False,
    public_check=True, public_clip=True, average=0.0))
