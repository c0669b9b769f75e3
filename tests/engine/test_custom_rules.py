"""docs/custom_rules.md: an algorithm and a problem written once as rules run as written, alone
and fused over a grid on JAX's CPU platform; the fused members equal their own runs, and the
run equals an independent NumPy loop of the same mathematics."""
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax", reason="rules run on JAX")

import jax.numpy as jnp  # noqa: E402

import fco_ray  # noqa: E402
from fco_ray.ops.random import Key, sample_clients  # noqa: E402
from fco_ray.ops.prox import soft_threshold  # noqa: E402
from fco_ray.runtime.errors import ConfigError  # noqa: E402

pytestmark = pytest.mark.slow  # compiles the page's programs (~40 s on 2 cores)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "custom_rules.md"


@pytest.fixture(scope="module")
def example():
    """The page's code block, run as written (it registers `fedavg_momentum`)."""
    (code,) = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    namespace: dict = {}
    exec(compile(code, str(PAGE), "exec"), namespace)
    yield namespace
    fco_ray.ALGORITHMS.pop("fedavg_momentum", None)


def test_the_page_runs_and_its_grid_fuses(example):
    df, grid = example["df"], example["grid"]
    assert list(df["round"]) == [0, 10, 20, 30, 40] and df.attrs["status"] == "finished"
    assert df["train_loss"].iloc[-1] < 0.5 * df["train_loss"].iloc[0]
    assert set(grid["status"]) == {"finished"} and len(grid) == 4 * 5


def test_fused_members_equal_their_own_runs(example):
    config, problem, grid = example["config"], example["problem"], example["grid"]
    for (lr, beta), rows in grid.groupby(["algorithm.client_lr", "algorithm.momentum"]):
        own = fco_ray.run({**config, "algorithm": {**config["algorithm"], "client_lr": lr, "momentum": beta}},
                          problem=problem)
        np.testing.assert_allclose(rows["train_loss"].to_numpy(), own["train_loss"].to_numpy(), rtol=1e-9)


def reference(problem, lr, slr, beta, lam, steps, batch, per_round, rounds, seed=0):
    """FedAvg with server momentum and a proximal server step, written from its formulas in
    NumPy, with the engine's keyed client sampling and minibatch rows."""
    a, sizes = problem.train.arrays["a"], problem.train.sizes
    w, m = np.zeros(4), np.zeros(4)
    for r in range(rounds):
        clients = sample_clients(seed, r, problem.num_clients, per_round)
        deltas = []
        for c in clients:
            v = w.copy()
            for k in range(steps):
                rows = Key(seed, r, np.array([c])).with_step(k).integers(sizes[[c]], batch)[0]
                v = soft_threshold(v - lr * (v - a[c, rows].mean(axis=0)), lr * lam)
            deltas.append(v - w)
        m = beta * m + np.mean(deltas, axis=0)
        w = soft_threshold(w + slr * m, slr * lr * steps * lam)
    return w


def test_the_rule_is_the_mathematics(example):
    config, problem = example["config"], example["problem"]
    _, model = fco_ray.run(config, problem=problem, return_model=True)
    h = config["algorithm"]
    expected = reference(problem, h["client_lr"], 1.0, h["momentum"], 0.5, h["local_steps"],
                         h["batch_size"], h["clients_per_round"], config["rounds"])
    np.testing.assert_allclose(model["w"], expected, rtol=1e-9)


@pytest.mark.parametrize("device", ["auto", "cpu"])
def test_the_cpu_engine_runs_the_rule(example, device):
    """The default engine and `device: cpu` run the page's rule round by round (compiled
    client sums, `fco_ray.rules.host`): every row equals the whole compiled rounds of jax-cpu,
    and the fused grid's members equal their own runs."""
    config, problem, compiled = example["config"], example["problem"], example["df"]
    on = {**config, "backend": {"name": "local", "device": device}}
    df, model = fco_ray.run(on, problem=problem, return_model=True)
    assert df.attrs["backend"]["device"] == "cpu"  # auto: a pair never measured runs here
    np.testing.assert_allclose(df["train_loss"].to_numpy(), compiled["train_loss"].to_numpy(), rtol=1e-9)
    np.testing.assert_allclose(model["w"], example["model"]["w"], rtol=1e-9)
    grid = fco_ray.run_grid(on, {"algorithm.client_lr": [0.1, 0.03], "algorithm.momentum": [0.0, 0.5]},
                            problem=problem)
    assert len(grid) == 4 * 5 and set(grid["status"]) == {"finished"}
    merged = grid.merge(example["grid"], on=["algorithm.client_lr", "algorithm.momentum", "round"])
    np.testing.assert_allclose(merged["train_loss_x"], merged["train_loss_y"], rtol=1e-9)


def _broken(example, **methods):
    """The page's algorithm with some rule methods replaced, registered under a new name."""
    base = example["ServerMomentumRule"]
    rule = type("BrokenRule", (base,), methods)
    cls = type("Broken", (example["FedAvgMomentum"],), {"name": "broken_momentum", "rule": rule})
    fco_ray.register_algorithm(cls)
    return {**example["config"], "algorithm": {**example["config"]["algorithm"], "name": "broken_momentum"}}


@pytest.mark.parametrize("device", ["cpu", "jax-cpu"])
@pytest.mark.parametrize("broken, says", [
    ({"server": lambda self, problem, state, mean, hyper: {"w": state["w"]}},
     r"rule BrokenRule\.server returns a state .*missing \[\"\['m'\]\['w'\]\"\]"),
    ({"client": lambda self, problem, data, payload, hyper, client:
      {"w": jnp.zeros((3, 4))}},
     r"rule BrokenRule\.(client|server) .*shape"),
])
def test_a_rule_that_does_not_fit_is_refused_before_the_first_round(example, device, broken, says):
    config = _broken(example, **broken)
    try:
        with pytest.raises(ConfigError, match=says):
            fco_ray.run({**config, "backend": {"name": "local", "device": device}}, problem=example["problem"])
    finally:
        fco_ray.ALGORITHMS.pop("broken_momentum", None)
