"""Compiled inner loops (numba) for the hot spots of a local step.

- `keyed_bits` / `keyed_integers`: the counter-based random numbers of `fco_ray.ops.random`
  (SplitMix64 of a key prefix, client id and element counter), one compiled loop instead of
  about 20 NumPy calls on small arrays. The numbers are bit-for-bit those of the formula
  (tests/unit/test_random.py checks them against a pure-Python SplitMix64).
- `least_squares_steps`: the composite family's K local steps on least squares under an l1
  penalty, all clients and members of a round in one call (the accelerator of
  `fco_ray.accelerators.least_squares`): each sampled row is read once from the client data
  (no gathered copy of the minibatch for a lone model), its residual and its contribution to
  the gradient computed while it is in cache; equal to its rule (tests/engine/test_accelerators.py).
- `least_squares_grads`: the minibatch gradients of one local step of least squares, all
  clients and members of a round in one call, drawn as `least_squares_steps` draws them (the
  accelerator of `fco_ray.accelerators.lowrank`, whose nuclear prox is a NumPy SVD outside).
- `soft_threshold`: the l1 prox in one pass (tests/unit/test_prox.py).

Kernels are compiled on first use and cached next to this file (`cache=True`), so a new
process (a Ray worker, a test) loads them in milliseconds after the first compilation.
Where numba finds no writable cache directory (a read-only install and an unwritable HOME),
the cache goes to a private temporary directory, or is off (see `_disk_cache`). A kernel is
compiled by one process at a time (`kernel`): processes that start together on an empty cache
(the test workers, a node's Ray actors) compile it once and load it from the cache after.
Benchmarks: benchmarks/README.md.
"""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import shutil
import stat
import tempfile

import numba
import numpy as np
from numba import njit


def _user_cache_dir() -> str:
    """`<tmp>/fco-ray-numba-<uid>`: one cache per user, reused by every process (a new
    directory per process filled /tmp). numba's cache index is a pickle, so the directory
    is used only if it is this user's own and private: a real directory (not a link), owned
    by this uid, mode 0700 (no one else can add files to it); /tmp's sticky bit keeps
    others from replacing it. OSError otherwise."""
    path = os.path.join(tempfile.gettempdir(), f"fco-ray-numba-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise OSError(f"{path} is not a private directory of this user")
    return path


def _private_temporary_dir() -> str:
    """A new private directory (mkdtemp: mode 0700, unpredictable name), removed when the
    process exits."""
    path = tempfile.mkdtemp(prefix="fco-ray-numba-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _disk_cache() -> bool:
    """Whether the kernels can be cached on disk. numba looks in NUMBA_CACHE_DIR, in
    __pycache__ next to this file and in the user's cache directory; when none is writable
    it raises at decoration time ("no locator available"), which would make importing
    fco_ray fail. Then the cache goes to this user's private directory in the temporary
    directory (`_user_cache_dir`, shared by the user's processes), else to a new private
    temporary directory removed at exit, or, if even that fails, kernels are compiled in
    each process without a cache."""

    def probe():
        return 0

    try:
        njit(cache=True)(probe)
        return True
    except RuntimeError:
        pass
    for where in (_user_cache_dir, _private_temporary_dir):
        try:
            numba.config.CACHE_DIR = where()
            njit(cache=True)(probe)
            return True
        except (OSError, RuntimeError):
            numba.config.CACHE_DIR = ""
    return False


CACHE = _disk_cache()


@contextlib.contextmanager
def _compile_lock(name: str):
    """An exclusive lock (flock) on the file `name` in this user's private directory
    (`_user_cache_dir`), or no lock where that directory cannot be used."""
    from ..runtime.errors import ConfigError
    from ..runtime.files import open_in_place

    try:
        folder = os.path.join(_user_cache_dir(), "locks")
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = open_in_place(os.path.join(folder, name), os.O_RDWR, 0o600)  # never through a link
    except (OSError, ConfigError):
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock (so does the process's end)


def kernel(**options):
    """`njit` with numba's disk cache (`CACHE`), compiled by one process at a time: numba
    compiles a kernel in a process that has not loaded it yet unless its disk cache holds it,
    so processes that start together on an empty cache would each compile it (seconds each);
    holding a lock per kernel while numba looks in the cache and compiles, the first compiles
    and the others then load its result. A kernel that calls another takes that one's lock
    inside its own, in the order of the calls (no cycle, so no deadlock)."""

    def wrap(fn):
        dispatcher = njit(cache=CACHE, **options)(fn)
        if CACHE:
            compile_here, name = dispatcher.compile, f"{fn.__module__}.{fn.__qualname__}"

            def compile(sig):
                with _compile_lock(name):
                    return compile_here(sig)

            dispatcher.compile = compile
        return dispatcher

    return wrap


GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_TWO_M53 = 1.0 / 2.0**53


@kernel(inline="always")
def _mix(z):
    """SplitMix64 finalizer (uint64, wrapping)."""
    z = (z ^ (z >> _S30)) * _C1
    z = (z ^ (z >> _S27)) * _C2
    return z ^ (z >> _S31)


@kernel()
def key_prefix(seed, rnd, step, stream):
    """The hash of a key's scalar parts: h = 0x5EED, then h = mix(h ^ (part + gamma)) for
    part in (seed, round, step, stream) (parts >= 0; uint64 wrapping arithmetic)."""
    h = np.uint64(0x5EED)
    h = _mix(h ^ (np.uint64(seed) + GOLDEN))
    h = _mix(h ^ (np.uint64(rnd) + GOLDEN))
    h = _mix(h ^ (np.uint64(step) + GOLDEN))
    return _mix(h ^ (np.uint64(stream) + GOLDEN))


@kernel()
def keyed_bits(seed, rnd, step, stream, ids, count):
    """(clients, count) uint64: bits[c, j] = mix(mix(prefix ^ id_c * gamma) + (j + 1) * gamma)
    with prefix = key_prefix(seed, rnd, step, stream)."""
    prefix = key_prefix(seed, rnd, step, stream)
    out = np.empty((ids.size, count), np.uint64)
    for c in range(ids.size):
        h = _mix(prefix ^ (np.uint64(ids[c]) * GOLDEN))
        ctr = GOLDEN
        for j in range(count):
            out[c, j] = _mix(h + ctr)
            ctr += GOLDEN
    return out


@kernel()
def keyed_integers(seed, rnd, step, stream, ids, highs, count):
    """(clients, count) int64, row c uniform in [0, highs[c]): min(floor(u h_c), h_c - 1) with
    u = ((bits >> 11) + 1/2) / 2^53 the uniform of `keyed_bits` (the same numbers as
    `Key.uniform`, then the same float products)."""
    prefix = key_prefix(seed, rnd, step, stream)
    out = np.empty((ids.size, count), np.int64)
    for c in range(ids.size):
        h = _mix(prefix ^ (np.uint64(ids[c]) * GOLDEN))
        high = highs[c]
        ctr = GOLDEN
        for j in range(count):
            u = (np.float64(_mix(h + ctr) >> _S11) + 0.5) * _TWO_M53
            out[c, j] = min(np.int64(u * np.float64(high)), high - 1)
            ctr += GOLDEN
    return out


# The step kernels below (`_lone_steps`, `_group_steps`, ...) are compiled with fastmath
# `reassoc` and `contract`: their dot products may be summed in SIMD lanes and fused
# multiply-adds (a different summation order than a plain loop or the rule's XLA program,
# equal up to rounding); no flag that assumes finite values, so NaN and inf propagate and
# divergence is still detected.


@kernel()
def soft_threshold(x, tau):
    """x - clip(x, -tau, tau) elementwise on a 1-D array (one pass, one new array): the same
    floats as the NumPy form in `prox.soft_threshold`."""
    out = np.empty_like(x)
    for i in range(x.size):
        v = x[i]
        out[i] = v - min(max(v, -tau), tau)
    return out


@kernel()
def soft_threshold_rows(x, tau):
    """`soft_threshold` with one threshold per row of a 2-D array (a fused group's stacked
    rows): out[r, i] = x[r, i] - clip(x[r, i], -tau[r], tau[r]), one pass."""
    out = np.empty_like(x)
    for r in range(x.shape[0]):
        t = tau[r]
        for i in range(x.shape[1]):
            v = x[r, i]
            out[r, i] = v - min(max(v, -t), t)
    return out


@kernel(inline="always")
def _shrink_into(out, x, t):
    """out = x - clip(x, -t, t) on a 1-D row: prox_{t |.|_1}(x), the identity for t = 0."""
    for p in range(x.size):
        v = x[p]
        out[p] = v - min(max(v, -t), t)


@kernel(inline="always")
def _prox_step(w, g, step, t, sub_lam):
    """One composite step on a 1-D row, in place: w = prox_{t |.|_1}(w + step (2 g)), with
    `sub_lam sign(w)` added to the gradient 2 g for subgradient steps (sub_lam != 0); g is
    half the gradient (`least_squares_steps`)."""
    if sub_lam != 0.0:
        for p in range(w.size):
            v = w[p]
            v = step * (sub_lam * np.sign(v) + 2.0 * g[p]) + v
            w[p] = v - min(max(v, -t), t)
    elif t != 0.0:
        for p in range(w.size):
            v = step * (2.0 * g[p]) + w[p]
            w[p] = v - min(max(v, -t), t)
    else:  # no prox after the step (dual averaging keeps the unthresholded z)
        for p in range(w.size):
            w[p] = step * (2.0 * g[p]) + w[p]


@kernel(inline="always")
def _row_gradient(x, y, flat, offset, at, bias, batch, resid, g):
    """Half the minibatch gradient of one least-squares model at `at` (bias `bias`) on one
    client's minibatch (rows flat[j] + offset of x, y), read where the rows are: residuals
    r_j = (<x_j, at> + bias - y_j) / B by dot products into `resid`, g = sum_j r_j x_j by B
    axpys into `g`; returns sum_j r_j. Inlined into its callers, whose fastmath flags apply."""
    dim = at.shape[0]
    total = 0.0
    for j in range(batch):
        i = flat[j] + offset
        xi = x[i]
        dot = 0.0
        for p in range(dim):
            dot += xi[p] * at[p]
        r = (dot + bias - y[i]) / batch
        resid[j] = r
        total += r
    g[:] = 0.0
    for j in range(batch):
        xi, r = x[flat[j] + offset], resid[j]
        for p in range(dim):
            g[p] += r * xi[p]
    return total


@kernel(fastmath={"reassoc", "contract"})
def _lone_steps(x, y, seed, rnd, stream, ids, sizes, offsets, batch, w, b, lr, pre, post, sub_lam):
    """`least_squares_steps` for one model per client: the minibatch rows are read where they
    are (no gathered copy, no BLAS call for a 1 x B product), residuals by dot products and
    the gradient by B axpys. Same floating-point model as the fused gradient (reassociated,
    contracted sums: vectorized; never `nnan`/`ninf`, so a diverging run still shows NaN and
    inf): equal to the group kernel (`_group_steps`) up to rounding (~1e-15 relative per step)."""
    rows, dim = w.shape
    steps = pre.shape[0]
    u = np.empty(dim)
    g = np.empty(dim)
    resid = np.empty(batch)
    for c in range(rows):
        wc = w[c]
        for k in range(steps):
            flat = keyed_integers(seed, rnd, k, stream, ids[c:c + 1], sizes[c:c + 1], batch)
            t = pre[k, c]
            at = wc
            if t != 0.0:  # the gradient at a prox of w
                _shrink_into(u, wc, t)
                at = u
            gb = _row_gradient(x, y, flat[0], offsets[c], at, b[c], batch, resid, g)
            step = -lr[c]
            _prox_step(wc, g, step, post[k, c], sub_lam[c])
            b[c] = step * (2.0 * gb) + b[c]
    return w, b


@kernel(inline="always")
def _dots(w0, w1, t0, t1, xb, out0, out1, two):
    """out0[j] = <u0, xb[j]> for every row j of xb and, if `two`, out1[j] = <u1, xb[j]>, at
    u = prox_{t |.|_1}(w) (t = 0: w itself), the prox taken on the fly: four rows and two
    models a pass, so each load of a row serves both models and each load of a model four rows.
    At a fused group's shapes (G x 1024 by 1024 x 10) this beats BLAS's general product, whose
    blocking is made for large matrices."""
    batch, dim = xb.shape
    j = 0
    while j + 4 <= batch:
        x0, x1, x2, x3 = xb[j], xb[j + 1], xb[j + 2], xb[j + 3]
        a0 = a1 = a2 = a3 = 0.0
        if two:
            c0 = c1 = c2 = c3 = 0.0
            for p in range(dim):
                v, s = w0[p], w1[p]
                v -= min(max(v, -t0), t0)
                s -= min(max(s, -t1), t1)
                e0, e1, e2, e3 = x0[p], x1[p], x2[p], x3[p]
                a0 += v * e0
                a1 += v * e1
                a2 += v * e2
                a3 += v * e3
                c0 += s * e0
                c1 += s * e1
                c2 += s * e2
                c3 += s * e3
            out1[j], out1[j + 1], out1[j + 2], out1[j + 3] = c0, c1, c2, c3
        else:
            for p in range(dim):
                v = w0[p]
                v -= min(max(v, -t0), t0)
                a0 += v * x0[p]
                a1 += v * x1[p]
                a2 += v * x2[p]
                a3 += v * x3[p]
        out0[j], out0[j + 1], out0[j + 2], out0[j + 3] = a0, a1, a2, a3
        j += 4
    while j < batch:  # the rows left, one at a time
        xj = xb[j]
        a0 = c0 = 0.0
        if two:
            for p in range(dim):
                v, s = w0[p], w1[p]
                a0 += (v - min(max(v, -t0), t0)) * xj[p]
                c0 += (s - min(max(s, -t1), t1)) * xj[p]
            out1[j] = c0
        else:
            for p in range(dim):
                v = w0[p]
                a0 += (v - min(max(v, -t0), t0)) * xj[p]
        out0[j] = a0
        j += 1


@kernel(inline="always")
def _axpys(z0, z1, coef0, coef1, xb, two):
    """z0 += sum_j coef0[j] xb[j] and, if `two`, z1 += sum_j coef1[j] xb[j]: four rows of xb
    and two models a pass (z0, z1 distinct rows when `two`; otherwise z1 is not touched and
    may be z0)."""
    batch, dim = xb.shape
    j = 0
    while j + 4 <= batch:
        x0, x1, x2, x3 = xb[j], xb[j + 1], xb[j + 2], xb[j + 3]
        a0, a1, a2, a3 = coef0[j], coef0[j + 1], coef0[j + 2], coef0[j + 3]
        if two:
            c0, c1, c2, c3 = coef1[j], coef1[j + 1], coef1[j + 2], coef1[j + 3]
            for p in range(dim):
                e0, e1, e2, e3 = x0[p], x1[p], x2[p], x3[p]
                z0[p] += a0 * e0 + a1 * e1 + a2 * e2 + a3 * e3
                z1[p] += c0 * e0 + c1 * e1 + c2 * e2 + c3 * e3
        else:
            for p in range(dim):
                z0[p] += a0 * x0[p] + a1 * x1[p] + a2 * x2[p] + a3 * x3[p]
        j += 4
    while j < batch:
        xj, a0, c0 = xb[j], coef0[j], coef1[j]
        if two:
            for p in range(dim):
                z0[p] += a0 * xj[p]
                z1[p] += c0 * xj[p]
        else:
            for p in range(dim):
                z0[p] += a0 * xj[p]
        j += 1


@kernel(inline="always")
def _gather(x, y, flat, offset, xb, yb):
    """The minibatch rows flat[j] + offset of x and y, copied into xb (B, P) and yb (B,)."""
    for j in range(flat.size):
        i = flat[j] + offset
        xb[j] = x[i]
        yb[j] = y[i]


@kernel(inline="always")
def _pair(c, group, g0):
    """Client c's rows g0 and g0 + 1 of its `group` (C G rows, client-major): (two, r0, r1),
    r1 = r0 when g0 is the last member of an odd group (then `two` is False)."""
    two = g0 + 1 < group
    r0 = c * group + g0
    return two, r0, r0 + 1 if two else r0


@kernel(fastmath={"reassoc", "contract"})
def _group_steps(x, y, seed, rnd, stream, ids, sizes, offsets, batch, w, b, lr, pre, post, sub_lam):
    """`least_squares_steps` for G > 1 models per client: the client's minibatch is gathered
    once a step and its G models go through it two at a time (`_dots`, `_axpys`)."""
    rows, dim = w.shape
    clients = ids.size
    group = rows // clients
    steps = pre.shape[0]
    xb = np.empty((batch, dim))
    yb = np.empty(batch)
    prod = np.empty((2, batch))
    coef = np.empty((2, batch))
    for c in range(clients):
        for k in range(steps):
            flat = keyed_integers(seed, rnd, k, stream, ids[c:c + 1], sizes[c:c + 1], batch)
            _gather(x, y, flat[0], offsets[c], xb, yb)
            for g0 in range(0, group, 2):
                two, r0, r1 = _pair(c, group, g0)
                w0, w1 = w[r0], w[r1]  # the gradient at prox_{pre psi}(w)
                _dots(w0, w1, pre[k, r0], pre[k, r1], xb, prod[0], prod[1], two)
                for m in range(2 if two else 1):
                    r = r0 + m
                    step = -lr[r]
                    total = 0.0
                    for j in range(batch):
                        res = (prod[m, j] + b[r] - yb[j]) / batch
                        total += res
                        coef[m, j] = step * (2.0 * res)
                    b[r] = step * (2.0 * total) + b[r]
                    if sub_lam[r] != 0.0:  # the subgradient term, at w before the step
                        wr, s = w[r], step * sub_lam[r]
                        for p in range(dim):
                            wr[p] += s * np.sign(wr[p])
                _axpys(w0, w1, coef[0], coef[1], xb, two)
                for m in range(2 if two else 1):
                    t = post[k, r0 + m]
                    if t != 0.0:
                        _shrink_into(w[r0 + m], w[r0 + m], t)
    return w, b


@kernel()
def least_squares_steps(x, y, seed, rnd, stream, ids, sizes, offsets, batch, w, b, lr, pre, post,
                        sub_lam):
    """K composite local steps of linear least-squares models, all in one call:

        u = prox_{pre[k] psi}(w);  g = grad f_batch(u) (+ sub_lam[row] sign(w));
        w = prox_{post[k] psi}(w - lr g)

    with f = mean over the minibatch of (<x_i, u> + b - y_i)^2 and psi = the l1 norm (the
    thresholds `pre` / `post` are already multiplied by its weight; 0 is the identity).

    Rows: w (R, P) and b (R,) are updated in place; R = C G, client c owns the G consecutive
    rows c G .. c G + G - 1 (a fused group's members, or G = 1). Client c (key id ids[c],
    sizes[c] samples from row offsets[c] of x) draws its minibatch at step k as the rule
    draws them (`fco_ray.rules.keys`), once for its G rows. A group (G > 1) gathers the
    minibatch and takes its models two at a time through it (`_group_steps`), so a group of G
    costs far less than G runs; a lone model (G = 1) reads its minibatch rows in place
    (`_lone_steps`). lr, sub_lam: (R,) (sub_lam 0: no subgradient term); pre, post: (K, R)."""
    if w.shape[0] == ids.size:
        return _lone_steps(x, y, seed, rnd, stream, ids, sizes, offsets, batch, w, b, lr, pre,
                           post, sub_lam)
    return _group_steps(x, y, seed, rnd, stream, ids, sizes, offsets, batch, w, b, lr, pre, post,
                        sub_lam)


@kernel(fastmath={"reassoc", "contract"})
def _lone_grads(x, y, seed, rnd, step, stream, ids, sizes, offsets, batch, at, b, gw, gb):
    """`least_squares_grads` for one model per client: the minibatch rows read where they
    are, residuals by dot products, the gradient by B axpys (as `_lone_steps`)."""
    resid = np.empty(batch)
    for c in range(ids.size):
        flat = keyed_integers(seed, rnd, step, stream, ids[c:c + 1], sizes[c:c + 1], batch)
        gb[c] = _row_gradient(x, y, flat[0], offsets[c], at[c], b[c], batch, resid, gw[c])


@kernel(fastmath={"reassoc", "contract"})
def _group_grads(x, y, seed, rnd, step, stream, ids, sizes, offsets, batch, at, b, gw, gb):
    """`least_squares_grads` for G > 1 models per client: the minibatch gathered once, the
    models two at a time (`_dots`, `_axpys`), as `_group_steps`."""
    rows, dim = at.shape
    clients = ids.size
    group = rows // clients
    xb = np.empty((batch, dim))
    yb = np.empty(batch)
    prod = np.empty((2, batch))
    for c in range(clients):
        flat = keyed_integers(seed, rnd, step, stream, ids[c:c + 1], sizes[c:c + 1], batch)
        _gather(x, y, flat[0], offsets[c], xb, yb)
        for g0 in range(0, group, 2):
            two, r0, r1 = _pair(c, group, g0)
            _dots(at[r0], at[r1], 0.0, 0.0, xb, prod[0], prod[1], two)
            for m in range(2 if two else 1):
                r = r0 + m
                total = 0.0
                for j in range(batch):
                    res = (prod[m, j] + b[r] - yb[j]) / batch
                    prod[m, j] = res
                    total += res
                gb[r] = total
                gw[r] = 0.0
            _axpys(gw[r0], gw[r1], prod[0], prod[1], xb, two)


@kernel()
def least_squares_grads(x, y, seed, rnd, step, stream, ids, sizes, offsets, batch, at, b, gw, gb):
    """Half the minibatch gradients of linear least-squares models at local step `step`, all
    clients and members of a round in one call (the gradient part of `least_squares_steps`,
    for a psi whose prox is computed outside: the nuclear norm, `fco_ray.accelerators.lowrank`):

        gw[r] = sum_j r_j x_j,  gb[r] = sum_j r_j,  r_j = (<x_j, at[r]> + b[r] - y_j) / batch

    over the minibatch rows x_j of row r's client (the gradient of the mean of
    (<x, at> + b - y)^2 is 2 gw, 2 gb). Rows as in `least_squares_steps`: at (R, P), b (R,),
    R = C G, client c owns rows c G .. c G + G - 1 and draws its minibatch as the rule draws it
    (key id ids[c], sizes[c] samples from row offsets[c] of x), once for its G rows: gathered
    and taken two models at a time for G > 1 (`_group_grads`), read in place for G = 1
    (`_lone_grads`). gw (R, P) and gb (R,) are written."""
    if at.shape[0] == ids.size:
        _lone_grads(x, y, seed, rnd, step, stream, ids, sizes, offsets, batch, at, b, gw, gb)
    else:
        _group_grads(x, y, seed, rnd, step, stream, ids, sizes, offsets, batch, at, b, gw, gb)
