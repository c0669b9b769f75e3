"""Composite saddle problems and algorithms: closed-form duality gaps against numerical
max/min, operators, update rules against per-client reference loops, adversarial training."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

import fco_ray
from fco_ray.algorithms import ALGORITHMS
from fco_ray.backends.local import LocalBackend
from fco_ray.core.config import parse_problem, parse_run
from fco_ray.core.group import INIT_TAG
from fco_ray.ops.random import NOISE, NOISE2, Key, generator
from fco_ray.problems import build_problem
from fco_ray.problems.adversarial import render_attack
from fco_ray.runtime.errors import ConfigError

from tests.helpers import daily, run_one

LAM, D = 0.1, 0.05


def problem(name="bilinear_l1", **kw):
    return build_problem(parse_problem({"name": name, **kw}), 0)


# ---- numerical max / min, independent of the closed form -------------------------------
def lp_max_l1(r, lam, d):
    """max_{|v|_inf <= d} <r, v> - lam ||v||_1 by linprog with v = v+ - v-, v+-, >= 0."""
    n = len(r)
    res = linprog(np.concatenate([-r + lam, r + lam]), bounds=[(0, d)] * (2 * n), method="highs")
    assert res.status == 0
    return -res.fun


def numeric_max_nuclear(r, lam, d, iters=1500, restarts=2, seed=0):
    """max_{||V||_2 <= d} <R, V> - lam ||V||_* numerically, without the closed form.

    Factorized (Burer-Monteiro) form V = P Q^T: ||V||_* = min (||P||_F^2 + ||Q||_F^2) / 2 over
    factorizations, and the balanced factors of a V with ||V||_2 <= d have ||P||_2, ||Q||_2 <= sqrt(d).
    So the maximum equals max <R, P Q^T> - lam/2 (||P||^2 + ||Q||^2) over ||P||_2, ||Q||_2 <= sqrt(d),
    a smooth problem solved by projected gradient ascent (best of a few random starts). The
    returned value is <R, V> - lam ||V||_* of a feasible V: a lower bound of the maximum."""
    n, p = r.shape
    k = min(n, p)
    rng = np.random.default_rng(seed)
    step = 0.9 / (np.linalg.norm(r, 2) + lam)

    def ball(m):
        u, s, vh = np.linalg.svd(m, full_matrices=False)
        return (u * np.minimum(s, np.sqrt(d))) @ vh

    best = -np.inf
    for _ in range(restarts):
        fp, fq = rng.normal(0, np.sqrt(d), (n, k)), rng.normal(0, np.sqrt(d), (p, k))
        for _ in range(iters):
            fp, fq = ball(fp + step * (r @ fq - lam * fp)), ball(fq + step * (r.T @ fp - lam * fq))
        v = fp @ fq.T
        best = max(best, float(np.sum(r * v) - lam * np.linalg.svd(v, compute_uv=False).sum()))
    return best


def numeric_gap(p, z, vmax, lam=LAM):
    """Gap = lam||x|| + max_y [<Ax - b, y> - lam||y||] + <b, y> + lam||y|| + max_x [<-A^T y, x> - lam||x||]."""
    x, y = z["x"], z["y"]
    norm = (lambda v: np.abs(v).sum()) if x.ndim == 1 else (lambda v: np.linalg.svd(v, compute_uv=False).sum())
    return (lam * norm(x) + vmax(p.a @ x - p.b) + np.sum(p.b * y) + lam * norm(y) + vmax(-p.a.T @ y))


def random_feasible(p, rng):
    """Random feasible points with some exact zeros and some entries on the bound."""
    z = p.psi.project({k: rng.uniform(-2 * D, 2 * D, size=s) for k, s in p.shapes.items()})
    if z["x"].ndim == 1:
        for v in z.values():
            v[rng.random(v.shape) < 0.3] = 0.0
    return z


def test_l1_gap_matches_linprog_and_is_nonnegative():
    p = problem(n=4, m=6)
    rng = np.random.default_rng(1)
    for _ in range(20):
        z = random_feasible(p, rng)
        closed = p.duality_gap(z)
        numeric = numeric_gap(p, z, lambda r: lp_max_l1(r, LAM, D))
        assert closed == pytest.approx(numeric, abs=1e-9)
        assert closed >= 0


def lp_saddle_l1(a, b, lam, d):
    """x* = argmin_x max_y phi and y* = argmax_y min_x phi, each one LP:
    min_x d sum_i t_i + lam sum_j u_j, t >= |Ax - b| - lam, t >= 0, u >= |x|, |x| <= d
    (and the mirror LP in y with A^T, plus the linear term <b, y>)."""
    def solve(mat, lin, rhs_shift):
        n, m = mat.shape
        eye, zero = np.eye, np.zeros
        cost = np.concatenate([lin, lam * np.ones(m), d * np.ones(n)])
        a_ub = np.vstack([np.hstack([eye(m), -eye(m), zero((m, n))]),
                          np.hstack([-eye(m), -eye(m), zero((m, n))]),
                          np.hstack([mat, zero((n, m)), -eye(n)]),
                          np.hstack([-mat, zero((n, m)), -eye(n)])])
        b_ub = np.concatenate([zero(2 * m), rhs_shift + lam, -rhs_shift + lam])
        res = linprog(cost, A_ub=a_ub, b_ub=b_ub, method="highs",
                      bounds=[(-d, d)] * m + [(0, None)] * (m + n))
        assert res.status == 0
        return res.x[:m]
    n, m = a.shape
    x = solve(a, np.zeros(m), b)
    y = solve(a.T, b, np.zeros(m))  # min_y d sum (|A^T y| - lam)_+ + <b, y> + lam ||y||_1
    return x, y


def test_l1_gap_vanishes_at_lp_saddle_point():
    p = problem(n=4, m=6)
    x, y = lp_saddle_l1(p.a, p.b, LAM, D)
    z = {"x": x, "y": y}
    assert p.duality_gap(z) == pytest.approx(0.0, abs=1e-9)
    rng = np.random.default_rng(0)
    moved = p.psi.project({"x": x + rng.normal(0, 0.01, x.shape), "y": y})
    assert p.duality_gap(moved) > 1e-4


def test_nuclear_gap_matches_numeric_max_and_is_nonnegative():
    p = problem("bilinear_nuclear", n=4, m=5, p=3, rank=2)
    rng = np.random.default_rng(2)
    for i in range(4):
        z = random_feasible(p, rng)
        closed = p.duality_gap(z)
        numeric = numeric_gap(p, z, lambda r: numeric_max_nuclear(r, LAM, D, seed=i))
        assert numeric <= closed + 1e-9  # numerical maxima are lower bounds ...
        assert numeric == pytest.approx(closed, abs=1e-7)  # ... that reach the closed form
        assert closed >= 0


def extragradient_saddle(p, iters):
    """Deterministic centralized extragradient with prox (Korpelevich / Tseng), written here
    independently of the package's algorithms: the last iterate of a small problem."""
    z = p.psi.project({k: np.zeros(s) for k, s in p.shapes.items()})
    step = 0.5 / np.linalg.norm(p.a, 2)

    def op(w):
        return {"x": p.a.T @ w["y"], "y": p.b - p.a @ w["x"]}

    for _ in range(iters):
        g = op(z)
        h = p.psi.prox({k: z[k] - step * g[k] for k in z}, step)
        gh = op(h)
        z = p.psi.prox({k: z[k] - step * gh[k] for k in z}, step)
    return z


def test_nuclear_gap_vanishes_at_an_accurate_saddle_point():
    # lam = 0.03 makes the saddle point non-trivial: X and Y of rank 2, inside and on the ball
    lam = 0.03
    p = problem("bilinear_nuclear", n=5, m=6, p=3, rank=2, lam=lam)
    start = p.duality_gap(p.psi.project({k: np.full(s, 0.03) for k, s in p.shapes.items()}))
    coarse, saddle = extragradient_saddle(p, 30), extragradient_saddle(p, 3000)
    assert np.linalg.matrix_rank(saddle["x"], tol=1e-3) == 2
    assert np.linalg.matrix_rank(saddle["y"], tol=1e-3) == 2
    assert p.duality_gap(saddle) < 1e-8 * start
    assert p.duality_gap(coarse) > 1e3 * abs(p.duality_gap(saddle))  # shrinks with accuracy
    # and the numerical gap of that saddle point vanishes too
    numeric = numeric_gap(p, saddle, lambda r: numeric_max_nuclear(r, lam, D), lam=lam)
    assert numeric == pytest.approx(0.0, abs=1e-8)


def test_infeasible_points_have_infinite_gap_and_objective():
    p = problem(n=4, m=6)
    z = {"x": np.full(6, 2 * D), "y": np.zeros(4)}
    assert p.duality_gap(z) == np.inf
    assert p.metrics(z)["train_loss"] == np.inf


def rule_operator(p, z, m, k, stream, seed=0, rnd=5):
    """The problem rule's operator (fco_ray.rules.problems.Bilinear) of client m at one model z,
    compiled as the rounds call it (op by op, each operation would compile a program per shape)."""
    import jax

    from fco_ray.rules.problems import Client

    rule = p.make_rule(None)
    me = Client(np.uint64(seed), np.uint64(rnd), np.uint64(m), np.int64(1), np.int64(0))
    grad = jax.jit(rule.grad, static_argnums=(3, 4))
    return {b: np.asarray(v) for b, v in grad(rule.arrays(), z, me, k, stream).items()}


def test_operator_is_grad_x_and_minus_grad_y_with_independent_noise():
    p = problem(n=4, m=6, clients=3)
    quiet = problem(n=4, m=6, clients=3, noise=0.0)
    rng = np.random.default_rng(0)
    z = {k: rng.uniform(-D, D, size=s) for k, s in p.shapes.items()}
    exact = rule_operator(quiet, z, 0, 0, NOISE)
    np.testing.assert_allclose(exact["x"], z["y"] @ p.a)
    np.testing.assert_allclose(exact["y"], p.b - z["x"] @ p.a.T)
    # f's gradient by finite differences
    f = lambda w: float(np.sum((p.a @ w["x"] - p.b) * w["y"]))  # noqa: E731
    for k, sign in (("x", 1.0), ("y", -1.0)):
        e = np.zeros_like(z[k])
        e[1] = 1e-6
        fd = (f({**z, k: z[k] + e}) - f({**z, k: z[k] - e})) / 2e-6
        assert sign * exact[k][1] == pytest.approx(fd, rel=1e-6)
    # noise: at z = 0 the operator is (0, b), so grad - (0, b) is the noise itself
    big = problem(n=300, m=600, clients=2)
    z0 = {k: np.zeros(s) for k, s in big.shapes.items()}

    def noise(stream, client=0):
        g = rule_operator(big, z0, client, 0, stream, seed=1, rnd=0)
        return np.concatenate([g["x"].ravel(), (g["y"] - big.b).ravel()])

    n1, n2 = noise(NOISE), noise(NOISE2)
    np.testing.assert_array_equal(n1, noise(NOISE))  # a pure function of the key
    assert np.std(n1) == pytest.approx(0.1, rel=0.05) and abs(np.mean(n1)) < 0.01
    assert abs(np.corrcoef(n1, n2)[0, 1]) < 0.1  # the two calls of a step: independent draws
    assert abs(np.corrcoef(n1[:300], n1[600:900])[0, 1]) < 0.15  # blocks: different numbers
    assert abs(np.corrcoef(n1, noise(NOISE, client=1))[0, 1]) < 0.1  # clients: different numbers


def test_metrics_density_and_ranks():
    p = problem("bilinear_nuclear", n=6, m=8, p=4, rank=2)
    x = np.zeros((8, 4))
    x[0, 0], x[1, 1] = 0.04, 0.03
    y = np.zeros((6, 4))
    y[2, 3] = 1e-6  # below the 1e-5 threshold: counts as zero
    m = p.metrics({"x": x, "y": y})
    assert m["rank"] == 2 and m["rank_y"] == 0
    assert m["density"] == pytest.approx(2 / (32 + 24))
    assert m["density_x"] == pytest.approx(2 / 32) and m["density_y"] == 0
    nuclear_b = problem("bilinear_nuclear", rank=10)
    assert np.linalg.matrix_rank(nuclear_b.b) == 10 and nuclear_b.b.shape == (300, 20)
    z0 = nuclear_b.init_params(generator(0, INIT_TAG))
    assert np.linalg.norm(z0["x"], 2) <= D + 1e-12  # the paper's U[-1, 1] start, projected


# ---- update rules against per-client reference loops ----------------------------------
def prox(p, z, t):
    return p.psi.prox(z, t)


def grad1(p, z, m, rnd, k, stream, seed):
    """Operator of client m alone, written from its formula: (A^T y, b - A x) plus sigma N(0, 1)
    per entry, one draw of nx + ny numbers (x first) keyed by (seed, round, step k, stream,
    the global client id m)."""
    g = {"x": p.a.T @ z["y"], "y": p.b - p.a @ z["x"]}
    sigma = p.info["noise"]
    if sigma:
        nx = z["x"].size
        noise = sigma * Key(seed, rnd, np.array([m])).with_step(k, stream).normal((nx + z["y"].size,))[0]
        g = {"x": g["x"] + noise[:nx].reshape(z["x"].shape), "y": g["y"] + noise[nx:].reshape(z["y"].shape)}
    return g


def ref_feddualex(p, z0, rounds, lr, slr, steps, seed):
    """Algorithm 1 client by client; the ergodic output is the mean over rounds r and steps k of
    the shadow point P_{t+1}(sbar - mean_m (s^m_k + lr g_m(z^m_k))), the prox of the clients'
    averaged half-step dual (not the mean of the clients' z_half)."""
    s = {k: np.zeros_like(v) for k, v in z0.items()}
    sbar, shadows = z0, []
    for r in range(rounds):
        new, halfduals = [], [[] for _ in range(steps)]
        for m in range(p.num_clients):
            sk = dict(s)
            for k in range(steps):
                t = slr * r * steps + k
                zk = prox(p, {b: sbar[b] - sk[b] for b in s}, lr * t)
                g = grad1(p, zk, m, r, k, NOISE, seed)
                halfduals[k].append({b: sk[b] + lr * g[b] for b in s})
                zh = prox(p, {b: sbar[b] - sk[b] - lr * g[b] for b in s}, lr * (t + 1))
                gh = grad1(p, zh, m, r, k, NOISE2, seed)
                sk = {b: sk[b] + lr * gh[b] for b in s}
            new.append(sk)
        for k in range(steps):
            t = slr * r * steps + k
            avg = {b: np.mean([h[b] for h in halfduals[k]], axis=0) for b in s}
            shadows.append(prox(p, {b: sbar[b] - avg[b] for b in s}, lr * (t + 1)))
        s = {b: s[b] + slr * np.mean([c[b] - s[b] for c in new], axis=0) for b in s}
    out = prox(p, {b: sbar[b] - s[b] for b in s}, lr * slr * rounds * steps)
    return out, {b: np.mean([h[b] for h in shadows], axis=0) for b in s}


def ref_primal(p, z0, rounds, lr, slr, steps, seed, kind):
    z, halves = z0, []
    psi = p.psi

    def step(w, g, at):
        if kind.startswith("fedmip"):
            return prox(p, {b: w[b] - lr * g[b] for b in w}, lr)
        sub = psi.subgradient(at)
        return psi.project({b: w[b] - lr * (g[b] + sub[b]) for b in w})

    for r in range(rounds):
        ends = []
        for m in range(p.num_clients):
            w = dict(z)
            for k in range(steps):
                zh = step(w, grad1(p, w, m, r, k, NOISE, seed), w)
                if kind == "pgda":
                    w = zh
                else:
                    w = step(w, grad1(p, zh, m, r, k, NOISE2, seed), zh)
                halves.append(zh)
            ends.append(w)
        z = {b: z[b] + slr * np.mean([e[b] - z[b] for e in ends], axis=0) for b in z}
        z = prox(p, z, slr * lr * steps) if kind == "fedmip" else psi.project(z)  # fedmip_noprox too
    return z, {b: np.mean([h[b] for h in halves], axis=0) for b in z}


def ref_composite(p, z0, rounds, lr, slr, steps, seed, kind):
    """FedDualAvg / FedMiD (fco_ray/algorithms/composite.py) driven by the saddle operator, stream BATCH."""
    from fco_ray.ops.random import BATCH
    z, etat = z0, 0.0
    for r in range(rounds):
        ends = []
        for m in range(p.num_clients):
            w = dict(z)
            for k in range(steps):
                if kind == "feddualavg":
                    g = grad1(p, prox(p, w, etat + lr * k), m, r, k, BATCH, seed)
                    w = {b: w[b] - lr * g[b] for b in w}
                else:
                    g = grad1(p, w, m, r, k, BATCH, seed)
                    w = prox(p, {b: w[b] - lr * g[b] for b in w}, lr)
            ends.append(w)
        z = {b: z[b] + slr * np.mean([e[b] - z[b] for e in ends], axis=0) for b in z}
        if kind == "feddualavg":
            etat += slr * lr * steps
        else:
            z = prox(p, z, slr * lr * steps)
    return prox(p, z, etat) if kind == "feddualavg" else z


@pytest.mark.parametrize("name, kind", daily(  # fast subset: each algorithm on one problem
    [(n, k) for k in ("bilinear_l1", "bilinear_nuclear")
     for n in ("feddualex", "fedmip", "fedmip_noprox", "extragrad_local_sgd", "pgda", "feddualavg", "fedmid")],
    key=lambda case: case[0]))
def test_update_rules_match_reference_loops(name, kind):
    shape = {"n": 4, "m": 6} if kind == "bilinear_l1" else {"n": 4, "m": 5, "p": 3, "rank": 2}
    p = problem(kind, clients=3, **shape)
    seed, rounds, lr, slr, steps = 3, 3, 0.2, 0.7, 2
    cfg = {"problem": {"name": kind, "clients": 3, "data_seed": 0, **shape},
           "algorithm": {"name": name.removesuffix("_noprox"), "client_lr": lr, "server_lr": slr,
                         "local_steps": steps, "clients_per_round": None, "batch_size": None,
                         **({"server_prox": False} if name == "fedmip_noprox" else {})},
           "rounds": rounds, "eval_every": rounds, "seed": seed}
    algo = ALGORITHMS[cfg["algorithm"]["name"]](parse_run(cfg).algorithm)
    result = run_one(p, algo, LocalBackend(p, chunk_size=2), rounds=rounds, eval_every=rounds,
                        seed=seed)
    got = algo.output(p, result.state)
    z0 = p.init_params(generator(seed, INIT_TAG))
    if name == "feddualex":
        want, ergodic = ref_feddualex(p, z0, rounds, lr, slr, steps, seed)
    elif name in ("feddualavg", "fedmid"):
        want, ergodic = ref_composite(p, z0, rounds, lr, slr, steps, seed, name), None
    else:
        rule = name if name in ("fedmip", "fedmip_noprox", "pgda") else "extra"
        want, ergodic = ref_primal(p, z0, rounds, lr, slr, steps, seed, rule)
    for b in want:
        np.testing.assert_allclose(got[b], want[b], atol=1e-12)
    if ergodic is not None:
        extra = algo.extra_outputs(p, result.state)["ergodic"]
        for b in ergodic:
            np.testing.assert_allclose(extra[b], ergodic[b], atol=1e-12)


def test_feddualex_first_primal_is_z0_and_run_reports_ergodic_metrics():
    cfg = {"problem": {"name": "bilinear_l1", "n": 5, "m": 7, "clients": 4},
           "algorithm": {"name": "feddualex", "client_lr": 0.1, "local_steps": 2,
                         "clients_per_round": None, "batch_size": None},
           "rounds": 4, "eval_every": 2}
    df = fco_ray.run(cfg)
    assert df.attrs["status"] == "finished"
    for col in ("duality_gap", "duality_gap_ergodic", "density", "density_ergodic", "train_loss"):
        assert col in df
    assert df["duality_gap"].iloc[0] == df["duality_gap_ergodic"].iloc[0]  # both are z_0 at round 0
    # the ergodic output costs the K = 2 half-step duals per client: 1 + K times the upload
    quiet = fco_ray.run({**cfg, "algorithm": {**cfg["algorithm"], "ergodic": False}})
    assert "duality_gap_ergodic" not in quiet
    assert quiet["floats_up"].iloc[-1] * 3 == df["floats_up"].iloc[-1]
    np.testing.assert_allclose(quiet["duality_gap"], df["duality_gap"])


def test_bad_saddle_configs_name_the_key():
    with pytest.raises(ConfigError, match="problem.rank"):
        parse_run({"problem": {"name": "bilinear_nuclear", "p": 4, "rank": 5},
                   "algorithm": {"name": "feddualex"}})
    with pytest.raises(ConfigError, match="problem.radius"):
        parse_run({"problem": {"name": "bilinear_l1", "radius": 0}, "algorithm": {"name": "fedmip"}})
    with pytest.raises(ConfigError, match="algorithm.ergodic"):
        parse_run({"problem": {"name": "bilinear_l1"}, "algorithm": {"name": "pgda", "ergodic": "often"}})


# ---- adversarial training -------------------------------------------------------------
def test_adversarial_gradient_operator_and_metrics(tmp_path):
    p = problem("adversarial", clients=5, alpha=1.0)
    assert p.num_clients == 5 and set(p.shapes) == {"W", "delta"}
    rng = np.random.default_rng(0)
    z = {"W": rng.normal(0, 0.5, (64, 10)), "delta": rng.uniform(-D, D, 64)}
    loss, grads = p.full_loss_grad(z)
    for block, idx in (("W", (3, 4)), ("delta", (10,))):
        e = np.zeros_like(z[block])
        e[idx] = 1e-6
        fd = (p.loss({**z, block: z[block] + e}) - p.loss({**z, block: z[block] - e})) / 2e-6
        assert grads[block][idx] == pytest.approx(fd, rel=1e-5, abs=1e-9)
    stacked = {k: np.repeat(v[None], 5, 0) for k, v in z.items()}
    op = p.grad(stacked, np.arange(5), Key(0, 0, np.arange(5)), None)
    full = p.loss_and_grad(stacked, {**p.train.arrays, "weight": p.train.full_weights()})[1]
    np.testing.assert_allclose(op["delta"], -full["delta"])  # ascent in delta
    np.testing.assert_allclose(op["W"], full["W"])
    m = p.metrics(z)
    assert m["train_loss"] == pytest.approx(loss - LAM * np.abs(z["delta"]).sum())
    assert 0 <= m["val_accuracy"] <= 1 and m["density"] == 1.0
    out = render_attack(np.where(np.arange(64) % 3 == 0, 0.05, 0.0), tmp_path / "attack.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_with_an_intercept_the_universal_attack_has_no_mean_gradient():
    """grad_delta f = W grad_b f: at an optimal intercept the attack's gradient vanishes."""
    p = problem("adversarial", clients=5, alpha=1.0, bias=True)
    rng = np.random.default_rng(1)
    z = {"W": rng.normal(0, 0.5, (64, 10)), "b": rng.normal(0, 1, 10), "delta": rng.uniform(-D, D, 64)}
    _, g = p.full_loss_grad(z)
    np.testing.assert_allclose(g["delta"], z["W"] @ g["b"], atol=1e-12)
