"""The final model of every member of a fused group equals its own run's, for every
(algorithm, problem) pair whose groups may vary lam: a member's output is taken with its own
lam (the group's problem carries the first member's)."""
import numpy as np
import pytest

import fco_ray
from fco_ray.algorithms import ALGORITHMS
from fco_ray.core.config import parse_run
from fco_ray.core.plan import lam_fuses

from tests.helpers import daily, run_group
from tests.engine.test_fused import BILINEAR, LASSO, LOWRANK, NUCLEAR

PROBLEMS = {"lasso": LASSO, "lowrank": LOWRANK, "bilinear_l1": BILINEAR, "bilinear_nuclear": NUCLEAR}


def pairs():
    """Every (algorithm, problem) whose configurations fuse over lam, from the one rule."""
    out = []
    for p, section in PROBLEMS.items():
        for a in sorted(ALGORITHMS):
            cfg = {"problem": {**section}, "algorithm": {"name": a}}
            try:
                if lam_fuses(parse_run(cfg)):
                    out.append((a, p))
            except Exception:  # an algorithm that does not run on this problem
                continue
    return out


PAIRS = pairs()


def test_the_battery_covers_both_families():
    names = {a for a, _ in PAIRS}
    assert {"feddualavg", "fedmid", "feddualex"} <= names and len(PAIRS) >= 10


@pytest.mark.parametrize("algorithm,problem", daily(PAIRS))  # fast subset: one per problem
def test_lam_fused_member_models_equal_their_own_runs(algorithm, problem):
    section = PROBLEMS[problem]
    configs = [parse_run({"problem": {**section, "lam": lam}, "rounds": 6, "eval_every": 3,
                          "seed": 1, "divergence": 1e3,
                          "algorithm": {"name": algorithm, "client_lr": lr, "local_steps": 2,
                                        "batch_size": 4, "clients_per_round": 4}})
               for lam in (0.05, 0.4) for lr in (0.002, 0.01)]
    fused = run_group(configs)
    compared = 0
    for cfg, (result, model) in zip(configs, fused):
        alone, own = fco_ray.run(cfg, return_model=True)
        assert result.status == alone.attrs["status"]
        if model is None:
            continue
        assert model.keys() == own.keys()
        for k in model:
            np.testing.assert_allclose(model[k], own[k], rtol=1e-9, atol=1e-12, err_msg=k)
        compared += 1
    assert compared >= 2, "too few members finished to compare their models"
