"""The papers' qualitative claims at small scale, with rates tuned on a small grid.

E1 (FCO Fig. 3): FedDualAvg's best F1 exceeds FedMiD's, and FedMiD's solution is denser.
E2 (FCO Fig. 4): FedDualAvg reaches the true rank (16) within 100 rounds; FedMiD does not.
Our loss carries a 1/2 and the client shift makes local problems ill-conditioned, so the
useful rates are smaller than the paper's (see README "Reproducing the papers").
"""
import itertools

import fco_ray


def best_run(problem, algorithm, client_lrs, server_lrs, rounds, key, mode):
    best = None
    for cl, sl in itertools.product(client_lrs, server_lrs):
        df = fco_ray.run({"problem": problem, "rounds": rounds, "eval_every": 25,
                          "algorithm": {"name": algorithm, "client_lr": cl, "server_lr": sl}})
        if df.attrs["status"] != "finished":
            continue
        score = df[key].iloc[-1] * (1 if mode == "max" else -1)
        if best is None or score > best[0]:
            best = (score, df)
    return best[1]


def test_e1_feddualavg_recovers_the_support_better_and_sparser_than_fedmid():
    problem = {"name": "lasso"}  # the paper setting: d = 1024, 64 clients x 128 samples
    grid = ([1e-3, 3e-4], [1.0, 0.3])
    dual = best_run(problem, "feddualavg", *grid, rounds=300, key="f1", mode="max").iloc[-1]
    mid = best_run(problem, "fedmid", *grid, rounds=300, key="f1", mode="max").iloc[-1]
    assert dual["f1"] > mid["f1"] + 0.2
    assert mid["density"] > dual["density"]


def test_e2_feddualavg_reaches_the_true_rank_within_100_rounds():
    problem = {"name": "lowrank"}  # 32 x 32, rank 16, 64 clients x 128 samples
    grid = ([1.5e-3, 1e-3], [5.0, 10.0])
    dual = best_run(problem, "feddualavg", *grid, rounds=100, key="recovery_error", mode="min")
    mid = best_run(problem, "fedmid", *grid, rounds=100, key="recovery_error", mode="min")
    assert (dual.loc[dual["round"] <= 100, "rank"] == 16).any()
    assert dual["rank"].iloc[-1] == 16
    assert mid["rank"].iloc[-1] > 16
    assert mid["recovery_error"].iloc[-1] > dual["recovery_error"].iloc[-1]
