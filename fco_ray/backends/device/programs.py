"""The client work of one round for a group of G members, as one jitted JAX program.

Each program runs the K local steps of the round's C clients for all G members with
`lax.fori_loop` (arrays (C, G, *block): client c, member g), draws the minibatch rows and
the operator noise from the keyed generator (`fco_ray.backends.device.keys`, the CPU engine's
numbers), and returns the weighted sum over clients of each message, (G, ...). The update
rules are those of fco_ray/algorithms/composite.py and saddle.py, written with the same
floating-point operations in the same order (e.g. a step `axpy(-lr, g, z)` is
`(-lr) * g + z`, a threshold `(lr * t) * lam`), so a run's history equals the CPU engine's
up to the summation order of matrix products (tests/test_device.py: 1e-9 relative).

Per-member numbers (client rates, lams, the broadcast step counters t / etat) are (G,)
arrays; they enter as `_m(v, ndim)`, shaped to broadcast over (C, G, *block).
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

from . import keys

# stream tags of fco_ray.ops.random (kept here as plain numbers: the device path must not
# import the host's numba kernels to trace)
BATCH, NOISE, NOISE2 = 1, 2, 3


def _m(v, ndim: int):
    """A (G,) per-member value shaped to broadcast over a (C, G, *block) array of `ndim` axes."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def _wsum(weights, v):
    """sum_c weights[c] * v[c] for v (C, G, ...): the backend's weighted sum, on the device."""
    return jnp.tensordot(weights, v, axes=1)


# ---- proximal operators and projections (fco_ray/ops/prox.py, fco_ray/ops/regularizers.py) -------
def soft_threshold(x, tau):
    """x - clip(x, -tau, tau) (`prox.soft_threshold`'s floats)."""
    return x - jnp.clip(x, -tau, tau)


#: how the nuclear prox gets the singular values of a stack of thin matrices (read when a
#: program is traced; call jax.clear_caches() after changing it):
#: "householder": the triangular factor R of a QR by Householder reflections written as
#:   p batched steps in JAX, the small p x p SVD R = U s V^T, and the result as
#:   X V diag(f(s) / s) V^T (X V = U s: Q is never formed). Every step is a batched array
#:   operation over all clients and members, so no library call loops over the matrices;
#: "qr": the library's QR (jnp.linalg.qr) then the small SVD, the result (Q U) f(s) V^T.
#:   On a GPU the library's QR of a tall matrix runs one solver call per matrix of the batch.
#: Both avoid the Gram matrix X^T X, whose eigenvalues lose the small singular values'
#: float64 precision (they square the condition number).
NUCLEAR_ROUTE = "householder"


def householder_r(x):
    """The p x p triangular factor R of x = Q R for a stack of tall matrices (..., m, p),
    m >= p, by p Householder reflections applied to the whole stack at once (backward
    stable: the R of x + E with ||E|| ~ eps ||x||, so svd(R) has x's singular values)."""
    m, p = x.shape[-2:]
    rows = jnp.arange(m)

    def reflect(j, a):
        col = lax.dynamic_index_in_dim(a, j, axis=a.ndim - 1, keepdims=False)  # (..., m)
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


def spectral_map(x, f, route=None):
    """U diag(f(s)) V^T for the thin SVD x = U diag(s) V^T of a stack (..., m, p), with
    f(0) = 0 and f(s) <= s (so X V diag(f(s) / s) loses no precision for small s); also
    returns s. `route`: NUCLEAR_ROUTE unless given."""
    route = route or NUCLEAR_ROUTE
    m, p = x.shape[-2:]
    if m < p:  # the transpose's map, transposed (f acts on the same singular values)
        out, s = spectral_map(jnp.swapaxes(x, -1, -2), f, route)
        return jnp.swapaxes(out, -1, -2), s
    if route == "qr":
        q, r = jnp.linalg.qr(x)
        u, s, vh = jnp.linalg.svd(r, full_matrices=False)
        return ((q @ u) * f(s)[..., None, :]) @ vh, s
    _, s, vh = jnp.linalg.svd(householder_r(x), full_matrices=False)
    fs = f(s)
    ratio = jnp.where(s > 0, fs / jnp.where(s > 0, s, 1.0), 0.0)
    v = jnp.swapaxes(vh, -1, -2)
    return x @ ((v * ratio[..., None, :]) @ vh), s


def prox_nuclear(x, tau, radius):
    """`prox.prox_nuclear` with a spectral ball: U diag(min(max(s - tau, 0), radius)) V^T; a
    matrix with tau = 0 already inside the ball is returned unchanged (as there)."""
    tau = jnp.broadcast_to(tau, x.shape[:-2] + (1, 1))[..., 0]  # (..., 1) against s
    out, s = spectral_map(x, lambda s: jnp.minimum(jnp.maximum(s - tau, 0.0), radius))
    inside = (tau[..., 0] == 0) & (jnp.max(s, axis=-1) <= radius)
    return jnp.where(inside[..., None, None], x, out)


def polar(x):
    """`regularizers._polar`: U V^T over the singular values s > 1e-12 max(s). Always by
    the library's QR: here f(s) = 1 > s for small kept s, and X v / s would magnify the
    rounding of X v by max(s) / s."""
    keep = lambda s: jnp.where(s > 1e-12 * jnp.max(s, axis=-1, keepdims=True), 1.0, 0.0)  # noqa: E731
    return spectral_map(x, keep, route="qr")[0]


class Saddle:
    """psi of the E5 bilinear problems on a (C, G, *block) stack: lam ||.|| + the ball of
    radius D (l1 + box, or nuclear + spectral ball), one lam per member."""

    def __init__(self, matrix: bool, lam, radius):
        self.matrix, self.lam, self.radius = matrix, lam, radius

    def prox(self, x, t):
        """prox_{t psi}(x), t (G,): threshold t * lam, as `Regularizer.prox`."""
        tau = _m(t * self.lam, x.ndim)
        if self.matrix:
            return prox_nuclear(x, tau, self.radius)
        return jnp.clip(soft_threshold(x, tau), -self.radius, self.radius)

    def project(self, x):
        if self.matrix:
            return prox_nuclear(x, jnp.zeros(()), self.radius)
        return jnp.clip(x, -self.radius, self.radius)

    def subgradient(self, x):
        lam = _m(self.lam, x.ndim)
        return lam * (polar(x) if self.matrix else jnp.sign(x))


def _operator(a, b, x, y, matrix: bool):
    """(A^T y, b - A x) of stacked points (`BilinearSaddle._operator`)."""
    if matrix:
        return jnp.einsum("nm,cgnp->cgmp", a, y), b - jnp.einsum("nm,cgmp->cgnp", a, x)
    return y @ a, b - x @ a.T


def _noisy_operator(a, b, x, y, matrix, sigma, seed, rnd, step, stream, ids):
    """The operator plus sigma N(0, 1) per entry, one draw per client for its G members
    (`BilinearSaddle.grad`: one draw of nx + ny numbers split x first)."""
    gx, gy = _operator(a, b, x, y, matrix)
    if sigma is None:
        return gx, gy
    c = x.shape[0]
    nx, ny = x[0, 0].size, y[0, 0].size
    noise = sigma * keys.normal(seed, rnd, step, stream, ids, nx + ny)
    return (gx + noise[:, :nx].reshape((c, 1) + x.shape[2:]),
            gy + noise[:, nx:].reshape((c, 1) + y.shape[2:]))


def _clients(v, c: int):
    """A member stack (G, ...) copied onto c clients: (C, G, ...)."""
    return jnp.broadcast_to(v[None], (c,) + v.shape)


@partial(jax.jit, static_argnames=("steps", "ergodic", "matrix", "noisy"))
def feddualex(a, b, vx, vy, t, lr, lam, radius, sigma, seed, rnd, ids, weights, *,
              steps: int, ergodic: bool, matrix: bool, noisy: bool):
    """FeDualEx (saddle.FeDualEx.client_update) on a bilinear problem: returns the weighted
    client sums of u = s_K - s_r (x, y) and, with `ergodic`, of each step's half-step dual
    offset (G, K, *block)."""
    c = ids.shape[0]
    psi = Saddle(matrix, lam, radius)
    sig = sigma if noisy else None
    vx, vy = _clients(vx, c), _clients(vy, c)
    lr_x, lr_y = _m(lr, vx.ndim), _m(lr, vy.ndim)
    kk = steps if ergodic else 1

    def body(k, carry):
        ux, uy, hx, hy = carry
        tk = t + k
        zx, zy = psi.prox(vx - ux, lr * tk), psi.prox(vy - uy, lr * tk)
        gx, gy = _noisy_operator(a, b, zx, zy, matrix, sig, seed, rnd, k, NOISE, ids)
        halfx, halfy = lr_x * gx + ux, lr_y * gy + uy
        zhx, zhy = psi.prox(vx - halfx, lr * (tk + 1)), psi.prox(vy - halfy, lr * (tk + 1))
        gx, gy = _noisy_operator(a, b, zhx, zhy, matrix, sig, seed, rnd, k, NOISE2, ids)
        ux, uy = lr_x * gx + ux, lr_y * gy + uy
        if ergodic:
            hx = hx.at[k].set(_wsum(weights, halfx))
            hy = hy.at[k].set(_wsum(weights, halfy))
        return ux, uy, hx, hy

    zeros = (jnp.zeros_like(vx), jnp.zeros_like(vy),
             jnp.zeros((kk,) + vx.shape[1:]), jnp.zeros((kk,) + vy.shape[1:]))
    ux, uy, hx, hy = lax.fori_loop(0, steps, body, zeros)
    out = {"x": _wsum(weights, ux), "y": _wsum(weights, uy)}
    if ergodic:  # (K, G, ...) -> (G, K, ...), the layout of the CPU's aggregated message
        out["halfdual_x"], out["halfdual_y"] = jnp.swapaxes(hx, 0, 1), jnp.swapaxes(hy, 0, 1)
    return out


@partial(jax.jit, static_argnames=("steps", "ergodic", "matrix", "noisy", "extra", "prox"))
def primal_saddle(a, b, zx0, zy0, lr, lam, radius, sigma, seed, rnd, ids, weights, *,
                  steps: int, ergodic: bool, matrix: bool, noisy: bool, extra: bool, prox: bool):
    """FedMiP / Extra-step local SGD / PGDA (saddle.PrimalSaddle.client_update)."""
    c = ids.shape[0]
    psi = Saddle(matrix, lam, radius)
    sig = sigma if noisy else None
    zx0, zy0 = _clients(zx0, c), _clients(zy0, c)

    def step(z, g, at):
        lr_z = _m(lr, z.ndim)
        if prox:
            return psi.prox((-lr_z) * g + z, lr)
        return psi.project((-lr_z) * (1.0 * psi.subgradient(at) + g) + z)

    def body(k, carry):
        zx, zy, sx, sy = carry
        gx, gy = _noisy_operator(a, b, zx, zy, matrix, sig, seed, rnd, k, NOISE, ids)
        hx, hy = step(zx, gx, zx), step(zy, gy, zy)
        if extra:
            gx, gy = _noisy_operator(a, b, hx, hy, matrix, sig, seed, rnd, k, NOISE2, ids)
            zx, zy = step(zx, gx, hx), step(zy, gy, hy)
        else:
            zx, zy = hx, hy
        return zx, zy, sx + hx, sy + hy

    zx, zy, sx, sy = lax.fori_loop(0, steps, body, (zx0, zy0, jnp.zeros_like(zx0), jnp.zeros_like(zy0)))
    out = {"x": _wsum(weights, zx - zx0), "y": _wsum(weights, zy - zy0)}
    if ergodic:
        out["zhalf_x"], out["zhalf_y"] = _wsum(weights, sx), _wsum(weights, sy)
    return out


@partial(jax.jit, static_argnames=("steps", "matrix", "noisy", "dual", "client_prox"))
def composite_saddle(a, b, zx0, zy0, etat, lr, lam, radius, sigma, seed, rnd, ids, weights, *,
                     steps: int, matrix: bool, noisy: bool, dual: bool, client_prox: bool):
    """FedMiD (`dual` False: PrimalAveraging with prox steps) and FedDualAvg (`dual` True:
    DualAveraging) on the saddle operator, one operator call per step (stream BATCH)."""
    c = ids.shape[0]
    psi = Saddle(matrix, lam, radius)
    sig = sigma if noisy else None
    zx0, zy0 = _clients(zx0, c), _clients(zy0, c)

    def body(k, carry):
        zx, zy = carry
        if dual and client_prox:
            wx, wy = psi.prox(zx, etat + lr * k), psi.prox(zy, etat + lr * k)
        else:
            wx, wy = zx, zy
        gx, gy = _noisy_operator(a, b, wx, wy, matrix, sig, seed, rnd, k, BATCH, ids)
        zx, zy = (-_m(lr, zx.ndim)) * gx + zx, (-_m(lr, zy.ndim)) * gy + zy
        if not dual:  # FedMiD: w = prox_{lr psi}(w - lr g)
            zx, zy = psi.prox(zx, lr), psi.prox(zy, lr)
        return zx, zy

    zx, zy = lax.fori_loop(0, steps, body, (zx0, zy0))
    return {"x": _wsum(weights, zx - zx0), "y": _wsum(weights, zy - zy0)}


@partial(jax.jit, static_argnames=("steps", "batch", "matrix"))
def least_squares(xrows, yrows, w0, b0, lr, pre, post, sub_lam, seed, rnd, ids, sizes, offsets,
                  weights, *, steps: int, batch: int, matrix: tuple | None = None):
    """The composite family's K local steps on a linear least-squares problem:

        u = prox_{pre[k]}(w);  g = grad f_batch(u) (+ sub_lam * subgradient(w));
        w = prox_{post[k]}(w - lr g)

    with thresholds `pre` (K, G) and `post` (K, G) already times lam, the minibatch rows of
    client c at step k offsets[c] + integers(seed, rnd, k, BATCH, ids, sizes)[c] (shared by
    its G members), and f the mean of (<x, u> + b - y)^2 over them. psi is the l1 norm of w
    (E1: `kernels.least_squares_steps`), or with `matrix` = (p, q) the nuclear norm of w
    as a p x q matrix (E2: the step-by-step rules of composite.py). A zero threshold is the
    identity. Returns the weighted client sums of w_K - w_0 and b_K - b_0."""
    c = ids.shape[0]
    w, b = _clients(w0, c), _clients(b0, c)
    step = -lr[None, :, None]
    subl = sub_lam[None, :, None]

    def prox(v, t):  # t: (1, G, 1) thresholds
        if matrix is None:
            return v - jnp.clip(v, -t, t)
        mats = v.reshape(v.shape[:2] + matrix)
        out, _ = spectral_map(mats, lambda s: jnp.maximum(s - t, 0.0))
        return jnp.where(t == 0, v, out.reshape(v.shape))  # prox_0 is the identity, as there

    def subgradient(v):
        if matrix is None:
            return jnp.sign(v)
        return polar(v.reshape(v.shape[:2] + matrix)).reshape(v.shape)

    def body(k, carry):
        w, b = carry
        flat = keys.integers(seed, rnd, k, BATCH, ids, sizes, batch) + offsets[:, None]
        xb, yb = xrows[flat], yrows[flat]  # (C, B, P), (C, B): one minibatch per client
        at = prox(w, pre[k][None, :, None])
        resid = (jnp.einsum("cbp,cgp->cgb", xb, at) + b[:, :, None] - yb[:, None, :]) / batch
        g = jnp.einsum("cgb,cbp->cgp", resid, xb)  # half the gradient
        if matrix is None:  # sub_lam 0: the plain step, to the bit (0 sign(w) + 2 g = 2 g)
            v = step * (subl * jnp.sign(w) + 2.0 * g) + w
        elif sub_lam.size:  # E2 with subgradient steps (an SVD of w per step)
            v = step * (subl * subgradient(w) + 2.0 * g) + w
        else:
            v = step * (2.0 * g) + w
        w = prox(v, post[k][None, :, None])
        b = step[..., 0] * (2.0 * resid.sum(axis=-1)) + b
        return w, b

    w, b = lax.fori_loop(0, steps, body, (w, b))
    return {"w": _wsum(weights, w - _clients(w0, c)), "b": _wsum(weights, b - _clients(b0, c))}


# ---- E6: universal adversarial training (problems/adversarial.py) ------------------------
def _adv_prox(z: dict, t, lam, radius, project: bool = False) -> dict:
    """Blockwise prox_{t psi} (or the projection): psi = lam ||delta||_1 + the box of radius
    D on the attack `delta`; the model blocks (W, b) pass through, as `Blockwise.prox`."""
    out = dict(z)
    d = z["delta"]
    if not project:
        tau = _m(t * lam, d.ndim)
        d = soft_threshold(d, tau)
    out["delta"] = jnp.clip(d, -radius, radius)
    return out


def _adv_operator(xrows, yrows, z: dict, flat, batch: int, classes: int) -> dict:
    """(grad_W f, grad_b f, -grad_delta f) of the weighted cross-entropy on each client's
    minibatch rows `flat` (C, B), for its G members (`UniversalAdversarial.loss_and_grad`
    with weights 1/B, then `to_operator`)."""
    xb, yb = xrows[flat], yrows[flat]  # (C, B, d), (C, B)
    xa = xb[:, None] + z["delta"][:, :, None, :]  # (C, G, B, d)
    logits = jnp.einsum("cgbd,cgdk->cgbk", xa, z["W"])
    if "b" in z:
        logits = logits + z["b"][:, :, None, :]
    err = jax.nn.softmax(logits, axis=-1) - jax.nn.one_hot(yb, classes, dtype=logits.dtype)[:, None]
    werr = (1.0 / batch) * err
    werr_sum = werr.sum(axis=2)
    out = {"W": jnp.einsum("cgbd,cgbk->cgdk", xa, werr),
           "delta": -jnp.einsum("cgdk,cgk->cgd", z["W"], werr_sum)}
    if "b" in z:
        out["b"] = werr_sum
    return out


def _adv_rows(seed, rnd, k, stream, ids, sizes, offsets, batch):
    return keys.integers(seed, rnd, k, stream, ids, sizes, batch) + offsets[:, None]


@partial(jax.jit, static_argnames=("steps", "ergodic", "batch", "classes"))
def adversarial_feddualex(xrows, yrows, v: dict, t, lr, lam, radius, seed, rnd, ids, sizes, offsets,
                          weights, *, steps: int, ergodic: bool, batch: int, classes: int):
    """FeDualEx on E6 (see `feddualex`): the operator calls draw their minibatch rows with the
    stream tags NOISE and NOISE2."""
    c = ids.shape[0]
    v = {b: _clients(x, c) for b, x in v.items()}
    kk = steps if ergodic else 1

    def axpy(a, x, y):
        return {b: _m(a, x[b].ndim) * x[b] + y[b] for b in y}

    def body(k, carry):
        u, h = carry
        tk = t + k
        z = _adv_prox({b: v[b] - u[b] for b in v}, lr * tk, lam, radius)
        g = _adv_operator(xrows, yrows, z, _adv_rows(seed, rnd, k, NOISE, ids, sizes, offsets, batch),
                          batch, classes)
        half = axpy(lr, g, u)
        zh = _adv_prox({b: v[b] - half[b] for b in v}, lr * (tk + 1), lam, radius)
        g = _adv_operator(xrows, yrows, zh, _adv_rows(seed, rnd, k, NOISE2, ids, sizes, offsets, batch),
                          batch, classes)
        u = axpy(lr, g, u)
        if ergodic:
            h = {b: h[b].at[k].set(_wsum(weights, half[b])) for b in h}
        return u, h

    zeros = ({b: jnp.zeros_like(x) for b, x in v.items()},
             {b: jnp.zeros((kk,) + x.shape[1:]) for b, x in v.items()})
    u, h = lax.fori_loop(0, steps, body, zeros)
    out = {b: _wsum(weights, x) for b, x in u.items()}
    if ergodic:
        out.update({"halfdual_" + b: jnp.swapaxes(x, 0, 1) for b, x in h.items()})
    return out


@partial(jax.jit, static_argnames=("steps", "ergodic", "batch", "classes", "extra", "prox"))
def adversarial_primal(xrows, yrows, z0: dict, lr, lam, radius, seed, rnd, ids, sizes, offsets,
                       weights, *, steps: int, ergodic: bool, batch: int, classes: int,
                       extra: bool, prox: bool):
    """FedMiP / Extra-step local SGD / PGDA on E6 (see `primal_saddle`); the subgradient of
    psi is lam sign(delta) on the attack, zero on the model blocks."""
    c = ids.shape[0]
    z0 = {b: _clients(x, c) for b, x in z0.items()}

    def step(z, g, at):
        lr_ = {b: _m(lr, z[b].ndim) for b in z}
        if prox:
            return _adv_prox({b: (-lr_[b]) * g[b] + z[b] for b in z}, lr, lam, radius)
        sub = {b: (_m(lam, at[b].ndim) * jnp.sign(at[b]) if b == "delta" else jnp.zeros_like(at[b]))
               for b in at}
        return _adv_prox({b: (-lr_[b]) * (1.0 * sub[b] + g[b]) + z[b] for b in z}, None, lam,
                         radius, project=True)

    def body(k, carry):
        z, s = carry
        g = _adv_operator(xrows, yrows, z, _adv_rows(seed, rnd, k, NOISE, ids, sizes, offsets, batch),
                          batch, classes)
        h = step(z, g, z)
        if extra:
            g = _adv_operator(xrows, yrows, h, _adv_rows(seed, rnd, k, NOISE2, ids, sizes, offsets, batch),
                              batch, classes)
            z = step(z, g, h)
        else:
            z = h
        return z, {b: s[b] + h[b] for b in s}

    z, s = lax.fori_loop(0, steps, body, (z0, {b: jnp.zeros_like(x) for b, x in z0.items()}))
    out = {b: _wsum(weights, z[b] - z0[b]) for b in z}
    if ergodic:
        out.update({"zhalf_" + b: _wsum(weights, x) for b, x in s.items()})
    return out
