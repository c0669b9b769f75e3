"""Fused runs equal unfused runs: every member of a group gives its own run's rows and
status (to 1e-12 relative), including members that diverge mid-run."""
import numpy as np
import pytest

import fco_ray
from fco_ray.algorithms import ALGORITHMS
from fco_ray.backends import LocalBackend
from fco_ray.core.config import parse_run
from fco_ray.core.group import Stacked as Fused
from fco_ray.problems import build_problem

from tests.helpers import assert_same_run, daily, fused_on_ray_equals_local, run_fused, run_one

LASSO = {"name": "lasso", "clients": 8, "dim": 24, "support": 6, "samples_per_client": 16,
         "val_clients": 2}
LOWRANK = {"name": "lowrank", "clients": 8, "dim": 4, "rank": 2, "samples_per_client": 16,
           "val_clients": 2}


def algorithms(name: str, grid: list[dict], problem="lasso", **fixed):
    return [ALGORITHMS[name](parse_run({"problem": {"name": problem},
                                        "algorithm": {"name": name, **fixed, **g}}).algorithm)
            for g in grid]


assert_same = assert_same_run  # fused member vs its own run


def check(problem_section, name, grid, rounds=12, eval_every=3, seed=0, backend=None, **fixed):
    problem = build_problem(parse_run({"problem": problem_section,
                                       "algorithm": {"name": name}}).problem, seed)
    backend = backend or LocalBackend(problem)
    members = algorithms(name, grid, problem_section["name"], **fixed)
    fused = run_fused(problem, members, backend, rounds=rounds, eval_every=eval_every, seed=seed,
                      divergence=1e3)
    for algorithm, result in zip(members, fused):
        alone = run_one(problem, algorithm, backend, rounds=rounds, eval_every=eval_every,
                           seed=seed, divergence=1e3)
        assert_same(result, alone)
    return fused


RATES = [{"client_lr": lr, "server_lr": slr} for lr in (0.001, 0.01) for slr in (1.0, 0.3)]


@pytest.mark.parametrize("name", ["fedavg", "fedavg_subgrad", "fedmid", "fedmid_osp",
                                  "feddualavg", "feddualavg_osp", "local"])
def test_composite_members_equal_their_own_runs(name):
    grid = [g for g in RATES if name != "local" or g["server_lr"] == 1.0]
    fixed = {} if name == "local" else {"clients_per_round": 4}
    check(LASSO, name, grid, local_steps=3, batch_size=4, **fixed)


def test_nuclear_prox_with_a_rate_per_member():
    check(LOWRANK, "feddualavg", RATES, local_steps=2, batch_size=4, clients_per_round=4)


def test_a_member_that_diverges_ends_alone_and_the_others_go_on():
    grid = [{"client_lr": 0.001}, {"client_lr": 30.0}, {"client_lr": 0.01}]
    results = check(LASSO, "fedmid", grid, rounds=30, eval_every=3, local_steps=3,
                     batch_size=4, clients_per_round=4)
    assert [r.status for r in results] == ["finished", "diverged", "finished"]
    assert 0 < len(results[1].records) < len(results[0].records) == 11


def test_every_configuration_differing_elsewhere_is_refused():
    members = algorithms("fedmid", [{"local_steps": 2}, {"local_steps": 3}])
    with pytest.raises(ValueError, match="differ in more than real-valued"):
        Fused(members)
    with pytest.raises(ValueError, match="cannot run fused"):
        Fused(algorithms("centralized", [{}, {}]))


def test_run_grid_returns_one_row_per_configuration_and_round_equal_to_run():
    from fco_ray import run_grid

    config = {"problem": LASSO, "algorithm": {"name": "fedmid", "clients_per_round": 4,
                                              "local_steps": 3, "batch_size": 4},
              "rounds": 30, "eval_every": 3, "seed": 1}
    grid = {"algorithm.client_lr": [0.001, 30.0], "algorithm.server_lr": [1.0, 0.3],
            "algorithm.name": ["fedmid", "centralized"]}
    with pytest.raises(fco_ray.ConfigError, match="algorithm.client_lr"):
        run_grid(config, grid)  # centralized has no client rate
    grid.pop("algorithm.name")
    df = run_grid(config, grid)
    assert list(df.columns[:3]) == ["algorithm.client_lr", "algorithm.server_lr", "status"]
    for (lr, slr), rows in df.groupby(["algorithm.client_lr", "algorithm.server_lr"]):
        alone = fco_ray.run({**config, "algorithm": {**config["algorithm"], "client_lr": lr,
                                                     "server_lr": slr}})
        assert set(rows["status"]) == {alone.attrs["status"]}
        np.testing.assert_allclose(rows["train_loss"], alone["train_loss"], rtol=1e-12)
        assert list(rows["round"]) == list(alone["round"])
    assert set(df.loc[df["algorithm.client_lr"] == 30.0, "status"]) == {"diverged"}
    unfused = run_grid(config, grid, fuse=False)
    assert list(unfused.columns) == list(df.columns) and len(unfused) == len(df)
    np.testing.assert_allclose(unfused["train_loss"], df["train_loss"], rtol=1e-12)


BILINEAR = {"name": "bilinear_l1", "n": 6, "m": 8, "clients": 6}
NUCLEAR = {"name": "bilinear_nuclear", "n": 6, "m": 8, "p": 3, "rank": 2, "clients": 6}


@pytest.mark.parametrize("name, problem", daily(  # fast subset: each algorithm on one problem
    [(n, p) for p in (BILINEAR, NUCLEAR) for n in ("feddualex", "fedmip", "extragrad_local_sgd", "pgda")],
    key=lambda case: case[0]))
def test_saddle_members_equal_their_own_runs(name, problem):
    check(problem, name, RATES, local_steps=3, clients_per_round=4, batch_size=None)


def test_fedmip_without_server_prox_and_a_diverging_member():
    results = check(BILINEAR, "fedmip", [{"client_lr": 0.1}, {"client_lr": 1e4}], rounds=20,
                    local_steps=2, clients_per_round=None, server_prox=False)
    assert results[0].status == "finished"


@pytest.mark.ray
def test_a_fused_group_on_ray_actors_equals_the_local_backend(ray_cluster):
    problem = build_problem(parse_run({"problem": LASSO, "algorithm": {"name": "fedmid"}}).problem, 0)
    members = algorithms("fedmid", RATES + [{"client_lr": 30.0}], local_steps=3,
                         batch_size=4, clients_per_round=4)
    local = fused_on_ray_equals_local(problem, members, rounds=12, eval_every=3, seed=0, divergence=1e3)
    assert local[-1].status == "diverged"


def test_floats_sent_per_member_count_a_shared_number_once_per_member():
    # one server rate: FeDualEx's broadcast step count t is one number shared by the group
    check(BILINEAR, "feddualex", [{"client_lr": 0.01}, {"client_lr": 0.1}, {"client_lr": 0.3}],
          local_steps=2, clients_per_round=4, batch_size=None)
