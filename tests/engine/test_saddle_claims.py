"""The FeDualEx paper's claims (Bai & Bullins, ICLR'24) at reduced scale, with fixed seeds:
the O(1/T) rate of deterministic sequential FeDualEx, the E5 comparison on the l1 bilinear
problem, and the sparsity of the adversarial attack (E6). Full-scale numbers: results/e5_full_scale.md."""
from __future__ import annotations

import numpy as np
import pytest

import fco_ray
from fco_ray.core.config import parse_problem
from fco_ray.problems import build_problem

from tests.engine.test_saddle import lp_saddle_l1


def test_deterministic_sequential_feddualex_gap_decays_like_one_over_t():
    """One client, no noise, K = 1: composite dual extrapolation. Theorem 4: for eta <= 1/beta,
    Gap(ergodic mean of the z_half) <= beta B / T. The l1 problem has a saddle point (an LP pair)."""
    prob = {"name": "bilinear_l1", "n": 20, "m": 40, "clients": 1, "noise": 0.0, "data_seed": 0}
    p = build_problem(parse_problem(prob), 0)
    beta = np.linalg.norm(p.a, 2)  # Lipschitz constant of the operator
    lr = 0.1
    assert lr <= 1 / beta
    x, y = lp_saddle_l1(p.a, p.b, 0.1, 0.05)
    assert p.duality_gap({"x": x, "y": y}) < 1e-9  # a known saddle point exists
    df = fco_ray.run({"problem": prob, "rounds": 3000, "eval_every": 10, "seed": 0,
                      "algorithm": {"name": "feddualex", "client_lr": lr, "local_steps": 1,
                                    "clients_per_round": None, "batch_size": None}})
    tail = df[df["round"] >= 100]
    slope = np.polyfit(np.log(tail["round"]), np.log(tail["duality_gap_ergodic"]), 1)[0]
    assert -1.15 < slope < -0.85
    scaled = tail["round"] * tail["duality_gap_ergodic"]  # T * Gap(T) stays bounded
    assert scaled.max() < 1.5 * scaled.min()
    assert tail["duality_gap_ergodic"].iloc[-1] < 1e-3 * df["duality_gap_ergodic"].iloc[0]


# E5 at reduced scale: A 150 x 300, 5 clients with per-client noise 0.1 sqrt(5/100), so the
# noise of the clients' mean is that of the paper's 100 clients; K = 10, 200 rounds. Both rates
# tuned, as the paper tunes them (its grid has server rates 1 .. 0.01).
E5 = {"name": "bilinear_l1", "n": 150, "m": 300, "clients": 5, "noise": 0.1 * np.sqrt(0.05),
      "data_seed": 0}
GRID = [(cl, sl) for cl in (0.1, 0.03, 0.01) for sl in (1.0, 0.3)]


def finals(config: dict, grid: dict) -> list[dict]:
    """The last row of every configuration of the grid, run fused (`fco_ray.run_grid`: each
    configuration's rows equal its own `fco_ray.run`, tests/engine/test_fused.py)."""
    df = fco_ray.run_grid(config, grid)
    assert (df["status"] == "finished").all()
    last = df[df["round"] == config["rounds"]]
    assert len(last) == np.prod([len(v) for v in grid.values()])
    return [row.to_dict() for _, row in last.iterrows()]


def tuned(algorithm: dict) -> dict:
    """Final metrics of the best rate pair of GRID, by the server model's gap."""
    runs = finals({"problem": E5, "rounds": 200, "eval_every": 200, "seed": 0,
                   "algorithm": {**algorithm, "local_steps": 10, "clients_per_round": None,
                                 "batch_size": None}},
                  {"algorithm.client_lr": sorted({cl for cl, _ in GRID}),
                   "algorithm.server_lr": sorted({sl for _, sl in GRID})})
    assert len(runs) == len(GRID)
    return min(runs, key=lambda r: r["duality_gap"])


@pytest.mark.slow  # 30 tuned runs: 1-2 minutes on 2 cores (test_saddle.py runs every method fast)
def test_e5_under_full_tuning_fedmid_falls_behind_feddualavg_does_not():
    """Measured here: FedMiD 0.83, FedMiP (Appendix H) 0.82; FedDualAvg 0.022 (client 0.03,
    server 0.3), FeDualEx 0.016 (ergodic 0.015), FedMiP without server prox 0.006. The paper's
    "FedDualAvg stays above 1" holds only at server rate 1 (0.57 here)."""
    dualex = tuned({"name": "feddualex"})
    mip = tuned({"name": "fedmip", "server_prox": False})
    mip_h = tuned({"name": "fedmip"})  # Appendix H: server prox_{eta_s eta_c K psi}
    dual = tuned({"name": "feddualavg"})
    mid = tuned({"name": "fedmid"})
    # extra-step methods an order of magnitude below FedMiD (primal averaging)
    for gap in (mip["duality_gap"], dualex["duality_gap"], dualex["duality_gap_ergodic"]):
        assert gap < 0.1 * mid["duality_gap"]
    # FedDualAvg with its server rate tuned: also far below FedMiD, within 2x of FeDualEx
    assert dual["duality_gap"] < 0.1 * mid["duality_gap"]
    assert dual["duality_gap"] < 2 * dualex["duality_gap"]
    # dual aggregation keeps the structure: FeDualEx's model is sparser than FedMiP's
    assert dualex["density"] < mip["density"] - 0.05
    # FedMiP with the server prox of Appendix H shrinks twice (clients, then server): it ends
    # near the saddle point of the problem with penalty 2 lam, like FedMiD, not near ours
    p = build_problem(parse_problem(E5), 0)
    x2, y2 = lp_saddle_l1(p.a, p.b, 0.2, 0.05)
    biased = p.duality_gap({"x": x2, "y": y2})
    assert mip_h["duality_gap"] > 0.8 * biased
    assert mip_h["duality_gap"] > 0.5 * dual["duality_gap"]


@pytest.mark.slow  # 8 runs on the digits: ~40 s on 2 cores
def test_e6_feddualex_attack_is_sparser_at_equal_clean_accuracy():
    """Digits, 100 clients, K = 5, batch 10, lam = 0.003 (the E6 sweep's value), 40 rounds; each
    method tuned over client rates {1, 0.5} by mean clean validation accuracy over two seeds."""
    problem = {"name": "adversarial", "lam": 0.003, "data_seed": 0}

    def best(name):
        runs = finals({"problem": problem, "rounds": 40, "eval_every": 40,
                       "algorithm": {"name": name, "local_steps": 5, "clients_per_round": None,
                                     "batch_size": 10}},
                      {"algorithm.client_lr": [1.0, 0.5], "seed": [0, 1]})
        results = []
        for lr in (1.0, 0.5):
            mine = [r for r in runs if r["algorithm.client_lr"] == lr]
            assert len(mine) == 2  # both seeds
            results.append({k: np.mean([r[k] for r in mine]) for k in ("val_accuracy", "density")})
        return max(results, key=lambda r: r["val_accuracy"])

    dualex, pgda = best("feddualex"), best("pgda")
    assert dualex["val_accuracy"] >= pgda["val_accuracy"] - 0.01  # equal within one point
    assert 0 < dualex["density"] < 0.6 * pgda["density"]  # a real attack, and a sparse one
    assert pgda["density"] > 0.9  # averaged subgradient steps leave a dense attack
