"""Public rows as a free input (privlin.public): the statistics they give equal independent NumPy computations of
what the releases define; an overlapping public source is refused; arrays are warned about."""
import math
import warnings

import jax
import numpy as np
import pytest

from privlin import data, public
from privlin import plan as plans
from privlin.releases import norms as _radius
from privlin.releases import public_check, scaling
from privlin.report import PrivacyLeakWarning

#: Exact sums snap every row to a grid and shrink it by a margin (privlin.sensitivity), and the rows are float32:
#: a coordinate of a mean of unit rows is within about 1e-5 of its float64 value.
RTOL, ATOL = 1e-4, 1e-5


def _unit(X):
    X = np.asarray(X, np.float64)
    n = np.linalg.norm(X, axis=1, keepdims=True)
    return np.where(n > 0, X / np.where(n > 0, n, 1), 0.0)


def _rows(blobs, n, seed, offset=3.0):
    X, _ = blobs(n, d=8, k=3, seed=seed)
    return (X + offset).astype(np.float32)  # a mean far from 0: the centering matters


def _stats(params, n, X_pub, n_classes=3):
    plan = plans.make_plan(params, n=n, dim=X_pub.shape[1], n_classes=n_classes)
    pub = public.Public(data.ArraySource(X_pub, np.zeros(len(X_pub))), len(X_pub), None, "array")
    return plan, public.statistics(plan, pub)


def _moments(U):
    """(shift, scale) of privlin.scaling.release_moments at σ = 0, from its definition."""
    m = U.mean(0)
    var = np.maximum((U * U).mean(0) - m * m, 0.0)
    scale = 1.0 / np.sqrt(var + max(scaling.VARIANCE_FLOOR * var.mean(), scaling.TINY))
    return m, scale / scale.max()


def _whitening(B, n):
    """privlin.scaling.release_rotation at σ = 0: U (max(Λ, 0) + τ_s)^(-1/2) Uᵀ, normalized to a top weight 1."""
    lam, V = np.linalg.eigh(B.T @ B / n)
    w = 1.0 / np.sqrt(np.maximum(lam, 0) + float(scaling.sampling_floor(n, B.shape[1])))
    return (V * (w / w.max())) @ V.T


def test_statistics_equal_their_exact_values(blobs):
    X_pub = _rows(blobs, 300, seed=1)
    plan, got = _stats({"epsilon": 50.0, "radial": False}, 2000, X_pub)
    assert [r.name for r, _ in plan.chain] == ["center", "scale", "whiten", "curvature"]
    Z = _unit(X_pub)
    mean = Z.mean(0)
    np.testing.assert_allclose(got["center"], mean, rtol=RTOL, atol=ATOL)
    U = _unit(Z - mean)
    shift, scale = _moments(U)
    np.testing.assert_allclose(got["scale"][0], shift, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got["scale"][1], scale, rtol=RTOL, atol=ATOL)
    B = _unit((U - shift) * scale)
    R = _whitening(B, len(X_pub))
    np.testing.assert_allclose(got["whiten"], R, rtol=1e-3, atol=1e-4)
    T = _unit(B @ R)  # the training rows' directions: the curvature bound is their second moment's top eigenvalue
    top = np.linalg.eigvalsh(T.T @ T)[-1] / len(X_pub)
    np.testing.assert_allclose(float(got["curvature"]), np.clip(top, 1 / 8, 1), rtol=1e-3)


def test_log_typical_norm_and_recentering_rounds_equal_their_exact_values(blobs):
    X_pub = _rows(blobs, 400, seed=2) * np.float32(2.0 ** 5)
    X_pub[:50] *= 64  # a minority far out: the heaviest pair of adjacent bins is the bulk's
    plan, got = _stats({"epsilon": 1.0}, 500, X_pub)
    assert plan.chain[0][0].name == "radius"
    bins = np.floor(np.log2(np.linalg.norm(X_pub.astype(np.float64), axis=1))).astype(int) - _radius.LOG2_LOW
    counts = np.bincount(bins, minlength=_radius.BINS)
    assert float(got["radius"]) == _radius.LOG2_LOW + int(np.argmax(counts[:-1] + counts[1:])) + 1
    plan, got = _stats({"epsilon": 0.3, "radial": False}, 600, X_pub)
    assert [r.name for r, _ in plan.chain][:2] == ["recenter", "center"]
    Z, means = _unit(X_pub), []
    for _ in range(plan.recenter_rounds):  # each round: the mean of the current rows, subtracted, re-normalized
        means.append(Z.mean(0))
        Z = _unit(Z - means[-1])
    chain = np.stack([*means, Z.mean(0)])  # the centering's value: the chain of means, the rounds' first
    np.testing.assert_allclose(got["center"], chain, rtol=RTOL, atol=ATOL)


def test_streamed_statistics_equal_in_memory(blobs):
    X_pub = _rows(blobs, 300, seed=3)
    plan = plans.make_plan({"epsilon": 50.0}, n=2000, dim=8, n_classes=3)
    pub = public.Public(data.ArraySource(X_pub, np.zeros(len(X_pub))), len(X_pub), None, "array")
    a = public.statistics(plan, pub)
    b = public.statistics(plan, pub, memory_limit=1, block_rows=64)
    assert a.keys() == b.keys()
    for name in a:
        for x, y in zip(jax.tree.leaves(a[name]), jax.tree.leaves(b[name]), strict=True):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- resolving a public source

def test_an_array_is_warned_about_and_named_without_identity(blobs):
    X, y = blobs(200, d=8, k=3, seed=4)
    with pytest.warns(PrivacyLeakWarning, match="no content identity.*public_audit=True"):
        pub = public.resolve(X[:50], data.ArraySource(X[50:], y[50:]))
    assert pub.n == 50 and pub.identity is None
    assert pub.describe() == "array of 50 rows, no content identity"


def test_bad_public_rows_are_refused_in_one_line(blobs):
    X, y = blobs(100, d=8, k=3, seed=5)
    private = data.ArraySource(X, y)
    with pytest.raises(ValueError, match="dimension 4, the private rows 8"):
        public.resolve(X[:10, :4], private)
    bad = X[:10].copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match=r"NaN or inf value \(row 3\)"):
        public.resolve(bad, private)
    with pytest.raises(ValueError, match="is the private rows"):
        public.resolve(private, private)


def test_a_split_of_the_same_store_is_resolved_by_name_with_its_content_identity(make_store, blobs):
    st = make_store({"train": blobs(128, d=8, k=3, seed=6), "public": blobs(64, d=8, k=3, seed=7)})
    private = data.as_source(st, "train")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pub = public.resolve("public", private)
    items = np.asarray(st["public"].item_bytes(), "S32")
    assert pub.n == 64 and pub.identity == public._content_identity(items[::-1])  # the set, not the order
    assert "split 'public'" in pub.describe() and pub.identity in pub.describe()
    assert public.resolve((st, "public"), private).identity == pub.identity
    assert public.resolve(st["public"], private).identity == pub.identity


def test_a_public_source_sharing_an_item_with_the_private_rows_is_refused(make_store, blobs, tmp_path):
    X, y = blobs(128, d=8, k=3, seed=8)
    st = make_store({"train": (X, y), "public": (X[:64], y[:64])}, own_items=False)  # items follow the ids
    ids = st["train"].ids[:]
    assert len(set(ids)) == 128  # ids train0.. and public0.. differ: another store shares the items instead
    other = make_store({"train": (X[:64], y[:64])}, own_items=False)  # the same ids, so the same items
    with pytest.raises(ValueError, match="shares 64 items with the private rows"):
        public.resolve(other, data.as_source(st, "train"))


def test_the_near_duplicate_audit_runs_in_the_same_call_and_refuses_a_twin(blobs):
    X, y = blobs(200, d=8, k=3, seed=9)
    private = data.ArraySource(X[50:], y[50:])
    with pytest.warns(PrivacyLeakWarning):
        pub = public.resolve(X[:50], private, audit=0.9999)
    assert pub.audit is not None and pub.audit.n_with_twin == 0 and pub.audit.threshold == 0.9999
    with pytest.warns(PrivacyLeakWarning), pytest.raises(ValueError, match="public_audit: 1 private rows"):
        public.resolve(np.concatenate([X[:50], X[60:61] * 2]), private, audit=0.9999)  # a copy, scaled


# ----------------------------------------------------------------------------- the fit with public statistics

def _fitted(blobs, **params):
    from privlin import DPLinearClassifier

    X, y = blobs(600, d=8, k=3, seed=12)
    X_pub, _ = blobs(200, d=8, k=3, seed=13)
    return DPLinearClassifier(classes=[0, 1, 2], random_state=0, **params).fit(X + 3, y), X_pub + 3


def test_the_training_gets_the_budget_the_public_statistics_no_longer_take(blobs):
    import dp_accounting
    from closed_forms import gaussians, gdp_epsilon, mu_of

    private, X_pub = _fitted(blobs, epsilon=1.0, recenter=False)
    with pytest.warns(PrivacyLeakWarning, match="no content identity"):
        model, _ = _fitted(blobs, epsilon=1.0, public=X_pub)
    given = [r.name for r, _ in model.plan_.given]
    (check, sigma_check), = model.plan_.chain  # the public check (privlin.releases.public_check): CHECK_SHARE of μ²
    assert given == ["radius", "center", "scale", "whiten"] and check.name == "public_check"
    shares = private.plan_.budget_shares()
    assert set(shares) == {*given, "step"}
    # GDP (full batch): T/σ² = μ² · (share of the steps), the same μ for both plans; the check takes CHECK_SHARE of it
    np.testing.assert_allclose(model.plan_.sigma, private.plan_.sigma * math.sqrt(shares["step"] / (1 - public_check.CHECK_SHARE)), rtol=1e-6)
    event = model.privacy_.dp_event
    assert gaussians(event) == [sigma_check] + [model.plan_.sigma] * model.plan_.steps  # nothing else charged
    assert gdp_epsilon(mu_of(gaussians(event)), 1e-5) == pytest.approx(1.0, abs=1e-6)
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(event)
    assert pld.get_epsilon(1e-5) == pytest.approx(model.privacy_.epsilon, abs=2e-3)
    assert model.privacy_.noise_multipliers == {"public_check": sigma_check, "step": model.plan_.sigma}
    released = model.released_
    pub = public.Public(data.ArraySource(X_pub, np.zeros(200)), 200, None, "array")
    public_values = public.statistics(model.plan_, pub)
    for name in given:  # the given values are the public rows' statistics, used as released
        for a, b in zip(jax.tree.leaves(released[name]), jax.tree.leaves(public_values[name]), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_streamed_fit_equals_in_memory(blobs):
    X_pub = _rows(blobs, 200, seed=13)
    with pytest.warns(PrivacyLeakWarning):
        a, _ = _fitted(blobs, epsilon=2.0, public=X_pub)
    with pytest.warns(PrivacyLeakWarning):
        b, _ = _fitted(blobs, epsilon=2.0, public=X_pub, memory_limit=1, block_rows=64)
    np.testing.assert_allclose(a.coef_transformed_, b.coef_transformed_, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a.intercept_transformed_, b.intercept_transformed_, rtol=1e-5, atol=1e-6)


def test_report_and_ledger_name_the_public_source_and_never_charge_it(make_store, blobs):
    import privlin
    from privlin.ledger import PrivacyLedger

    st = make_store({"train": blobs(256, d=8, k=3, seed=14), "public": blobs(128, d=8, k=3, seed=15),
                     "test": blobs(64, d=8, k=3, seed=16)}, own_items=False)  # items follow the row ids
    model = privlin.fit(st, epsilon=1.0, classes=[0, 1, 2], public="public", progress=False)
    pub = public.resolve("public", data.as_source(st, "train"))
    assert f"computed without noise from {pub.describe()}" in model.privacy_.notes
    assert "treated as public: not charged" in model.privacy_.notes
    (entry,) = [e for e in PrivacyLedger.for_split(st.url, "train").entries if e.mechanism.startswith("DPLinear")]
    assert entry.params["public_source"] == pub.describe() and pub.identity in entry.params["public_source"]
    assert entry.params["public_releases"] == ["radius", "center", "scale", "whiten"]
    assert PrivacyLedger.for_split(st.url, "public").entries == []  # public rows are never charged
    other = make_store({"train": blobs(64, d=8, k=3, seed=17)}, own_items=False)  # ids train0..63: train's items
    with pytest.raises(ValueError, match="shares 64 items with the private rows"):
        privlin.fit(st, epsilon=1.0, classes=[0, 1, 2], public=other, progress=False)


# ----------------------------------------------------------------------------- the other surfaces

def test_the_sweep_and_the_search_take_the_same_public_statistics(make_store, blobs):
    from privlin import DPLinearClassifier
    from privlin.model_selection import PrivateGridSearchCV
    from privlin.sweep import sweep

    st = make_store({"train": blobs(256, d=8, k=3, seed=18), "public": blobs(128, d=8, k=3, seed=19),
                     "test": blobs(64, d=8, k=3, seed=20)})
    res = sweep(st, epsilon=[1.0, 2.0], classes=[0, 1, 2], public="public", random_state=0, progress=False)
    model = DPLinearClassifier(epsilon=2.0, classes=[0, 1, 2], public="public", random_state=0).fit(st)
    for rec, fit in zip(res.records, res.fits):
        assert [r.name for r, _ in rec["plan"].given] == ["radius", "center", "scale", "whiten"]
        assert "computed without noise from store" in rec["report"].notes
    for name in ("center", "whiten"):  # one public value, whatever the setting or the surface
        np.testing.assert_array_equal(res.fits[0].values[name], model.released_[name])
        np.testing.assert_array_equal(res.fits[1].values[name], model.released_[name])
    X, y = blobs(300, d=8, k=3, seed=21)
    X_pub, _ = blobs(100, d=8, k=3, seed=22)
    with pytest.warns(PrivacyLeakWarning, match="no content identity"):
        search = PrivateGridSearchCV(DPLinearClassifier(classes=[0, 1, 2], public=X_pub), {"epsilon": [1.0, 4.0]},
                                     cv=2, random_state=0).fit(X, y)
    assert [r.name for r, _ in search.best_estimator_.plan_.given] == ["radius", "center", "scale", "whiten"]
    assert "array of 100 rows, no content identity" in search.best_estimator_.privacy_.notes


def test_the_command_line_takes_a_public_split(make_store, blobs, capsys):
    from experiments import eps_sweep

    st = make_store({"train": blobs(256, d=8, k=3, seed=23), "public": blobs(128, d=8, k=3, seed=24),
                     "test": blobs(64, d=8, k=3, seed=25)}, attrs={"backbone": "test", "classes": ["a", "b", "c"]})
    assert eps_sweep.main([st.url, "--eps", "1", "--method", "sgd", "--public", "public", "--no-progress"]) == 0
    assert "sgd" in capsys.readouterr().out
    assert eps_sweep.main([st.url, "--eps", "1", "--public", "train", "--no-progress"]) == 2
    assert "--public 'train' must be rows you may publish" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the public subspace

def _low_rank_rows(n, seed, d=24, rank=5, offset=3.0):
    """Rows near a ``rank``-dimensional subspace of R^d (fixed across seeds), plus a little isotropic noise, with
    a mean far from 0; labels from the first coordinate of the subspace."""
    basis = np.linalg.qr(np.random.default_rng(100).normal(size=(d, rank)))[0]
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, rank)) * np.linspace(2.0, 0.5, rank)
    y = np.digitize(Z[:, 0], [-1.0, 1.0])
    return (Z @ basis.T + 0.02 * rng.normal(size=(n, d)) + offset).astype(np.float32), y


def _public_of(X):
    return public.Public(data.ArraySource(X, np.zeros(len(X))), len(X), None, "array")


def test_the_subspace_is_the_public_rows_top_principal_directions():
    X_pub, _ = _low_rank_rows(300, seed=1)
    params = {"epsilon": 1.0, "radial": False, "public_rank": 4}
    plan = plans.make_plan(params, n=2000, dim=24, n_classes=3, given=("center", "project"))
    assert plan.model_dim == 4 and [r.name for r in plan.ran][:2] == ["center", "project"]
    got = public.statistics(plan, _public_of(X_pub))
    Z = _unit(X_pub)
    U = _unit(Z - Z.mean(0))  # as the centering leaves them: unit rows after the public centre
    lam, V = np.linalg.eigh(U.T @ U / len(U))
    lam, V = lam[::-1], V[:, ::-1]
    basis, energy = np.asarray(got["project"].basis, np.float64), np.asarray(got["project"].energy)
    assert basis.shape == (24, 4)
    np.testing.assert_allclose(basis.T @ basis, np.eye(4), atol=1e-5)
    np.testing.assert_allclose(np.abs(np.sum(basis * V[:, :4], axis=0)), 1.0, atol=1e-4)  # each column, up to sign
    np.testing.assert_allclose(energy, lam[:4] / lam.sum(), rtol=1e-4, atol=1e-6)
    # the scaling stage after it works on the projected rows: its shift is their mean, in 4 dimensions
    P = _unit(U @ basis)
    np.testing.assert_allclose(got["scale"][0], P.mean(0), rtol=RTOL, atol=ATOL)


def test_the_rank_rule_keeps_the_energy_share_of_the_public_spectrum():
    from privlin.releases import project

    X_pub, _ = _low_rank_rows(300, seed=2)
    pub = _public_of(X_pub)
    params = {"epsilon": 1.0, "radial": False}
    resolved = pub.ranked(params, n=2000, dim=24)["public_rank"]
    Z = _unit(X_pub)
    U = _unit(Z - Z.mean(0))
    lam = np.linalg.eigvalsh(U.T @ U)[::-1]
    expected = int(np.argmax(np.cumsum(lam) / lam.sum() >= project.ENERGY)) + 1
    assert resolved == expected and 1 <= resolved <= 8  # the rows lie near 5 directions
    assert pub.ranked({**params, "public_rank": 0}, n=2000, dim=24)["public_rank"] == 0
    assert pub.ranked({**params, "public_rank": 7}, n=2000, dim=24)["public_rank"] == 7
    with pytest.raises(ValueError, match="name at most 24 directions"):
        pub.ranked({**params, "public_rank": 25}, n=2000, dim=24)
    assert project.choose_rank([0.5, 0.3, 0.2], 2, 3) == 2  # at most the public rows' count


def _projected_fit(public_rank=None, **params):
    from privlin import DPLinearClassifier

    X, y = _low_rank_rows(800, seed=3)
    X_pub, _ = _low_rank_rows(200, seed=4)
    with pytest.warns(PrivacyLeakWarning, match="no content identity"):
        model = DPLinearClassifier(classes=[0, 1, 2], random_state=0, public=X_pub, public_rank=public_rank,
                                   **params).fit(X, y)
    return model, X


def test_prediction_on_raw_rows_goes_through_the_subspace():
    model, X = _projected_fit(epsilon=2.0, radial=False)
    v = model.released_
    assert model.plan_.projected and model.coef_transformed_.shape == (3, model.plan_.model_dim)
    basis = np.asarray(v["project"].basis, np.float64)
    Z = _unit(X)
    U = _unit(Z - np.asarray(v["center"], np.float64))
    P = _unit(U @ basis)  # the rows in the subspace, then the public scaling map
    shift, scale = (np.asarray(a, np.float64) for a in v["scale"])
    B = _unit(_unit((P - shift) * scale) @ np.asarray(v["whiten"], np.float64))
    logits = B @ model.coef_transformed_.T + model.intercept_transformed_
    np.testing.assert_allclose(model.decision_function(X), logits, rtol=1e-3, atol=1e-3)
    assert (model.predict(X) == np.argmax(logits, axis=1)).mean() > 0.99  # ties within float error may differ
    names = model.transformed_feature_names_
    assert len(names) == model.plan_.model_dim and names[0] == "public_direction0"
    with pytest.raises(AttributeError, match="coef_ is not defined"):
        model.coef_


def test_input_space_weights_fold_the_subspace_in():
    model, X = _projected_fit(epsilon=2.0, normalize=False, center=False, public_rank=3)
    assert [r.name for r, _ in model.plan_.given] == ["project"] and model.plan_.model_dim == 3
    assert model.coef_.shape == (3, 24)  # raw features, as scikit-learn's coef_
    np.testing.assert_allclose(model.decision_function(X), X @ model.coef_.T + model.intercept_, rtol=1e-4,
                               atol=1e-4)
    basis = np.asarray(model.released_["project"].basis, np.float64)
    np.testing.assert_allclose(model.coef_, model.coef_transformed_ @ basis.T, rtol=1e-12)


def test_the_subspace_is_free_epsilon_recomposed_independently():
    import dp_accounting
    from closed_forms import gaussians, gdp_epsilon, mu_of

    projected, _ = _projected_fit(epsilon=1.0)
    unprojected, _ = _projected_fit(epsilon=1.0, public_rank=0)
    assert "project" in [r.name for r, _ in projected.plan_.given]
    assert "project" not in [r.name for r, _ in unprojected.plan_.given]
    assert projected.plan_.model_dim < unprojected.plan_.model_dim
    for model in (projected, unprojected):
        event = model.privacy_.dp_event
        check = [model.plan_.sigma_of("public_check")]  # the public check (privlin.releases.public_check)
        assert gaussians(event) == check + [model.plan_.sigma] * model.plan_.steps  # the check and the steps only
        assert gdp_epsilon(mu_of(gaussians(event)), 1e-5) == pytest.approx(1.0, abs=1e-6)
        pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
        pld.compose(event)
        assert pld.get_epsilon(1e-5) == pytest.approx(model.privacy_.epsilon, abs=2e-3)
    assert projected.plan_.sigma == unprojected.plan_.sigma  # nothing charged for the subspace


def test_the_report_names_the_subspace_and_its_rank():
    model, _ = _projected_fit(epsilon=1.0, public_rank=4)
    notes = model.privacy_.notes
    assert "public statistics (radius, center, project, scale, whiten)" in notes
    assert "rows projected onto the public subspace of 4 directions holding" in notes
    energy = float(np.sum(model.released_["project"].energy))
    assert f"{100 * energy:.3g}% of the public rows' energy" in notes


def test_streamed_projected_fit_equals_in_memory():
    a, _ = _projected_fit(epsilon=2.0, public_rank=4)
    b, _ = _projected_fit(epsilon=2.0, public_rank=4, memory_limit=1, block_rows=64)
    assert b.plan_.projected and b.plan_.model_dim == 4
    np.testing.assert_allclose(np.abs(a.released_["project"].basis), np.abs(b.released_["project"].basis),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(a.coef_transformed_, b.coef_transformed_, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(a.intercept_transformed_, b.intercept_transformed_, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- what a given value needs elsewhere

def test_a_given_curvature_gets_the_rate_ceiling_it_lifts_toward():
    from privlin.releases.rates import noise_rate

    plan = plans.make_plan({"epsilon": 1.0, "recenter": False}, n=2000, dim=8, n_classes=3,
                           given=("center", "curvature"))
    assert plan.curved and plan.release("curvature") is None
    assert plan.learning_rate_ceiling == noise_rate(plan.sigma, 2000, steps=plan.steps, momentum=plan.momentum,
                                                    clip=plan.clip)
    lr_w, lr_b = plan.learning_rates_after(0.2)  # a flat public curvature lifts W's rate, never to NaN
    assert math.isfinite(lr_w) and lr_w > plan.learning_rate and math.isfinite(lr_b)


def test_the_setting_counts_the_rows_a_given_centre_maps():
    from privlin import fit_groups

    given = plans.make_plan({"epsilon": 1.0, "recenter": False}, n=2000, dim=8, n_classes=3,
                            given=("radius", "center", "scale", "whiten"))
    off = plans.make_plan({"epsilon": 1.0, "center": False}, n=2000, dim=8, n_classes=3)
    assert given.static().centered and not off.static().centered
    assert fit_groups.setting_bytes(given.static(), 100, 8, 3) == 4.0 * 100 * 8  # its mapped float32 rows


def test_secure_mode_takes_the_public_statistics_and_draws_only_the_steps():
    from closed_forms import gaussians

    from privlin import DPLinearClassifier

    X, y = _low_rank_rows(400, seed=5)
    X_pub, _ = _low_rank_rows(150, seed=6)
    with pytest.warns(PrivacyLeakWarning, match="no content identity"):
        model = DPLinearClassifier(epsilon=2.0, classes=[0, 1, 2], secure_mode=True, public=X_pub,
                                   public_rank=4).fit(X, y)
    assert model.plan_.secure_mode and [r.name for r, _ in model.plan_.given] == [
        "radius", "center", "project", "scale", "whiten"]
    assert set(model.plan_.secure_table()) == {r.name for r, _ in model.plan_.chain} | {"step"}
    assert gaussians(model.privacy_.dp_event)[-model.plan_.steps:] == [model.plan_.sigma] * model.plan_.steps
    assert (model.predict(X) == y).mean() > 0.6


def test_settings_that_take_different_public_statistics_are_refused_in_one_line(make_store, blobs):
    from privlin.sweep import sweep

    st = make_store({"train": blobs(256, d=8, k=3, seed=26), "public": blobs(128, d=8, k=3, seed=27),
                     "test": blobs(64, d=8, k=3, seed=28)})
    with pytest.raises(ValueError, match="take different public statistics.*fit them apart"):
        sweep(st, settings=[{"method": "adam1", "epsilon": 1.0}, {"method": "sgd", "epsilon": 1.0}],
              classes=[0, 1, 2], public="public", random_state=0, progress=False)
    with pytest.raises(ValueError, match="different ranks"):
        sweep(st, settings=[{"epsilon": 1.0, "public_rank": 2}, {"epsilon": 1.0, "public_rank": 3}],
              classes=[0, 1, 2], public="public", random_state=0, progress=False)
