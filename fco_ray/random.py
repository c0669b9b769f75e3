"""Counter-based random numbers keyed by (seed, round, client, step, stream).

Every random draw of a client is a pure function of its key, so a result does not depend
on how clients are sharded over processes, on the number of Ray actors, or on the order in
which trials run. The generator is the SplitMix64 finalizer applied to a hash of the key
and an element counter, vectorized over clients with NumPy's wrapping uint64 arithmetic.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.special import ndtri

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)

# stream tags: distinct draws of the same client and step never share numbers
BATCH, NOISE, NOISE2, PERMUTATION, OTHER = 1, 2, 3, 4, 5


_MASK = (1 << 64) - 1


_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer on a uint64 array (wrapping arithmetic), computed in place:
    pass a fresh array. (Array arithmetic on uint64 wraps silently; only NumPy scalars warn.)"""
    z ^= z >> _S30
    z *= _C1
    z ^= z >> _S27
    z *= _C2
    z ^= z >> _S31
    return z


@lru_cache(maxsize=64)
def _counter(count: int) -> np.ndarray:
    """Element counters 1..count times the golden gamma (read-only, cached per size)."""
    c = np.arange(1, count + 1, dtype=np.uint64) * _GOLDEN
    c.flags.writeable = False
    return c


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


#: Draws of at most _SMALL numbers per step (a local step's minibatch indices: e.g. 10
#: clients x 10) cost about 20 NumPy calls whatever their size, so from step 1 on they are
#: made for _BLOCK_STEPS steps at once and cached (step 0 alone: one-step users never pay
#: for a block). Same numbers: the bits of step s are a function of its key only.
_SMALL = 4096
_BLOCK_STEPS = 16


def _client_hash(seed: int, rnd: int, steps: np.ndarray, stream: int, ids: np.ndarray) -> np.ndarray:
    """(steps, clients) hashes mix(prefix(seed, rnd, step, stream) ^ id * gamma); the
    prefix's step and stream parts are mixed as arrays (the same as `_prefix`)."""
    base = np.uint64(_prefix(seed, rnd))
    z = _mix(base ^ (steps.astype(np.uint64) + _GOLDEN))
    z = _mix(z ^ np.uint64((int(stream) + 0x9E3779B97F4A7C15) & _MASK))
    h = (ids * _GOLDEN)[None, :] ^ z[:, None]
    return _mix(h)


@lru_cache(maxsize=16)
def _bits_block(seed: int, rnd: int, stream: int, first: int, ids: bytes, count: int) -> np.ndarray:
    """Read-only bits of steps first .. first + _BLOCK_STEPS - 1: shape (steps, clients, count)."""
    steps = np.arange(first, first + _BLOCK_STEPS)
    h = _client_hash(seed, rnd, steps, stream, np.frombuffer(ids, dtype=np.uint64))
    bits = _mix(h[:, :, None] + _counter(count)[None, None, :])
    bits.flags.writeable = False
    return bits


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
        bits[c, j] = mix(mix(prefix ^ id_c * gamma) + (j + 1) * gamma)."""
        ids = np.asarray(self.client_ids, dtype=np.uint64)
        flat = ids.reshape(-1)  # 1-d: all arithmetic on arrays (wrapping, no overflow warnings)
        count = math.prod(shape)
        if self.step > 0 and flat.size * count <= _SMALL:
            first = 1 + (self.step - 1) // _BLOCK_STEPS * _BLOCK_STEPS
            block = _bits_block(int(self.seed), int(self.round), int(self.stream), first,
                                flat.tobytes(), count)
            bits = block[self.step - first].copy()
        else:
            h = flat * _GOLDEN
            h ^= np.uint64(_prefix(self.seed, self.round, self.step, self.stream))
            _mix(h)
            bits = _mix(h[:, None] + _counter(count)[None, :])
        return bits.reshape(ids.shape + tuple(shape))

    def uniform(self, shape: tuple[int, ...]) -> np.ndarray:
        """Uniform floats in the open interval (0, 1): ((bits >> 11) + 1/2) / 2^53."""
        bits = self._bits(shape)
        bits >>= _S11
        u = bits.astype(np.float64)
        u += 0.5
        u *= 1.0 / 2.0**53
        return u

    def integers(self, highs: np.ndarray, size: int) -> np.ndarray:
        """(clients, size) integers, row c uniform in [0, highs[c]): min(floor(u h_c), h_c - 1)."""
        highs = np.asarray(highs, dtype=np.int64)[:, None]
        u = self.uniform((size,))
        u *= highs
        return np.minimum(u.astype(np.int64), highs - 1, out=np.empty(u.shape, np.int64))

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
