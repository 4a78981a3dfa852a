"""privlin.train: analytic clipping vs autodiff per-example gradients, noise statistics, adam1's closed form."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from privlin import sensitivity
from privlin import train as T
from privlin import noise
from privlin.noise import make_key
from privlin.in_memory import fit_full_batch, fit_minibatch


pytestmark = pytest.mark.unit  # the pure pieces: run alone with `pytest -m unit`

@pytest.fixture(autouse=True)
def _x64():
    """privlin's released sums are exact float64 (privlin.sensitivity): the runner traces them under x64."""
    from privlin import sensitivity

    with sensitivity.x64():
        yield


N, D, K = 12, 5, 4


def data(seed=0, n=N, d=D, k=K):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32) * rng.uniform(0.2, 3, size=(n, 1)).astype(np.float32)
    y = rng.integers(0, k, n)
    return jnp.asarray(X), jax.nn.one_hot(y, k), jnp.ones(n, jnp.float32)


def example_loss(params, x, yrow, loss):
    z = x @ params.W + params.b
    if loss == "softmax":
        return -jnp.sum(yrow * jax.nn.log_softmax(z))
    return jnp.sum(optax.sigmoid_binary_cross_entropy(z, yrow))


def autodiff_per_example(params, X, Y, loss):
    """Materialized per-example gradients with jax.vmap(jax.grad): the reference."""
    return jax.vmap(jax.grad(example_loss), in_axes=(None, 0, 0, None))(params, X, Y, loss)


def random_params(seed, d=D, k=K):
    r = np.random.default_rng(seed)
    return T.LinearParams(jnp.asarray(r.normal(size=(d, k)), jnp.float32), jnp.asarray(r.normal(size=k), jnp.float32))


@pytest.mark.heavy
@pytest.mark.parametrize("loss", ["softmax", "sigmoid"])
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_analytic_per_example_gradients_equal_autodiff(loss, fit_intercept):
    X, Y, _ = data()
    params = random_params(1)
    g = autodiff_per_example(params, X, Y, loss)
    R = T.residuals(T.decision_function(params, X), Y, loss)
    assert np.allclose(g.W, jnp.einsum("nd,nk->ndk", X, R), atol=1e-5)
    assert np.allclose(g.b, R, atol=1e-6)
    flat = jnp.sqrt(jnp.sum(g.W**2, axis=(1, 2)) + (jnp.sum(g.b**2, axis=1) if fit_intercept else 0.0))
    A, norms = sensitivity.directions(X, fit_intercept)  # a gradient is (row direction) ⊗ (residual · row norm)
    outer = jnp.einsum("nd,nk->ndk", A * norms[:, None], R)
    assert np.allclose(outer[:, :D], g.W, atol=1e-5)
    assert np.allclose(norms * jnp.sqrt(jnp.sum(R * R, axis=1)), flat, rtol=1e-5)


@pytest.mark.parametrize("loss", ["softmax", "sigmoid"])
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_clipped_sum_equals_clipping_autodiff_gradients_and_norms_are_bounded(loss, fit_intercept):
    X, Y, mask = data(seed=2)
    mask = mask.at[-3:].set(0.0)
    params, C = random_params(3), 0.7
    g = autodiff_per_example(params, X, Y, loss)
    sq = jnp.sum(g.W**2, axis=(1, 2)) + (jnp.sum(g.b**2, axis=1) if fit_intercept else 0.0)
    scale = jnp.minimum(1.0, C / jnp.sqrt(sq)) * mask
    clipped_W = g.W * scale[:, None, None]
    clipped_b = g.b * scale[:, None] if fit_intercept else jnp.zeros_like(g.b)
    norms = jnp.sqrt(jnp.sum(clipped_W**2, axis=(1, 2)) + jnp.sum(clipped_b**2, axis=1))
    assert float(norms.max()) <= C * (1 + 1e-5)
    assert float(norms.max()) > 0.5 * C  # some rows really were clipped to C
    ours = T.clipped_grad_sum(params, X, Y, mask, C, N, loss=loss, fit_intercept=fit_intercept)
    assert np.allclose(ours.W, clipped_W.sum(0), atol=1e-5)
    assert np.allclose(ours.b, clipped_b.sum(0), atol=1e-5)


def test_privatize_noise_std_is_sigma_times_clip_and_fresh_per_leaf():
    zero = T.LinearParams(jnp.zeros((400, 500)), jnp.zeros(200_000))
    sigma, C = 3.0, 0.5
    out = T.privatize(zero, make_key(0).key, sigma, C, fit_intercept=True)
    w, b = np.asarray(out.W).ravel(), np.asarray(out.b)
    assert np.std(w) == pytest.approx(sigma * C, rel=0.02)
    assert np.std(b) == pytest.approx(sigma * C, rel=0.02)
    assert abs(np.mean(w)) < 5 * sigma * C / np.sqrt(w.size)
    assert abs(np.corrcoef(w[:200_000], b)[0, 1]) < 0.02
    again = T.privatize(zero, make_key(1).key, sigma, C, fit_intercept=True)
    assert abs(np.corrcoef(np.asarray(again.W).ravel(), w)[0, 1]) < 0.02
    frozen = T.privatize(zero, make_key(0).key, sigma, C, fit_intercept=False)
    assert np.all(np.asarray(frozen.b) == 0)  # an untrained intercept is not released, so gets no noise


def test_full_batch_steps_use_fresh_noise():
    """With zero data the weights after T steps are a sum of T noises: variance grows linearly (no reuse)."""
    X = jnp.zeros((4, 300))
    Y = jax.nn.one_hot(jnp.arange(4) % 2, 2)
    mask = jnp.ones(4)
    W = fit_full_batch(X, Y, mask, 4, make_key(0).key, 2.0, 1.0, steps=16, momentum=0.0, clip=1.0).W
    # each step moves W by lr * noise / N, noise std sigma*C = 2 -> std after 16 steps = 4 * 2 / 4 = 2
    assert np.std(np.asarray(W)) == pytest.approx(2.0, rel=0.06)


@pytest.mark.heavy
@pytest.mark.parametrize("loss", ["sigmoid", "softmax"])
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_adam1_class_sums_give_the_exact_clipped_gradient_at_zero_init(loss, fit_intercept):
    X, Y, mask = data(seed=4)
    mask = mask.at[0].set(0.0)
    b0 = -10.0 if loss == "sigmoid" else 0.0
    C = 0.6
    acc = T.class_sums_init(D, K)
    for a, b in [(0, 5), (5, N)]:  # streamed in two blocks
        acc = T.class_sums_update(acc, X[a:b], Y[a:b], mask[a:b], C, N, loss=loss, bias_init=b0,
                                  fit_intercept=fit_intercept)
    direct = T.clipped_grad_sum(T.init_params(D, K, b0), X, Y, mask, C, N, loss=loss, fit_intercept=fit_intercept)
    g = T.adam1_gradient(acc, loss=loss, bias_init=b0)
    assert np.allclose(g.W, direct.W, atol=1e-5)
    if fit_intercept:
        assert np.allclose(g.b, direct.b, atol=1e-5)


@pytest.mark.heavy
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_adam1_class_sums_of_centered_rows_give_the_clipped_gradient_of_the_model_rows(fit_intercept):
    """Rows handed over before their last centering (``center``): the gradient is the clipped gradient at zero init
    of the rows the model sees, (U − c) re-normalized to the row norm (privlin.releases.preprocess.apply), computed
    apart."""
    X, Y, mask = data(seed=9, n=40)
    mask = mask.at[3].set(0.0)
    C = 0.8
    U = np.asarray(X, np.float64)
    U = (U / np.linalg.norm(U, axis=1, keepdims=True) * C).astype(np.float32)
    c = (np.asarray(np.mean(U, axis=0)) + 0.05).astype(np.float32)
    Z = (U - c) / np.linalg.norm(U - c, axis=1, keepdims=True) * C
    acc = T.class_sums_init(D, K)
    for a, b in [(0, 17), (17, 40)]:
        acc = T.class_sums_update(acc, U[a:b], Y[a:b], mask[a:b], C, 40, fit_intercept=fit_intercept, row_norm=C,
                                  center=c)
    g = T.adam1_gradient(acc)
    direct = T.clipped_grad_sum(T.init_params(D, K, -10.0), jnp.asarray(Z, jnp.float32), Y, mask, C, 40,
                                loss="sigmoid", fit_intercept=fit_intercept)
    assert np.allclose(g.W, direct.W, atol=1e-4)
    if fit_intercept:
        assert np.allclose(g.b, direct.b, atol=1e-4)


@pytest.mark.heavy
def test_adam1_step_is_one_optax_adam_step_on_the_noisy_gradient():
    X, Y, mask = data(seed=5)
    acc = T.class_sums_update(T.class_sums_init(D, K), X, Y, mask, 1.0, N)
    key, sigma, lr = make_key(7).key, 2.0, 1e-3
    params = T.adam1_step(acc, N, key, sigma, lr, clip=1.0)
    noisy = T.privatize(T.adam1_gradient(acc), key, sigma, 1.0)
    g = T.LinearParams(noisy.W / N, jnp.zeros(K))
    opt = optax.adam(lr)
    p0 = T.init_params(D, K, -10.0)
    upd, _ = opt.update(g, opt.init(p0), p0)
    ref = optax.apply_updates(p0, upd)
    assert np.allclose(params.W, ref.W, atol=1e-7)
    assert np.allclose(params.b, -10.0)
    # signSGD regime (Mehta et al. App. E): |update| ~ lr everywhere
    assert np.allclose(np.abs(params.W), lr, rtol=1e-3)


@pytest.mark.heavy
def test_trainers_vmap_over_keys_sigmas_and_learning_rates():
    X, Y, mask = data(seed=6)
    f = jax.jit(jax.vmap(functools.partial(fit_full_batch, steps=3), in_axes=(None, None, None, None, 0, 0, 0)))
    keys = noise.split(make_key(0).key, 3)
    out = f(X, Y, mask, N, keys, jnp.array([0.0, 1.0, 1.0]), jnp.array([0.1, 0.1, 0.2]))
    assert out.W.shape == (3, D, K)
    one = fit_full_batch(X, Y, mask, N, keys[1], 1.0, 0.1, steps=3)
    assert np.allclose(out.W[1], one.W, atol=1e-6)
    acc = T.class_sums_update(T.class_sums_init(D, K), X, Y, mask, 1.0, N)
    many = jax.vmap(T.adam1_step, in_axes=(None, None, 0, 0, 0))(acc, N, keys, jnp.array([1.0, 2.0, 3.0]), jnp.ones(3))
    assert many.W.shape == (3, D, K)


def test_sigma_zero_full_batch_is_plain_clipped_gradient_descent():
    X, Y, mask = data(seed=8)
    params = fit_full_batch(X, Y, mask, N, make_key(0).key, 0.0, 0.5, steps=4, momentum=0.0, clip=100.0)
    p = T.init_params(D, K)
    for _ in range(4):
        g = jax.grad(lambda q: jnp.mean(jax.vmap(example_loss, in_axes=(None, 0, 0, None))(q, X, Y, "softmax")))(p)
        p = T.LinearParams(p.W - 0.5 * g.W, p.b)
    assert np.allclose(params.W, p.W, atol=1e-5)


@pytest.mark.heavy
def test_minibatch_poisson_rate_and_optimizers():
    n, q = 4000, 0.1
    X = jnp.ones((n, 1))
    Y = jax.nn.one_hot(jnp.zeros(n, jnp.int32), 2)
    # with sigma=0, plain SGD, one step: W moves by lr * (sampled rows * clipped grad) / (q n)
    W = fit_minibatch(X, Y, jnp.ones(n), n, make_key(3).key, 0.0, 1.0, steps=1, sample_rate=q, momentum=0.0).W
    frac = float(W[0, 0]) / 0.5  # each sampled row contributes residual 0.5 to class 0 (softmax at zero init)
    assert frac == pytest.approx(1.0, abs=4 * np.sqrt((1 - q) / (q * n)))
    for opt in ("adam", "lamb"):
        Xr, Yr, m = data(seed=9)
        out = fit_minibatch(Xr, Yr, m, N, make_key(0).key, 1.0, 1e-2, steps=3, sample_rate=0.5, optimizer=opt)
        assert np.all(np.isfinite(out.W)) and np.all(out.b == 0)
