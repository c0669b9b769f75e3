"""Small problems and plain per-client reference loops for the tests."""
from __future__ import annotations

import numpy as np

from fco_ray.problems.linear import make_lasso, make_lowrank
from fco_ray.random import Key


def small_lasso(lam=0.05, clients=8, samples=16, dim=20, support=5, seed=0):
    return make_lasso(seed=seed, lam=lam, clients=clients, samples_per_client=samples, dim=dim,
                      support=support, val_clients=2, bias="zero", correlation=0.5, noise=1.0,
                      shift=1.0)


def small_lowrank(lam=0.1, clients=6, samples=20, dim=5, rank=2, seed=0):
    return make_lowrank(seed=seed, lam=lam, clients=clients, samples_per_client=samples, dim=dim,
                        rank=rank, val_clients=2, noise=0.5, shift=1.0)


def one_client_grad(problem, params, cid, seed, rnd, step, batch_size):
    """The gradient of a single client, drawn with that client's own key."""
    stacked = {k: v[None] for k, v in params.items()}
    key = Key(seed, rnd, np.array([cid])).with_step(step)
    g = problem.grad(stacked, np.array([cid]), key, batch_size)
    return {k: v[0] for k, v in g.items()}


def assert_same_run(result, reference, rtol=1e-12):
    """Two RunResults agree: status, evaluated rounds, metric names and values (to rtol)."""
    assert result.status == reference.status
    assert [r["round"] for r in result.records] == [r["round"] for r in reference.records]
    for a, b in zip(result.records, reference.records):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=0, err_msg=k)
