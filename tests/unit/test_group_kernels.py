"""The numba least-squares kernels for a fused group (G > 1 models per client, taken two at a
time: `kernels._group_steps`, `kernels._group_grads`) against a NumPy loop of their formulas,
one model at a time: every combination of thresholds before and after the step, the
subgradient term, odd groups (the last model alone) and batch sizes that leave a remainder
after the blocks of four rows; a NaN model stays NaN and leaves the others alone."""
import numpy as np
import pytest

from fco_ray.ops import kernels
from fco_ray.ops.random import BATCH

CLIENTS, SAMPLES, DIM, STEPS = 3, 9, 13, 3


def shrink(v, t):
    return v - np.clip(v, -t, t)


def data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(CLIENTS * SAMPLES, DIM))
    y = rng.normal(size=CLIENTS * SAMPLES)
    ids = np.array([5, 1, 7], dtype=np.uint64)
    sizes = np.array([SAMPLES, SAMPLES - 2, SAMPLES], dtype=np.int64)
    offsets = np.arange(CLIENTS, dtype=np.int64) * SAMPLES
    return x, y, ids, sizes, offsets


def batch_rows(ids, sizes, offsets, c, step, batch):
    flat = kernels.keyed_integers(0, 4, step, BATCH, ids[c:c + 1], sizes[c:c + 1], batch)[0]
    return flat + offsets[c]


def reference_steps(x, y, ids, sizes, offsets, batch, w, b, lr, pre, post, sub_lam):
    """u = prox_pre(w); g = grad of the mean of (<x, u> + b - y)^2 (+ sub_lam sign(w));
    w = prox_post(w - lr g); b = b - lr dg/db, row by row."""
    w, b = w.copy(), b.copy()
    group = len(w) // CLIENTS
    for r in range(len(w)):
        c = r // group
        for k in range(pre.shape[0]):
            rows = batch_rows(ids, sizes, offsets, c, k, batch)
            xb, yb = x[rows], y[rows]
            res = (xb @ shrink(w[r], pre[k, r]) + b[r] - yb) / batch
            g = 2 * xb.T @ res + sub_lam[r] * np.sign(w[r])
            w[r] = shrink(w[r] - lr[r] * g, post[k, r])
            b[r] = b[r] - lr[r] * 2 * res.sum()
    return w, b


def case(group, seed):
    rng = np.random.default_rng(seed)
    rows = CLIENTS * group
    w = rng.normal(size=(rows, DIM))
    b = rng.normal(size=rows)
    lr = rng.uniform(0.01, 0.05, rows)
    pre = rng.choice([0.0, 0.3], size=(STEPS, rows))
    post = rng.choice([0.0, 0.02], size=(STEPS, rows))
    sub_lam = rng.choice([0.0, 0.1], size=rows)
    return w, b, lr, pre, post, sub_lam


@pytest.mark.parametrize("group", [2, 3, 5])
@pytest.mark.parametrize("batch", [3, 4, 5, 7])
def test_group_steps_equal_one_model_at_a_time(group, batch):
    x, y, ids, sizes, offsets = data()
    w, b, lr, pre, post, sub_lam = case(group, seed=group * 10 + batch)
    want_w, want_b = reference_steps(x, y, ids, sizes, offsets, batch, w, b, lr, pre, post, sub_lam)
    got_w, got_b = w.copy(), b.copy()
    kernels.least_squares_steps(x, y, 0, 4, BATCH, ids, sizes, offsets, batch, got_w, got_b, lr, pre, post,
                                sub_lam)
    np.testing.assert_allclose(got_w, want_w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_b, want_b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("group", [2, 3])
def test_a_nan_model_stays_nan_and_leaves_the_others_alone(group):
    x, y, ids, sizes, offsets = data()
    w, b, lr, pre, post, sub_lam = case(group, seed=7)
    bad = group + group - 1  # client 1's last model: the odd one out when group is odd
    w[bad, 4] = np.nan
    want_w, want_b = reference_steps(x, y, ids, sizes, offsets, 5, w, b, lr, pre, post, sub_lam)
    got_w, got_b = w.copy(), b.copy()
    kernels.least_squares_steps(x, y, 0, 4, BATCH, ids, sizes, offsets, 5, got_w, got_b, lr, pre, post, sub_lam)
    assert np.isnan(got_w[bad]).all() and np.isnan(got_b[bad])
    others = np.arange(len(w)) != bad
    assert np.isfinite(got_w[others]).all()
    np.testing.assert_allclose(got_w[others], want_w[others], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("group", [1, 2, 3])
@pytest.mark.parametrize("batch", [3, 5, 8])
def test_group_gradients_equal_one_model_at_a_time(group, batch):
    x, y, ids, sizes, offsets = data(seed=1)
    rng = np.random.default_rng(batch)
    at, b = rng.normal(size=(CLIENTS * group, DIM)), rng.normal(size=CLIENTS * group)
    gw, gb = np.full_like(at, np.nan), np.full_like(b, np.nan)  # every entry must be written
    kernels.least_squares_grads(x, y, 0, 4, 2, BATCH, ids, sizes, offsets, batch, at, b, gw, gb)
    for r in range(len(at)):
        rows = batch_rows(ids, sizes, offsets, r // group, 2, batch)
        res = (x[rows] @ at[r] + b[r] - y[rows]) / batch
        np.testing.assert_allclose(gw[r], x[rows].T @ res, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(gb[r], res.sum(), rtol=1e-12, atol=1e-13)
