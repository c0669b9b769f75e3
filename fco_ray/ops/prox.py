"""Batched proximal operators and Euclidean projections.

Every function acts on the trailing ``event_ndim`` axes of ``x`` (the trailing two
for the matrix operators) and broadcasts over the leading axes (one slice per client).
``tau`` and ``radius`` are floats >= 0.

All functions return a new array; the input is never modified or returned as is.
Integer inputs are promoted to float64, floating dtypes are kept.

    prox_{tau psi}(v) = argmin_u  tau psi(u) + 1/2 ||u - v||^2
    P_C(v)            = argmin_{u in C} 1/2 ||u - v||^2
"""
from __future__ import annotations

import math

import numpy as np



def _as_float(x) -> np.ndarray:
    x = np.asarray(x)
    # dtype.kind "f" is np.floating (a hot path: issubdtype costs several times more)
    return x if x.dtype.kind == "f" else x.astype(np.float64)


def _event_axes(x: np.ndarray, event_ndim: int) -> tuple[int, ...]:
    if not 0 <= event_ndim <= x.ndim:
        raise ValueError(f"event_ndim must be in [0, {x.ndim}] for an array of shape {x.shape}, got {event_ndim}")
    return tuple(range(x.ndim - event_ndim, x.ndim))


def _as_matrices(x) -> np.ndarray:
    x = _as_float(x)
    if x.ndim < 2:
        raise ValueError(f"expected a (batch of) matrices with shape (..., m, n), got shape {x.shape}")
    return x


def soft_threshold(x, tau) -> np.ndarray:
    """prox of tau ||.||_1, elementwise:  sign(x) * max(|x| - tau, 0)  =  x - clip(x, -tau, tau).
    `tau` is a number or an array broadcasting against x (one value per row of a stack).

    The clip form makes 2 passes instead of 4 and gives the same floats (x - tau and
    x + tau = -(|x| - tau) are the same roundings); only the sign of a zero may differ.
    """
    x = _as_float(x)
    if np.ndim(tau) == 0 and tau == 0:
        return x.copy()
    if x.dtype == np.float64 and np.ndim(tau) == 0 and math.isfinite(tau):  # one compiled pass
        from . import kernels  # numba: loaded on the first compiled prox, not with the schemas

        return kernels.soft_threshold(np.ascontiguousarray(x).reshape(-1), float(tau)).reshape(x.shape)
    rows = np.asarray(tau)
    if (x.dtype == np.float64 and x.ndim >= 1 and rows.ndim == x.ndim and rows.shape[0] == x.shape[0]
            and rows.size == x.shape[0] and np.all(np.isfinite(rows))):  # a threshold per row
        from . import kernels

        flat = np.ascontiguousarray(x).reshape(x.shape[0], -1)
        return kernels.soft_threshold_rows(flat, rows.reshape(-1).astype(np.float64)).reshape(x.shape)
    return x - np.clip(x, -tau, tau)


def project_box(x, radius: float) -> np.ndarray:
    """Projection onto the l_inf ball {||u||_inf <= radius}:  clip(x, -radius, radius)."""
    return np.clip(_as_float(x), -radius, radius)


def prox_l1_box(x, tau: float, radius: float) -> np.ndarray:
    """prox of tau ||.||_1 + indicator{||u||_inf <= radius}:  clip(soft_threshold(x, tau), -radius, radius).

    Exact because both terms are separable and the 1-D prox is a monotone clip of the
    1-D soft threshold.
    """
    return np.clip(soft_threshold(x, tau), -radius, radius)


def prox_nuclear(x, tau: float, radius: float | None = None) -> np.ndarray:
    """prox of tau ||.||_* (+ indicator{||u||_2 <= radius} if radius is given) on (..., m, n).

    With the thin SVD x = U diag(s) V^T:
        U diag(max(s - tau, 0)) V^T                     (radius None)
        U diag(min(max(s - tau, 0), radius)) V^T        (nuclear + spectral ball, exact)
    For tau == 0 (a pure projection) matrices already inside the ball are returned
    bit-for-bit unchanged.
    """
    x = _as_matrices(x)
    zero = np.ndim(tau) == 0 and tau == 0
    if zero and radius is None:
        return x.copy()
    u, s, vh = np.linalg.svd(x, full_matrices=False)
    s_new = np.maximum(s - tau, 0.0)  # tau: a number, or an array broadcasting against s
    if radius is not None:
        s_new = np.minimum(s_new, radius)
    out = (u * s_new[..., None, :]) @ vh
    if zero:
        inside = s.max(axis=-1, initial=0.0) <= radius
        out = np.where(inside[..., None, None], x, out)
    return out


def project_spectral_ball(x, radius: float) -> np.ndarray:
    """Projection onto {||u||_2 <= radius} on (..., m, n):  U diag(min(s, radius)) V^T."""
    return prox_nuclear(x, 0.0, radius)


def project_l2_ball(x, radius: float, event_ndim: int = 1) -> np.ndarray:
    """Projection onto {||u||_2 <= radius} over the event axes:  x * min(1, radius / ||x||_2)."""
    x = _as_float(x)
    axes = _event_axes(x, event_ndim)
    norm = np.sqrt(np.sum(x * x, axis=axes, keepdims=True))
    scale = np.ones_like(norm)
    np.divide(radius, norm, out=scale, where=norm > radius)  # only shrink points outside
    return x * scale


def project_l1_ball(x, radius: float, event_ndim: int = 1) -> np.ndarray:
    """Projection onto {||u||_1 <= radius} over the event axes (Duchi et al. 2008).

    With mu = |x| sorted in decreasing order (flattened event axes),
        theta_j = (sum_{i<=j} mu_i - radius) / j
        rho     = max{j : mu_j > theta_j}
        P(x)    = sign(x) * max(|x| - theta_rho, 0).
    Points with ||x||_1 <= radius are returned unchanged.
    """
    x = _as_float(x)
    _event_axes(x, event_ndim)
    if radius == 0 or x.size == 0:
        return np.zeros_like(x)
    lead = x.shape[: x.ndim - event_ndim]
    d = math.prod(x.shape[x.ndim - event_ndim:])
    v = x.reshape(lead + (d,))
    a = np.abs(v)
    mu = -np.sort(-a, axis=-1)
    thetas = (np.cumsum(mu, axis=-1) - radius) / np.arange(1, d + 1, dtype=x.dtype)
    last = d - 1 - np.argmax((mu > thetas)[..., ::-1], axis=-1)  # rho - 1
    theta = np.take_along_axis(thetas, last[..., None], axis=-1)
    projected = np.sign(v) * np.maximum(a - theta, 0.0)
    inside = a.sum(axis=-1, keepdims=True) <= radius
    return np.where(inside, v, projected).reshape(x.shape)
