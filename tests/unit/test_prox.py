"""fco_ray.ops.prox against the definitions prox_{tau psi}(x) = argmin_u tau psi(u) + 1/2 ||u - x||^2."""
import numpy as np
import pytest
from scipy.optimize import minimize

from fco_ray.ops import prox as P


def l1(u):
    return np.abs(u).sum()


def nuclear(u):
    return np.linalg.svd(u, compute_uv=False).sum()


def spectral(u):
    return np.linalg.svd(u, compute_uv=False).max()


def assert_argmin(objective, p, x, rng, feasible=lambda u: u, scipy_min=None):
    """p minimizes the 1-strongly convex `objective` over a convex set.

    Checks objective(p) <= objective(scipy minimizer) + 1e-6 and, for feasible points u
    around p, the strong-convexity bound objective(u) >= objective(p) + 1/2 ||u - p||^2,
    which any non-minimizer violates near the true minimizer.
    """
    f_p = objective(p)
    if scipy_min is not None:
        assert f_p <= objective(scipy_min.reshape(p.shape)) + 1e-6
    for scale in (1e-4, 1e-2, 1.0):
        for _ in range(100):
            u = feasible(p + scale * rng.standard_normal(p.shape))
            assert objective(u) >= f_p + 0.5 * np.sum((u - p) ** 2) - 1e-10


def powell(objective, x, **kw):
    res = minimize(lambda v: objective(v.reshape(x.shape)), x.ravel(), method="Powell",
                   options={"xtol": 1e-10, "ftol": 1e-12, "maxfev": 20000}, **kw)
    return res.x


# ---------------------------------------------------------------- penalties


def test_soft_threshold_matches_scalar_formula():
    x = np.array([-3.0, -1.0, -0.5, 0.0, 0.2, 1.0, 2.5])
    expected = [-2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.5]
    np.testing.assert_array_equal(P.soft_threshold(x, 1.0), expected)


def soft_threshold_definition(x, tau):
    return np.sign(x) * np.maximum(np.abs(x) - tau, 0)


def soft_threshold_inputs(rng):
    """float64 arrays of several shapes and layouts, with values at and around +-tau = 0.7."""
    cube = rng.standard_normal((4, 5, 6)) * 2
    cube.flat[:6] = [0.7, -0.7, 0.0, -0.0, 0.7000000000000001, -0.6999999999999999]
    yield "0-d", np.array(-1.9)
    yield "1-d", cube[0, 0].copy()
    yield "3-d", cube
    yield "transposed", cube.transpose(2, 0, 1)
    yield "strided", cube[::2, 1:, ::3]
    yield "reversed", cube[::-1, :, ::-2]
    yield "broadcast (read-only)", np.broadcast_to(cube[0, 0], (3, 6))


def test_soft_threshold_equals_the_definition_on_float64_arrays(rng):
    tau = 0.7
    for name, x in soft_threshold_inputs(rng):
        before = x.copy()
        out = P.soft_threshold(x, tau)
        assert out.shape == x.shape and out.dtype == np.float64, name
        assert not np.shares_memory(out, x), name
        np.testing.assert_array_equal(out, soft_threshold_definition(x, tau), err_msg=name)
        np.testing.assert_array_equal(x, before, err_msg=name)  # input not modified
    # a Python float and a NumPy scalar tau
    x = rng.standard_normal(7)
    np.testing.assert_array_equal(P.soft_threshold(x, np.float64(0.3)), soft_threshold_definition(x, 0.3))
    np.testing.assert_array_equal(P.soft_threshold(2.5, 1.0), 1.5)


def test_soft_threshold_float32_equals_the_float32_definition(rng):
    x = (rng.standard_normal((3, 4)) * 2).astype(np.float32)
    before = x.copy()
    out = P.soft_threshold(x, 0.3)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, soft_threshold_definition(x, np.float32(0.3)))
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_soft_threshold_propagates_nan_and_inf(dtype):
    x = np.array([np.nan, np.inf, -np.inf, 1.5, -0.2], dtype=dtype)
    out = P.soft_threshold(x, 0.5)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, np.array([np.nan, np.inf, -np.inf, 1.0, 0.0], dtype=dtype))
    assert np.isnan(P.soft_threshold(np.array(np.nan, dtype=dtype), 0.5))


def test_soft_threshold_is_the_l1_prox(rng):
    x, tau = rng.standard_normal(5) * 2, 0.7
    objective = lambda u: tau * l1(u) + 0.5 * np.sum((u - x) ** 2)
    p = P.soft_threshold(x, tau)
    assert_argmin(objective, p, x, rng, scipy_min=powell(objective, x))


def test_prox_nuclear_is_the_nuclear_prox_on_a_2x3_matrix(rng):
    x, tau = rng.standard_normal((2, 3)) * 2, 1.0
    objective = lambda u: tau * nuclear(u) + 0.5 * np.sum((u - x) ** 2)
    p = P.prox_nuclear(x, tau)
    assert np.linalg.matrix_rank(p) < 2 or tau < np.linalg.svd(x, compute_uv=False).min()
    assert_argmin(objective, p, x, rng, scipy_min=powell(objective, x))


def test_prox_l1_box_is_the_prox_of_l1_plus_box(rng):
    x, tau, radius = np.array([3.0, -2.5, 0.3, -0.9, 1.2]), 0.5, 1.0
    objective = lambda u: tau * l1(u) + 0.5 * np.sum((u - x) ** 2)
    p = P.prox_l1_box(x, tau, radius)
    np.testing.assert_allclose(p, [1.0, -1.0, 0.0, -0.4, 0.7])
    scipy_min = powell(objective, np.clip(x, -radius, radius), bounds=[(-radius, radius)] * x.size)
    assert_argmin(objective, p, x, rng, feasible=lambda u: np.clip(u, -radius, radius), scipy_min=scipy_min)


def test_prox_nuclear_with_radius_is_the_prox_of_nuclear_plus_spectral_ball(rng):
    x, tau, radius = rng.standard_normal((2, 3)) * 3, 0.5, 1.0
    objective = lambda u: tau * nuclear(u) + 0.5 * np.sum((u - x) ** 2)
    p = P.prox_nuclear(x, tau, radius)
    assert spectral(p) <= radius + 1e-12
    res = minimize(lambda v: objective(v.reshape(2, 3)), P.project_spectral_ball(x, radius).ravel(),
                   method="COBYLA", constraints=[{"type": "ineq", "fun": lambda v: radius - spectral(v.reshape(2, 3))}],
                   options={"rhobeg": 0.1, "tol": 1e-10, "maxiter": 20000})
    feasible = lambda u: P.project_spectral_ball(u, radius)
    assert_argmin(objective, p, x, rng, feasible=feasible, scipy_min=feasible(res.x.reshape(2, 3)))


def test_moreau_identity_l1(rng):
    # (lam ||.||_1)^* = indicator of the l_inf ball of radius lam, whose prox is a projection.
    x, t, lam = rng.standard_normal((4, 6)) * 2, 0.3, 1.5
    recon = P.soft_threshold(x, t * lam) + t * P.project_box(x / t, lam)
    np.testing.assert_allclose(recon, x, atol=1e-12)


def test_moreau_identity_nuclear(rng):
    # (lam ||.||_*)^* = indicator of the spectral ball of radius lam.
    x, t, lam = rng.standard_normal((4, 3, 5)) * 2, 0.3, 1.5
    recon = P.prox_nuclear(x, t * lam) + t * P.project_spectral_ball(x / t, lam)
    np.testing.assert_allclose(recon, x, atol=1e-10)


def test_l1_optimality_condition(rng):
    x, t, lam = rng.standard_normal(50), 0.5, 1.2
    p = P.soft_threshold(x, t * lam)
    g = (x - p) / t
    support = p != 0
    assert support.any() and (~support).any()
    np.testing.assert_allclose(g[support], lam * np.sign(p[support]))
    assert np.all(np.abs(g[~support]) <= lam + 1e-12)


def test_nuclear_optimality_condition(rng):
    # (x - p)/t = lam (U1 V1^T + W) with U1^T W = 0, W V1 = 0, ||W||_2 <= 1 (U1, V1 from p's SVD).
    x, t, lam = rng.standard_normal((5, 4)) * 2, 0.5, 3.0
    p = P.prox_nuclear(x, t * lam)
    u, s, vh = np.linalg.svd(p)
    r = int(np.sum(s > 1e-10))
    assert 0 < r < 4
    u1, v1 = u[:, :r], vh[:r].T
    g = (x - p) / (t * lam)
    np.testing.assert_allclose(u1.T @ g @ v1, np.eye(r), atol=1e-10)
    w = g - u1 @ v1.T
    np.testing.assert_allclose(u1.T @ w, 0, atol=1e-10)
    np.testing.assert_allclose(w @ v1, 0, atol=1e-10)
    assert spectral(w) <= 1 + 1e-10


def test_zero_tau_returns_a_copy(rng):
    x = rng.standard_normal((3, 2))
    for out in (P.soft_threshold(x, 0.0), P.prox_nuclear(x, 0.0)):
        assert out is not x and not np.shares_memory(out, x)
        np.testing.assert_array_equal(out, x)


def test_prox_nuclear_thresholds_singular_values(rng):
    x = rng.standard_normal((2, 4, 3))
    s = np.linalg.svd(x, compute_uv=False)
    tau, radius = 0.5, 1.2
    got = np.linalg.svd(P.prox_nuclear(x, tau, radius), compute_uv=False)
    np.testing.assert_allclose(got, np.minimum(np.maximum(s - tau, 0), radius), atol=1e-12)


def test_matrix_operators_reject_vectors():
    with pytest.raises(ValueError, match=r"\(\.\.\., m, n\)"):
        P.prox_nuclear(np.ones(3), 1.0)
    with pytest.raises(ValueError, match="event_ndim"):
        P.project_l2_ball(np.ones(3), 1.0, event_ndim=2)


# ---------------------------------------------------------------- projections
# name -> (projection, norm, dual norm, event ndim); unbatched inputs.

PROJECTIONS = {
    "l1_ball": (lambda x, r: P.project_l1_ball(x, r, 1), l1, lambda g: np.abs(g).max(), 1),
    "l1_ball_matrix": (lambda x, r: P.project_l1_ball(x, r, 2), l1, lambda g: np.abs(g).max(), 2),
    "l2_ball": (lambda x, r: P.project_l2_ball(x, r, 1), np.linalg.norm, np.linalg.norm, 1),
    "box": (P.project_box, lambda u: np.abs(u).max(), l1, 1),
    "spectral_ball": (P.project_spectral_ball, spectral, nuclear, 2),
}
SHAPES = {1: (5,), 2: (3, 4)}


def outside_and_inside(norm, shape, radius, rng):
    x = rng.standard_normal(shape)
    x = x * (3 * radius / norm(x))
    return x, x * (0.5 * radius / norm(x))


@pytest.mark.parametrize("name", PROJECTIONS)
def test_projection_optimality_certificate(name, rng):
    # p = P_C(x) iff p in C and <x - p, y - p> <= 0 for all y in C, i.e. for a norm ball
    # <x - p, p> >= radius * ||x - p||_dual.
    project, norm, dual, nd = PROJECTIONS[name]
    radius = 1.3
    for _ in range(20):
        x, _ = outside_and_inside(norm, SHAPES[nd], radius, rng)
        p = project(x, radius)
        assert norm(p) <= radius * (1 + 1e-12)
        assert np.sum((x - p) * p) >= radius * dual(x - p) - 1e-10


@pytest.mark.parametrize("name", PROJECTIONS)
def test_projection_properties(name, rng):
    project, norm, _, nd = PROJECTIONS[name]
    radius = 0.8
    x, inside = outside_and_inside(norm, SHAPES[nd], radius, rng)
    y, _ = outside_and_inside(norm, SHAPES[nd], radius, rng)
    px, py = project(x, radius), project(y, radius)
    np.testing.assert_array_equal(project(inside, radius), inside)
    np.testing.assert_allclose(project(px, radius), px, atol=1e-12)
    assert not np.allclose(px, x)
    # firm nonexpansiveness
    assert np.sum((px - py) * (x - y)) >= np.sum((px - py) ** 2) - 1e-12
    # no feasible point is closer to x (brute force over random feasible points)
    candidates = project(px + 0.3 * rng.standard_normal((200,) + px.shape), radius)
    dist = np.sqrt(np.sum((candidates - x) ** 2, axis=tuple(range(1, candidates.ndim))))
    assert np.linalg.norm(px - x) <= dist.min() + 1e-12


def slsqp_projection(x, constraints, bounds=None, x0=None):
    res = minimize(lambda u: 0.5 * np.sum((u - x) ** 2), np.zeros_like(x) if x0 is None else x0,
                   jac=lambda u: u - x, method="SLSQP", constraints=constraints, bounds=bounds,
                   options={"ftol": 1e-14, "maxiter": 500})
    assert res.success
    return res.x


def test_l2_ball_projection_matches_slsqp(rng):
    x, radius = rng.standard_normal(4) * 3, 1.0
    ref = slsqp_projection(x, [{"type": "ineq", "fun": lambda u: radius**2 - u @ u, "jac": lambda u: -2 * u}])
    np.testing.assert_allclose(P.project_l2_ball(x, radius), ref, atol=1e-6)


def test_l1_ball_projection_matches_slsqp(rng):
    # u = a - b with a, b >= 0 and sum(a + b) <= radius: a smooth QP in (a, b).
    x, radius = rng.standard_normal(5) * 2, 1.5
    d = x.size
    res = minimize(lambda ab: 0.5 * np.sum((ab[:d] - ab[d:] - x) ** 2), np.zeros(2 * d), method="SLSQP",
                   jac=lambda ab: np.concatenate([ab[:d] - ab[d:] - x, x - ab[:d] + ab[d:]]),
                   bounds=[(0, None)] * (2 * d),
                   constraints=[{"type": "ineq", "fun": lambda ab: radius - ab.sum(), "jac": lambda ab: -np.ones(2 * d)}],
                   options={"ftol": 1e-14, "maxiter": 500})
    assert res.success
    np.testing.assert_allclose(P.project_l1_ball(x, radius), res.x[:d] - res.x[d:], atol=1e-6)


def test_box_projection_matches_slsqp(rng):
    x, radius = rng.standard_normal(5) * 2, 0.7
    ref = slsqp_projection(x, [], bounds=[(-radius, radius)] * x.size)
    np.testing.assert_allclose(P.project_box(x, radius), ref, atol=1e-8)


def test_l1_ball_known_values():
    np.testing.assert_allclose(P.project_l1_ball(np.array([3.0, 1.0]), 2.0), [2.0, 0.0])
    np.testing.assert_allclose(P.project_l1_ball(np.array([1.0, -1.0]), 1.0), [0.5, -0.5])
    np.testing.assert_allclose(P.project_l1_ball(np.array([[0.5, 2.0], [0.0, -1.0]]), 1.0, 2), [[0, 1.0], [0, 0]])
    np.testing.assert_array_equal(P.project_l1_ball(np.array([1.0, -2.0]), 0.0), [0.0, 0.0])
    np.testing.assert_array_equal(P.project_l1_ball(np.zeros(3), 1.0), np.zeros(3))


# ---------------------------------------------------------------- batching

BATCHED = {
    "soft_threshold": (lambda x: P.soft_threshold(x, 0.4), (5,)),
    "prox_nuclear": (lambda x: P.prox_nuclear(x, 0.4), (3, 4)),
    "prox_nuclear_radius": (lambda x: P.prox_nuclear(x, 0.4, 0.9), (3, 4)),
    "project_box": (lambda x: P.project_box(x, 0.5), (5,)),
    "prox_l1_box": (lambda x: P.prox_l1_box(x, 0.4, 0.5), (5,)),
    "project_l2_ball": (lambda x: P.project_l2_ball(x, 1.0, 1), (5,)),
    "project_l2_ball_matrix": (lambda x: P.project_l2_ball(x, 1.0, 2), (3, 4)),
    "project_l1_ball": (lambda x: P.project_l1_ball(x, 1.0, 1), (5,)),
    "project_l1_ball_matrix": (lambda x: P.project_l1_ball(x, 1.0, 2), (3, 4)),
    "project_spectral_ball": (lambda x: P.project_spectral_ball(x, 1.0), (3, 4)),
}


@pytest.mark.parametrize("name", BATCHED)
@pytest.mark.parametrize("lead", [(4,), (2, 3)])
def test_batch_equals_per_slice(name, lead, rng):
    fn, event = BATCHED[name]
    x = rng.standard_normal(lead + event) * 1.5
    x[0] *= 0.05  # some slices inside the balls
    out = fn(x)
    assert out.shape == x.shape
    for idx in np.ndindex(*lead):
        np.testing.assert_allclose(out[idx], fn(x[idx]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", BATCHED)
def test_float32_is_kept_and_input_untouched(name, rng):
    fn, event = BATCHED[name]
    x = rng.standard_normal((2,) + event).astype(np.float32)
    before = x.copy()
    assert fn(x).dtype == np.float32
    np.testing.assert_array_equal(x, before)


def test_soft_threshold_with_a_threshold_per_row_equals_the_clip_form():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(5, 3, 4))
    tau = np.abs(rng.normal(size=5)).reshape(5, 1, 1)
    expected = x - np.clip(x, -tau, tau)
    np.testing.assert_array_equal(P.soft_threshold(x, tau), expected)
    np.testing.assert_array_equal(P.soft_threshold(x[:, 0], tau[:, :, 0]), expected[:, 0])
