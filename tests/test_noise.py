"""privlin.noise: keys carry 128 bits of OS entropy, both halves matter, draws have the stated law and are
the same under vmap (so a setting in a sweep draws what it draws alone)."""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from privlin import noise, sensitivity


pytestmark = pytest.mark.unit  # the pure pieces: run alone with `pytest -m unit`

@pytest.fixture(autouse=True)
def _float64():
    """Noise is drawn where privlin draws it: under float64 (the sampler refuses without it)."""
    with sensitivity.x64():
        yield


def test_default_keys_take_128_bits_from_os_urandom(monkeypatch):
    asked = []
    real = os.urandom

    def spy(n):
        asked.append(n)
        return real(n)

    monkeypatch.setattr(noise.os, "urandom", spy)
    info = noise.make_key()
    assert asked == [16] and not info.seeded and noise.KEY_BITS == 128
    words = noise.key_data(info.key)
    assert words.shape == (2, 2) and words.dtype == np.uint32
    monkeypatch.setattr(noise.os, "urandom", lambda n: bytes(range(n)))
    assert noise.key_data(noise.make_key().key).tobytes() == bytes(range(16))  # the bytes are the key, as they are


def test_two_default_keys_differ_in_every_word():
    a, b = (noise.key_data(noise.make_key().key).ravel() for _ in range(2))
    assert np.all(a != b)  # P(some word equal) = 4 / 2^32
    # what went wrong before: jax.random.key(int) keeps 32 bits with x64 off (the high word is always 0)
    with jax.enable_x64(False):
        assert int(jax.random.key_data(jax.random.key(2**40 + 5))[0]) == 0


def test_both_halves_of_a_key_move_every_draw():
    k = noise.make_key(3).key
    other_second = jnp.stack([k[0], noise.make_key(4).key[1]])
    other_first = jnp.stack([noise.make_key(4).key[0], k[1]])
    z = noise.normal(k, (1000,))
    assert np.mean(np.asarray(z) == np.asarray(noise.normal(other_second, (1000,)))) < 0.01
    assert np.mean(np.asarray(z) == np.asarray(noise.normal(other_first, (1000,)))) < 0.01


def test_draws_have_the_stated_law():
    k1, k2, k3 = noise.split(noise.make_key(0).key, 3)
    z = np.asarray(noise.normal(k1, (200_000,)), np.float64)
    assert stats.kstest(z, "norm").pvalue > 1e-3
    g = np.asarray(noise.gaussian(k2, (200_000,), 2.5))
    assert g.std() == pytest.approx(2.5, rel=0.01)
    b = np.asarray(noise.bernoulli(k3, 0.3, (200_000,)))
    assert abs(b.mean() - 0.3) < 4 * np.sqrt(0.3 * 0.7 / 200_000)


def test_split_keys_are_independent_and_vmap_invariant():
    keys = noise.split(noise.make_key(1).key, 4)
    assert keys.shape == (4, 2)
    many = jax.vmap(lambda k: noise.normal(k, (500,)))(keys)
    alone = jnp.stack([noise.normal(k, (500,)) for k in keys])
    np.testing.assert_array_equal(np.asarray(many), np.asarray(alone))
    c = np.corrcoef(np.asarray(many))
    assert np.abs(c[~np.eye(4, dtype=bool)]).max() < 0.2


def test_seeded_keys_are_reproducible_and_say_so():
    for rs in (7, np.random.default_rng(7), np.random.RandomState(7), jax.random.key(7)):
        info = noise.make_key(rs)
        assert info.seeded and info.key.shape == (2,)
    assert np.array_equal(noise.key_data(noise.make_key(7).key), noise.key_data(noise.make_key(7).key))
    words = noise.key_data(noise.make_key(9).key)
    assert np.array_equal(noise.key_data(noise.make_key(words).key), words)  # a record's key reads back
    with pytest.raises(ValueError, match=">= 0"):
        noise.make_key(-1)
    with pytest.raises(ValueError, match="pair"):
        noise.make_key(jax.random.split(jax.random.key(0), 3))


def test_normals_are_the_quantiles_of_52_bit_uniforms_and_reach_past_8_sigma():
    """z = Φ⁻¹(p) with p = (m + ½)/2⁵², m the top 52 of the 64 random bits (scipy's quantile, independent); the tail
    reaches Φ⁻¹(1 − 2⁻⁵³) = 8.21σ, not the 5.3σ of float32 uniforms (a truncated Gaussian is not the mechanism)."""
    hi = np.array([0, 0, 1, 2**31, 2**31 - 1, 2**32 - 1, 2**32 - 1, 12345, 2**20], np.uint32)
    lo = np.array([0, 2**12, 0, 0, 2**32 - 1, 2**32 - 4096, 2**32 - 1, 987654321, 7], np.uint32)
    with sensitivity.x64():
        z = np.asarray(noise.normal_from_bits(jnp.asarray((hi.astype(np.uint64) << 32) | lo.astype(np.uint64))))
    m = (hi.astype(object) << 20) | (lo.astype(object) >> 12)
    p = np.array([(float(v) + 0.5) / 2**52 for v in m])
    np.testing.assert_allclose(z, stats.norm.ppf(p), rtol=1e-9, atol=1e-12)
    assert z.min() == pytest.approx(-noise.NORMAL_TAIL, abs=1e-4) and z.max() == pytest.approx(noise.NORMAL_TAIL, abs=1e-4)
    assert noise.NORMAL_TAIL == pytest.approx(stats.norm.isf(2.0**-53), abs=1e-4)
    with sensitivity.x64():
        big = np.asarray(noise.normal(noise.make_key(5).key, (2_000_000,), jnp.float64))
    assert np.all(np.isfinite(big)) and stats.kstest(big, "norm").pvalue > 1e-3


def test_without_float64_the_sampler_refuses_instead_of_truncating():
    with jax.enable_x64(False), pytest.raises(RuntimeError, match="float64"):
        noise.normal(noise.make_key(0).key, (4,))


def test_extreme_bits_give_finite_normals():
    """Every pattern of the 64 bits maps to a finite normal (u never reaches ±1, where erfinv is infinite)."""
    edges = np.array([0, 1, 2**12 - 1, 2**12, 2**31, 2**32 - 2**12, 2**32 - 1], np.uint32)
    hi, lo = np.meshgrid(edges, edges)
    words = (hi.ravel().astype(np.uint64) << 32) | lo.ravel().astype(np.uint64)
    z = np.asarray(noise.normal_from_bits(jnp.asarray(words)))
    assert np.all(np.isfinite(z)) and z.min() < -8 and z.max() > 8


@pytest.mark.parametrize("p", [0.3, 256 / 1437, 1e-9, 2.0**-32, 1 - 1e-12, 0.0, 1.0])
def test_poisson_membership_is_never_above_the_accounted_rate(p):
    """P(in) = ⌊p·2³²⌋/2³² ≤ p, within 2⁻³² (amplification by subsampling grows with the rate)."""
    t = noise.bernoulli_threshold(p)
    assert t / 2**32 <= p and p - t / 2**32 < 2.0**-32
    draws = np.asarray(noise.bernoulli(noise.make_key(2).key, p, (100_000,)))
    assert draws.dtype == bool and abs(draws.mean() - p) < 5 * np.sqrt(p * (1 - p) / 1e5) + 1e-9
