"""privlin.runner: every entry point trains the code that ships.

For every method × centering: a sweep record equals ``DPLinearClassifier(same parameters, same key).fit``;
``privlin.fit(store)`` equals ``DPLinearClassifier.fit(X, y)`` on the store's arrays; the streamed form equals
the in-memory form; default settings of the sweep and of ``privlin.fit`` are the same plan.  Null rows
(unknown label, non-finite value) contribute exactly what a zero row does: nothing, and raise nothing.
"""
import json
import os
import subprocess
import sys
import textwrap
import warnings

import jax
import numpy as np
import pytest

import privlin
from privlin import DPLinearClassifier
from privlin.sweep import sweep
from privlin.noise import make_key

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K = 4
METHODS = ["adam1", "sgd", "minibatch"]


def params(method, center, **kw):
    steps = None if method == "adam1" else 6
    return dict(method=method, center=center, steps=steps, classes=range(K), batch_size=200, **kw)


@pytest.fixture(scope="module")
def rows(blobs):
    """601 training rows: an odd N, so rows are padded on 2 devices (test_rows_shard_across_two_devices). The
    training split is the one of test_distributed.py, and the fits there and in two_device_models use the
    settings of the tests here: their compiled programs are shared within a test session."""
    return _train_rows(), blobs(200, seed=1)


def _train_rows():
    from conftest import _blobs

    return _blobs(601, seed=0)


@pytest.fixture
def store(make_store, rows):
    (Xtr, ytr), (Xte, yte) = rows
    return make_store({"train": (Xtr, ytr), "test": (Xte, yte)})


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize("method", METHODS)
def test_store_fit_equals_array_fit_and_streaming_equals_in_memory(store, rows, method, center):
    (Xtr, ytr), (Xte, yte) = rows
    p = params(method, center, epsilon=2.0, random_state=3, block_rows=128)
    on_arrays = DPLinearClassifier(**p).fit(Xtr, ytr)
    assert on_arrays.plan_.center_stages == (2 if center else 1)  # the refining stage streams too
    on_store = privlin.fit(store, **p)
    np.testing.assert_array_equal(on_store.coef_transformed_, on_arrays.coef_transformed_)  # one path: bit for bit
    assert on_store.plan_ == on_arrays.plan_
    streamed = privlin.fit(store, memory_limit=0, **p)  # one pass over the store per step / statistic
    assert _rel(streamed.coef_transformed_, on_arrays.coef_transformed_) < 1e-5
    if center:
        assert _rel(streamed.mean_, on_arrays.mean_) < 1e-5
    assert privlin.evaluate(on_store, store) == pytest.approx(on_arrays.score(Xte, yte))
    assert privlin.evaluate(on_store, store) > 0.9  # well-separated blobs: private training still learns them


def test_a_minibatch_step_samples_streamed_as_in_memory_where_the_batch_holds_every_row(rows):
    """One step function for both loops (privlin.steps.dp_step): a minibatch plan whose expected batch is all N
    (q = 1) still splits each step's key into a sample key and a noise key in both drivers, so the streamed fit
    draws the in-memory fit's noise."""
    from privlin import data, runner
    from privlin.plan import make_plan

    (X, y), _ = rows
    plan = make_plan(dict(method="minibatch", epsilon=2.0, steps=4, batch_size=10 * len(y), center=False),
                     n=len(y), dim=X.shape[1], n_classes=K)
    assert plan.sample_rate == 1.0
    source, key = data.ArraySource(X, y), make_key(7).key
    (in_memory,) = runner.run([plan], source, [key], np.arange(K))
    (streamed,) = runner.run([plan], source, [key], np.arange(K), memory_limit=0, block_rows=256)
    assert _rel(np.asarray(streamed.W), np.asarray(in_memory.W)) < 1e-5


@pytest.mark.parametrize("method", ["sgd", "adam1"])
def test_recentering_rounds_stream_as_they_run_in_memory(store, rows, method):
    """The re-centering rounds (one pass over the store each, before the centering's) give the same chain of
    means and model streamed as in memory, and bit for bit on the store's arrays; predictions apply the chain."""
    (Xtr, ytr), (Xte, yte) = rows
    p = params(method, True, epsilon=2.0, random_state=3, block_rows=128, recenter=True)
    on_arrays = DPLinearClassifier(**p).fit(Xtr, ytr)
    assert on_arrays.plan_.recenter_rounds == 2 and on_arrays.mean_.shape == (3, on_arrays.plan_.model_dim)
    on_store = privlin.fit(store, **p)
    np.testing.assert_array_equal(on_store.coef_transformed_, on_arrays.coef_transformed_)
    np.testing.assert_array_equal(on_store.mean_, on_arrays.mean_)
    streamed = privlin.fit(store, memory_limit=0, **p)
    assert _rel(streamed.mean_, on_arrays.mean_) < 1e-5
    assert _rel(streamed.coef_transformed_, on_arrays.coef_transformed_) < 1e-5
    assert privlin.evaluate(on_store, store) == pytest.approx(on_arrays.score(Xte, yte))
    assert on_arrays.score(Xte, yte) > 0.9
    # the report and the ledger say what ran: the rounds' σ, their share, the note
    rep = on_store.privacy_
    assert rep.noise_multipliers["recenter"] == on_store.plan_.sigma_recenter
    assert "re-centered first in 2 rounds" in rep.notes and "recenter 5%" in rep.notes
    assert on_store.ledger_.entries[-1].params["sigma_recenter"] == on_store.plan_.sigma_recenter


@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize("method", METHODS)
def test_sweep_record_equals_the_estimator_with_its_key(rows, method, center):
    (Xtr, ytr), _ = rows
    settings = [params(method, center, epsilon=e) for e in (1.0, 8.0)]
    res = sweep((Xtr, ytr), settings=settings, random_state=5, return_keys=True, eval_split=None)
    for i, rec in enumerate(res.records):
        key = jax.random.wrap_key_data(np.asarray(res.keys[i], np.uint32))
        est = DPLinearClassifier(**settings[i], random_state=key).fit(Xtr, ytr)
        assert est.plan_ == rec["plan"] and rec["seeded"]
        assert _rel(res.coef[i].T, est.coef_transformed_) < 1e-5
        if center:
            assert _rel(res.means[i], est.mean_) < 1e-5
        np.testing.assert_array_equal(res.model(i).predict(Xtr), est.predict(Xtr))


@pytest.mark.parametrize("method", METHODS)
def test_default_settings_of_sweep_and_fit_are_one_plan(store, method):
    res = sweep(store, epsilon=1.0, method=method, classes=range(K), return_keys=True)
    model = privlin.fit(store, epsilon=1.0, method=method, classes=range(K),
                        random_state=jax.random.wrap_key_data(np.asarray(res.keys[0], np.uint32)))
    assert res.records[0]["plan"] == model.plan_
    assert _rel(res.coef[0].T, model.coef_transformed_) < 1e-5


@pytest.mark.parametrize("method", METHODS)
def test_secure_mode_runs_the_same_pipeline(rows, method):
    """At a huge ε the noise is negligible: secure mode (host-side discrete Gaussian) lands on the plain fit."""
    (Xtr, ytr), _ = rows
    p = params(method, True, epsilon=1e6, learning_rate=0.5 if method != "adam1" else 1e-3)
    p["batch_size"] = len(ytr)  # q = 1: a secure-mode sample comes from OS entropy, so compare full batches
    plain = DPLinearClassifier(**p, random_state=0).fit(Xtr, ytr)
    secure = DPLinearClassifier(**p, secure_mode=True).fit(Xtr, ytr)
    assert secure.privacy_.secure_mode and secure.plan_ == DPLinearClassifier(**p, secure_mode=True).fit(
        Xtr, ytr).plan_
    assert _rel(secure.coef_transformed_, plain.coef_transformed_) < 1e-3


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("memory_limit", [2**30, 0])
def test_null_rows_contribute_nothing_and_raise_nothing(rows, method, memory_limit):
    """A row with a label outside the classes, or a NaN, is a null row.  Without centering it gives the model
    of a zero row in its place (a zero row adds nothing to any sum), with the same key, in memory and streamed;
    with centering (where a zero row would become −mean) the two kinds of null row give the same model."""
    (X, y), _ = rows
    bad_y = y.copy()
    bad_y[[7, 300]] = 99  # not in classes
    nan_X = X.copy()
    nan_X[7, 3], nan_X[300, 0] = np.nan, np.inf
    zero_X = X.copy()
    zero_X[[7, 300]] = 0.0
    for center in (False, True):
        p = params(method, center, epsilon=4.0, random_state=11, memory_limit=memory_limit, block_rows=128)
        unknown = DPLinearClassifier(**p).fit(X, bad_y)
        est = DPLinearClassifier(**p)
        est._validate_params()
        nan = est._fit(privlin.data.ArraySource(nan_X, y))  # sklearn refuses NaN in arrays; a store may hold it
        np.testing.assert_array_equal(nan.coef_transformed_, unknown.coef_transformed_)
        assert nan.privacy_.n_rows == len(y)  # N is public and counts the null rows
        if not center:  # a zero row adds nothing to any sum only without an intercept (whose feature is 1)
            q = {**p, "fit_intercept": False}
            np.testing.assert_array_equal(DPLinearClassifier(**q).fit(zero_X, y).coef_transformed_,
                                          DPLinearClassifier(**q).fit(X, bad_y).coef_transformed_)


def test_rows_shard_across_two_devices():
    """Same seed, same model on 1 (this process) and on 2 forced host devices; the data really is sharded."""
    code = textwrap.dedent("""
        import json, sys, numpy as np, jax
        sys.path.insert(0, %r)
        sys.path.insert(0, %r)
        from test_runner import two_device_models
        from privlin import rows as privlin_rows
        shard = privlin_rows.put_rows(np.zeros((4, 8), np.float32))[0]
        out = {"devices": jax.device_count(), "shards": len(shard.addressable_shards), **two_device_models()}
        print(json.dumps(out))
    """ % (ROOT, os.path.join(ROOT, "tests")))
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"  # keep conftest's
    env = {**os.environ, "XLA_FLAGS": flags.strip(), "JAX_PLATFORMS": "cpu"}
    # the one-device models are computed here while the two-device process runs (the second core)
    p = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        one = two_device_models()
    finally:
        out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-3000:]
    two = json.loads(out.strip().splitlines()[-1])
    assert two["devices"] == 2 and two["shards"] == 2
    assert len(one) == 2 * len(METHODS) and set(one) < set(two)
    for key in one:
        assert np.allclose(one[key], two[key], atol=1e-4), key


def two_device_models():
    """Every method, in memory and streamed, on the module's 601 training rows (odd: padding on 2 devices), with
    the settings of test_null_rows_contribute_nothing_and_raise_nothing (its compiled programs, on one device)."""
    X, y = _train_rows()
    out = {}
    for method in METHODS:
        for mem in (2**30, 0):
            p = params(method, True, epsilon=4.0, random_state=11, memory_limit=mem, block_rows=128)
            out[f"{method}/{mem}"] = DPLinearClassifier(**p).fit(X, y).coef_transformed_.tolist()
    return out


def test_a_flipped_byte_late_in_a_streamed_pass_is_raised_not_skipped(store, rows):
    """Blocks are read ahead in a thread: a corrupt shard near the end of the pass still ends the fit with the
    store's one-line error naming it (never a model fitted on fewer rows)."""
    import stores

    path = os.path.join(str(store.url), "train", "features", "c", "8", "0")
    raw = bytearray(open(path, "rb").read())
    raw[len(raw) // 2] ^= 0x01
    open(path, "wb").write(bytes(raw))
    with pytest.raises(stores.CorruptStoreError, match="shard 8"):
        privlin.fit(store, memory_limit=0, **params("adam1", True, epsilon=1.0, block_rows=64))


def test_read_ahead_streams_in_order_and_stops_with_its_consumer():
    from privlin.rows import read_ahead as _read_ahead, stream_block_rows

    assert list(_read_ahead(iter(range(50)))) == list(range(50))
    produced = []

    def numbers():
        for i in range(10**6):
            produced.append(i)
            yield i
    it = _read_ahead(numbers())
    assert next(it) == 0
    it.close()  # the producer stops within a block or two of the consumer
    assert len(produced) <= 3

    def failing():
        yield 1
        raise OSError("disk gone")
    with pytest.raises(OSError, match="disk gone"):
        list(_read_ahead(failing()))
    # blocks hold at most BLOCK_BYTES (256 MiB) of stored rows, in whole chunks, never more rows than asked
    from privlin.sensitivity import CHUNK_ROWS as C
    assert stream_block_rows(65536, 768 * 2) == 65536
    assert stream_block_rows(65536, 4096 * 2) == 32768 and stream_block_rows(65536, 36864 * 2) == 3640 // C * C
    assert stream_block_rows(65536, 10**9) == C and stream_block_rows(100, 10**9) == 100


def test_in_memory_rows_are_padded_to_at_most_half_again_as_many():
    """Below 4 chunks the loaded rows are 2^j or 3·2^(j−1) from 256 but 3072 (chunked otherwise than 4096): 10
    program sizes below 8192 (powers of two: 6); from 4 chunks on, whole chunks."""
    from privlin.rows import loaded_len
    from privlin.sensitivity import CHUNK_ROWS as C

    small = sorted({loaded_len(n) for n in range(1, 4 * C)})
    assert small == [256, 384, 512, 768, 1024, 1536, 2048, 4096, 6144, 8192]
    assert all(n <= loaded_len(n) <= max(256, 1.5 * n) for n in range(1, 6 * C) if not C < n <= 2 * C)
    assert [loaded_len(n) for n in (1437, 2049, 4097, 6145)] == [1536, 4096, 6144, 8192]
    assert [loaded_len(n) for n in (4 * C, 4 * C + 1, 10**5)] == [4 * C, 5 * C, -(-10**5 // C) * C]


@pytest.mark.parametrize("n", [300, 1100, 5000])
def test_padding_to_the_next_power_of_two_gives_the_same_fit(blobs, monkeypatch, n):
    """A fit on n rows (d = 64) padded as loaded_len pads them (384, 1536, 6144 in 3 chunks) is the fit padded to
    the next power of two (512, 2048, 8192 in 4 chunks), bit for bit on the 2-core box (asserted to float32
    rounding): the sgd defaults at ε = 1 (re-centering) and adam1 at ε = 2.  Not a law: the float32 logits are not
    exact sums, and XLA may round them differently for another shape (at d = 8 it does, between 256 and 512 rows as
    between 384 and 512); 3072 rows in one call against 4096 in two chunks did here, so loaded_len skips 3072."""
    from privlin import fit_groups, rows as privlin_rows

    padded = privlin_rows.loaded_len(n)
    X, y = blobs(n, d=64, k=4, seed=5)
    kw = {"classes": range(4), "random_state": 7}
    fits = [("sgd", 1.0), ("adam1", 2.0)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        new = [DPLinearClassifier(method=m, epsilon=e, **kw).fit(X, y) for m, e in fits]
        held = []

        def power_of_two(m):
            held.append(max(256, 1 << (max(m, 1) - 1).bit_length()))
            return held[-1]
        monkeypatch.setattr(privlin_rows, "loaded_len", power_of_two)
        monkeypatch.setattr(fit_groups, "loaded_len", power_of_two)
        old = [DPLinearClassifier(method=m, epsilon=e, **kw).fit(X, y) for m, e in fits]
    assert held and set(held) == {1 << (n - 1).bit_length()} != {padded}
    for a, b in zip(new, old):  # bitwise on the 2-core box; float32 rounding is the most another CPU's XLA may move
        np.testing.assert_allclose(a.coef_transformed_, b.coef_transformed_, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(a.intercept_transformed_, b.intercept_transformed_, rtol=1e-6, atol=1e-6)


def test_page_locked_route_reads_into_its_buffers_and_changes_no_bit(store, rows, monkeypatch):
    """On a GPU streamed blocks are read into page-locked buffers (a DMA copies them while the reader fills the next
    one): here the route is forced on the CPU with an allocator that records what it hands out, and the seeded fit
    must be the pageable one bit for bit, every block read through those buffers."""
    import stores
    from stores import buffers
    from privlin import rows as privlin_rows

    p = params("sgd", True, epsilon=2.0, random_state=3, block_rows=128)
    plain = privlin.fit(store, memory_limit=0, **p)
    handed = []

    def recording(nbytes):
        handed.append(nbytes)
        return buffers.pageable(nbytes)
    monkeypatch.setattr(buffers, "page_locked", recording)
    monkeypatch.setattr(privlin_rows, "page_locked", lambda: True)
    locked = privlin.fit(stores.open(str(store.url)), memory_limit=0, **p)  # a new Split: recorded allocator
    np.testing.assert_array_equal(locked.coef_transformed_, plain.coef_transformed_)
    np.testing.assert_array_equal(locked.intercept_transformed_, plain.intercept_transformed_)
    np.testing.assert_array_equal(locked.mean_, plain.mean_)
    # reused across blocks and passes (dozens of blocks read): a buffer a device copy still references is not handed
    # out again, so under load a few more than the KEEP kept ones are allocated (seen: 6), never one per block
    assert 0 < len(handed) <= 2 * buffers.Recycler.KEEP


def test_page_locked_buffers_need_cuda_and_stay_off_without_a_gpu():
    from stores import buffers
    from privlin import rows as privlin_rows

    if jax.default_backend() != "gpu":
        assert not privlin_rows.page_locked()
    import torch
    assert buffers.can_page_lock() == torch.cuda.is_available()
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="need a CUDA device"):
            buffers.page_locked(16)


def test_plan_mismatch_and_key_count_are_refused(rows):
    """The fit that follows the refusals has the settings of an adam1 store-fit case above: its program is theirs."""
    from privlin import data, runner
    from privlin.plan import make_plan

    (X, y), _ = rows
    source = data.ArraySource(X, y)
    plan = make_plan({}, n=len(y) + 1, dim=X.shape[1], n_classes=K)
    with pytest.raises(ValueError, match="plan made for N"):
        runner.run([plan], source, [make_key(0).key], np.arange(K))
    with pytest.raises(ValueError, match="keys"):
        runner.run([plan], source, [], np.arange(K))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a given class list reads no label before the charge
        DPLinearClassifier(**params("adam1", False, epsilon=2.0, random_state=3, block_rows=128)).fit(X, y)


def test_an_epsilon_grid_with_the_same_releases_compiles_one_program(blobs):
    """ε, σ, the learning rate and the key are arguments of the compiled fit, never part of what it specializes on:
    fits at three ε whose plans make the same releases reuse one program."""
    import warnings

    from privlin import DPLinearClassifier, compilation, in_memory
    from privlin.plan import make_plan

    X, y = blobs(3000, d=6, k=3, seed=11)
    eps = (4.0, 6.0, 8.0)
    params = {"method": "sgd", "steps": 10}
    plans = [make_plan({**params, "epsilon": e}, n=len(y), dim=6, n_classes=3) for e in eps]
    assert len({p.sigma for p in plans}) == 3 and len({p.static() for p in plans}) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        DPLinearClassifier(**params, epsilon=eps[0], classes=[0, 1, 2], random_state=0).fit(X, y)
        before = in_memory.train_many._cache_size(), compilation.STATS["built"] + compilation.STATS["loaded"]
        for e in eps[1:]:
            DPLinearClassifier(**params, epsilon=e, classes=[0, 1, 2], random_state=0).fit(X, y)
    assert (in_memory.train_many._cache_size(), compilation.STATS["built"] + compilation.STATS["loaded"]) == before


def test_streamed_plans_take_one_pass_per_total_and_share_identical_ones(rows, monkeypatch):
    """The streamed driver reads the rows once per release sum (twice for a two-stage centering, once per
    re-centering round), once per step, and never more; a total another plan of the run already took (same
    function, same scalar arguments) is reused: two plans with one key share the row-norm pass and the first
    re-centering round's (the sums of the rows as given) and give equal models; three uncentered adam1 plans share
    their one class-sum pass."""
    from privlin import data, runner
    from privlin.plan import make_plan

    (X, y), _ = rows
    source = data.ArraySource(X, y)
    passes = []
    read = source.fit_blocks
    monkeypatch.setattr(source, "fit_blocks", lambda *a, **kw: passes.append(1) or read(*a, **kw))

    def run(plans, keys):
        passes.clear()
        got = runner.run(plans, source, keys, np.arange(K), memory_limit=0, block_rows=256)
        return got, len(passes)

    sgd = make_plan(dict(method="sgd", epsilon=2.0, steps=3, recenter=True), n=len(y), dim=X.shape[1], n_classes=K)
    per_release = {"recenter": sgd.recenter_rounds, "center": sgd.center_stages}
    chain = sum(per_release.get(r.name, 1) for r, _ in sgd.chain)
    assert {"recenter", "center", "scale"} <= {r.name for r, _ in sgd.chain} and chain >= 5
    key = make_key(5).key
    (one,), alone = run([sgd], [key])
    (a, b), pair = run([sgd, sgd], [key, key])
    assert alone == chain + sgd.steps and pair == 2 * alone - 2
    for got in (a, b):
        np.testing.assert_array_equal(got.W, one.W)
        np.testing.assert_array_equal(got.values["center"], one.values["center"])

    adam1 = [make_plan(dict(method="adam1", epsilon=e, center=False), n=len(y), dim=X.shape[1], n_classes=K)
             for e in (1.0, 2.0, 4.0)]
    got, count = run(adam1, [make_key(i).key for i in range(3)])
    assert count == 1 and len({np.asarray(r.W).tobytes() for r in got}) == 3  # one pass, three noisy releases


def test_plans_of_one_and_two_centering_stages_share_one_program_and_keep_their_own(rows, monkeypatch):
    """An ε grid whose centering takes one stage at some ε and two at others runs as one vmapped program (one pass
    per sum for all of them): each plan's model is the one it gets alone and streamed, within float32 rounding (a
    vmapped reduction may add in another order; streamed, σ is a float64 host number)."""
    from privlin import compilation, data, runner
    from privlin.plan import make_plan

    (X, y), _ = rows
    source = data.ArraySource(X, y)
    plans = [make_plan(dict(method="adam1", epsilon=e), n=len(y), dim=X.shape[1], n_classes=K)
             for e in (1.0, 4.0, 64.0)]
    assert {p.center_stages for p in plans} == {1, 2}
    keys = [make_key(i).key for i in range(len(plans))]
    calls = []
    real = compilation.call
    monkeypatch.setattr(compilation, "call", lambda fn, args, *a, **kw: calls.append(args) or real(fn, args, *a, **kw))
    together = runner.run(plans, source, keys, np.arange(K))
    assert len(calls) == 1 and calls[0][0].release("center")[0].stages == 2
    for p, key, got in zip(plans, keys, together):
        (alone,) = runner.run([p], source, [key], np.arange(K))
        (streamed,) = runner.run([p], source, [key], np.arange(K), memory_limit=0, block_rows=256)
        for other in (alone, streamed):
            np.testing.assert_allclose(got.W, other.W, rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(got.values["center"], other.values["center"], rtol=1e-5, atol=1e-7)
