"""One table-driven battery over every registered algorithm and problem.

Every pair an algorithm declares it fits (`Algorithm.supports` shares a kind with the
problem's `kinds`) runs a few rounds on a small instance and reports every metric the
problem declares; every other pair is rejected when the config is parsed (before any data
is built), naming both and listing the algorithms that fit. A representative pair per
family also runs on Ray actors and gives the local backend's numbers.
"""
import numpy as np
import pytest

import fco_ray
from fco_ray.algorithms import ALGORITHMS
from fco_ray.core.config import parse_run
from fco_ray.problems import PROBLEMS
from fco_ray.runtime.errors import ConfigError

from tests.helpers import daily

#: small instances of every registered problem (the paper defaults are too large here)
SMALL = {
    "lasso": {"clients": 6, "dim": 16, "support": 4, "samples_per_client": 12, "val_clients": 2},
    "lowrank": {"clients": 6, "dim": 4, "rank": 2, "samples_per_client": 12, "val_clients": 2},
    "sparse_logreg": {"clients": 6},
    "constrained_logreg": {"clients": 6},
    "mlp": {"clients": 6, "hidden": [6, 6]},
    "bilinear_l1": {"n": 6, "m": 8, "clients": 6},
    "bilinear_nuclear": {"n": 6, "m": 8, "p": 3, "rank": 2, "clients": 6},
    "adversarial": {"clients": 6},
    "sparse_text_logreg": {"clients": 6, "min_samples": 4, "max_samples": 12, "dim": 40,
                           "topics": 3, "words_per_doc": 4},
}
#: small, stable hyperparameters per algorithm (the names it declares)
SETTINGS = {"client_lr": 0.01, "local_steps": 2, "batch_size": 4, "clients_per_round": 3}


def kinds(problem: str) -> frozenset:
    return PROBLEMS[problem].params.problem_class.kinds


def config(algorithm: str, problem: str, **changes) -> dict:
    fields = ALGORITHMS[algorithm].Hyper.model_fields
    hyper = {k: v for k, v in SETTINGS.items() if k in fields}
    if "clients_per_round" in fields and fields["clients_per_round"].default is None:
        hyper.pop("clients_per_round")  # families that use every node (SVRG, CoCoA+)
    return {"problem": {"name": problem, **SMALL[problem]},
            "algorithm": {"name": algorithm, **hyper}, "rounds": 3, "eval_every": 1, "seed": 0,
            **changes}


PAIRS = [(a, p) for a in sorted(ALGORITHMS) for p in sorted(SMALL)]
FITTING = [(a, p) for a, p in PAIRS if ALGORITHMS[a].supports & kinds(p)]
NOT_FITTING = [(a, p) for a, p in PAIRS if not ALGORITHMS[a].supports & kinds(p)]


def test_every_problem_and_algorithm_is_in_the_battery():
    shipped = {n for n, spec in PROBLEMS.items() if spec.build.__module__.startswith("fco_ray.")}
    assert set(SMALL) == shipped - {"custom"}  # (other test modules register their own)
    assert {a for a, _ in FITTING} == set(ALGORITHMS)  # each algorithm runs somewhere
    assert {p for _, p in FITTING} == set(SMALL)


@pytest.mark.parametrize("algorithm, problem", daily(FITTING))  # fast subset: one per problem
def test_every_declared_pair_runs_and_reports_the_problems_metrics(algorithm, problem):
    df = fco_ray.run(config(algorithm, problem))
    assert df.attrs["status"] == "finished"
    assert list(df["round"]) == [0, 1, 2, 3]
    assert np.all(np.isfinite(df["train_loss"]))
    built = fco_ray.problems.build_problem(parse_run(config(algorithm, problem)).problem, 0)
    assert set(built.metric_names()) <= set(df.columns)


@pytest.mark.parametrize("algorithm, problem", NOT_FITTING)
def test_every_undeclared_pair_is_rejected_when_parsed(algorithm, problem):
    with pytest.raises(ConfigError, match=f"algorithm '{algorithm}' does not fit problem "
                                          f"'{problem}'.*algorithms for this problem: "):
        parse_run(config(algorithm, problem))


def test_an_undeclared_pair_is_rejected_for_a_problem_instance_too():
    problem = fco_ray.problems.build_problem(parse_run(config("feddualex", "bilinear_l1")).problem, 0)
    with pytest.raises(ConfigError, match="algorithm 'fedavg' does not fit problem"):
        fco_ray.run({"algorithm": {"name": "fedavg"}, "rounds": 1}, problem=problem)


def test_the_cli_rejects_an_undeclared_pair_with_exit_code_2(tmp_path, capsys):
    from fco_ray.cli import main

    path = tmp_path / "run.yaml"
    path.write_text("problem: {name: bilinear_l1}\nalgorithm: {name: centralized}\n")
    assert main(["run", str(path)]) == 2
    assert "does not fit problem 'bilinear_l1'" in capsys.readouterr().err
    assert not (tmp_path / "mlflow.db").exists()


#: one pair per family on Ray actors
ON_RAY = [("feddualavg", "lasso"), ("feddualex", "bilinear_l1"), ("fedmid", "mlp"),
          ("fsvrg", "sparse_text_logreg"), ("cocoa_plus", "sparse_text_logreg")]


@pytest.mark.ray
@pytest.mark.parametrize("algorithm, problem", ON_RAY)
def test_ray_actors_give_the_local_numbers(ray_cluster, algorithm, problem):
    local = fco_ray.run(config(algorithm, problem))
    on_ray = fco_ray.run(config(algorithm, problem, backend={"name": "ray", "actors": 2}))
    assert on_ray.attrs["status"] == local.attrs["status"] == "finished"
    for column in local.columns:
        np.testing.assert_allclose(on_ray[column], local[column], rtol=1e-9, atol=1e-12)


def arrays(obj, seen=None) -> list:
    """The NumPy arrays an object holds (its attributes, dicts, lists, nested)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return [obj]
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        items = list(obj)
    else:
        items = list(vars(obj).values()) if hasattr(obj, "__dict__") else []
    return [a for item in items for a in arrays(item, seen)]


@pytest.mark.ray
@pytest.mark.parametrize("problem", sorted(SMALL))
def test_a_problem_from_the_object_store_runs_every_fitting_pair(ray_cluster, problem):
    """A sweep's trials run on the problem its driver built, taken from Ray's object store
    (its arrays then read-only, shared by the node's trials): every fitting pair runs on
    it and gives the numbers of a problem built in place."""
    import ray

    from fco_ray.core.plan import build, prepare

    algorithms = [a for a, p in FITTING if p == problem]
    shared = ray.get(ray.put(build(parse_run(config(algorithms[0], problem)))))
    assert arrays(shared) and not any(a.flags.writeable for a in arrays(shared))
    for algorithm in algorithms:
        cfg = parse_run(config(algorithm, problem))
        (result,) = prepare([cfg], shared).run()
        local = fco_ray.run(config(algorithm, problem))
        assert result.status == local.attrs["status"] == "finished", algorithm
        for column in local.columns:
            np.testing.assert_allclose([r[column] for r in result.records], local[column],
                                       rtol=1e-12, atol=0, err_msg=f"{algorithm}: {column}")
