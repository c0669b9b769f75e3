"""Compiled per-node passes over sparse (CSR) node data: the E7 family's hot loops (numba), the
logistic gradient, SVRG and SDCA passes of fco_ray/problems/text.py, one member a call or a fused
group a call. (The nonzero pattern's statistics: `sparse_stats`; the text generator's kernel:
fco_ray/data/bag_of_words.py.)

Every kernel takes the CSR arrays of a shard (`data`, `indices`, `indptr`, labels `y`, node
row offsets `offsets`), the local indices `nodes` of the nodes to process and a coefficient
per node, and ADDS each node's coefficient-weighted result into one length-d vector `out`:
a shard's pre-summed message, with no (nodes, d) stack. Nodes are processed one after the
other; a node's randomness is keyed by (seed, round, pass, stream, global node id, position)
exactly as `fco_ray.ops.random.Key` draws it, so results do not depend on sharding.

Local models live on the node's support (the features present in its rows): dense (d,)
scratch arrays indexed by feature, reset through the list of the node's features, so the
work per node is O(its nonzeros x passes), never O(d). A coordinate outside the support
follows a closed form that is the same multiple of the shared vector g for every such
coordinate; the kernels return the sum of those multiples, and the caller adds it times g.

Lazy updates (see `svrg_passes`): between two visits of coordinate j the local update is
affine with constant coefficients, u <- (1 - c) u - b, so m skipped steps are applied at once,
u_m = (1 - c)^m u - b (1 - (1 - c)^m) / c, with (1 - c)^m = 1 + expm1(m log1p(-c)) (accurate
for the tiny c = h lam of E7).

Fused groups (`*_group`): G members (step sizes) of one method in one pass over the data,
member arrays feature-major (d, G); see the section's comment below.

Compiled on first use and cached on disk where that is possible (`kernels.CACHE`), like `fco_ray.ops.kernels`.
Tests: tests/engine/test_svrg.py (against per-sample dense reference loops and the formulas).
"""
from __future__ import annotations

import math

import numpy as np

from .kernels import GOLDEN, _mix, kernel, key_prefix

POSITION_BITS = 24  # samples per node < 2^24: node id and position share one 64-bit key id
_S11, _POS = np.uint64(11), np.uint64(POSITION_BITS)
_TWO_M53 = 1.0 / 2.0**53
_U_MAX = 1.0 - 2.0**-53


@kernel(inline="always")
def _uniform(prefix, node_id, position):
    """`Key(seed, round, [node_id << 24 | position], step, stream).uniform((1,))`."""
    key_id = (np.uint64(node_id) << _POS) | np.uint64(position)
    bits = _mix(_mix(prefix ^ (key_id * GOLDEN)) + GOLDEN)
    return min((np.float64(bits >> _S11) + 0.5) * _TWO_M53, _U_MAX)


@kernel()
def _order(prefix, node_id, size, steps, replace, out):
    """Node `node_id`'s visiting order into out[:steps]: a uniform random permutation of
    range(size) (stable argsort of keyed uniforms; steps = size), or `steps` draws uniform
    in range(size) with replacement (min(floor(u size), size - 1))."""
    if replace:
        for s in range(steps):
            out[s] = min(np.int64(_uniform(prefix, node_id, s) * np.float64(size)), size - 1)
    else:
        u = np.empty(size)
        for s in range(size):
            u[s] = _uniform(prefix, node_id, s)
        out[:size] = np.argsort(u, kind="mergesort")


@kernel(inline="always")
def _dloss(z, y):
    """l'(z) of the logistic loss log(1 + exp(-y z)): -y sigmoid(-y z)."""
    return -y / (1.0 + math.exp(y * z))


@kernel()  # no FMA contraction: see EXACT below
def gradient_sum(data, indices, indptr, y, offsets, nodes, coef, w, out):
    """out += sum over nodes k of coef[k] sum_{i in k} l'_i(<x_i, w>) x_i."""
    for t in range(nodes.size):
        k = nodes[t]
        for i in range(offsets[k], offsets[k + 1]):
            z = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                z += data[p] * w[indices[p]]
            a = coef[t] * _dloss(z, y[i])
            for p in range(indptr[i], indptr[i + 1]):
                out[indices[p]] += a * data[p]


# columns of the per-feature state of `svrg_passes`: one 64-byte row per feature, so a visit
# reads and writes one cache line instead of one line in each of eight length-d arrays
_U, _ANCHOR, _HD, _HDC, _C, _LOG, _HS, _LAST = range(8)


#: below this |x| `_expm1` sums its Taylor series to x^8 (truncation < x^8 / 9! |x| < 2^-58 |x|)
EXPM1_SERIES = 2.0**-5
#: below this c `_log1p_neg` sums its series to c^8 (truncation < c^8 / 9 < 2^-59 c)
LOG1P_SERIES = 2.0**-7


@kernel(inline="always")
def _expm1_series(x):
    return x * (1.0 + x * (1.0 / 2 + x * (1.0 / 6 + x * (1.0 / 24 + x * (1.0 / 120 + x * (
        1.0 / 720 + x * (1.0 / 5040 + x * (1.0 / 40320))))))))


@kernel(inline="always")
def _log1p_neg_series(c):
    return -c * (1.0 + c * (1.0 / 2 + c * (1.0 / 3 + c * (1.0 / 4 + c * (1.0 / 5 + c * (
        1.0 / 6 + c * (1.0 / 7 + c * (1.0 / 8))))))))


#: below this |x| `_expm1` halves x five times into the series range and doubles back
EXPM1_HALVED = 32 * EXPM1_SERIES


@kernel(inline="always")
def _expm1_halved(x):
    """expm1(x) for |x| < EXPM1_HALVED: the series at x / 32, then five times
    expm1(2y) = expm1(y) (2 + expm1(y)) (each doubling adds about one rounding)."""
    e = _expm1_series(x * (1.0 / 32))
    for _ in range(5):
        e = e * (2.0 + e)
    return e


@kernel(inline="always")
def _expm1(x):
    """expm1(x): its Taylor series for |x| < EXPM1_SERIES (within rounding), `_expm1_halved`
    below EXPM1_HALVED (within a few roundings), else `math.expm1`. The lazy updates need
    it at every feature visit with x = (skipped steps) * log1p(-c) and at every support
    feature at a pass's end, nearly always small in E7 (c ~ h lam): a polynomial costs a
    few multiply-adds where the library call costs tens of nanoseconds, and it vectorizes
    over a fused group. Every kernel uses this same function, so a fused member repeats
    its own run's numbers."""
    if abs(x) < EXPM1_SERIES:
        return _expm1_series(x)
    if abs(x) < EXPM1_HALVED:
        return _expm1_halved(x)
    return math.expm1(x)


@kernel(inline="always")
def _log1p_neg(c):
    """log1p(-c): its series -sum c^k / k for |c| < LOG1P_SERIES (within rounding), else
    `math.log1p` (see `_expm1`: once per feature of a node's support)."""
    if abs(c) < LOG1P_SERIES:
        return _log1p_neg_series(c)
    return math.log1p(-c)


@kernel(inline="always")
def _catch_up(state, j, steps):
    """Apply `steps` skipped steps u <- (1 - c) u - h drift to feature j at once:
    u <- (1 - c)^m u - (h drift / c)(1 - (1 - c)^m), (1 - c)^m = 1 + expm1(m log1p(-c))."""
    if steps == 1:
        state[j, _U] = (1.0 - state[j, _C]) * state[j, _U] - state[j, _HD]
    elif steps > 1:
        e = _expm1(steps * state[j, _LOG])
        state[j, _U] = (1.0 + e) * state[j, _U] + state[j, _HDC] * e


@kernel()  # no FMA contraction: see EXACT below
def svrg_passes(data, indices, indptr, y, scale, offsets, nodes, ids, seed, rnd, stream, replace,
                steps, h, coef, lam, mu, eta, passes, w, g, out):
    """Local SVRG-type passes of every node; out += sum_k coef[k] (w_k - w) on the supports,
    returns sum_k coef[k] alpha_k, the multiple of g that w_k - w equals off the support.

    Node k (local index nodes[t], key id ids[t]) starts from w and runs `passes` passes;
    pass p visits steps[t] samples in the order `_order` draws with key step p:

        v <- v - h_k ( s [grad f_i(v) - grad f_i(a)] + mu (v - a) + drift_k )

    with s = s_k^j from `scale` (FSVRG; an empty `scale` means s = 1), anchor a, and
    grad f_i(v) - grad f_i(a) = (l_i'(<x_i, v>) - l_i'(<x_i, a>)) x_i + lam (v - a).
    Pass 1: a = w, drift = eta g. After a pass (DANE's inexact solver), a <- the pass's
    result and drift <- grad F_k(a) - grad F_k(w) + eta g + mu (a - w).
    Between visits feature j follows u <- (1 - c) u - h drift_j (u = v - a, c = h (s lam + mu)):
    `_catch_up`. State per support feature j: u (caught up to step `last`), a - w, h drift,
    h drift / c, c, log1p(-c), h s, last (`_U` .. `_LAST`).
    """
    d = w.size
    scaled = scale.size > 0
    state = np.zeros((d, 8))
    drift = np.zeros(d)  # DANE's next drift, on the support
    mark = np.full(d, -1, np.int64)
    support = np.empty(d, np.int64)
    longest = 0
    for t in range(nodes.size):
        longest = max(longest, max(steps[t], offsets[nodes[t] + 1] - offsets[nodes[t]]))
    order = np.empty(longest, np.int64)
    total_alpha = 0.0
    for t in range(nodes.size):
        k, hk = nodes[t], h[t]
        r0, r1 = offsets[k], offsets[k + 1]
        size, m = r1 - r0, steps[t]
        count = 0
        for i in range(r0, r1):
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                if mark[j] != t:
                    mark[j] = t
                    support[count] = j
                    count += 1
                    s = scale[p] if scaled else 1.0
                    state[j, _ANCHOR] = 0.0
                    state[j, _HD] = hk * (eta * g[j])
                    state[j, _HS] = hk * s
                    state[j, _C] = hk * (s * lam + mu)
                    state[j, _LOG] = _log1p_neg(state[j, _C])
        alpha, beta = 0.0, eta  # off the support: a - w = alpha g, drift = beta g
        c0 = hk * (lam + mu)
        for ps in range(passes):
            _order(key_prefix(seed, rnd, ps, stream), ids[t], size, m, replace, order)
            for q in range(count):
                j = support[q]
                state[j, _U] = 0.0
                state[j, _LAST] = 0.0
                state[j, _HDC] = state[j, _HD] / state[j, _C]
            for st in range(m):
                i = r0 + order[st]
                z = 0.0
                za = 0.0
                for p in range(indptr[i], indptr[i + 1]):
                    j = indices[p]
                    _catch_up(state, j, st - state[j, _LAST])
                    a = w[j] + state[j, _ANCHOR]
                    za += data[p] * a
                    z += data[p] * (a + state[j, _U])
                dl = _dloss(z, y[i]) - _dloss(za, y[i])
                for p in range(indptr[i], indptr[i + 1]):
                    j = indices[p]
                    state[j, _U] = ((1.0 - state[j, _C]) * state[j, _U] - state[j, _HD]
                                    - state[j, _HS] * data[p] * dl)
                    state[j, _LAST] = st + 1
            for q in range(count):
                j = support[q]
                _catch_up(state, j, m - state[j, _LAST])
                state[j, _ANCHOR] += state[j, _U]
            alpha += hk * beta * math.expm1(m * math.log1p(-c0)) / c0  # off-support u / g
            if ps + 1 < passes:
                # the next drift: grad F_k(a) - grad F_k(w) + eta g + mu (a - w), where the
                # loss part of grad F_k(a) - grad F_k(w) is (1/n_k) sum_i (l_i'(a) - l_i'(w)) x_i
                for q in range(count):
                    drift[support[q]] = 0.0
                for i in range(r0, r1):
                    z = 0.0
                    z0 = 0.0
                    for p in range(indptr[i], indptr[i + 1]):
                        j = indices[p]
                        z0 += data[p] * w[j]
                        z += data[p] * (w[j] + state[j, _ANCHOR])
                    a = (_dloss(z, y[i]) - _dloss(z0, y[i])) / size
                    for p in range(indptr[i], indptr[i + 1]):
                        drift[indices[p]] += a * data[p]
                for q in range(count):
                    j = support[q]
                    state[j, _HD] = hk * (drift[j] + (lam + mu) * state[j, _ANCHOR] + eta * g[j])
                beta = eta + (lam + mu) * alpha
        for q in range(count):
            j = support[q]
            out[j] += coef[t] * (state[j, _ANCHOR] - alpha * g[j])
        total_alpha += coef[t] * alpha
    return total_alpha


@kernel()
def sdca_step(b, yz, q, tol=1e-12, max_iter=200):
    """Exact SDCA coordinate step for the logistic loss.

    With b = y alpha in [0, 1] the dual term is -(b log b + (1-b) log(1-b)); maximizing
    -ent(b') - (b' - b) y z - (q/2)(b' - b)^2 over b' gives, with t = logit(b'),
        F(t) = t + q (sigmoid(t) - b) + y z = 0,
    increasing in t with its root in [-yz - q(1-b), -yz + q b]. Solved by safeguarded Newton
    (Numerical Recipes' rtsafe): bisection whenever Newton would leave the bracket or does
    not halve the step, warm-started at logit(b) (or at -yz, the q = 0 root, when b is 0
    or 1); stops when a step moves t by at most tol (1 + |t|). Returns b' = sigmoid(t)."""
    lo, hi = -yz - q * (1.0 - b), -yz + q * b
    t = math.log(b) - math.log1p(-b) if 0.0 < b < 1.0 else -yz
    t = min(max(t, lo), hi)
    step_before = hi - lo
    for _ in range(max_iter):
        sig = 1.0 / (1.0 + math.exp(-t))
        f = t + q * (sig - b) + yz
        slope = 1.0 + q * sig * (1.0 - sig)
        if f < 0:
            lo = t
        if f > 0:
            hi = t
        new = t - f / slope
        if new < lo or new > hi or abs(2.0 * f) > abs(step_before * slope):
            new = 0.5 * (lo + hi)
        moved = abs(new - t)
        step_before = moved
        t = new
        if not moved > tol * (1.0 + abs(t)):
            break
    return 1.0 / (1.0 + math.exp(-t))


@kernel(fastmath={"contract"})
def sdca_passes(data, indices, indptr, y, offsets, nodes, ids, seed, rnd, stream, passes, scale,
                b, b_start, coef, w, out):
    """CoCoA+'s local SDCA (logistic loss): node k runs `passes` passes over keyed random
    permutations of its samples, each an exact coordinate step (`sdca_step`) on
    b_i = y_i alpha_i in [0, 1] (node k's duals are b[b_start[t]:], updated in place) against
    v_k = w + sigma' dw_k, with q_i = scale ||x_i||^2 and v_k += scale (d alpha_i) x_i, where
    scale = sigma' / (lam n). out += coef[k] (v_k - w) on the node's support."""
    d = w.size
    v = np.zeros(d)
    mark = np.full(d, -1, np.int64)
    support = np.empty(d, np.int64)
    longest = 0
    for t in range(nodes.size):
        longest = max(longest, offsets[nodes[t] + 1] - offsets[nodes[t]])
    order = np.empty(longest, np.int64)
    for t in range(nodes.size):
        k = nodes[t]
        r0, r1 = offsets[k], offsets[k + 1]
        count = 0
        for i in range(r0, r1):
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                if mark[j] != t:
                    mark[j] = t
                    support[count] = j
                    count += 1
                    v[j] = w[j]
        for ps in range(passes):
            _order(key_prefix(seed, rnd, ps, stream), ids[t], r1 - r0, r1 - r0, False, order)
            for st in range(r1 - r0):
                i = r0 + order[st]
                bi = b_start[t] + order[st]
                z = 0.0
                sq = 0.0
                for p in range(indptr[i], indptr[i + 1]):
                    z += data[p] * v[indices[p]]
                    sq += data[p] * data[p]
                new = sdca_step(b[bi], y[i] * z, scale * sq)
                step = scale * y[i] * (new - b[bi])
                b[bi] = new
                for p in range(indptr[i], indptr[i + 1]):
                    v[indices[p]] += step * data[p]
        for q in range(count):
            j = support[q]
            out[j] += coef[t] * (v[j] - w[j])


# ---- fused groups: G members (step sizes) in one pass over the data --------------------------
# EXACT: the single and group kernels are compiled without fast-math contraction, so that
# the compiler forms no fused multiply-adds: it would place them differently in the scalar
# and the vectorized code (a few ulps, which a member near instability amplifies up to
# ~1e-3 within a round), while plain IEEE operations give a fused member the bits of its
# own run.
#: members per call of a group kernel: at most GROUP_BLOCK, padded to a multiple of LANES
#: (callers pad with copies of a member, computed and dropped). The per-member loops are
#: vectorized by LLVM's loop vectorizer, whose vector paths start at 4 iterations: 8
#: members run as two 4-wide vector steps, while 7 would run 4 + 3 scalar ones. (A
#: compile-time count does not help: the loop is then fully unrolled, and numba leaves the
#: SLP vectorizer off.) Larger blocks read the data fewer times but hold a larger state per
#: node (8 doubles per support feature and member).
LANES = 4
GROUP_BLOCK = 8
# A fused step-size group (fco_ray.core.group) runs G configurations that visit the same samples
# in the same order (randomness is keyed by node and position, never by configuration), so
# one pass reads each nonzero once and updates G local models. Member arrays are
# feature-major, (d, G): the G values of a feature are adjacent, one cache line for small G.
# Each member evaluates the formulas of its own call of the kernels above, with the same
# `_expm1` / `_log1p_neg` and the same operation order (tests/engine/test_svrg_fused.py), and no
# member's numbers enter another's, so a member that blows up only fills its own column
# with inf / nan.


@kernel()  # no FMA contraction: see EXACT above
def gradient_sum_group(data, indices, indptr, y, offsets, nodes, coef, w, out):
    """`gradient_sum` for G models at once (G a multiple of LANES): w, out are (d, G);
    out[:, g] += sum over nodes k of coef[k] sum_{i in k} l'_i(<x_i, w[:, g]>) x_i."""
    members = w.shape[1]
    z = np.empty(members)
    for t in range(nodes.size):
        k = nodes[t]
        for i in range(offsets[k], offsets[k + 1]):
            z[:] = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                for m in range(members):
                    z[m] += data[p] * w[j, m]
            for m in range(members):
                z[m] = coef[t] * _dloss(z[m], y[i])
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                for m in range(members):
                    out[j, m] += z[m] * data[p]


# columns of the group kernel's per-slot state (slot, column, member): the five a visit
# reads first (u, w + anchor, h drift, h drift / c, log1p(-c)), then the anchor; c and h s
# are formed when needed from h_k, s and mu (the same expressions `svrg_passes` stores), so
# a feature's state for 8 members is 5 cache lines per visit instead of 8
_GU, _GAW, _GHD, _GHDC, _GLOG, _GANCHOR = range(6)


@kernel(inline="always")
def _catch_up_slot(state, q, steps, hrow, s, lam, mu, e):
    """`_catch_up` of slot q for every member (hrow: the members' h_k, s the slot's s): the
    skipped steps are the same for all members, so the branch is taken once, and `_expm1`'s
    polynomial cases run over all members at once (vectorized), its library call only for
    members outside their range."""
    members = e.size
    if steps == 1:
        for m in range(members):
            c = hrow[m] * (s * lam + mu[m])
            state[q, _GU, m] = (1.0 - c) * state[q, _GU, m] - state[q, _GHD, m]
    elif steps > 1:
        outside = 0
        for m in range(members):  # the two polynomial cases of `_expm1`, as selects
            x = steps * state[q, _GLOG, m]
            outside += not abs(x) < EXPM1_HALVED
            e[m] = _expm1_series(x) if abs(x) < EXPM1_SERIES else _expm1_halved(x)
        if outside:
            for m in range(members):
                x = steps * state[q, _GLOG, m]
                if not abs(x) < EXPM1_HALVED:
                    e[m] = math.expm1(x)
        for m in range(members):
            state[q, _GU, m] = (1.0 + e[m]) * state[q, _GU, m] + state[q, _GHDC, m] * e[m]


@kernel()  # no FMA contraction: see EXACT above
def svrg_passes_group(data, indices, indptr, y, scale, offsets, nodes, ids, seed, rnd, stream,
                      replace, steps, h, coef, lam, mu, eta, passes, w, g, out):
    """`svrg_passes` for G members at once (G a multiple of LANES), differing in the step h,
    mu and eta: h is (nodes, G) (member m's h_k = h[t, m]), mu and eta (G,), w, g, out
    (d, G); returns alpha (G,), member m's `svrg_passes` result, computed with the same
    floating-point operations.

    One visiting order per node and pass serves all members, and each visited nonzero is
    read once for all of them. A node's support features get local slots 0..count-1
    (`slot`, and `nz_slot` per stored nonzero of the node), so the node's state is one
    contiguous block (count, 6, G), members innermost (vectorized loops); the step at which
    a feature was last caught up (`last`) and its s are per slot, shared by the members.
    `max_log[q]` = max over members of |log1p(-c)|: when (skipped steps) * max_log is in the
    series range of `_expm1`, every member's catch-up is that series, without branches."""
    d, members = w.shape
    scaled = scale.size > 0
    state = np.zeros((d, 6, members))  # by local slot
    last = np.zeros(d)
    s_of = np.zeros(d)
    max_log = np.zeros(d)
    drift = np.zeros((d, members))
    slot = np.full(d, -1, np.int64)
    support = np.empty(d, np.int64)
    longest = 0
    most_nz = 0
    for t in range(nodes.size):
        k = nodes[t]
        longest = max(longest, max(steps[t], offsets[k + 1] - offsets[k]))
        most_nz = max(most_nz, indptr[offsets[k + 1]] - indptr[offsets[k]])
    order = np.empty(longest, np.int64)
    nz_slot = np.empty(most_nz, np.int64)
    total_alpha = np.zeros(members)
    alpha = np.empty(members)
    beta = np.empty(members)
    c0 = np.empty(members)
    z = np.empty(members)
    za = np.empty(members)
    dl = np.empty(members)
    e = np.empty(members)
    for t in range(nodes.size):
        k = nodes[t]
        hrow = h[t]
        r0, r1 = offsets[k], offsets[k + 1]
        p0 = indptr[r0]
        size, n_steps = r1 - r0, steps[t]
        count = 0
        for i in range(r0, r1):
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                if slot[j] < 0:
                    slot[j] = count
                    support[count] = j
                    q = count
                    count += 1
                    s = scale[p] if scaled else 1.0
                    s_of[q] = s
                    outside = 0
                    top = 0.0
                    for m in range(members):
                        hk = hrow[m]
                        c = hk * (s * lam + mu[m])
                        state[q, _GANCHOR, m] = 0.0
                        state[q, _GAW, m] = w[j, m] + 0.0
                        state[q, _GHD, m] = hk * (eta[m] * g[j, m])
                        outside += not abs(c) < LOG1P_SERIES
                        state[q, _GLOG, m] = _log1p_neg_series(c)
                    if outside:
                        for m in range(members):
                            c = hrow[m] * (s * lam + mu[m])
                            if not abs(c) < LOG1P_SERIES:
                                state[q, _GLOG, m] = math.log1p(-c)
                    for m in range(members):
                        top = max(top, abs(state[q, _GLOG, m]))
                    max_log[q] = top
                nz_slot[p - p0] = slot[j]
        for m in range(members):
            alpha[m], beta[m] = 0.0, eta[m]
            c0[m] = hrow[m] * (lam + mu[m])
        for ps in range(passes):
            _order(key_prefix(seed, rnd, ps, stream), ids[t], size, n_steps, replace, order)
            for q in range(count):
                last[q] = 0.0
                s = s_of[q]
                for m in range(members):
                    state[q, _GU, m] = 0.0
                    state[q, _GHDC, m] = state[q, _GHD, m] / (hrow[m] * (s * lam + mu[m]))
            for st in range(n_steps):
                i = r0 + order[st]
                for m in range(members):
                    z[m] = 0.0
                    za[m] = 0.0
                for p in range(indptr[i], indptr[i + 1]):
                    q = nz_slot[p - p0]
                    x = data[p]
                    skipped = st - last[q]
                    if skipped == 1:
                        s = s_of[q]
                        for m in range(members):
                            c = hrow[m] * (s * lam + mu[m])
                            u = (1.0 - c) * state[q, _GU, m] - state[q, _GHD, m]
                            state[q, _GU, m] = u
                            a = state[q, _GAW, m]
                            za[m] += x * a
                            z[m] += x * (a + u)
                    elif skipped > 1 and skipped * max_log[q] < EXPM1_SERIES:
                        for m in range(members):
                            ex = _expm1_series(skipped * state[q, _GLOG, m])
                            u = (1.0 + ex) * state[q, _GU, m] + state[q, _GHDC, m] * ex
                            state[q, _GU, m] = u
                            a = state[q, _GAW, m]
                            za[m] += x * a
                            z[m] += x * (a + u)
                    else:
                        _catch_up_slot(state, q, skipped, hrow, s_of[q], lam, mu, e)
                        for m in range(members):
                            a = state[q, _GAW, m]
                            za[m] += x * a
                            z[m] += x * (a + state[q, _GU, m])
                for m in range(members):
                    dl[m] = _dloss(z[m], y[i]) - _dloss(za[m], y[i])
                for p in range(indptr[i], indptr[i + 1]):
                    q = nz_slot[p - p0]
                    x = data[p]
                    s = s_of[q]
                    for m in range(members):
                        hk = hrow[m]
                        c = hk * (s * lam + mu[m])
                        state[q, _GU, m] = ((1.0 - c) * state[q, _GU, m]
                                            - state[q, _GHD, m] - (hk * s) * x * dl[m])
                    last[q] = st + 1
            for q in range(count):
                j = support[q]
                _catch_up_slot(state, q, n_steps - last[q], hrow, s_of[q], lam, mu, e)
                for m in range(members):
                    state[q, _GANCHOR, m] += state[q, _GU, m]
                    state[q, _GAW, m] = w[j, m] + state[q, _GANCHOR, m]
            for m in range(members):
                alpha[m] += hrow[m] * beta[m] * math.expm1(n_steps * math.log1p(-c0[m])) / c0[m]
            if ps + 1 < passes:  # DANE's next drift, as in `svrg_passes`
                for q in range(count):
                    for m in range(members):
                        drift[q, m] = 0.0
                for i in range(r0, r1):
                    for m in range(members):
                        z[m] = 0.0
                        za[m] = 0.0  # here: the margins at w
                    for p in range(indptr[i], indptr[i + 1]):
                        q = nz_slot[p - p0]
                        j = indices[p]
                        x = data[p]
                        for m in range(members):
                            za[m] += x * w[j, m]
                            z[m] += x * state[q, _GAW, m]
                    for m in range(members):
                        dl[m] = (_dloss(z[m], y[i]) - _dloss(za[m], y[i])) / size
                    for p in range(indptr[i], indptr[i + 1]):
                        q = nz_slot[p - p0]
                        x = data[p]
                        for m in range(members):
                            drift[q, m] += dl[m] * x
                for q in range(count):
                    j = support[q]
                    for m in range(members):
                        state[q, _GHD, m] = hrow[m] * (drift[q, m] + (lam + mu[m]) * state[q, _GANCHOR, m]
                                                       + eta[m] * g[j, m])
                for m in range(members):
                    beta[m] = eta[m] + (lam + mu[m]) * alpha[m]
        for q in range(count):
            j = support[q]
            slot[j] = -1
            for m in range(members):
                out[j, m] += coef[t] * (state[q, _GANCHOR, m] - alpha[m] * g[j, m])
        for m in range(members):
            total_alpha[m] += coef[t] * alpha[m]
    return total_alpha
