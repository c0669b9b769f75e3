"""The composite family's numba accelerator on least squares (`fco_ray.accelerators.least_squares`,
one kernel call for K steps of every client and member) beside the rule it accelerates, where
tests/engine/test_accelerators.py does not look: a fused group with a member that diverges,
where it steps aside, and the problem's own hooks (a subclass's gradient and metrics)."""
import numpy as np
import pytest

from fco_ray import accelerators
from fco_ray.accelerators.least_squares import LEAST_SQUARES_L1
from fco_ray.algorithms import ALGORITHMS
from fco_ray.backends import LocalBackend
from fco_ray.core.config import parse_run
from fco_ray.core.group import make_group
from fco_ray.problems import build_problem
from fco_ray.problems.linear import LinearRegression

from tests.helpers import run_fused, run_one

LASSO = {"name": "lasso", "clients": 8, "dim": 24, "support": 6, "samples_per_client": 16,
         "val_clients": 2}
COMPOSITE = ["fedavg", "fedavg_subgrad", "fedmid", "fedmid_osp", "feddualavg", "feddualavg_osp",
             "local"]


def build(section, name, **hp):
    cfg = parse_run({"problem": section, "algorithm": {"name": name, **hp}})
    return build_problem(cfg.problem, 0), ALGORITHMS[name](cfg.algorithm)


def choose(monkeypatch, accelerated: bool):
    """Runs with the accelerator wherever it serves, or with the rule compiled."""
    monkeypatch.setattr(accelerators, "faster", lambda name, group, speeds=None: accelerated)


def rows(result):
    return [{k: v for k, v in r.items()} for r in result.records]


def assert_rows_close(a, b, rtol=1e-12):
    assert [r["round"] for r in a] == [r["round"] for r in b]
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_allclose(x[k], y[k], rtol=rtol, atol=1e-14, err_msg=k)


@pytest.mark.parametrize("name", ["fedmid", "feddualavg", "fedavg_subgrad"])
def test_a_fused_group_through_the_accelerator_equals_the_rule(name, monkeypatch):
    grid = [{"client_lr": lr, "server_lr": s} for lr in (0.003, 0.01, 0.3) for s in (1.0, 0.3)]
    fixed = {"local_steps": 3, "batch_size": 4, "clients_per_round": 4}
    problem, _ = build(LASSO, name, **fixed)
    members = [build(LASSO, name, **fixed, **g)[1] for g in grid]
    assert LEAST_SQUARES_L1.serves(make_group(members), problem)
    choose(monkeypatch, True)
    compiled = run_fused(problem, members, LocalBackend(problem), rounds=10, eval_every=2, seed=1,
                         divergence=1e3)
    choose(monkeypatch, False)
    python = run_fused(problem, members, LocalBackend(problem), rounds=10, eval_every=2,
                       seed=1, divergence=1e3)
    assert [r.status for r in compiled] == [r.status for r in python]
    assert "diverged" in [r.status for r in compiled]  # client_lr 0.3 blows up
    for a, b in zip(compiled, python):
        assert_rows_close(rows(a), rows(b))


def test_the_accelerator_steps_aside_where_it_does_not_apply():
    """Full-batch steps, a nuclear penalty (a matrix model): the rule runs."""
    lasso, full = build(LASSO, "fedmid", batch_size=None)
    assert not LEAST_SQUARES_L1.serves(make_group([full]), lasso)
    lowrank, algorithm = build({"name": "lowrank", "clients": 4, "dim": 4, "rank": 2,
                                "samples_per_client": 8, "val_clients": 1}, "fedmid")
    assert not LEAST_SQUARES_L1.serves(make_group([algorithm]), lowrank)
    served, algorithm = build(LASSO, "fedmid")
    assert LEAST_SQUARES_L1.serves(make_group([algorithm]), served)


def test_stacked_metrics_equal_one_by_one():
    problem, _ = build(LASSO, "fedmid")
    rng = np.random.default_rng(0)
    stacked = {"w": rng.standard_normal((5, LASSO["dim"])) * (rng.random((5, LASSO["dim"])) > 0.5),
               "b": rng.standard_normal(5)}
    together = problem.metrics_stack(stacked, 5)
    for g in range(5):
        alone = problem.metrics({"w": stacked["w"][g], "b": stacked["b"][g]})
        assert together[g].keys() == alone.keys()
        for k in alone:
            np.testing.assert_allclose(together[g][k], alone[k], rtol=1e-12, err_msg=k)


def test_a_subclass_with_its_own_gradient_gets_it_called():
    """The rule and its accelerator compute the least-squares gradient themselves: a subclass
    that overrides `grad` (and declares no rule of its own) gets its gradient called back from
    the algorithm's rule, once per local step for the round's clients, with the same numbers."""
    calls = []

    class Counted(LinearRegression):
        def grad(self, params, rows, key, batch_size):
            calls.append(len(rows))
            return super().grad(params, rows, key, batch_size)

    problem, algorithm = build(LASSO, "fedmid", local_steps=3, batch_size=4, clients_per_round=4)
    plain = run_one(problem, algorithm, LocalBackend(problem), rounds=2, eval_every=1, seed=0)
    problem.__class__ = Counted
    counted = run_one(problem, algorithm, LocalBackend(problem), rounds=2, eval_every=1, seed=0)
    assert calls == [4] * 6  # 2 rounds x 3 steps, 4 clients each
    assert_rows_close(rows(counted), rows(plain))


def test_a_subclass_with_its_own_metrics_gets_them_in_a_fused_group():
    problem, _ = build(LASSO, "fedmid")

    class Extra(LinearRegression):
        def evaluate(self, params):
            return {**super().evaluate(params), "w0": float(params["w"][0])}

    problem.__class__ = Extra
    stacked = {"w": np.arange(3 * LASSO["dim"], dtype=float).reshape(3, -1), "b": np.zeros(3)}
    assert [m["w0"] for m in problem.metrics_stack(stacked, 3)] == [0.0, 24.0, 48.0]
