"""Groups fused over seeds (and lam and rates) on the device backend: where the data does not
depend on the seed (`problem.data_seed` fixed), configurations that differ in seed run as one
group whose members draw their own clients, minibatches, noise and initial points; every
member's rows and final model equal its own run on the CPU engine."""
import numpy as np
import pytest

pytest.importorskip("jax", reason="the device backend needs JAX")

import fco_ray  # noqa: E402
from fco_ray.core.config import parse_run  # noqa: E402
from fco_ray.core.grid import expand  # noqa: E402
from fco_ray.core.plan import groups, seeds_fuse  # noqa: E402

from tests.helpers import run_group  # noqa: E402

CASES = {
    "feddualex": {"problem": {"name": "bilinear_l1", "n": 8, "m": 12, "clients": 5, "data_seed": 0},
                  "algorithm": {"name": "feddualex", "local_steps": 2, "clients_per_round": 3},
                  "rates": [0.3, 0.1]},
    "feddualavg": {"problem": {"name": "lasso", "clients": 6, "samples_per_client": [9, 12, 7, 12, 10, 11],
                               "dim": 10, "support": 3, "val_clients": 2, "data_seed": 4},
                   "algorithm": {"name": "feddualavg", "local_steps": 3, "clients_per_round": 4,
                                 "batch_size": 4},
                   "rates": [0.05, 0.01]},
}


def configs(case: dict, device: str) -> list:
    base = {"problem": case["problem"], "algorithm": case["algorithm"], "rounds": 4, "eval_every": 2,
            "backend": {"name": "local", "device": device}}
    grid = {"seed": [0, 1, 2], "problem.lam": [0.1, 0.05], "algorithm.client_lr": case["rates"]}
    return [cfg for _, cfg in expand(base, grid)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_seeds_fuse_where_the_data_ignores_the_seed(name):
    device = configs(CASES[name], "jax-cpu")
    assert len(groups(device)) == 1 and seeds_fuse(device[0])
    cpu = configs(CASES[name], "cpu")  # one key per round for a whole group: one seed per group
    assert len(groups(cpu)) == 3 and not seeds_fuse(cpu[0])
    unfixed = parse_run({**device[0].model_dump(mode="json"),
                         "problem": {**CASES[name]["problem"], "data_seed": None}})
    assert not seeds_fuse(unfixed)


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n == "feddualex" else pytest.mark.slow)
                                  for n in sorted(CASES)])
def test_every_member_of_a_seed_fused_group_equals_its_own_run(name):
    fused = run_group(configs(CASES[name], "jax-cpu"))
    finished = 0
    for cfg, (result, model) in zip(configs(CASES[name], "cpu"), fused):
        own, own_model = fco_ray.run(cfg, return_model=True)
        assert result.status == own.attrs["status"]
        assert [r["round"] for r in result.records] == list(own["round"])
        for row, (_, ref) in zip(result.records, own.iterrows()):
            for k, v in row.items():
                np.testing.assert_allclose(v, ref[k], rtol=1e-9, atol=1e-300, err_msg=f"{cfg.seed} {k}")
        if model is not None:
            finished += 1
            for k in model:
                np.testing.assert_allclose(model[k], own_model[k], rtol=1e-9, atol=1e-12, err_msg=k)
    assert finished >= 6


def test_a_shipped_e5_sweep_forms_one_trial_per_method_on_a_device():
    """sweeps/e5_l1_k10.yaml fixes data_seed: on a device a method's 35 rate pairs x 10 seeds
    are one Tune trial (350 configurations); on the NumPy engine one trial per seed."""
    from pathlib import Path

    from fco_ray.sweep.checks import load_sweep

    path = Path(__file__).resolve().parents[2] / "sweeps" / "e5_l1_k10.yaml"
    device = load_sweep(path, ["backend.name=local", "backend.device=jax-cpu", "tune.gpus_per_trial=0"])
    assert [len(g) for g in device.groups()] == [350] * 5
    assert {p["seed"] for p in device.groups()[0]} == set(range(10))
    assert [len(g) for g in load_sweep(path).groups()] == [35] * 50
