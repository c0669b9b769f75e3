"""The keyed random draws of `fco_ray.ops.random` in JAX (uint64), bit for bit.

`fco_ray.ops.random.Key` draws client c's numbers at (seed, round, step, stream) as
bits[c, j] = mix(mix(prefix ^ id_c * gamma) + (j + 1) * gamma), prefix = key_prefix(seed,
round, step, stream), mix the SplitMix64 finalizer (`fco_ray.ops.kernels`). The functions below
compute the same integers with wrapping uint64 arithmetic on the device, so a local step's
minibatch rows and noise are those of the CPU engine: the uniforms and integers exactly, the
normals up to the last bits of `ndtri` (JAX's port of the Cephes polynomial, <= 1e-15
relative against SciPy's; tests/engine/test_device.py). Arguments may be traced (the step of a
`lax.fori_loop`); call them inside a jitted program with jax_enable_x64 on.
"""
from __future__ import annotations

import jax.numpy as jnp
from jax.scipy.special import ndtri

GOLDEN = 0x9E3779B97F4A7C15
_C1 = 0xBF58476D1CE4E5B9
_C2 = 0x94D049BB133111EB
_TWO_M53 = 1.0 / 2.0**53


def _u64(v):
    return jnp.asarray(v, dtype=jnp.uint64)


def mix(z):
    """SplitMix64 finalizer on uint64 arrays (multiplication wraps modulo 2^64)."""
    z = (z ^ (z >> _u64(30))) * _u64(_C1)
    z = (z ^ (z >> _u64(27))) * _u64(_C2)
    return z ^ (z >> _u64(31))


def key_prefix(seed, rnd, step, stream):
    """`kernels.key_prefix`: h = 0x5EED, then h = mix(h ^ (part + gamma)) per part."""
    h = _u64(0x5EED)
    for part in (seed, rnd, step, stream):
        h = mix(h ^ (_u64(part) + _u64(GOLDEN)))
    return h


def bits(seed, rnd, step, stream, ids, count: int):
    """(clients, count) uint64, `kernels.keyed_bits`; `ids` (clients,) uint64."""
    h = mix(key_prefix(seed, rnd, step, stream) ^ (_u64(ids) * _u64(GOLDEN)))
    counters = (jnp.arange(1, count + 1, dtype=jnp.uint64) * _u64(GOLDEN))
    return mix(h[:, None] + counters[None, :])


def uniform(seed, rnd, step, stream, ids, count: int):
    """(clients, count) floats in (0, 1): `Key.uniform` (((bits >> 11) + 1/2) / 2^53, at most
    1 - 2^-53). bits >> 11 < 2^53 converts to float64 exactly."""
    u = ((bits(seed, rnd, step, stream, ids, count) >> _u64(11)).astype(jnp.float64) + 0.5) * _TWO_M53
    return jnp.minimum(u, 1.0 - 2.0**-53)


def integers(seed, rnd, step, stream, ids, highs, count: int):
    """(clients, count) int64, row c uniform in [0, highs[c]): `kernels.keyed_integers`
    (min(floor(u h_c), h_c - 1), one float product as there)."""
    u = uniform(seed, rnd, step, stream, ids, count)
    highs = jnp.asarray(highs, dtype=jnp.int64)
    return jnp.minimum((u * highs[:, None].astype(jnp.float64)).astype(jnp.int64), highs[:, None] - 1)


def normal(seed, rnd, step, stream, ids, count: int):
    """(clients, count) standard normals by the inverse CDF of `uniform` (`Key.normal`)."""
    return ndtri(uniform(seed, rnd, step, stream, ids, count))
