"""Fused step-size groups of the SVRG family (fco_ray/algorithms/svrg.py with fco_ray.core.group):
the compiled group passes (kernels_sparse.*_group) against one call per member, and every
member of a fused run against its own run (rows, status, communication counts; to 1e-12
relative), with members that diverge mid-run, on the local backend and on Ray actors."""
import copy

import numpy as np
import pytest

import fco_ray
from fco_ray.algorithms import ALGORITHMS
from fco_ray.backends import LocalBackend
from fco_ray.core.group import Stacked as Fused
from fco_ray.ops.random import Key
from fco_ray.problems.nodes import LocalPasses
from fco_ray.problems.text import SparseTextLogReg

from tests.helpers import assert_same_run, run_fused, run_one


def make(name, **hp):
    cls = ALGORITHMS[name]
    return cls(cls.Hyper(name=name, **hp))


@pytest.mark.parametrize("case,members", [("fsvrg", 3), ("naive", 3), ("dane", 3), ("fsvrg", 11), ("naive", 4),
                                          ("dane", 9)])
def test_group_passes_equal_one_call_per_member(tiny, case, members):
    """One `node_pass_sum` / `node_gradient_sum` on (G, d) stacks = G calls, member by member
    (per-member w, g, h and, for DANE, eta and mu; G below, at and above the kernels'
    LANES); one member's numbers blow up to inf/nan and the others are untouched."""
    p, rng = copy.copy(tiny), np.random.default_rng(3)
    p.lam = 0.05  # the lazy closed forms matter
    rows = np.array([4, 0, 2, 5])
    key = Key(5, 2, rows + 100)
    d, k = p.train.dim, len(rows)
    w, g = rng.normal(size=(members, d)), 0.1 * rng.normal(size=(members, d))
    weights = rng.uniform(0.5, 2.0, k)
    h = rng.uniform(0.2, 1.5, (k, members))
    h[:, 1] = 1e6  # member 1 explodes
    h[:, -1] = rng.uniform(1e-4, 1e-3, k)  # small steps: the series cases of the catch-ups
    kwargs = {"fsvrg": {"scaled": True}, "naive": {"steps": rng.integers(1, 45, k)},
              "dane": {"passes": 3}}[case]
    eta, mu = rng.uniform(0.3, 1.0, members), rng.uniform(0.0, 0.3, members)
    extra = (lambda m: {"eta": eta[m], "mu": mu[m]}) if case == "dane" else (lambda m: {})
    group_extra = {"eta": eta, "mu": mu} if case == "dane" else {}
    with np.errstate(all="ignore"):
        got = p.node_pass_sum(rows, key, w, g, weights, LocalPasses(h=h, **kwargs, **group_extra))
        for m in range(members):
            want = p.node_pass_sum(rows, key, w[m], g[m], weights,
                                   LocalPasses(h=h[:, m].copy(), **kwargs, **extra(m)))
            if m != 1:
                np.testing.assert_allclose(got[m], want, rtol=1e-12, atol=1e-14 * np.abs(want).max())
                assert np.abs(want).max() > 1e-6
            else:
                assert not np.all(np.isfinite(want))
                np.testing.assert_array_equal(np.isfinite(got[m]), np.isfinite(want))
    grads = p.node_gradient_sum(rows, w, weights)
    for m in range(members):
        np.testing.assert_allclose(grads[m], p.node_gradient_sum(rows, w[m], weights), rtol=1e-12,
                                   atol=1e-15)


#: per method: step sizes (one or more diverging mid-run on `small`), other fixed settings
GROUPS = {
    "gd": ([{"client_lr": h} for h in (8.0, 64.0, 2000.0)], {}),
    "fsvrg": ([{"client_lr": h} for h in (30.0, 300.0, 600.0, 3.0)], {}),
    "fsvrg_naive": ([{"client_lr": h} for h in (0.3, 3.0, 3000.0)], {}),
    "dane": ([{"client_lr": 30.0, "eta": 1.0, "mu": 0.0}, {"client_lr": 30.0, "eta": 0.5, "mu": 0.1},
              {"client_lr": 1e5, "eta": 1.0, "mu": 0.0}], {"local_passes": 2}),
}
DIVERGED = {"gd": [2], "fsvrg": [2], "fsvrg_naive": [2], "dane": [2]}


assert_same = assert_same_run  # fused member vs its own run


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_fused_members_equal_their_own_runs(small, name):
    grid, fixed = GROUPS[name]
    members = [make(name, **point, **fixed) for point in grid]
    kwargs = {"rounds": 10, "eval_every": 1, "seed": 0, "divergence": 1e3}
    fused = run_fused(small, members, LocalBackend(small), **kwargs)
    for algorithm, result in zip(members, fused):
        assert_same(result, run_one(small, algorithm, LocalBackend(small), **kwargs))
    assert [i for i, r in enumerate(fused) if r.status == "diverged"] == DIVERGED[name]
    if name in ("gd", "fsvrg"):  # ended mid-run, the others went on
        assert 2 < len(fused[2].records) < len(fused[0].records) == 11


def test_fused_group_reads_the_data_once_per_exchange(small, monkeypatch):
    """The group's client work is one call per exchange for all members (not G calls, not
    G stacked rows per node), and CoCoA+ (no real-valued hyperparameter) does not fuse."""
    calls = []
    original = SparseTextLogReg.node_pass_sum

    def counted(self, rows, key, w, g, weights, local):
        calls.append(np.shape(w))
        return original(self, rows, key, w, g, weights, local)

    monkeypatch.setattr(SparseTextLogReg, "node_pass_sum", counted)
    members = [make("fsvrg", client_lr=h) for h in (3.0, 30.0, 300.0)]
    run_fused(small, members, LocalBackend(small), rounds=2, eval_every=1, seed=0)
    assert calls == [(3, small.train.dim)] * 2
    with pytest.raises(ValueError, match="cannot run fused"):
        Fused([make("cocoa_plus"), make("cocoa_plus")])


def test_run_grid_fuses_a_step_size_grid_and_equals_run():
    """`fco_ray.run_grid` over FSVRG's step size (one fused group, a member diverging) gives
    each configuration's own `fco_ray.run` rows and status."""
    config = {"problem": {"name": "sparse_text_logreg", "clients": 12, "min_samples": 10,
                          "max_samples": 200, "dim": 200, "words_per_doc": 8},
              "algorithm": {"name": "fsvrg"}, "rounds": 8, "eval_every": 1}
    grid = {"algorithm.client_lr": [30.0, 300.0, 1e5]}
    df = fco_ray.run_grid(config, grid)
    for lr, rows in df.groupby("algorithm.client_lr"):
        alone = fco_ray.run({**config, "algorithm": {"name": "fsvrg", "client_lr": lr}})
        assert set(rows["status"]) == {alone.attrs["status"]}
        assert list(rows["round"]) == list(alone["round"])
        for key in ("train_loss", "suboptimality", "test_error", "floats_up", "floats_down"):
            np.testing.assert_allclose(rows[key], alone[key], rtol=1e-12, err_msg=key)
    assert set(df.loc[df["algorithm.client_lr"] == 1e5, "status"]) == {"diverged"}


@pytest.mark.ray
def test_a_fused_step_size_group_on_ray_actors_equals_its_own_runs(small, ray_cluster):
    from fco_ray.backends.ray_backend import RayBackend

    kwargs = {"rounds": 6, "eval_every": 1, "seed": 0, "divergence": 1e3}
    backend = RayBackend(small, actors=2)
    try:
        for name in ("fsvrg", "dane", "gd"):
            grid, fixed = GROUPS[name]
            members = [make(name, **point, **fixed) for point in grid]
            on_ray = run_fused(small, members, backend, **kwargs)
            for algorithm, result in zip(members, on_ray):
                alone = run_one(small, algorithm, LocalBackend(small), **kwargs)
                assert result.status == alone.status
                assert [r["round"] for r in result.records] == [r["round"] for r in alone.records]
                for a, b in zip(result.records, alone.records):
                    for key in a:  # shards add their partial sums: summation order differs
                        np.testing.assert_allclose(a[key], b[key], rtol=1e-11, err_msg=key)
    finally:
        backend.close()
