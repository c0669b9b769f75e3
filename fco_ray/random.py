"""Counter-based random numbers keyed by (seed, round, client, step, stream).

Every random draw of a client is a pure function of its key, so a result does not depend
on how clients are sharded over processes, on the number of Ray actors, or on the order in
which trials run. The generator is the SplitMix64 finalizer applied to a hash of the key
and an element counter, vectorized over clients with NumPy's wrapping uint64 arithmetic.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)

# stream tags: distinct draws of the same client and step never share numbers
BATCH, NOISE, NOISE2, PERMUTATION, OTHER = 1, 2, 3, 4, 5


_MASK = (1 << 64) - 1


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer on a uint64 array (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * _C1
    z = (z ^ (z >> np.uint64(27))) * _C2
    return z ^ (z >> np.uint64(31))


def _mix_int(z: int) -> int:
    """The same finalizer on a Python int (for the scalar part of a key)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def _prefix(*parts: int) -> int:
    h = 0x5EED
    for part in parts:
        h = _mix_int(h ^ ((int(part) + 0x9E3779B97F4A7C15) & _MASK))
    return h


@dataclass(frozen=True)
class Key:
    """The random source of a stack of clients at one step of one round."""

    seed: int
    round: int
    client_ids: np.ndarray
    step: int = 0
    stream: int = BATCH

    def with_step(self, step: int, stream: int = BATCH) -> "Key":
        return Key(self.seed, self.round, self.client_ids, step, stream)

    def _bits(self, shape: tuple[int, ...]) -> np.ndarray:
        """uint64 array of shape (clients, *shape)."""
        ids = np.asarray(self.client_ids, dtype=np.uint64)
        with np.errstate(over="ignore"):
            h = _mix(np.uint64(_prefix(self.seed, self.round, self.step, self.stream)) ^ (ids * _GOLDEN))
            count = int(np.prod(shape, dtype=np.int64))
            counter = np.arange(1, count + 1, dtype=np.uint64) * _GOLDEN
            bits = _mix(h[:, None] + counter[None, :])
        return bits.reshape(ids.shape + tuple(shape))

    def uniform(self, shape: tuple[int, ...]) -> np.ndarray:
        """Uniform floats in the open interval (0, 1)."""
        bits = self._bits(shape)
        return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / 2.0**53)

    def integers(self, highs: np.ndarray, size: int) -> np.ndarray:
        """(clients, size) integers, row c uniform in [0, highs[c])."""
        highs = np.asarray(highs, dtype=np.int64)
        u = self.uniform((size,))
        return np.minimum((u * highs[:, None]).astype(np.int64), highs[:, None] - 1)

    def normal(self, shape: tuple[int, ...]) -> np.ndarray:
        """Standard normal floats of shape (clients, *shape) by inverse-CDF transform."""
        return ndtri(self.uniform(shape))


def sample_clients(seed: int, rnd: int, num_clients: int, per_round: int) -> np.ndarray:
    """Clients of a round: uniform without replacement, keyed by (seed, round), sorted."""
    if per_round >= num_clients:
        return np.arange(num_clients)
    rng = np.random.default_rng([seed, rnd, 0xC1])
    return np.sort(rng.choice(num_clients, size=per_round, replace=False))


def generator(seed: int, *tags: int) -> np.random.Generator:
    """A NumPy generator for driver-side draws (data generation, initialization)."""
    return np.random.default_rng([seed, *tags])
