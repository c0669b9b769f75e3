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
