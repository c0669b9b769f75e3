"""Counter-based random numbers keyed by (seed, round, client, step, stream).

Every random draw of a client is a pure function of its key, so a result does not depend
on how clients are sharded over processes, on the number of Ray actors, or on the order in
which trials run. The generator is the SplitMix64 finalizer applied to a hash of the key
and an element counter; the per-client, per-element loop is compiled (`fco_ray.ops.kernels`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# numba (kernels) and scipy load on the first draw, not with the config schemas that import
# this module (a config error is answered before them)

# stream tags: distinct draws of the same client and step never share numbers
BATCH, NOISE, NOISE2, PERMUTATION, OTHER = 1, 2, 3, 4, 5


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
        """uint64 array of shape (clients, *shape):
        bits[c, j] = mix(mix(prefix ^ id_c * gamma) + (j + 1) * gamma), with prefix a hash of
        (seed, round, step, stream) (`kernels.key_prefix`)."""
        from . import kernels

        ids = np.asarray(self.client_ids, dtype=np.uint64)
        bits = kernels.keyed_bits(self.seed, self.round, self.step, self.stream, ids.reshape(-1),
                                  math.prod(shape))
        return bits.reshape(ids.shape + tuple(shape))

    def uniform(self, shape: tuple[int, ...]) -> np.ndarray:
        """Uniform floats in the open interval (0, 1): ((bits >> 11) + 1/2) / 2^53, at most
        1 - 2^-53 (the largest bits would round to 1.0: a tie broken to even)."""
        bits = self._bits(shape)
        bits >>= np.uint64(11)
        u = bits.astype(np.float64)
        u += 0.5
        u *= 1.0 / 2.0**53
        return np.minimum(u, 1.0 - 2.0**-53, out=u)

    def integers(self, highs: np.ndarray, size: int) -> np.ndarray:
        """(clients, size) integers, row c uniform in [0, highs[c]): min(floor(u h_c), h_c - 1)
        with u the numbers of `uniform`."""
        ids = np.asarray(self.client_ids, dtype=np.uint64).reshape(-1)
        highs = np.ascontiguousarray(highs, dtype=np.int64)
        if highs.shape != ids.shape:
            raise ValueError(f"highs: one per client ({ids.shape}), got shape {highs.shape}")
        from . import kernels

        return kernels.keyed_integers(self.seed, self.round, self.step, self.stream, ids, highs, size)

    def normal(self, shape: tuple[int, ...]) -> np.ndarray:
        """Standard normal floats of shape (clients, *shape) by inverse-CDF transform."""
        from scipy.special import ndtri

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
