"""A rule algorithm's `output` and `extra_outputs` on one configuration's state (what a callback
calls each round) run the compiled outputs its runs share (`fco_ray.rules.host.member_outputs`)
and equal the rule's own methods run op by op."""
import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="rules run on JAX")

from fco_ray.algorithms import ALGORITHMS  # noqa: E402
from fco_ray.core.config import parse_run  # noqa: E402
from fco_ray.ops.random import generator  # noqa: E402
from fco_ray.problems import build_problem  # noqa: E402
from fco_ray.rules.host import host  # noqa: E402

CASES = [("feddualavg", {"name": "lasso", "clients": 4, "dim": 10, "support": 3, "samples_per_client": 8,
                         "val_clients": 1, "lam": 0.3}),
         ("feddualex", {"name": "bilinear_l1", "n": 6, "m": 8, "clients": 6}),
         ("feddualex", {"name": "bilinear_nuclear", "n": 6, "m": 8, "p": 3, "rank": 2, "clients": 6})]


@pytest.mark.parametrize("name, problem", CASES, ids=[f"{a}-{p['name']}" for a, p in CASES])
def test_outputs_equal_the_rule_run_op_by_op(name, problem):
    cfg = parse_run({"problem": problem, "algorithm": {"name": name}})
    p = build_problem(cfg.problem, 0)
    algorithm = ALGORITHMS[name](cfg.algorithm)
    rng = np.random.default_rng(1)
    start = algorithm.server_init(p, p.init_params(generator(0, 0)))
    # a state away from the start, so that the prox and the ergodic means do something
    state = jax.tree_util.tree_map(lambda v: np.asarray(v) + rng.uniform(0.1, 1.0, np.shape(v)), start)
    rule_problem, hyper = algorithm._hyper(p)
    rule = algorithm.make_rule()
    want = host(rule.output(rule_problem, state, hyper))
    want_extra = host(rule.extra_outputs(rule_problem, state, hyper))
    got, got_extra = algorithm.output(p, state), algorithm.extra_outputs(p, state)
    assert got.keys() == want.keys() and got_extra.keys() == want_extra.keys()
    if name == "feddualavg":  # its output is a prox of z, not z itself
        assert not np.allclose(got["w"], state["z"]["w"])
    for block in want:
        np.testing.assert_allclose(got[block], want[block], rtol=1e-13, atol=1e-15, err_msg=block)
    for suffix, params in want_extra.items():
        for block in params:
            np.testing.assert_allclose(got_extra[suffix][block], params[block], rtol=1e-13, atol=1e-15,
                                       err_msg=f"{suffix} {block}")
    if name == "feddualex":
        assert want_extra  # the ergodic output is checked too
