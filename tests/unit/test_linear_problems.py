"""E1 / E2 problems: data generators, gradients, metrics and the centralized optimum."""
import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.linear_model import Lasso

from fco_ray.algorithms.solvers import solve_centralized
from fco_ray.ops.random import Key
from fco_ray.problems.base import Problem
from fco_ray.problems.linear import _ar1_gaussian, make_lasso, support_metrics

from tests.helpers import small_lasso, small_lowrank


def test_feature_covariance_is_ar1():
    x = _ar1_gaussian(np.random.default_rng(0), (200_000, 6), 0.5)
    cov = np.cov(x, rowvar=False)
    expected = 0.5 ** np.abs(np.subtract.outer(np.arange(6), np.arange(6)))
    np.testing.assert_allclose(cov, expected, atol=0.02)


def test_lasso_data_has_the_paper_structure():
    p = make_lasso(seed=1, lam=0.1, clients=4, samples_per_client=[3, 5, 7, 9], dim=30, support=8,
                   val_clients=2, bias="gaussian", correlation=0.5, noise=1.0, shift=1.0)
    assert p.train.arrays["x"].shape == (4, 9, 30)
    np.testing.assert_array_equal(p.train.sizes, [3, 5, 7, 9])
    assert np.all(p.train.arrays["x"][0, 3:] == 0)  # padding
    np.testing.assert_array_equal(p.info["w_true"], (np.arange(30) < 8).astype(float))
    assert p.info["b_true"] != 0.0


@pytest.mark.parametrize("make", [small_lasso, small_lowrank])
def test_gradient_matches_finite_differences(make):
    problem = make()
    rng = np.random.default_rng(0)
    params = {k: rng.standard_normal(s) for k, s in problem.shapes.items()}
    f0, g = problem.full_loss_grad(params)
    for block, shape in problem.shapes.items():
        d = rng.standard_normal(shape)
        eps = 1e-6
        plus = dict(params, **{block: params[block] + eps * d})
        minus = dict(params, **{block: params[block] - eps * d})
        fd = (problem.loss(plus) - problem.loss(minus)) / (2 * eps)
        assert fd == pytest.approx(float(np.sum(g[block] * d)), rel=1e-6, abs=1e-8)


def test_unequal_client_sizes_weight_each_client_equally():
    p = make_lasso(seed=1, lam=0.0, clients=3, samples_per_client=[2, 4, 6], dim=5, support=2,
                   val_clients=1, bias="zero", correlation=0.5, noise=1.0, shift=1.0)
    params = {"w": np.ones(5), "b": np.array(0.3)}
    per_client = []
    for c, n in enumerate(p.train.sizes):
        x, y = p.train.arrays["x"][c, :n], p.train.arrays["y"][c, :n]
        per_client.append(np.mean((x @ params["w"] + 0.3 - y) ** 2))  # the paper's loss: no 1/2
    assert p.loss(params) == pytest.approx(np.mean(per_client), rel=1e-12)


def test_centralized_lasso_agrees_with_sklearn():
    """sklearn minimizes 1/(2n)||y - Xw - b||^2 + alpha ||w||_1; ours, (1/n)||y - Xw - b||^2 +
    lam ||w||_1, is twice that at alpha = lam / 2 (equal client sizes, so the client mean is the
    pooled mean)."""
    problem = small_lasso(lam=0.2, clients=6, samples=30, dim=25, support=6)
    ours = solve_centralized(problem, tol=1e-13)
    pooled = problem.train.pooled()
    ref = Lasso(alpha=0.1, tol=1e-12, max_iter=100_000).fit(pooled["x"], pooled["y"])
    np.testing.assert_allclose(ours["w"], ref.coef_, atol=1e-6)
    assert float(ours["b"]) == pytest.approx(ref.intercept_, abs=1e-6)


def test_centralized_lowrank_matches_a_factorized_reference():
    """min F(W) + lam ||W||_* equals min_{P,Q} F(P Q^T) + lam/2 (||P||^2 + ||Q||^2) (inner dim
    >= rank); solve that smooth problem with L-BFGS independently and compare."""
    problem = small_lowrank(lam=0.3, dim=5, clients=6, samples=20)
    ours = solve_centralized(problem, tol=1e-13)
    n = 5

    def smooth(theta):
        p_, q_, b = theta[: n * n].reshape(n, n), theta[n * n: 2 * n * n].reshape(n, n), theta[-1]
        w = p_ @ q_.T
        f, g = problem.full_loss_grad({"w": w, "b": np.array(b)})
        val = f + 0.15 * (np.sum(p_ * p_) + np.sum(q_ * q_))
        gp = g["w"] @ q_ + 0.3 * p_
        gq = g["w"].T @ p_ + 0.3 * q_
        return val, np.concatenate([gp.ravel(), gq.ravel(), [g["b"]]])

    theta0 = np.random.default_rng(0).standard_normal(2 * n * n + 1) * 0.1
    res = minimize(smooth, theta0, jac=True, method="L-BFGS-B", options={"maxiter": 20000, "gtol": 1e-12, "ftol": 1e-15})
    w_ref = res.x[: n * n].reshape(n, n) @ res.x[n * n: 2 * n * n].reshape(n, n).T
    assert problem.objective(ours) <= res.fun + 1e-9
    assert problem.objective(ours) == pytest.approx(res.fun, rel=1e-7)
    np.testing.assert_allclose(ours["w"], w_ref, atol=1e-4)
    # optimality: -grad F(W) is lam times a subgradient of the nuclear norm at W
    g = -problem.full_loss_grad(ours)[1]["w"]
    u, s, vt = np.linalg.svd(ours["w"])
    r = int(np.sum(s > 1e-8))
    assert 0 < r < n
    np.testing.assert_allclose(u[:, :r].T @ g @ vt[:r].T, 0.3 * np.eye(r), atol=1e-6)
    assert np.linalg.norm(g - u[:, :r] @ u[:, :r].T @ g @ vt[:r].T @ vt[:r], 2) <= 0.3 + 1e-6


def test_support_metrics():
    truth = np.array([1.0, 1.0, 0.0, 0.0])
    m = support_metrics(np.array([0.5, 0.0, 0.2, 5e-5]), truth)
    assert m["precision"] == 0.5 and m["recall"] == 0.5 and m["f1"] == 0.5
    assert m["density"] == 0.5
    empty = support_metrics(np.zeros(4), truth)
    assert empty["f1"] == 0.0 and empty["density"] == 0.0


def test_lowrank_metrics_rank_and_recovery():
    problem = small_lowrank(dim=5, rank=2)
    m = problem.evaluate({"w": problem.info["w_true"], "b": np.array(0.0)})
    assert m["rank"] == 2 and m["recovery_error"] == 0.0


# ---------------------------------------------------------------- compiled minibatch gradient


def unequal_lasso():
    return make_lasso(seed=2, lam=0.1, clients=4, samples_per_client=[3, 5, 7, 9], dim=6, support=2,
                      val_clients=1, bias="gaussian", correlation=0.5, noise=1.0, shift=1.0)


GRAD_PROBLEMS = {"lasso": small_lasso, "lowrank": small_lowrank, "lasso_unequal_sizes": unequal_lasso}


def assert_grads_close(got, ref):
    assert set(got) == set(ref)
    for k in ref:
        assert got[k].shape == ref[k].shape
        scale = np.abs(ref[k]).max()
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-12, atol=1e-12 * scale, err_msg=k)


def rule_grads(problem, params, rows, seed, rnd, step, batch_size):
    """The problem rule's gradient (fco_ray.rules.problems.LeastSquares) of each client of
    `rows` at its own stacked model, with the engine's keyed minibatch of that step."""
    import jax
    import jax.numpy as jnp

    from fco_ray.ops.random import BATCH
    from fco_ray.rules.problems import Client

    rule = problem.make_rule(batch_size)
    data = {k: jnp.asarray(v) for k, v in rule.arrays().items()}
    grad = jax.jit(lambda d, p, me: rule.grad(d, p, me, step, BATCH))
    out = []
    for c, row in enumerate(rows):
        me = Client(np.uint64(seed), np.uint64(rnd), np.uint64(row), data["sizes"][row], data["offsets"][row])
        g = grad(data, {k: jnp.asarray(v[c]) for k, v in params.items()}, me)
        out.append({k: np.asarray(v) for k, v in g.items()})
    return {k: np.stack([o[k] for o in out]) for k in out[0]}


@pytest.mark.parametrize("name", GRAD_PROBLEMS)
def test_the_rule_gradient_equals_the_generic_gather_and_loss_and_grad(name):
    """The rule's minibatch gradient (JAX, rows drawn by the keyed draws in JAX) equals the
    NumPy problem's: its rows drawn by `Key`, gathered, and `loss_and_grad` (1e-12)."""
    problem = GRAD_PROBLEMS[name]()
    rng = np.random.default_rng(1)
    rows = np.array([0, 2, 3])  # not all clients: the flat row offsets matter
    w_shape = problem.shapes["w"]
    stacked = {"w": rng.standard_normal((3,) + w_shape), "b": rng.standard_normal(3)}
    for batch_size in (1, 3, 4, 5, 10):
        key = Key(3, 1, rows, step=batch_size)
        got = rule_grads(problem, stacked, rows, 3, 1, batch_size, batch_size)
        ref = Problem.grad(problem, stacked, rows, key, batch_size)
        assert_grads_close(got, ref)


@pytest.mark.parametrize("name", ["lasso", "lowrank"])
def test_the_rule_gradient_keeps_nan_detectable(name):
    problem = GRAD_PROBLEMS[name]()
    rng = np.random.default_rng(2)
    rows = np.array([1, 2, 3])
    params = {"w": rng.standard_normal((3,) + problem.shapes["w"]), "b": rng.standard_normal(3)}
    params["w"].reshape(3, -1)[1, 0] = np.nan
    for batch_size in (3, 5):
        g = rule_grads(problem, params, rows, 0, 0, 0, batch_size)
        assert np.all(np.isnan(g["w"][1])) and np.isnan(g["b"][1])
        assert np.all(np.isfinite(g["w"][[0, 2]])) and np.all(np.isfinite(g["b"][[0, 2]]))
