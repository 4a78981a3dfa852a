"""The σ's a compiled fit multiplies by are float32, rounded up (``noise.sigma_float32``): a σ rounded below the
planned one would give an ε above the claim. Here, for every plan of a grid, the σ's the in-memory fit is given
(``fit_groups.dynamic_arguments``, ``Plan.static().chain``, multiplied in float32 as the trace does) are put back into the plan's
event, and ε is recomputed from them by the closed form of Gaussian DP (:mod:`closed_forms`), independently of
privlin's accountant."""
import dataclasses

import numpy as np
import pytest
from closed_forms import gaussians, gdp_epsilon, mu_of

from privlin import fit_groups, noise
from privlin.defaults import PARAMS
from privlin.plan import make_plan


def _used(plan):
    """The plan with the σ's the compiled in-memory fit uses: the steps' and σ_ref as passed (float32), each
    release's σ_ref × its float32 ratio, multiplied in float32."""
    sigmas, refs = fit_groups.dynamic_arguments([plan])[:2]
    sigma, ref = np.float32(sigmas[0]), np.float32(refs[0])
    chain = tuple((r, float(ref * np.float32(ratio))) for r, ratio in plan.static().chain)
    return dataclasses.replace(plan, sigma=float(sigma), chain=chain)


GRID = [dict(method=m, epsilon=float(e), n=n, center=c)
        for m in ("sgd", "adam1") for e in np.geomspace(0.25, 16, 10) for n in (600, 20000) for c in (True, False)]


def test_epsilon_of_the_float32_sigmas_never_exceeds_the_claim():
    over = []
    for g in GRID:
        params = dict(PARAMS, method=g["method"], epsilon=g["epsilon"], center=g["center"], classes=range(10))
        plan = make_plan(params, n=g["n"], dim=32, n_classes=10, classes=np.arange(10))
        assert plan.sample_rate == 1.0 and plan.neighbouring == "replace_special"
        used = _used(plan)
        for (r, planned), (_, got) in zip(plan.chain, used.chain):
            assert got >= planned, (g, r)
        assert used.sigma >= plan.sigma
        eps = gdp_epsilon(mu_of(gaussians(used.dp_event())), plan.delta)
        if eps > plan.epsilon:
            over.append((g, eps / plan.epsilon - 1))
    assert not over, f"{len(over)} of {len(GRID)} plans give an ε above the claim: {over[:3]}"


@pytest.mark.parametrize("sigma", [1e-3, 0.7, 1.0, 3.0000001, 16.683891868919215, 2.0**20 + 0.3])
def test_sigma_float32_rounds_up_by_at_most_the_margin_and_an_ulp(sigma):
    got = noise.sigma_float32(sigma)
    assert got.dtype == np.float32
    assert float(got) >= sigma * (1 + noise.SIGMA_MARGIN)
    assert float(got) <= sigma * (1 + noise.SIGMA_MARGIN) * (1 + 2.0**-23)
    # a float32 product with any factor ≥ 1 in float32, rounded to nearest, stays at or above the planned value
    for f in (1.0, 1.0000001, 0.9999999 * 2, 3.7):
        assert float(got * np.float32(f)) >= sigma * float(np.float32(f))
    assert noise.sigma_float32(0.0) == 0.0
