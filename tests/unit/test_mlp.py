"""E4 constrained MLP: gradients, vectorization over clients, constraint on weights only,
feasibility of every iterate of a short federated run."""
from __future__ import annotations

import numpy as np
import pytest

from fco_ray.core.config import parse_problem
from fco_ray.ops import regularizers as R
from fco_ray.problems import build_problem

from tests.helpers import check_feasible, daily
from tests.unit.test_logistic import numeric_grad, random_batch, run_checked


def make(**params):
    return build_problem(parse_problem({"name": "mlp", **params}), 0)


def test_default_architecture_and_constraint_on_weight_matrices_only():
    problem = make()
    assert [problem.shapes[f"w{i}"] for i in range(3)] == [(64, 200), (200, 200), (200, 10)]
    assert [problem.shapes[f"b{i}"] for i in range(3)] == [(200,), (200,), (10,)]
    assert problem.psi.regs == {f"w{i}": R.L1Ball(300.0) for i in range(3)}  # one ball per matrix
    params = problem.init_params(np.random.default_rng(0))
    check_feasible(problem.psi, params, "init")
    # the initial point is the projection of a Glorot draw: the balls are active
    for i in range(3):
        assert np.abs(params[f"w{i}"]).sum() <= 300.0 * (1 + 1e-9)
    assert np.abs(params["w1"]).sum() == pytest.approx(300.0)
    assert make(constraint="l2_ball").psi.regs["w0"] == R.L2Ball(10.0)


def test_gradient_matches_finite_differences():
    problem = make(hidden=[5, 4])
    rng = np.random.default_rng(3)
    params = {k: 0.5 * rng.standard_normal((3,) + s) for k, s in problem.shapes.items()}
    batch = random_batch(problem, rng, clients=3, size=4)
    # keep pre-activations away from the relu kink, where finite differences are not valid
    for i in range(2):
        z = problem.forward(params, batch["x"])[i] @ params[f"w{i}"] + params[f"b{i}"][:, None]
        assert np.abs(z).min() > 1e-4
    loss, grads = problem.loss_and_grad(params, batch)
    expected = numeric_grad(problem, params, batch)
    for k in params:
        np.testing.assert_allclose(grads[k], expected[k], rtol=1e-5, atol=1e-7)


def test_clients_are_independent_in_the_batched_computation():
    """Client c's loss and gradient in the stack equal those computed for c alone."""
    problem = make(hidden=[16, 8])
    rng = np.random.default_rng(4)
    params = {k: 0.3 * rng.standard_normal((4,) + s) for k, s in problem.shapes.items()}
    batch = random_batch(problem, rng, clients=4, size=6)
    loss, grads = problem.loss_and_grad(params, batch)
    for c in range(4):
        one_loss, one_grads = problem.loss_and_grad({k: v[c:c + 1] for k, v in params.items()},
                                                    {k: v[c:c + 1] for k, v in batch.items()})
        assert one_loss[0] == pytest.approx(loss[c], rel=1e-12)
        for k in grads:
            np.testing.assert_allclose(one_grads[k][0], grads[k][c], rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("name", daily(  # fast subset: FedMiD's rule and FedDualAvg's once each
    [("fedmid",), ("feddualavg",), ("fedmid_osp",), ("feddualavg_osp",)], key=lambda case: case[0].removesuffix("_osp")))
def test_constrained_mlp_iterates_feasible_and_it_learns(name):
    """10 rounds: the balls are active from the first rounds (unprojected, FedAvg leaves them
    before round 5); accuracies 0.73-0.83 at round 10."""
    problem = make(hidden=[32, 32], radius=60.0)
    last = run_checked(problem, name, rounds=10, client_lr=0.3)
    assert last["train_accuracy"] > 0.6  # 10 classes: chance is 0.1
    assert last["val_accuracy"] > 0.6
