"""The Python API: run(config) -> DataFrame, bad input, divergence, custom problems."""
import numpy as np
import pandas as pd
import pytest

import fco_ray
from fco_ray import ClientData, ConfigError, Problem
from fco_ray.ops import regularizers as R

SMALL = {"name": "lasso", "clients": 8, "samples_per_client": 16, "dim": 20, "support": 4,
         "val_clients": 2}


def config(**over):
    base = {"problem": dict(SMALL), "algorithm": {"name": "feddualavg", "client_lr": 0.005,
            "clients_per_round": 4, "local_steps": 3, "batch_size": 4}, "rounds": 12, "eval_every": 5}
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            base[k] = {**base[k], **v}
        else:
            base[k] = v
    return base


def test_run_returns_a_dataframe_with_contract_columns():
    df = fco_ray.run(config())
    assert isinstance(df, pd.DataFrame)
    assert list(df["round"]) == [0, 5, 10, 12]
    for col in ["train_loss", "val_mse", "precision", "recall", "f1", "density", "floats_up", "floats_down"]:
        assert col in df.columns
    assert df.attrs["status"] == "finished"
    assert df["train_loss"].iloc[-1] < df["train_loss"].iloc[0]


def test_same_seed_same_result_other_seed_differs():
    a, b, c = fco_ray.run(config()), fco_ray.run(config()), fco_ray.run(config(seed=1))
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a["train_loss"].iloc[-1], c["train_loss"].iloc[-1])


def test_run_from_yaml_file(tmp_path):
    import yaml

    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config()))
    pd.testing.assert_frame_equal(fco_ray.run(path), fco_ray.run(config()))


def test_divergence_stops_with_status_and_last_finite_metrics():
    df = fco_ray.run(config(algorithm={"client_lr": 5.0}, rounds=50, eval_every=1))
    assert df.attrs["status"] == "diverged"
    assert len(df) >= 1 and np.isfinite(df["train_loss"]).all()
    assert df["round"].iloc[-1] < 50


BAD = [
    ({"algorithm": {"client_lr": -0.1}}, ["algorithm.client_lr", "greater than 0", "-0.1"]),
    ({"algorithm": {"client_lr": 0}}, ["algorithm.client_lr", "greater than 0"]),
    ({"algorithm": {"server_lr": float("nan")}}, ["algorithm.server_lr"]),
    ({"algorithm": {"name": "fedsgd"}}, ["unknown algorithm 'fedsgd'", "feddualavg"]),
    ({"problem": {"name": "nope"}}, ["unknown problem 'nope'", "lasso"]),
    ({"problem": {"lam": -1}}, ["problem.lam", "greater than or equal to 0", "-1"]),
    ({"problem": {"regularizer": "l1"}}, ["unknown key 'problem.regularizer'", "lam"]),
    ({"algorithm": {"clients_per_round": 100}}, ["clients_per_round", "<= 8", "100"]),
    ({"problem": {"support": 50}}, ["problem.support", "<= problem.dim (20)", "50"]),
    ({"problem": {"samples_per_client": [3, 4]}}, ["samples_per_client", "2 entries", "clients is 8"]),
    ({"problem": {"samples_per_client": 0}}, ["samples_per_client", ">= 1"]),
    ({"rounds": 0}, ["rounds", "greater than or equal to 1"]),
    ({"eval_every": "often"}, ["eval_every", "often"]),
    ({"backend": {"name": "gpu"}}, ["backend", "gpu"]),
    ({"colour": "red"}, ["unknown top-level key", "colour", "algorithm"]),
]


@pytest.mark.parametrize("change,words", BAD)
def test_bad_input_fails_early_with_a_clear_message(change, words):
    with pytest.raises(ConfigError) as err:
        fco_ray.run(config(**change))
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_bad_regularizer_name_is_reported():
    with pytest.raises(ValueError, match="allowed"):
        R.make("l3")


def test_missing_config_file():
    with pytest.raises(ConfigError, match="not found"):
        fco_ray.run("/nonexistent/run.yaml")


class Quadratic(Problem):
    """A user's problem: each client m has a target a_m; f_m(w) = 1/2 mean_i ||w - a_mi||^2."""

    def loss_and_grad(self, params, batch):
        diff = params["w"][:, None, :] - batch["a"]
        loss = 0.5 * np.einsum("cb,cbd->c", batch["weight"], diff**2)
        return loss, {"w": np.einsum("cb,cbd->cd", batch["weight"], diff)}

    def evaluate(self, params):
        return {"density": float(np.mean(np.abs(params["w"]) > 1e-4))}


def test_custom_problem_through_the_api():
    rng = np.random.default_rng(0)
    data = ClientData.from_lists([{"a": rng.normal(3.0, 1.0, size=(n, 4))} for n in (5, 9, 7)])
    shapes = {"w": (4,)}
    problem = Quadratic(train=data, val=None, shapes=shapes, psi=R.Blockwise({"w": R.L1(0.5)}, shapes))
    df = fco_ray.run({"algorithm": {"name": "feddualavg", "client_lr": 0.1, "clients_per_round": None,
                                    "batch_size": None}, "rounds": 50, "eval_every": 25},
                     problem=problem)  # at the optimum to 1e-15 by round 50 (a round costs ~10 ms)
    # optimum of mean_m 1/2||w - abar_m||^2 + 0.5||w||_1: soft-threshold of the mean of client means
    means = np.stack([data.arrays["a"][c, :n].mean(axis=0) for c, n in enumerate(data.sizes)])
    target = np.sign(means.mean(0)) * np.maximum(np.abs(means.mean(0)) - 0.5, 0)
    best = 0.5 * np.mean(np.sum((target - means) ** 2, axis=1)) + 0.5 * np.abs(target).sum()
    spread = 0.5 * np.mean([np.mean(np.sum((data.arrays["a"][c, :n] - means[c]) ** 2, axis=1))
                            for c, n in enumerate(data.sizes)])
    assert df["train_loss"].iloc[-1] == pytest.approx(best + spread, rel=1e-6)
    assert df.attrs["status"] == "finished"


def test_numerical_failure_is_divergence_not_a_crash():
    """A huge rate on the low-rank problem makes the SVD of the prox fail: status diverged."""
    cfg = {"problem": {"name": "lowrank", "clients": 6, "samples_per_client": 10, "dim": 6,
                       "rank": 2, "val_clients": 1},
           "algorithm": {"name": "fedmid", "client_lr": 1e3, "clients_per_round": 3},
           "rounds": 30, "eval_every": 1}
    df = fco_ray.run(cfg)
    assert df.attrs["status"] == "diverged"
    assert np.isfinite(df["train_loss"]).all()


def test_linalg_error_inside_a_round_ends_the_run_as_diverged():
    class Fragile(Quadratic):
        calls = 0

        def loss_and_grad(self, params, batch):
            Fragile.calls += 1
            if Fragile.calls > 12:
                raise np.linalg.LinAlgError("SVD did not converge")
            return super().loss_and_grad(params, batch)

    data = ClientData.from_lists([{"a": np.ones((3, 2))} for _ in range(2)])
    problem = Fragile(train=data, val=None, shapes={"w": (2,)},
                      psi=R.Blockwise({"w": R.L1(0.1)}, {"w": (2,)}))
    df = fco_ray.run({"algorithm": {"name": "fedmid", "client_lr": 0.1, "clients_per_round": None,
                                    "local_steps": 2}, "rounds": 20, "eval_every": 1}, problem=problem)
    assert df.attrs["status"] == "diverged"
    assert 1 < len(df) < 20


def test_return_model_gives_the_final_model_whose_metrics_are_the_last_row(tmp_path):
    from fco_ray.api import resolve
    from fco_ray.core.plan import build as make_problem

    df, model = fco_ray.run(config(), return_model=True)
    pd.testing.assert_frame_equal(df, fco_ray.run(config()))  # same rows either way
    assert set(model) == {"w", "b"} and model["w"].shape == (20,)
    # the model is what the last row was evaluated on: its metrics, recomputed, are that row
    problem = make_problem(resolve(config()))
    recomputed = problem.metrics(model)
    for k, v in recomputed.items():
        assert df[k].iloc[-1] == pytest.approx(v, rel=1e-12), k
    # np.savez / np.load without pickles round-trips it
    np.savez(tmp_path / "model.npz", **model)
    with np.load(tmp_path / "model.npz", allow_pickle=False) as saved:
        assert set(saved.files) == {"w", "b"}
        np.testing.assert_array_equal(saved["w"], model["w"])


def test_return_model_of_a_custom_problem_and_of_a_diverged_run():
    rng = np.random.default_rng(0)
    data = ClientData.from_lists([{"a": rng.normal(3.0, 1.0, size=(n, 4))} for n in (5, 9, 7)])
    shapes = {"w": (4,)}
    problem = Quadratic(train=data, val=None, shapes=shapes, psi=R.Blockwise({"w": R.L1(0.5)}, shapes))
    _, model = fco_ray.run({"algorithm": {"name": "feddualavg", "client_lr": 0.1, "clients_per_round": None,
                                          "batch_size": None}, "rounds": 50}, problem=problem,
                           return_model=True)  # 2e-15 from the optimum at round 50
    means = np.stack([data.arrays["a"][c, :n].mean(axis=0) for c, n in enumerate(data.sizes)])
    target = np.sign(means.mean(0)) * np.maximum(np.abs(means.mean(0)) - 0.5, 0)
    np.testing.assert_allclose(model["w"], target, atol=1e-6)  # the composite optimum
    df, model = fco_ray.run(config(algorithm={"client_lr": 5.0}, rounds=50, eval_every=1),
                            return_model=True)
    assert df.attrs["status"] == "diverged" and model is None
