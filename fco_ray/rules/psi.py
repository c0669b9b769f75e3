"""Proximal maps and projections of one model block, in JAX (the formulas of
`fco_ray.ops.prox` / `fco_ray.ops.regularizers`, the same floating-point operations):

- l1 + box:  prox_{t psi}(x) = clip(soft(x, t lam), -D, D),  soft(x, tau) = x - clip(x, -tau, tau);
- nuclear + spectral ball: U diag(min(max(s - t lam, 0), D)) V^T for x = U diag(s) V^T
  (D = inf: the nuclear prox alone);
- projections: the same with lam = 0;
- subgradients of the penalty: lam sign(x), lam U V^T (the polar factor).

Thresholds `tau` are numbers (one member); under `jax.vmap` they are one per member.
"""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .static import Static


def soft_threshold(x, tau):
    """x - clip(x, -tau, tau) (`prox.soft_threshold`'s floats)."""
    return x - jnp.clip(x, -tau, tau)


def l1_box(x, tau, radius):
    """prox of tau ||.||_1 + the box ||.||_inf <= radius (radius inf: no box)."""
    return jnp.clip(soft_threshold(x, tau), -radius, radius)


def householder_r(x):
    """The p x p triangular factor R of x = Q R for a tall matrix (m, p), m >= p, by p
    Householder reflections (backward stable: svd(R) has x's singular values). Avoids the
    Gram matrix x^T x, whose eigenvalues lose the small singular values' float64 precision,
    and any library QR (one solver call per matrix of a batch on a GPU)."""
    m, p = x.shape[-2:]
    rows = jnp.arange(m)

    def reflect(j, a):
        col = lax.dynamic_index_in_dim(a, j, axis=a.ndim - 1, keepdims=False)  # (m,)
        v = jnp.where(rows >= j, col, 0.0)
        norm = jnp.sqrt(jnp.sum(v * v, axis=-1))
        ajj = lax.dynamic_index_in_dim(col, j, axis=col.ndim - 1, keepdims=False)
        alpha = -jnp.where(ajj >= 0, 1.0, -1.0) * norm  # the sign that avoids cancellation
        v = v - jnp.where(rows == j, alpha[..., None], 0.0)
        vv = jnp.sum(v * v, axis=-1)
        beta = jnp.where(vv > 0, 2.0 / jnp.where(vv > 0, vv, 1.0), 0.0)
        w = jnp.einsum("...m,...mp->...p", v, a)
        return a - (beta[..., None] * v)[..., :, None] * w[..., None, :]

    return jnp.triu(lax.fori_loop(0, p, reflect, x)[..., :p, :])


#: how the nuclear prox finds the singular values and right vectors of a thin matrix
ROUTES = ("householder", "gram")


def spectral_map(x, f, route: str = "householder"):
    """(U diag(f(s)) V^T, s) for the thin SVD of x (m, p), with f(0) = 0 and f(s) <= s.

    "householder": R of x = QR by reflections, the small p x p SVD R = U s V^T, and the
    result x V diag(f(s) / s) V^T (Q never formed; f(s) <= s loses no precision).
    "gram": the eigendecomposition x^T x = V diag(s^2) V^T, then the same x V diag(f(s) / s) V^T:
    one small p x p solve instead of p reflections, but squaring the singular values loses
    the small ones' precision (a singular value below ~1e-8 s_max is noise; the prox sets
    those below its threshold to zero anyway).
    "qr": the library's QR, then (Q U) f(s) V^T (for f(s) > s, e.g. the polar factor)."""
    m, p = x.shape[-2:]
    if m < p:  # the transpose's map, transposed (f acts on the same singular values)
        out, s = spectral_map(jnp.swapaxes(x, -1, -2), f, route)
        return jnp.swapaxes(out, -1, -2), s
    if route == "qr":
        q, r = jnp.linalg.qr(x)
        u, s, vh = jnp.linalg.svd(r, full_matrices=False)
        return ((q @ u) * f(s)[..., None, :]) @ vh, s
    if route == "gram":
        eig, v = jnp.linalg.eigh(jnp.swapaxes(x, -1, -2) @ x)
        s = jnp.sqrt(jnp.maximum(eig, 0.0))
        vh = jnp.swapaxes(v, -1, -2)
    else:
        _, s, vh = jnp.linalg.svd(householder_r(x), full_matrices=False)
    fs = f(s)
    ratio = jnp.where(s > 0, fs / jnp.where(s > 0, s, 1.0), 0.0)
    v = jnp.swapaxes(vh, -1, -2)
    return x @ ((v * ratio[..., None, :]) @ vh), s


def nuclear_ball(x, tau, radius, route: str = "householder"):
    """U diag(min(max(s - tau, 0), radius)) V^T; with tau = 0 a matrix already inside the
    ball comes back unchanged (`prox.prox_nuclear`), so prox_0 is the identity."""
    out, s = spectral_map(x, lambda s: jnp.minimum(jnp.maximum(s - tau, 0.0), radius), route)
    inside = (tau == 0) & (jnp.max(s) <= radius)
    return jnp.where(inside, x, out)


def polar(x):
    """U V^T over the singular values s > 1e-12 max(s) (`regularizers._polar`), by the
    library's QR: f(s) = 1 > s for small kept s."""
    keep = lambda s: jnp.where(s > 1e-12 * jnp.max(s), 1.0, 0.0)  # noqa: E731
    return spectral_map(x, keep, route="qr")[0]


class Block(Static):
    """psi on one block: lam times a penalty (`l1`, `nuclear` or None) plus a ball of
    `radius` (inf: none), the box or (`spectral`) the spectral ball: the pairs with an exact
    prox are l1 + box and nuclear + spectral ball."""

    def __init__(self, penalty: str | None, radius: float = float("inf"), spectral: bool = False,
                 route: str = "householder"):
        self.penalty, self.radius, self.spectral = penalty, radius, spectral or penalty == "nuclear"
        self.route = route  # of the nuclear prox (ROUTES)

    def prox(self, x, tau):
        """prox_{psi} at threshold tau = t * lam."""
        if self.penalty is None:
            return self.project(x)
        if self.penalty == "l1":
            return l1_box(x, tau, self.radius)
        return nuclear_ball(x, tau, self.radius, self.route)

    def project(self, x):
        if self.radius == float("inf"):
            return x
        if self.spectral:
            return nuclear_ball(x, 0.0, self.radius, self.route)
        return jnp.clip(x, -self.radius, self.radius)

    def subgradient(self, x, lam):
        if self.penalty is None:
            return jnp.zeros_like(x)
        if self.penalty == "l1":
            return lam * jnp.sign(x)
        return lam * polar(x)


# ---- the l1 and l2 balls (a constraint alone: E4's weight matrices) -----------------------
def project_l2_ball(x, radius):
    """Projection onto {||u||_2 <= radius} over the whole block (`prox.project_l2_ball`):
    x * (radius / ||x||_2) outside the ball, x itself inside."""
    norm = jnp.sqrt(jnp.sum(x * x))
    scale = jnp.where(norm > radius, radius / jnp.where(norm > radius, norm, 1.0), 1.0)
    return x * scale


def project_l1_ball(x, radius):
    """Projection onto {||u||_1 <= radius} over the whole block, sort-based (Duchi et al. 2008;
    `prox.project_l1_ball`): with mu = |x| sorted decreasingly, theta_j = (sum_{i<=j} mu_i -
    radius) / j, rho = max{j : mu_j > theta_j}, P(x) = sign(x) max(|x| - theta_rho, 0); a point
    with ||x||_1 <= radius comes back unchanged."""
    if radius == 0 or x.size == 0:
        return jnp.zeros_like(x)
    d = x.size
    v = x.reshape(-1)
    a = jnp.abs(v)
    mu = -jnp.sort(-a)
    thetas = (jnp.cumsum(mu) - radius) / jnp.arange(1, d + 1, dtype=v.dtype)
    last = d - 1 - jnp.argmax((mu > thetas)[::-1])  # rho - 1
    projected = jnp.sign(v) * jnp.maximum(a - thetas[last], 0.0)
    return jnp.where(jnp.sum(a) <= radius, v, projected).reshape(x.shape)


BALLS = {"l1": project_l1_ball, "l2": project_l2_ball}


class Ball(Block):
    """psi on one block = the indicator of the `norm` ball ("l1" or "l2", `BALLS`) of `radius`
    over the whole block, no penalty: prox_{t psi} is the projection for every t, and the
    penalty's subgradient is zero (`regularizers.L1Ball`, `L2Ball`)."""

    def __init__(self, norm: str, radius: float):
        if norm not in BALLS:
            raise ValueError(f"Ball: norm must be one of {sorted(BALLS)}, got {norm!r}")
        super().__init__(None, radius)
        self.norm = norm

    def project(self, x):
        return BALLS[self.norm](x, self.radius)
