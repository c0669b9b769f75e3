"""Sweeps: Tune trials logged to MLflow (parent + children), values equal to fco_ray.run."""
import json

import numpy as np
import pandas as pd
import pytest
import yaml

import fco_ray
from fco_ray.cli import main
from fco_ray.runtime.errors import ConfigError
from fco_ray.sweep import load_sweep, run_sweep
from fco_ray.sweep.run import tune_config
from fco_ray.sweep.trainable import TrialResources
from fco_ray.tracking.queries import children, find_parent, trials_frame
from fco_ray.tracking.store import Store

PROBLEM = {"name": "lasso", "clients": 16, "dim": 64, "support": 8, "val_clients": 4,
           "samples_per_client": 32}
STEPS = [0, 5, 10, 15, 20]


def write_sweep(directory, **changes):
    sweep = {"name": "tiny", "problem": PROBLEM, "algorithms": ["fedmid", "feddualavg"],
             "algorithm": {"clients_per_round": 4, "local_steps": 5},
             "search": {"grid": {"algorithm.client_lr": [0.001, 1.0]}},  # 1.0 diverges
             "seeds": [0], "rounds": 20, "eval_every": 5, "tune": {"metric": "f1", "mode": "max"},
             "tracking": {"uri": f"sqlite:///{directory / 'mlflow.db'}"}, "report": False, **changes}
    path = directory / f"{sweep['name']}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


@pytest.fixture(scope="module")
def swept(ray_cluster, tmp_path_factory):
    directory = tmp_path_factory.mktemp("sweep")
    path = write_sweep(directory)
    lines = []
    outcome = run_sweep(path, storage=directory / "ray_results", echo=lines.append)
    store = Store(outcome.tracking_uri)
    parent = find_parent(store, outcome.experiment_id, "tiny")
    return path, outcome, lines, store, parent, trials_frame(children(store, parent))


@pytest.mark.ray
def test_child_runs_hold_every_evaluated_round_of_fco_run(swept):
    path, outcome, _, store, parent, trials = swept
    assert outcome.ok and parent.info.run_id == outcome.parent_run_id
    assert parent.data.tags["fco.role"] == "sweep" and parent.data.tags["fco.metric"] == "f1"
    assert [a.path for a in store.client.list_artifacts(parent.info.run_id)] == ["sweep.yaml"]
    assert len(trials) == 4 and trials["trial_id"].is_unique
    assert set(zip(trials["algorithm"], trials["algorithm.client_lr"])) == {
        (a, lr) for a in ("fedmid", "feddualavg") for lr in (0.001, 1.0)}
    finished = trials[trials["status"] == "finished"]
    default_lam = fco_ray.problems.PROBLEMS["lasso"].params.model_fields["lam"].default
    assert len(finished) == 2 and (finished["problem.lam"] == default_lam).all()  # defaults logged too
    # the two rates of each algorithm ran as one fused Tune trial: one child run each
    assert sorted(trials["trial_id"].str.rsplit("-", n=1).str[1]) == ["0", "0", "1", "1"]
    for row in finished.itertuples():
        config = {"problem": PROBLEM, "algorithm": {"name": row.algorithm, "client_lr": 0.001,
                                                     "clients_per_round": 4, "local_steps": 5},
                  "rounds": 20, "eval_every": 5, "seed": 0}
        expected = fco_ray.run(config)
        for metric in ("f1", "train_loss", "density", "val_mse"):
            history = store.client.get_metric_history(row.run_id, metric)
            assert [m.step for m in history] == STEPS
            np.testing.assert_allclose([m.value for m in history], expected[metric], rtol=1e-12)
        # the ranked metric's area under its curve, the tie-break of best_per_algorithm
        run = store.client.get_run(row.run_id)
        assert run.data.metrics["mean.f1"] == pytest.approx(np.mean(expected["f1"]), rel=1e-12)
        assert "mean.train_loss" not in run.data.metrics
    # every child run carries its place in the sweep's ranking: the finished runs first
    ranks = {r.info.run_id: r.data.tags["fco.rank"] for r in children(store, parent)}
    assert sorted(ranks.values()) == ["0001", "0002", "0003", "0004"]
    assert {ranks[r] for r in finished["run_id"]} == {"0001", "0002"}


@pytest.mark.ray
def test_tune_writes_json_and_csv_results_but_no_tensorboard_files_and_restores_its_env(swept):
    import os

    _, outcome, *_ = swept
    trial_dirs = [p for p in outcome.path.iterdir() if p.is_dir()]
    assert len(trial_dirs) == 2  # one fused Tune trial per algorithm (two rates each)
    for d in trial_dirs:
        assert (d / "result.json").is_file() and (d / "progress.csv").is_file()
        assert not list(d.glob("events.out.tfevents*"))
    assert "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS" not in os.environ  # set only around fit


@pytest.mark.ray
def test_diverged_trials_rank_last_and_best_config_is_tagged(swept):
    _, outcome, lines, store, parent, trials = swept
    diverged = trials[trials["algorithm.client_lr"] == 1.0]
    assert (diverged["status"] == "diverged").all() and (diverged["run_status"] == "FINISHED").all()
    # each algorithm's two rates ran fused: one Tune trial reporting its best member's f1
    # (a lone diverged trial ranks last in Tune: tests/ray/test_faults.py)
    assert len(outcome.results) == 2 and outcome.results.num_terminated == 2
    for alg in ("fedmid", "feddualavg"):
        best = json.loads(parent.data.tags[f"fco.best.{alg}"])
        assert best["algorithm.client_lr"] == 0.001 and best["seeds"] == [0]
        final = trials[(trials["algorithm"] == alg) & (trials["status"] == "finished")]["f1"]
        assert parent.data.metrics[f"best.{alg}.f1"] == pytest.approx(final.item())
    assert sum("diverged" in line for line in lines) == 2 and any("[4/4]" in line for line in lines)


def test_ties_on_the_final_value_go_to_the_rates_that_got_there_sooner():
    """Many rates reach F1 = 1: the best is the one with the larger area under its curve
    (mean over seeds of mean.f1), wherever it sits in the grid; a lower final value never
    wins on speed; without mean.* (older stores) the first tied config is kept."""
    from fco_ray.tracking.queries import best_per_algorithm

    rows = [("0.001", 0, 1.0, 0.70), ("0.001", 1, 1.0, 0.72),   # tied, slower
            ("0.01", 0, 1.0, 0.95), ("0.01", 1, 1.0, 0.93),     # tied, sooner: chosen
            ("0.1", 0, 0.9, 0.99), ("0.1", 1, 0.9, 0.99)]       # fastest, lower final F1
    frame = pd.DataFrame([{"run_id": f"r{i}", "algorithm": "feddualavg", "status": "finished",
                           "algorithm.client_lr": lr, "seed": seed, "f1": f1, "mean.f1": mean}
                          for i, (lr, seed, f1, mean) in enumerate(rows)])
    frame.attrs.update(params=["algorithm.client_lr", "seed"], metrics=["f1"])
    best = best_per_algorithm(frame, "f1", "max")
    assert best["algorithm.client_lr"].item() == "0.01" and best["score"].item() == 1.0
    assert best["run_ids"].item() == ["r2", "r3"]
    older = frame.drop(columns="mean.f1")
    older.attrs.update(frame.attrs)
    assert best_per_algorithm(older, "f1", "max")["algorithm.client_lr"].item() == "0.001"


@pytest.mark.ray
def test_runs_lists_trials_and_best(swept, capsys):
    path = swept[0]
    assert main(["runs", str(path)]) == 0
    out = capsys.readouterr().out
    assert "4 trials" in out and out.count("diverged") == 2
    assert main(["runs", str(path), "--best"]) == 0
    best = capsys.readouterr().out.splitlines()[2:]
    assert len(best) == 2 and all("0.001" in line for line in best)


@pytest.mark.ray
def test_ray_backend_trial_reserves_its_actors(ray_cluster, tmp_path):
    path = write_sweep(tmp_path, name="on_actors", algorithms=["feddualavg"],
                       search={"grid": {"algorithm.client_lr": [0.001]}},
                       backend={"name": "ray", "actors": 1})
    sweep = load_sweep(path)
    assert TrialResources(sweep)(next(sweep.points())).bundles == [{"CPU": 1.0}, {"CPU": 1.0}]
    outcome = run_sweep(path, storage=tmp_path / "ray_results", echo=lambda line: None)
    assert outcome.ok
    store = Store(outcome.tracking_uri)
    (trial,) = children(store, find_parent(store, outcome.experiment_id, "on_actors"))
    local = fco_ray.run({**sweep.trial_config(next(sweep.points())), "backend": {"name": "local"}})
    values = [m.value for m in store.client.get_metric_history(trial.info.run_id, "train_loss")]
    np.testing.assert_allclose(values, local["train_loss"], rtol=1e-9)


def test_random_search_and_asha_settings(tmp_path):
    path = write_sweep(tmp_path, search={
        "grid": {"algorithm.server_lr": [1.0, 0.3]},
        "random": {"algorithm.client_lr": {"loguniform": [1e-4, 1e-2]}}, "samples": 3},
        tune={"metric": "train_loss", "scheduler": "asha", "grace_period": 5})
    sweep = load_sweep(path)
    assert sweep.num_trials() == 2 * 1 * 2 * 3  # algorithms x seeds x grid x samples
    space = sweep.param_space()
    assert space["algorithm.client_lr"].lower == 1e-4 and space["algorithm.client_lr"].upper == 1e-2
    config = tune_config(sweep)
    # ASHA on rounds: milestones at grace_period * reduction_factor^k below max_t = rounds
    assert config.scheduler._time_attr == "round" and config.scheduler._max_t == 20
    assert [milestone for milestone, _ in config.scheduler._brackets[0]._rungs] == [15, 5]
    assert config.num_samples == 3


def test_a_fused_random_search_draws_its_points_once_and_groups_them(tmp_path):
    """With tune.fuse (the default) and no ASHA, a random search's points are drawn by the
    sweep from search.seed (each draw crossed with the grid and shared by the seeds) and
    fused like grid points; Tune then runs each group once."""
    search = {"grid": {"algorithm.server_lr": [1.0, 0.3]},
              "random": {"algorithm.client_lr": {"loguniform": [1e-4, 1e-2]}}, "samples": 3,
              "seed": 7}
    path = write_sweep(tmp_path, search=search, seeds=[0, 1])
    sweep = load_sweep(path)
    assert sweep.fused
    points = list(sweep.drawn_points())
    assert len(points) == sweep.num_trials() == 2 * 2 * 2 * 3  # algorithms x seeds x grid x samples
    groups = sweep.groups()
    assert sorted(json.dumps(p, sort_keys=True) for g in groups for p in g) == \
        sorted(json.dumps(p, sort_keys=True) for p in points)
    assert len(groups) == 2 * 2  # one group per algorithm and seed: 2 server rates x 3 draws
    assert tune_config(sweep).num_samples == 1
    rates = {(p["algorithm.name"], p["seed"]): sorted({p["algorithm.client_lr"] for p in points
                                                       if p["algorithm.name"] == name})
             for name in ("fedmid", "feddualavg") for p in points if p["algorithm.name"] == name}
    for (name, _), drawn in rates.items():
        assert len(drawn) == 3 and all(1e-4 <= r <= 1e-2 for r in drawn)
        assert drawn == rates[name, 0]  # the same draws on every seed
    assert rates["fedmid", 0] != rates["feddualavg", 0]  # each algorithm its own draws
    assert list(load_sweep(path).drawn_points()) == points  # reproducible from search.seed
    other = write_sweep(tmp_path / "..", search={**search, "seed": 8}, name="other", seeds=[0, 1])
    assert list(load_sweep(other).drawn_points()) != points


@pytest.mark.parametrize("search, message", [
    ({"random": {"algorithm.client_lr": {"loguniform": [0, 1]}}}, "loguniform needs low > 0"),
    ({"random": {"algorithm.client_lr": {"loguniform": [1e-2, 1e-4]}}}, "needs low < high"),
    ({"grid": {"algorithm.client_lr": [0.1, -1]}}, "algorithm.client_lr=-1"),
    ({"grid": {"algorithm.local_step": [1]}}, "unknown key 'algorithm.local_step'"),
    ({"grid": {"seed": [1, 2]}}, "list them in seeds"),
    ({"grid": {"algorithm.local_steps": [1, 10]}}, "'algorithm.local_steps'] both fixed"),
])
def test_invalid_search_spaces_are_rejected_before_tune(tmp_path, search, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_sweep(write_sweep(tmp_path, search=search))
    assert str(err.value).startswith(str(tmp_path / "tiny.yaml"))


def test_metric_must_be_reported(tmp_path):
    with pytest.raises(ConfigError, match="tune.metric: 'rank' is not reported by fedmid"):
        load_sweep(write_sweep(tmp_path, tune={"metric": "rank"}))


def test_search_axes_apply_only_to_the_algorithms_that_have_them(tmp_path):
    """centralized has no rates: a client_lr x server_lr grid runs it once per seed, and a
    shared hyperparameter it lacks is not given to it; one no algorithm has is an error."""
    path = write_sweep(tmp_path, algorithms=["centralized", "fedmid"], seeds=[0, 1],
                       search={"grid": {"algorithm.client_lr": [0.001, 0.01],
                                        "algorithm.server_lr": [1.0, 0.3]}},
                       tune={"metric": "train_loss"})
    sweep = load_sweep(path)
    points = list(sweep.grid_points())
    assert sweep.num_trials() == len(points) == 2 * 1 + 2 * 4
    assert [p for p in points if p["algorithm.name"] == "centralized"] == [
        {"algorithm.name": "centralized", "seed": 0}, {"algorithm.name": "centralized", "seed": 1}]
    assert sweep.run_config(points[0]).algorithm.model_dump() == {
        "name": "centralized", "clients_per_round": 4, "weighting": "uniform"}
    with pytest.raises(ConfigError, match="unknown key 'algorithm.server_lr': a hyperparameter of none of"):
        load_sweep(write_sweep(tmp_path, algorithms=["centralized"], algorithm={},
                               search={"grid": {"algorithm.server_lr": [1.0]}}))


def test_an_algorithm_that_does_not_fit_the_problem_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match="algorithm 'feddualex' does not fit problem 'lasso'"):
        load_sweep(write_sweep(tmp_path, algorithms=["feddualex"]))


def test_a_sweep_file_sets_the_divergence_bound(tmp_path):
    sweep = load_sweep(write_sweep(tmp_path, divergence=50.0))
    point = next(sweep.points())
    assert sweep.run_config(point).divergence == 50.0
    assert load_sweep(write_sweep(tmp_path)).run_config(point).divergence == 1e3
    with pytest.raises(ConfigError, match="divergence"):
        load_sweep(write_sweep(tmp_path, divergence=0.5))


@pytest.mark.ray
def test_trials_run_on_the_problems_the_driver_built(ray_cluster, tmp_path):
    """The driver builds each problem once to check the sweep; the trials run on those
    (Ray's object store), not on a second build: with the data file gone after `load_sweep`,
    the sweep still runs, every trial equal to its own run."""
    from fco_ray.core.plan import data_key

    rng = np.random.default_rng(0)
    lines = []
    for i in range(60):
        cols = np.sort(rng.choice(20, 4, replace=False)) + 1
        lines.append(f"{rng.integers(0, 2)} qid:{i % 5} " + " ".join(f"{c}:{rng.random():.3f}" for c in cols))
    data = tmp_path / "data.svm"
    data.write_text("\n".join(lines) + "\n")
    problem = {"name": "sparse_text_logreg", "dataset": "libsvm", "path": str(data), "test_fraction": 0.2}
    path = write_sweep(tmp_path, name="built_once", problem=problem, algorithms=["fedmid"],
                       algorithm={"clients_per_round": 3, "local_steps": 2, "client_lr": 0.5},
                       search={"grid": {"problem.lam": [1e-3, 1e-2]}}, rounds=4, eval_every=2,
                       tune={"metric": "train_loss", "mode": "min"})
    sweep = load_sweep(path)
    assert set(sweep.problems) == {data_key(sweep.run_config(p)) for p in sweep.points()}
    data.unlink()
    outcome = run_sweep(path, storage=tmp_path / "ray_results", echo=lambda line: None, sweep=sweep)
    assert outcome.ok
    store = Store(outcome.tracking_uri)
    runs = children(store, find_parent(store, outcome.experiment_id, "built_once"))
    assert len(runs) == 2
    data.write_text("\n".join(lines) + "\n")  # back, for the runs to compare with
    for run in runs:
        lam = float(run.data.params["problem.lam"])
        point = next(p for p in sweep.points() if p["problem.lam"] == lam)
        alone = fco_ray.run(sweep.trial_config(point))
        values = [m.value for m in store.client.get_metric_history(run.info.run_id, "train_loss")]
        np.testing.assert_allclose(values, alone["train_loss"], rtol=1e-9)


@pytest.mark.ray
def test_unfused_lam_trials_share_the_drivers_problem_each_with_its_own_lam(ray_cluster, tmp_path):
    """lam weighs psi alone on lasso: the driver keeps one problem for every lam, and each
    trial (unfused here: one per lam) runs on it with its own lam, equal to its own run."""
    from fco_ray.core.plan import data_key

    path = write_sweep(tmp_path, name="lams", algorithms=["feddualavg"],
                       algorithm={"clients_per_round": 4, "local_steps": 5, "client_lr": 0.001},
                       search={"grid": {"problem.lam": [0.02, 0.5]}}, rounds=10,
                       tune={"metric": "f1", "mode": "max", "fuse": False})
    sweep = load_sweep(path)
    assert sweep.num_tune_trials() == 2
    assert set(sweep.problems) == {data_key(sweep.run_config(p)) for p in sweep.points()} != set()
    assert len(sweep.problems) == 1  # one problem for both lams
    outcome = run_sweep(path, storage=tmp_path / "ray_results", echo=lambda line: None, sweep=sweep)
    assert outcome.ok
    store = Store(outcome.tracking_uri)
    runs = children(store, find_parent(store, outcome.experiment_id, "lams"))
    assert len(runs) == 2
    for run in runs:
        lam = float(run.data.params["problem.lam"])
        point = next(p for p in sweep.points() if p["problem.lam"] == lam)
        alone = fco_ray.run(sweep.trial_config(point))
        for metric in ("f1", "train_loss", "density"):
            values = [m.value for m in store.client.get_metric_history(run.info.run_id, metric)]
            np.testing.assert_allclose(values, alone[metric], rtol=1e-12, err_msg=metric)


def test_the_driver_keeps_problems_within_its_memory_share(tmp_path, monkeypatch):
    """Problems past `KEEP_SHARE` of the available memory are not kept: their trials build them."""
    from fco_ray.sweep import checks

    path = write_sweep(tmp_path)
    assert len(load_sweep(path).problems) == 1
    monkeypatch.setattr(checks, "KEEP_SHARE", 0.0)
    assert load_sweep(path).problems == {}


def test_the_driver_checks_the_trials_of_one_problem_section_on_one_build(tmp_path, monkeypatch):
    """The trials of one problem section are checked on one build whatever their seeds (the
    grouping of `plan.data_key(cfg, seed=False)`), which the driver keeps for the trials on
    that build's data (`plan.data_key`)."""
    from fco_ray.sweep import checks

    built, real = [], checks.build
    monkeypatch.setattr(checks, "build", lambda cfg: built.append(cfg.seed) or real(cfg))
    sweep = load_sweep(write_sweep(tmp_path, seeds=[0, 1, 2]))
    assert built == [0]
    assert list(sweep.problems) == [checks.data_key(sweep.run_config(next(sweep.points())))]
