"""Counter-based randomness: keyed, shard-independent, and statistically sound."""
import numpy as np
from scipy import stats

from fco_ray.random import BATCH, NOISE, Key, sample_clients


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
