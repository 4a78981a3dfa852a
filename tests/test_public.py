"""Public rows as a free input (privlin.public): the statistics they give equal independent NumPy computations of
what the releases define; an overlapping public source is refused; arrays are warned about."""
import math
import warnings

import numpy as np
import pytest

from privlin import data, public
from privlin import plan as plans
from privlin.releases import norms as _radius
from privlin.releases import scaling
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
        for x, y in zip(np.atleast_1d(a[name]) if name != "scale" else a[name],
                        np.atleast_1d(b[name]) if name != "scale" else b[name]):
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
    assert given == ["radius", "center", "scale", "whiten"] and not model.plan_.chain
    shares = private.plan_.budget_shares()
    assert set(shares) == {*given, "step"}
    # GDP (full batch): T/σ² = μ² · (share of the steps), the same μ for both plans
    np.testing.assert_allclose(model.plan_.sigma, private.plan_.sigma * math.sqrt(shares["step"]), rtol=1e-9)
    event = model.privacy_.dp_event
    assert gaussians(event) == [model.plan_.sigma] * model.plan_.steps  # the steps only: nothing else charged
    assert gdp_epsilon(mu_of(gaussians(event)), 1e-5) == pytest.approx(1.0, abs=1e-6)
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(event)
    assert pld.get_epsilon(1e-5) == pytest.approx(model.privacy_.epsilon, abs=2e-3)
    assert model.privacy_.noise_multipliers == {"step": model.plan_.sigma}
    released = model.released_
    pub = public.Public(data.ArraySource(X_pub, np.zeros(200)), 200, None, "array")
    public_values = public.statistics(model.plan_, pub)
    for name in given:  # the given values are the public rows' statistics, used as released
        for a, b in zip(np.atleast_1d(released[name]) if name != "scale" else released[name],
                        np.atleast_1d(public_values[name]) if name != "scale" else public_values[name]):
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
