"""Metrics on the device (fco_ray/rules/metrics.py): each dense problem's metrics computed inside
the compiled rounds equal the host's `Problem.metrics` of the same state (1e-9 relative), the
engine takes its rows from the device without evaluating on the host, and a problem without
metric rules keeps the host's evaluation."""
from contextlib import closing

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the device path needs JAX (pip install jax)")

from fco_ray.backends import make_backend  # noqa: E402
from fco_ray.core.config import parse_run  # noqa: E402
from fco_ray.core.plan import prepare  # noqa: E402
from fco_ray.problems.linear import LinearRegression  # noqa: E402
from fco_ray.rules.metrics import metric_rule  # noqa: E402

PROBLEMS = {
    "lasso": {"name": "lasso", "clients": 6, "samples_per_client": [9, 12, 7, 12, 10, 11], "dim": 10,
              "support": 3, "val_clients": 2},
    "lowrank": {"name": "lowrank", "clients": 6, "samples_per_client": [9, 12, 7, 12, 10, 11], "dim": 4,
                "rank": 2, "val_clients": 2},
    "bilinear_l1": {"name": "bilinear_l1", "n": 12, "m": 20, "clients": 6, "data_seed": 0},
    "bilinear_nuclear": {"name": "bilinear_nuclear", "n": 12, "m": 20, "p": 5, "rank": 2, "clients": 6,
                         "data_seed": 0},
    "adversarial": {"name": "adversarial", "clients": 6, "lam": 0.003, "data_seed": 0},
}
#: (problem, algorithm, extra hyperparameters, client rates): ergodic FeDualEx also has the
#: suffixed metrics of its extra output
CASES = [("lasso", "feddualavg", {}, [0.02, 0.005, 0.001]),
         ("lasso", "fedmid", {}, [0.02]),
         ("lowrank", "feddualavg", {}, [0.02, 0.005]),
         ("bilinear_l1", "feddualex", {"ergodic": True}, [0.3, 0.1, 0.03]),
         ("bilinear_l1", "fedmip", {}, [0.3, 0.03]),
         ("bilinear_nuclear", "feddualex", {}, [0.3, 0.03]),
         ("adversarial", "feddualex", {}, [0.3, 0.1]),
         ("adversarial", "pgda", {}, [0.3])]


def configs(problem: str, algorithm: str, hp: dict, rates, seeds=(3,), lams=None):
    alg = {"name": algorithm, "local_steps": 3, "clients_per_round": 4,
           **({} if problem.startswith("bilinear") else {"batch_size": 4}), **hp}
    out = []
    for seed in seeds:
        for lam in (lams or [None]):
            prob = PROBLEMS[problem] if lam is None else {**PROBLEMS[problem], "lam": lam}
            out += [parse_run({"problem": prob, "algorithm": {**alg, "client_lr": lr},
                               "rounds": 4, "eval_every": 2, "seed": seed,
                               "backend": {"name": "local", "device": "jax-cpu"}}) for lr in rates]
    return out


def device_and_host_rows(cfgs, rounds: int = 3):
    """The device's rows after `rounds` rounds and the host's `group.evaluate` of the same state."""
    prepared = prepare(cfgs)
    group, problem = prepared.group(), prepared.problem
    seeds = prepared.seeds or [cfgs[0].seed] * group.size
    with closing(make_backend(prepared.backend, problem)) as backend:
        assert backend.name == "device"
        state = group.start(problem, cfgs[0].seed)
        state, stopped, _, rows = backend.run_rounds(group, state, seeds, 0, rounds)
    assert stopped == [] and rows is not None
    return rows, group.evaluate(problem, state)


def assert_rows_equal(device, host, rtol=1e-9):
    assert len(device) == len(host)
    for d, h in zip(device, host):
        assert list(d) == list(h)  # the same metrics, in the host's order
        for k in h:
            a, b = float(h[k]), float(d[k])
            if np.isinf(a) or np.isnan(a):
                assert a == b or (np.isnan(a) and np.isnan(b)), k
            else:
                np.testing.assert_allclose(b, a, rtol=rtol, atol=1e-300, err_msg=k)


#: the fast subset keeps what no other fast test compares: the ergodic extra output's suffixed
#: metrics. tests/engine/test_device.py's fused runs (its CORE, fast) already compare each
#: problem's device rows with the CPU engine's, which evaluates on the host; the rest run in
#: the whole suite
@pytest.mark.parametrize("problem, algorithm, hp, rates", [
    pytest.param(*c, id=f"{c[0]}-{c[1]}{'-ergodic' if c[2] else ''}-G{len(c[3])}",
                 marks=() if c[2].get("ergodic") else pytest.mark.slow) for c in CASES])
def test_device_metrics_equal_the_host_metrics(problem, algorithm, hp, rates):
    device, host = device_and_host_rows(configs(problem, algorithm, hp, rates))
    assert_rows_equal(device, host)
    if hp.get("ergodic"):
        assert "duality_gap_ergodic" in device[0]


@pytest.mark.parametrize("problem, algorithm, seeds", [  # fast: fused over seeds too (lam alone: test_device.py)
    pytest.param("lasso", "feddualavg", (3,), marks=pytest.mark.slow), ("bilinear_l1", "feddualex", (3, 4))])
def test_device_metrics_with_each_members_own_lam_and_seed(problem, algorithm, seeds):
    # members fused over lam (each its own psi weight in the metrics) and, where the data does
    # not depend on the seed (data_seed set), over seeds
    cfgs = configs(problem, algorithm, {}, [0.01], seeds=seeds, lams=[0.1, 0.02])
    prepared = prepare(cfgs)
    assert prepared.lams is not None and (prepared.seeds is not None) == (len(seeds) > 1)
    device, host = device_and_host_rows(cfgs)
    assert_rows_equal(device, host)


def test_the_engine_takes_its_rows_from_the_device(monkeypatch):
    from fco_ray.core import group as group_module

    cfgs = configs("bilinear_l1", "feddualex", {}, [0.3, 0.03])
    prepared = prepare(cfgs)
    cls = type(prepared.group())
    assert issubclass(cls, group_module.Group)
    calls = []
    host = cls.evaluate

    def counted(self, problem, state):
        calls.append(1)
        return host(self, problem, state)

    monkeypatch.setattr(cls, "evaluate", counted)
    results = prepared.run()
    assert [r.status for r in results] == ["finished", "finished"]
    assert [row["round"] for row in results[0].records] == [0, 2, 4]
    assert len(calls) == 1  # round 0 only (before any compiled call): rounds 2 and 4 came from the device


@pytest.mark.slow  # in the fast subset as test_device.py's fused runs through `fco_ray.run_grid`
def test_the_engine_rows_equal_the_cpu_engines():
    cfgs = configs("lasso", "feddualavg", {}, [0.02, 0.005])
    device = prepare(cfgs).run()
    cpu = prepare([c.model_copy(update={"backend": c.backend.model_copy(update={"device": "cpu"})})
                   for c in cfgs]).run()
    for a, b in zip(device, cpu):
        assert_rows_equal(a.records, b.records)


def test_a_problem_without_metric_rules_keeps_the_host_evaluation():
    class Custom(LinearRegression):  # a subclass may compute its metrics otherwise
        rule = LinearRegression.rule  # (a subclass declares its own rule)

        def evaluate(self, params):
            return {"custom": 1.0}

    prepared = prepare(configs("lasso", "feddualavg", {}, [0.02]))
    problem = prepared.problem
    assert metric_rule(problem) is not None
    custom = Custom(train=problem.train, val=problem.val, shapes=problem.shapes, psi=problem.psi,
                    name=problem.name, info=problem.info)
    assert metric_rule(custom) is None
    with closing(make_backend(prepared.backend, custom)) as backend:
        group = prepared.group()
        state = group.start(custom, 3)
        _, _, _, rows = backend.run_rounds(group, state, [3], 0, 2)
    assert rows is None
    cfgs = configs("lasso", "feddualavg", {}, [0.02])
    records = prepare(cfgs, problem=custom).run()[0].records
    assert [r["round"] for r in records] == [0, 2, 4] and all(r["custom"] == 1.0 for r in records)
