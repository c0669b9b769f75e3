"""The bilinear operator's shared work (fco_ray/problems/saddle.py, BilinearSaddle.grad):
rows equal across clients run the matrix products once, the noise is drawn once per client
of a fused group; both give every row the numbers of its own client's operator call."""
import numpy as np
import pytest

import fco_ray.problems.saddle as saddle
from fco_ray.core.config import parse_run
from fco_ray.ops.random import NOISE2, Key
from fco_ray.problems import build_problem


def problem(kind="bilinear_l1", **kw):
    shape = {"n": 5, "m": 7} if kind == "bilinear_l1" else {"n": 5, "m": 6, "p": 3, "rank": 2}
    cfg = {"problem": {"name": kind, "clients": 4, "data_seed": 0, **shape, **kw},
           "algorithm": {"name": "feddualex"}}
    return build_problem(parse_run(cfg).problem, 0)


def alone(p, z, client, key):
    """The operator of one row as an unfused call of its client alone."""
    one = Key(key.seed, key.round, np.array([client]), key.step, key.stream)
    g = p.grad({b: v[None] for b, v in z.items()}, np.array([client]), one, None)
    return {b: v[0] for b, v in g.items()}


def fused_rows(p, rng, clients, group, equal):
    """C clients x G rows, client-major; `equal`: every client holds the same G rows (the
    broadcast points of a first local step)."""
    first = {b: rng.uniform(-0.05, 0.05, size=(group,) + s) for b, s in p.shapes.items()}
    if equal:
        return {b: np.tile(v, (clients,) + (1,) * (v.ndim - 1)) for b, v in first.items()}
    return {b: rng.uniform(-0.05, 0.05, size=(clients * group,) + s) for b, s in p.shapes.items()}


@pytest.mark.parametrize("kind", ["bilinear_l1", "bilinear_nuclear"])
@pytest.mark.parametrize("equal", [True, False])
@pytest.mark.parametrize("group", [1, 3])
def test_every_row_gets_its_own_clients_operator(kind, equal, group):
    p, rng, clients = problem(kind), np.random.default_rng(1), 4
    z = fused_rows(p, rng, clients, group, equal)
    ids = np.repeat(np.array([3, 0, 2, 1]), group)
    key = Key(7, 2, ids, members=group).with_step(1, NOISE2)
    got = p.grad(z, ids, key, None)
    for r, client in enumerate(ids):
        want = alone(p, {b: v[r] for b, v in z.items()}, client, key)
        for b in want:
            assert got[b].shape == (clients * group,) + p.shapes[b]
            np.testing.assert_allclose(got[b][r], want[b], rtol=1e-14, atol=1e-16)


def products_rows(monkeypatch):
    """The row counts of the matrix products A x of the calls that follow."""
    seen = []
    real = saddle._apply

    def spy(a, v):
        seen.append(len(v))
        return real(a, v)

    monkeypatch.setattr(saddle, "_apply", spy)
    return seen


@pytest.mark.parametrize("noise", [0.1, 0.0])
def test_rows_equal_across_clients_run_the_products_once(monkeypatch, noise):
    p, rng = problem(noise=noise), np.random.default_rng(2)
    seen = products_rows(monkeypatch)
    ids = np.repeat(np.arange(4), 3)
    same = fused_rows(p, rng, 4, 3, equal=True)
    g = p.grad(same, ids, Key(0, 0, ids, members=3), None)
    assert seen == [3]  # G rows, not C G
    g["x"][0] += 1.0  # the rows are the caller's own arrays, not views of one another
    assert g["x"][3, 0] != g["x"][0, 0]
    differ = fused_rows(p, rng, 4, 3, equal=False)
    p.grad(differ, ids, Key(0, 0, ids, members=3), None)
    assert seen == [3, 12]
    if noise == 0:  # without noise all clients' rows are the same operator values
        np.testing.assert_array_equal(g["y"][:3], g["y"][9:])
