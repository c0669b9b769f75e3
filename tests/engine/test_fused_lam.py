"""Fused groups whose members differ in the regularizer weight `problem.lam` (as well as in
rates): every member equals its own run on a problem built with its own lam, on both
backends; one prox step size per row equals row-by-row scalar ones; and the one
grouping rule (fco_ray.core.plan.fusable) puts lam variants together only where lam weighs psi
alone."""
import json

import numpy as np
import pytest

from fco_ray import run_grid
from fco_ray.algorithms import ALGORITHMS
from fco_ray.backends import LocalBackend
from fco_ray.core.config import parse_run
from fco_ray.core.grid import expand
from fco_ray.core.group import Stacked as Fused
from fco_ray.core.plan import fusable
from fco_ray.core.plan import groups
from fco_ray.ops import regularizers as R
from fco_ray.problems import PROBLEMS, build_problem

from tests.helpers import assert_same_run, daily, fused_on_ray_equals_local, run_fused, run_one
from tests.engine.test_fused import BILINEAR, LASSO, LOWRANK, NUCLEAR

RATES = [{"client_lr": 0.001}, {"client_lr": 0.01}]
LAMS = [0.05, 0.3]


def configs(section, name, grid, lams, seed=0, **fixed):
    return [parse_run({"problem": {**section, "lam": lam}, "seed": seed,
                       "algorithm": {"name": name, **fixed, **g}}) for lam in lams for g in grid]


def check(section, name, grid, lams=LAMS, rounds=12, eval_every=3, seed=0, **fixed):
    """Run the configurations fused on a problem built with the first lam, and each alone on
    a problem built with its own lam: the same rows and status."""
    cfgs = configs(section, name, grid, lams, seed, **fixed)
    problem = build_problem(cfgs[0].problem, seed)
    members = [ALGORITHMS[name](c.algorithm) for c in cfgs]
    kwargs = {"rounds": rounds, "eval_every": eval_every, "seed": seed, "divergence": 1e3}
    fused = run_fused(problem, members, LocalBackend(problem), lams=[c.problem.lam for c in cfgs],
                      **kwargs)
    for cfg, algorithm, result in zip(cfgs, members, fused):
        own = build_problem(cfg.problem, seed)
        assert_same_run(result, run_one(own, algorithm, LocalBackend(own), **kwargs))
    return fused


# ---- one step size per row of a stack in the regularizers' prox -------------------------
@pytest.mark.parametrize("reg", [R.L1(0.1), R.Nuclear(0.1), R.L1Box(0.1, 0.5),
                                 R.NuclearSpectral(0.1, 2.0)])
def test_one_step_size_per_row_equals_each_row_with_its_own(reg):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 3)) if reg.matrix_only else rng.standard_normal((3, 5))
    nd = x.ndim - 1
    t = np.array([0.1, 0.7, 2.0])
    out = reg.prox(x, t, nd)
    for r in range(3):
        np.testing.assert_allclose(out[r], reg.prox(x[r], t[r], nd), rtol=1e-12, atol=1e-15)  # SVDs: batched


def test_lam_errors_name_what_is_wrong():
    with pytest.raises(ValueError, match="lam must be a finite number >= 0, got -1.0"):
        R.L1(0.1).with_lam(-1.0)
    with pytest.raises(ValueError, match="one t per row needs"):
        R.L1(0.1).prox(np.zeros((3, 4)), np.array([0.1, 0.2]))
    assert R.L2Ball(1.0).with_lam(0.3) == R.L2Ball(1.0)  # no penalty, no weight


# ---- fused members with different lam equal their own runs ------------------------------
@pytest.mark.parametrize("name", daily(  # fast subset: FedMiD's rule and FedDualAvg's once each
    [(n,) for n in ("fedmid", "feddualavg", "fedavg_subgrad", "fedmid_osp", "feddualavg_osp")],
    key=lambda case: ALGORITHMS[case[0]].rule))
def test_composite_members_with_their_own_lam_equal_their_own_runs(name):
    # lasso: the compiled local loop (per-row thresholds and subgradient weights)
    check(LASSO, name, RATES, local_steps=3, batch_size=4, clients_per_round=4, server_lr=0.5)


def test_nuclear_members_with_their_own_lam():  # the generic steps, nuclear prox per row
    check(LOWRANK, "feddualavg", RATES, local_steps=2, batch_size=4, clients_per_round=4)
    check(LOWRANK, "fedmid", RATES, local_steps=2, batch_size=None, clients_per_round=4)


@pytest.mark.parametrize("name, problem", daily(  # fast subset: each algorithm on one problem
    [(n, p) for p in (BILINEAR, NUCLEAR) for n in ("feddualex", "fedmip", "extragrad_local_sgd", "pgda")],
    key=lambda case: case[0]))
def test_saddle_members_with_their_own_lam_equal_their_own_runs(name, problem):
    # the duality gap reads each member's own lam
    fused = check(problem, name, RATES, lams=[0.0, 0.1, 0.5], local_steps=3, clients_per_round=4,
                  batch_size=None)
    gaps = [r.records[-1]["duality_gap"] for r in fused]
    assert len(set(gaps)) > 1


def test_sparse_logreg_members_with_their_own_lam():
    section = {"name": "sparse_logreg", "clients": 6}
    check(section, "fedmid", [{"client_lr": 0.1}], lams=[1e-3, 3e-2], rounds=6, eval_every=2,
          local_steps=2, batch_size=8, clients_per_round=3)


def test_a_diverging_member_among_lam_variants_ends_alone():
    grid = [{"client_lr": 0.001}, {"client_lr": 30.0}]
    results = check(LASSO, "fedmid", grid, rounds=30, local_steps=3, batch_size=4,
                    clients_per_round=4)
    assert [r.status for r in results] == ["finished", "diverged"] * 2


def test_lam_varies_only_with_the_stacked_client_steps():
    members = [ALGORITHMS["fedmid"](c.algorithm) for c in configs(LASSO, "fedmid", RATES, [0.1])]
    with pytest.raises(ValueError, match="one lam per member"):
        Fused(members, lams=[0.1])


# ---- the grouping rule ---------------------------------------------------------------------
def test_fusable_says_where_lam_may_vary():
    params = {name: spec.params for name, spec in PROBLEMS.items()}
    for problem in ("lasso", "lowrank", "sparse_logreg", "bilinear_l1", "bilinear_nuclear", "adversarial"):
        assert fusable(ALGORITHMS["fedmid"], params[problem], "problem.lam"), problem
    assert not fusable(ALGORITHMS["fsvrg"], params["sparse_text_logreg"], "problem.lam")  # lam in f
    assert not fusable(ALGORITHMS["fedmid"], params["sparse_text_logreg"], "problem.lam")
    assert not fusable(ALGORITHMS["centralized"], params["lasso"], "problem.lam")
    assert not fusable(ALGORITHMS["fedmid"], params["lasso"], "problem.dim")
    assert fusable(ALGORITHMS["fedmid"], params["lasso"], "algorithm.client_lr")
    assert not fusable(ALGORITHMS["fedmid"], params["lasso"], "algorithm.local_steps")


def test_run_grid_fuses_lam_and_rates_into_one_group_equal_to_unfused():
    config = {"problem": LASSO, "algorithm": {"name": "fedmid", "clients_per_round": 4,
                                              "local_steps": 3, "batch_size": 4},
              "rounds": 20, "eval_every": 5, "seed": 1}
    grid = {"problem.lam": [0.05, 0.3], "algorithm.client_lr": [0.001, 0.01, 30.0]}
    assert groups([cfg for _, cfg in expand(config, grid)]) == [list(range(6))]
    fused = run_grid(config, grid)
    unfused = run_grid(config, grid, fuse=False)
    assert list(fused.columns) == list(unfused.columns) and len(fused) == len(unfused)
    assert list(fused["status"]) == list(unfused["status"])
    np.testing.assert_allclose(fused["train_loss"], unfused["train_loss"], rtol=1e-12)
    np.testing.assert_allclose(fused["f1"], unfused["f1"], rtol=1e-12)
    # lam changes the numbers: the members did not all run with one lam
    last = fused[fused["round"] == 20].set_index(["problem.lam", "algorithm.client_lr"])
    assert last.loc[(0.05, 0.01), "density"] > last.loc[(0.3, 0.01), "density"]


def test_a_sweep_groups_lam_variants_where_the_problem_allows_it(tmp_path):
    from fco_ray.sweep.checks import load_sweep

    def trials(problem, algorithms, grid, algorithm=None):
        path = tmp_path / f"{problem['name']}.yaml"
        path.write_text(json.dumps({"name": "s", "problem": problem, "algorithms": algorithms,
                                    "algorithm": algorithm or {"clients_per_round": 4},
                                    "search": {"grid": grid}, "seeds": [0, 1], "rounds": 2}))
        return load_sweep(path).groups()

    fused = trials(LASSO, ["fedmid", "feddualavg"],
                   {"problem.lam": [0.05, 0.3], "algorithm.client_lr": [0.001, 0.01]})
    assert sorted(len(g) for g in fused) == [4] * 4  # per algorithm and seed: 2 lam x 2 rates
    text = {"name": "sparse_text_logreg", "clients": 20, "dim": 200, "min_samples": 5,
            "max_samples": 30}
    apart = trials(text, ["fsvrg"], {"problem.lam": [1e-3, 1e-2], "algorithm.client_lr": [1.0, 3.0]},
                   algorithm={})
    assert sorted(len(g) for g in apart) == [2] * 4  # lam in the loss: one group per lam


@pytest.mark.ray
def test_lam_variants_on_ray_actors_equal_the_local_backend(ray_cluster):
    cfgs = configs(LASSO, "fedmid", RATES + [{"client_lr": 30.0}], LAMS, local_steps=3,
                   batch_size=4, clients_per_round=4)
    problem = build_problem(cfgs[0].problem, 0)
    members = [ALGORITHMS["fedmid"](c.algorithm) for c in cfgs]
    local = fused_on_ray_equals_local(problem, members, rounds=12, eval_every=3, seed=0,
                                      divergence=1e3, lams=[c.problem.lam for c in cfgs])
    assert [r.status for r in local] == ["finished", "finished", "diverged"] * 2


@pytest.mark.ray
def test_a_lam_sweep_runs_as_one_tune_trial_with_one_mlflow_child_run_each(ray_cluster, tmp_path):
    import fco_ray
    from fco_ray.sweep import run_sweep
    from fco_ray.tracking.queries import children, find_parent, trials_frame
    from fco_ray.tracking.store import Store

    from tests.e2e.test_sweep import PROBLEM, STEPS, write_sweep

    path = write_sweep(tmp_path, name="lams", algorithms=["fedmid"],
                       search={"grid": {"problem.lam": [0.05, 0.3], "algorithm.client_lr": [0.001, 0.01]}})
    outcome = run_sweep(path, storage=tmp_path / "ray_results", echo=lambda line: None)
    assert outcome.ok and len(outcome.results) == 1  # one fused Tune trial
    store = Store(outcome.tracking_uri)
    trials = trials_frame(children(store, find_parent(store, outcome.experiment_id, "lams")))
    assert sorted(zip(trials["problem.lam"], trials["algorithm.client_lr"])) == [
        (lam, lr) for lam in (0.05, 0.3) for lr in (0.001, 0.01)]
    for _, row in trials.iterrows():
        lam, lr = row["problem.lam"], row["algorithm.client_lr"]
        expected = fco_ray.run({"problem": {**PROBLEM, "lam": lam}, "rounds": 20, "eval_every": 5,
                                "algorithm": {"name": "fedmid", "client_lr": lr,
                                              "clients_per_round": 4, "local_steps": 5}})
        for metric in ("train_loss", "density"):
            history = store.client.get_metric_history(row["run_id"], metric)
            assert [m.step for m in history] == STEPS
            np.testing.assert_allclose([m.value for m in history], expected[metric], rtol=1e-12)


def test_a_restored_group_of_lam_variants_continues_with_identical_numbers(tmp_path):
    from fco_ray.core.checkpoint import load_snapshot, save_snapshot

    from tests.helpers import run_group

    cfgs = [parse_run({"problem": {**LASSO, "lam": lam}, "rounds": 6, "eval_every": 1,
                       "algorithm": {"name": "feddualavg", "client_lr": lr, "local_steps": 3,
                                     "batch_size": 4, "clients_per_round": 4}})
            for lam in LAMS for lr in (0.01, 30.0)]
    rows, again, saved = {}, {}, {}
    straight = run_group(cfgs, lambda rnd, r, ended: rows.setdefault(rnd, r))

    def keep(snapshot):
        (tmp_path / str(snapshot.round)).mkdir()
        saved[snapshot.round] = save_snapshot(tmp_path / str(snapshot.round), snapshot).parent

    run_group(cfgs, checkpoint_every=2, on_checkpoint=keep)
    start = load_snapshot(saved[4])
    assert start.active == [0, 2]  # the rate 30 diverged for both lams
    resumed = run_group(cfgs, lambda rnd, r, ended: again.setdefault(rnd, r), start=start)
    assert sorted(again) == [5, 6] and all(again[rnd] == rows[rnd] for rnd in again)
    assert [r.status for r, _ in resumed] == [r.status for r, _ in straight]
    assert resumed[0][0].records[-1] == straight[0][0].records[-1]
    assert resumed[2][0].records[-1] == straight[2][0].records[-1]
    assert resumed[0][0].records[-1]["train_loss"] != resumed[2][0].records[-1]["train_loss"]


def test_the_shipped_regularization_path_sweep_runs_as_six_fused_trials():
    from pathlib import Path

    from fco_ray.sweep.checks import load_sweep

    sweep = load_sweep(Path(__file__).resolve().parents[2] / "sweeps" / "e1_lam_path.yaml")
    groups_ = sweep.groups()
    assert sweep.num_trials() == 42 and sweep.num_tune_trials() == 6
    assert all(sorted(p["problem.lam"] for p in g) == [0.01, 0.03, 0.1, 0.2, 0.3, 1.0, 3.0]
               for g in groups_)


def test_adversarial_members_with_their_own_lam():
    check({"name": "adversarial", "clients": 10}, "fedmip", [{"client_lr": 0.1}, {"client_lr": 0.3}],
          lams=[0.01, 0.1], rounds=4, eval_every=2, local_steps=2, batch_size=8, clients_per_round=4)


def test_the_runs_of_a_lam_path_share_their_compiled_programs():
    """psi's weight is an argument of the compiled rule pieces, not a setting: the problem
    rules of one problem at two lams are equal, so the second run reuses the first's programs
    (its numbers are its own: `check` above runs each lam alone after the others)."""
    from fco_ray.rules import host
    from fco_ray.rules.numpy_problem import problem_rule

    a, b = (build_problem(parse_run({"problem": {**LASSO, "lam": lam}, "algorithm": {"name": "fedmid"}}).problem, 0)
            for lam in LAMS)
    rule_a, rule_b = problem_rule(a, 4), problem_rule(b, 4)
    assert (rule_a.lam, rule_b.lam) == tuple(LAMS)
    assert rule_a == rule_b and hash(rule_a) == hash(rule_b)
    algorithm = parse_run({"problem": LASSO, "algorithm": {"name": "fedmid"}}).algorithm
    rule = ALGORITHMS["fedmid"](algorithm).make_rule()
    assert host.pieces(rule, rule_a) is host.pieces(rule, rule_b)
