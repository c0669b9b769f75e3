"""FedMiD's end point against the centralized optima at lam and 2 lam (docs/fedmid_fixed_point.md).

    python results/fedmid_levels.py levels     # E1 / E2 (+ E1 variants): the lam and 2 lam optima
                                               # of seeds 0-2 scored in the lam objective
    python results/fedmid_levels.py distances  # seed 0 of E1 / E2 rerun at the recorded rates:
                                               # distance of the final model from each optimum
"""
import sys
import time

import numpy as np
import pandas as pd

from fco_ray import run
from fco_ray.algorithms.solvers import solve_centralized
from fco_ray.api import resolve
from fco_ray.problems import build_problem

SETTINGS = {  # name: (problem section, lam) - the package defaults of E1 / E2 and the E1 variants
    "E2": ({"name": "lowrank"}, 0.3), "E1": ({"name": "lasso"}, 0.1),
    "E1 support 64": ({"name": "lasso", "support": 64}, 0.1),
    "E1 support 8": ({"name": "lasso", "support": 8}, 0.1),
    "E1 256 x 32": ({"name": "lasso", "clients": 256, "samples_per_client": 32}, 0.1)}
RUNS = {"E1": (2000, [("fedmid", .001, .3), ("fedmid", .003, .03), ("fedmid_osp", .001, .3)]),
        "E2": (1500, [("fedmid", 1e-4, 3.), ("fedmid", .001, .3), ("fedmid_osp", 3e-4, 1.)])}


def problem(section, lam, seed):
    return build_problem(resolve({"problem": {**section, "lam": lam},
                                  "algorithm": {"name": "fedmid"}}).problem, seed)


def optimum(built, lam):
    return solve_centralized(built.with_lam(lam), tol=1e-12, max_iter=50_000)


def vec(model):
    return np.concatenate([np.ravel(model[k]) for k in sorted(model)])


def levels():
    rows = []
    for name, (section, lam) in SETTINGS.items():
        for seed in (0, 1, 2):
            built = problem(section, lam, seed)
            for mult in (1, 2):  # scored by the lam problem's own metrics
                rows.append({"setting": name, "seed": seed, "optimum at": f"{mult} lam",
                             **built.metrics(optimum(built, mult * lam))})
        frame = pd.DataFrame(rows)
        print(frame[frame.setting == name].to_string(index=False), flush=True)
        print(frame[frame.setting == name].groupby("optimum at").mean(numeric_only=True)
              .drop(columns="seed").round(4).to_string(), "\n", flush=True)


def distances():
    for name, (rounds, runs) in RUNS.items():
        section, lam = SETTINGS[name]
        built = problem(section, lam, 0)
        optima = {m: optimum(built, m * lam) for m in (1, 2)}
        for alg, client_lr, server_lr in runs:
            start = time.time()
            frame, model = run({"problem": section, "seed": 0, "rounds": rounds, "eval_every": rounds,
                                "algorithm": {"name": alg, "client_lr": client_lr,
                                              "server_lr": server_lr, "local_steps": 10,
                                              "batch_size": 10, "clients_per_round": 10}},
                               return_model=True)
            d = {f"to {m} lam": np.linalg.norm(vec(model) - vec(o)) / np.linalg.norm(vec(o))
                 for m, o in optima.items()}
            print(name, alg, client_lr, server_lr, {k: round(v, 4) for k, v in d.items()},
                  frame.iloc[-1].round(4).to_dict(), f"{time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    {"levels": levels, "distances": distances}[sys.argv[1] if len(sys.argv) > 1 else "levels"]()
