"""An algorithm written as a rule alone (docs/custom_rules.md's example) on Ray actors: each
actor runs the compiled client program over its own shard and returns weighted sums, the
server rule runs on the driver; alone, fused over a grid and in a sweep, every row equals the
local engine's."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ray")
pytest.importorskip("jax", reason="rules run on JAX")

import fco_ray  # noqa: E402

pytestmark = pytest.mark.ray
ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "custom_rules.md"
GRID = {"algorithm.client_lr": [0.1, 0.03], "algorithm.momentum": [0.0, 0.5]}


def page_code() -> str:
    (code,) = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    return code


@pytest.fixture(scope="module")
def example():
    """The page's classes, problem and config (its runs left out)."""
    code = page_code()
    namespace: dict = {}
    exec(compile(code[:code.index("df, model = ")], str(PAGE), "exec"), namespace)
    yield namespace
    fco_ray.ALGORITHMS.pop("fedavg_momentum", None)


def test_ray_actors_run_a_rule_alone_and_fused(ray_cluster, example):
    config, problem = example["config"], example["problem"]
    local = {**config, "backend": {"name": "local", "device": "cpu"}}
    on_ray = {**config, "backend": {"name": "ray", "actors": 2, "cpus_per_actor": 0.5}}
    want, want_model = fco_ray.run(local, problem=problem, return_model=True)
    got, got_model = fco_ray.run(on_ray, problem=problem, return_model=True)
    np.testing.assert_allclose(got["train_loss"], want["train_loss"], rtol=1e-9)
    np.testing.assert_allclose(got_model["w"], want_model["w"], rtol=1e-9)
    fused = fco_ray.run_grid(on_ray, GRID, problem=problem)
    alone = fco_ray.run_grid(local, GRID, problem=problem)
    merged = fused.merge(alone, on=[*GRID, "round"])
    assert len(merged) == 4 * 5
    np.testing.assert_allclose(merged["train_loss_x"], merged["train_loss_y"], rtol=1e-9)


SWEEP = """name: rule_sweep
problem: {name: lasso, clients: 8, dim: 16, samples_per_client: 8, support: 4, val_clients: 2}
algorithms: [fedavg_momentum]
algorithm: {local_steps: 2, batch_size: 4, clients_per_round: 4}
search: {grid: {algorithm.client_lr: [0.01, 0.003], algorithm.momentum: [0.0, 0.5]}}
seeds: [0]
rounds: 20
eval_every: 10
tune: {metric: f1, mode: max}
report: false
"""


@pytest.mark.slow
def test_a_sweep_of_a_users_rule_on_ray_actors(tmp_path, example):
    """`fco-ray sweep` from a script that registers the page's algorithm: its trials (other
    processes) get the user's class from the driver, and each trial's clients run on a Ray
    actor; the sweep's rows equal the local engine's."""
    code = page_code()
    (tmp_path / "cli.py").write_text(
        code[:code.index("rng = np.random.default_rng(0)")]
        + "\nimport sys\nfrom fco_ray.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    (tmp_path / "rule.yaml").write_text(SWEEP)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "cli.py", "sweep", "rule.yaml", "--set", "backend.name=ray",
                           "--set", "backend.actors=1"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    import mlflow  # noqa: PLC0415

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["rule_sweep"])
    runs = runs[runs["params.algorithm.client_lr"].notna()]
    assert len(runs) == 4 and set(runs["tags.fco.status"]) == {"finished"}
    base = {"problem": {"name": "lasso", "clients": 8, "dim": 16, "samples_per_client": 8,
                        "support": 4, "val_clients": 2},
            "algorithm": {"name": "fedavg_momentum", "local_steps": 2, "batch_size": 4,
                          "clients_per_round": 4},
            "rounds": 20, "eval_every": 10, "backend": {"name": "local", "device": "cpu"}}
    local = fco_ray.run_grid(base, {"algorithm.client_lr": [0.01, 0.003], "algorithm.momentum": [0.0, 0.5]})
    final = local[local["round"] == 20]
    for _, run in runs.iterrows():
        mine = final[(final["algorithm.client_lr"] == float(run["params.algorithm.client_lr"]))
                     & (final["algorithm.momentum"] == float(run["params.algorithm.momentum"]))]
        np.testing.assert_allclose(run["metrics.train_loss"], mine["train_loss"].item(), rtol=1e-9)
