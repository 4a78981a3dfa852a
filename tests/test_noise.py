"""privlin.noise: keys carry 128 bits of OS entropy, both halves matter, draws have the stated law and are
the same under vmap (so a setting in a sweep draws what it draws alone)."""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from privlin import noise


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
    u = np.asarray(noise.uniform(k3, (200_000,)), np.float64)
    assert stats.kstest(u, "uniform").pvalue > 1e-3 and u.min() >= 0 and u.max() < 1


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


def test_extreme_bits_give_finite_normals():
    """Every uint32 pattern maps to a finite normal (the top 24-bit value once mapped to u = 1.0: erfinv = inf)."""
    edges = np.array([0, 1, 255, 256, 511, 512, 2**31, 2**32 - 513, 2**32 - 512, 2**32 - 257, 2**32 - 256,
                      2**32 - 1], np.uint32)
    z = np.asarray(noise.normal_from_bits(jnp.asarray(edges)))
    assert np.all(np.isfinite(z)) and z[0] < -5 and z[-1] > 5 and abs(z[6]) < 1e-3
    top = np.arange(2**32 - 2**12, 2**32, dtype=np.uint64).astype(np.uint32)  # the whole top of the range
    assert np.all(np.isfinite(np.asarray(noise.normal_from_bits(jnp.asarray(top)))))
