"""A whole Ray node removed mid-sweep (`ray.cluster_utils.Cluster.remove_node`): no trial and
no MLflow row is lost (README "Reliability").

Three nodes on this machine: a head with no CPUs (the driver only) and two 1-CPU worker
nodes. The sweep has two seeds x two client rates: two fused trials (one per seed, each
running both rates as one stacked computation), one per worker node. When the first trial
reports round 10, worker node B is removed (all its processes killed) and a fresh node C
is added: the trial that ran on B is rerun by Tune from its last checkpoint on C. All four
configurations end `finished` with every round exactly once in MLflow, equal to an
undisturbed run.
"""
import sys
import time

import numpy as np
import pytest
import yaml

ray = pytest.importorskip("ray")
from ray import cloudpickle  # noqa: E402

import fco_ray  # noqa: E402
from fco_ray.sweep import run_sweep  # noqa: E402
from fco_ray.sweep.logging import MLflowLogger  # noqa: E402
from fco_ray.tracking.queries import children, find_parent, trials_frame  # noqa: E402
from fco_ray.tracking.store import Store  # noqa: E402
from tests.cluster_process import ClusterProcess  # noqa: E402

LASSO = {"name": "slow_lasso", "clients": 16, "dim": 64, "support": 8, "val_clients": 4,
         "samples_per_client": 32}
STEPS = list(range(0, 41, 5))


def register_slow_lasso():
    """`slow_lasso`: lasso whose every evaluation takes 0.4 s more, so a trial is still
    running when its node goes away. Run in every Ray worker (worker_process_setup_hook)."""
    import time
    from typing import Literal

    from fco_ray.problems import PROBLEMS, LassoParams, register_problem
    from fco_ray.problems.linear import make_lasso

    if "slow_lasso" in PROBLEMS:
        return

    class SlowLassoParams(LassoParams):
        name: Literal["slow_lasso"] = "slow_lasso"

    @register_problem("slow_lasso", SlowLassoParams)
    def build(p, seed):
        problem = make_lasso(seed=seed, **p.model_dump(exclude={"name", "data_seed"}))
        evaluate = problem.evaluate

        def slow_evaluate(params):
            time.sleep(0.4)
            return evaluate(params)

        problem.evaluate = slow_evaluate
        return problem


register_slow_lasso()
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture
def nodes():
    if ray.is_initialized():
        ray.shutdown()
    cluster = ClusterProcess(head_cpus=0, runtime_env={"worker_process_setup_hook": register_slow_lasso})
    workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
    yield cluster, workers
    cluster.shutdown()


@pytest.mark.ray
def test_node_removed_mid_sweep_loses_no_trial_and_no_row(nodes, tmp_path, monkeypatch):
    cluster, (_, doomed) = nodes
    sweep = {"name": "nodeloss", "problem": LASSO, "algorithms": ["fedmid"],
             "algorithm": {"clients_per_round": 4, "local_steps": 5},
             "search": {"grid": {"algorithm.client_lr": [0.001, 0.002]}}, "seeds": [0, 1],
             "rounds": 40, "eval_every": 5, "report": False,
             "tune": {"metric": "f1", "mode": "max", "max_failures": 2, "checkpoint_every": 10},
             "tracking": {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}}
    path = tmp_path / "nodeloss.yaml"
    path.write_text(yaml.safe_dump(sweep))
    removed = []
    on_trial_result = MLflowLogger.on_trial_result

    def remove_node_once(self, iteration, trials, trial, result, **info):
        if result.get("round") == 10 and not removed:
            cluster.remove_node(doomed)  # every process on it dies
            cluster.add_node(num_cpus=1)  # room for the rerun
            removed.append(time.time())
        return on_trial_result(self, iteration, trials, trial, result, **info)

    monkeypatch.setattr(MLflowLogger, "on_trial_result", remove_node_once)
    lines = []
    outcome = run_sweep(path, storage=tmp_path / "state", echo=lines.append)
    assert removed and outcome.ok

    store = Store(outcome.tracking_uri)
    parent = find_parent(store, outcome.experiment_id, "nodeloss")
    runs = children(store, parent)
    trials = trials_frame(runs)
    assert parent.info.status == "FINISHED" and len(runs) == 4
    assert list(trials["status"]) == ["finished"] * 4
    # the two configurations of the trial on node B, rerun once
    assert sum(r.data.tags.get("fco.retries") == "1" for r in runs) == 2
    assert sum("rerun by Tune" in line for line in lines) == 1
    for run in runs:
        lr, seed = float(run.data.params["algorithm.client_lr"]), int(run.data.params["seed"])
        expected = fco_ray.run({"problem": {**LASSO, "name": "lasso"},
                                "algorithm": {"name": "fedmid", "clients_per_round": 4,
                                              "local_steps": 5, "client_lr": lr},
                                "rounds": 40, "eval_every": 5, "seed": seed})
        for metric in ("f1", "train_loss"):
            history = store.client.get_metric_history(run.info.run_id, metric)
            assert [m.step for m in history] == STEPS  # every round exactly once
            np.testing.assert_allclose([m.value for m in history], expected[metric], rtol=1e-12)
