"""E3/E4 linear classifiers: sklearn agreement, gradients, sparsity of FedDualAvg vs FedMiD,
feasibility of every constrained iterate, configuration errors."""
from __future__ import annotations

import copy

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

import fco_ray
from fco_ray.algorithms import ALGORITHMS
from fco_ray.algorithms.solvers import solve_centralized
from fco_ray.backends.local import LocalBackend
from fco_ray.core.config import parse_problem, parse_run
from fco_ray.ops import regularizers as R
from fco_ray.problems import build_problem
from fco_ray.problems.base import Problem
from fco_ray.runtime.errors import ConfigError

from tests.helpers import InfeasibleError, check_feasible, daily, run_one


def make(raw: dict, seed: int = 0):
    return build_problem(parse_problem(raw), seed)


def numeric_grad(problem, params, batch, eps=1e-6):
    """Central differences of the summed per-client loss w.r.t. every entry of every block."""
    out = {}
    for k, v in params.items():
        g = np.zeros_like(v)
        for idx in np.ndindex(v.shape):
            for sign in (1, -1):
                shifted = dict(params)
                shifted[k] = v.copy()
                shifted[k][idx] += sign * eps
                g[idx] += sign * problem.loss_and_grad(shifted, batch)[0].sum() / (2 * eps)
        out[k] = g
    return out


def random_batch(problem, rng, clients=3, size=5):
    """Stacked batch of real samples with random weights summing to one per client (one
    zero weight, like a padding row)."""
    pooled = problem.train.pooled()
    idx = rng.integers(0, len(pooled["y"]), (clients, size))
    batch = {k: v[idx] for k, v in pooled.items()}
    weight = rng.uniform(0.1, 1.0, (clients, size))
    weight[:, -1] = 0.0
    batch["weight"] = weight / weight.sum(axis=1, keepdims=True)
    return batch


@pytest.mark.parametrize("raw", [
    {"name": "sparse_logreg", "dataset": "breast_cancer"},
    {"name": "constrained_logreg"},
])
def test_gradient_matches_finite_differences(raw):
    problem = make(raw)
    rng = np.random.default_rng(1)
    # a small random model per client, so logits are away from saturation and all classes matter
    params = {k: 0.1 * rng.standard_normal((3,) + s) for k, s in problem.shapes.items()}
    batch = random_batch(problem, rng)
    loss, grads = problem.loss_and_grad(params, batch)
    assert loss.shape == (3,)
    expected = numeric_grad(problem, params, batch)
    for k in params:
        assert grads[k].shape == params[k].shape
        np.testing.assert_allclose(grads[k], expected[k], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("raw", [{"name": "sparse_logreg"}, {"name": "constrained_logreg"}])
def test_pooled_full_loss_equals_client_mean(raw):
    """The chunked pooled pass equals the base class's mean over clients of client losses."""
    problem = make(raw)
    rng = np.random.default_rng(2)
    params = {k: 0.3 * rng.standard_normal(s) for k, s in problem.shapes.items()}
    loss, grads = problem.full_loss_grad(params)
    ref_loss, ref_grads = Problem.full_loss_grad(problem, params)
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    for k in grads:
        np.testing.assert_allclose(grads[k], ref_grads[k], rtol=1e-10, atol=1e-14)


def test_centralized_l1_logreg_matches_sklearn_breast_cancer():
    """FISTA on F + lam ||w||_1 equals sklearn's C sum_i s_i f_i + ||w||_1 (saga, unpenalized
    intercept) with C = 1/(lam n) and s_i = n / (M n_m): the same objective times 1/(C n)."""
    lam = 0.01
    problem = make({"name": "sparse_logreg", "dataset": "breast_cancer", "lam": lam})
    ours = solve_centralized(problem, tol=1e-10, max_iter=20000)  # 3e-7 from its 1e-12 answer, in 1/6 the time
    pooled = problem.train.pooled()
    x, y = pooled["x"], pooled["y"]
    n, m = len(y), problem.num_clients
    weights = n / (m * np.repeat(problem.train.sizes, problem.train.sizes))
    clf = LogisticRegression(l1_ratio=1.0, solver="saga", C=1.0 / (lam * n), tol=1e-12, max_iter=100000)
    clf.fit(x, y, sample_weight=weights)
    theirs = {"w": clf.coef_[0], "b": np.array(clf.intercept_[0])}
    np.testing.assert_allclose(ours["w"], theirs["w"], atol=1e-6)
    assert float(ours["b"]) == pytest.approx(float(theirs["b"]), abs=1e-6)
    assert problem.objective(ours) == pytest.approx(problem.objective(theirs), rel=1e-9)
    support = np.abs(theirs["w"]) > 1e-8
    assert 0 < support.sum() < len(support)  # the penalty is active: a real l1 test
    np.testing.assert_array_equal(np.abs(ours["w"]) > 1e-8, support)


@pytest.mark.parametrize("seed", daily([(0,), (1,)], key=lambda case: "digits"))  # fast subset: seed 0
def test_feddualavg_sparser_than_fedmid_on_digits(seed):
    """l1 logistic regression, digits 3 vs 8, 20 label-skewed clients: tune (client_lr,
    server_lr) of each on a small grid by the training objective; FedDualAvg's best model is
    much sparser than FedMiD's at a comparable (no worse) loss and accuracy."""
    problem = {"name": "sparse_logreg", "lam": 0.01}
    best = {}
    for alg in ("fedmid", "feddualavg"):  # each grid one fused group (the numbers of its own runs)
        runs = fco_ray.run_grid({"problem": problem, "rounds": 200, "eval_every": 200, "seed": seed,
                                 "algorithm": {"name": alg}},
                                {"algorithm.client_lr": [0.03, 0.1, 0.3], "algorithm.server_lr": [0.3, 1.0]})
        runs = runs[runs["round"] == 200]
        assert (runs["status"] == "finished").all() and len(runs) == 6
        best[alg] = runs.loc[runs["train_loss"].idxmin()]
    dual, mid = best["feddualavg"], best["fedmid"]
    assert dual["density"] <= 0.6 * mid["density"], (dual["density"], mid["density"])
    assert dual["train_loss"] <= mid["train_loss"] * 1.02
    assert dual["val_accuracy"] >= mid["val_accuracy"] - 0.03
    assert dual["train_accuracy"] >= mid["train_accuracy"] - 0.03


def checked_problem(problem):
    """The problem as an instance of a subclass without a rule of its own, whose clients'
    gradients (called back from the algorithm's compiled rule, `fco_ray.rules.numpy_problem`)
    assert that every point a gradient is taken at is feasible, and count the calls."""

    class Checked(type(problem)):
        checked = 0

        def grad(self, params, rows, key, batch_size):
            check_feasible(self.psi, params, "client iterate")
            type(self).checked += 1
            return super().grad(params, rows, key, batch_size)

    wrapped = copy.copy(problem)
    wrapped.__class__ = Checked
    return wrapped


def run_checked(problem, name, rounds, **hp):
    """A run of the registered algorithm that asserts the server's model is feasible after
    every round (its state at every round, as checkpoints see it: not only evaluated rounds),
    and, for the methods whose clients take gradients only at prox outputs, every client
    iterate a gradient is taken at."""
    algorithm = ALGORITHMS[name](ALGORITHMS[name].Hyper(name=name, **hp))
    wrapped = checked_problem(problem) if name in ("fedmid", "feddualavg") else problem
    seen = []

    def check(snapshot):
        group_state = snapshot.state
        state = {k: (v[0] if isinstance(v, np.ndarray) else {b: x[0] for b, x in v.items()})
                 for k, v in group_state.items()}
        check_feasible(problem.psi, algorithm.output(problem, state), f"{name} round {snapshot.round}")
        seen.append(snapshot.round)

    result = run_one(wrapped, algorithm, LocalBackend(wrapped), rounds=rounds, eval_every=rounds, seed=0,
                     checkpoint_every=1, on_checkpoint=check)
    assert result.status == "finished"
    assert seen == list(range(1, rounds + 1))
    if name in ("fedmid", "feddualavg"):  # clients take gradients only at prox outputs
        assert type(wrapped).checked == rounds * algorithm.hp.local_steps  # one call a step, all clients
    return result.records[-1]


#: (algorithm, constraint): the fast subset runs each ball once, FedMiD's rule on one and
#: FedDualAvg's on the other
CONSTRAINED = [("fedmid", "l1_ball"), ("feddualavg", "l2_ball"),
               *((a, c) for c in ("l1_ball", "l2_ball") for a in ("fedmid", "fedmid_osp", "feddualavg", "feddualavg_osp")
                 if (a, c) not in {("fedmid", "l1_ball"), ("feddualavg", "l2_ball")})]


@pytest.mark.parametrize("name, constraint", daily(
    [pytest.param(a, c, id=f"{a}-{c}") for a, c in CONSTRAINED]))
def test_constrained_logreg_iterates_feasible(constraint, name):
    """15 rounds on balls the unprojected iterates leave by round 10 (FedAvg's model: ||w||_1
    above 100 at round 10; ||w||_2 5.9 at round 10, but only 9.6 at round 30, so the l2 ball
    is the default's half), so every check after that meets an active constraint."""
    default = make({"name": "constrained_logreg", "constraint": constraint}).psi.regs["w"].radius
    assert default == {"l1_ball": 100.0, "l2_ball": 10.0}[constraint]
    radius = {"l1_ball": 100.0, "l2_ball": 5.0}[constraint]
    problem = make({"name": "constrained_logreg", "constraint": constraint, "radius": radius})
    last = run_checked(problem, name, rounds=15, client_lr=0.3)
    assert problem.psi.regs["w"].radius == radius
    assert last["train_accuracy"] > 0.5  # it learns, from 10 % at the start
    assert np.isfinite(last["train_loss"])


def test_check_feasible_detects_violations():
    psi = R.Blockwise({"w": R.L1Ball(1.0)}, {"w": (2, 2), "b": (2,)})
    check_feasible(psi, {"w": np.full((2, 2), 0.25), "b": np.full(2, 100.0)})  # bias is free
    with pytest.raises(InfeasibleError, match="block 'w'"):
        check_feasible(psi, {"w": np.full((2, 2), 0.3), "b": np.zeros(2)})
    batched = {"w": np.stack([np.full((2, 2), 0.2), np.full((2, 2), 0.5)]), "b": np.zeros((2, 2))}
    with pytest.raises(InfeasibleError, match="1 of 2 models"):
        check_feasible(psi, batched)


def test_fedavg_leaves_the_constraint_set_and_is_reported_diverged():
    """Without a projection FedAvg's model leaves the l1 ball: its objective (loss + indicator)
    is infinite, so the run is flagged instead of silently reporting a constrained loss."""
    df = fco_ray.run({"problem": {"name": "constrained_logreg", "radius": 1.0}, "rounds": 20,
                      "eval_every": 1, "algorithm": {"name": "fedavg", "client_lr": 0.3}})
    assert df.attrs["status"] == "diverged"


def test_metrics_and_defaults():
    problem = make({"name": "sparse_logreg"})
    assert problem.psi.regs["w"] == R.L1(1e-3) and "b" not in problem.psi.regs
    assert problem.num_clients == 20 and problem.shapes == {"w": (64,), "b": ()}
    assert set(np.unique(problem.train.pooled()["y"])) == {0, 1}
    params = {"w": np.r_[np.ones(8), np.zeros(56)], "b": np.array(0.5)}
    metrics = problem.metrics(params)
    assert metrics["density"] == 8 / 64
    assert set(metrics) == {"train_loss", "train_accuracy", "val_accuracy", "density"}
    assert metrics["train_loss"] == pytest.approx(problem.loss(params) + 1e-3 * 8)
    pooled = problem.train.pooled()
    pred = (pooled["x"] @ params["w"] + 0.5 > 0).astype(int)
    assert metrics["train_accuracy"] == pytest.approx(np.mean(pred == pooled["y"]))


@pytest.mark.parametrize("raw, match", [
    ({"name": "sparse_logreg", "classes": [4, 4]}, "classes"),
    ({"name": "sparse_logreg", "dataset": "digits", "path": "/data"}, "path"),
    ({"name": "sparse_logreg", "dataset": "haxby", "clients": 5}, "clients"),
    ({"name": "sparse_logreg", "val_subjects": [7]}, "subjects"),
    ({"name": "sparse_logreg", "lam": -1}, "lam"),
    ({"name": "constrained_logreg", "constraint": "linf_ball"}, "constraint"),
    ({"name": "constrained_logreg", "radius": 0}, "radius"),
    ({"name": "constrained_logreg", "alpha": 0}, "alpha"),
    ({"name": "constrained_logreg", "clients": 5000}, "clients"),
    ({"name": "constrained_logreg", "path": "/nonexistent/emnist"}, "fed_emnist_digitsonly_train.h5"),
])
def test_bad_config_is_a_config_error(raw, match):
    cfg = {"problem": raw, "algorithm": {"name": "fedmid"}, "rounds": 1}
    with pytest.raises(ConfigError, match=match):
        fco_ray.core.plan.build(parse_run(cfg))
