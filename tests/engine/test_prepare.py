"""`core.plan.prepare` prepares ONE group: configurations that `plan.groups` would not put
together are refused, not run on the first one's problem."""
import pytest

from fco_ray.core.config import parse_run
from fco_ray.core.plan import groups, prepare

PROBLEM = {"name": "lasso", "clients": 10, "samples_per_client": 8, "dim": 6, "support": 2}


def config(problem=None, **algorithm):
    return parse_run({"problem": {**PROBLEM, **(problem or {})}, "rounds": 2, "eval_every": 1,
                      "algorithm": {"name": "fedmid", "client_lr": 0.01, **algorithm}})


def test_a_group_of_configurations_is_prepared_on_one_problem():
    configs = [config(client_lr=0.01), config(client_lr=0.02), config({"lam": 0.2})]
    assert groups(configs) == [[0, 1, 2]]
    prepared = prepare(configs)
    assert prepared.configs == configs and prepared.lams is not None


@pytest.mark.parametrize("other", [config({"samples_per_client": 9}), config(local_steps=3)])
def test_configurations_of_different_groups_are_refused(other):
    assert len(groups([config(), other])) == 2
    with pytest.raises(ValueError, match="must form one group"):
        prepare([config(), other])


def test_configurations_on_the_same_data_share_one_built_problem():
    """`data_key`: lam aside (it weighs psi alone) and the seed aside where `data_seed`
    fixes the data; `prepare_groups` builds such data once, each group with its own lam,
    and each configuration's rows equal its own run."""
    import numpy as np

    import fco_ray
    from fco_ray.core.plan import data_key, prepare_groups

    def seeded(seed, problem=None, **algorithm):
        cfg = config(problem, **algorithm)
        return cfg.model_copy(update={"seed": seed})

    fixed = {"data_seed": 7}
    assert data_key(seeded(0, fixed)) == data_key(seeded(1, fixed)) == data_key(seeded(1, {**fixed, "lam": 0.3}))
    assert data_key(seeded(0)) != data_key(seeded(1))  # the run's seed makes the data
    assert data_key(seeded(0, fixed)) != data_key(seeded(0, {**fixed, "samples_per_client": 9}))
    configs = [seeded(0, fixed), seeded(1, fixed), seeded(1, {**fixed, "lam": 0.3}, local_steps=3)]
    prepared = prepare_groups(configs)
    assert len(prepared) == 3  # seeds do not fuse on the NumPy engine; local_steps never
    data = [p.problem.train.arrays for p in prepared]
    assert all(d is data[0] for d in data)  # one build
    for p in prepared:
        for cfg, result in zip(p.configs, p.run()):
            alone = fco_ray.run(cfg)
            np.testing.assert_allclose([r["train_loss"] for r in result.records], alone["train_loss"],
                                       rtol=1e-12)
