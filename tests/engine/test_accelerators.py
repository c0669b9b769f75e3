"""Every registered accelerator (fco_ray/accelerators) against the rule it accelerates: the
same runs, once with the accelerator and once with the rule compiled, give the same rows and
final models (1e-9), alone and fused, for every rule it serves."""
import numpy as np
import pytest

pytest.importorskip("jax", reason="rules run on JAX")

import fco_ray  # noqa: E402
from fco_ray import accelerators  # noqa: E402
from fco_ray.algorithms import ALGORITHMS  # noqa: E402
from fco_ray.runtime.refs import resolve  # noqa: E402
from tests.helpers import daily  # noqa: E402

#: a small problem of each accelerator's problem rule
PROBLEMS = {"least_squares_l1": [{"name": "lasso", "clients": 12, "dim": 40, "samples_per_client": 16,
                                  "support": 6, "val_clients": 2, "lam": 0.05}],
            "least_squares_nuclear": [{"name": "lowrank", "clients": 12, "dim": 6, "rank": 2,
                                       "samples_per_client": 16, "val_clients": 2, "lam": 0.3}]}


#: the algorithm of each rule that the fast subset runs (the papers' own; the other variants of
#: the rule in the whole suite)
FIRST = ("fedmid", "feddualavg")


def cases():
    for name, ref in accelerators.ACCELERATORS.items():
        acc = resolve(ref)
        served = sorted((a for a, cls in ALGORITHMS.items()
                         if getattr(cls, "rule", None) and isinstance(cls.rule, str)
                         and cls.rule in acc.rules), key=lambda a: a not in FIRST)
        for problem in PROBLEMS[name]:
            for algorithm in served:
                yield pytest.param(name, problem, algorithm, id=f"{name}-{problem['name']}-{algorithm}")


def run(problem, algorithm, accelerated: bool, monkeypatch, grid=None, name=None):
    """A run (or a fused grid) with every accelerator chosen, or none; asserts which ran
    (accelerator `name`, where given, when accelerated)."""
    monkeypatch.setattr(accelerators, "faster", lambda name, group, speeds=None: accelerated)
    calls = []
    for ref in accelerators.ACCELERATORS.values():
        acc = resolve(ref)
        original = type(acc).client_sums
        monkeypatch.setattr(type(acc), "client_sums",
                            lambda self, *a, _f=original, **k: calls.append(self.name) or _f(self, *a, **k))
    config = {"problem": problem, "algorithm": {"name": algorithm, "client_lr": 0.02, "server_lr": 1.0,
                                                "local_steps": 4, "batch_size": 5, "clients_per_round": 5},
              "rounds": 12, "eval_every": 4, "backend": {"name": "local", "device": "cpu"}}
    out = fco_ray.run(config, return_model=True) if grid is None else (fco_ray.run_grid(config, grid), None)
    assert bool(calls) == accelerated
    assert not accelerated or name is None or set(calls) == {name}
    return out


@pytest.mark.parametrize("name", list(accelerators.ACCELERATORS))
def test_every_rule_of_the_kernel_is_served(name):
    """Each least-squares accelerator serves both composite rules, hence all seven algorithms."""
    names = {c.values[2] for c in cases() if c.values[0] == name}
    assert names >= {"fedavg", "fedavg_subgrad", "fedmid", "fedmid_osp", "feddualavg", "feddualavg_osp", "local"}


@pytest.mark.parametrize("name, problem, algorithm", daily(  # fast subset: each rule it serves once
    cases(), key=lambda case: (case[0], ALGORITHMS[case[2]].rule)))
def test_the_accelerator_equals_its_rule(name, problem, algorithm, monkeypatch):
    (fast, fast_model), (ruled, ruled_model) = (run(problem, algorithm, True, monkeypatch, name=name),
                                                run(problem, algorithm, False, monkeypatch))
    assert list(fast["round"]) == [0, 4, 8, 12]
    metrics = [c for c in ruled.columns if c != "round"]
    np.testing.assert_allclose(fast[metrics].to_numpy(float), ruled[metrics].to_numpy(float), rtol=1e-9, atol=1e-12)
    for block in ruled_model:
        np.testing.assert_allclose(fast_model[block], ruled_model[block], rtol=1e-9, atol=1e-12)
    if algorithm == "local":
        return  # the local baseline has no server rate to fuse over
    # nine members: the kernels take a group's models two at a time, and the ninth alone
    grid = {"algorithm.client_lr": [0.02, 0.01, 0.005], "algorithm.server_lr": [1.0, 0.5, 0.25]}
    fused, _ = run(problem, algorithm, True, monkeypatch, grid, name)
    alone, _ = run(problem, algorithm, False, monkeypatch, grid)
    np.testing.assert_allclose(fused["train_loss"], alone["train_loss"], rtol=1e-9)


def test_the_choice_follows_the_record():
    assert accelerators.faster("x", 4, {"x": [{"G": 1, "rule_ms": 2.0, "accelerator_ms": 1.0},
                                              {"G": 16, "rule_ms": 1.0, "accelerator_ms": 2.0}]}) is True
    assert accelerators.faster("x", 12, {"x": [{"G": 1, "rule_ms": 2.0, "accelerator_ms": 1.0},
                                               {"G": 16, "rule_ms": 1.0, "accelerator_ms": 2.0}]}) is False
    assert accelerators.faster("never measured", 1, {}) is False
