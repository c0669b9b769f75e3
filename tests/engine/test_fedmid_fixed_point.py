"""Where FedMiD and FedMiD-OSP end (docs/fedmid_fixed_point.md): with deterministic gradients
(full batch, every client every round) the iteration is a fixed map, and its fixed point is
not the minimizer of F + psi that the FCO paper's FedMiD is meant to find.

With client prox on every step and the server prox_{eta_s eta_c K psi} (Algorithm 2 as
written), w is a fixed point iff (1 / (eta_c K)) mean_m (w^m_K(w) - w) lies in d psi(w), where
w^m_K(w) is client m's K proximal gradient steps from w. Hence:
  * eta_s drops out: the fixed point is the same for every server rate;
  * one client, K = 1, psi = lam ||.||_1 or lam ||.||_*: the server's threshold composes with the
    client's (S_a o S_b = S_{a+b}), so FedMiD is proximal gradient descent on F + 2 psi, and it
    ends exactly at the minimizer of F + 2 psi (lam doubled);
  * several heterogeneous clients, any K: the fixed point is argmin F + 2 psi + O(eta_c K),
    first order in eta_c (client drift);
  * FedMiD-OSP (plain client steps, the same server prox): argmin F + psi exactly at K = 1 for
    any clients and rates, + O(eta_c K) otherwise.
Every reference point below is computed by the centralized solver (FISTA, and scikit-learn's
Lasso for one case), never taken from a recorded run.
"""
import numpy as np
import pytest
from sklearn.linear_model import Lasso

from fco_ray import run
from fco_ray.algorithms.solvers import solve_centralized
from fco_ray.api import resolve
from fco_ray.problems import build_problem

LAM = 0.1
# small E1-style LASSO: d = 20, support 5, heterogeneous clients (feature shift 0.3)
LASSO = dict(name="lasso", dim=20, support=5, clients=4, samples_per_client=40, val_clients=1,
             shift=0.3, lam=LAM)
ONE_CLIENT = dict(LASSO, clients=1, samples_per_client=160)
LOWRANK = dict(name="lowrank", dim=6, rank=3, clients=1, samples_per_client=120, val_clients=1,
               lam=0.3)


def optimum(problem: dict, lam: float):
    """argmin F + lam * norm on the run's own training data (seed 0), by FISTA."""
    built = build_problem(resolve({"problem": {**problem, "lam": lam},
                                   "algorithm": {"name": "fedmid"}}).problem, 0)
    return solve_centralized(built, tol=1e-14, max_iter=200_000), built


def federated(problem: dict, name: str, client_lr: float, server_lr: float, steps: int,
              rounds: int):
    """The server model after `rounds` rounds of full-batch, full-participation training."""
    frame, model = run({"problem": problem, "rounds": rounds, "eval_every": rounds,
                        "algorithm": {"name": name, "client_lr": client_lr, "server_lr": server_lr,
                                      "local_steps": steps, "batch_size": None,
                                      "clients_per_round": None}}, return_model=True)
    assert frame.attrs["status"] == "finished"
    return model


def federated_rates(problem: dict, name: str, client_lr: float, server_lrs, steps: int,
                    rounds: int) -> list[dict]:
    """`federated` at each of `server_lrs`, run as one fused group: the server models."""
    from fco_ray.core.config import parse_run

    from tests.helpers import run_group

    configs = [parse_run({"problem": problem, "rounds": rounds, "eval_every": rounds,
                          "algorithm": {"name": name, "client_lr": client_lr, "server_lr": s,
                                        "local_steps": steps, "batch_size": None,
                                        "clients_per_round": None}}) for s in server_lrs]
    ends = run_group(configs)
    assert [r.status for r, _ in ends] == ["finished"] * len(configs)
    return [model for _, model in ends]


def vec(model) -> np.ndarray:
    return np.concatenate([np.ravel(model[k]) for k in sorted(model)])


def dist(a, b) -> float:
    """Relative distance of model a from model b (every block, the intercept too)."""
    return float(np.linalg.norm(vec(a) - vec(b)) / np.linalg.norm(vec(b)))


# rounds: the distance to the fixed point falls ~500x every 500 rounds at server rate 0.5
# (1.4e-7 at 1000, 2.6e-10 at 1500), faster at 1.0 (4e-13 at 1000): 1e-12 or less at the end
@pytest.mark.parametrize("server_lr, rounds", [(1.0, 1000), (0.5, 2000)])
def test_one_client_k1_fedmid_ends_at_the_lasso_optimum_of_twice_lam(server_lr, rounds):
    at_lam, _ = optimum(ONE_CLIENT, LAM)
    at_2lam, built = optimum(ONE_CLIENT, 2 * LAM)
    # the two optima differ, so ending at one is not ending at the other
    assert dist(at_lam, at_2lam) > 0.03
    w = federated(ONE_CLIENT, "fedmid", 0.05, server_lr, 1, rounds)
    assert dist(w, at_2lam) < 1e-9
    assert dist(w, at_lam) > 0.03
    # the same point from scikit-learn: its 1/(2n)||y - Xw - b||^2 + alpha ||w||_1 is half of
    # ours, so lam_eff = 2 lam is alpha = lam
    data = built.train.pooled()
    ref = Lasso(alpha=LAM, tol=1e-13, max_iter=200_000).fit(data["x"], data["y"])
    np.testing.assert_allclose(w["w"], ref.coef_, atol=1e-6)
    assert float(w["b"]) == pytest.approx(ref.intercept_, abs=1e-6)


def test_one_client_k1_fedmid_on_the_nuclear_norm_ends_at_twice_lam():
    """Singular value thresholds compose like scalar ones: the E2 (low-rank) form of the fact."""
    at_lam, _ = optimum(LOWRANK, 0.3)
    at_2lam, _ = optimum(LOWRANK, 0.6)
    ranks = [np.sum(np.linalg.svd(m["w"], compute_uv=False) > 1e-8) for m in (at_lam, at_2lam)]
    assert 0 < ranks[1] < ranks[0]  # doubling lam changes the recovered rank here
    w = federated(LOWRANK, "fedmid", 0.05, 1.0, 1, 1000)  # 3e-14 from 800 rounds on
    assert dist(w, at_2lam) < 1e-9
    assert dist(w, at_lam) > 0.03


@pytest.mark.parametrize("name", ["fedmid", "fedmid_osp"])
def test_the_fixed_point_does_not_depend_on_the_server_rate(name):
    """Server prox: w = prox_{eta_s eta_c K psi}(w + eta_s Delta) iff Delta in eta_c K d psi(w);
    eta_s cancels (K = 5, four heterogeneous clients)."""
    # 1000 rounds: 2e-14 apart or less (3e-12 at 800, 5e-6 at 300); the three server rates
    # run as one fused group (each member's numbers are its own run's)
    ends = federated_rates(LASSO, name, 0.02, (0.5, 1.0, 2.0), 5, 1000)
    assert dist(ends[0], ends[1]) < 1e-10
    assert dist(ends[2], ends[1]) < 1e-10


# rounds: 1.6e-14 from the optimum at rate 1.0, 1.1e-12 at 0.5 (1.5e-9 at 1000)
@pytest.mark.parametrize("server_lr, rounds", [(1.0, 1000), (0.5, 1500)])
def test_fedmid_osp_k1_ends_exactly_at_the_lasso_optimum(server_lr, rounds):
    """Plain client step, server prox: Delta = -eta_c grad F(w), so the fixed-point condition is
    -grad F(w) in d psi(w), the optimality condition of F + psi, for heterogeneous clients too."""
    at_lam, _ = optimum(LASSO, LAM)
    at_2lam, _ = optimum(LASSO, 2 * LAM)
    w = federated(LASSO, "fedmid_osp", 0.05, server_lr, 1, rounds)
    assert dist(w, at_lam) < 1e-9
    assert dist(w, at_2lam) > 0.03


@pytest.mark.slow
@pytest.mark.parametrize("name,lam_eff", [("fedmid", 2 * LAM), ("fedmid_osp", LAM)])
def test_with_several_clients_and_local_steps_the_offset_is_first_order_in_the_client_rate(
        name, lam_eff):
    """K = 5, four heterogeneous clients: the end point is argmin F + lam_eff ||.||_1 plus a
    term linear in eta_c (client drift). Halving eta_c halves the distance, and the Richardson
    combination 2 w(eta_c / 2) - w(eta_c) cancels the linear term."""
    target, _ = optimum(LASSO, lam_eff)
    other, _ = optimum(LASSO, 3 * LAM - lam_eff)  # the other of lam, 2 lam
    coarse = federated(LASSO, name, 0.02, 1.0, 5, 1500)
    fine = federated(LASSO, name, 0.01, 1.0, 5, 3000)
    near, far = dist(fine, target), dist(fine, other)
    assert 0.4 < near / dist(coarse, target) < 0.6
    assert near < far / 5
    extrapolated = {k: 2 * fine[k] - coarse[k] for k in fine}
    assert dist(extrapolated, target) < near / 3
