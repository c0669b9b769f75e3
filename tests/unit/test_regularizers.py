"""fco_ray.ops.regularizers: values, prox, subgradients, projections, sums, builders, blocks."""
import dataclasses

import numpy as np
import pytest

from fco_ray.ops import prox as P
from fco_ray.ops import regularizers as R


def svals(x):
    return np.linalg.svd(x, compute_uv=False)


def ball(norm, radius):
    """Indicator of {norm <= radius} with the tolerance the regularizers use."""
    return 0.0 if norm <= radius + 1e-9 * (1 + radius) else np.inf


# name -> (regularizer, event shape, direct psi(x) for unbatched x)
CASES = {
    "zero": (R.Zero(), (5,), lambda x: 0.0),
    "l1": (R.L1(0.7), (5,), lambda x: 0.7 * np.abs(x).sum()),
    "nuclear": (R.Nuclear(0.7), (3, 4), lambda x: 0.7 * svals(x).sum()),
    "l1_ball": (R.L1Ball(1.2), (5,), lambda x: ball(np.abs(x).sum(), 1.2)),
    "l1_ball_matrix": (R.L1Ball(1.2), (3, 4), lambda x: ball(np.abs(x).sum(), 1.2)),
    "l2_ball": (R.L2Ball(1.2), (5,), lambda x: ball(np.linalg.norm(x), 1.2)),
    "box": (R.Box(0.6), (5,), lambda x: ball(np.abs(x).max(), 0.6)),
    "spectral_ball": (R.SpectralBall(1.2), (3, 4), lambda x: ball(svals(x).max(), 1.2)),
    "l1_box": (R.L1Box(0.7, 0.6), (5,), lambda x: 0.7 * np.abs(x).sum() + ball(np.abs(x).max(), 0.6)),
    "nuclear_spectral": (R.NuclearSpectral(0.7, 1.2), (3, 4), lambda x: 0.7 * svals(x).sum() + ball(svals(x).max(), 1.2)),
}


def sample(shape, rng, scale=1.5):
    return rng.standard_normal(shape) * scale


@pytest.mark.parametrize("name", CASES)
def test_value_matches_direct_formula(name, rng):
    reg, event, psi = CASES[name]
    nd = len(event)
    for scale in (0.05, 1.5):
        x = sample((4,) + event, rng, scale)
        x[::2] *= 0.02  # mix slices inside and (for constraints) outside the sets
        got = reg.value(x, nd)
        assert got.shape == (4,)
        np.testing.assert_allclose(got, [psi(xi) for xi in x])
        single = reg.value(x[0], nd)
        assert isinstance(single, float) and single == pytest.approx(psi(x[0]))
    if reg.is_constraint:
        assert np.all(np.isinf(reg.value(sample((4,) + event, rng, 10.0), nd)))


@pytest.mark.parametrize("reg", [R.L1Ball(2.0), R.L2Ball(2.0), R.Box(2.0)])
def test_constraint_value_tolerance(reg):
    edge = P.project_l2_ball(np.ones(4), 2.0) if isinstance(reg, R.L2Ball) else (
        np.full(4, 0.5) if isinstance(reg, R.L1Ball) else np.full(4, 2.0))
    assert reg.value(edge * (1 + 1e-12)) == 0.0
    assert reg.value(edge * (1 + 1e-6)) == np.inf


def test_spectral_value_tolerance():
    x = np.diag([2.0, 1.0])
    assert R.SpectralBall(2.0).value(x * (1 + 1e-12), 2) == 0.0
    assert R.SpectralBall(2.0).value(x * (1 + 1e-6), 2) == np.inf
    assert R.NuclearSpectral(1.0, 2.0).value(x, 2) == pytest.approx(3.0)


@pytest.mark.parametrize("name", CASES)
def test_prox_is_the_argmin(name, rng):
    # p = prox_{t psi}(x) iff  t psi(u) + 1/2||u - x||^2 >= t psi(p) + 1/2||p - x||^2 + 1/2||u - p||^2
    # for all u (1-strong convexity); checked on points around p and on feasible points.
    reg, event, psi = CASES[name]
    nd, t = len(event), 0.8
    objective = lambda u, x: t * psi(u) + 0.5 * np.sum((u - x) ** 2)
    for _ in range(5):
        x = sample(event, rng)
        p = reg.prox(x, t, nd)
        f_p = objective(p, x)
        assert np.isfinite(f_p)
        for scale in (1e-3, 1e-1, 1.0):
            for u in p + scale * rng.standard_normal((40,) + event):
                u = reg.project(u, nd)
                assert objective(u, x) >= f_p + 0.5 * np.sum((u - p) ** 2) - 1e-10


@pytest.mark.parametrize("name", CASES)
def test_prox_uses_prox_functions_with_t_times_lam(name, rng):
    reg, event, _ = CASES[name]
    x, t, nd = sample(event, rng), 0.8, len(event)
    lam, radius = getattr(reg, "lam", 0.0), getattr(reg, "radius", None)
    expected = {
        "zero": lambda: x,
        "l1": lambda: P.soft_threshold(x, t * lam),
        "nuclear": lambda: P.prox_nuclear(x, t * lam),
        "l1_ball": lambda: P.project_l1_ball(x, radius, 1),
        "l1_ball_matrix": lambda: P.project_l1_ball(x, radius, 2),
        "l2_ball": lambda: P.project_l2_ball(x, radius),
        "box": lambda: P.project_box(x, radius),
        "spectral_ball": lambda: P.project_spectral_ball(x, radius),
        "l1_box": lambda: P.prox_l1_box(x, t * lam, radius),
        "nuclear_spectral": lambda: P.prox_nuclear(x, t * lam, radius),
    }[name]()
    np.testing.assert_allclose(reg.prox(x, t, nd), expected)
    if reg.penalty is None:  # constraints: the projection, whatever t
        np.testing.assert_allclose(reg.prox(x, 5.0, nd), expected)
        np.testing.assert_allclose(reg.project(x, nd), expected)
    assert reg.prox(x, t, nd) is not x


@pytest.mark.parametrize("name", CASES)
def test_subgradient_inequality_of_the_penalty(name, rng):
    # g in d(penalty)(x): penalty(y) >= penalty(x) + <g, y - x> for all y.
    reg, event, _ = CASES[name]
    nd = len(event)
    penalty = R.make(reg.penalty if reg.penalty else "zero", **({"lam": reg.lam} if reg.penalty else {}))
    x = sample(event, rng)
    if nd == 2:
        x = x[:, :2] @ x[:2, :]  # rank deficient: exercises the restriction to nonzero singular values
    else:
        x[1] = 0.0
    g = reg.subgradient(x, nd)
    assert g.shape == x.shape
    for y in sample((50,) + event, rng):
        assert penalty.value(y, nd) >= penalty.value(x, nd) + np.sum(g * (y - x)) - 1e-10
    if reg.penalty is None:
        np.testing.assert_array_equal(g, 0.0)


def test_l1_subgradient_and_optimality():
    x = np.array([2.0, -0.3, 0.0, 1.0, -4.0])
    reg, t = R.L1(1.5), 1.0
    np.testing.assert_array_equal(reg.subgradient(x), [1.5, -1.5, 0.0, 1.5, -1.5])
    p = reg.prox(x, t)
    g = (x - p) / t
    np.testing.assert_allclose(g[p != 0], 1.5 * np.sign(p[p != 0]))
    assert np.all(np.abs(g[p == 0]) <= 1.5)


def test_nuclear_subgradient_is_lam_u_vt_on_the_range(rng):
    a = rng.standard_normal((4, 2)) @ rng.standard_normal((2, 3))  # rank 2
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    np.testing.assert_allclose(R.Nuclear(2.0).subgradient(a, 2), 2.0 * u[:, :2] @ vh[:2], atol=1e-10)
    np.testing.assert_array_equal(R.Nuclear(2.0).subgradient(np.zeros((3, 3)), 2), 0.0)


@pytest.mark.parametrize("name", CASES)
def test_project_is_onto_the_constraint_part(name, rng):
    reg, event, _ = CASES[name]
    nd = len(event)
    x = sample((3,) + event, rng, 5.0)
    p = reg.project(x, nd)
    if not reg.is_constraint:
        assert p is not x
        np.testing.assert_array_equal(p, x)
        return
    constraint = {"l1": R.L1Ball, "l2": R.L2Ball, "linf": R.Box, "spectral": R.SpectralBall}[reg.constraint]
    np.testing.assert_array_equal(p, constraint(reg.radius).prox(x, 1.0, nd))
    np.testing.assert_array_equal(constraint(reg.radius).value(p, nd), 0.0)
    np.testing.assert_allclose(reg.project(p, nd), p, atol=1e-12)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("lead", [(4,), (2, 3)])
def test_batch_equals_per_slice(name, lead, rng):
    reg, event, _ = CASES[name]
    nd = len(event)
    x = sample(lead + event, rng)
    outs = {
        "value": reg.value(x, nd),
        "prox": reg.prox(x, 0.5, nd),
        "subgradient": reg.subgradient(x, nd),
        "project": reg.project(x, nd),
    }
    assert outs["value"].shape == lead and outs["prox"].shape == x.shape
    for idx in np.ndindex(*lead):
        np.testing.assert_allclose(outs["value"][idx], reg.value(x[idx], nd))
        np.testing.assert_allclose(outs["prox"][idx], reg.prox(x[idx], 0.5, nd), atol=1e-12)
        np.testing.assert_allclose(outs["subgradient"][idx], reg.subgradient(x[idx], nd), atol=1e-12)
        np.testing.assert_allclose(outs["project"][idx], reg.project(x[idx], nd), atol=1e-12)


def test_flags_and_params():
    assert not R.Zero().is_constraint and not R.L1(1).is_constraint and not R.Nuclear(1).is_constraint
    assert all(r.is_constraint for r in (R.L1Ball(1), R.L2Ball(1), R.Box(1), R.SpectralBall(1),
                                         R.L1Box(1, 1), R.NuclearSpectral(1, 1)))
    assert R.L1Box(0.5, 2).lam == 0.5 and R.L1Box(0.5, 2).radius == 2.0
    assert R.L1(1) == R.L1(1.0) and hash(R.L1(1)) == hash(R.L1(1.0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        R.L1(1.0).lam = 2.0


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: R.L1(-1.0), "L1: lam must be a finite number >= 0, got -1.0"),
        (lambda: R.Nuclear(float("nan")), "Nuclear: lam must be a finite number >= 0, got nan"),
        (lambda: R.L1Box(float("inf"), 1.0), "L1Box: lam must be a finite number >= 0, got inf"),
        (lambda: R.Box(0), "Box: radius must be a finite number > 0, got 0"),
        (lambda: R.L2Ball(-2.0), "L2Ball: radius must be a finite number > 0, got -2.0"),
        (lambda: R.NuclearSpectral(1.0, 0.0), "NuclearSpectral: radius must be a finite number > 0, got 0.0"),
        (lambda: R.L1Ball("1"), "L1Ball: radius must be a finite number > 0, got '1'"),
    ],
)
def test_invalid_parameters(build, message):
    with pytest.raises(ValueError) as err:
        build()
    assert str(err.value) == message


def test_zero_lam_is_allowed():
    np.testing.assert_array_equal(R.L1(0).prox(np.array([1.0, -2.0]), 1.0), [1.0, -2.0])


@pytest.mark.parametrize("reg", [R.Nuclear(1.0), R.SpectralBall(1.0), R.NuclearSpectral(1.0, 1.0)])
def test_matrix_regularizers_need_event_ndim_2(reg):
    for method in (lambda: reg.value(np.ones((2, 3))), lambda: reg.prox(np.ones((2, 3)), 1.0),
                   lambda: reg.subgradient(np.ones(3)), lambda: reg.project(np.ones((2, 3)), 1)):
        with pytest.raises(ValueError, match=f"{type(reg).__name__}: needs event_ndim == 2"):
            method()


# ---------------------------------------------------------------- make


@pytest.mark.parametrize(
    "name, params, expected",
    [
        ("zero", {}, R.Zero()),
        ("l1", {"lam": 0.1}, R.L1(0.1)),
        ("nuclear", {"lam": 0.1}, R.Nuclear(0.1)),
        ("l1_ball", {"radius": 2}, R.L1Ball(2)),
        ("l2_ball", {"radius": 2}, R.L2Ball(2)),
        ("box", {"radius": 2}, R.Box(2)),
        ("spectral_ball", {"radius": 2}, R.SpectralBall(2)),
        ("l1_box", {"lam": 0.1, "radius": 2}, R.L1Box(0.1, 2)),
        ("nuclear_spectral", {"lam": 0.1, "radius": 2}, R.NuclearSpectral(0.1, 2)),
    ],
)
def test_make(name, params, expected):
    reg = R.make(name, **params)
    assert reg == expected and type(reg) is type(expected)


def test_make_errors():
    with pytest.raises(ValueError, match="unknown regularizer 'lasso'; allowed: zero, l1, nuclear, l1_ball"):
        R.make("lasso", lam=1.0)
    with pytest.raises(ValueError, match=r"takes parameters \['lam'\]; unknown: \['radius'\], missing: \[\]"):
        R.make("l1", lam=1.0, radius=2.0)
    with pytest.raises(ValueError, match=r"missing: \['radius'\]"):
        R.make("l1_box", lam=1.0)
    with pytest.raises(ValueError, match="Box: radius must be a finite number > 0, got -1"):
        R.make("box", radius=-1)


# ---------------------------------------------------------------- sums


@pytest.mark.parametrize(
    "a, b, expected",
    [
        (R.Zero(), R.Nuclear(1.0), R.Nuclear(1.0)),
        (R.Box(2.0), R.Zero(), R.Box(2.0)),
        (R.Zero(), R.Zero(), R.Zero()),
        (R.L1(0.5), R.Box(2.0), R.L1Box(0.5, 2.0)),
        (R.Nuclear(0.5), R.SpectralBall(2.0), R.NuclearSpectral(0.5, 2.0)),
        (R.L1(0.5), R.L1(0.25), R.L1(0.75)),
        (R.Nuclear(0.5), R.Nuclear(0.25), R.Nuclear(0.75)),
        (R.L1Box(0.5, 2.0), R.L1(0.25), R.L1Box(0.75, 2.0)),
        (R.Box(2.0), R.Box(1.0), R.Box(1.0)),
    ],
)
def test_add_exact_sums(a, b, expected, rng):
    for got in (R.add(a, b), R.add(b, a), a + b, b + a):
        assert got == expected and type(got) is type(expected)
    # the sum's value is the sum of the values
    x = sample((4,) + ((3, 4) if expected.matrix_only else (5,)), rng, 0.3)
    nd = x.ndim - 1
    np.testing.assert_allclose(expected.value(x, nd), a.value(x, nd) + b.value(x, nd))


@pytest.mark.parametrize(
    "a, b",
    [(R.L1(1.0), R.Nuclear(1.0)), (R.L1(1.0), R.L1Ball(1.0)), (R.L2Ball(1.0), R.Box(1.0)),
     (R.Nuclear(1.0), R.Box(1.0)), (R.L1Box(1.0, 1.0), R.L2Ball(1.0))],
)
def test_add_unsupported_sums(a, b):
    with pytest.raises(ValueError) as err:
        a + b
    assert str(err.value).startswith(f"no exact prox for the sum of {a!r} and {b!r}; supported: ")
    assert "L1 + Box" in str(err.value)


def test_add_needs_regularizers():
    with pytest.raises(TypeError):
        R.L1(1.0) + 1.0
    with pytest.raises(TypeError):
        R.add(R.L1(1.0), 0.0)


# ---------------------------------------------------------------- blockwise


def test_blockwise_matches_per_block(rng):
    shapes = {"w": (3, 4), "b": (4,), "v": (5,)}
    reg = R.Blockwise({"w": R.Nuclear(0.5), "v": R.L1Box(0.2, 0.5)}, shapes)
    params = {name: sample((6,) + shape, rng, 0.3) for name, shape in shapes.items()}
    expected_value = R.Nuclear(0.5).value(params["w"], 2) + R.L1Box(0.2, 0.5).value(params["v"], 1)
    np.testing.assert_allclose(reg.value(params), expected_value)
    assert reg.is_constraint

    prox = reg.prox(params, 0.3)
    assert prox.keys() == params.keys()
    np.testing.assert_allclose(prox["w"], P.prox_nuclear(params["w"], 0.15))
    np.testing.assert_allclose(prox["v"], P.prox_l1_box(params["v"], 0.06, 0.5))
    np.testing.assert_array_equal(prox["b"], params["b"])

    sub = reg.subgradient(params)
    np.testing.assert_array_equal(sub["b"], 0.0)
    np.testing.assert_allclose(sub["v"], 0.2 * np.sign(params["v"]))
    np.testing.assert_allclose(sub["w"], R.Nuclear(0.5).subgradient(params["w"], 2))

    proj = reg.project(params)
    np.testing.assert_array_equal(proj["w"], params["w"])
    np.testing.assert_array_equal(proj["v"], np.clip(params["v"], -0.5, 0.5))
    np.testing.assert_array_equal(proj["b"], params["b"])


def test_blockwise_unbatched_value_is_float(rng):
    reg = R.Blockwise({"w": R.L1(2.0)}, {"w": (3,), "b": ()})
    params = {"w": np.array([1.0, -2.0, 0.5]), "b": np.array(7.0)}
    assert reg.value(params) == 7.0 and isinstance(reg.value(params), float)
    assert R.Blockwise({}, {"w": (3,)}).value(params) == 0.0


def test_blockwise_validation():
    with pytest.raises(ValueError, match=r"unknown block 'u'; known blocks: \['b', 'w'\]"):
        R.Blockwise({"u": R.L1(1.0)}, {"w": (3,), "b": (1,)})
    with pytest.raises(ValueError, match="Nuclear on block 'w' needs a 2-D block, got shape \\(3,\\)"):
        R.Blockwise({"w": R.Nuclear(1.0)}, {"w": (3,)})
    reg = R.Blockwise({"w": R.L1(1.0)}, {"w": (3,)})
    with pytest.raises(ValueError, match=r"block 'w' must end with shape \(3,\), got shape \(2, 4\)"):
        reg.value({"w": np.ones((2, 4))})
    with pytest.raises(ValueError, match="params have no block 'w'"):
        reg.prox({"b": np.ones(2)}, 1.0)
