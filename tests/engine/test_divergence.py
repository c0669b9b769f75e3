"""A run whose objective blows up ends `diverged` (RunConfig.divergence: a multiple of the
round-0 train_loss), not `finished` with a huge loss."""
import numpy as np
import pytest

import fco_ray
from fco_ray import ClientData, Problem
from fco_ray.core.config import parse_run
from fco_ray.ops import regularizers as R
from fco_ray.runtime.errors import ConfigError


class Quadratic(Problem):
    """F(w) = 1/2 ||w - a||^2: a gradient step of rate 2.5 multiplies w - a by -1.5, so the
    loss grows by exactly 2.25 per round (one client, one local step, full batch)."""

    def loss_and_grad(self, params, batch):
        diff = params["w"][:, None, :] - batch["a"]
        return (0.5 * np.einsum("cb,cbd->c", batch["weight"], diff**2),
                {"w": np.einsum("cb,cbd->cd", batch["weight"], diff)})


class QuadraticPhi(Quadratic):
    kinds = frozenset({"saddle"})  # its train_loss is no objective to compare with its start


def quadratic(cls=Quadratic):
    data = ClientData.from_lists([{"a": np.full((1, 3), 2.0)}])
    return cls(train=data, val=None, shapes={"w": (3,)}, psi=R.Blockwise({}, {"w": (3,)}))


def run(problem, **config):
    # FedMiD with psi = 0 is FedAvg, and it also fits a saddle problem
    return fco_ray.run({"algorithm": {"name": "fedmid", "client_lr": 2.5, "local_steps": 1,
                                      "batch_size": None, "clients_per_round": None},
                        "rounds": 20, "eval_every": 1, **config}, problem=problem)


def test_loss_above_the_multiple_of_its_start_ends_the_run_diverged():
    df = run(quadratic())  # default multiple 1e3: 2.25^8 = 657 <= 1e3 < 2.25^9 = 1478
    assert df.attrs["status"] == "diverged"
    assert list(df["round"]) == list(range(9))  # the rows within the bound, no more
    np.testing.assert_allclose(df["train_loss"] / df["train_loss"].iloc[0], 2.25 ** np.arange(9))
    df = run(quadratic(), divergence=10.0)  # 2.25^2 = 5.1 <= 10 < 11.4
    assert df.attrs["status"] == "diverged" and list(df["round"]) == [0, 1, 2]


def test_without_the_criterion_or_for_a_saddle_problem_the_run_goes_on():
    for df in (run(quadratic(), divergence=None), run(quadratic(QuadraticPhi))):
        assert df.attrs["status"] == "finished" and df["round"].iloc[-1] == 20
        assert df["train_loss"].iloc[-1] == pytest.approx(df["train_loss"].iloc[0] * 2.25**20)


def test_a_stable_run_is_not_cut():
    df = fco_ray.run({"problem": {"name": "lasso", "dim": 32, "support": 4, "clients": 8},
                      "algorithm": {"name": "feddualavg", "client_lr": 0.01, "clients_per_round": 4},
                      "rounds": 30, "eval_every": 10, "divergence": 1.5})
    assert df.attrs["status"] == "finished"


@pytest.mark.parametrize("value", [1.0, 0.5, -3, float("nan"), "often"])
def test_bad_divergence_names_the_key(value):
    with pytest.raises(ConfigError, match="divergence"):
        parse_run({"problem": {"name": "lasso"}, "algorithm": {"name": "fedavg"},
                   "divergence": value})
