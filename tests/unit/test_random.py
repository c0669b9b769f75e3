"""Counter-based randomness: keyed, shard-independent, and statistically sound."""
import numpy as np
import pytest
from scipy import stats

from fco_ray.ops.random import BATCH, NOISE, PERMUTATION, Key, sample_clients


def test_a_clients_draws_do_not_depend_on_who_else_is_in_the_stack():
    ids = np.array([3, 7, 11, 42])
    together = Key(5, 2, ids, step=1).normal((6,))
    for i, cid in enumerate(ids):
        alone = Key(5, 2, np.array([cid]), step=1).normal((6,))
        np.testing.assert_array_equal(together[i], alone[0])


def test_every_key_part_changes_the_draws():
    base = Key(1, 2, np.array([3]), step=4, stream=BATCH).uniform((8,))
    for other in (Key(9, 2, np.array([3]), 4, BATCH), Key(1, 9, np.array([3]), 4, BATCH),
                  Key(1, 2, np.array([9]), 4, BATCH), Key(1, 2, np.array([3]), 9, BATCH),
                  Key(1, 2, np.array([3]), 4, NOISE)):
        assert not np.array_equal(base, other.uniform((8,)))


def test_distributions():
    u = Key(0, 0, np.arange(50)).uniform((2000,)).ravel()
    assert 0 < u.min() and u.max() < 1
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    z = Key(1, 0, np.arange(50)).normal((2000,)).ravel()
    assert stats.kstest(z, "norm").pvalue > 1e-3
    ints = Key(2, 0, np.arange(3)).integers(np.array([1, 5, 1000]), 5000)
    assert np.all(ints[0] == 0)
    assert set(np.unique(ints[1])) == {0, 1, 2, 3, 4}
    assert ints[2].min() >= 0 and ints[2].max() < 1000
    counts = np.bincount(ints[1], minlength=5)
    assert stats.chisquare(counts).pvalue > 1e-3


def test_client_sampling_is_keyed_and_without_replacement():
    a = sample_clients(0, 3, 100, 10)
    assert len(np.unique(a)) == 10 and np.array_equal(a, sample_clients(0, 3, 100, 10))
    assert not np.array_equal(a, sample_clients(0, 4, 100, 10))
    np.testing.assert_array_equal(sample_clients(0, 3, 5, 5), np.arange(5))


# ---------------------------------------------------------------- reference SplitMix64
# Pure Python ints, written from the formula of the docstrings (fco_ray.ops.random, fco_ray.ops.kernels),
# not from the implementation: prefix = chain of mix over (seed, round, step, stream) from
# 0x5EED, bits[c, j] = mix(mix(prefix ^ id_c * gamma) + (j + 1) * gamma), all mod 2^64.

M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def ref_mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def ref_bits(seed, rnd, ids, step, stream, count):
    h = 0x5EED
    for part in (seed, rnd, step, stream):
        h = ref_mix(h ^ ((part + GAMMA) & M64))
    rows = []
    for cid in ids:
        hc = ref_mix(h ^ ((int(cid) * GAMMA) & M64))
        rows.append([ref_mix((hc + (j + 1) * GAMMA) & M64) for j in range(count)])
    return rows


def ref_uniform(bits):
    # Python floats are IEEE doubles; the largest bits would round to 1.0: capped below 1
    return [[min(((b >> 11) + 0.5) / 2.0**53, 1.0 - 2.0**-53) for b in row] for row in bits]


def ref_integers(bits, highs):
    return [[min(int(u * h), h - 1) for u in row] for row, h in zip(ref_uniform(bits), highs)]


BIG = 2**63
REF_KEYS = [  # (seed, round, client ids, step, stream)
    (0, 0, np.array([0]), 0, BATCH),
    (5, 2, np.array([3, 7, 11, 42]), 1, NOISE),
    (123456789, 17, np.array([BIG - 1, BIG - 2, 0, 1]), 17, BATCH),
    (1, 3, np.array([BIG - 1, BIG, BIG + 5, 2**64 - 1], dtype=np.uint64), 33, PERMUTATION),
    (2**40 + 7, 999, np.arange(5), 1000, NOISE),
]


@pytest.mark.parametrize("seed, rnd, ids, step, stream", REF_KEYS)
def test_bits_uniform_and_integers_equal_the_reference_splitmix64(seed, rnd, ids, step, stream):
    key = Key(seed, rnd, ids, step, stream)
    count = 21
    bits = ref_bits(seed, rnd, ids, step, stream, count)
    got = key._bits((count,))
    assert got.dtype == np.uint64 and got.shape == (len(ids), count)
    assert got.tolist() == bits
    # a multi-dimensional shape is the same counter, row-major
    assert key._bits((3, 7)).reshape(len(ids), count).tolist() == bits
    u = key.uniform((count,))
    assert u.dtype == np.float64 and u.tolist() == ref_uniform(bits)
    highs = np.array([1, 7, 1000, 2**40 + 3, 3][: len(ids)])
    ints = key.integers(highs, count)
    assert ints.dtype == np.int64 and ints.shape == (len(ids), count)
    assert ints.tolist() == ref_integers(bits, highs.tolist())


def test_every_step_is_its_own_key():
    ids = np.array([4, 9])
    for step in (0, 1, 15, 16, 17, 32, 33, 100):
        key = Key(7, 1, ids).with_step(step, NOISE)
        assert key._bits((4,)).tolist() == ref_bits(7, 1, ids, step, NOISE, 4)
        # drawing again gives the same numbers (no state between calls)
        assert key._bits((4,)).tolist() == ref_bits(7, 1, ids, step, NOISE, 4)


def test_integers_rejects_highs_of_the_wrong_length():
    key = Key(0, 0, np.arange(3))
    for highs in (np.array([5, 5]), np.array([5]), np.array([5, 5, 5, 5]), np.full((3, 1), 5)):
        with pytest.raises(ValueError, match="highs"):
            key.integers(highs, 4)


def _unmix(z):
    """Inverse of the SplitMix64 finalizer (xorshifts and odd multipliers are invertible)."""
    def unxorshift(z, s):
        x = z
        for _ in range(64 // s + 1):
            x = z ^ (x >> s)
        return x
    z = unxorshift(z, 31) * pow(0x94D049BB133111EB, -1, 1 << 64) & M64
    z = unxorshift(z, 27) * pow(0xBF58476D1CE4E5B9, -1, 1 << 64) & M64
    return unxorshift(z, 30)


def test_uniform_is_in_the_open_interval_even_for_the_largest_bits():
    # construct the client id whose first draw has bits = 2^64 - 1 by inverting the mixes
    h = 0x5EED
    for part in (0, 0, 0, BATCH):
        h = ref_mix(h ^ ((part + GAMMA) & M64))
    hc = (_unmix(M64) - GAMMA) & M64
    cid = (h ^ _unmix(hc)) * pow(GAMMA, -1, 1 << 64) & M64
    key = Key(0, 0, np.array([cid], dtype=np.uint64))
    assert key._bits((1,))[0, 0] == M64
    assert key.uniform((1,))[0, 0] == 1.0 - 2.0**-53
    assert np.isfinite(key.normal((1,))[0, 0])


def test_draws_are_pinned_by_a_fingerprint():
    """The generator's numbers are part of every recorded result: any change to them shows
    here (sha256 of bits, integers, uniforms and normals of 300 random keys)."""
    import hashlib

    from fco_ray.ops.random import Key

    h = hashlib.sha256()
    rng = np.random.default_rng(5)
    for _ in range(300):
        ids = np.sort(rng.choice(10000, size=int(rng.integers(1, 40)), replace=False))
        key = Key(int(rng.integers(0, 2**31)), int(rng.integers(0, 3000)), ids,
                  int(rng.integers(0, 40)), int(rng.integers(1, 6)))
        h.update(key._bits((int(rng.integers(1, 30)),)).tobytes())
        h.update(key.integers(rng.integers(1, 500, size=len(ids)), int(rng.integers(1, 20))).tobytes())
        h.update(key.uniform((3, 2)).tobytes())
        h.update(key.normal((4,)).tobytes())
    assert h.hexdigest() == "8389a5b25141bc8382a9111d78c80a0800a8923d665226857c369418934462bd"
