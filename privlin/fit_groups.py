"""Plans run in memory as vmapped calls: plans of one compiled form (:func:`shared_form`) are one group, run by one
program over one copy of the rows (:func:`privlin.in_memory.train_many`), in calls cut to a memory budget
(:func:`max_settings`, :func:`setting_bytes`) and an estimated amount of work (:func:`setting_work`,
:data:`CALL_WORK`); :func:`in_memory_bytes` is what the rows themselves hold.
"""
from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np

from . import compilation, defaults, noise, progress
from .chain import Released
from .data import Source
from .in_memory import train_many
from .plan import Static
from .releases.recenter import Recentering
from .rows import loaded_len, padded_len

__all__ = ["shared_form", "with_rounds", "shares_rounds", "recenter_ratios", "run_groups", "in_memory_bytes",
           "setting_work", "setting_bytes", "max_settings", "dynamic_arguments", "CALL_WORK"]


def shared_form(static: Static, rounds: bool = False) -> Static:
    """What plans that run in one program have in common: plans whose chains differ only in how many stages the
    centering takes share a program whose centering has the most stages among them and keeps each plan's own
    (:meth:`privlin.releases.Centering.compute`): one pass over the rows per sum for all of them.  With ``rounds``
    (:func:`shares_rounds`), plans with and without the re-centering rounds share one too (:func:`with_rounds`)."""
    form = static._replace(chain=tuple((dataclasses.replace(r, parts=0) if r.name == "center" else r, x)
                                       for r, x in static.chain))
    return with_rounds(form) if rounds else form


def with_rounds(static: Static) -> Static:
    """``static`` as a program that runs plans with and without the re-centering rounds (ε = 1 and ε = 2 of one
    shape: a refit at another ε is then no new program): its rounds' ratio is None, each plan's an argument of the
    program (:func:`recenter_ratios`, −1: none), and a centered, scaled chain without them gets them (each plan
    computes them; one without passes over their means, bitwise as without them: :class:`.preprocess.RowMap`).
    Other chains are returned as they are."""
    if static.release("recenter") is not None:
        return static._replace(chain=tuple((r, None if r.name == "recenter" else x) for r, x in static.chain))
    if static.release("center") is None or static.release("scale") is None:
        return static
    chain = []
    for r, x in static.chain:
        if r.name == "center":
            chain.append((Recentering(), None))
        chain.append((r, x))
    return static._replace(chain=tuple(chain))


def shares_rounds(source: Source) -> bool:
    """Whether plans with and without the re-centering rounds share a program (:func:`with_rounds`): where the
    rows are few enough for XLA's quick compile (:data:`privlin.defaults.QUICK_COMPILE_ELEMENTS`, public shapes),
    so that compiling dominates a fit and the rounds' passes cost little; on more rows every plan would pay them."""
    return padded_len(loaded_len(source.n_local_max)) * source.dim <= defaults.QUICK_COMPILE_ELEMENTS


def recenter_ratios(plans) -> list:
    """Each plan's re-centering σ ratio as :meth:`privlin.plan.Plan.static` rounds it; −1 where it makes no rounds
    (0 is a ratio: a non-private run's, as public statistics make them)."""
    return [(p.static().release("recenter") or (None, -1.0))[1] for p in plans]


#: Estimated floating-point operations one call of the in-memory program may take (a few seconds on a 2-core
#: CPU): a group whose settings take more is run in several calls (:func:`setting_work`), so the progress line
#: moves between them and a call holds the (d, d) matrices of whitening and curvature of fewer settings at once.
CALL_WORK = 2e10


def max_settings(static: Static, m: int, d: int, k: int, spare: float) -> int:
    """How many settings of one form a call of :func:`train_many` may run in the ``spare`` bytes ``memory_limit``
    leaves beside the rows (:func:`setting_bytes`; at least one).  The runner also keeps a call's estimated work
    under :data:`CALL_WORK` (:func:`setting_work`).  Running a group in more calls changes no setting's privacy:
    the rows are shared, each setting is its own slice of the vmapped program (its float32 arithmetic after the
    exact sums may round differently with the batch's size)."""
    held = setting_bytes(static, m, d, k)
    return max(1, int(spare // held) if held else 1 << 30)


def setting_work(static: Static, m: int, d: int, k: int) -> float:
    """Estimated floating-point operations of one setting on ``m`` rows of dimension ``d``: ``2·m·d`` per release's
    pass, adam1's class sums ``2·m·d·min(k, 32)``, a step's gradient ``4·m·d·k``, and for each (d, d) release
    (whitening, curvature) its exact second-moment sum ``2·m·d²`` and its eigendecomposition ``~10·d³``."""
    d_model = d + 1
    steps = 2.0 * m * d_model * min(max(k, 2), 32) if static.method == "adam1" else 4.0 * m * d_model * k * static.steps
    square = sum(1 for r, _ in static.chain if r.name in ("whiten", "curvature"))
    return 2.0 * m * d_model * len(static.chain) + steps + square * (2.0 * m * d_model**2 + 10.0 * d_model**3)


def setting_bytes(static: Static, m: int, d: int, k: int) -> float:
    """Bytes one setting adds while its call runs, beside the shared rows: its mapped float32 rows where a
    centered ``sgd``/``minibatch`` plan holds them (:meth:`privlin.in_memory.InMemory.mapped`; adam1 maps them chunk by chunk),
    and six float64 (d, d) matrices per (d, d) release (the sum, its noisy copy, the eigenvectors, the map)."""
    rows = 4.0 * m * d if static.centered and static.method != "adam1" else 0.0
    square = sum(1 for r, _ in static.chain if r.name in ("whiten", "curvature"))
    return rows + square * 6 * 8.0 * (d + 1) ** 2


def _calls(idx: list, per_call: int):
    """``idx`` cut into calls of equal length (one compiled shape): the last one repeats its last setting."""
    calls = -(-len(idx) // per_call)
    size = -(-len(idx) // calls)
    for a in range(0, len(idx), size):
        sel = idx[a:a + size]
        yield sel + [sel[-1]] * (size - len(sel))


def run_groups(plans, keys, groups: dict, rows: tuple, n: float, k: int, spare: float, verbose: bool, out: list,
               given=None):
    """Run each group of plans of one form (``groups``: form → plan indices) on the loaded ``rows`` through its
    stored program, in calls cut to :data:`CALL_WORK` and ``spare`` bytes; results into ``out``; one progress line
    (:class:`privlin.progress.Fits`)."""
    X, labels, mask = rows
    statics = {form: plans[max(idx, key=lambda i: plans[i].center_stages)].static()  # the most centering stages
               for form, idx in groups.items()}
    shared = {form for form in groups if any(r.name == "recenter" and x is None for r, x in form.chain)}
    statics = {form: with_rounds(s) if form in shared else s for form, s in statics.items()}
    work = {form: setting_work(statics[form], *X.shape, k) for form in groups}
    began: dict = {}
    with progress.Fits(sum(map(len, groups.values())), X.shape[0], verbose,
                       sum(work[form] * len(idx) for form, idx in groups.items())) as line:
        def phase(what):  # what progress shows, and when the program began to run (its compile excluded)
            line.phase(what)
            began[what] = time.perf_counter()

        for form, idx in groups.items():
            per_call = min(max(1, int(CALL_WORK // work[form])), max_settings(statics[form], *X.shape, k, spare))
            for sel in _calls(idx, per_call):
                # the stored program (privlin.compilation); its outputs on the host, sliced there per setting
                # (slicing on the device compiles, or loads, a small program per shape)
                # the per-call arguments built on the host (NumPy): a JAX op here would trace, lower and load a
                # small program of its own in each new process (~0.1 s of a warm first fit); the same values
                recenter = (np.asarray([recenter_ratios([plans[i]])[0] for i in sel], np.float32)
                            if form in shared else None)
                got = jax.device_get(compilation.call(
                    train_many, (statics[form],), X, labels, mask, n, _stacked_keys([keys[i] for i in sel]),
                    *(np.asarray([v[i] for i in sel], np.float32) for v in dynamic_arguments(plans)), given,
                    recenter, k=k, on_phase=phase))
                new = list(dict.fromkeys(sel))  # the last call repeats its last setting to keep one shape
                line.done(len(new), time.perf_counter() - began["running"], work[form] * len(new))
                for j, i in enumerate(new):
                    out[i] = Released(*(None if v is None else jax.tree.map(lambda a: a[j], v) for v in got))
                    if form in shared and plans[i].recenter_rounds == 0:  # the centering's mean alone, as released
                        out[i] = out[i]._replace(values={**out[i].values, "center": out[i].values["center"][-1]})


def _stacked_keys(keys) -> jax.Array:
    """``jax.numpy.stack(keys)`` of typed JAX keys of one implementation, stacked on the host (wrapping and unwrapping a
    key's words runs no program)."""
    words = np.stack([np.asarray(jax.random.key_data(key)) for key in keys])
    return jax.random.wrap_key_data(words, impl=jax.random.key_impl(keys[0]))


def in_memory_bytes(source: Source, k: int) -> int:
    """What the in-memory path holds for one plan: the rows as read, on the host and on the device, their float32
    and preprocessed copies, and labels, one-hot labels and mask — what ``memory_limit`` is compared with
    (BENCHMARKS.md compares it with the measured peak)."""
    rows = padded_len(loaded_len(source.n_local_max))
    return rows * source.dim * (2 * source.itemsize + 8) + rows * (k + 2) * 4


def dynamic_arguments(plans):
    """The arguments of the fit program that vary between plans of one form, one list per argument."""
    return ([noise.sigma_float32(p.sigma) for p in plans], [noise.sigma_float32(p.reference_sigma) for p in plans],
            [p.learning_rate for p in plans], [p.learning_rate_ceiling for p in plans],
            [p.center_stages for p in plans])
